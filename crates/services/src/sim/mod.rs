//! A deterministic simulation of a replicated store (being built).

pub mod network;
