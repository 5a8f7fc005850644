//! A deterministic simulation of the replicated store: the sans-I/O replicas on a seeded
//! network with faults, and clients that record a history for the linearizability checker, or (the list-append
//! workload) for the strict-serializability check of [`list_append`].

pub mod check;
pub mod cluster;
pub mod list_append;
pub mod network;

pub use cluster::{
    FaultEvent, FaultKind, Micro, OpKind, SimConfig, SimOp, SimOutcome, Workload, lost_writes, run,
};
pub use network::Network;
