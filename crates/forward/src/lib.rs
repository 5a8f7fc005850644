//! The forwarding data plane of the lab (the source's sections IV-V): the pieces a forwarding
//! experiment is built from, with no experiment in them.
//!
//! - [`packet`]: the experiment's packet and its 60-byte wire form (validated, checksummed),
//!   the [`kairos_io::Message`] every port of the experiment carries.
//! - [`trace`]: the workload: Zipf-popular users, control/data coin flips, saved and reloaded.
//! - [`source`]: a token-bucket sender and the receiver that measures every user's age, on one
//!   thread, over any [`kairos_io::Port`].
//! - [`forwarder`]: the system under test: RX split into control and data rings, a control
//!   thread (or inline control) writing the FIB, a data thread reading it, stamping and sending.
//! - [`rtc`]: the same work run to completion, burst by burst, on one thread.
//! - [`config`]: the forwarder's knobs, chosen by the caller.
//!
//! Layer 2, above `fib`, `io`, `ring` and `metrics`. The lab (`kairos-lab`'s `forward` and
//! `sweep`) wires these to ports, runs them and reports.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod forwarder;
pub mod packet;
pub mod rtc;
pub mod source;
pub mod trace;

pub use config::{ConfigError, ControlMode, Flush, ForwarderConfig, OfflineCore, RingPolicy, Threading};
pub use packet::{DecodeError, Kind, Packet, WIRE_LEN};
