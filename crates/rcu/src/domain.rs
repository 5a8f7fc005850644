//! The QSBR domain: grace periods, reader slots, the callback queue and its accounting.
//!
//! # Protocol
//! One global grace-period counter `gp` (starts at 1) and one counter per reader slot (0 means
//! offline or free). Starting a grace period increments `gp`; the new value is its [`Ticket`].
//! A reader announces a quiescent state by copying `gp` into its slot, storing only when `gp` has
//! moved (see [`crate::ReaderHandle::quiescent`]). Ticket `t` is complete when every online slot
//! holds a value `>= t`: each online reader has, since `t` was issued, been at a point where it
//! held no reference. Polling scans the slots once and caches the smallest value seen in `acked`,
//! so later polls of older tickets cost one load (DPDK's `acked_token`).
//!
//! Memory ordering: a reader's slot store is `Release` and the poller's load `Acquire`, so every
//! read the reader made before its quiescent state happens-before the poller frees anything. A
//! reader's `Acquire` load of `gp >= t` synchronises with the `SeqCst` increment that issued `t`,
//! which the unlink of the retired value precedes, so after its quiescent state the reader can
//! no longer reach the old value. Coming online is the one Dekker-style race (the reader stores
//! its slot then reads pointers; the writer unlinks, then reads slots); both sides put a `SeqCst`
//! fence between their store and their load, as liburcu's QSBR does.
//!
//! # Callbacks
//! Deferred callbacks collect in the queue; while no grace period is in flight the newest are
//! sealed against a fresh one, so callbacks arriving during a grace period share the next (the
//! kernel's batching). Who runs ready callbacks is the [`ReclaimPolicy`]; how much may pile up is
//! `high_watermark`, past which [`OnFull`] decides.
//!
//! # Work bounds
//! `poll` is O(registered readers). `defer` takes the queue lock for O(1) work (plus, when no
//! grace period is in flight, one counter increment). `synchronize` blocks until every online
//! reader passes a quiescent state: never call it from a thread holding an online
//! [`crate::ReaderHandle`] of the same domain, which would wait for itself.

use crate::callback::{Callback, Queue};
use crate::error::{ConfigError, Full, RegisterError};
use crate::policy::{OnFull, ReclaimPolicy};
use crate::reader::ReaderHandle;
use crate::ready::Ready;
use crate::stall::{StallConfig, StallReport};
use crate::sync::{self, Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, Padded, fence};
use std::fmt;
use std::time::Duration;

/// A grace period, as returned by [`Domain::start`]; complete once [`Domain::poll`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub(crate) u64);

impl Ticket {
    /// The grace-period counter value this ticket waits for.
    pub fn value(self) -> u64 {
        self.0
    }
}

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

/// Counters of what the domain did; a consistent-enough snapshot via [`Domain::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DomainStats {
    /// Grace periods started (by writers, sealing, `synchronize` and the stall detector).
    pub grace_periods_started: u64,
    /// Callbacks accepted by `defer` (queued or run synchronously).
    pub callbacks_deferred: u64,
    /// Callbacks run so far.
    pub callbacks_run: u64,
    /// Callbacks waiting now.
    pub pending: u64,
    /// Most callbacks ever waiting at once.
    pub peak_pending: u64,
    /// Bytes retired and not yet freed (queued, held by readers, or waiting in a synchronous
    /// grace period).
    pub unreclaimed_bytes: u64,
    /// Most bytes ever retired and not yet freed at once.
    pub peak_unreclaimed_bytes: u64,
    /// Longest single callback a reader ran in a budgeted call (the "one callback" by which a
    /// call may pass its budget), in nanoseconds.
    pub reader_longest_callback_ns: u64,
    /// Reader calls that ran at least one callback.
    pub reader_reclaim_calls: u64,
    /// Longest single reclamation call on a reader thread, in nanoseconds.
    pub reader_longest_reclaim_ns: u64,
    /// Longest single run of callbacks on the reclaimer thread, in nanoseconds.
    pub reclaimer_longest_batch_ns: u64,
    /// Longest single run of callbacks on a writer (`Direct`, fallbacks), in nanoseconds.
    pub writer_longest_reclaim_ns: u64,
    /// Callbacks readers handed to the reclaimer (`Adaptive`).
    pub callbacks_spilled: u64,
    /// Callbacks run synchronously because the backlog was at the watermark.
    pub watermark_fallbacks: u64,
    /// Stalled readers reported.
    pub stalls_reported: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    grace_periods_started: AtomicU64,
    callbacks_deferred: AtomicU64,
    callbacks_run: AtomicU64,
    pending: AtomicUsize,
    peak_pending: AtomicUsize,
    unreclaimed_bytes: AtomicUsize,
    peak_unreclaimed_bytes: AtomicUsize,
    pub(crate) reader_longest_callback_ns: AtomicU64,
    pub(crate) reader_reclaim_calls: AtomicU64,
    pub(crate) reader_longest_reclaim_ns: AtomicU64,
    pub(crate) reclaimer_longest_batch_ns: AtomicU64,
    writer_longest_reclaim_ns: AtomicU64,
    pub(crate) callbacks_spilled: AtomicU64,
    watermark_fallbacks: AtomicU64,
    pub(crate) stalls_reported: AtomicU64,
}

/// How callbacks offered to `defer` are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Queued for a grace period; their backlog place is reserved.
    Queued,
    /// Run by the caller after a grace period (`Direct`, or at the watermark under `Synchronize`).
    Synchronous,
    /// Refused at the watermark (`OnFull::Fail`).
    Refused,
}

/// What one run of callbacks did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunOutcome {
    pub(crate) ran: usize,
    pub(crate) elapsed_ns: u64,
    /// Longest single callback, measured only in budgeted runs.
    pub(crate) longest_callback_ns: u64,
}

/// State shared by the domain, its readers, cells and threads.
pub(crate) struct Shared {
    pub(crate) gp: Padded<AtomicU64>,
    acked: Padded<AtomicU64>,
    pub(crate) slots: Box<[Padded<AtomicU64>]>,
    pub(crate) slots_used: AtomicUsize,
    pub(crate) names: Mutex<Vec<Option<String>>>,
    pub(crate) queue: Mutex<Queue>,
    pub(crate) policy: ReclaimPolicy,
    high_watermark: usize,
    on_full: OnFull,
    pub(crate) stats: Counters,
    pub(crate) shutdown: AtomicBool,
    pub(crate) reclaimer_idle: AtomicBool,
    #[cfg(not(loom))]
    pub(crate) reclaimer: std::sync::OnceLock<std::thread::Thread>,
    pub(crate) stall_reports: Mutex<Vec<StallReport>>,
}

impl Shared {
    /// Starts a grace period and returns its ticket.
    pub(crate) fn start(&self) -> Ticket {
        self.stats.grace_periods_started.fetch_add(1, Ordering::Relaxed);
        Ticket(self.gp.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Whether the grace period `ticket` has ended.
    pub(crate) fn poll_value(&self, ticket: u64) -> bool {
        if self.acked.load(Ordering::Acquire) >= ticket {
            return true;
        }
        fence(Ordering::SeqCst);
        let mut complete = self.gp.load(Ordering::Acquire);
        let used = self.slots_used.load(Ordering::Acquire);
        for slot in &self.slots[..used] {
            let seen = slot.load(Ordering::Acquire);
            if seen != 0 && seen < complete {
                complete = seen;
            }
        }
        self.acked.fetch_max(complete, Ordering::AcqRel);
        ticket <= complete
    }

    /// Whether any reader is online right now.
    pub(crate) fn any_reader_online(&self) -> bool {
        fence(Ordering::SeqCst);
        let used = self.slots_used.load(Ordering::Acquire);
        self.slots[..used].iter().any(|slot| slot.load(Ordering::Acquire) != 0)
    }

    /// Blocks until a grace period started now has ended.
    pub(crate) fn synchronize(&self) {
        let ticket = self.start();
        let mut round = 0u32;
        while !self.poll_value(ticket.0) {
            sync::backoff(round);
            round = round.saturating_add(1);
        }
    }

    /// Seals the unsealed callbacks against a new grace period, if there are any.
    fn seal(&self, queue: &mut Queue) {
        if !queue.unsealed.is_empty() {
            let ticket = self.start();
            let callbacks = std::mem::take(&mut queue.unsealed);
            queue.sealed.push_back(crate::callback::Batch { ticket: ticket.0, callbacks });
        }
    }

    /// Moves every callback whose grace period has ended into `out` (spilled ones first, then
    /// completed batches in order; batches only when `include_batches`) and starts the next grace
    /// period if none is in flight. When that grace period ends at once (no reader online), its
    /// batch is taken too. Returns whether a grace period is still in flight.
    pub(crate) fn take_ready(&self, queue: &mut Queue, out: &mut Ready, include_batches: bool) -> bool {
        out.append(&mut queue.spilled);
        if !include_batches {
            if queue.sealed.is_empty() {
                self.seal(queue);
            }
            return !queue.sealed.is_empty();
        }
        for _ in 0..2 {
            while let Some(batch) = queue.sealed.front() {
                if !self.poll_value(batch.ticket) {
                    break;
                }
                if let Some(batch) = queue.sealed.pop_front() {
                    out.push(batch.callbacks);
                }
            }
            if !queue.sealed.is_empty() || queue.unsealed.is_empty() {
                break;
            }
            self.seal(queue);
        }
        !queue.sealed.is_empty()
    }

    /// Runs callbacks from `ready` until it is empty, `max` have run, or `budget_ns` has passed
    /// (checked after each callback; `u64::MAX` means no time limit and no clock reads).
    pub(crate) fn run_ready(&self, ready: &mut Ready, max: usize, budget_ns: u64) -> RunOutcome {
        self.run_accounted(ready, max, budget_ns, true)
    }

    fn run_accounted(&self, ready: &mut Ready, max: usize, budget_ns: u64, queued: bool) -> RunOutcome {
        let start = sync::now_ns();
        let (mut ran, mut bytes) = (0usize, 0usize);
        let (mut last, mut longest_callback_ns) = (start, 0u64);
        while ran < max {
            let Some(callback) = ready.pop() else { break };
            bytes += callback.bytes;
            callback.run();
            ran += 1;
            if budget_ns != u64::MAX {
                let now = sync::now_ns();
                longest_callback_ns = longest_callback_ns.max(now.saturating_sub(last));
                last = now;
                if now.saturating_sub(start) >= budget_ns {
                    break;
                }
            }
        }
        // Budgeted runs end at their last clock read (which decided to stop); others read once.
        let end = if budget_ns != u64::MAX { last } else { sync::now_ns() };
        let elapsed_ns = end.saturating_sub(start);
        self.account_run(ran, bytes, queued);
        RunOutcome { ran, elapsed_ns, longest_callback_ns }
    }

    fn account_run(&self, ran: usize, bytes: usize, queued: bool) {
        self.stats.callbacks_run.fetch_add(ran as u64, Ordering::Relaxed);
        self.stats.unreclaimed_bytes.fetch_sub(bytes, Ordering::AcqRel);
        if queued && ran > 0 {
            self.stats.pending.fetch_sub(ran, Ordering::AcqRel);
        }
    }

    /// Wakes the reclaimer thread if it is parked.
    pub(crate) fn wake_reclaimer(&self) {
        #[cfg(not(loom))]
        if self.reclaimer_idle.swap(false, Ordering::AcqRel) {
            if let Some(thread) = self.reclaimer.get() {
                thread.unpark();
            }
        }
    }

    /// Decides how `count` callbacks will be taken, reserving their place in the backlog when
    /// they are to be queued (a compare-and-swap, so concurrent writers never pass the watermark).
    pub(crate) fn admit(&self, count: usize) -> Admission {
        if self.policy == ReclaimPolicy::Direct {
            return Admission::Synchronous;
        }
        let mut pending = self.stats.pending.load(Ordering::Acquire);
        loop {
            if pending.saturating_add(count) > self.high_watermark {
                return match self.on_full {
                    OnFull::Fail => Admission::Refused,
                    OnFull::Synchronize => Admission::Synchronous,
                };
            }
            match self.stats.pending.compare_exchange_weak(
                pending,
                pending + count,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Admission::Queued,
                Err(now) => pending = now,
            }
        }
    }

    /// Takes admitted callbacks: queues them (their backlog place is reserved) or runs them now.
    pub(crate) fn dispatch(&self, admission: Admission, callbacks: Vec<Callback>) {
        let (count, bytes) = (callbacks.len(), callbacks.iter().map(|c| c.bytes).sum::<usize>());
        self.stats.callbacks_deferred.fetch_add(count as u64, Ordering::Relaxed);
        let unreclaimed = self.stats.unreclaimed_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.stats.peak_unreclaimed_bytes.fetch_max(unreclaimed, Ordering::Relaxed);
        match admission {
            Admission::Queued => {}
            Admission::Synchronous | Admission::Refused => {
                if self.policy != ReclaimPolicy::Direct {
                    self.stats.watermark_fallbacks.fetch_add(count as u64, Ordering::Relaxed);
                }
                self.run_synchronously(callbacks);
                return;
            }
        }
        let pending = self.stats.pending.load(Ordering::Relaxed);
        self.stats.peak_pending.fetch_max(pending, Ordering::Relaxed);
        let mut queue = sync::lock(&self.queue);
        queue.unsealed.extend(callbacks);
        // Seal now when no grace period is in flight, or when the one in flight has already
        // ended: the new grace period moves the counter, which sends readers to their slow path
        // to take both batches.
        if queue.sealed.front().is_none_or(|head| self.poll_value(head.ticket)) {
            self.seal(&mut queue);
        }
        drop(queue);
        if self.policy == ReclaimPolicy::Offload {
            self.wake_reclaimer();
        }
    }

    /// Runs `callbacks` on the calling thread once no reader can hold what they free.
    fn run_synchronously(&self, callbacks: Vec<Callback>) {
        if self.any_reader_online() {
            self.synchronize();
        }
        let mut ready = Ready::default();
        ready.push(callbacks);
        let outcome = self.run_accounted(&mut ready, usize::MAX, u64::MAX, false);
        self.stats.writer_longest_reclaim_ns.fetch_max(outcome.elapsed_ns, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> DomainStats {
        let s = &self.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let load_usize = |a: &AtomicUsize| a.load(Ordering::Relaxed) as u64;
        DomainStats {
            grace_periods_started: load(&s.grace_periods_started),
            callbacks_deferred: load(&s.callbacks_deferred),
            callbacks_run: load(&s.callbacks_run),
            pending: load_usize(&s.pending),
            peak_pending: load_usize(&s.peak_pending),
            unreclaimed_bytes: load_usize(&s.unreclaimed_bytes),
            peak_unreclaimed_bytes: load_usize(&s.peak_unreclaimed_bytes),
            reader_longest_callback_ns: load(&s.reader_longest_callback_ns),
            reader_reclaim_calls: load(&s.reader_reclaim_calls),
            reader_longest_reclaim_ns: load(&s.reader_longest_reclaim_ns),
            reclaimer_longest_batch_ns: load(&s.reclaimer_longest_batch_ns),
            writer_longest_reclaim_ns: load(&s.writer_longest_reclaim_ns),
            callbacks_spilled: load(&s.callbacks_spilled),
            watermark_fallbacks: load(&s.watermark_fallbacks),
            stalls_reported: load(&s.stalls_reported),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // No reader, cell or thread refers to the domain any more, so every grace period is over.
        let mut ready = sync::lock(&self.queue).take_all();
        self.run_ready(&mut ready, usize::MAX, u64::MAX);
    }
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
            .field("policy", &self.shared.policy)
            .field("gp", &self.shared.gp.load(Ordering::Relaxed))
            .field("pending", &self.pending())
            .finish()
    }
}

impl Domain {
    /// A domain with `config`, starting its reclaimer and stall-detector threads if it needs them.
    pub fn new(config: DomainConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let slots = (0..config.max_readers).map(|_| Padded(AtomicU64::new(0))).collect();
        let shared = Arc::new(Shared {
            gp: Padded(AtomicU64::new(1)),
            acked: Padded(AtomicU64::new(1)),
            slots,
            slots_used: AtomicUsize::new(0),
            names: Mutex::new(Vec::new()),
            queue: Mutex::new(Queue::default()),
            policy: config.policy,
            high_watermark: config.high_watermark,
            on_full: config.on_full,
            stats: Counters::default(),
            shutdown: AtomicBool::new(false),
            reclaimer_idle: AtomicBool::new(false),
            #[cfg(not(loom))]
            reclaimer: std::sync::OnceLock::new(),
            stall_reports: Mutex::new(Vec::new()),
        });
        let threads = Threads { shared: Arc::clone(&shared), handles: std::sync::Mutex::new(Vec::new()) };
        #[cfg(not(loom))]
        {
            let mut handles = threads.handles.lock().unwrap_or_else(|p| p.into_inner());
            if config.policy.needs_reclaimer() {
                handles.push(crate::reclaimer::spawn(Arc::clone(&shared), &config));
            }
            if let Some(stall) = config.stall.clone() {
                handles.push(crate::stall::spawn(Arc::clone(&shared), stall));
            }
        }
        Ok(Self { shared, _threads: std::sync::Arc::new(threads) })
    }

    /// A domain with the default configuration and `policy`.
    pub fn with_policy(policy: ReclaimPolicy) -> Result<Self, ConfigError> {
        Self::new(DomainConfig::with_policy(policy))
    }

    /// Registers a reader named `name` (stall reports use the name); it starts online.
    pub fn register(&self, name: impl Into<String>) -> Result<ReaderHandle, RegisterError> {
        let mut names = sync::lock(&self.shared.names);
        let slot = match names.iter().position(Option::is_none) {
            Some(free) => free,
            None if names.len() < self.shared.slots.len() => {
                names.push(None);
                names.len() - 1
            }
            None => {
                return Err(RegisterError::TooManyReaders { max: self.shared.slots.len() });
            }
        };
        names[slot] = Some(name.into());
        self.shared.slots_used.fetch_max(slot + 1, Ordering::SeqCst);
        drop(names);
        Ok(ReaderHandle::new(self.clone(), slot))
    }

    /// The reclamation policy.
    pub fn policy(&self) -> ReclaimPolicy {
        self.shared.policy
    }

    /// Starts a grace period (polled API): it ends when every reader online now has passed a
    /// quiescent state. One atomic increment; never blocks.
    pub fn start(&self) -> Ticket {
        self.shared.start()
    }

    /// Whether the grace period `ticket` has ended. O(1) when a later ticket was already seen to
    /// end, otherwise one pass over the reader slots; never blocks.
    pub fn poll(&self, ticket: Ticket) -> bool {
        self.shared.poll_value(ticket.0)
    }

    /// Blocks until every reader online now has passed a quiescent state (spinning briefly,
    /// then sleeping in 20 us steps).
    pub fn synchronize(&self) {
        self.shared.synchronize();
    }

    /// Defers `f` until every reader online now has passed a quiescent state.
    pub fn defer<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), Full<F>> {
        self.defer_sized(f, 0)
    }

    /// Like [`Domain::defer`], declaring that `f` frees `bytes` (for the unreclaimed-memory count).
    pub fn defer_sized<F: FnOnce() + Send + 'static>(&self, f: F, bytes: usize) -> Result<(), Full<F>> {
        self.offer(1, f, |f| vec![Callback::call(Box::new(f), bytes)])
    }

    /// Drops `value` once every reader online now has passed a quiescent state.
    pub fn defer_drop<T: Send + 'static>(&self, value: Box<T>) -> Result<(), Full<Box<T>>> {
        self.offer(1, value, |value| vec![Callback::drop_box(value)])
    }

    /// Drops every value after one grace period: one lock, one seal, and under `Direct` one wait,
    /// for the whole batch.
    pub fn defer_drop_all<T: Send + 'static>(&self, values: Vec<Box<T>>) -> Result<(), Full<Vec<Box<T>>>> {
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
    ) -> Result<(), Full<V>> {
        match self.shared.admit(count) {
            Admission::Refused => Err(Full { value, limit: self.shared.high_watermark }),
            admitted => {
                self.shared.dispatch(admitted, callbacks(value));
                Ok(())
            }
        }
    }

    /// Decides how one more callback would be taken (reserving its backlog place if queued).
    pub(crate) fn admit_one(&self) -> Admission {
        self.shared.admit(1)
    }

    /// Retires the box behind `ptr` (used by `RcuCell::replace`) as `admission` decided.
    ///
    /// # Safety
    /// `ptr` must come from `Box::<T>::into_raw`, be unreachable for readers that start after
    /// this call, and be owned by the domain from now on. `admission` must come from
    /// [`Domain::admit_one`] and not be `Refused`.
    pub(crate) unsafe fn retire_raw<T: Send + 'static>(&self, admission: Admission, ptr: *mut T) {
        // SAFETY: forwarded from the caller's contract.
        let callback = unsafe { Callback::drop_raw(ptr) };
        self.shared.dispatch(admission, vec![callback]);
    }

    /// The configured high watermark.
    pub fn high_watermark(&self) -> usize {
        self.shared.high_watermark
    }

    /// Runs on the calling thread at most `max` callbacks whose grace period has ended, for at
    /// most `budget` (checked after each callback); returns how many ran. The manual form of
    /// reclamation (DPDK's `rte_rcu_qsbr_dq_reclaim`), usable under any policy.
    pub fn reclaim(&self, max: usize, budget: Option<Duration>) -> usize {
        let mut ready = Ready::default();
        {
            let mut queue = sync::lock(&self.shared.queue);
            self.shared.take_ready(&mut queue, &mut ready, true);
        }
        let budget_ns = budget.map_or(u64::MAX, |b| b.as_nanos().max(1) as u64);
        let outcome = self.shared.run_ready(&mut ready, max, budget_ns);
        if !ready.is_empty() {
            sync::lock(&self.shared.queue).spilled.append(&mut ready);
        }
        self.shared.stats.writer_longest_reclaim_ns.fetch_max(outcome.elapsed_ns, Ordering::Relaxed);
        outcome.ran
    }

    /// Callbacks deferred and not yet run (queued, or held by readers between budgeted calls).
    pub fn pending(&self) -> usize {
        self.shared.stats.pending.load(Ordering::Acquire)
    }

    /// Waits until at least as many callbacks have run as had been deferred when it was called
    /// (callbacks run in deferral order except for readers' leftovers, so this is "everything
    /// deferred so far" in practice), or `timeout` passes; returns whether the count was reached.
    /// Progress needs readers passing quiescent states.
    pub fn barrier(&self, timeout: Duration) -> bool {
        let target = self.shared.stats.callbacks_deferred.load(Ordering::Acquire);
        let deadline = std::time::Instant::now() + timeout;
        let mut round = 0u32;
        while self.shared.stats.callbacks_run.load(Ordering::Acquire) < target {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            if self.shared.policy == ReclaimPolicy::Offload {
                self.shared.wake_reclaimer();
            }
            sync::backoff(round);
            round = round.saturating_add(1);
        }
        true
    }

    /// What the domain has done so far.
    pub fn stats(&self) -> DomainStats {
        self.shared.stats()
    }

    /// Stalled readers reported so far (the most recent 1,024).
    pub fn stall_reports(&self) -> Vec<StallReport> {
        sync::lock(&self.shared.stall_reports).clone()
    }

    pub(crate) fn same_domain(&self, other: &Domain) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}
