//! `kairos-te`: traffic engineering for the express lane, with no I/O but the reading of its two
//! files: the network model, requests and tunnels, the two algorithms of the source's Appendix A,
//! the allocation that admits and releases tunnels, a packet-level validator of the bounds it
//! announces, and the plan of a file of requests. The lane's controller, its service and its
//! nodes (`kairos-lane`) are built on it; X-ADJ admission needs only this crate.
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
//! - [`validator`]: a packet-level discrete-event simulation of the formal model of the source's
//!   Appendix A.1 that checks every packet of every admitted tunnel against its bounds.
//! - [`plan`]: what `kairos lane plan` computes: requests admitted in order, their final bounds,
//!   optionally validated; data only (the command line renders it).
//!
//! The modules are layered: `units`, `topology`, `request` and `generate`, `tunnel`, `adj` and
//! `opt`, `alloc`, `validator`, `plan`, each importing only modules listed before it (a test
//! reads the `use` lines and checks). None imports this root, which only declares and
//! re-exports.
//!
//! # Files
//! Topology TOML: `[[node]]` tables with `name` and `kind` (`host` or `switch`); `[[link]]` tables
//! with `from`, `to`, `bandwidth_bps`, `queue_bytes`, `min_delay_ns`, `max_jitter_ns` and
//! optionally `bidirectional = true`; optionally, before them, `software_links = true` for links
//! that hand a lone packet on at once (veths), whose minimum latency leaves out transmission. Requests TOML: `[[request]]` tables with `name`, `sender`,
//! `receivers` (a list), `packet_bytes`, `period_ns` and optionally `sublane` (0 is the highest
//! priority). Files are read up to [`MAX_FILE_BYTES`] (1 MiB).
//!
//! # Limits
//! Times are 64-bit picoseconds ([`Picos`]). A file's period, delay or jitter is at most
//! [`MAX_TIME_NS`] (one hour), sizes at most [`MAX_BYTES`] (1 TiB), bandwidths at most
//! [`MAX_BANDWIDTH_BPS`], and a link's full queue must be sent within 64-bit picoseconds;
//! anything past a limit is refused when the file is read, with its line. The analyses add these
//! up with checked arithmetic: a sum that still would not fit refuses the request
//! ([`Refusal::Overflow`]), never admits it with a wrapped bound.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod adj;
pub mod alloc;
pub mod generate;
pub mod opt;
pub mod plan;
pub mod request;
pub mod topology;
pub mod tunnel;
pub mod units;
pub mod validator;

pub use adj::AdjOptions;
pub use alloc::{Admission, Allocation, Change};
pub use request::{
    HostDelay, InvalidRequest, Request, RequestProblem, Resources, SUBLANES, requests_from_file,
    requests_from_toml,
};
pub use topology::{
    Link, LinkId, LinkSpec, LinkSpecError, MAX_FILE_BYTES, Node, NodeId, NodeKind, Topology, TopologyError,
};
pub use tunnel::{Entry, Hop, LinkLoad, Refusal, Tunnel, TunnelId};
pub use units::{MAX_BANDWIDTH_BPS, MAX_BYTES, MAX_TIME, MAX_TIME_NS, Picos, ns_to_ps, ps_to_ns, tx_time};
