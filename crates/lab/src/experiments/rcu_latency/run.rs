//! Running the rows: wiring the domain, the realtime reader, the writer, the noise sampler and
//! cyclictest together, then the files and verdicts.

use super::realtime::{self, RealtimeRun, RealtimeSpec};
use super::workload::{self, Route};
use super::{RcuLatencyConfig, RealtimeSetup, Row, RowNoise, Summary, Verdict, peer};
use crate::harness::Run;
use crate::harness::machine::MachineInfo;
use crate::harness::plot::{self, Series};
use crate::peers::cyclictest::{Cyclictest, CyclictestError};
use anyhow::{Context, Result, anyhow};
use kairos_metrics::{LatencyRecorder, NoiseConfig, Sampler};
use kairos_rcu::{Domain, DomainConfig, DomainStats, RcuCell, ReclaimPolicy};
use kairos_sys::memory::{NoIdleStates, disable_heap_trimming, lock_memory};
use kairos_sys::thread::{pin_current_thread, set_nice};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a row's threads measured, before it becomes a [`Row`].
pub(super) struct RowParts {
    pub(super) realtime: RealtimeRun,
    pub(super) elapsed: Duration,
    pub(super) callbacks_run: u64,
    pub(super) peak_unreclaimed_bytes: u64,
    pub(super) longest_reclaim_ns: u64,
    pub(super) reclaimer_longest_batch_ns: u64,
    pub(super) writer_longest_reclaim_ns: u64,
    pub(super) longest_callback_ns: u64,
}

/// A row's runs, merged.
struct Aggregate {
    name: &'static str,
    storm: usize,
    lateness: LatencyRecorder,
    wakeup: LatencyRecorder,
    in_task: LatencyRecorder,
    p999_per_run: Vec<u64>,
    elapsed: Duration,
    callbacks_run: u64,
    peak_unreclaimed_bytes: u64,
    longest_reclaim_ns: u64,
    reclaimer_longest_batch_ns: u64,
    writer_longest_reclaim_ns: u64,
    longest_callback_ns: u64,
    periods: u64,
    overruns: u64,
    sched_fifo: bool,
    noise: RowNoise,
    cyclictest_max_us: Option<u64>,
    cyclictest_skipped: Option<String>,
}

impl Aggregate {
    fn new(name: &'static str, storm: usize) -> Self {
        Self {
            name,
            storm,
            lateness: LatencyRecorder::new(),
            wakeup: LatencyRecorder::new(),
            in_task: LatencyRecorder::new(),
            p999_per_run: Vec::new(),
            elapsed: Duration::ZERO,
            callbacks_run: 0,
            peak_unreclaimed_bytes: 0,
            longest_reclaim_ns: 0,
            reclaimer_longest_batch_ns: 0,
            writer_longest_reclaim_ns: 0,
            longest_callback_ns: 0,
            periods: 0,
            overruns: 0,
            sched_fifo: true,
            noise: RowNoise::default(),
            cyclictest_max_us: None,
            cyclictest_skipped: None,
        }
    }

    fn add(
        &mut self,
        parts: RowParts,
        during: &kairos_metrics::DuringNoise,
        cyclictest: Option<Result<u64, CyclictestError>>,
    ) {
        self.lateness.merge(&parts.realtime.lateness);
        self.wakeup.merge(&parts.realtime.wakeup);
        self.in_task.merge(&parts.realtime.in_task);
        self.p999_per_run.push(parts.realtime.lateness.value_at_quantile(0.999));
        self.elapsed += parts.elapsed;
        self.callbacks_run += parts.callbacks_run;
        self.peak_unreclaimed_bytes = self.peak_unreclaimed_bytes.max(parts.peak_unreclaimed_bytes);
        self.longest_reclaim_ns = self.longest_reclaim_ns.max(parts.longest_reclaim_ns);
        self.reclaimer_longest_batch_ns =
            self.reclaimer_longest_batch_ns.max(parts.reclaimer_longest_batch_ns);
        self.writer_longest_reclaim_ns = self.writer_longest_reclaim_ns.max(parts.writer_longest_reclaim_ns);
        self.longest_callback_ns = self.longest_callback_ns.max(parts.longest_callback_ns);
        self.periods += parts.realtime.periods;
        self.overruns += parts.realtime.overruns;
        self.sched_fifo &= parts.realtime.status.sched_fifo;
        self.noise.max_gap_ns = self.noise.max_gap_ns.max(during.max_gap_ns());
        self.noise.steal_ns += during.steal_ns();
        self.noise.gaps_over_100us += during.cores.iter().map(|c| c.gaps_over_100us).sum::<u64>();
        match cyclictest {
            Some(Ok(max)) => self.cyclictest_max_us = Some(self.cyclictest_max_us.unwrap_or(0).max(max)),
            Some(Err(why)) => self.cyclictest_skipped = Some(why.to_string()),
            None => {}
        }
    }

    fn finish(mut self) -> Row {
        self.p999_per_run.sort_unstable();
        let median = self.p999_per_run.get(self.p999_per_run.len() / 2).copied().unwrap_or(0);
        Row {
            name: self.name.to_string(),
            storm: self.storm,
            lateness_ns: self.lateness.summary(),
            wakeup_ns: self.wakeup.summary(),
            in_task_ns: self.in_task.summary(),
            p999_median_ns: median,
            p999_per_run_ns: self.p999_per_run,
            callbacks_per_s: self.callbacks_run as f64 / self.elapsed.as_secs_f64().max(1e-9),
            peak_unreclaimed_bytes: self.peak_unreclaimed_bytes,
            longest_reclaim_ns: self.longest_reclaim_ns,
            reclaimer_longest_batch_ns: self.reclaimer_longest_batch_ns,
            writer_longest_reclaim_ns: self.writer_longest_reclaim_ns,
            longest_callback_ns: self.longest_callback_ns,
            periods: self.periods,
            overruns: self.overruns,
            sched_fifo: self.sched_fifo,
            noise: self.noise,
            cyclictest_max_us: self.cyclictest_max_us,
            cyclictest_skipped: if self.cyclictest_max_us.is_some() { None } else { self.cyclictest_skipped },
            ccdf: self.lateness.ccdf(),
        }
    }
}

/// The noise probe's settings: the full windows only for rows long enough to pay for them.
pub(super) fn noise_config(config: &RcuLatencyConfig) -> NoiseConfig {
    if config.row_duration < Duration::from_secs(5) { NoiseConfig::quick() } else { NoiseConfig::default() }
}

/// Measures every row, writes the CSV series and plots, and returns the summary.
pub(super) fn measure(config: &RcuLatencyConfig, run: &mut Run<'_>) -> Result<Summary> {
    let machine = run.machine().clone();
    run.log(&format!("rcu-latency on {}", machine.one_line()));
    if !machine.sched_fifo {
        run.log("the realtime task runs at normal priority: SCHED_FIFO needs root");
    }
    workload::EXTRA_WORK_NS.store(config.callback_work_ns, Ordering::Relaxed);
    let callback_ns = workload::calibrate_callback_ns();
    let plan = plan_rows(config);
    // Realtime practice, applied to every row alike: no page faults, no unmapping (TLB
    // shootdowns) in the process, no idle states (a halted vCPU wakes late).
    let no_idle = NoIdleStates::request().ok();
    let setup = RealtimeSetup {
        memory_locked: machine.sched_fifo && lock_memory().is_ok(),
        heap_trimming_disabled: disable_heap_trimming(),
        no_idle_states: no_idle.is_some(),
    };
    let noise_config = noise_config(config);
    let mut aggregates: Vec<Aggregate> =
        plan.iter().map(|&(name, storm)| Aggregate::new(name, storm)).collect();
    for repetition in 0..config.repetitions {
        for aggregate in &mut aggregates {
            let (name, storm) = (aggregate.name, aggregate.storm);
            run.doing(&format!("{name} x{storm}"));
            run.log(&format!("run {}/{}: row {name}, storm {storm}", repetition + 1, config.repetitions));
            let sampler = Sampler::start(&noise_config)?;
            let cyclictest = start_cyclictest(config, &machine, name);
            let parts = if name == "crossbeam-epoch" {
                peer::crossbeam_row(config, storm)?
            } else {
                kairos_row(config, name, storm)?
            };
            let during = sampler.finish()?;
            aggregate.add(parts, &during, cyclictest.map(Cyclictest::finish));
            run.step("");
        }
    }
    let rows: Vec<Row> = aggregates.into_iter().map(Aggregate::finish).collect();
    drop(no_idle);
    let verdicts = verdicts(config, &rows, callback_ns.1);
    write_files(run, config, &rows)?;
    let summary = Summary {
        experiment: "rcu-latency",
        run: run.finish(),
        realtime_setup: setup,
        config: config.clone(),
        callback_ns,
        rows,
        verdicts,
    };
    run.dir().write_text("table.txt", &summary.table())?;
    Ok(summary)
}

/// The rows to run, in order: the baseline once, then every row at every storm size.
pub(super) fn plan_rows(config: &RcuLatencyConfig) -> Vec<(&'static str, usize)> {
    let wanted = |name: &str| config.only.is_empty() || config.only.iter().any(|n| n == name);
    let mut plan = Vec::new();
    if wanted("baseline") {
        plan.push(("baseline", 0));
    }
    for &storm in &config.storms {
        for name in super::ROW_NAMES.iter().skip(1) {
            if wanted(name) {
                plan.push((*name, storm));
            }
        }
    }
    plan
}

fn start_cyclictest(config: &RcuLatencyConfig, machine: &MachineInfo, name: &str) -> Option<Cyclictest> {
    if !config.cyclictest || !matches!(name, "inline" | "offload") {
        return None;
    }
    let priority = if machine.sched_fifo { config.fifo_priority - 1 } else { 0 };
    // Whole seconds, within the row.
    let secs = Duration::from_secs(config.row_duration.as_secs().max(1));
    Some(Cyclictest::start(config.realtime_core, priority, config.period, secs))
}

/// The policy and reclaimer placement of a Kairos row.
fn policy_of(config: &RcuLatencyConfig, name: &str) -> (ReclaimPolicy, Option<usize>) {
    match name {
        "inline" => (ReclaimPolicy::Inline, None),
        "throttle" => {
            (ReclaimPolicy::Throttle { max_batch: config.throttle_max_batch, budget: config.budget }, None)
        }
        "adaptive" => (ReclaimPolicy::Adaptive { max_budget: config.budget }, Some(config.housekeeping_core)),
        "offload" => (ReclaimPolicy::Offload, Some(config.housekeeping_core)),
        "offload-same-core" => (ReclaimPolicy::Offload, Some(config.realtime_core)),
        "direct" => (ReclaimPolicy::Direct, None),
        _ => (ReclaimPolicy::Offload, Some(config.housekeeping_core)),
    }
}

/// Starts the realtime reader thread: `body` runs once per period on the realtime core.
pub(super) fn spawn_realtime<B>(
    config: &RcuLatencyConfig,
    stop: &Arc<AtomicBool>,
    make_body: impl FnOnce() -> B + Send + 'static,
) -> std::thread::JoinHandle<RealtimeRun>
where
    B: FnMut(),
{
    let spec = RealtimeSpec {
        core: config.realtime_core,
        fifo_priority: config.fifo_priority,
        period: config.period,
    };
    let stop = Arc::clone(stop);
    std::thread::Builder::new()
        .name("realtime".into())
        .spawn(move || {
            let status = realtime::enter(&spec);
            let body = make_body();
            realtime::run(&spec, status, &stop, body)
        })
        .expect("spawning the realtime thread")
}

/// Lets a row run for its duration, stops it, and joins its threads.
pub(super) fn finish_row(
    config: &RcuLatencyConfig,
    stop: &AtomicBool,
    realtime: std::thread::JoinHandle<RealtimeRun>,
    writer: Option<std::thread::JoinHandle<()>>,
    started: Instant,
) -> Result<(RealtimeRun, Duration)> {
    std::thread::sleep(config.row_duration);
    stop.store(true, Ordering::Relaxed);
    let realtime = realtime.join().map_err(|_| anyhow!("the realtime thread panicked"))?;
    if let Some(writer) = writer {
        writer.join().map_err(|_| anyhow!("the writer thread panicked"))?;
    }
    Ok((realtime, started.elapsed()))
}

fn kairos_row(config: &RcuLatencyConfig, name: &str, storm: usize) -> Result<RowParts> {
    let (policy, reclaimer_core) = policy_of(config, name);
    let nice = config.reclaimer_nice;
    let reclaimer_init = reclaimer_core.map(|core| {
        Arc::new(move || {
            let _ = pin_current_thread(core);
            let _ = set_nice(nice);
        }) as Arc<dyn Fn() + Send + Sync>
    });
    let domain = Domain::new(DomainConfig {
        policy,
        high_watermark: 1 << 22,
        reclaimer_init,
        ..DomainConfig::default()
    })
    .context("creating the RCU domain")?;
    let cell = Arc::new(RcuCell::new(&domain, Route { next_hop: 0 }));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    let reads = config.reads_per_period;
    let (rt_domain, rt_cell) = (domain.clone(), Arc::clone(&cell));
    let realtime = spawn_realtime(config, &stop, move || {
        let mut reader = rt_domain.register("realtime").expect("a fresh domain has free reader slots");
        let mut sink = 0u64;
        move || {
            for _ in 0..reads {
                sink = sink.wrapping_add(rt_cell.read(&reader).next_hop);
            }
            std::hint::black_box(sink);
            reader.quiescent();
        }
    });

    let writer = (storm > 0).then(|| {
        let (domain, cell, stop) = (domain.clone(), Arc::clone(&cell), Arc::clone(&stop));
        let (core, pause) = (config.housekeeping_core, config.period);
        std::thread::spawn(move || {
            let _ = pin_current_thread(core);
            let mut seed = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let nodes = workload::storm_nodes(storm, seed, false);
                seed += storm as u64;
                let _ = cell.replace(Route { next_hop: seed });
                let _ = domain.defer_drop_all(nodes);
                while !stop.load(Ordering::Relaxed) && !domain.barrier(Duration::from_millis(10)) {}
                std::thread::sleep(pause);
            }
        })
    });

    let (realtime, elapsed) = finish_row(config, &stop, realtime, writer, started)?;
    let stats: DomainStats = domain.stats();
    Ok(RowParts {
        realtime,
        elapsed,
        callbacks_run: stats.callbacks_run,
        peak_unreclaimed_bytes: stats.peak_unreclaimed_bytes,
        longest_callback_ns: stats.reader_longest_callback_ns,
        longest_reclaim_ns: stats.reader_longest_reclaim_ns,
        reclaimer_longest_batch_ns: stats.reclaimer_longest_batch_ns,
        writer_longest_reclaim_ns: stats.writer_longest_reclaim_ns,
    })
}

fn verdicts(config: &RcuLatencyConfig, rows: &[Row], callback_p999_ns: u64) -> Vec<Verdict> {
    let Some(baseline) = rows.iter().find(|r| r.name == "baseline") else { return Vec::new() };
    let b = baseline.p999_median_ns;
    let limit = b + b / 2 + 20_000;
    let budget_ns = config.budget.as_nanos() as u64;
    config
        .storms
        .iter()
        .map(|&storm| {
            let row = |name: &str| rows.iter().find(|r| r.name == name && r.storm == storm);
            let inline_p999_ratio = row("inline").map_or(0.0, |r| r.p999_median_ns as f64 / b.max(1) as f64);
            let in_task = |r: &Row| r.in_task_ns.p999;
            let inline_in_task_p999_ratio =
                row("inline").map_or(0.0, |r| in_task(r) as f64 / in_task(baseline).max(1) as f64);
            let in_task_p999_ns = super::ROW_NAMES
                .iter()
                .filter_map(|n| if *n == "baseline" { Some(baseline) } else { row(n) })
                .map(|r| (r.name.clone(), in_task(r)))
                .collect();
            let bounded = ["offload", "throttle", "adaptive"]
                .iter()
                .filter_map(|n| row(n).map(|r| (n.to_string(), r.p999_median_ns, r.p999_median_ns <= limit)))
                .collect();
            // "One callback" is the slowest one the reader ran in a budgeted call (a callback hit
            // by an interrupt counts as one callback too), and never less than the calibrated p99.9.
            let budget_held = ["throttle", "adaptive"]
                .iter()
                .filter_map(|n| {
                    row(n).map(|r| {
                        let bound = budget_ns + r.longest_callback_ns.max(callback_p999_ns);
                        (n.to_string(), r.longest_reclaim_ns, bound, r.longest_reclaim_ns <= bound)
                    })
                })
                .collect();
            Verdict {
                storm,
                baseline_p999_ns: b,
                inline_p999_ratio,
                bounded_limit_ns: limit,
                bounded,
                budget_held,
                inline_in_task_p999_ratio,
                in_task_p999_ns,
            }
        })
        .collect()
}

fn write_files(run: &mut Run<'_>, config: &RcuLatencyConfig, rows: &[Row]) -> Result<()> {
    let mut csv = String::from(
        "name,storm,mean_ns,stddev_ns,p50_ns,p99_ns,p999_ns,p9999_ns,max_ns,wakeup_p999_ns,in_task_p999_ns,in_task_max_ns,callbacks_per_s,peak_unreclaimed_bytes,\
         longest_reclaim_ns,reclaimer_longest_batch_ns,writer_longest_reclaim_ns,periods,overruns,noise_max_gap_ns,cyclictest_max_us\n",
    );
    let mut ccdf = String::from("name,storm,lateness_ns,fraction_later\n");
    for r in rows {
        let l = &r.lateness_ns;
        let _ = writeln!(
            csv,
            "{},{},{:.1},{:.1},{},{},{},{},{},{},{},{},{:.0},{},{},{},{},{},{},{},{}",
            r.name,
            r.storm,
            l.mean,
            l.stddev,
            l.p50,
            l.p99,
            l.p999,
            l.p9999,
            l.max,
            r.wakeup_ns.p999,
            r.in_task_ns.p999,
            r.in_task_ns.max,
            r.callbacks_per_s,
            r.peak_unreclaimed_bytes,
            r.longest_reclaim_ns,
            r.reclaimer_longest_batch_ns,
            r.writer_longest_reclaim_ns,
            r.periods,
            r.overruns,
            r.noise.max_gap_ns,
            r.cyclictest_max_us.map_or(String::new(), |m| m.to_string())
        );
        for (value, fraction) in &r.ccdf {
            let _ = writeln!(ccdf, "{},{},{},{:.9}", r.name, r.storm, value, fraction);
        }
    }
    run.dir().write_text("rows.csv", &csv)?;
    run.dir().write_text("lateness_ccdf.csv", &ccdf)?;
    for &storm in &config.storms {
        let series: Vec<Series> = rows
            .iter()
            .filter(|r| r.storm == storm || r.storm == 0)
            .map(|r| Series {
                name: r.name.clone(),
                points: r.ccdf.iter().map(|&(ns, f)| ((ns.max(1)) as f64 / 1_000.0, f)).collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let title = format!(
            "Realtime task lateness, {storm} callbacks per grace period ({} us period)",
            config.period.as_micros()
        );
        plot::tail_chart(
            &run.plot(&format!("lateness-storm{storm}.png")),
            &title,
            "completion lateness (us)",
            &series,
        )?;
    }
    Ok(())
}
