//! A QSBR read-copy-update domain whose reclamation never stalls a realtime reader.
//!
//! Run-to-completion packet loops read shared state (a FIB, a configuration) millions of times a
//! second and can announce once per burst that they hold no reference: a *quiescent state*. That
//! is quiescent-state-based reclamation (QSBR), the model of DPDK's `rte_rcu_qsbr` and liburcu's
//! QSBR flavour: reads cost a plain load, and writers free old versions once every reader has
//! passed a quiescent state (a *grace period*).
//!
//! The hard part is not the grace period but who pays for freeing. Sarma and McKenney (USENIX
//! 2004, the source document of this crate) measured 1,660 callbacks run at the end of one grace
//! period delaying a realtime task by 711 us, and proposed three cures: offload to a preemptible
//! daemon, direct invocation by the writer, and throttling. Rust's reclamation crates still make
//! readers pay (crossbeam-epoch frees up to 512 objects inside a reader's `pin`; seize and
//! arc-swap free on whichever thread lets go last) and offer neither an offload thread nor a time
//! budget. Here every domain picks a [`ReclaimPolicy`]: `Inline` (the problem, kept as the
//! baseline), `Throttle` (count and time budget per call), `Offload` (a reclaimer thread),
//! `Direct` (the writer, after a grace period) and `Adaptive` (a budget that follows the load and
//! spills to the reclaimer thread).
//!
//! # Tour
//! - [`Domain`]: grace periods (blocking [`Domain::synchronize`], polled [`Domain::start`] /
//!   [`Domain::poll`]), [`Domain::defer`] and friends, the bounded backlog ([`Domain::pending`],
//!   `high_watermark`, [`OnFull`]) and statistics.
//! - [`ReaderHandle`]: [`ReaderHandle::quiescent`] once per loop iteration (one load, and one
//!   store only when the grace-period counter moved), [`ReaderHandle::offline`] around blocking.
//! - [`RcuCell`]: a value read with one load and replaced by writers.
//! - [`StallConfig`]: a watchdog that names readers that stop passing quiescent states.
//! - `peer::EpochCell` (feature `peers`): the same job through `crossbeam-epoch`, for experiments to measure
//!   beside [`RcuCell`].
//!
//! # Example
//! ```
//! use kairos_rcu::{Domain, RcuCell, ReclaimPolicy};
//!
//! let domain = Domain::with_policy(ReclaimPolicy::Offload).unwrap();
//! let route = RcuCell::new(&domain, String::from("eth0"));
//! let mut reader = domain.register("packet-loop").unwrap();
//!
//! assert_eq!(route.read(&reader), "eth0");
//! route.replace(String::from("eth1")).unwrap(); // the old value is freed after a grace period
//! reader.quiescent();
//! assert_eq!(route.read(&reader), "eth1");
//! ```
//!
//! # Correctness
//! The protocol is described in the `grace` module (grace periods) and the `backlog` module
//! (callbacks). Loom models (`tests/loom.rs`, run with
//! `RUSTFLAGS="--cfg loom"`) check that a reader holding a reference across a replace never sees
//! it freed; `tests/stress.rs` poisons every retired object before freeing it while many readers
//! check they never see poison, and runs under valgrind in CI.

#![warn(missing_docs)]
#![cfg_attr(loom, allow(dead_code))]

mod backlog;
mod callback;
mod cell;
mod domain;
mod error;
mod grace;
#[cfg(all(feature = "peers", not(loom)))]
pub mod peer;
mod policy;
mod reader;
mod ready;
#[cfg(not(loom))]
mod reclaimer;
mod stall;
mod stats;
mod sync;

pub use cell::RcuCell;
pub use domain::{Domain, DomainConfig, ThreadInit};
pub use error::{ConfigError, DeferError, Full, ReaderOnline, RegisterError};
pub use grace::Ticket;
pub use policy::{OnFull, ReclaimPolicy};
pub use reader::{Offline, ReaderHandle};
pub use stall::{OnStall, StallConfig, StallDetector, StallReport};
pub use stats::DomainStats;
