//! `kairos rtu sched-deadline`: today's anchor. The deadline experiment's twelve handlers (see
//! [`crate::experiments::rtu_deadlines`]) as twelve threads under Linux `SCHED_DEADLINE` (runtime: the
//! handler's cost with 5% and 50 us of margin; deadline = period), beside the same set under
//! RMDP on the shell. Each thread does its batch, then sleeps to its next release (an absolute
//! sleep). Each point runs three ways in the same run:
//! RMDP on the shell (one core); `SCHED_DEADLINE` on every core (global EDF: the kernel refuses
//! a deadline thread an affinity narrower than its root domain); and `SCHED_DEADLINE` on the
//! shell's core alone, in a root domain of one core made with cpusets (`one_core`), where the
//! machine allows it. The kernel admits deadline threads up to 95% of the domain's cores
//! (`sched_rt_runtime_us`), runtime margins included, so the one-core rows of the heaviest sets
//! are refusals; the rows say so.
//!
//! Slack is measured from each job's release (start + k T), as for RMDP. Where the kernel refuses `SCHED_DEADLINE` altogether (not
//! root), the rows say so and are skipped.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `config`, `realtime` (the RMDP shell got `SCHED_FIFO` at every point),
//! `refused` (why `SCHED_DEADLINE` could not be used, if so),
//! `one_core` (why there are no one-core rows, if so), `rows` (`scheduler`, `utilisation`,
//! `min_slack_us`, `misses`, `invocations`, `refused`: the kernel's reason for a point it did not
//! admit), `plots`. Files: `summary.json`, `rows.csv`, `min_slack.png`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use anyhow::Result;

use kairos_rtu::analysis::HandlerSpec;
use kairos_sys::clock::{monotonic_ns, sleep_until_ns, spin_until_ns};
use kairos_sys::proc::online_cores;
use kairos_sys::sched_deadline::{DeadlineReservation, set_deadline};
use serde::Serialize;

mod one_core;

use crate::experiments::rtu_deadlines::{DeadlinesConfig, handler_set, run_point};
use crate::harness::plot::{Scales, measured_per_key, xy_chart};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};
use one_core::{DomainError, OneCoreDomain};

/// One scheduler at one point (a row of `rows.csv`).
#[derive(Debug, Clone, Serialize)]
pub struct EdfRow {
    /// `RMDP (one core)`, `SCHED_DEADLINE (global EDF)` or `SCHED_DEADLINE (one core)`.
    pub scheduler: &'static str,
    /// The set's total utilisation (fraction of one core).
    pub utilisation: f64,
    /// The least slack of any job, us: its deadline (the end of its period) less its end;
    /// below 0 is a miss. 0 in a refused row.
    pub min_slack_us: f64,
    /// Jobs that ended past their deadline.
    pub misses: u64,
    /// Jobs run.
    pub invocations: u64,
    /// Why the kernel did not admit the point (the row then has no figures), if it did not.
    pub refused: Option<String>,
}

const GLOBAL: &str = "SCHED_DEADLINE (global EDF)";
const ONE_CORE: &str = "SCHED_DEADLINE (one core)";

/// What `kairos rtu sched-deadline` found (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct EdfSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The deadline experiment's configuration run.
    pub config: DeadlinesConfig,
    /// The RMDP shell got `SCHED_FIFO` at every point (else its rows ran at normal priority).
    pub realtime: bool,
    /// Why `SCHED_DEADLINE` could not be used at all (its rows are skipped then), if so.
    pub refused: Option<String>,
    /// Why there are no one-core rows (no v1 cpusets, one core), if so.
    pub one_core: Option<String>,
    /// RMDP and global EDF at every point, then the one-core rows.
    pub rows: Vec<EdfRow>,
}

/// Why a handler thread has no `SCHED_DEADLINE` reservation.
#[derive(Debug, thiserror::Error)]
enum ThreadRefused {
    /// It could not join the one-core domain.
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// The kernel refused the reservation.
    #[error("{0}")]
    Kernel(std::io::Error),
}

/// Why a point has no `SCHED_DEADLINE` row.
#[derive(Debug, thiserror::Error)]
enum EdfError {
    /// A handler thread panicked.
    #[error("a SCHED_DEADLINE thread panicked")]
    Panicked,
    /// A handler thread got no reservation (the set then does not run).
    #[error("the kernel refused SCHED_DEADLINE: {0}")]
    Refused(ThreadRefused),
}

/// (min slack ns, misses, invocations) of one handler thread, or why the kernel refused it.
fn edf_thread(
    spec: HandlerSpec,
    stop: Arc<AtomicBool>,
    domain: Option<Arc<OneCoreDomain>>,
    admitted: Arc<(Barrier, AtomicBool)>,
) -> Result<(i64, u64, u64), ThreadRefused> {
    let cost = spec.batch * spec.unit_cost_ns;
    let runtime = cost + cost / 20 + 50_000;
    let joined = domain.as_ref().map_or(Ok(()), |d| d.join()).map_err(ThreadRefused::Domain);
    let set = joined.and_then(|()| {
        set_deadline(DeadlineReservation {
            runtime_ns: runtime.min(spec.period_ns),
            deadline_ns: spec.period_ns,
            period_ns: spec.period_ns,
        })
        .map_err(ThreadRefused::Kernel)
    });
    // The set runs only when the kernel admitted every thread of it.
    let (barrier, refused) = &*admitted;
    if set.is_err() {
        refused.store(true, Ordering::Relaxed);
    }
    barrier.wait();
    set?;
    if refused.load(Ordering::Relaxed) {
        return Ok((i64::MAX, 0, 0));
    }
    let (mut min_slack, mut misses, mut jobs) = (i64::MAX, 0u64, 0u64);
    // Job k is released at start + k T (the kernel's period starts with the reservation, at the
    // `sched_setattr` just above): the thread sleeps to each release with an absolute sleep,
    // and slack is measured from it. (`sched_yield`, the other way to wait for the next period,
    // now and then returned into a period whose runtime was spent, and the job then waited a
    // whole period for the next replenishment.)
    let start = monotonic_ns();
    while !stop.load(Ordering::Relaxed) {
        let release = start + jobs * spec.period_ns;
        sleep_until_ns(release);
        spin_until_ns(monotonic_ns().max(release) + cost);
        let slack = (release + spec.period_ns) as i64 - monotonic_ns() as i64;
        min_slack = min_slack.min(slack);
        misses += u64::from(slack < 0);
        jobs += 1;
    }
    Ok((min_slack, misses, jobs))
}

fn edf_point(
    specs: &[HandlerSpec],
    seconds: f64,
    domain: Option<&Arc<OneCoreDomain>>,
) -> Result<EdfRow, EdfError> {
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new((Barrier::new(specs.len()), AtomicBool::new(false)));
    let threads: Vec<_> = specs
        .iter()
        .map(|s| {
            let (s, stop, domain, admitted) =
                (s.clone(), Arc::clone(&stop), domain.cloned(), Arc::clone(&admitted));
            std::thread::spawn(move || edf_thread(s, stop, domain, admitted))
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let (mut min_slack, mut misses, mut jobs, mut refused) = (i64::MAX, 0, 0, None);
    for t in threads {
        match t.join().map_err(|_| EdfError::Panicked)? {
            Ok((s, m, j)) => (min_slack, misses, jobs) = (min_slack.min(s), misses + m, jobs + j),
            Err(e) => refused = Some(e),
        }
    }
    // An exited deadline thread's bandwidth is released at its 0-lag time, within a period
    // (45 ms at most here). Wait for it: a root domain rebuilt before then (the one-core
    // domain's cpuset changes) releases it from the wrong domain, and this kernel's accounting
    // then underflowed and refused every small reservation until the next rebuild.
    std::thread::sleep(Duration::from_millis(200));
    if let Some(e) = refused {
        return Err(EdfError::Refused(e));
    }
    Ok(EdfRow {
        scheduler: if domain.is_some() { ONE_CORE } else { GLOBAL },
        utilisation: specs.iter().map(HandlerSpec::utilisation).sum(),
        min_slack_us: if min_slack == i64::MAX { 0.0 } else { min_slack as f64 / 1e3 },
        misses,
        invocations: jobs,
        refused: None,
    })
}

/// The deadline experiment's set and points, run under `SCHED_DEADLINE` beside RMDP.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct SchedDeadlineConfig(pub DeadlinesConfig);

impl Experiment for SchedDeadlineConfig {
    const NAME: &'static str = "rtu-sched-deadline";
    type Summary = EdfSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        let points = self.0.plan()?;
        // RMDP, global EDF and one-core EDF at every point, each followed by 200 ms for the
        // kernel to release exited threads' bandwidth.
        Ok(Plan::new(self.0.utilisations.len() * 3, points.seconds_per_step))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<EdfSummary> {
        measure(&self.0, run)
    }
}

fn measure(config: &DeadlinesConfig, run: &mut Run<'_>) -> Result<EdfSummary> {
    let mut rows = Vec::new();
    let mut refused = None;
    let mut realtime = true;
    for &u in &config.utilisations {
        let specs = handler_set(u, config.unit_us);
        let point = run_point(&specs, config)?;
        realtime &= point.realtime;
        let rmdp = point.row;
        run.step("");
        rows.push(EdfRow {
            scheduler: "RMDP (one core)",
            utilisation: rmdp.utilisation,
            min_slack_us: rmdp.min_slack_us,
            misses: rmdp.misses,
            invocations: rmdp.invocations,
            refused: None,
        });
        if refused.is_some() {
            continue;
        }
        run.step("");
        match edf_point(&specs, config.seconds, None) {
            Ok(row) => rows.push(row),
            Err(why) => {
                run.log(&format!("{why}; the SCHED_DEADLINE rows are skipped"));
                refused = Some(why.to_string());
            }
        }
    }
    // The one-core points run after every global one, each in a domain that exists only
    // around it (while it does, no deadline thread could run globally).
    let mut one_core = None;
    for &u in &config.utilisations {
        let specs = handler_set(u, config.unit_us);
        if refused.is_some() {
            break;
        }
        match OneCoreDomain::new(config.core, online_cores()) {
            Ok(d) => {
                let d = Arc::new(d);
                run.step("");
                rows.push(edf_point(&specs, config.seconds, Some(&d)).unwrap_or_else(|why| EdfRow {
                    scheduler: ONE_CORE,
                    utilisation: specs.iter().map(HandlerSpec::utilisation).sum(),
                    min_slack_us: 0.0,
                    misses: 0,
                    invocations: 0,
                    refused: Some(why.to_string()),
                }));
            }
            Err(why) => {
                run.log(&format!("{why}; no one-core SCHED_DEADLINE rows"));
                one_core = Some(why.to_string());
                break;
            }
        }
    }
    run.dir().write_csv("rows.csv", &rows)?;
    let plot = run.plot("min_slack.png");
    let series = measured_per_key(
        ["RMDP (one core)", GLOBAL, ONE_CORE],
        &rows,
        |scheduler| scheduler.to_string(),
        |scheduler, r| r.scheduler == *scheduler && r.refused.is_none(),
        |r| (r.utilisation, r.min_slack_us / 1e3),
    );
    xy_chart(
        &plot,
        "Minimum slack: RMDP on one core, SCHED_DEADLINE on every core and on one",
        "total utilisation of one core",
        "minimum slack (ms; below 0 is a miss)",
        Scales::default(),
        &series,
    )?;
    if !realtime {
        run.log("SCHED_FIFO was not granted: the RMDP rows ran at normal priority (run as root)");
    }
    let summary = EdfSummary { run: run.finish(), config: config.clone(), realtime, refused, one_core, rows };
    Ok(summary)
}

/// The summary as the table a person reads.
pub fn report(s: &EdfSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    if !s.realtime {
        out.push_str("SCHED_FIFO NOT granted: the RMDP rows ran at normal priority\n");
    }
    if let Some(why) = &s.refused {
        out.push_str(&format!("{why}\n"));
    }
    if let Some(why) = &s.one_core {
        out.push_str(&format!("no one-core SCHED_DEADLINE rows: {why}\n"));
    }
    out.push_str(&format!(
        "{:<28} {:>6} {:>14} {:>7} {:>11}\n",
        "scheduler", "util", "min slack us", "misses", "invocations"
    ));
    for r in &s.rows {
        match &r.refused {
            Some(why) => {
                out.push_str(&format!("{:<28} {:>6.3} refused: {why}\n", r.scheduler, r.utilisation))
            }
            None => out.push_str(&format!(
                "{:<28} {:>6.3} {:>14.1} {:>7} {:>11}\n",
                r.scheduler, r.utilisation, r.min_slack_us, r.misses, r.invocations
            )),
        }
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}
