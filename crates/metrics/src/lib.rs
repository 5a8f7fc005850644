//! Honest measurement for Kairos: clocks, latency statistics and the machine-noise probe.
//!
//! Every figure Kairos reports passes through this crate, in this order:
//!
//! 1. [`clock`]: where time comes from. A [`Clock`] trait with a real monotonic clock (kernel
//!    `CLOCK_MONOTONIC`, the base absolute sleeps use), a TSC clock where the TSC is stable, and a
//!    [`VirtualClock`] that simulators advance by hand. [`clock::read_cost_ns`] measures what a read
//!    costs, so a report can say how much of a figure is the ruler.
//! 2. [`latency`]: HDR-histogram recorders and the [`LatencySummary`] every experiment prints
//!    (min, mean, stddev, p50, p99, p99.9, p99.99, max), in JSON and CSV.
//! 3. [`noise`]: the [`NoiseProbe`]. On a shared virtual machine a spinning thread sees gaps of
//!    milliseconds whatever the system under test does; the probe measures them before, during and
//!    after a run, with the kernel's steal time, so a reader can tell which spikes the machine made.
//!    The [`stall`] watch times the stalls of one core that even a `SCHED_FIFO` 99 thread suffers,
//!    so a deadline miss can be checked against them. The [`core_probe`] measures one core for
//!    the host doctor: spin gaps beside the interrupts, softirqs, preemptions and steal that
//!    caused them, and wake-up lateness with and without idle states.
//! 4. [`aoi`]: age of information: the exact sawtooth integral of a monitor's age, its peaks, and
//!    a table of per-user age processes.
//!
//! The system calls the measurements make (pinning, `SCHED_FIFO`, absolute sleeps, thread CPU
//! time, `/proc` readings) are `kairos-sys`'s.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod aoi;
pub mod clock;
pub mod core_probe;
pub mod latency;
pub mod noise;
pub mod stall;

pub use aoi::{AgeProcess, AgeSummary, AgeTable, AgeTableSummary};
pub use clock::{Clock, MonotonicClock, TscClock, VirtualClock};
pub use core_probe::{CoreProbe, CoreProbeConfig, SourceCount, probe_core};
pub use latency::{LatencyRecorder, LatencySummary};
pub use noise::{CoreNoise, DuringNoise, NoiseConfig, NoiseProbe, NoiseReport, Sampler};
pub use stall::{Stall, StallReport, StallWatch, StallWatchConfig};
