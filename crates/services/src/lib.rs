//! `kairos-services`: what the services on the express lane share, below them.
//!
//! Two products run on the lane: the failure detector (`kairos-fd`, `kairos fd`) and the
//! replicated key-value store (`kairos-kv`, `kairos kv`), whose members run the detector too.
//! Both put their messages in the same codec and, on the lane, reach their peers the same way;
//! that is this crate, so that each product's crate depends on it and the store on the
//! detector, with no cycle:
//!
//! - [`codec`]: the byte codec everything on a wire or in a file is written in: varints and
//!   length-checked byte strings.
//! - [`frame`]: a message larger than one datagram or lane packet cut into fragments and put
//!   back together (the store's Raft messages; the lane link sizes its fragments by it).
//! - [`peer`]: where a member is reached: a UDP address or a host of the express lane.
//! - [`lane_link`]: a member's messages and heartbeats on the express lane, as an application
//!   of its host's lane node.
//! - [`stream`]: messages read off a byte stream by a pure parser (the RESP and HTTP clients).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
pub mod frame;
pub mod lane_link;
pub mod peer;
pub mod seal;
pub mod stream;
