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
//! Times are integer nanoseconds.

use serde::Serialize;

/// What admission needs of a handler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandlerSpec {
    pub name: String,
    pub period_ns: u64,
    /// Units of work per period (B).
    pub batch: u64,
    /// Units processed without interruption (b).
    pub iteration: u64,
    /// Cost of one unit, ns.
    pub unit_cost_ns: u64,
}

impl HandlerSpec {
    /// Worst-case execution per period, C = B c.
    pub fn wcet_ns(&self) -> u64 {
        self.batch * self.unit_cost_ns
    }

    /// The longest non-preemptible subjob, b c (at most C).
    pub fn subjob_ns(&self) -> u64 {
        self.iteration.min(self.batch) * self.unit_cost_ns
    }

    /// The final subjob, F.
    pub fn final_subjob_ns(&self) -> u64 {
        let b = self.iteration.min(self.batch).max(1);
        let rest = self.batch % b;
        (if rest == 0 { b } else { rest }) * self.unit_cost_ns
    }

    pub fn utilisation(&self) -> f64 {
        self.wcet_ns() as f64 / self.period_ns.max(1) as f64
    }

    fn check(&self) -> Result<(), AnalysisError> {
        let bad = |what: &str| AnalysisError::Invalid { name: self.name.clone(), what: what.to_string() };
        if self.period_ns == 0 {
            return Err(bad("the period must be positive"));
        }
        if self.batch == 0 || self.iteration == 0 {
            return Err(bad("batch and iteration must be at least 1"));
        }
        if self.unit_cost_ns == 0 {
            return Err(bad("the unit cost must be positive"));
        }
        if self.batch.checked_mul(self.unit_cost_ns).is_none_or(|c| c > self.period_ns.saturating_mul(1_000))
        {
            return Err(bad("batch x unit cost is far beyond the period"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnalysisError {
    #[error("handler '{name}': {what}")]
    Invalid { name: String, what: String },
}

/// One handler's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandlerAnalysis {
    pub name: String,
    /// 0 is the highest.
    pub priority: usize,
    pub utilisation: f64,
    pub blocking_ns: u64,
    /// Worst response time over the jobs of the level-i busy period (`None`: unbounded, the
    /// handlers at this priority and above need more than the processor).
    pub response_time_ns: Option<u64>,
    /// The job of the busy period with the worst response time (0 is the first).
    pub worst_job: usize,
    /// Jobs of the busy period checked.
    pub jobs_checked: usize,
    pub schedulable: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub admitted: bool,
    /// In registration order.
    pub handlers: Vec<HandlerAnalysis>,
    pub utilisation: f64,
    pub liu_layland_bound: f64,
}

/// Busy periods longer than this are treated as unbounded.
const HORIZON_PERIODS: u64 = 100_000;

/// Rate-monotonic priorities: registration indices from the highest priority down.
pub fn priority_order(handlers: &[HandlerSpec]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..handlers.len()).collect();
    order.sort_by_key(|&i| (handlers[i].period_ns, i));
    order
}

/// Analyses `handlers` (registration order) under RMDP.
pub fn analyse(handlers: &[HandlerSpec]) -> Result<Analysis, AnalysisError> {
    for h in handlers {
        h.check()?;
    }
    let order = priority_order(handlers);
    let mut out: Vec<Option<HandlerAnalysis>> = vec![None; handlers.len()];
    for (p, &i) in order.iter().enumerate() {
        let h = &handlers[i];
        let higher: Vec<&HandlerSpec> = order[..p].iter().map(|&j| &handlers[j]).collect();
        let blocking = order[p + 1..].iter().map(|&j| handlers[j].subjob_ns()).max().unwrap_or(0);
        let (response, worst_job, jobs) = response_time(h, &higher, blocking);
        out[i] = Some(HandlerAnalysis {
            name: h.name.clone(),
            priority: p,
            utilisation: h.utilisation(),
            blocking_ns: blocking,
            response_time_ns: response,
            worst_job,
            jobs_checked: jobs,
            schedulable: response.is_some_and(|r| r <= h.period_ns),
        });
    }
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

/// (worst response time over the busy period's jobs, which job, how many jobs), or `None` when
/// the busy period does not end.
fn response_time(h: &HandlerSpec, higher: &[&HandlerSpec], blocking: u64) -> (Option<u64>, usize, usize) {
    match job_responses_of(h, higher, blocking) {
        None => (None, 0, 0),
        Some(r) => {
            let (k, worst) = r
                .iter()
                .enumerate()
                .max_by_key(|&(k, &x)| (x, std::cmp::Reverse(k)))
                .expect("one job at least");
            (Some(*worst), k, r.len())
        }
    }
}

/// The response time of every job of `handlers[handler]`'s level-i busy period, first job
/// first; `None` when the busy period does not end.
pub fn job_responses(handlers: &[HandlerSpec], handler: usize) -> Option<Vec<u64>> {
    let order = priority_order(handlers);
    let p = order.iter().position(|&i| i == handler)?;
    let higher: Vec<&HandlerSpec> = order[..p].iter().map(|&j| &handlers[j]).collect();
    let blocking = order[p + 1..].iter().map(|&j| handlers[j].subjob_ns()).max().unwrap_or(0);
    job_responses_of(&handlers[handler], &higher, blocking)
}

fn job_responses_of(h: &HandlerSpec, higher: &[&HandlerSpec], blocking: u64) -> Option<Vec<u64>> {
    let limit = h.period_ns.saturating_mul(HORIZON_PERIODS);
    // The level-i busy period.
    let demand = |x: u64| -> u64 {
        blocking
            + x.div_ceil(h.period_ns) * h.wcet_ns()
            + higher.iter().map(|j| x.div_ceil(j.period_ns) * j.wcet_ns()).sum::<u64>()
    };
    let mut busy = blocking + h.wcet_ns() + higher.iter().map(|j| j.wcet_ns()).sum::<u64>();
    loop {
        let next = demand(busy);
        if next == busy {
            break;
        }
        if next > limit {
            return None;
        }
        busy = next;
    }
    let jobs = busy.div_ceil(h.period_ns).max(1);
    let (c, f) = (h.wcet_ns(), h.final_subjob_ns());
    let mut out = Vec::with_capacity(jobs as usize);
    for k in 0..jobs {
        // The final subjob starts once the blocking, this job's and the earlier jobs' other
        // subjobs, and every higher-priority job released up to that instant are done.
        let own = blocking + (k + 1) * c - f;
        let mut start = own + higher.iter().map(|j| j.wcet_ns()).sum::<u64>();
        loop {
            let next = own + higher.iter().map(|j| (start / j.period_ns + 1) * j.wcet_ns()).sum::<u64>();
            if next == start {
                break;
            }
            if next > limit {
                return None;
            }
            start = next;
        }
        out.push(start + f - k * h.period_ns);
    }
    Some(out)
}
