//! The RMDP policy as a sans-I/O state machine: releases, completions and the current time go
//! in; which handler runs next (and how many units, one iteration at most) or how long to sleep
//! comes out. It never reads a clock, sleeps or spawns, so it runs the same on the virtual clock
//! of the tests and simulations as under the real-time shell.
//!
//! Rules (the source's section 4.1): rate-monotonic priorities; the highest-priority handler
//! with work left in its period is dispatched for one iteration (`b` units, or what is left),
//! which is never interrupted; between iterations the shell asks [`Policy::should_yield`] (one
//! flag) and, when a higher-priority handler has been released, hands the rest of the period's
//! work back: the handler resumes later in the same period. A handler that has done its `B`
//! units waits for its next period. A job that completes after its deadline (the next release)
//! is a miss; one that still has iterations left when its next release is handled is a miss too,
//! and the new job starts afresh.
//!
//! Misbehaviour: the shell reports the CPU time of each iteration ([`Policy::account`]). An
//! iteration over its declared cost (with a tolerance) is an overrun, counted with its excess. A
//! *job* whose iterations together take more than the job's declared cost (batch times unit
//! cost, with the same tolerance) overran its reservation: after [`Policy::DEMOTE_AFTER`] such
//! jobs in a row the handler is demoted: it drops below every admitted handler and runs one unit
//! per dispatch, so the damage it can still do to the others is one unit's (overrunning) cost per
//! dispatch instead of a whole iteration's. Demotion is judged per job, not per iteration,
//! because an interrupt inside a short iteration can push it over its tolerance (this kernel
//! charges interrupt time to the task it interrupts) while the job as a whole stays within its
//! reservation: judged per iteration, interrupt bursts under `stress-ng` demoted innocent
//! handlers, which then missed deadlines.
//!
//! Arithmetic: times are `u64` nanoseconds and every sum and product saturates, so a spec the
//! analysis would refuse (a zero or huge period, a cost past 64 bits; the shell's
//! `register_unadmitted` takes any) cannot wrap a release into the past or loop forever: a zero
//! period counts as 1 ns, and a release that saturates at `u64::MAX` is never reached.

use crate::analysis::{HandlerSpec, priority_order};

/// What the shell should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Run `units` units of handler `handler` (registration index) without interruption.
    Run {
        /// Registration index.
        handler: usize,
        /// Units to run, one iteration at most.
        units: u64,
    },
    /// Nothing to run before `until` (the next release).
    Idle {
        /// The next release, ns on the policy's clock (`u64::MAX`: none).
        until: u64,
    },
}

/// A job that ended at a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Registration index.
    pub handler: usize,
    /// Job number (0 is the first release).
    pub job: u64,
    /// When the job was released, ns on the policy's clock.
    pub release: u64,
    /// When its last unit was done, ns on the policy's clock.
    pub completion: u64,
}

impl Finished {
    /// Completion minus release, ns (0 for a completion recorded before its release).
    pub fn response(&self) -> u64 {
        self.completion.saturating_sub(self.release)
    }
}

/// A job that missed its deadline: dropped unfinished at its next release, or completed after
/// it (`completion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missed {
    /// Registration index.
    pub handler: usize,
    /// Job number (0 is the first release).
    pub job: u64,
    /// When the job was released, ns on the policy's clock.
    pub release: u64,
    /// Its deadline (the next release), ns on the policy's clock.
    pub deadline: u64,
    /// When it completed, late; `None`: dropped unfinished at its deadline.
    pub completion: Option<u64>,
    /// The handler had been demoted for overrunning when the job missed: the analysis's promise
    /// no longer covered it (it ran below every admitted handler, one unit a dispatch).
    pub demoted: bool,
}

#[derive(Debug, Clone)]
struct Slot {
    spec: HandlerSpec,
    /// Release time of the current job.
    release: u64,
    next_release: u64,
    job: u64,
    /// Units left in the current job (0: done for this period).
    remaining: u64,
    started: bool,
    misses: u64,
    completed: u64,
    overruns: u64,
    /// CPU time the current job has taken, and whether it went over its reservation.
    job_cpu_ns: u64,
    job_overran: bool,
    job_overruns: u64,
    /// Jobs in a row that overran (a job within its reservation resets it).
    streak: u64,
    /// The most work (declared cost) a job still had when its deadline came.
    worst_unfinished_ns: u64,
    worst_excess_ns: u64,
    demoted: bool,
    /// Stopped handlers release no jobs (their current one is dropped).
    enabled: bool,
}

/// Per-handler counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Jobs released.
    pub released: u64,
    /// Jobs completed (late ones included).
    pub completed: u64,
    /// Jobs that missed their deadline.
    pub misses: u64,
    /// Iterations that took longer than declared (with the tolerance).
    pub overruns: u64,
    /// The largest excess of an overrunning iteration over its declared cost, ns.
    pub worst_excess_ns: u64,
    /// Jobs whose iterations together took more than the job's declared cost (the tolerance
    /// included): what demotion is judged on.
    pub job_overruns: u64,
    /// Demoted below every other handler for overrunning.
    pub demoted: bool,
    /// The most work a job still had at its deadline (it was dropped): its slack was below
    /// minus this.
    pub worst_unfinished_ns: u64,
}

/// The RMDP policy over a set of handlers (see the module's doc for its rules).
#[derive(Debug, Clone)]
pub struct Policy {
    /// In registration order.
    slots: Vec<Slot>,
    /// Registration indices from the highest priority down.
    order: Vec<usize>,
    /// A higher-priority release happened since the running handler was dispatched.
    yield_flag: bool,
    running: Option<usize>,
    /// Misses not yet taken by [`Policy::take_missed`].
    missed: Vec<Missed>,
}

impl Policy {
    /// Handlers in registration order; handler `i`'s first release is at `phases[i]` (0 when
    /// `phases` is shorter).
    pub fn new(handlers: &[HandlerSpec], phases: &[u64]) -> Self {
        let slots = handlers
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let phase = phases.get(i).copied().unwrap_or(0);
                Slot {
                    spec: h.clone(),
                    release: phase,
                    next_release: phase,
                    job: 0,
                    remaining: 0,
                    started: false,
                    misses: 0,
                    completed: 0,
                    overruns: 0,
                    job_cpu_ns: 0,
                    job_overran: false,
                    job_overruns: 0,
                    streak: 0,
                    worst_unfinished_ns: 0,
                    worst_excess_ns: 0,
                    demoted: false,
                    enabled: true,
                }
            })
            .collect();
        Self { slots, order: priority_order(handlers), yield_flag: false, running: None, missed: Vec::new() }
    }

    /// Releases every job due by `now`; a release above the running handler's priority raises
    /// the yield flag.
    pub fn release(&mut self, now: u64) {
        let running_rank = self.running.map(|r| self.rank(r));
        for rank in 0..self.order.len() {
            let i = self.order[rank];
            let s = &mut self.slots[i];
            if !s.enabled {
                s.remaining = 0;
                // Skips the stopped periods in one step: a long-stopped handler with a short
                // period would otherwise loop once per period it missed.
                if s.next_release <= now {
                    let period = s.spec.period_ns.max(1);
                    let skipped = ((now - s.next_release) / period).saturating_add(1);
                    s.next_release = s.next_release.saturating_add(skipped.saturating_mul(period));
                }
                continue;
            }
            // A release saturated at u64::MAX is never due.
            while s.next_release <= now && s.next_release < u64::MAX {
                if s.started && s.remaining > 0 {
                    s.misses += 1;
                    s.worst_unfinished_ns =
                        s.worst_unfinished_ns.max(s.remaining.saturating_mul(s.spec.unit_cost_ns));
                    self.missed.push(Missed {
                        handler: i,
                        job: s.job,
                        release: s.release,
                        deadline: s.next_release,
                        completion: None,
                        demoted: s.demoted,
                    });
                }
                s.release = s.next_release;
                s.next_release = s.next_release.saturating_add(s.spec.period_ns.max(1));
                s.job = if s.started { s.job + 1 } else { 0 };
                s.started = true;
                s.remaining = s.spec.batch;
                s.job_cpu_ns = 0;
                s.job_overran = false;
                if running_rank.is_some_and(|r| rank < r) {
                    self.yield_flag = true;
                }
            }
        }
    }

    fn rank(&self, handler: usize) -> usize {
        self.order.iter().position(|&i| i == handler).expect("a registered handler")
    }

    /// The flag a handler checks between iterations: a higher-priority handler is waiting.
    pub fn should_yield(&self) -> bool {
        self.yield_flag
    }

    /// What to run at `now` (call [`Policy::release`] first).
    pub fn next(&mut self, _now: u64) -> Decision {
        self.yield_flag = false;
        for &i in &self.order {
            let s = &self.slots[i];
            if s.started && s.remaining > 0 {
                self.running = Some(i);
                let iteration = if s.demoted { 1 } else { s.spec.iteration };
                return Decision::Run { handler: i, units: iteration.min(s.remaining) };
            }
        }
        self.running = None;
        Decision::Idle { until: self.slots.iter().map(|s| s.next_release).min().unwrap_or(u64::MAX) }
    }

    /// `handler` processed `units` units, ending at `now`; returns the job if it finished.
    pub fn completed(&mut self, handler: usize, units: u64, now: u64) -> Option<Finished> {
        let s = &mut self.slots[handler];
        s.remaining = s.remaining.saturating_sub(units);
        if s.remaining > 0 || !s.started {
            return None;
        }
        s.completed += 1;
        if !s.job_overran {
            s.streak = 0;
        }
        let deadline = s.release.saturating_add(s.spec.period_ns);
        if now > deadline {
            s.misses += 1;
            self.missed.push(Missed {
                handler,
                job: s.job,
                release: s.release,
                deadline,
                completion: Some(now),
                demoted: s.demoted,
            });
        }
        Some(Finished { handler, job: s.job, release: s.release, completion: now })
    }

    /// What `handler` (registration index) has done so far.
    pub fn counts(&self, handler: usize) -> Counts {
        let s = &self.slots[handler];
        Counts {
            released: if s.started { s.job + 1 } else { 0 },
            completed: s.completed,
            misses: s.misses,
            overruns: s.overruns,
            worst_excess_ns: s.worst_excess_ns,
            job_overruns: s.job_overruns,
            demoted: s.demoted,
            worst_unfinished_ns: s.worst_unfinished_ns,
        }
    }

    /// The handler ran out of work before its batch (an empty queue): its job for this period
    /// ends now.
    pub fn finish(&mut self, handler: usize, now: u64) -> Option<Finished> {
        let left = self.slots[handler].remaining;
        if left == 0 {
            return None;
        }
        self.completed(handler, left, now)
    }

    /// Stops (no more releases; the current job is dropped) or restarts a handler.
    pub fn set_enabled(&mut self, handler: usize, enabled: bool) {
        self.slots[handler].enabled = enabled;
    }

    /// New parameters for a handler (admission is the caller's); its priority follows its new
    /// period, and the change applies from its next release.
    pub fn set_spec(&mut self, handler: usize, spec: HandlerSpec) {
        self.slots[handler].spec = spec;
        let specs: Vec<HandlerSpec> = self.slots.iter().map(|s| s.spec.clone()).collect();
        self.order = priority_order(&specs);
        let slots = &self.slots;
        self.order.sort_by_key(|&i| slots[i].demoted);
    }

    /// Overrunning jobs in a row before a handler is demoted: one alone is more likely the
    /// machine (an interrupt storm, a stolen vCPU) than the handler.
    pub const DEMOTE_AFTER: u64 = 3;
    /// An iteration or job may take this much more than declared (1/4) before it counts as an
    /// overrun: clocks and caches are not exact...
    pub const TOLERANCE_DIVISOR: u64 = 4;
    /// ... and at least this much more, ns: an interrupt costs microseconds.
    pub const TOLERANCE_FLOOR_NS: u64 = 20_000;

    fn over(declared: u64, taken: u64) -> bool {
        taken > declared.saturating_add((declared / Self::TOLERANCE_DIVISOR).max(Self::TOLERANCE_FLOOR_NS))
    }

    /// The shell measured `elapsed_ns` of CPU time for `units` units of `handler`: counts an
    /// iteration overrun when it exceeds the declared cost by more than the tolerance, charges
    /// the time to the job, and demotes after [`Policy::DEMOTE_AFTER`] jobs in a row that
    /// overran their reservation. Returns the iteration's excess when it was an overrun.
    pub fn account(&mut self, handler: usize, units: u64, elapsed_ns: u64) -> Option<u64> {
        let s = &mut self.slots[handler];
        s.job_cpu_ns = s.job_cpu_ns.saturating_add(elapsed_ns);
        if !s.job_overran && Self::over(s.spec.wcet_ns(), s.job_cpu_ns) {
            s.job_overran = true;
            s.job_overruns += 1;
            s.streak += 1;
            if s.streak >= Self::DEMOTE_AFTER && !s.demoted {
                s.demoted = true;
                // Demoted handlers go below every other one, keeping their order among themselves.
                let slots = &self.slots;
                self.order.sort_by_key(|&i| slots[i].demoted);
            }
        }
        let s = &mut self.slots[handler];
        let declared = units.saturating_mul(s.spec.unit_cost_ns);
        if !Self::over(declared, elapsed_ns) {
            return None;
        }
        let excess = elapsed_ns - declared;
        s.overruns += 1;
        s.worst_excess_ns = s.worst_excess_ns.max(excess);
        Some(excess)
    }

    /// The misses since the last call, in the order they were found (the counts keep them
    /// all; the caller keeps what it needs).
    pub fn take_missed(&mut self) -> Vec<Missed> {
        std::mem::take(&mut self.missed)
    }

    /// Misses counted so far, all handlers.
    pub fn misses(&self) -> u64 {
        self.slots.iter().map(|s| s.misses).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_jobs_are_kept_with_their_times() {
        let spec = HandlerSpec { name: "h".into(), period_ns: 10, batch: 2, iteration: 1, unit_cost_ns: 1 };
        let mut p = Policy::new(&[spec], &[]);
        p.release(0);
        assert_eq!(p.next(0), Decision::Run { handler: 0, units: 1 });
        assert_eq!(p.completed(0, 1, 1), None);
        // Job 0 still has a unit at its deadline: dropped.
        p.release(10);
        // Job 1 completes at 25, after its deadline at 20 (releases are handled late here).
        assert_eq!(p.completed(0, 2, 25).map(|f| f.job), Some(1));
        // Job 2 completes in time.
        p.release(25);
        assert!(p.completed(0, 2, 28).is_some());
        let missed = p.take_missed();
        assert_eq!(
            missed,
            vec![
                Missed { handler: 0, job: 0, release: 0, deadline: 10, completion: None, demoted: false },
                Missed {
                    handler: 0,
                    job: 1,
                    release: 10,
                    deadline: 20,
                    completion: Some(25),
                    demoted: false
                },
            ]
        );
        assert_eq!(p.counts(0).misses, 2);
        assert!(p.take_missed().is_empty(), "taken once");
    }

    #[test]
    fn releases_past_the_end_of_time_saturate_instead_of_wrapping() {
        // First release at 10 with a period of u64::MAX ns: the next release is past 2^64;
        // wrapped, it came at 9 and dropped the job as a miss at its own release.
        let spec =
            HandlerSpec { name: "h".into(), period_ns: u64::MAX, batch: 2, iteration: 2, unit_cost_ns: 3 };
        let mut p = Policy::new(std::slice::from_ref(&spec), &[10]);
        p.release(10);
        assert_eq!(p.next(10), Decision::Run { handler: 0, units: 2 });
        p.release(11);
        assert_eq!(p.completed(0, 2, 16).map(|f| f.response()), Some(6));
        assert_eq!(p.misses(), 0);
        assert_eq!(p.next(u64::MAX - 1), Decision::Idle { until: u64::MAX });
        // A zero period (which the analysis refuses, but an unadmitted registration takes)
        // counts as 1 ns instead of releasing forever at the same instant.
        let mut p = Policy::new(&[HandlerSpec { period_ns: 0, ..spec }], &[]);
        p.release(5);
        assert_eq!(p.counts(0).released, 6);
        // Overruns of costs past 2^64 saturate too.
        assert_eq!(p.account(0, u64::MAX, u64::MAX), None);
    }

    #[test]
    fn demotion_is_judged_per_job_not_per_iteration() {
        // 10 units of 100 us in iterations of 1: a job is declared at 1 ms (tolerance 250 us).
        let spec = HandlerSpec {
            name: "h".into(),
            period_ns: 10_000_000,
            batch: 10,
            iteration: 1,
            unit_cost_ns: 100_000,
        };
        let mut p = Policy::new(&[spec], &[]);
        let mut t = 0;
        // Three jobs, each with one iteration hit by a 150 us interrupt: each of those iterations
        // overran (250 us against 100 + 25), but each job took 1.15 ms of its 1 ms + 250 us.
        for _ in 0..3 {
            p.release(t);
            for i in 0..10 {
                assert!(matches!(p.next(t), Decision::Run { units: 1, .. }));
                let took = if i == 4 { 250_000 } else { 100_000 };
                assert_eq!(p.account(0, 1, took).is_some(), i == 4);
                p.completed(0, 1, t + 1);
            }
            t += 10_000_000;
        }
        let c = p.counts(0);
        assert_eq!((c.overruns, c.job_overruns, c.demoted), (3, 0, false));
        // Three jobs in a row over their reservation: demoted.
        for _ in 0..3 {
            p.release(t);
            for _ in 0..10 {
                p.next(t);
                p.account(0, 1, 130_000);
                p.completed(0, 1, t + 1);
            }
            t += 10_000_000;
        }
        let c = p.counts(0);
        assert_eq!((c.job_overruns, c.demoted), (3, true));
        assert_eq!(c.worst_excess_ns, 150_000);
        assert!(p.take_missed().is_empty());
        // A job left unfinished after the demotion misses as a demoted handler's.
        p.release(t);
        p.release(t + 10_000_000);
        let missed = p.take_missed();
        assert_eq!(missed.iter().map(|m| (m.job, m.demoted)).collect::<Vec<_>>(), [(6, true)]);
    }

    #[test]
    fn a_miss_before_any_demotion_is_not_marked_demoted() {
        let spec =
            HandlerSpec { name: "h".into(), period_ns: 1_000, batch: 2, iteration: 1, unit_cost_ns: 100 };
        let mut p = Policy::new(&[spec], &[]);
        p.release(0);
        p.release(1_000);
        let missed = p.take_missed();
        assert_eq!(missed.iter().map(|m| (m.job, m.demoted)).collect::<Vec<_>>(), [(0, false)]);
    }
}
