//! `kairos rtu switches`: the cost the source argues about. The same periodic workload over
//! shared state (six handlers, periods 10-35 ms, each unit of work updating a shared queue and
//! computing for 20 us; total utilisation swept, 0.2-0.6 quick), run two ways on one core:
//!
//! - **RMDP**: one pinned `SCHED_FIFO` shell thread runs every handler; the shared state is
//!   lent to one handler at a time, so there is no lock;
//! - **threads**: one `SCHED_FIFO` thread per handler at its rate-monotonic priority, each
//!   sleeping to its releases, the shared state behind a priority-inheritance mutex.
//!
//! Reported per way: units of work done, voluntary and involuntary context switches (from the
//! OS, per thread), lock operations, deadline misses, and the useful utilisation (work time over
//! wall time). The figure of merit is context switches per unit of work, and its ratio
//! (`switches_per_unit.png` against utilisation).
//!
//! Every utilisation must be one the analysis admits (the RMDP way registers with admission
//! control); the plan checks that before anything runs.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `config`, `realtime` (every row's threads got `SCHED_FIFO`), `rows`
//! (`utilisation`, `way`, `units`, `voluntary_switches`, `involuntary_switches`,
//! `switches_per_unit`, `lock_operations`, `misses`, `useful_utilisation`, `realtime`), `ratios` (`utilisation`, `switch_ratio`), `switch_ratio` (threads /
//! RMDP, the median over the utilisations), `plots`. Files: `summary.json`, `rows.csv`,
//! `switches_per_unit.png`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use kairos_rtu::analysis::{HandlerSpec, analyse};
use kairos_rtu::shell::{Context, Scheduler, ShellConfig};
use kairos_sys::clock::{monotonic_ns, sleep_until_ns, spin_until_ns};
use kairos_sys::pi_mutex::PiMutex;
use kairos_sys::proc::last_core;
use kairos_sys::thread::{pin_current_thread, set_fifo, thread_context_switches};
use serde::Serialize;

use crate::harness::plot::{Scales, measured_per_key, xy_chart};
use crate::harness::table::{TextTable, left, right};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo, check_points};

/// What a run of `kairos rtu switches` does: the points (utilisations), how long each way runs
/// at each, on which core, and the work per unit.
#[derive(Debug, Clone, Serialize)]
pub struct SwitchesConfig {
    /// Total utilisation of the six handlers, per point: fractions of the core in (0, 1], each
    /// one the analysis admits (the plan refuses the others).
    pub utilisations: Vec<f64>,
    /// How long each way runs at each point, seconds (0.1 to 3600).
    pub seconds: f64,
    /// The core both ways run on (one that exists here; the presets take the last).
    pub core: usize,
    /// Computation per unit of work, ns (1000 to 1000000); each unit is declared to the
    /// analysis 5 us over it.
    pub work_ns: u64,
}

impl SwitchesConfig {
    /// The quick preset: three points (0.2, 0.4, 0.6), 2 s each way, on the last core.
    pub fn quick() -> Self {
        Self { utilisations: vec![0.2, 0.4, 0.6], seconds: 2.0, core: last_core(), work_ns: 20_000 }
    }

    /// The full preset: six points (0.1 to 0.6), 20 s each way.
    pub fn full() -> Self {
        Self { utilisations: vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6], seconds: 20.0, ..Self::quick() }
    }

    /// [`SwitchesConfig::quick`] or [`SwitchesConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }
}

/// One way at one point: what it did and what it cost (a row of `rows.csv`).
#[derive(Debug, Clone, Serialize)]
pub struct SwitchRow {
    /// The six handlers' total utilisation (fraction of the core).
    pub utilisation: f64,
    /// `rmdp` (one shell thread, no lock) or `threads + PI mutex`.
    pub way: &'static str,
    /// Units of work done (updates of the shared queue).
    pub units: u64,
    /// Voluntary context switches of the way's threads, as the OS counts them.
    pub voluntary_switches: u64,
    /// Involuntary context switches (preemptions) of the way's threads, as the OS counts them.
    pub involuntary_switches: u64,
    /// Voluntary and involuntary switches per unit of work: the figure of merit.
    pub switches_per_unit: f64,
    /// Lock acquisitions of the shared state (0 for RMDP, which lends it without a lock).
    pub lock_operations: u64,
    /// Jobs that ended past their deadline (the end of their period).
    pub misses: u64,
    /// Work time over wall time: units times the work per unit, over the way's run.
    pub useful_utilisation: f64,
    /// Every thread of this way got `SCHED_FIFO` (the shell; or each handler's thread).
    pub realtime: bool,
}

/// What `kairos rtu switches` found (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct SwitchesSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: SwitchesConfig,
    /// Every row's threads got `SCHED_FIFO` (else some ran at normal priority: see each row).
    pub realtime: bool,
    /// Both ways at every point, RMDP first.
    pub rows: Vec<SwitchRow>,
    /// Threads over RMDP at every point.
    pub ratios: Vec<Ratio>,
    /// Context switches per unit, threads over RMDP: the median over the utilisations.
    pub switch_ratio: f64,
}

/// The two ways compared at one point.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// The six handlers' total utilisation (fraction of the core).
    pub utilisation: f64,
    /// Context switches per unit of work, threads over RMDP.
    pub switch_ratio: f64,
}

/// The six handlers: periods 10, 15, ..., 35 ms, iterations of 4 units, `u` in all.
pub fn handler_set(u: f64, work_ns: u64) -> Vec<HandlerSpec> {
    (0..6)
        .map(|i| {
            let period_ns = (10 + 5 * i as u64) * 1_000_000;
            let units = ((u / 6.0) * period_ns as f64 / work_ns as f64).round().max(1.0) as u64;
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
    spin_until_ns(monotonic_ns() + work_ns);
}

fn rmdp(u: f64, config: &SwitchesConfig) -> Result<SwitchRow> {
    let specs = handler_set(u, config.work_ns);
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
            .with_context(|| format!("utilisation {u}"))?;
    }
    let start = monotonic_ns();
    let running = sched
        .spawn(ShellConfig { core: Some(config.core), ..ShellConfig::default() })
        .context("starting the real-time shell's thread")?;
    std::thread::sleep(Duration::from_secs_f64(config.seconds));
    let report = running.stop()?;
    let wall = (monotonic_ns() - start).max(1);
    let units = report.shared.updates;
    let (vol, invol) = report.context_switches;
    Ok(SwitchRow {
        utilisation: u,
        way: "rmdp",
        units,
        voluntary_switches: vol,
        involuntary_switches: invol,
        switches_per_unit: (vol + invol) as f64 / units.max(1) as f64,
        lock_operations: 0,
        misses: report.counts.iter().map(|c| c.misses).sum(),
        useful_utilisation: (units * config.work_ns) as f64 / wall as f64,
        realtime: report.realtime,
    })
}

fn threads(u: f64, config: &SwitchesConfig) -> Result<SwitchRow> {
    let specs = handler_set(u, config.work_ns);
    let shared = Arc::new(PiMutex::new(Shared::default()).context("a priority-inheritance mutex")?);
    let stop = Arc::new(AtomicBool::new(false));
    let start = monotonic_ns() + 5_000_000;
    let handles: Vec<_> = specs
        .iter()
        .enumerate()
        .map(|(rank, spec)| {
            let (shared, stop, spec, core, work) =
                (Arc::clone(&shared), Arc::clone(&stop), spec.clone(), config.core, config.work_ns);
            std::thread::spawn(move || {
                let _ = pin_current_thread(core);
                // Rate-monotonic: the shortest period gets the highest priority.
                let realtime = set_fifo(80 - rank as i32).is_ok();
                let before = thread_context_switches();
                let (mut release, mut misses, mut locks) = (start, 0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    sleep_until_ns(release);
                    for _ in 0..spec.batch {
                        let mut guard = shared.lock()?;
                        locks += 1;
                        unit_of_work(&mut guard, 0);
                        guard.unlock()?;
                        spin_until_ns(monotonic_ns() + work);
                    }
                    if monotonic_ns() > release + spec.period_ns {
                        misses += 1;
                    }
                    release += spec.period_ns;
                }
                let after = thread_context_switches();
                Ok::<_, std::io::Error>((after.0 - before.0, after.1 - before.1, misses, locks, realtime))
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(config.seconds) + Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);
    let (mut vol, mut invol, mut misses, mut locks, mut realtime) = (0, 0, 0, 0, true);
    for h in handles {
        let (v, i, m, l, rt) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a handler thread panicked"))?
            .context("the PI mutex refused a handler thread")?;
        (vol, invol, misses, locks) = (vol + v, invol + i, misses + m, locks + l);
        realtime &= rt;
    }
    let wall = (monotonic_ns() - start).max(1);
    let units = shared.lock().context("the PI mutex after the run")?.updates;
    Ok(SwitchRow {
        utilisation: u,
        way: "threads + PI mutex",
        units,
        voluntary_switches: vol,
        involuntary_switches: invol,
        switches_per_unit: (vol + invol) as f64 / units.max(1) as f64,
        lock_operations: locks,
        misses,
        useful_utilisation: (units * config.work_ns) as f64 / wall as f64,
        realtime,
    })
}

impl Experiment for SwitchesConfig {
    const NAME: &'static str = "rtu-switches";
    type Summary = SwitchesSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        check_points(&self.utilisations, self.seconds, self.core, "a few jobs of every handler")?;
        if !(1_000..=1_000_000).contains(&self.work_ns) {
            return Err(InvalidConfig::new(format!(
                "work per unit must be 1-1000 us (1000-1000000 ns), got {} ns",
                self.work_ns
            )));
        }
        for &u in &self.utilisations {
            admitted(u, self.work_ns)?;
        }
        // RMDP and the threads at every point.
        Ok(Plan::new(self.utilisations.len() * 2, self.seconds))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<SwitchesSummary> {
        measure(self, run)
    }
}

/// Checks that the analysis admits the six handlers at `u` (the RMDP way runs only admitted
/// sets); the error says which handler it refuses and why.
fn admitted(u: f64, work_ns: u64) -> Result<(), InvalidConfig> {
    let specs = handler_set(u, work_ns);
    let analysis = analyse(&specs).map_err(|e| InvalidConfig::new(format!("utilisation {u}: {e}")))?;
    match analysis.handlers.iter().find(|h| !h.schedulable) {
        None => Ok(()),
        Some(h) => Err(InvalidConfig::new(format!(
            "utilisation {u}: the analysis does not admit the six handlers (declared at {:.2} of the \
             core: each unit is declared 5 us over its work), and the RMDP way runs admitted sets \
             only; handler {} {}; give lower utilisations",
            analysis.utilisation,
            h.name,
            h.unbounded
                .map_or_else(|| "misses its deadline".to_string(), |why| format!("is unbounded: {why}"))
        ))),
    }
}

fn measure(config: &SwitchesConfig, run: &mut Run<'_>) -> Result<SwitchesSummary> {
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &u in &config.utilisations {
        let r = rmdp(u, config).context("the RMDP way failed")?;
        let t = threads(u, config)?;
        ratios.push(Ratio {
            utilisation: u,
            switch_ratio: t.switches_per_unit / r.switches_per_unit.max(f64::MIN_POSITIVE),
        });
        rows.push(r);
        rows.push(t);
        run.step("");
        run.step("");
    }
    let realtime = rows.iter().all(|r| r.realtime);
    if !realtime {
        run.log("SCHED_FIFO was not granted to every thread: see each row's realtime (run as root)");
    }
    let mut sorted: Vec<f64> = ratios.iter().map(|r| r.switch_ratio).collect();
    sorted.sort_by(f64::total_cmp);
    let switch_ratio = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    run.dir().write_csv("rows.csv", &rows)?;
    let plot = run.plot("switches_per_unit.png");
    let series = measured_per_key(
        ["rmdp", "threads + PI mutex"],
        &rows,
        |way| way.to_string(),
        |way, r| r.way == *way,
        |r| (r.utilisation, r.switches_per_unit),
    );
    xy_chart(
        &plot,
        "Context switches per unit of work: RMDP against a thread per handler",
        "total utilisation",
        "context switches per unit (voluntary + involuntary)",
        Scales::default(),
        &series,
    )?;
    let summary =
        SwitchesSummary { run: run.finish(), config: config.clone(), realtime, rows, ratios, switch_ratio };
    Ok(summary)
}

/// The report a person reads: one line per way and point, then the ratios.
pub fn report(s: &SwitchesSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    if !s.realtime {
        out.push_str(
            "SCHED_FIFO NOT granted to every thread: rows with realtime false ran at normal priority\n",
        );
    }
    let mut table = TextTable::new(&[
        right("util"),
        left("way"),
        right("units"),
        right("voluntary"),
        right("involuntary"),
        right("switches / unit"),
        right("locks"),
        right("misses"),
        right("useful"),
        right("realtime"),
    ]);
    for r in &s.rows {
        table.row([
            format!("{:.2}", r.utilisation),
            r.way.to_string(),
            r.units.to_string(),
            r.voluntary_switches.to_string(),
            r.involuntary_switches.to_string(),
            format!("{:.4}", r.switches_per_unit),
            r.lock_operations.to_string(),
            r.misses.to_string(),
            format!("{:.3}", r.useful_utilisation),
            r.realtime.to_string(),
        ]);
    }
    out.push_str(&table.render());
    for r in &s.ratios {
        out.push_str(&format!("at {:.2}: threads {:.2}x RMDP\n", r.utilisation, r.switch_ratio));
    }
    out.push_str(&format!(
        "context switches per unit of work: threads {:.2}x RMDP (median)\n",
        s.switch_ratio
    ));
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_presets_are_admitted_and_an_inadmissible_utilisation_is_refused_by_the_plan() {
        for config in [SwitchesConfig::quick(), SwitchesConfig::full()] {
            for &u in &config.utilisations {
                assert_eq!(admitted(u, config.work_ns), Ok(()), "{u}");
            }
        }
        let config = SwitchesConfig { utilisations: vec![0.2, 0.99], ..SwitchesConfig::quick() };
        let e = config.plan().unwrap_err().to_string();
        assert!(e.starts_with("utilisation 0.99: the analysis does not admit the six handlers"), "{e}");
    }
}
