//! `kairos-lane`: the brain of the express lane.
//!
//! - [`te`]: the network model, requests and tunnels, X-ADJ and X-OPT, and the allocation that
//!   admits and releases tunnels.
//! - [`controller`]: the controller's operations as a sans-I/O state machine (inputs and `now`
//!   in; notices and the next deadline out) with an event log.
//! - [`validator`]: a packet-level discrete-event simulation of the formal model of the source's
//!   Appendix A.1 that checks every packet of every admitted tunnel against its bounds.
//! - [`service`]: the controller as a network service for node agents: authenticated frames,
//!   a journal replayed after a crash, notices pushed to the nodes concerned, metrics.
//! - [`doctor`]: the host doctor: whether the lane's core is isolated as the source's section
//!   4.3 asks (isolation, tick, RCU callbacks, idle states, watchdogs, IRQ affinity, RT
//!   throttling, frequency, steal, SMT), what each missing part costs, and the run-time fixes
//!   with their exact undo.
//! - [`plan`]: what `kairos lane plan` computes: requests admitted in order, their final bounds,
//!   optionally validated; data only (the command line renders it).
//! - [`testbed`]: the lane's topology of the testbed network that `kairos_io` makes.
//! - [`node`]: the endhost; for now the lane's packet format ([`node::chunk`]): small messages
//!   packed into chunks that each carry their own CRC.
//!
//! # Files
//! Topology TOML: `[[node]]` tables with `name` and `kind` (`host` or `switch`); `[[link]]` tables
//! with `from`, `to`, `bandwidth_bps`, `queue_bytes`, `min_delay_ns`, `max_jitter_ns` and
//! optionally `bidirectional = true`. Requests TOML: `[[request]]` tables with `name`, `sender`,
//! `receivers` (a list), `packet_bytes`, `period_ns` and optionally `sublane` (0 is the highest
//! priority). Files are read up to [`te::MAX_FILE_BYTES`] (1 MiB).
//!
//! # Limits
//! Times are 64-bit picoseconds ([`te::Picos`]). A file's period, delay or jitter is at most
//! [`te::MAX_TIME_NS`] (one hour), sizes at most [`te::MAX_BYTES`] (1 TiB), bandwidths at most
//! [`te::MAX_BANDWIDTH_BPS`], and a link's full queue must be sent within 64-bit picoseconds;
//! anything past a limit is refused when the file is read, with its line. The analyses add these up with checked
//! arithmetic: a sum that still would not fit refuses the request ([`te::Refusal::Overflow`]),
//! never admits it with a wrapped bound.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod controller;
pub mod doctor;
pub mod node;
pub mod plan;
pub mod service;
pub mod te;
pub mod testbed;
pub mod validator;
