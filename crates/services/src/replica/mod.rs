//! Raft replication (being built).

pub mod wire;
