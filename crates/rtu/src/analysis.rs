//! Admission control: exact response-time analysis for fixed-priority scheduling with deferred
//! preemption (FPDS), the model of RMDP.
//!
//! A handler with period `T`, batch `B` units, iteration `b` units and unit cost `c` has a
//! worst-case execution `C = B c` per period, made of non-preemptible subjobs of `b c` each, the
//! last one `F` (what is left: `(B - (ceil(B/b) - 1) b) c`). Priorities are rate-monotonic
//! (shorter period first; ties by registration order), deadlines equal periods.
//!
//! For handler `i` (Bril, Lukkien, Verhaegh 2009):
//! - blocking `Bl_i`: the longest subjob of any lower-priority handler, which may have just
//!   started when `i` is released;
//! - the level-i busy period `L = Bl_i + sum_{j <= i} ceil(L / T_j) C_j` (least fixed point), which
//!   holds `ceil(L / T_i)` jobs of `i`;
//! - for each job `k` of it, the start of its final subjob
//!   `S_k = Bl_i + (k + 1) C_i - F_i + sum_{j < i} (floor(S_k / T_j) + 1) C_j`, and its response
//!   time `R_k = S_k + F_i - k T_i`;
//! - `i` is schedulable when every `R_k <= T_i`.
//!
//! Checking only the first job is optimistic under deferred preemption: a job's final subjob
//! cannot be preempted, so it can push the next job's higher-priority interference later and
//! make that job the one that misses (the tests keep such a set). The Liu-Layland bound
//! `n (2^(1/n) - 1)` is reported beside it: a sufficient test for fully preemptive RM that RTA
//! beats (sets above it admitted) and that does not even hold for FPDS once blocking is counted.
//!
//! Times are integer nanoseconds, and every sum and product is checked: a value past 64 bits is
//! past the analysis' horizon too (the horizon fits in 64 bits), so an overflow refuses the
//! handler as unbounded, never wraps into an admission.
//!
//! Work per call is bounded: the busy period is followed up to [`HORIZON_PERIODS`] of the
//! handler's periods, and the fixed-point iterations of a whole analysis evaluate at most
//! [`STEP_BUDGET`] interference terms; a handler whose busy period is not settled within either
//! is refused with the reason ([`Unbounded`]).

use serde::Serialize;

/// The analysis follows a level-i busy period up to this many of handler i's periods; a longer
/// one counts as unbounded and the handler is refused.
pub const HORIZON_PERIODS: u64 = 100_000;

/// The longest period the analysis represents, ns (100,000 s, under 28 hours): the horizon,
/// [`HORIZON_PERIODS`] such periods, must fit in 64-bit nanoseconds.
pub const MAX_PERIOD_NS: u64 = 100_000_000_000_000;

/// A job may cost (batch x unit cost) at most this many of its periods: more can never meet a
/// deadline, and the bound keeps every product the analysis forms far inside 64 bits.
pub const MAX_COST_PERIODS: u64 = 1_000;

/// Interference terms (one handler's demand at one instant) a whole analysis may evaluate in its
/// fixed-point iterations, a few hundredths of a second: a set whose busy periods take more is
/// refused rather than analysed for hours (a 1 ns handler beside a day-long one can need 10^19
/// steps).
pub const STEP_BUDGET: u64 = 10_000_000;

const _: () = assert!(MAX_PERIOD_NS <= u64::MAX / HORIZON_PERIODS);

/// What admission needs of a handler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandlerSpec {
    /// The handler's name, for reports and errors.
    pub name: String,
    /// Period, ns (1 to [`MAX_PERIOD_NS`]); the deadline is the next release.
    pub period_ns: u64,
    /// Units of work per period (B).
    pub batch: u64,
    /// Units processed without interruption (b).
    pub iteration: u64,
    /// Cost of one unit, ns.
    pub unit_cost_ns: u64,
}

impl HandlerSpec {
    /// Worst-case execution per period, C = B c (saturating, for specs [`HandlerSpec::validate`]
    /// refuses).
    pub fn wcet_ns(&self) -> u64 {
        self.batch.saturating_mul(self.unit_cost_ns)
    }

    /// The longest non-preemptible subjob, b c (at most C).
    pub fn subjob_ns(&self) -> u64 {
        self.iteration.min(self.batch).saturating_mul(self.unit_cost_ns)
    }

    /// The final subjob, F.
    pub fn final_subjob_ns(&self) -> u64 {
        let b = self.iteration.min(self.batch).max(1);
        let rest = self.batch % b;
        (if rest == 0 { b } else { rest }).saturating_mul(self.unit_cost_ns)
    }

    /// C / T: the share of a core the handler reserves.
    pub fn utilisation(&self) -> f64 {
        self.wcet_ns() as f64 / self.period_ns.max(1) as f64
    }

    /// Checks that the analysis can represent the handler: a period of 1 ns to
    /// [`MAX_PERIOD_NS`], a batch, iteration and unit cost of at least 1, and a job cost of at
    /// most [`MAX_COST_PERIODS`] periods.
    pub fn validate(&self) -> Result<(), AnalysisError> {
        let bad = |what: String| AnalysisError::Invalid { name: self.name.clone(), what };
        if self.period_ns == 0 {
            return Err(bad("the period must be positive".into()));
        }
        if self.period_ns > MAX_PERIOD_NS {
            return Err(bad(format!(
                "the period is {} ns, beyond the longest the analysis represents, {MAX_PERIOD_NS} ns \
                 (100000 s: {HORIZON_PERIODS} periods must fit in 64-bit nanoseconds)",
                self.period_ns
            )));
        }
        if self.batch == 0 || self.iteration == 0 {
            return Err(bad("batch and iteration must be at least 1".into()));
        }
        if self.unit_cost_ns == 0 {
            return Err(bad("the unit cost must be positive".into()));
        }
        if self.batch.checked_mul(self.unit_cost_ns).is_none_or(|c| c > self.period_ns * MAX_COST_PERIODS) {
            return Err(bad(format!(
                "batch x unit cost is more than {MAX_COST_PERIODS} periods, the most the analysis \
                 represents (such a job can never meet its deadline)"
            )));
        }
        Ok(())
    }
}

/// Why a set of handlers could not be analysed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnalysisError {
    /// A handler's parameters are out of the analysis' range ([`HandlerSpec::validate`]).
    #[error("handler '{name}': {what}")]
    Invalid {
        /// The handler's name.
        name: String,
        /// What is wrong, with the limit.
        what: String,
    },
}

/// Why a handler has no response-time bound (it is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unbounded {
    /// The handlers at its priority and above need more than the processor.
    Overloaded,
    /// Its level-i busy period runs past [`HORIZON_PERIODS`] of its periods.
    BeyondHorizon,
    /// The analysis spent its [`STEP_BUDGET`] before the busy period ended.
    StepBudget,
}

impl std::fmt::Display for Unbounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Overloaded => "the handlers at its priority and above need more than the processor",
            Self::BeyondHorizon => "its busy period runs past the analysis' horizon (100000 periods)",
            Self::StepBudget => "the analysis' step budget ran out before its busy period ended",
        })
    }
}

/// One handler's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandlerAnalysis {
    /// The handler's name.
    pub name: String,
    /// 0 is the highest.
    pub priority: usize,
    /// C / T.
    pub utilisation: f64,
    /// The longest lower-priority subjob that can delay it, ns.
    pub blocking_ns: u64,
    /// Worst response time over the jobs of the level-i busy period (`None`: unbounded, see
    /// `unbounded`).
    pub response_time_ns: Option<u64>,
    /// Why there is no response time, when there is none.
    pub unbounded: Option<Unbounded>,
    /// The job of the busy period with the worst response time (0 is the first).
    pub worst_job: usize,
    /// Jobs of the busy period checked.
    pub jobs_checked: usize,
    /// Every job of the busy period meets its deadline.
    pub schedulable: bool,
}

/// The verdict on a set of handlers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// Every handler is schedulable.
    pub admitted: bool,
    /// In registration order.
    pub handlers: Vec<HandlerAnalysis>,
    /// Total utilisation.
    pub utilisation: f64,
    /// The Liu-Layland bound for this many handlers.
    pub liu_layland_bound: f64,
}

/// Rate-monotonic priorities: registration indices from the highest priority down.
pub fn priority_order(handlers: &[HandlerSpec]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..handlers.len()).collect();
    order.sort_by_key(|&i| (handlers[i].period_ns, i));
    order
}

/// Analyses `handlers` (registration order) under RMDP; an error when a handler is out of the
/// analysis' range ([`HandlerSpec::validate`]).
pub fn analyse(handlers: &[HandlerSpec]) -> Result<Analysis, AnalysisError> {
    for h in handlers {
        h.validate()?;
    }
    let order = priority_order(handlers);
    let mut budget = STEP_BUDGET;
    let mut out: Vec<Option<HandlerAnalysis>> = vec![None; handlers.len()];
    for (p, &i) in order.iter().enumerate() {
        let h = &handlers[i];
        let higher: Vec<&HandlerSpec> = order[..p].iter().map(|&j| &handlers[j]).collect();
        let blocking = order[p + 1..].iter().map(|&j| handlers[j].subjob_ns()).max().unwrap_or(0);
        let (response, worst_job, jobs, unbounded) = match job_responses_of(h, &higher, blocking, &mut budget)
        {
            Err(why) => (None, 0, 0, Some(why)),
            Ok(r) => {
                // The busy period holds one job at least.
                let (k, &worst) = r
                    .iter()
                    .enumerate()
                    .max_by_key(|&(k, &x)| (x, std::cmp::Reverse(k)))
                    .expect("one job at least");
                (Some(worst), k, r.len(), None)
            }
        };
        out[i] = Some(HandlerAnalysis {
            name: h.name.clone(),
            priority: p,
            utilisation: h.utilisation(),
            blocking_ns: blocking,
            response_time_ns: response,
            unbounded,
            worst_job,
            jobs_checked: jobs,
            schedulable: response.is_some_and(|r| r <= h.period_ns),
        });
    }
    // `order` is a permutation: every slot was filled.
    let handlers_out: Vec<HandlerAnalysis> =
        out.into_iter().map(|h| h.expect("every handler analysed")).collect();
    let n = handlers.len() as f64;
    Ok(Analysis {
        admitted: handlers_out.iter().all(|h| h.schedulable),
        handlers: handlers_out,
        utilisation: handlers.iter().map(HandlerSpec::utilisation).sum(),
        liu_layland_bound: if handlers.is_empty() { 1.0 } else { n * (2f64.powf(1.0 / n) - 1.0) },
    })
}

/// The response time of every job of `handlers[handler]`'s level-i busy period, first job
/// first; `None` when the busy period is unbounded ([`Unbounded`]), or the set is one
/// [`analyse`] refuses (it says why).
pub fn job_responses(handlers: &[HandlerSpec], handler: usize) -> Option<Vec<u64>> {
    if handlers.iter().any(|h| h.validate().is_err()) {
        return None;
    }
    let order = priority_order(handlers);
    let p = order.iter().position(|&i| i == handler)?;
    let higher: Vec<&HandlerSpec> = order[..p].iter().map(|&j| &handlers[j]).collect();
    let blocking = order[p + 1..].iter().map(|&j| handlers[j].subjob_ns()).max().unwrap_or(0);
    job_responses_of(&handlers[handler], &higher, blocking, &mut STEP_BUDGET.clone()).ok()
}

/// Takes `terms` from the step budget, or says it ran out.
fn spend(budget: &mut u64, terms: usize) -> Result<(), Unbounded> {
    *budget = budget.checked_sub(terms as u64).ok_or(Unbounded::StepBudget)?;
    Ok(())
}

/// The responses of `h`'s busy-period jobs, for validated handlers. Every sum is checked against
/// the horizon, which fits in 64 bits: a sum that overflows is past it.
fn job_responses_of(
    h: &HandlerSpec,
    higher: &[&HandlerSpec],
    blocking: u64,
    budget: &mut u64,
) -> Result<Vec<u64>, Unbounded> {
    // Well over 1 the busy period never ends; the margin keeps rounding from refusing a set at
    // exactly 1, which the iteration below settles.
    let utilisation = h.utilisation() + higher.iter().map(|j| j.utilisation()).sum::<f64>();
    if utilisation > 1.0 + 1e-9 {
        return Err(Unbounded::Overloaded);
    }
    // Validated: the period is at most MAX_PERIOD_NS, so this fits.
    let limit = h.period_ns * HORIZON_PERIODS;
    let within = |x: Option<u64>| x.filter(|&x| x <= limit).ok_or(Unbounded::BeyondHorizon);
    let (c, f) = (h.wcet_ns(), h.final_subjob_ns());
    let higher_once = higher.iter().try_fold(0u64, |sum, j| sum.checked_add(j.wcet_ns()));
    let higher_once = within(higher_once)?;
    // The level-i busy period: L = Bl + sum_{j <= i} ceil(L / T_j) C_j.
    let demand = |x: u64| -> Option<u64> {
        [h].iter()
            .chain(higher)
            .try_fold(blocking, |sum, j| sum.checked_add(x.div_ceil(j.period_ns).checked_mul(j.wcet_ns())?))
    };
    let mut busy = within(blocking.checked_add(c).and_then(|x| x.checked_add(higher_once)))?;
    loop {
        spend(budget, higher.len() + 1)?;
        let next = within(demand(busy))?;
        if next == busy {
            break;
        }
        busy = next;
    }
    // At most HORIZON_PERIODS + 1 jobs: the busy period is within the horizon.
    let jobs = busy.div_ceil(h.period_ns).max(1);
    let mut out = Vec::with_capacity(jobs as usize);
    for k in 0..jobs {
        // The final subjob starts once the blocking, this job's and the earlier jobs' other
        // subjobs, and every higher-priority job released up to that instant are done.
        let own = within(blocking.checked_add((k + 1).checked_mul(c).ok_or(Unbounded::BeyondHorizon)? - f))?;
        let interference = |start: u64| -> Option<u64> {
            higher
                .iter()
                .try_fold(own, |sum, j| sum.checked_add((start / j.period_ns + 1).checked_mul(j.wcet_ns())?))
        };
        let mut start = within(own.checked_add(higher_once))?;
        loop {
            spend(budget, higher.len().max(1))?;
            let next = within(interference(start))?;
            if next == start {
                break;
            }
            start = next;
        }
        // The final subjob of job k starts after its release, k T, so this does not go below F;
        // saturating keeps a slip from wrapping into a tiny response.
        out.push((start + f).saturating_sub(k * h.period_ns));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, period_ns: u64, batch: u64, unit_cost_ns: u64) -> HandlerSpec {
        HandlerSpec { name: name.into(), period_ns, batch, iteration: 1, unit_cost_ns }
    }

    #[test]
    fn periods_past_the_horizon_are_refused_not_wrapped_into_an_admission() {
        // U = 0.767 + 0.451 = 1.22: the busy-period sums pass 2^64, and wrapped they settled on
        // a small fixed point that admitted the set.
        let set = [
            h("a", 16_000_000_000_000_000_000, 1, 12_271_179_270_000_000_000),
            h("b", 14_000_000_000_000_000_000, 1, 6_307_666_464_000_000_000),
        ];
        let e = analyse(&set).map(|a| a.admitted).unwrap_err().to_string();
        assert!(
            e.starts_with("handler 'a': the period is 16000000000000000000 ns, beyond the longest"),
            "{e}"
        );
        assert!(e.contains(&MAX_PERIOD_NS.to_string()), "{e}");
    }

    #[test]
    fn an_overloaded_set_at_the_longest_period_is_refused_with_the_reason() {
        let t = MAX_PERIOD_NS;
        let a = analyse(&[h("a", t, 6, t / 10), h("b", t, 6, t / 10)]).unwrap();
        assert!(!a.admitted);
        assert_eq!((a.handlers[0].unbounded, a.handlers[0].schedulable), (None, true));
        assert_eq!(a.handlers[1].unbounded, Some(Unbounded::Overloaded));
    }

    #[test]
    fn a_busy_period_of_a_billion_steps_is_refused_within_the_step_budget() {
        // hi takes the whole processor in 1 ns jobs; lo's busy period then grows by 1 ns a
        // step towards its horizon, 10^19 ns away.
        let a = analyse(&[h("hi", 1, 1, 1), h("lo", MAX_PERIOD_NS, 1, 1)]).unwrap();
        assert!(!a.admitted);
        assert_eq!(a.handlers[1].unbounded, Some(Unbounded::StepBudget));
        assert_eq!(a.handlers[1].response_time_ns, None);
    }

    #[test]
    fn job_costs_beyond_the_representable_are_refused() {
        let e = analyse(&[h("x", 10, u64::MAX, 2)]).unwrap_err().to_string();
        assert!(e.starts_with("handler 'x': batch x unit cost is more than 1000 periods"), "{e}");
        let e = analyse(&[h("y", 10, 1, 10_001)]).unwrap_err().to_string();
        assert!(e.starts_with("handler 'y': batch x unit cost"), "{e}");
        assert!(analyse(&[h("z", 10, 1, 10_000)]).is_ok(), "exactly 1000 periods is representable");
    }
}
