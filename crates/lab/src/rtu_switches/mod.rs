//! `kairos rtu switches`: the cost the source argues about. The same periodic workload over
//! shared state (six handlers, periods 10-35 ms, each unit of work updating a shared queue and
//! computing for 20 us, utilisation about 0.5), run two ways on one core:
//!
//! - **RMDP**: one pinned `SCHED_FIFO` shell thread runs every handler; the shared state is
//!   lent to one handler at a time, so there is no lock;
//! - **threads**: one `SCHED_FIFO` thread per handler at its rate-monotonic priority, each
//!   sleeping to its releases, the shared state behind a priority-inheritance mutex.
//!
//! Reported per way: units of work done, voluntary and involuntary context switches (from the
//! OS, per thread), lock operations, deadline misses, and the useful utilisation (work time over
//! wall time). The figure of merit is context switches per unit of work, and its ratio.
//!
//! # Summary fields (stable)
//! `machine`, `config`, `realtime`, `rows` (`way`, `units`, `voluntary_switches`,
//! `involuntary_switches`, `switches_per_unit`, `lock_operations`, `misses`,
//! `useful_utilisation`), `switch_ratio` (threads / RMDP).

mod pi_mutex;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use kairos_metrics::sys;
use kairos_rtu::analysis::HandlerSpec;
use kairos_rtu::shell::{Context, Scheduler, ShellConfig};
use serde::Serialize;

pub use pi_mutex::PiMutex;

use crate::machine::MachineInfo;
use crate::output::RunDir;

#[derive(Debug, Clone, Serialize)]
pub struct SwitchesConfig {
    pub seconds: f64,
    pub core: usize,
    /// Computation per unit of work, ns.
    pub work_ns: u64,
}

impl SwitchesConfig {
    pub fn quick() -> Self {
        Self {
            seconds: 2.0,
            core: std::thread::available_parallelism().map_or(1, |n| n.get()) - 1,
            work_ns: 20_000,
        }
    }

    pub fn full() -> Self {
        Self { seconds: 20.0, ..Self::quick() }
    }

    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchRow {
    pub way: &'static str,
    pub units: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub switches_per_unit: f64,
    pub lock_operations: u64,
    pub misses: u64,
    pub useful_utilisation: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SwitchesSummary {
    pub machine: MachineInfo,
    pub config: SwitchesConfig,
    pub realtime: bool,
    pub rows: Vec<SwitchRow>,
    /// Context switches per unit, threads over RMDP.
    pub switch_ratio: f64,
    pub results_dir: PathBuf,
}

/// The six handlers: periods 10, 15, ..., 35 ms, iterations of 4 units, about 0.5 in all.
pub fn handler_set(work_ns: u64) -> Vec<HandlerSpec> {
    (0..6)
        .map(|i| {
            let period_ns = (10 + 5 * i as u64) * 1_000_000;
            let units = ((0.5 / 6.0) * period_ns as f64 / work_ns as f64).round().max(1.0) as u64;
            HandlerSpec {
                name: format!("h{i}"),
                period_ns,
                batch: units,
                iteration: 4,
                unit_cost_ns: work_ns + 5_000,
            }
        })
        .collect()
}

/// The shared state: a queue every unit pushes to and pops from.
#[derive(Debug, Default)]
struct Shared {
    queue: VecDeque<u64>,
    updates: u64,
}

fn unit_of_work(shared: &mut Shared, work_ns: u64) {
    shared.queue.push_back(shared.updates);
    if shared.queue.len() > 64 {
        shared.queue.pop_front();
    }
    shared.updates += 1;
    sys::spin_until_ns(sys::monotonic_ns() + work_ns);
}

fn rmdp(config: &SwitchesConfig) -> (SwitchRow, bool) {
    let specs = handler_set(config.work_ns);
    let mut sched = Scheduler::new(Shared::default());
    let work = config.work_ns;
    for s in &specs {
        sched
            .register(s.clone(), move |shared: &mut Shared, units: u64, _: &Context<'_>| {
                for _ in 0..units {
                    unit_of_work(shared, work);
                }
                units
            })
            .expect("the set is admitted at utilisation 0.5");
    }
    let start = sys::monotonic_ns();
    let running =
        sched.spawn(ShellConfig { core: Some(config.core), ..ShellConfig::default() }).expect("spawn");
    std::thread::sleep(Duration::from_secs_f64(config.seconds));
    let report = running.stop();
    let wall = (sys::monotonic_ns() - start).max(1);
    let units = report.shared.updates;
    let (vol, invol) = report.context_switches;
    (
        SwitchRow {
            way: "rmdp",
            units,
            voluntary_switches: vol,
            involuntary_switches: invol,
            switches_per_unit: (vol + invol) as f64 / units.max(1) as f64,
            lock_operations: 0,
            misses: report.counts.iter().map(|c| c.misses).sum(),
            useful_utilisation: (units * config.work_ns) as f64 / wall as f64,
        },
        report.realtime,
    )
}

fn threads(config: &SwitchesConfig) -> SwitchRow {
    let specs = handler_set(config.work_ns);
    let shared = Arc::new(PiMutex::new(Shared::default()).expect("a priority-inheritance mutex"));
    let stop = Arc::new(AtomicBool::new(false));
    let start = sys::monotonic_ns() + 5_000_000;
    let handles: Vec<_> = specs
        .iter()
        .enumerate()
        .map(|(rank, spec)| {
            let (shared, stop, spec, core, work) =
                (Arc::clone(&shared), Arc::clone(&stop), spec.clone(), config.core, config.work_ns);
            std::thread::spawn(move || {
                let _ = sys::pin_current_thread(core);
                // Rate-monotonic: the shortest period gets the highest priority.
                let _ = sys::set_fifo(80 - rank as i32);
                let before = sys::thread_context_switches();
                let (mut release, mut misses, mut locks) = (start, 0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    sys::sleep_until_ns(release);
                    for _ in 0..spec.batch {
                        let mut guard = shared.lock();
                        locks += 1;
                        unit_of_work(&mut guard, 0);
                        drop(guard);
                        sys::spin_until_ns(sys::monotonic_ns() + work);
                    }
                    if sys::monotonic_ns() > release + spec.period_ns {
                        misses += 1;
                    }
                    release += spec.period_ns;
                }
                let after = sys::thread_context_switches();
                (after.0 - before.0, after.1 - before.1, misses, locks)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(config.seconds) + Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);
    let (mut vol, mut invol, mut misses, mut locks) = (0, 0, 0, 0);
    for h in handles {
        let (v, i, m, l) = h.join().expect("a handler thread");
        (vol, invol, misses, locks) = (vol + v, invol + i, misses + m, locks + l);
    }
    let wall = (sys::monotonic_ns() - start).max(1);
    let units = shared.lock().updates;
    SwitchRow {
        way: "threads + PI mutex",
        units,
        voluntary_switches: vol,
        involuntary_switches: invol,
        switches_per_unit: (vol + invol) as f64 / units.max(1) as f64,
        lock_operations: locks,
        misses,
        useful_utilisation: (units * config.work_ns) as f64 / wall as f64,
    }
}

pub fn run(config: &SwitchesConfig, results_root: &Path, log: &dyn Fn(&str)) -> Result<SwitchesSummary> {
    let machine = MachineInfo::probe();
    let run_dir = RunDir::create(results_root, "rtu-switches")?;
    let (r, realtime) = rmdp(config);
    if !realtime {
        log("SCHED_FIFO was not granted: both ways ran at normal priority (run as root)");
    }
    let t = threads(config);
    let switch_ratio = t.switches_per_unit / r.switches_per_unit.max(f64::MIN_POSITIVE);
    let rows = vec![r, t];
    run_dir.write_csv("rows.csv", &rows)?;
    let summary = SwitchesSummary {
        machine,
        config: config.clone(),
        realtime,
        rows,
        switch_ratio,
        results_dir: run_dir.path().to_path_buf(),
    };
    run_dir.write_json("summary.json", &summary)?;
    Ok(summary)
}

pub fn report(s: &SwitchesSummary) -> String {
    let mut out = format!("machine: {}\n", s.machine.one_line());
    out.push_str(&format!(
        "{:<20} {:>9} {:>10} {:>12} {:>16} {:>9} {:>7} {:>10}\n",
        "way", "units", "voluntary", "involuntary", "switches / unit", "locks", "misses", "useful"
    ));
    for r in &s.rows {
        out.push_str(&format!(
            "{:<20} {:>9} {:>10} {:>12} {:>16.4} {:>9} {:>7} {:>10.3}\n",
            r.way,
            r.units,
            r.voluntary_switches,
            r.involuntary_switches,
            r.switches_per_unit,
            r.lock_operations,
            r.misses,
            r.useful_utilisation
        ));
    }
    out.push_str(&format!(
        "context switches per unit of work: threads {:.2}x RMDP\nresults: {}\n",
        s.switch_ratio,
        s.results_dir.display()
    ));
    out
}
