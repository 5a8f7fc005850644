//! `kairos rtu deadlines`: the source's Fig. 5. Twelve handlers in two groups of six (each
//! group with periods 20, 25, ..., 45 ms: the source used 40-90 ms; shorter periods give more
//! invocations per second, so a point takes seconds), every one doing 50 us units of pure
//! computation, scaled so that the set's total utilisation is swept from 0.1 to 0.95. Each
//! point runs on the real-time shell (one pinned `SCHED_FIFO` thread) and records the minimum
//! slack (deadline minus completion) over all invocations and the misses (a job still unfinished
//! at its deadline is dropped; its slack counts as minus the work it had left, a bound on how
//! late it would have been); then again with
//! background load (`stress-ng` CPU and I/O workers pinned to the same core), where installed.
//! Sets the analysis refuses are run too (registered without admission) to show where misses
//! start; the `admitted` column says which.
//!
//! # Summary fields (stable)
//! `machine`, `config`, `noise`, `realtime` (`SCHED_FIFO` granted), `background` (how the
//! load was made, or why not), `rows` (`utilisation`, `background_load`, `admitted`,
//! `min_slack_us`, `misses`, `invocations`, `overruns`, `demoted`, `worst_wakeup_lateness_us`,
//! `miss_fraction`, `stalls_seen`, `longest_stall_us`, `misses_with_stall`,
//! `misses_after_demotion`, `unexplained`), `misses` (each missed job: `utilisation`,
//! `background_load`, `handler`, `job`, `release_ms`, `deadline_ms`, `completion_ms`, `stall_us`,
//! `demoted`), `stall_watch_realtime`, `unexplained_admitted_misses`, `plots`.
//!
//! Attribution: during every point a stall watch ([`kairos_metrics::stall`]: `SCHED_FIFO` 99,
//! pinned to the shell's core, waking every millisecond) times the stretches when even it could
//! not run: the machine's stalls, not the shell's work. A miss "coincides with a stall" when one
//! overlaps the job's window. A miss of a handler the shell had demoted is outside the analysis's
//! promise (a demoted handler runs below every admitted one, a unit a dispatch), and is counted
//! apart: these handlers spin for exactly their declared time, so a demotion here is the machine
//! charging a stolen or interrupted stretch to the handler's CPU time, three jobs in a row. An
//! admitted set's miss is *unexplained* when neither a stall nor a demotion accounts for it.

use std::time::Duration;

use anyhow::{Context as _, Result};
use kairos_metrics::{StallWatch, StallWatchConfig};
use kairos_rtu::analysis::{HandlerSpec, analyse};
use kairos_rtu::shell::{Context, Scheduler, ShellConfig};
use serde::Serialize;

use crate::harness::plot::{Scales, XySeries, measured_per_key, xy_chart};
use crate::harness::table::{TextTable, right};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo, check_points};

#[derive(Debug, Clone, Serialize)]
/// What the deadline experiment runs.
pub struct DeadlinesConfig {
    /// Total utilisations of the twelve handlers, one point each, in (0, 1].
    pub utilisations: Vec<f64>,
    /// Run time per point, seconds (0.1 to 3600).
    pub seconds: f64,
    /// Core of the shell (and of the background load); one that exists here.
    pub core: usize,
    /// Cost of one unit of work, us (1 to 1000; batches are whole units).
    pub unit_us: u64,
}

impl DeadlinesConfig {
    /// Seven points of 1.5 s: about 25 s with and without load.
    pub fn quick() -> Self {
        Self {
            utilisations: vec![0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95],
            seconds: 1.5,
            core: kairos_sys::proc::last_core(),
            unit_us: 50,
        }
    }

    /// Twelve points of 20 s: about 8 minutes with and without load.
    pub fn full() -> Self {
        Self {
            utilisations: vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95],
            seconds: 20.0,
            ..Self::quick()
        }
    }

    /// [`DeadlinesConfig::quick`] or [`DeadlinesConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }
}

impl Experiment for DeadlinesConfig {
    const NAME: &'static str = "rtu-deadlines";
    type Summary = DeadlinesSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        check_points(&self.utilisations, self.seconds, self.core, "a few jobs of the 45 ms handler")?;
        if !(1..=1_000).contains(&self.unit_us) {
            return Err(InvalidConfig::new(format!(
                "the unit of work must be 1-1000 us (batches are whole units), got {}",
                self.unit_us
            )));
        }
        // Every point with and without load, each with about 0.3 s of set-up.
        Ok(Plan::new(self.utilisations.len() * 2, self.seconds + 0.3))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<DeadlinesSummary> {
        measure(self, run)
    }
}

#[derive(Debug, Clone, Serialize)]
/// One point: a utilisation, with or without background load.
pub struct DeadlineRow {
    /// Total utilisation of the set.
    pub utilisation: f64,
    /// Whether `stress-ng` ran on the shell's core.
    pub background_load: bool,
    /// Whether the response-time analysis admitted the set.
    pub admitted: bool,
    /// Minimum over every invocation of deadline minus completion, us (negative: a miss).
    pub min_slack_us: f64,
    /// Jobs still unfinished at their deadline.
    pub misses: u64,
    /// Jobs released.
    pub invocations: u64,
    /// Iterations that ran over their declared cost.
    pub overruns: u64,
    /// Handlers demoted for overrunning (three in a row): each then runs below every other.
    pub demoted: usize,
    /// Latest wake-up of the shell after a release it slept towards, us.
    pub worst_wakeup_lateness_us: f64,
    /// Misses over invocations.
    pub miss_fraction: f64,
    /// Stalls the stall watch (`SCHED_FIFO` 99 on the shell's core) saw during the point, and
    /// the longest.
    pub stalls_seen: usize,
    /// The longest of those stalls, us.
    pub longest_stall_us: f64,
    /// Misses whose window (release to deadline, or to completion when later) overlaps a stall.
    pub misses_with_stall: u64,
    /// Misses of a handler the shell had demoted for overrunning, outside every stall (so that
    /// `misses_with_stall + misses_after_demotion + unexplained = misses`).
    pub misses_after_demotion: u64,
    /// Misses that neither a stall nor a demotion accounts for.
    pub unexplained: u64,
}

/// One missed job, with the stall it coincides with (if any).
#[derive(Debug, Clone, Serialize)]
pub struct MissRow {
    /// Total utilisation of the point.
    pub utilisation: f64,
    /// Whether `stress-ng` ran on the shell's core.
    pub background_load: bool,
    /// The handler's name (`g0-20ms`: group 0, period 20 ms).
    pub handler: String,
    /// The job's number, from 0 at the point's start.
    pub job: u64,
    /// Times in ms since the point started.
    pub release_ms: f64,
    /// Its deadline, ms since the point started.
    pub deadline_ms: f64,
    /// When it completed, if it did (a late job is dropped at its deadline).
    pub completion_ms: Option<f64>,
    /// The longest stall overlapping the job's window, us (0: none seen).
    pub stall_us: f64,
    /// The handler had been demoted for overrunning when the job missed.
    pub demoted: bool,
}

#[derive(Debug, Clone, Serialize)]
/// What the deadline experiment found.
pub struct DeadlinesSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: DeadlinesConfig,
    /// Whether the shell ran `SCHED_FIFO` at every point.
    pub realtime: bool,
    /// How the background load was made, or why it was not.
    pub background: String,
    /// Every point, without load first.
    pub rows: Vec<DeadlineRow>,
    /// Every miss kept by the shell, with the stall it coincides with.
    pub misses: Vec<MissRow>,
    /// The stall watch ran at `SCHED_FIFO` 99 (otherwise it cannot tell the machine's stalls from
    /// the shell's own work, and `misses_with_stall` means little).
    pub stall_watch_realtime: bool,
    /// Misses of admitted sets that no stall explains (the analysis promised none).
    pub unexplained_admitted_misses: u64,
}

/// The twelve handlers at total utilisation `u`: equal shares, batches of whole units.
pub fn handler_set(u: f64, unit_us: u64) -> Vec<HandlerSpec> {
    (0..12)
        .map(|i| {
            let period_us = 20_000 + 5_000 * (i % 6) as u64;
            let units = ((u / 12.0) * period_us as f64 / unit_us as f64).round().max(1.0) as u64;
            HandlerSpec {
                name: format!("g{}-{}ms", i / 6, period_us / 1_000),
                period_ns: period_us * 1_000,
                batch: units,
                iteration: 1,
                unit_cost_ns: unit_us * 1_000,
            }
        })
        .collect()
}

pub(crate) fn run_point(specs: &[HandlerSpec], config: &DeadlinesConfig) -> Result<Point> {
    let admitted = analyse(specs).map(|a| a.admitted).unwrap_or(false);
    let mut sched = Scheduler::new(());
    for s in specs {
        let cost = s.unit_cost_ns;
        sched.register_unadmitted(s.clone(), move |_: &mut (), units: u64, _: &Context<'_>| {
            kairos_sys::clock::spin_until_ns(kairos_sys::clock::monotonic_ns() + units * cost);
            units
        });
    }
    let watch = StallWatch::start(StallWatchConfig::on_core(config.core)).ok();
    let shell = ShellConfig { core: Some(config.core), ..ShellConfig::default() };
    let running = sched.spawn(shell).context("starting the real-time shell's thread")?;
    std::thread::sleep(Duration::from_secs_f64(config.seconds));
    let report = running.stop()?;
    let stalls = watch.map(StallWatch::finish).transpose()?.unwrap_or_default();
    let min_slack = report
        .finished
        .iter()
        .map(|f| (f.release + specs[f.handler].period_ns) as i64 - f.completion as i64)
        .chain(
            report
                .counts
                .iter()
                .filter(|c| c.worst_unfinished_ns > 0)
                .map(|c| -(c.worst_unfinished_ns as i64)),
        )
        .min()
        .unwrap_or(0);
    let utilisation = specs.iter().map(HandlerSpec::utilisation).sum();
    let misses: Vec<MissRow> = report
        .missed
        .iter()
        .map(|m| {
            let from = report.started_ns + m.release;
            let to = report.started_ns + m.completion.unwrap_or(m.deadline).max(m.deadline);
            MissRow {
                utilisation,
                background_load: false,
                handler: specs[m.handler].name.clone(),
                job: m.job,
                release_ms: m.release as f64 / 1e6,
                deadline_ms: m.deadline as f64 / 1e6,
                completion_ms: m.completion.map(|c| c as f64 / 1e6),
                stall_us: stalls.during(from, to).map(|s| s.length_ns()).max().unwrap_or(0) as f64 / 1e3,
                demoted: m.demoted,
            }
        })
        .collect();
    let invocations: u64 = report.counts.iter().map(|c| c.released).sum();
    let miss_count: u64 = report.counts.iter().map(|c| c.misses).sum();
    let row = DeadlineRow {
        utilisation,
        background_load: false,
        admitted,
        min_slack_us: min_slack as f64 / 1e3,
        misses: miss_count,
        invocations,
        overruns: report.counts.iter().map(|c| c.overruns).sum(),
        demoted: report.counts.iter().filter(|c| c.demoted).count(),
        worst_wakeup_lateness_us: report.worst_wakeup_lateness_ns as f64 / 1e3,
        miss_fraction: miss_count as f64 / invocations.max(1) as f64,
        stalls_seen: stalls.stalls.len(),
        longest_stall_us: stalls.stalls.iter().map(|s| s.length_ns()).max().unwrap_or(0) as f64 / 1e3,
        misses_with_stall: misses.iter().filter(|m| m.stall_us > 0.0).count() as u64,
        misses_after_demotion: misses.iter().filter(|m| m.demoted && m.stall_us == 0.0).count() as u64,
        unexplained: miss_count
            .saturating_sub(misses.iter().filter(|m| m.stall_us > 0.0 || m.demoted).count() as u64),
    };
    Ok(Point { row, misses, realtime: report.realtime, watch_realtime: stalls.realtime })
}

/// One point's row, its misses, and whether the shell and the stall watch were real-time.
pub(crate) struct Point {
    pub row: DeadlineRow,
    pub misses: Vec<MissRow>,
    pub realtime: bool,
    pub watch_realtime: bool,
}

fn measure(config: &DeadlinesConfig, run: &mut Run<'_>) -> Result<DeadlinesSummary> {
    let mut rows = Vec::new();
    let mut misses = Vec::new();
    let (mut realtime, mut watch_realtime) = (true, true);
    let mut record = |point: Point, background_load: bool| {
        realtime &= point.realtime;
        watch_realtime &= point.watch_realtime;
        rows.push(DeadlineRow { background_load, ..point.row });
        misses.extend(point.misses.into_iter().map(|m| MissRow { background_load, ..m }));
    };
    for &u in &config.utilisations {
        run.doing(&format!("U = {u}"));
        record(run_point(&handler_set(u, config.unit_us), config)?, false);
        run.step("");
    }
    let background_note = crate::harness::background::under_stress_ng(1, Some(config.core), || {
        for &u in &config.utilisations {
            run.doing(&format!("U = {u} with stress-ng"));
            record(run_point(&handler_set(u, config.unit_us), config)?, true);
            run.step("");
        }
        Ok(())
    })?
    .unwrap_or_else(|e| run.skipped(&e));
    if !realtime {
        run.log("SCHED_FIFO was not granted: the handlers ran at normal priority (run as root)");
    }
    if !watch_realtime {
        run.log(
            "the stall watch ran at normal priority: it cannot tell the machine's stalls from the shell's work",
        );
    }
    run.dir().write_csv("rows.csv", &rows)?;
    run.dir().write_csv("misses.csv", &misses)?;
    let plot = run.plot("min_slack.png");
    let mut all = measured_per_key(
        [(false, "no background load"), (true, "stress-ng on the same core")],
        &rows,
        |(_, name)| name.to_string(),
        |(loaded, _), r| r.background_load == *loaded,
        |r| (r.utilisation, r.min_slack_us / 1e3),
    );
    // A dashed vertical line at the highest utilisation the analysis admitted.
    let slack_ms = rows.iter().map(|r| r.min_slack_us / 1e3);
    let (low, high) = slack_ms.fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if let Some(limit) = rows.iter().filter(|r| r.admitted).map(|r| r.utilisation).reduce(f64::max) {
        all.push(XySeries {
            name: format!("highest admitted utilisation ({limit:.2})"),
            points: vec![(limit, low), (limit, high)],
            model: true,
            color: 2,
        });
    }
    xy_chart(
        &plot,
        "RMDP: minimum slack over all invocations (12 handlers, periods 20-45 ms)",
        "total utilisation",
        "minimum slack (ms; below 0 is a miss)",
        Scales::default(),
        &all,
    )?;
    let unexplained_admitted_misses = rows.iter().filter(|r| r.admitted).map(|r| r.unexplained).sum();
    Ok(DeadlinesSummary {
        run: run.finish(),
        config: config.clone(),
        realtime,
        background: background_note,
        rows,
        unexplained_admitted_misses,
        misses,
        stall_watch_realtime: watch_realtime,
    })
}

/// The report a person reads: one line per point, then the admitted sets' misses.
pub fn report(s: &DeadlinesSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    out.push_str(&format!(
        "SCHED_FIFO: {}; background: {}\n\n",
        if s.realtime { "granted" } else { "NOT granted" },
        s.background,
    ));
    let mut table = TextTable::new(&[
        right("util"),
        right("background"),
        right("admitted"),
        right("min slack us"),
        right("misses"),
        right("invocations"),
        right("overruns"),
        right("demoted"),
        right("worst wake us"),
        right("stalls"),
        right("longest stall us"),
        right("with stall"),
        right("while demoted"),
    ]);
    for r in &s.rows {
        table.row([
            format!("{:.3}", r.utilisation),
            if r.background_load { "stress-ng" } else { "none" }.to_string(),
            r.admitted.to_string(),
            format!("{:.1}", r.min_slack_us),
            r.misses.to_string(),
            r.invocations.to_string(),
            r.overruns.to_string(),
            r.demoted.to_string(),
            format!("{:.1}", r.worst_wakeup_lateness_us),
            r.stalls_seen.to_string(),
            format!("{:.1}", r.longest_stall_us),
            r.misses_with_stall.to_string(),
            r.misses_after_demotion.to_string(),
        ]);
    }
    out.push_str(&table.render());
    let admitted: Vec<&DeadlineRow> = s.rows.iter().filter(|r| r.admitted).collect();
    for bg in [false, true] {
        let set: Vec<&&DeadlineRow> = admitted.iter().filter(|r| r.background_load == bg).collect();
        if set.is_empty() {
            continue;
        }
        let (misses, invocations, with_stall, demoted, unexplained) =
            set.iter().fold((0, 0, 0, 0, 0), |(m, i, w, d, u), r| {
                (
                    m + r.misses,
                    i + r.invocations,
                    w + r.misses_with_stall,
                    d + r.misses_after_demotion,
                    u + r.unexplained,
                )
            });
        out.push_str(&format!(
            "admitted sets, {}: {} misses in {} invocations ({:.4}%): {} during a stall the watch saw, \
             {} of a demoted handler outside a stall, {} unexplained\n",
            if bg { "with stress-ng" } else { "no background load" },
            misses,
            invocations,
            misses as f64 * 100.0 / invocations.max(1) as f64,
            with_stall,
            demoted,
            unexplained
        ));
    }
    if !s.stall_watch_realtime {
        out.push_str("the stall watch was NOT real-time: its stalls may be the shell's own work\n");
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}
