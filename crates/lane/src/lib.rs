//! `kairos-lane`: the brain of the express lane.
//!
//! - [`te`]: the network model, requests and tunnels, X-ADJ and X-OPT, and the allocation that
//!   admits and releases tunnels.
//! - [`controller`]: the controller's operations as a sans-I/O state machine (inputs and `now`
//!   in; notices and the next deadline out) with an event log.
//! - [`validator`]: a packet-level discrete-event simulation of the formal model of the source's
//!   Appendix A.1 that checks every packet of every admitted tunnel against its bounds.
//!
//! # Files
//! Topology TOML: `[[node]]` tables with `name` and `kind` (`host` or `switch`); `[[link]]` tables
//! with `from`, `to`, `bandwidth_bps`, `queue_bytes`, `min_delay_ns`, `max_jitter_ns` and
//! optionally `bidirectional = true`. Requests TOML: `[[request]]` tables with `name`, `sender`,
//! `receivers` (a list), `packet_bytes`, `period_ns` and optionally `sublane` (0 is the highest
//! priority).

pub mod controller;
pub mod plan;
pub mod te;
pub mod validator;
