//! The QSBR domain: grace periods and a callback backlog put together, and the threads that
//! serve them.
//!
//! A [`Domain`] composes three parts, each with its own state and protocol: `grace` (the
//! grace-period counter and reader slots: start, poll, synchronize), `backlog` (admission
//! against the watermark, the callback queue, running and counting callbacks) and, optionally,
//! the threads: the reclaimer (`reclaimer`) and the stall watchdog (`stall`). This module owns
//! only the wiring: configuration, which part a public call goes to, and starting and stopping
//! the threads. Readers (`reader`) and cells (`cell`) are built on top of it.
//!
//! # Work bounds
//! `start` is one atomic increment; `poll` is O(registered readers); `defer` takes the queue lock
//! for O(1) work (plus, when no grace period is in flight, one counter increment).
//! `synchronize`, and `defer` under `Direct` or at the watermark under
//! [`OnFull::Synchronize`], block until every online reader passes a quiescent state; called
//! from a thread holding an online [`crate::ReaderHandle`] of the same domain, which would wait
//! for itself, they refuse at once with [`ReaderOnline`].

use crate::backlog::{Admission, Backlog, Refusal, Runner};
use crate::callback::Callback;
use crate::error::{ConfigError, DeferError, ReaderOnline};
use crate::grace::{GracePeriods, Ticket};
use crate::policy::{OnFull, ReclaimPolicy};
use crate::ready::Ready;
use crate::stall::{StallConfig, StallLog, StallReport};
use crate::stats::DomainStats;
use crate::sync::{self, Arc, AtomicBool, Ordering};
use std::fmt;
use std::time::Duration;

/// Code run at the start of a domain thread (pinning, priority).
pub type ThreadInit = std::sync::Arc<dyn Fn() + Send + Sync>;

/// How a domain behaves. `Default` is `Offload` with 64 reader slots, a 1 M callback watermark
/// and no stall detection.
#[derive(Clone)]
pub struct DomainConfig {
    /// Who runs ready callbacks, and how much at a time.
    pub policy: ReclaimPolicy,
    /// Most readers registered at once.
    pub max_readers: usize,
    /// Most callbacks waiting (queued or held by readers) before [`OnFull`] applies.
    pub high_watermark: usize,
    /// What `defer` does at the high watermark.
    pub on_full: OnFull,
    /// Report readers that stop passing quiescent states.
    pub stall: Option<StallConfig>,
    /// Run at the start of the reclaimer thread (pin it, lower its priority).
    pub reclaimer_init: Option<ThreadInit>,
    /// How often the reclaimer thread checks a grace period in flight.
    pub reclaimer_poll: Duration,
}

impl Default for DomainConfig {
    fn default() -> Self {
        Self {
            policy: ReclaimPolicy::Offload,
            max_readers: 64,
            high_watermark: 1 << 20,
            on_full: OnFull::Synchronize,
            stall: None,
            reclaimer_init: None,
            reclaimer_poll: Duration::from_micros(50),
        }
    }
}

impl fmt::Debug for DomainConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DomainConfig")
            .field("policy", &self.policy)
            .field("max_readers", &self.max_readers)
            .field("high_watermark", &self.high_watermark)
            .field("on_full", &self.on_full)
            .field("stall", &self.stall)
            .field("reclaimer_init", &self.reclaimer_init.is_some())
            .field("reclaimer_poll", &self.reclaimer_poll)
            .finish()
    }
}

impl DomainConfig {
    /// The default configuration with `policy`.
    pub fn with_policy(policy: ReclaimPolicy) -> Self {
        Self { policy, ..Self::default() }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_readers == 0 {
            return Err(ConfigError::NoReaders);
        }
        if self.high_watermark == 0 {
            return Err(ConfigError::ZeroWatermark);
        }
        match self.policy {
            ReclaimPolicy::Throttle { max_batch: 0, .. } => return Err(ConfigError::ZeroBatch),
            ReclaimPolicy::Throttle { budget, .. } | ReclaimPolicy::Adaptive { max_budget: budget }
                if budget.is_zero() =>
            {
                return Err(ConfigError::ZeroBudget);
            }
            _ => {}
        }
        if self.stall.as_ref().is_some_and(|s| s.threshold.is_zero()) {
            return Err(ConfigError::ZeroStallThreshold);
        }
        Ok(())
    }
}

/// State shared by the domain, its readers, cells and threads.
pub(crate) struct Shared {
    pub(crate) grace: GracePeriods,
    pub(crate) backlog: Backlog,
    pub(crate) stalls: StallLog,
    /// Raised when the last domain handle goes: the threads stop.
    shutdown: AtomicBool,
}

/// Background threads; stopped and joined when the last [`Domain`] clone, reader or cell goes.
struct Threads {
    shared: Arc<Shared>,
    handles: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in handles {
            handle.thread().unpark();
            let _ = handle.join();
        }
    }
}

/// A QSBR read-copy-update domain. Cheap to clone; clones share the domain.
///
/// See the [crate documentation](crate) for the tour and the module source for the protocol.
#[derive(Clone)]
pub struct Domain {
    pub(crate) shared: Arc<Shared>,
    _threads: std::sync::Arc<Threads>,
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Domain")
            .field("policy", &self.policy())
            .field("gp", &self.shared.grace.counter())
            .field("pending", &self.pending())
            .finish()
    }
}

impl Domain {
    /// A domain with `config`, starting its reclaimer and stall-detector threads if it needs them.
    pub fn new(config: DomainConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let shared = Arc::new(Shared {
            grace: GracePeriods::new(config.max_readers),
            backlog: Backlog::new(config.policy, config.high_watermark, config.on_full),
            stalls: StallLog::default(),
            shutdown: AtomicBool::new(false),
        });
        let threads = Threads { shared: Arc::clone(&shared), handles: std::sync::Mutex::new(Vec::new()) };
        #[cfg(not(loom))]
        {
            let mut handles = threads.handles.lock().unwrap_or_else(|p| p.into_inner());
            if config.policy.needs_reclaimer() {
                handles.push(spawn_reclaimer(&shared, &config));
            }
            if let Some(stall) = config.stall.clone() {
                handles.push(spawn_stall_watchdog(&shared, stall));
            }
        }
        Ok(Self { shared, _threads: std::sync::Arc::new(threads) })
    }

    /// A domain with the default configuration and `policy`.
    pub fn with_policy(policy: ReclaimPolicy) -> Result<Self, ConfigError> {
        Self::new(DomainConfig::with_policy(policy))
    }

    /// The reclamation policy.
    pub fn policy(&self) -> ReclaimPolicy {
        self.shared.backlog.policy()
    }

    /// Starts a grace period (polled API): it ends when every reader online now has passed a
    /// quiescent state. One atomic increment; never blocks.
    pub fn start(&self) -> Ticket {
        self.shared.grace.start()
    }

    /// Whether the grace period `ticket` has ended. O(1) when a later ticket was already seen to
    /// end, otherwise one pass over the reader slots; never blocks.
    pub fn poll(&self, ticket: Ticket) -> bool {
        self.shared.grace.poll(ticket)
    }

    /// Blocks until every reader online now has passed a quiescent state (spinning briefly,
    /// then sleeping in 20 us steps).
    ///
    /// # Errors
    /// [`ReaderOnline`], at once, when the calling thread has a reader of this domain online:
    /// that reader cannot pass a quiescent state while its thread waits here.
    pub fn synchronize(&self) -> Result<(), ReaderOnline> {
        self.shared.grace.synchronize()
    }

    /// Defers `f` until every reader online now has passed a quiescent state. Under `Direct`,
    /// and at the watermark under [`OnFull::Synchronize`], it waits for that grace period and
    /// runs `f` itself before returning.
    ///
    /// # Errors
    /// `f` comes back, not run, in [`DeferError::Full`] at the watermark under
    /// [`OnFull::Fail`], or in [`DeferError::ReaderOnline`] when `defer` would wait for a grace
    /// period and this thread has a reader of the domain online (it would wait for itself). The
    /// other `defer_*` calls refuse in the same cases.
    pub fn defer<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), DeferError<F>> {
        self.defer_sized(f, 0)
    }

    /// Like [`Domain::defer`], declaring that `f` frees `bytes` (for the unreclaimed-memory count).
    pub fn defer_sized<F: FnOnce() + Send + 'static>(&self, f: F, bytes: usize) -> Result<(), DeferError<F>> {
        self.offer(1, f, |f| vec![Callback::call(Box::new(f), bytes)])
    }

    /// Drops `value` once every reader online now has passed a quiescent state.
    pub fn defer_drop<T: Send + 'static>(&self, value: Box<T>) -> Result<(), DeferError<Box<T>>> {
        self.offer(1, value, |value| vec![Callback::drop_box(value)])
    }

    /// Drops every value after one grace period: one lock, one seal, and under `Direct` one wait,
    /// for the whole batch.
    pub fn defer_drop_all<T: Send + 'static>(
        &self,
        values: Vec<Box<T>>,
    ) -> Result<(), DeferError<Vec<Box<T>>>> {
        if values.is_empty() {
            return Ok(());
        }
        self.offer(values.len(), values, |values| values.into_iter().map(Callback::drop_box).collect())
    }

    /// Admits `count` callbacks made from `value`, or hands `value` back when refused.
    fn offer<V>(
        &self,
        count: usize,
        value: V,
        callbacks: impl FnOnce(V) -> Vec<Callback>,
    ) -> Result<(), DeferError<V>> {
        match self.admit(count) {
            Ok(admitted) => {
                self.shared.backlog.dispatch(&self.shared.grace, admitted, callbacks(value));
                Ok(())
            }
            Err(refusal) => Err(refusal.hand_back(value)),
        }
    }

    /// Decides how `count` more callbacks would be taken (reserving their backlog places if
    /// queued), or why not.
    pub(crate) fn admit(&self, count: usize) -> Result<Admission, Refusal> {
        self.shared.backlog.admit(&self.shared.grace, count)
    }

    /// Retires the box behind `ptr` (used by `RcuCell::replace`) as `admission` decided.
    ///
    /// # Safety
    /// `ptr` must come from `Box::<T>::into_raw`, be unreachable for readers that start after
    /// this call, and be owned by the domain from now on. `admission` must come from
    /// [`Domain::admit`] of one callback.
    pub(crate) unsafe fn retire_raw<T: Send + 'static>(&self, admission: Admission, ptr: *mut T) {
        // SAFETY: the caller hands over an unfreed `Box::<T>::into_raw` pointer that it no longer
        // uses, which is `Callback::drop_raw`'s contract.
        let callback = unsafe { Callback::drop_raw(ptr) };
        self.shared.backlog.dispatch(&self.shared.grace, admission, vec![callback]);
    }

    /// The configured high watermark.
    pub fn high_watermark(&self) -> usize {
        self.shared.backlog.high_watermark()
    }

    /// Runs on the calling thread at most `max` callbacks whose grace period has ended, for at
    /// most `budget` (checked after each callback); returns how many ran. The manual form of
    /// reclamation (DPDK's `rte_rcu_qsbr_dq_reclaim`), usable under any policy.
    pub fn reclaim(&self, max: usize, budget: Option<Duration>) -> usize {
        let Shared { grace, backlog, .. } = &*self.shared;
        let mut ready = Ready::default();
        {
            let mut queue = backlog.lock();
            backlog.take_ready(grace, &mut queue, &mut ready, true);
        }
        let budget_ns = budget.map_or(u64::MAX, |b| b.as_nanos().max(1) as u64);
        let outcome = backlog.run_ready(&mut ready, max, budget_ns);
        backlog.hand_back(&mut ready);
        backlog.record(Runner::Writer, outcome);
        outcome.ran
    }

    /// Callbacks deferred and not yet run (queued, or held by readers between budgeted calls).
    pub fn pending(&self) -> usize {
        self.shared.backlog.pending()
    }

    /// Waits until at least as many callbacks have run as had been deferred when it was called
    /// (callbacks run in deferral order except for readers' leftovers, so this is "everything
    /// deferred so far" in practice), or `timeout` passes; returns whether the count was reached.
    /// Progress needs readers passing quiescent states.
    pub fn barrier(&self, timeout: Duration) -> bool {
        let backlog = &self.shared.backlog;
        let target = backlog.deferred();
        let deadline = std::time::Instant::now() + timeout;
        let mut round = 0u32;
        while backlog.ran() < target {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            if backlog.policy() == ReclaimPolicy::Offload {
                backlog.wake_reclaimer();
            }
            sync::backoff(round);
            round = round.saturating_add(1);
        }
        true
    }

    /// What the domain has done so far.
    pub fn stats(&self) -> DomainStats {
        let mut stats = DomainStats::default();
        self.shared.grace.add_stats(&mut stats);
        self.shared.backlog.add_stats(&mut stats);
        self.shared.stalls.add_stats(&mut stats);
        stats
    }

    /// Stalled readers reported so far (the most recent 1,024).
    pub fn stall_reports(&self) -> Vec<StallReport> {
        self.shared.stalls.reports()
    }

    /// Whether `other` is a handle of this same domain.
    pub(crate) fn same_domain(&self, other: &Domain) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

/// Starts the reclaimer thread (`Offload`, `Adaptive`).
#[cfg(not(loom))]
fn spawn_reclaimer(shared: &Arc<Shared>, config: &DomainConfig) -> std::thread::JoinHandle<()> {
    let (init, poll, thread_shared) =
        (config.reclaimer_init.clone(), config.reclaimer_poll, Arc::clone(shared));
    let handle = std::thread::Builder::new()
        .name("kairos-rcu-reclaim".into())
        .spawn(move || {
            if let Some(init) = init {
                init();
            }
            let Shared { grace, backlog, shutdown, .. } = &*thread_shared;
            crate::reclaimer::run(grace, backlog, shutdown, poll);
        })
        .expect("spawning the reclaimer thread");
    shared.backlog.set_reclaimer(handle.thread().clone());
    handle
}

/// Starts the stall watchdog thread.
#[cfg(not(loom))]
fn spawn_stall_watchdog(shared: &Arc<Shared>, config: StallConfig) -> std::thread::JoinHandle<()> {
    let thread_shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("kairos-rcu-stall".into())
        .spawn(move || {
            let Shared { grace, stalls, shutdown, .. } = &*thread_shared;
            crate::stall::watch(grace, stalls, shutdown, &config);
        })
        .expect("spawning the stall watchdog thread")
}
