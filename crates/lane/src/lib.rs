//! `kairos-lane`: the brain of the express lane.
//!
//! - [`te`], [`validator`], [`plan`]: the traffic-engineering analysis (the network model,
//!   requests and tunnels, X-ADJ and X-OPT, the allocation, the packet-level validator, the plan
//!   of `kairos lane plan`), re-exported from `kairos-te`, whose crate documentation also
//!   describes the topology and request files and the limits on their values.
//! - [`controller`]: the controller's operations as a sans-I/O state machine (inputs and `now`
//!   in; notices and the next deadline out) with an event log.
//! - [`service`]: the controller as a network service for node agents: authenticated frames,
//!   a journal replayed after a crash, notices pushed to the nodes concerned, metrics.
//! - [`testbed`]: the lane's topology of the testbed network that `kairos_io` makes.
//! - [`node`]: the endhost; for now the lane's packet format ([`node::chunk`]): small messages
//!   packed into chunks that each carry their own CRC.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod controller;
pub mod node;
pub mod service;
pub mod testbed;

/// The traffic-engineering analysis: `kairos-te`, under the path it had in this crate.
pub use kairos_te as te;
pub use kairos_te::{plan, validator};
