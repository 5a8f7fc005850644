//! A deterministic simulation of the replicated store: the sans-I/O replicas on a seeded
//! network with faults, and clients that record a history for the linearizability checker.

pub mod check;
pub mod cluster;
pub mod network;

pub use cluster::{FaultEvent, FaultKind, OpKind, SimConfig, SimOp, SimOutcome, lost_writes, run};
pub use network::Network;
