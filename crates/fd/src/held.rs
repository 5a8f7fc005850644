//! A member's own stall watch: the stretches when one of its threads was due on its core and
//! did not have it, timed by the thread itself.
//!
//! The experiments' stall watch (`kairos_metrics::stall`, one `SCHED_FIFO` 99 thread a core)
//! samples a core once per watch period, so a stall that begins and ends between two of its
//! wake-ups is invisible to it. The member's loop wakes every heartbeat period and can time its
//! own: a wake-up's lateness (asleep until its deadline, then not running), and a pass's wall
//! time less its CPU time (the thread's CPU clock, which leaves out the hypervisor's steal). A
//! thread that is due and off the CPU has had its core taken (an interrupt, the hypervisor,
//! anything above it in priority), so a stretch here is a stall of the machine as the member
//! met it, and the accuracy experiment can ask whether a member's silence coincides with one of
//! its own.
//!
//! A pass long *on* the CPU is told apart by where its time went. Without the kernel's
//! interrupt time accounting, interrupt and softirq work done in the thread's context is
//! charged to the thread, and a system call can carry work that is not its own (a veth's
//! receive work runs in its sender's `sendto`, with whatever else the softirq found queued).
//! Two measures of that work are taken: the pass's socket system calls (its sends and
//! receives, timed around the calls alone), and, where the kernel lets the member trace its
//! core ([`kairos_sys::irq_time`]; the loop pinned to it), the time interrupt handlers took
//! in the loop's context during the pass. Handlers that interrupted the loop ran while it held
//! the CPU, so their time adds to the time off it; the calls are timed by the wall clock and may hold either (a softirq run inside a
//! `sendto`, a preemption inside a call), so a pass's time lost is the larger of the calls and
//! the time off the CPU and in handlers together: never more than the pass lost. Its kind is
//! the largest part ([`HeldKind`]). A pass long in the member's own code is never a stall: it is
//! only counted ([`HeldRecord::long_own_work`]).

use serde::{Deserialize, Serialize};

/// Which of the member's threads was held off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldThread {
    /// The loop that sends the heartbeats.
    Loop,
    /// The application that bumps the liveness counter.
    Application,
}

/// How a thread was kept from its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldKind {
    /// Off the CPU while due: a wake-up late after a sleep, or a pass's wall time less its CPU
    /// time.
    OffCpu,
    /// On the CPU in the socket's system calls (kernel work in the thread's context).
    InKernel,
    /// On the CPU in interrupt handlers (hard interrupts and softirqs that ran while the
    /// thread held its core).
    InInterrupt,
}

/// A stretch `[from_ns, to_ns]` (`CLOCK_MONOTONIC`) in which the thread was due and was kept
/// from its work for `lost_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// When the thread was due (a wake-up's deadline, or a pass's start), ns.
    pub from_ns: u64,
    /// When it ran again (or the pass ended), ns.
    pub to_ns: u64,
    /// How long in the stretch it was off the CPU, in the kernel's calls or in interrupt
    /// handlers, ns (see the module doc).
    pub lost_ns: u64,
    /// Which thread.
    pub thread: HeldThread,
    /// How.
    pub kind: HeldKind,
    /// A pass's CPU time, ns (0 for a late wake-up).
    pub cpu_ns: u64,
    /// A pass's time in the socket's system calls, ns (0 for a late wake-up).
    pub syscall_ns: u64,
    /// A pass's time in interrupt handlers, ns (0 for a late wake-up, or where not timed).
    #[serde(default)]
    pub irq_ns: u64,
}

/// What a member's threads met over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldRecord {
    /// The stretches from the start of the measurement, in time order (`from_ns`; both
    /// threads' once [`HeldRecord::merged`]), up to the cap the watch was made with.
    pub stretches: Vec<Held>,
    /// Every stretch, kept or not.
    pub count: u64,
    /// Of those, the stretches lost mostly in interrupt handlers ([`HeldKind::InInterrupt`]).
    #[serde(default)]
    pub in_interrupts: u64,
    /// The loop's passes' time in interrupt handlers, in all, ns (0 where not timed).
    #[serde(default)]
    pub interrupt_ns: u64,
    /// Stretches from the start of the measurement past the cap, not kept.
    pub dropped: u64,
    /// Loop passes longer than the threshold on the CPU and not in the socket's calls (the
    /// member's own work, or interrupts in it): not stalls.
    pub long_own_work: u64,
    /// The longest of those, ns.
    pub worst_own_work_ns: u64,
    /// Asked to time the loop's interrupt handlers ([`kairos_sys::irq_time`]), why it could
    /// not (or only in part).
    #[serde(default)]
    pub interrupts_untimed: Option<String>,
}

impl HeldRecord {
    /// Both threads' records as one, stretches in time order.
    pub fn merged(mut self, other: HeldRecord) -> HeldRecord {
        self.stretches.extend(other.stretches);
        self.stretches.sort_by_key(|h| h.from_ns);
        self.count += other.count;
        self.in_interrupts += other.in_interrupts;
        self.interrupt_ns += other.interrupt_ns;
        self.dropped += other.dropped;
        self.long_own_work += other.long_own_work;
        self.worst_own_work_ns = self.worst_own_work_ns.max(other.worst_own_work_ns);
        self.interrupts_untimed = self.interrupts_untimed.or(other.interrupts_untimed);
        self
    }
}

/// The pass under way: when it began, the thread's CPU clock then, when it went to sleep, and
/// its time in the socket's calls.
#[derive(Debug, Clone, Copy)]
struct Pass {
    start_ns: u64,
    cpu_ns: u64,
    end_ns: u64,
    syscall_ns: u64,
}

/// One thread's watch; see the module doc.
#[derive(Debug)]
pub struct HeldWatch {
    thread: HeldThread,
    threshold_ns: u64,
    keep_from_ns: u64,
    cap: usize,
    record: HeldRecord,
    pass: Option<Pass>,
}

impl HeldWatch {
    /// A watch for `thread` that counts the stretches it was kept from its work longer than
    /// `threshold_ns`, and keeps the first `cap` of those that end at or after `keep_from_ns`
    /// (the measurement's start) whole.
    pub fn new(thread: HeldThread, threshold_ns: u64, keep_from_ns: u64, cap: usize) -> Self {
        // The room reserved now, as the member's suspicions are: a vector that grew in the loop
        // would copy megabytes at a doubling, itself a long pass.
        let record = HeldRecord { stretches: Vec::with_capacity(cap), ..HeldRecord::default() };
        Self { thread, threshold_ns, keep_from_ns, cap, record, pass: None }
    }

    /// The thread woke for a deadline `due_ns` and runs at `now_ns`, its CPU clock at
    /// `cpu_ns`; `slept`: it slept to the deadline (else the pass before ran past it, its own
    /// doing); `interrupts(from, to)`: the time interrupt handlers took in its context between
    /// two instants (0 where not timed). Closes the pass before: its CPU time is what the
    /// clock moved since it began (the sleep's system call included, a microsecond, which
    /// makes the off-CPU time smaller).
    pub fn woke(
        &mut self,
        due_ns: u64,
        now_ns: u64,
        cpu_ns: u64,
        slept: bool,
        interrupts: impl FnOnce(u64, u64) -> u64,
    ) {
        if let Some(p) = self.pass.take() {
            let wall = p.end_ns.saturating_sub(p.start_ns);
            let cpu = cpu_ns.saturating_sub(p.cpu_ns);
            let irq = interrupts(p.start_ns, p.end_ns);
            let off = wall.saturating_sub(cpu);
            self.record.interrupt_ns += irq;
            // Off the CPU and in handlers that interrupted the thread are disjoint (never
            // more than the pass); the calls' wall time may hold either.
            let lost = (off + irq).min(wall).max(p.syscall_ns);
            if lost > self.threshold_ns {
                let kind = if p.syscall_ns > off + irq {
                    HeldKind::InKernel
                } else if irq > off {
                    HeldKind::InInterrupt
                } else {
                    HeldKind::OffCpu
                };
                self.push(Held {
                    from_ns: p.start_ns,
                    to_ns: p.end_ns,
                    lost_ns: lost,
                    thread: self.thread,
                    kind,
                    cpu_ns: cpu,
                    syscall_ns: p.syscall_ns,
                    irq_ns: irq,
                });
            } else if wall > self.threshold_ns {
                self.record.long_own_work += 1;
                self.record.worst_own_work_ns = self.record.worst_own_work_ns.max(wall);
            }
        }
        if slept {
            self.woke_late(due_ns, now_ns);
        }
        self.pass = Some(Pass { start_ns: now_ns, cpu_ns, end_ns: now_ns, syscall_ns: 0 });
    }

    /// The thread woke for `due_ns` at `now_ns` (no pass timed: a thread whose work is an
    /// instant).
    pub fn woke_late(&mut self, due_ns: u64, now_ns: u64) {
        let late = now_ns.saturating_sub(due_ns);
        if late > self.threshold_ns {
            self.push(Held {
                from_ns: due_ns,
                to_ns: now_ns,
                lost_ns: late,
                thread: self.thread,
                kind: HeldKind::OffCpu,
                cpu_ns: 0,
                syscall_ns: 0,
                irq_ns: 0,
            });
        }
    }

    /// The pass under way ends at `now_ns` (the thread goes to sleep), `syscall_ns` of it
    /// spent in the socket's system calls.
    pub fn pass_ended(&mut self, now_ns: u64, syscall_ns: u64) {
        if let Some(p) = &mut self.pass {
            p.end_ns = now_ns;
            p.syscall_ns = syscall_ns;
        }
    }

    fn push(&mut self, held: Held) {
        self.record.count += 1;
        self.record.in_interrupts += u64::from(held.kind == HeldKind::InInterrupt);
        if held.to_ns < self.keep_from_ns {
            return;
        }
        if self.record.stretches.len() < self.cap {
            self.record.stretches.push(held);
        } else {
            self.record.dropped += 1;
        }
    }

    /// Says the thread's time in interrupt handlers was not timed, and why.
    pub fn interrupts_untimed(&mut self, why: String) {
        self.record.interrupts_untimed = Some(why);
    }

    /// What it saw (a pass still open is not judged: it has no CPU time yet).
    pub fn finish(self) -> HeldRecord {
        self.record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn a_late_wake_up_after_a_sleep_is_held_and_one_after_an_overrun_is_not() {
        let mut w = HeldWatch::new(HeldThread::Loop, 50 * US, 0, 10);
        w.woke(100 * US, 100 * US + 10 * US, 0, true, |_, _| 0);
        w.pass_ended(115 * US, 3 * US);
        // 80 us late after a sleep: the core was taken.
        w.woke(200 * US, 280 * US, 5 * US, true, |_, _| 0);
        w.pass_ended(285 * US, 3 * US);
        // 80 us late, but the pass before ran past the deadline: its own doing.
        w.woke(300 * US, 380 * US, 10 * US, false, |_, _| 0);
        let r = w.finish();
        assert_eq!(r.count, 1);
        assert_eq!(
            r.stretches,
            vec![Held {
                from_ns: 200 * US,
                to_ns: 280 * US,
                lost_ns: 80 * US,
                thread: HeldThread::Loop,
                kind: HeldKind::OffCpu,
                cpu_ns: 0,
                syscall_ns: 0,
                irq_ns: 0,
            }]
        );
    }

    #[test]
    fn a_pass_off_the_cpu_in_the_kernel_or_in_interrupts_is_a_stall_and_one_in_its_own_work_is_not() {
        let mut w = HeldWatch::new(HeldThread::Loop, 50 * US, 0, 10);
        w.woke(0, 0, 0, true, |_, _| 0);
        // 120 us of wall time, 10 us of CPU: off the CPU for 110 us, and 5 us in the calls.
        w.pass_ended(120 * US, 5 * US);
        w.woke(200 * US, 200 * US, 10 * US, true, |_, _| 0);
        // 90 us of wall time, 85 us of CPU (the clock at the next wake-up), 70 us of it in
        // the socket's system calls.
        w.pass_ended(290 * US, 70 * US);
        w.woke(400 * US, 401 * US, 95 * US, true, |_, _| 0);
        // 90 us on the CPU, 10 us of it in the socket's calls: the member's own work.
        w.pass_ended(491 * US, 10 * US);
        w.woke(600 * US, 600 * US, 185 * US, true, |_, _| 0);
        // 90 us on the CPU, 70 us of it in interrupt handlers, 10 in the calls (overlapping).
        w.pass_ended(690 * US, 10 * US);
        w.woke(800 * US, 800 * US, 275 * US, true, |from, to| {
            assert_eq!((from, to), (600 * US, 690 * US), "asked about the pass's own span");
            70 * US
        });
        // 100 us of wall time, 70 us on the CPU, 40 of it in handlers: 30 off and 40 in them,
        // 70 lost, mostly to handlers.
        w.pass_ended(900 * US, 0);
        w.woke(1_000 * US, 1_000 * US, 345 * US, true, |_, _| 40 * US);
        // A handler time larger than the pass (a clock that miscounted): never more than it.
        w.pass_ended(1_060 * US, 0);
        w.woke(1_200 * US, 1_200 * US, 405 * US, true, |_, _| 500 * US);
        let r = w.finish();
        let got: Vec<_> = r
            .stretches
            .iter()
            .map(|h| (h.from_ns, h.to_ns, h.lost_ns, h.kind, h.cpu_ns, h.syscall_ns, h.irq_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 120 * US, 110 * US, HeldKind::OffCpu, 10 * US, 5 * US, 0),
                (200 * US, 290 * US, 70 * US, HeldKind::InKernel, 85 * US, 70 * US, 0),
                (600 * US, 690 * US, 70 * US, HeldKind::InInterrupt, 90 * US, 10 * US, 70 * US),
                (800 * US, 900 * US, 70 * US, HeldKind::InInterrupt, 70 * US, 0, 40 * US),
                (1_000 * US, 1_060 * US, 60 * US, HeldKind::InInterrupt, 60 * US, 0, 500 * US),
            ]
        );
        assert_eq!((r.count, r.in_interrupts, r.interrupt_ns), (5, 3, 610 * US));
        assert_eq!((r.long_own_work, r.worst_own_work_ns), (1, 90 * US));
    }

    #[test]
    fn only_stretches_of_the_measurement_are_kept_up_to_the_cap_and_records_merge_in_time_order() {
        // Kept from 1,000 us: the stretch that ended before is counted, not kept.
        let mut app = HeldWatch::new(HeldThread::Application, 50 * US, 1_000 * US, 2);
        for k in 0..=3 {
            app.woke_late(k * 1_000 * US, k * 1_000 * US + 60 * US);
        }
        let app = app.finish();
        assert_eq!((app.count, app.stretches.len(), app.dropped), (4, 2, 1));
        let mut lp = HeldWatch::new(HeldThread::Loop, 50 * US, 1_000 * US, 2);
        lp.woke_late(1_500 * US, 1_600 * US);
        let all = lp.finish().merged(app);
        assert_eq!((all.count, all.dropped), (5, 1));
        let froms: Vec<u64> = all.stretches.iter().map(|h| h.from_ns).collect();
        assert_eq!(froms, vec![1_000 * US, 1_500 * US, 2_000 * US]);
    }
}
