//! What the `kairos` command and the experiments start on a machine, apart from the
//! experiments themselves: the command runs these directly (`kairos kv cluster --lane`,
//! `kairos fd ...`) and the lab's experiments run on them, so they live below both.
//!
//! - [`lane`]: an express lane up on the lane testbed, a controller and a node per host in this
//!   process, for services to run on.
//! - [`fd_group`]: a failure detector's member group, `kairos fd member` processes on loopback,
//!   the testbed or the lane, with the failures it makes.
//!
//! Each owns what it starts and stops it on drop.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod fd_group;
pub mod lane;
