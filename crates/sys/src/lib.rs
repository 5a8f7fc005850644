//! `kairos-sys`: every operating-system call Kairos makes, behind safe, documented wrappers.
//!
//! Layer 0. The mechanisms above it (rings, RCU, the real-time shell, ports, the lab) hold no
//! OS `unsafe` of their own: what the kernel is asked, and what it may refuse, is written once
//! here, with the reason each call is sound. Failures come back as values (`io::Error`, typed
//! errors, `None`), never panics, because whether a thread may be pinned or made real-time, or
//! a file read, depends on the machine and the user, and callers degrade and say so.
//!
//! Modules:
//! - [`child`]: child processes with an owner, ended with their process group and reaped on
//!   every path.
//! - [`cleanup`]: the one SIGINT/SIGTERM/SIGHUP handler: it runs the undo actions owners of
//!   system changes registered, then exits with 128 + the signal.
//! - [`clock`]: `CLOCK_MONOTONIC` and `CLOCK_REALTIME` in nanoseconds, spins and absolute
//!   sleeps to a deadline.
//! - [`fs`]: bounded reads of files given from outside (configurations, traces), with errors
//!   that name the file.
//! - [`host`]: the host's tuning for a dedicated core, read from `/proc` and `/sys` under a
//!   root (isolation, tick, RCU, idle states, watchdogs, IRQ affinity, RT throttling, cpufreq,
//!   SMT), and the few settings changed at run time ([`host::Tunable`]).
//! - [`irq_time`]: the time interrupt handlers took on a core in one thread's context between
//!   two instants, from the kernel's irq tracepoints (perf events on the core).
//! - [`machine_lock`]: an exclusive `flock` on a named file, for work two processes must not
//!   do at once (probing one core).
//! - [`memory`]: `mlockall`, heap trimming off, `/dev/cpu_dma_latency` held at 0.
//! - [`net`]: UDP bursts (`recvmmsg`/`sendmmsg` with kernel receive time stamps), socket
//!   options, `ppoll` on sockets, the kernel's per-socket drop count, memory-mapped
//!   `AF_PACKET` rings.
//! - [`netns`]: entering a network namespace (`setns`).
//! - [`pi_mutex`]: the priority-inheritance pthread mutex, with a guard that stays on its
//!   thread.
//! - [`proc`]: `/proc` readings: cores, kernel release, CPU model, steal time.
//! - [`sched_deadline`]: `SCHED_DEADLINE` reservations (`sched_setattr`).
//! - [`shm`]: memory shared between processes, a file under `/dev/shm` mapped by each side,
//!   unlinked by its creator.
//! - [`stoppable_thread`]: a thread its owner stops and joins on every path, whose panic is
//!   an error.
//! - [`thread`]: the calling thread: pinning, `SCHED_FIFO`, nice, thread id, CPU time,
//!   context switches.
//! - [`user`]: the effective user id (is this root?).

#![warn(missing_docs)]

pub mod bell;
pub mod child;
pub mod cleanup;
pub mod clock;
pub mod fs;
pub mod host;
pub mod irq_time;
pub mod machine_lock;
pub mod memory;
pub mod net;
pub mod netns;
pub mod pi_mutex;
pub mod proc;
pub mod sched_deadline;
pub mod shm;
pub mod stoppable_thread;
pub mod thread;
pub mod user;
