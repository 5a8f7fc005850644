//! The callback backlog: admission against the high watermark, the queue in which callbacks wait
//! for their grace period, and running them with their accounting.
//!
//! # Queue
//! Deferred callbacks collect in `unsealed`; while no grace period is in flight the newest are
//! sealed into a batch stamped with the ticket of a freshly started one, so callbacks arriving
//! during a grace period share the next (the kernel's batching); sealed batches complete in
//! order. `spilled` holds callbacks whose grace period has already ended but which a reader handed
//! on (its budget ran out, or it unregistered). Who runs ready callbacks is the [`ReclaimPolicy`]
//! (readers, the reclaimer thread, or the writer); this module moves, runs and counts them.
//!
//! # Admission
//! `pending` counts callbacks deferred and not yet run (queued, or held by readers).
//! [`Backlog::admit`] reserves places with a compare-and-swap, so concurrent writers never pass
//! `high_watermark`; at it, [`OnFull`] decides: run the callbacks in the caller after a grace
//! period, or refuse and hand the value back. Under `Direct` every callback runs in the caller.
//! A caller that would wait for a grace period while its own reader is online is refused instead
//! (`GracePeriods::refuse_own_reader`): it would wait forever.
//!
//! # Work bounds
//! [`Backlog::dispatch`] of queued callbacks holds the queue lock for O(1) work (plus, when no
//! grace period is in flight, one counter increment and one poll). [`Backlog::take_ready`] moves
//! whole batches. [`Backlog::run_ready`] runs at most `max` callbacks and checks its budget after
//! each one, so a call passes its budget by at most one callback.

use crate::callback::Callback;
use crate::error::{DeferError, Full, ReaderOnline};
use crate::grace::{GracePeriods, Ticket};
use crate::policy::{OnFull, ReclaimPolicy};
use crate::ready::Ready;
use crate::stats::DomainStats;
use crate::sync::{self, AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};
use std::collections::VecDeque;

/// How callbacks offered to `defer` are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Queued for a grace period; their backlog place is reserved.
    Queued,
    /// Run by the caller after a grace period (`Direct`, or at the watermark under `Synchronize`);
    /// the caller has no reader online, so the wait ends.
    Synchronous,
}

/// Why callbacks offered to `defer` were not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// At the watermark under `OnFull::Fail`.
    Full {
        /// The watermark.
        limit: usize,
    },
    /// They would run after a grace period that the caller's own online reader holds up.
    ReaderOnline(ReaderOnline),
}

impl Refusal {
    /// The public error, handing `value` back.
    pub(crate) fn hand_back<T>(self, value: T) -> DeferError<T> {
        match self {
            Self::Full { limit } => DeferError::Full(Full { value, limit }),
            Self::ReaderOnline(error) => DeferError::ReaderOnline { value, error },
        }
    }
}

/// What one run of callbacks did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunOutcome {
    pub(crate) ran: usize,
    pub(crate) elapsed_ns: u64,
    /// Longest single callback, measured only in budgeted runs.
    pub(crate) longest_callback_ns: u64,
}

/// Who ran a batch of callbacks, for the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runner {
    /// A reader, in its quiescent state (reader-reclaiming policies).
    Reader,
    /// The reclaimer thread.
    Reclaimer,
    /// A writer or a manual `reclaim` call.
    Writer,
}

/// Callbacks sealed against one grace period.
struct Batch {
    ticket: Ticket,
    callbacks: Vec<Callback>,
}

/// The queue itself; guarded by the backlog's lock.
#[derive(Default)]
pub(crate) struct Queue {
    unsealed: Vec<Callback>,
    sealed: VecDeque<Batch>,
    spilled: Ready,
}

impl Queue {
    /// Whether the reclaimer has something to look at: spilled callbacks, or (`with_sealed`)
    /// batches waiting for their grace period.
    pub(crate) fn has_work(&self, with_sealed: bool) -> bool {
        !self.spilled.is_empty() || (with_sealed && !self.sealed.is_empty())
    }

    /// Takes every callback, in any state (used when no reader can exist any more).
    fn take_all(&mut self) -> Ready {
        let mut all = std::mem::take(&mut self.spilled);
        for batch in self.sealed.drain(..) {
            all.push(batch.callbacks);
        }
        all.push(std::mem::take(&mut self.unsealed));
        all
    }
}

#[derive(Default)]
struct Counters {
    callbacks_deferred: AtomicU64,
    callbacks_run: AtomicU64,
    pending: AtomicUsize,
    peak_pending: AtomicUsize,
    unreclaimed_bytes: AtomicUsize,
    peak_unreclaimed_bytes: AtomicUsize,
    reader_longest_callback_ns: AtomicU64,
    reader_reclaim_calls: AtomicU64,
    reader_longest_reclaim_ns: AtomicU64,
    reclaimer_longest_batch_ns: AtomicU64,
    writer_longest_reclaim_ns: AtomicU64,
    callbacks_spilled: AtomicU64,
    watermark_fallbacks: AtomicU64,
}

/// The callbacks of one domain, from admission until they have run.
pub(crate) struct Backlog {
    queue: Mutex<Queue>,
    policy: ReclaimPolicy,
    high_watermark: usize,
    on_full: OnFull,
    counters: Counters,
    /// The reclaimer thread has announced that it is about to park.
    reclaimer_idle: AtomicBool,
    #[cfg(not(loom))]
    reclaimer: std::sync::OnceLock<std::thread::Thread>,
}

impl Backlog {
    /// An empty backlog run under `policy`, holding at most `high_watermark` callbacks.
    pub(crate) fn new(policy: ReclaimPolicy, high_watermark: usize, on_full: OnFull) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            policy,
            high_watermark,
            on_full,
            counters: Counters::default(),
            reclaimer_idle: AtomicBool::new(false),
            #[cfg(not(loom))]
            reclaimer: std::sync::OnceLock::new(),
        }
    }

    /// The reclamation policy.
    pub(crate) fn policy(&self) -> ReclaimPolicy {
        self.policy
    }

    /// The most callbacks that may wait at once.
    pub(crate) fn high_watermark(&self) -> usize {
        self.high_watermark
    }

    /// Callbacks deferred and not yet run.
    pub(crate) fn pending(&self) -> usize {
        self.counters.pending.load(Ordering::Acquire)
    }

    /// Callbacks accepted so far.
    pub(crate) fn deferred(&self) -> u64 {
        self.counters.callbacks_deferred.load(Ordering::Acquire)
    }

    /// Callbacks run so far.
    pub(crate) fn ran(&self) -> u64 {
        self.counters.callbacks_run.load(Ordering::Acquire)
    }

    /// Locks the queue.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Queue> {
        sync::lock(&self.queue)
    }

    /// Locks the queue unless another thread holds it (readers never wait for writers).
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, Queue>> {
        sync::try_lock(&self.queue)
    }

    /// Decides how `count` callbacks will be taken, reserving their place in the backlog when
    /// they are to be queued (a compare-and-swap, so concurrent writers never pass the watermark).
    /// Callbacks that would run after a grace period are refused when the calling thread has a
    /// reader of `grace` online: that wait would never end.
    pub(crate) fn admit(&self, grace: &GracePeriods, count: usize) -> Result<Admission, Refusal> {
        let synchronous = || match grace.refuse_own_reader() {
            Ok(()) => Ok(Admission::Synchronous),
            Err(error) => Err(Refusal::ReaderOnline(error)),
        };
        if self.policy == ReclaimPolicy::Direct {
            return synchronous();
        }
        let mut pending = self.counters.pending.load(Ordering::Acquire);
        loop {
            if pending.saturating_add(count) > self.high_watermark {
                return match self.on_full {
                    OnFull::Fail => Err(Refusal::Full { limit: self.high_watermark }),
                    OnFull::Synchronize => synchronous(),
                };
            }
            match self.counters.pending.compare_exchange_weak(
                pending,
                pending + count,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(Admission::Queued),
                Err(now) => pending = now,
            }
        }
    }

    /// Takes admitted callbacks: queues them (their backlog place is reserved) or runs them now,
    /// after a grace period of `grace` if a reader is online.
    pub(crate) fn dispatch(&self, grace: &GracePeriods, admission: Admission, callbacks: Vec<Callback>) {
        let c = &self.counters;
        let (count, bytes) = (callbacks.len(), callbacks.iter().map(|c| c.bytes).sum::<usize>());
        c.callbacks_deferred.fetch_add(count as u64, Ordering::Relaxed);
        let unreclaimed = c.unreclaimed_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        c.peak_unreclaimed_bytes.fetch_max(unreclaimed, Ordering::Relaxed);
        match admission {
            Admission::Queued => {}
            Admission::Synchronous => {
                if self.policy != ReclaimPolicy::Direct {
                    c.watermark_fallbacks.fetch_add(count as u64, Ordering::Relaxed);
                }
                self.run_synchronously(grace, callbacks);
                return;
            }
        }
        let pending = c.pending.load(Ordering::Relaxed);
        c.peak_pending.fetch_max(pending, Ordering::Relaxed);
        let mut queue = self.lock();
        queue.unsealed.extend(callbacks);
        // Seal now when no grace period is in flight, or when the one in flight has already
        // ended: the new grace period moves the counter, which sends readers to their slow path
        // to take both batches.
        if queue.sealed.front().is_none_or(|head| grace.poll(head.ticket)) {
            Self::seal(grace, &mut queue);
        }
        drop(queue);
        if self.policy == ReclaimPolicy::Offload {
            self.wake_reclaimer();
        }
    }

    /// Runs `callbacks` on the calling thread once no reader can hold what they free.
    fn run_synchronously(&self, grace: &GracePeriods, callbacks: Vec<Callback>) {
        // Admission checked that none of the online readers is this thread's.
        if grace.any_reader_online() {
            grace.wait_for_readers();
        }
        let mut ready = Ready::default();
        ready.push(callbacks);
        let outcome = self.run_accounted(&mut ready, usize::MAX, u64::MAX, false);
        self.record(Runner::Writer, outcome);
    }

    /// Seals the unsealed callbacks against a new grace period, if there are any.
    fn seal(grace: &GracePeriods, queue: &mut Queue) {
        if !queue.unsealed.is_empty() {
            let ticket = grace.start();
            let callbacks = std::mem::take(&mut queue.unsealed);
            queue.sealed.push_back(Batch { ticket, callbacks });
        }
    }

    /// Moves every callback whose grace period has ended into `out` (spilled ones first, then
    /// completed batches in order; batches only when `include_batches`) and starts the next grace
    /// period if none is in flight. When that grace period ends at once (no reader online), its
    /// batch is taken too. Returns whether a grace period is still in flight.
    pub(crate) fn take_ready(
        &self,
        grace: &GracePeriods,
        queue: &mut Queue,
        out: &mut Ready,
        include_batches: bool,
    ) -> bool {
        out.append(&mut queue.spilled);
        if !include_batches {
            if queue.sealed.is_empty() {
                Self::seal(grace, queue);
            }
            return !queue.sealed.is_empty();
        }
        for _ in 0..2 {
            while let Some(batch) = queue.sealed.front() {
                if !grace.poll(batch.ticket) {
                    break;
                }
                if let Some(batch) = queue.sealed.pop_front() {
                    out.push(batch.callbacks);
                }
            }
            if !queue.sealed.is_empty() || queue.unsealed.is_empty() {
                break;
            }
            Self::seal(grace, queue);
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
        let c = &self.counters;
        c.callbacks_run.fetch_add(ran as u64, Ordering::Relaxed);
        c.unreclaimed_bytes.fetch_sub(bytes, Ordering::AcqRel);
        if queued && ran > 0 {
            c.pending.fetch_sub(ran, Ordering::AcqRel);
        }
        RunOutcome { ran, elapsed_ns, longest_callback_ns }
    }

    /// Counts a run of callbacks by `runner` in the statistics.
    pub(crate) fn record(&self, runner: Runner, outcome: RunOutcome) {
        let c = &self.counters;
        match runner {
            Runner::Reader => {
                c.reader_reclaim_calls.fetch_add(1, Ordering::Relaxed);
                c.reader_longest_reclaim_ns.fetch_max(outcome.elapsed_ns, Ordering::Relaxed);
                c.reader_longest_callback_ns.fetch_max(outcome.longest_callback_ns, Ordering::Relaxed);
            }
            Runner::Reclaimer => {
                c.reclaimer_longest_batch_ns.fetch_max(outcome.elapsed_ns, Ordering::Relaxed);
            }
            Runner::Writer => {
                c.writer_longest_reclaim_ns.fetch_max(outcome.elapsed_ns, Ordering::Relaxed);
            }
        }
    }

    /// Hands a reader's leftovers to the reclaimer thread if the queue is free now (never
    /// blocks); returns whether it did.
    pub(crate) fn try_spill(&self, leftovers: &mut Ready) -> bool {
        let Some(mut queue) = self.try_lock() else { return false };
        let count = leftovers.len() as u64;
        queue.spilled.append(leftovers);
        drop(queue);
        self.counters.callbacks_spilled.fetch_add(count, Ordering::Relaxed);
        true
    }

    /// Puts callbacks whose grace period has ended back at the front of the line (a dropped
    /// reader's leftovers, what a budgeted `reclaim` did not run).
    pub(crate) fn hand_back(&self, ready: &mut Ready) {
        if !ready.is_empty() {
            self.lock().spilled.append(ready);
        }
    }

    /// Marks the reclaimer thread as about to park (`true`, then it looks at the queue once more)
    /// or awake (`false`).
    pub(crate) fn set_reclaimer_idle(&self, idle: bool) {
        self.reclaimer_idle.store(idle, Ordering::SeqCst);
    }

    /// Records the reclaimer thread, so that [`Backlog::wake_reclaimer`] can unpark it.
    #[cfg(not(loom))]
    pub(crate) fn set_reclaimer(&self, thread: std::thread::Thread) {
        let _ = self.reclaimer.set(thread);
    }

    /// Wakes the reclaimer thread if it is parked.
    pub(crate) fn wake_reclaimer(&self) {
        #[cfg(not(loom))]
        if self.reclaimer_idle.swap(false, Ordering::AcqRel)
            && let Some(thread) = self.reclaimer.get()
        {
            thread.unpark();
        }
    }

    /// Adds the backlog's counters to `stats`.
    pub(crate) fn add_stats(&self, stats: &mut DomainStats) {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let load_usize = |a: &AtomicUsize| a.load(Ordering::Relaxed) as u64;
        stats.callbacks_deferred = load(&c.callbacks_deferred);
        stats.callbacks_run = load(&c.callbacks_run);
        stats.pending = load_usize(&c.pending);
        stats.peak_pending = load_usize(&c.peak_pending);
        stats.unreclaimed_bytes = load_usize(&c.unreclaimed_bytes);
        stats.peak_unreclaimed_bytes = load_usize(&c.peak_unreclaimed_bytes);
        stats.reader_longest_callback_ns = load(&c.reader_longest_callback_ns);
        stats.reader_reclaim_calls = load(&c.reader_reclaim_calls);
        stats.reader_longest_reclaim_ns = load(&c.reader_longest_reclaim_ns);
        stats.reclaimer_longest_batch_ns = load(&c.reclaimer_longest_batch_ns);
        stats.writer_longest_reclaim_ns = load(&c.writer_longest_reclaim_ns);
        stats.callbacks_spilled = load(&c.callbacks_spilled);
        stats.watermark_fallbacks = load(&c.watermark_fallbacks);
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        // The backlog goes with its domain: no reader, cell or thread refers to it any more, so
        // every grace period is over.
        let mut ready = self.lock().take_all();
        self.run_ready(&mut ready, usize::MAX, u64::MAX);
    }
}
