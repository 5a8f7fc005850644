//! `kairos-rtu`: real-time upcalls: periodic protocol handlers (period T, batch B, iteration b)
//! admitted by exact response-time analysis and scheduled rate-monotonic with delayed
//! preemption (RMDP), after the source's RTU facility.
//!
//! - [`analysis`]: admission control: response-time analysis for fixed priorities with
//!   deferred preemption over the whole level-i busy period, with blocking; the Liu-Layland
//!   bound beside it.
//! - [`policy`]: the RMDP policy as a sans-I/O state machine (releases, completions and `now`
//!   in; the next dispatch or wake-up out).
//! - [`file`](mod@file): the handler file of `kairos rtu admit`.
//! - [`shell`]: the real-time shell: a pinned thread, `SCHED_FIFO` when permitted, absolute
//!   sleeps with a short final spin, overrun detection, an abort flag for clean shutdown.
//! - [`sim`]: the policy on a virtual clock, to check the analysis against the schedule.
//! - [`inbox`](mod@inbox): the queue between an I/O thread and a handler: SPSC rings of buffer indices
//!   over a fixed buffer pool.
//! - [`io`]: the I/O thread that reads UDP sockets into handlers' inboxes.

#![warn(missing_docs)]
// Only the inbox (and the atomics it is modelled with) needs `unsafe`: its buffers are shared
// between the I/O thread and a handler, ownership following the index.
#![deny(unsafe_code)]

pub mod analysis;
pub mod file;
#[allow(unsafe_code)]
pub mod inbox;
#[cfg(not(loom))]
pub mod io;
pub mod policy;
pub mod shell;
pub mod sim;
#[allow(unsafe_code)]
mod sync;

pub use analysis::{Analysis, AnalysisError, HandlerAnalysis, HandlerSpec, Unbounded, analyse};
pub use file::{HandlerFileError, handlers_from_toml};
pub use inbox::{Inbox, Ingress, inbox};
pub use policy::{Decision, Policy};
pub use shell::{Context, Handler, Running, Scheduler, ShellConfig};
