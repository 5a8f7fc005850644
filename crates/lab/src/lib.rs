//! The Kairos lab: experiments that reproduce the source documents and measure the fixes.
//!
//! Two parts:
//! - [`harness`]: what every experiment shares: the `Experiment` trait and its runner (a plan
//!   checked before anything starts, a results directory made before measuring, progress, the
//!   summary), what the figures were measured on ([`harness::machine`]), results directories
//!   ([`harness::output`]), plots, text tables, and background load.
//! - [`peers`]: the programs measured beside Kairos (`dpdk-testpmd`, `cyclictest`, Redis, etcd,
//!   `sockperf`, and the plain UDP rows that stand for a user's own program), started and
//!   stopped by the lab.
//! - [`experiments`]: one module an experiment, each a config with `quick` and full presets and
//!   a `run` returning a summary with stable field names, written to
//!   `results/<experiment>/<run-id>/`.
//!
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod experiments;
pub mod harness;
pub mod peers;
