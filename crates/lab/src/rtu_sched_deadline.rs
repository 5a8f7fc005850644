//! `kairos rtu sched-deadline`: today's anchor. The deadline experiment's twelve handlers (see
//! [`crate::rtu_deadlines`]) as twelve threads under Linux `SCHED_DEADLINE` (runtime: the
//! handler's cost with a quarter and 50 us of margin; deadline = period), beside the same set
//! under RMDP on the shell. Each thread does its batch, then yields the rest of its runtime
//! (`sched_yield`) until the kernel's next period. Each point also runs the set under RMDP on
//! the shell (one core), in the same run.
//!
//! Differences that the report states: `SCHED_DEADLINE` threads cannot be pinned to one core
//! (the kernel refuses affinity narrower than the root domain), so they run global EDF over
//! every core while RMDP runs on one; and a thread's release is taken when it wakes, so its
//! slack is measured from its wake-up, not from the kernel's period start. Where the kernel
//! refuses `SCHED_DEADLINE` (not root, or no bandwidth left), the rows say so and are skipped.
//!
//! # Summary fields (stable)
//! `machine`, `config`, `refused` (why `SCHED_DEADLINE` could not be used, if so), `rows`
//! (`scheduler`, `utilisation`, `min_slack_us`, `misses`, `invocations`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use kairos_metrics::sys;
use kairos_rtu::analysis::HandlerSpec;
use serde::Serialize;

use crate::machine::MachineInfo;
use crate::output::RunDir;
use crate::rtu_deadlines::{DeadlinesConfig, handler_set, run_point};

#[derive(Debug, Clone, Serialize)]
pub struct EdfRow {
    pub scheduler: &'static str,
    pub utilisation: f64,
    pub min_slack_us: f64,
    pub misses: u64,
    pub invocations: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EdfSummary {
    pub machine: MachineInfo,
    pub config: DeadlinesConfig,
    pub refused: Option<String>,
    pub rows: Vec<EdfRow>,
    pub results_dir: PathBuf,
}

/// `struct sched_attr` of `sched_setattr(2)`.
#[repr(C)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const SCHED_DEADLINE: u32 = 6;

/// Puts the calling thread under `SCHED_DEADLINE`.
fn set_deadline(runtime_ns: u64, deadline_ns: u64, period_ns: u64) -> std::io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: SCHED_DEADLINE,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: runtime_ns,
        sched_deadline: deadline_ns,
        sched_period: period_ns,
    };
    // SAFETY: `attr` is a valid sched_attr of the size it declares, alive for the call; pid 0 is
    // the calling thread and flags 0 is the only defined value.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// (min slack ns, misses, invocations) of one handler thread, or why the kernel refused it.
fn edf_thread(spec: HandlerSpec, stop: Arc<AtomicBool>) -> Result<(i64, u64, u64), String> {
    let cost = spec.batch * spec.unit_cost_ns;
    let runtime = cost + cost / 4 + 50_000;
    set_deadline(runtime.min(spec.period_ns), spec.period_ns, spec.period_ns).map_err(|e| e.to_string())?;
    let (mut min_slack, mut misses, mut jobs) = (i64::MAX, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let release = sys::monotonic_ns();
        sys::spin_until_ns(release + cost);
        let slack = (release + spec.period_ns) as i64 - sys::monotonic_ns() as i64;
        min_slack = min_slack.min(slack);
        misses += u64::from(slack < 0);
        jobs += 1;
        // Gives up the rest of this period's runtime: the thread sleeps until the next period.
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    Ok((min_slack, misses, jobs))
}

fn edf_point(specs: &[HandlerSpec], seconds: f64) -> Result<EdfRow, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = specs
        .iter()
        .map(|s| {
            let (s, stop) = (s.clone(), Arc::clone(&stop));
            std::thread::spawn(move || edf_thread(s, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let (mut min_slack, mut misses, mut jobs, mut refused) = (i64::MAX, 0, 0, None);
    for t in threads {
        match t.join().map_err(|_| "a SCHED_DEADLINE thread panicked".to_string())? {
            Ok((s, m, j)) => (min_slack, misses, jobs) = (min_slack.min(s), misses + m, jobs + j),
            Err(e) => refused = Some(e),
        }
    }
    if let Some(e) = refused {
        return Err(format!("the kernel refused SCHED_DEADLINE: {e}"));
    }
    Ok(EdfRow {
        scheduler: "SCHED_DEADLINE (global EDF)",
        utilisation: specs.iter().map(HandlerSpec::utilisation).sum(),
        min_slack_us: if min_slack == i64::MAX { 0.0 } else { min_slack as f64 / 1e3 },
        misses,
        invocations: jobs,
    })
}

pub fn run(config: &DeadlinesConfig, results_root: &Path, log: &dyn Fn(&str)) -> Result<EdfSummary> {
    let machine = MachineInfo::probe();
    let run_dir = RunDir::create(results_root, "rtu-sched-deadline")?;
    let mut rows = Vec::new();
    let mut refused = None;
    for &u in &config.utilisations {
        let specs = handler_set(u, config.unit_us);
        let rmdp = run_point(&specs, config).row;
        rows.push(EdfRow {
            scheduler: "RMDP (one core)",
            utilisation: rmdp.utilisation,
            min_slack_us: rmdp.min_slack_us,
            misses: rmdp.misses,
            invocations: rmdp.invocations,
        });
        match edf_point(&specs, config.seconds) {
            Ok(row) => rows.push(row),
            Err(why) => {
                log(&format!("{why}; the SCHED_DEADLINE rows are skipped"));
                refused = Some(why);
                break;
            }
        }
    }
    let summary = EdfSummary {
        machine,
        config: config.clone(),
        refused,
        rows,
        results_dir: run_dir.path().to_path_buf(),
    };
    run_dir.write_json("summary.json", &summary)?;
    Ok(summary)
}

pub fn report(s: &EdfSummary) -> String {
    let mut out = format!("machine: {}\n", s.machine.one_line());
    if let Some(why) = &s.refused {
        out.push_str(&format!("{why}\n"));
    }
    out.push_str(&format!(
        "{:<28} {:>6} {:>14} {:>7} {:>11}\n",
        "scheduler", "util", "min slack us", "misses", "invocations"
    ));
    for r in &s.rows {
        out.push_str(&format!(
            "{:<28} {:>6.3} {:>14.1} {:>7} {:>11}\n",
            r.scheduler, r.utilisation, r.min_slack_us, r.misses, r.invocations
        ));
    }
    out.push_str(&format!("results: {}\n", s.results_dir.display()));
    out
}
