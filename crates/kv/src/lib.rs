//! `kairos-kv`: the replicated key-value store, a Redis-compatible store replicated by Raft.
//!
//! - [`resp`]: the Redis protocol (RESP2) as a server speaks it: a zero-copy request parser that
//!   also takes inline commands, and the reply encoder; and the workspace's one RESP client.
//! - [`kv`]: the key-value store's commands and state machine, deterministic so that every
//!   replica applying the same log holds the same data.
//! - [`replica`]: Raft replication on the `raft` crate (etcd's Raft), driven tick by tick by a
//!   periodic loop: the wire codec its messages travel in, the storage it persists to, and the
//!   replica that follows the crate's Ready protocol.
//! - [`member`]: a member of the store as a process: RESP over TCP, Raft over UDP or on the
//!   express lane, one loop driven by events and deadlines, and its failure detector
//!   ([`member::watch`], on [`kairos_fd`]'s core and heartbeats).
//! - [`sim`]: a deterministic simulation of a cluster of replicas under faults, with clients
//!   that record a history, judged by [`kairos_lincheck`], the linearizability checker.
//!
//! Everything here exists for the store. The failure detector is a product of its own
//! ([`kairos_fd`]), which the store uses and which knows nothing of the store; what the two
//! share (the byte codec, Raft's fragments, the lane link and a member's address) is
//! [`kairos_services`]', below both.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod kv;
pub mod member;
pub mod replica;
pub mod resp;
pub mod sim;
