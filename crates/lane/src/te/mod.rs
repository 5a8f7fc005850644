//! Traffic engineering for the express lane: the network model, requests and tunnels, and the
//! two algorithms of the source's Appendix A.
//!
//! - [`topology`]: nodes, links with (bandwidth, queue, minimum delay, maximum jitter); TOML in
//!   and out; [`generate`]: rack, leaf-spine, fat-tree.
//! - [`request`]: a request and the [`Resources`] granted (Listing 1's shape); requests TOML.
//! - [`adj`]: X-ADJ, which sets a tunnel's period, minimum latency and jitter so that the bounds
//!   hold in every run of the formal model, with the fixes the validator showed were needed.
//! - [`opt`]: X-OPT, the greedy tree builder over the graph of links with room.
//! - [`alloc`]: the allocation: tunnels, per-link loads, admission (X-OPT, then the approximate
//!   validity check, then X-ADJ of every tunnel the new one affects), release.

pub mod adj;
pub mod alloc;
pub mod generate;
pub mod opt;
pub mod request;
pub mod topology;

pub use adj::{AdjOptions, Hop};
pub use alloc::{Admission, Allocation, Change, Refusal, Tunnel, TunnelId};
pub use request::{Request, Resources, SUBLANES, requests_from_toml};
pub use topology::{Link, LinkId, LinkSpec, Node, NodeId, NodeKind, Topology, TopologyError};

/// Time in picoseconds: integer, so the analysis and the validator agree exactly.
pub type Picos = u64;

pub fn ns_to_ps(ns: f64) -> Picos {
    (ns * 1e3).round().max(0.0) as Picos
}

pub fn ps_to_ns(ps: Picos) -> f64 {
    ps as f64 / 1e3
}

/// Time to send `bytes` at `bps`, rounded up to a picosecond.
pub fn tx_time(bytes: u64, bps: u64) -> Picos {
    let bits = bytes as u128 * 8 * 1_000_000_000_000;
    bits.div_ceil(bps.max(1) as u128) as Picos
}
