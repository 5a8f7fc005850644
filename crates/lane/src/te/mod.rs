//! Traffic engineering for the express lane: the network model, requests and tunnels, and the
//! two algorithms of the source's Appendix A.
//!
//! - [`units`]: time in integer picoseconds, checked conversions and transmission times, and
//!   the limits on what files, generators and flags may give.
//! - [`topology`]: nodes, links with (bandwidth, queue, minimum delay, maximum jitter); TOML in
//!   and out; [`generate`]: rack, leaf-spine, fat-tree.
//! - [`request`]: a request and the [`Resources`] granted (Listing 1's shape); requests TOML.
//! - [`tunnel`]: what the algorithms share: a [`Tunnel`] and its per-hop analysis ([`Hop`]),
//!   each link's [`LinkLoad`], and why a request is refused ([`Refusal`]).
//! - [`adj`]: X-ADJ, which sets a tunnel's period, minimum latency and jitter so that the bounds
//!   hold in every run of the formal model, with the fixes the validator showed were needed.
//! - [`opt`]: X-OPT, the greedy tree builder over the graph of links with room.
//! - [`alloc`]: the allocation: tunnels, per-link loads, admission (X-OPT, then the approximate
//!   validity check, then X-ADJ of every tunnel the new one affects), release.
//!
//! The modules are layered: `units`, `topology`, `request` and `generate`, `tunnel`, `adj` and
//! `opt`, `alloc`, each importing only modules listed before it (a test reads the `use` lines
//! and checks). None imports this one, which only declares and re-exports.

pub mod adj;
pub mod alloc;
pub mod generate;
pub mod opt;
pub mod request;
pub mod topology;
pub mod tunnel;
pub mod units;

pub use adj::AdjOptions;
pub use alloc::{Admission, Allocation, Change};
pub use request::{
    InvalidRequest, Request, RequestProblem, Resources, SUBLANES, requests_from_file, requests_from_toml,
};
pub use topology::{
    Link, LinkId, LinkSpec, LinkSpecError, MAX_FILE_BYTES, Node, NodeId, NodeKind, Topology, TopologyError,
};
pub use tunnel::{Entry, Hop, LinkLoad, Refusal, Tunnel, TunnelId};
pub use units::{MAX_BANDWIDTH_BPS, MAX_BYTES, MAX_TIME, MAX_TIME_NS, Picos, ns_to_ps, ps_to_ns, tx_time};
