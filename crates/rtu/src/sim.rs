//! Runs the RMDP [`Policy`] on a virtual clock with exact unit costs: the schedule the analysis
//! reasons about, with every job's response time. Used to check the analysis (an admitted set
//! never misses; the response times never exceed the analysed ones) and to show a miss where the
//! analysis predicts one.
//!
//! The clock saturates: a dispatch whose cost passes `u64::MAX` ns ends the run at the horizon
//! instead of wrapping back to the past.

use crate::analysis::HandlerSpec;
use crate::policy::{Decision, Finished, Missed, Policy};

/// What a simulated run did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimResult {
    /// Every job that completed, in completion order.
    pub finished: Vec<Finished>,
    /// Jobs unfinished at their next release, or finished after it.
    pub misses: u64,
    /// Each of those jobs, in the order they were found.
    pub missed: Vec<Missed>,
    /// Iterations dispatched.
    pub dispatches: u64,
    /// Times a handler with work left was set aside for a higher-priority one.
    pub yields: u64,
}

impl SimResult {
    /// Least `deadline - completion` over finished jobs (negative: late), ns.
    pub fn min_slack_ns(&self, handlers: &[HandlerSpec]) -> Option<i64> {
        self.finished
            .iter()
            .map(|f| {
                let deadline = i128::from(f.release) + i128::from(handlers[f.handler].period_ns);
                let slack = deadline - i128::from(f.completion);
                // Clamped: a slack past i64 (292 years) is as good as infinite.
                slack.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
            })
            .min()
    }

    /// Worst response time of `handler`'s finished jobs.
    pub fn worst_response(&self, handler: usize) -> Option<u64> {
        self.finished.iter().filter(|f| f.handler == handler).map(Finished::response).max()
    }
}

/// Simulates `handlers` released first at `phases` (registration order) until `horizon` ns,
/// every unit costing what it declares.
pub fn simulate(handlers: &[HandlerSpec], phases: &[u64], horizon: u64) -> SimResult {
    let costs: Vec<u64> = handlers.iter().map(|h| h.unit_cost_ns).collect();
    simulate_with_costs(handlers, &costs, phases, horizon).0
}

/// As [`simulate`], with the units of handler `i` really costing `costs[i]`; returns the policy
/// too, for its per-handler counts (overruns, demotion).
pub fn simulate_with_costs(
    handlers: &[HandlerSpec],
    costs: &[u64],
    phases: &[u64],
    horizon: u64,
) -> (SimResult, Policy) {
    let mut policy = Policy::new(handlers, phases);
    let mut out = SimResult::default();
    let mut now = 0u64;
    let mut last: Option<usize> = None;
    while now < horizon {
        policy.release(now);
        // The policy queues each miss until its driver takes it.
        out.missed.extend(policy.take_missed());
        match policy.next(now) {
            Decision::Idle { until } => {
                last = None;
                now = until;
            }
            Decision::Run { handler, units } => {
                if let Some(prev) = last
                    && prev != handler
                    && policy.counts(prev).released > 0
                    && !finished_current(&out, prev, &policy)
                {
                    out.yields += 1;
                }
                out.dispatches += 1;
                let elapsed = units.saturating_mul(costs[handler]);
                now = now.saturating_add(elapsed);
                policy.account(handler, units, elapsed);
                let completed = policy.completed(handler, units, now);
                out.missed.extend(policy.take_missed());
                if let Some(f) = completed {
                    out.finished.push(f);
                    last = None;
                } else {
                    last = Some(handler);
                }
            }
        }
    }
    out.misses = policy.misses();
    (out, policy)
}

/// Whether `handler`'s current job has finished (its last finished job is its latest release).
fn finished_current(out: &SimResult, handler: usize, policy: &Policy) -> bool {
    let released = policy.counts(handler).released;
    out.finished.iter().rev().find(|f| f.handler == handler).is_some_and(|f| f.job + 1 == released)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_past_the_end_of_time_ends_the_run_instead_of_wrapping() {
        // Two units of 2^63 ns: the clock passes 2^64. Wrapped, it went back to 0 and the job
        // completed in time; saturated, the job ends at the end of time, a miss.
        let spec =
            HandlerSpec { name: "h".into(), period_ns: 10, batch: 2, iteration: 2, unit_cost_ns: 1 << 63 };
        let run = simulate(std::slice::from_ref(&spec), &[], 100);
        assert_eq!(run.finished.len(), 1);
        assert_eq!(run.finished[0].completion, u64::MAX);
        assert_eq!(run.misses, 1);
        assert_eq!(run.min_slack_ns(&[spec]), Some(i64::MIN), "clamped");
    }
}
