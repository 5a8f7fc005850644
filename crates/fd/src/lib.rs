//! `kairos-fd`: the failure detector (`kairos fd`): which members of a group are alive, to the
//! microsecond, with the alive table in memory the applications read without a system call.
//!
//! # Role
//!
//! Every member runs a node loop that sends a heartbeat to every other member each period `T`
//! (100 us by default) and keeps an alive table of the others. A heartbeat carries the
//! member's *liveness counter*, which its application bumps at least every `T/3`
//! ([`table::AliveTable::bump`], one atomic add in shared memory), so a member whose host is up
//! but whose application hangs is detected too, not only a dead host or a cut link.
//!
//! # Layers, bottom up
//!
//! - [`wire`]: the heartbeat's bytes (and the SWIM peer's, on the same socket), in
//!   [`kairos_services::codec`]; never panics on any input.
//! - [`detector`]: the sans-I/O core: the alive table and the rule: a member is suspected when
//!   no heartbeat with a *new* counter came within `T + Lambda`, Lambda the threshold. Time is
//!   passed in (`now_ns`); no clock, no socket.
//! - [`table`]: the alive table as 64-bit words in shared memory (a sequence lock per row), the
//!   application's liveness counter beside it.
//! - [`phi`] and [`swim`]: the peers it is measured against, fed the same heartbeats in the same
//!   run: the phi accrual detector (`phi-accrual-failure-detector`, Akka's defaults and tuned
//!   to the period) and SWIM (`foca`, its LAN defaults and an aggressive setting), driven by the
//!   same loop over the same socket.
//! - [`held`]: a member's own stall watch: the stretches its threads were due and kept from
//!   their work (a late wake-up, a pass off the CPU, a pass in the kernel's calls), which the
//!   accuracy experiment sets false suspicions against.
//! - [`member`]: the thin shell: the transport, the periodic loop (absolute sleeps to the
//!   next deadline, pinned and `SCHED_FIFO` where permitted), the demonstration application that
//!   bumps the counter, and the record of every suspicion for the accuracy experiment.
//!
//! # Transport
//!
//! [`transport`]: heartbeats go by UDP unicast to each other member, from one socket per
//! member (`members - 1` sends a heartbeat); or, with the members on lane hosts, on the
//! express lane's multicast tunnel from each member's host to the others' (one packet to all,
//! through the host's lane node, no system call), the loop's rounds phased a little before
//! the node's releases. The stamps are the kernel's either way: at the member's socket, or at
//! the receiving host's lane node.
//!
//! # Contract
//!
//! The core decides from heartbeats' receive time stamps (the kernel's, where the socket gives
//! them), so the loop may read its socket late without moving a verdict; a suspicion is
//! *noticed* at the loop's first wake-up at or after the deadline, and the loop sleeps to its
//! next period or the table's next deadline, whichever comes first. Detection time after a
//! crash is therefore at most `T + Lambda` after the last heartbeat plus the loop's wake-up
//! latency; after a hang, at most the application's bump period more.
//!
//! # Source
//!
//! X-Lane's X-FD (heartbeats on the express lane, a threshold of missed periods; ASGARD's
//! `update_aliveness_states`), G4 of the lane research notes, and Chen, Toueg and Aguilera's
//! quality-of-service metrics for failure detectors.
//!
//! # Where it stands
//!
//! The detector is a product of its own (`kairos fd`, its experiments in `kairos-lab`), and the
//! replicated store (`kairos-kv`) runs it inside each member: the store's watch uses this
//! crate's core and its heartbeat's replica kind, so the store depends on the detector, never
//! the other way round. What both use (the byte codec, the lane link, a member's address) is
//! [`kairos_services`]', below both.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod detector;
pub mod held;
pub mod member;
pub mod phi;
pub mod swim;
pub mod table;
pub mod transport;
pub mod wire;

pub use detector::{Detector, DetectorConfig, Entry, Event, Heard, Verdict};
pub use table::{AliveTable, Row, TableHeader};
pub use wire::Heartbeat;

/// The default heartbeat period, ns (100 us).
pub const DEFAULT_PERIOD_NS: u64 = 100_000;
