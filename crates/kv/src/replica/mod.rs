//! Raft replication (being built).

pub mod core;
pub mod storage;
pub mod wire;

pub use self::core::{
    Broken, MembershipEvent, ReadMode, Replica, ReplicaConfig, ReplicaError, ReplicaStats, Ticket,
};
pub use storage::{Disk, FileDisk, LogStore, MemDisk, Sync};
