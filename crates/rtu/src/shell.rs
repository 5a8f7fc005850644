//! The real-time shell: runs a [`Scheduler`]'s handlers on one pinned thread under the RMDP
//! [`Policy`], `SCHED_FIFO` when permitted (the report says when it was not).
//!
//! Between releases the thread sleeps with an absolute-time sleep until a few microseconds
//! (`spin_ns`) before the next one, then spins to it: it never spins for long, since the kernel
//! throttles a real-time thread that never sleeps (95% of each second here). Each iteration's
//! CPU time (`CLOCK_THREAD_CPUTIME_ID`: one read a dispatch while iterations follow each other,
//! two after an idle stretch) is handed to
//! [`Policy::account`], which detects and demotes overrunning handlers. CPU time, not wall time:
//! a handler preempted by a higher-priority thread (a stall watch, a kernel thread) or whose vCPU
//! was stolen did not overrun; judged on wall time, noise alone demoted innocent handlers in
//! 20 s runs on this virtual machine, which then missed. An interrupt's time is still charged to
//! the task it interrupts unless the kernel accounts IRQ time apart
//! (`CONFIG_IRQ_TIME_ACCOUNTING`), which is why demotion is judged per job (see `policy`).
//!
//! Handlers of one scheduler share a state `S` that needs no lock: the scheduler owns it and
//! lends `&mut S` to one handler at a time, on its one thread, so the borrow checker proves
//! what the source got from cooperative scheduling. Stopping raises an abort flag that every
//! handler sees in its [`Context`]; each handler's [`Handler::shutdown`] then runs on the same
//! thread before the state is handed back.

use kairos_sys::clock::{monotonic_ns, sleep_until_ns};
use kairos_sys::stoppable_thread::panic_message;
use kairos_sys::thread::{pin_current_thread, set_fifo, thread_context_switches, thread_cpu_time_ns};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::analysis::{Analysis, HandlerSpec, analyse};
use crate::policy::{Counts, Decision, Finished, Missed, Policy};

/// What a handler sees while it runs.
#[derive(Debug)]
pub struct Context<'a> {
    abort: &'a AtomicBool,
    /// This job's release, ns since the scheduler started.
    pub release_ns: u64,
}

impl Context<'_> {
    /// The scheduler is stopping: finish what must be finished (the protocol's shutdown) and
    /// return.
    pub fn aborting(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }
}

/// A periodic handler. `run` does up to `units` units of work on the shared state and returns
/// how many it did: fewer means it ran out of work, and its job ends for this period.
pub trait Handler<S>: Send {
    /// Does up to `units` units of work on `shared`; returns how many it did.
    fn run(&mut self, shared: &mut S, units: u64, ctx: &Context<'_>) -> u64;
    /// Runs once when the scheduler stops, after the last iteration.
    fn shutdown(&mut self, _shared: &mut S) {}
}

impl<S, F> Handler<S> for F
where
    F: FnMut(&mut S, u64, &Context<'_>) -> u64 + Send,
{
    fn run(&mut self, shared: &mut S, units: u64, ctx: &Context<'_>) -> u64 {
        self(shared, units, ctx)
    }
}

/// Why a registration or change was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refused {
    /// A handler is out of the analysis' range.
    #[error("{0}")]
    Invalid(#[from] crate::analysis::AnalysisError),
    /// The analysis refused the set; which handlers and why.
    #[error("the set would be unschedulable: {0}")]
    Unschedulable(String),
    /// No handler has this registration index.
    #[error("no handler {0}")]
    NoHandler(usize),
}

fn admit(specs: &[HandlerSpec]) -> Result<Analysis, Refused> {
    let analysis = analyse(specs)?;
    if analysis.admitted {
        return Ok(analysis);
    }
    let why: Vec<String> = analysis
        .handlers
        .iter()
        .zip(specs)
        .filter(|(a, _)| !a.schedulable)
        .map(|(a, s)| match a.response_time_ns {
            Some(r) => format!(
                "'{}' could respond in {:.1} us (job {} of its busy period) against a period of {:.1} us",
                a.name,
                r as f64 / 1e3,
                a.worst_job,
                s.period_ns as f64 / 1e3
            ),
            None => format!(
                "'{}' has no response-time bound: {}",
                a.name,
                a.unbounded.map_or_else(|| "unknown".to_string(), |why| why.to_string())
            ),
        })
        .collect();
    Err(Refused::Unschedulable(why.join("; ")))
}

/// Handlers being registered, with their shared state.
pub struct Scheduler<S> {
    shared: S,
    specs: Vec<HandlerSpec>,
    handlers: Vec<Box<dyn Handler<S>>>,
}

impl<S> std::fmt::Debug for Scheduler<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").field("specs", &self.specs).finish_non_exhaustive()
    }
}

/// The shell's knobs.
#[derive(Debug, Clone, Copy)]
pub struct ShellConfig {
    /// Core to pin the thread to.
    pub core: Option<usize>,
    /// `SCHED_FIFO` priority to ask for (0: do not ask).
    pub fifo_priority: i32,
    /// Spin for this long before a release instead of sleeping through it.
    pub spin_ns: u64,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self { core: None, fifo_priority: 80, spin_ns: 20_000 }
    }
}

enum Control {
    Enable(usize, bool),
    Change(usize, HandlerSpec),
}

impl<S: Send + 'static> Scheduler<S> {
    /// A scheduler with no handlers yet, owning the state they share.
    pub fn new(shared: S) -> Self {
        Self { shared, specs: Vec::new(), handlers: Vec::new() }
    }

    /// Registers a handler if the set stays schedulable; returns its index.
    pub fn register(
        &mut self,
        spec: HandlerSpec,
        handler: impl Handler<S> + 'static,
    ) -> Result<usize, Refused> {
        let mut specs = self.specs.clone();
        specs.push(spec);
        admit(&specs)?;
        self.specs = specs;
        self.handlers.push(Box::new(handler));
        Ok(self.handlers.len() - 1)
    }

    /// Registers a handler without admission control: for experiments that measure what
    /// happens beyond the admission limit. Nothing is guaranteed for such a set.
    pub fn register_unadmitted(&mut self, spec: HandlerSpec, handler: impl Handler<S> + 'static) -> usize {
        self.specs.push(spec);
        self.handlers.push(Box::new(handler));
        self.handlers.len() - 1
    }

    /// Registers a handler whose unit cost is measured: the handler runs `batch` units
    /// `rounds` times on the shared state, and the cost declared is the slowest unit seen times
    /// `margin` (e.g. 1.5).
    pub fn register_calibrated(
        &mut self,
        mut spec: HandlerSpec,
        mut handler: impl Handler<S> + 'static,
        rounds: usize,
        margin: f64,
    ) -> Result<usize, Refused> {
        let abort = AtomicBool::new(false);
        let ctx = Context { abort: &abort, release_ns: 0 };
        let mut worst = 1u64;
        for _ in 0..rounds.max(1) {
            let start = monotonic_ns();
            let done = handler.run(&mut self.shared, spec.batch, &ctx).max(1);
            worst = worst.max((monotonic_ns() - start).div_ceil(done));
        }
        spec.unit_cost_ns = ((worst as f64) * margin.max(1.0)).ceil() as u64;
        self.register(spec, handler)
    }

    /// The handlers registered, in registration order.
    pub fn specs(&self) -> &[HandlerSpec] {
        &self.specs
    }

    /// Starts the shell thread.
    pub fn spawn(self, config: ShellConfig) -> std::io::Result<Running<S>> {
        let abort = Arc::new(AtomicBool::new(false));
        let (control, inbox) = channel();
        let specs = Arc::new(Mutex::new(self.specs.clone()));
        let flag = Arc::clone(&abort);
        let thread = std::thread::Builder::new()
            .name("kairos-rtu".into())
            .spawn(move || run(self, config, &flag, inbox))?;
        Ok(Running { abort, control, specs, thread: Some(thread) })
    }
}

/// A running scheduler: start, stop and change handlers; stop it to get the state back.
#[derive(Debug)]
pub struct Running<S> {
    abort: Arc<AtomicBool>,
    control: Sender<Control>,
    specs: Arc<Mutex<Vec<HandlerSpec>>>,
    thread: Option<JoinHandle<Report<S>>>,
}

/// What a run did.
#[derive(Debug)]
pub struct Report<S> {
    /// The handlers' shared state, handed back.
    pub shared: S,
    /// Per handler, registration order.
    pub counts: Vec<Counts>,
    /// Every job that completed, in completion order.
    pub finished: Vec<Finished>,
    /// The missed jobs, in the order they were found (the first [`Report::MISSED_KEPT`]; the
    /// counts have them all).
    pub missed: Vec<Missed>,
    /// `CLOCK_MONOTONIC` at the scheduler's time 0: add it to a release or completion to
    /// compare with other clocks' events (a stall watch's).
    pub started_ns: u64,
    /// `SCHED_FIFO` was granted.
    pub realtime: bool,
    /// Why not, when it was asked for and refused.
    pub realtime_error: Option<String>,
    /// Iterations dispatched.
    pub dispatches: u64,
    /// Voluntary and involuntary context switches of the shell thread.
    pub context_switches: (u64, u64),
    /// How late the shell woke for releases: the worst, ns.
    pub worst_wakeup_lateness_ns: u64,
}

impl<S> Report<S> {
    /// Misses kept with their times; more are counted but not kept.
    pub const MISSED_KEPT: usize = 100_000;
}

impl<S> Running<S> {
    /// Stops (`false`) or restarts (`true`) a handler from its next period.
    pub fn set_enabled(&self, handler: usize, enabled: bool) -> Result<(), Refused> {
        if handler >= self.specs.lock().map(|s| s.len()).unwrap_or(0) {
            return Err(Refused::NoHandler(handler));
        }
        let _ = self.control.send(Control::Enable(handler, enabled));
        Ok(())
    }

    /// New parameters for a handler, if the set stays schedulable with them.
    pub fn change(&self, handler: usize, spec: HandlerSpec) -> Result<(), Refused> {
        let mut specs = self.specs.lock().map_err(|_| Refused::NoHandler(handler))?;
        if handler >= specs.len() {
            return Err(Refused::NoHandler(handler));
        }
        let mut next = specs.clone();
        next[handler] = spec.clone();
        admit(&next)?;
        *specs = next;
        let _ = self.control.send(Control::Change(handler, spec));
        Ok(())
    }

    /// Whether the shell's thread has ended (a handler panicked) while it should be running.
    pub fn has_ended(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Raises the abort flag, waits for every handler's shutdown, and returns the report; a
    /// handler that panicked ended the shell's thread, and comes back as the error.
    pub fn stop(mut self) -> Result<Report<S>, HandlerPanicked> {
        self.abort.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("a Running is stopped once: stop takes it by value");
        thread.join().map_err(|panic| HandlerPanicked(panic_message(panic.as_ref())))
    }
}

/// Dropping a running shell stops its thread and waits for it (a real-time thread must never
/// outlive its owner); the report is lost: call [`Running::stop`] to keep it.
impl<S> Drop for Running<S> {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.abort.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

/// A handler panicked on the shell's thread, which ended the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerPanicked(pub String);

impl std::fmt::Display for HandlerPanicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a handler of the real-time shell panicked: {}", self.0)
    }
}

impl std::error::Error for HandlerPanicked {}

fn run<S>(
    mut sched: Scheduler<S>,
    config: ShellConfig,
    abort: &AtomicBool,
    inbox: Receiver<Control>,
) -> Report<S> {
    if let Some(core) = config.core {
        let _ = pin_current_thread(core);
    }
    let realtime_result = if config.fifo_priority > 0 { Some(set_fifo(config.fifo_priority)) } else { None };
    let realtime = matches!(realtime_result, Some(Ok(())));
    let realtime_error = match realtime_result {
        Some(Err(e)) => Some(e.to_string()),
        _ => None,
    };
    let switches_before = thread_context_switches();
    let mut policy = Policy::new(&sched.specs, &[]);
    let start = monotonic_ns();
    let (mut finished, mut dispatches, mut worst_late) = (Vec::new(), 0u64, 0u64);
    let mut missed = Vec::new();
    // The thread's CPU time at the end of the last iteration, while iterations follow each
    // other: it is the next one's start, so a busy stretch costs one CPU-time read (a system
    // call) per dispatch, not two. The policy's own few tens of ns between them are charged to
    // the next iteration.
    let mut cpu_mark: Option<u64> = None;
    let mut keep_missed = |policy: &mut Policy| {
        let found = policy.take_missed();
        let room = Report::<S>::MISSED_KEPT.saturating_sub(missed.len());
        missed.extend(found.into_iter().take(room));
    };
    while !abort.load(Ordering::Relaxed) {
        for message in inbox.try_iter() {
            match message {
                Control::Enable(h, on) => policy.set_enabled(h, on),
                Control::Change(h, spec) => {
                    policy.set_spec(h, spec.clone());
                    sched.specs[h] = spec;
                }
            }
        }
        // One clock read serves the releases and, when a handler runs, its iteration's start.
        let t0 = monotonic_ns();
        let now = t0 - start;
        policy.release(now);
        keep_missed(&mut policy);
        match policy.next(now) {
            Decision::Idle { until } => {
                cpu_mark = None;
                // Sleep to a little before the release, then spin to it; wake at least every
                // 10 ms to look at the abort flag and the controls.
                let wake = until.min(now + 10_000_000);
                let target = start + wake;
                if wake > now + config.spin_ns {
                    sleep_until_ns(target - config.spin_ns);
                }
                while monotonic_ns() < target && !abort.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                if wake == until {
                    worst_late = worst_late.max(monotonic_ns().saturating_sub(target));
                }
            }
            Decision::Run { handler, units } => {
                dispatches += 1;
                let ctx = Context { abort, release_ns: now };
                let cpu0 = cpu_mark.unwrap_or_else(thread_cpu_time_ns);
                let done = sched.handlers[handler].run(&mut sched.shared, units, &ctx).min(units);
                let t1 = monotonic_ns();
                // Overruns are judged on the thread's CPU time, not the wall clock's: time the
                // core spent on a higher-priority thread or a stolen vCPU is not the handler's.
                let cpu1 = thread_cpu_time_ns();
                policy.account(handler, done.max(1), cpu1.saturating_sub(cpu0));
                cpu_mark = Some(cpu1);
                let at = t1 - start;
                let ended = if done < units {
                    policy.finish(handler, at)
                } else {
                    policy.completed(handler, done, at)
                };
                finished.extend(ended);
                keep_missed(&mut policy);
            }
        }
    }
    for h in sched.handlers.iter_mut() {
        h.shutdown(&mut sched.shared);
    }
    let after = thread_context_switches();
    Report {
        counts: (0..sched.specs.len()).map(|h| policy.counts(h)).collect(),
        shared: sched.shared,
        finished,
        missed,
        started_ns: start,
        realtime,
        realtime_error,
        dispatches,
        context_switches: (after.0 - switches_before.0, after.1 - switches_before.1),
        worst_wakeup_lateness_ns: worst_late,
    }
}
