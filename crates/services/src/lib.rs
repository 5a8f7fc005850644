//! `kairos-services`: the services the express lane exists for.
//!
//! - [`resp`]: the Redis protocol (RESP2) as a server speaks it: a zero-copy request parser that
//!   also takes inline commands, and the reply encoder.
//! - [`kv`]: the key-value store's commands and state machine, deterministic so that every
//!   replica applying the same log holds the same data.
//! - [`replica`]: Raft replication on the `raft` crate (etcd's Raft), driven tick by tick by a
//!   periodic loop: the wire codec its messages travel in, the storage it persists to, and the
//!   replica that follows the crate's Ready protocol.
//! - [`fd`]: the failure detector: heartbeats carrying a liveness counter, the alive table, and
//!   the peers it is measured against (phi accrual, SWIM).
//! - [`lincheck`]: a linearizability checker for the store's histories.
//! - [`frame`]: a message larger than one datagram or lane packet cut into fragments and put
//!   back together.
//! - [`peer`]: where a member is reached: a UDP address or a host of the express lane.
//! - [`lane_link`]: a member's messages and heartbeats on the express lane, as an application
//!   of its host's lane node.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
pub mod fd;
pub mod frame;
pub mod kv;
pub mod lane_link;
pub mod lincheck;
pub mod member;
pub mod peer;
pub mod replica;
pub mod resp;
pub mod sim;
