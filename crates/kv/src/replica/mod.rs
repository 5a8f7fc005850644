//! Raft replication: the replica (Raft, its log, the store), its log's storage, its wire
//! format, and thrifty replication's policy.

pub mod core;
pub mod retire;
pub mod storage;
pub mod thrift;
pub mod wire;

pub use self::core::{
    Broken, MembershipEvent, ReadMode, Replica, ReplicaConfig, ReplicaError, ReplicaStats, Ticket,
};
pub use storage::{Disk, FileDisk, LogStore, MemDisk, Sync};
