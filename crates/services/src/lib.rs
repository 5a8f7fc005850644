//! `kairos-services`: what the services on the express lane share, and the failure detector.
//!
//! - [`codec`]: the byte codec everything on a wire or in a file is written in: varints and
//!   length-checked byte strings.
//! - [`frame`]: a message larger than one datagram or lane packet cut into fragments and put
//!   back together.
//! - [`peer`]: where a member is reached: a UDP address or a host of the express lane.
//! - [`lane_link`]: a member's messages and heartbeats on the express lane, as an application
//!   of its host's lane node.
//! - [`fd`]: the failure detector: heartbeats carrying a liveness counter, the alive table, and
//!   the peers it is measured against (phi accrual, SWIM).
//!
//! The replicated store is `kairos-kv`, above this crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
pub mod fd;
pub mod frame;
pub mod lane_link;
pub mod peer;
