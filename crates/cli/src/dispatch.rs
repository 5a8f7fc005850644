//! `kairos dispatch`: flow-affinity dispatch to workers that come and go. `remap` counts the
//! flows each steering policy moves when a worker joins or leaves, against the ideal; `skew`
//! follows the busiest worker's load under Zipf-skewed flows on a virtual clock.

use anyhow::Result;
use clap::{Args, Subcommand};
use kairos_dispatch::PolicyKind;
use kairos_dispatch::elastic::{self, Phase, Signal, StepConfig, StepRow};
use kairos_dispatch::latency::{self, LatencyConfig, LatencyRow, Service};
use kairos_dispatch::remap::{Event, RemapRow, flow_hashes, remap};
use kairos_dispatch::skew::{self, SkewConfig, SkewReport};

use crate::exit;
use kairos_lab::plot::{Scales, XySeries, measured_per_key, xy_chart};

/// One figure of a load step's window, as a chart draws it.
type WindowFigure = fn(&elastic::StepWindow) -> f64;

/// The service distribution `name` names, or a usage error for `flag`.
fn service_named(flag: &str, name: &str) -> Result<Service> {
    Service::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| {
        exit::usage(format!(
            "{flag}: unknown distribution {name:?}: give constant, exponential, bimodal or heavy"
        ))
    })
}

/// Creates the plots' directory, when asked for, before any work.
fn plot_dir(dir: Option<&std::path::Path>) -> Result<Option<std::path::PathBuf>> {
    let Some(dir) = dir else { return Ok(None) };
    std::fs::create_dir_all(dir)
        .map_err(|e| exit::usage(format!("--plots {}: cannot create it: {e}", dir.display())))?;
    Ok(Some(dir.to_path_buf()))
}

/// `kairos dispatch`'s subcommands.
#[derive(Args)]
#[command(about = "Flow-affinity dispatch: steering policies, and what a change of workers costs them")]
pub struct DispatchArgs {
    #[command(subcommand)]
    command: DispatchCommand,
}

#[derive(Subcommand)]
enum DispatchCommand {
    /// The fraction of flows each policy moves when a worker joins (N to N+1) and when the
    /// first leaves (N to N-1), beside the ideal (1/(N+1), 1/N). Deterministic, no timing.
    Remap(RemapArgs),
    /// The busiest worker over the mean, window by window, under Zipf-skewed flows on a virtual
    /// clock, each policy rebalancing as it does; with the floor the heaviest flow sets.
    Skew(SkewArgs),
    /// Shenango's synthetic server on a virtual clock: open-loop Poisson requests over many
    /// flows through the real dispatcher and policies to simulated workers; latency percentiles
    /// per policy, service distribution and load. --quick: 4 loads, 2 distributions, 200,000
    /// requests a point (seconds).
    Latency(LatencyArgs),
    /// A load step (10% -> 80% -> 10% of the workers' capacity) with workers added on
    /// Shenango's or Caladan's congestion signal and parked when idle, on the same virtual
    /// clock; per policy and signal: latency, p99 per phase, workers in use and p99 per 10 ms
    /// window, reordering. --quick: 50 ms a phase (seconds).
    Step(StepArgs),
    /// What a flow's state costs a worker, measured on real threads: warm (it touched the flow
    /// last), written last by another core (a moved flow), or in memory; the simulations'
    /// --cold-ns is the second less the first. --quick: 500 turns (well under a second).
    Cold(ColdArgs),
    /// The dispatcher and its workers on real threads, a worker leaving or coming back every
    /// millisecond: per policy, with the hand-off and (hash-mod, kairos) without, packets out of
    /// sequence, state updates lost, flow states moved, a packet's cost to a worker, packets a
    /// second. --quick: 1,000,000 packets a row (seconds); else 10,000,000 (a minute or two).
    Threads(ThreadsArgs),
}

#[derive(Args)]
struct ThreadsArgs {
    /// 1,000,000 packets a row instead of 10,000,000.
    #[arg(long)]
    quick: bool,
    /// Packets a row, 1000-10000000000 (overrides --quick's).
    #[arg(long)]
    packets: Option<u64>,
    /// Worker threads, 2-64 (worker 0 stays; the others take turns leaving).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Flows, each a 64-byte row of state, 1-10000000.
    #[arg(long, default_value_t = 4_096)]
    flows: usize,
    /// The flows' Zipf exponent, 0 (uniform) to 3.
    #[arg(long, default_value_t = 0.0)]
    zipf: f64,
    /// Wall-clock ms between two changes of workers, 0.01-10000.
    #[arg(long, default_value_t = 1.0)]
    change_ms: f64,
    /// The policies, comma-separated: hash-mod, calisto, caladan, kairos (default: all).
    #[arg(long, value_delimiter = ',', value_parser = policy_by_name)]
    policies: Vec<PolicyKind>,
    /// The dispatcher's core, then the workers' (dealt round-robin); default 0,1 where there
    /// are two cores.
    #[arg(long, value_delimiter = ',')]
    cores: Vec<usize>,
    /// Do not offer idle groups a shorter queue (`kairos` then moves buckets only on a change
    /// of workers and its rebalancing step).
    #[arg(long)]
    no_idle_steering: bool,
    /// Print `{"rows": [...], "simulated": false, ...}` as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// A policy by the name `--policies` takes.
fn policy_by_name(name: &str) -> Result<PolicyKind, String> {
    PolicyKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
        format!("unknown policy '{name}': the policies are hash-mod, calisto, caladan and kairos")
    })
}

#[derive(Args)]
struct ColdArgs {
    /// 500 turns instead of 2,000.
    #[arg(long)]
    quick: bool,
    /// The two cores, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    cores: Vec<usize>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct StepArgs {
    /// 50 ms a phase instead of 200.
    #[arg(long)]
    quick: bool,
    /// Workers the allocator may use, 2-1000.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// The phases' loads, 0.01-0.99 each, of all the workers' capacity.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.8,0.1")]
    loads: Vec<f64>,
    /// Each phase's length, ms, 1-10000 (default: 50 with --quick, else 200).
    #[arg(long)]
    phase_ms: Option<f64>,
    #[command(flatten)]
    workload: Workload,
    /// Service distribution: constant, exponential, bimodal or heavy.
    #[arg(long, default_value = "exponential")]
    service: String,
    /// Idle time after which a worker parks, us, 0-1000000.
    #[arg(long, default_value_t = 10.0)]
    park_idle_us: f64,
    /// From a worker's grant until it takes packets, us, 0-1000000.
    #[arg(long, default_value_t = 5.0)]
    wake_us: f64,
    /// Print `{"rows": [...], "simulated": true}` (each row with its windows) as JSON.
    #[arg(long)]
    json: bool,
    /// Also draw, per signal, the workers in use and the p99 window by window for every policy,
    /// as PNGs in this directory (created when missing).
    #[arg(long, value_name = "DIR")]
    plots: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct LatencyArgs {
    /// Fewer points and requests.
    #[arg(long)]
    quick: bool,
    /// Workers, 1-1000.
    #[arg(long, default_value_t = 14)]
    workers: usize,
    #[command(flatten)]
    workload: Workload,
    /// Mean service time, microseconds, 0.1-100000.
    #[arg(long, default_value_t = 10.0)]
    mean_service_us: f64,
    /// Offered loads, 0.01-0.99 each (default: 0.1,0.5,0.8,0.9 with --quick, else 0.05 to 0.95).
    #[arg(long, value_delimiter = ',')]
    loads: Vec<f64>,
    /// Service distributions: constant, exponential, bimodal, heavy (default: exponential and
    /// bimodal with --quick, else all four).
    #[arg(long, value_delimiter = ',')]
    services: Vec<String>,
    /// Requests a point, 1000-100000000 (default: 200000 with --quick, else 1000000).
    #[arg(long)]
    requests: Option<u64>,
    /// Print `{"rows": [...], "simulated": true}` as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw p99 against load for every policy, one chart per service distribution, as
    /// PNGs in this directory (created when missing).
    #[arg(long, value_name = "DIR")]
    plots: Option<std::path::PathBuf>,
}

/// The simulated flows and their state, as `latency` and `step` take them.
#[derive(Args)]
struct Workload {
    /// Flows, 1-10000000 (the source's 700,000 by default).
    #[arg(long, default_value_t = 700_000)]
    flows: usize,
    /// The flows' Zipf exponent, 0 (uniform) to 3.
    #[arg(long, default_value_t = 0.0)]
    zipf: f64,
    /// Extra service time of a request whose flow's state is cold on its worker, ns, 0-1000000
    /// (default: what `kairos dispatch cold` measured on this kind of machine).
    #[arg(long, default_value_t = kairos_dispatch::latency::CALIBRATED_COLD_NS)]
    cold_ns: f64,
    /// The draws' seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl Workload {
    /// The first flag out of range, as a usage error's text.
    fn check(&self) -> Result<(), String> {
        let checks = [
            (
                (1..=10_000_000).contains(&self.flows),
                format!("--flows {} is out of range: 1 to 10000000", self.flows),
            ),
            ((0.0..=3.0).contains(&self.zipf), format!("--zipf {} is out of range: 0 to 3", self.zipf)),
            (
                (0.0..=1_000_000.0).contains(&self.cold_ns),
                format!("--cold-ns {} is out of range: 0 to 1000000", self.cold_ns),
            ),
        ];
        checks.into_iter().find(|(ok, _)| !ok).map_or(Ok(()), |(_, why)| Err(why))
    }
}

#[derive(Args)]
struct SkewArgs {
    /// Active workers, 2-1000.
    #[arg(long, default_value_t = 14)]
    workers: usize,
    /// Flows, 1-10000000 (the source's 700,000 by default).
    #[arg(long, default_value_t = 700_000)]
    flows: usize,
    /// The Zipf exponent, 0 (uniform) to 3.
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Packets per millisecond of virtual time, 1-10000000.
    #[arg(long, default_value_t = 50_000)]
    packets_per_ms: u64,
    /// Milliseconds between the load-aware policy's rebalances, 1-1000.
    #[arg(long, default_value_t = 1)]
    rebalance_ms: u64,
    /// The measuring window, ms, 1-1000.
    #[arg(long, default_value_t = 5)]
    window_ms: u64,
    /// Virtual time, ms, 1-60000.
    #[arg(long, default_value_t = 100)]
    duration_ms: u64,
    /// The draws' seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print `{"rows": [...]}` as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RemapArgs {
    /// Active workers before the change, 2-1000.
    #[arg(long, default_value_t = 10)]
    workers: usize,
    /// Flows (distinct uniform hashes), 1-10000000.
    #[arg(long, default_value_t = 1_000_000)]
    flows: usize,
    /// The hashes' seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print `{"rows": [...]}` as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs a `kairos dispatch` command.
pub fn run(args: &DispatchArgs) -> Result<i32> {
    match &args.command {
        DispatchCommand::Remap(a) => remap_command(a),
        DispatchCommand::Skew(a) => skew_command(a),
        DispatchCommand::Latency(a) => latency_command(a),
        DispatchCommand::Step(a) => step_command(a),
        DispatchCommand::Cold(a) => cold_command(a),
        DispatchCommand::Threads(a) => threads_command(a),
    }
}

fn remap_command(a: &RemapArgs) -> Result<i32> {
    if !(2..=1000).contains(&a.workers) {
        return Err(exit::usage(format!("--workers {} is out of range: 2 to 1000", a.workers)));
    }
    if !(1..=10_000_000).contains(&a.flows) {
        return Err(exit::usage(format!("--flows {} is out of range: 1 to 10000000", a.flows)));
    }
    let flows = flow_hashes(a.flows, a.seed);
    let rows: Vec<RemapRow> = PolicyKind::ALL
        .iter()
        .flat_map(|&kind| [Event::Join, Event::Leave].map(|event| remap(kind, a.workers, &flows, event)))
        .collect();
    if a.json {
        outln!("{}", serde_json::json!({ "rows": rows, "flows": a.flows, "seed": a.seed }));
        return Ok(exit::OK);
    }
    outln!("{} flows; moved on a change of workers (ideal: the newcomer's or the leaver's share)", a.flows);
    outln!(
        "{:<10} {:<6} {:>8} {:>8} {:>8} {:>9} {:>14}",
        "policy",
        "event",
        "workers",
        "moved",
        "ideal",
        "x ideal",
        "max/mean flows"
    );
    for r in &rows {
        let event = match r.event {
            Event::Join => "join",
            Event::Leave => "leave",
        };
        outln!(
            "{:<10} {:<6} {:>3} -> {:<2} {:>7.1}% {:>7.1}% {:>9.2} {:>14.3}",
            r.policy,
            event,
            r.workers_before,
            r.workers_after,
            100.0 * r.flows_moved_fraction,
            100.0 * r.ideal_fraction,
            r.flows_moved_fraction / r.ideal_fraction,
            r.max_over_mean_flows
        );
    }
    Ok(exit::OK)
}

fn skew_command(a: &SkewArgs) -> Result<i32> {
    let checks: [(bool, String); 7] = [
        ((2..=1000).contains(&a.workers), format!("--workers {} is out of range: 2 to 1000", a.workers)),
        ((1..=10_000_000).contains(&a.flows), format!("--flows {} is out of range: 1 to 10000000", a.flows)),
        ((0.0..=3.0).contains(&a.zipf), format!("--zipf {} is out of range: 0 to 3", a.zipf)),
        (
            (1..=10_000_000).contains(&a.packets_per_ms),
            format!("--packets-per-ms {} is out of range: 1 to 10000000", a.packets_per_ms),
        ),
        (
            (1..=1000).contains(&a.rebalance_ms),
            format!("--rebalance-ms {} is out of range: 1 to 1000", a.rebalance_ms),
        ),
        (
            (1..=1000).contains(&a.window_ms),
            format!("--window-ms {} is out of range: 1 to 1000", a.window_ms),
        ),
        (
            (1..=60_000).contains(&a.duration_ms),
            format!("--duration-ms {} is out of range: 1 to 60000", a.duration_ms),
        ),
    ];
    if let Some((_, why)) = checks.into_iter().find(|(ok, _)| !ok) {
        return Err(exit::usage(why));
    }
    let config = SkewConfig {
        workers: a.workers,
        flows: a.flows,
        exponent: a.zipf,
        packets_per_ms: a.packets_per_ms,
        rebalance_ms: a.rebalance_ms,
        window_ms: a.window_ms,
        duration_ms: a.duration_ms,
        seed: a.seed,
    };
    let reports: Vec<SkewReport> = PolicyKind::ALL
        .iter()
        .map(|&kind| {
            let mut policy = kind.build(a.workers);
            skew::run(&config, policy.as_mut())
        })
        .collect();
    if a.json {
        let rows: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| {
                let last = r.windows.last().map_or(0.0, |w| w.max_over_mean);
                serde_json::json!({
                    "policy": r.policy,
                    "max_over_mean_load": last,
                    "balanced_from_ms": r.balanced_from_ms,
                    "floor": r.floor,
                    "windows": r.windows,
                })
            })
            .collect();
        outln!("{}", serde_json::json!({ "rows": rows, "config": config, "simulated": true }));
        return Ok(exit::OK);
    }
    outln!(
        "{} workers, {} flows, Zipf({}), {} packets/ms on a virtual clock; rebalance every {} ms, windows of {} ms",
        a.workers,
        a.flows,
        a.zipf,
        a.packets_per_ms,
        a.rebalance_ms,
        a.window_ms
    );
    let floor = reports.first().map_or(1.0, |r| r.floor);
    outln!("floor (the heaviest flow's share x workers): {floor:.3}");
    outln!("{:<10} {:>14} {:>14} {:>18}", "policy", "first window", "last window", "within 5% from");
    for r in &reports {
        let first = r.windows.first().map_or(0.0, |w| w.max_over_mean);
        let last = r.windows.last().map_or(0.0, |w| w.max_over_mean);
        let from = r.balanced_from_ms.map_or("never".to_string(), |ms| format!("{ms} ms"));
        outln!("{:<10} {:>14.3} {:>14.3} {:>18}", r.policy, first, last, from);
    }
    Ok(exit::OK)
}

fn latency_command(a: &LatencyArgs) -> Result<i32> {
    let loads = if a.loads.is_empty() {
        if a.quick { vec![0.1, 0.5, 0.8, 0.9] } else { (1..=19).map(|i| f64::from(i) * 0.05).collect() }
    } else {
        a.loads.clone()
    };
    let services: Vec<Service> = if a.services.is_empty() {
        if a.quick { vec![Service::Exponential, Service::Bimodal] } else { Service::ALL.to_vec() }
    } else {
        a.services.iter().map(|name| service_named("--services", name)).collect::<Result<_>>()?
    };
    let requests = a.requests.unwrap_or(if a.quick { 200_000 } else { 1_000_000 });
    a.workload.check().map_err(exit::usage)?;
    let checks: [(bool, String); 3] = [
        ((1..=1000).contains(&a.workers), format!("--workers {} is out of range: 1 to 1000", a.workers)),
        (
            (0.1..=100_000.0).contains(&a.mean_service_us),
            format!("--mean-service-us {} is out of range: 0.1 to 100000", a.mean_service_us),
        ),
        (
            (1_000..=100_000_000).contains(&requests),
            format!("--requests {requests} is out of range: 1000 to 100000000"),
        ),
    ];
    if let Some((_, why)) = checks.into_iter().find(|(ok, _)| !ok) {
        return Err(exit::usage(why));
    }
    if let Some(bad) = loads.iter().find(|l| !(0.01..=0.99).contains(*l)) {
        return Err(exit::usage(format!("--loads: {bad} is out of range: 0.01 to 0.99")));
    }
    let plots = plot_dir(a.plots.as_deref())?;
    let mut rows: Vec<LatencyRow> = Vec::new();
    for &service in &services {
        for &load in &loads {
            let w = &a.workload;
            let config = LatencyConfig {
                workers: a.workers,
                flows: w.flows,
                zipf: w.zipf,
                mean_service_ns: a.mean_service_us * 1_000.0,
                service,
                load,
                requests,
                cold_ns: w.cold_ns,
                seed: w.seed,
            };
            for kind in PolicyKind::ALL {
                rows.push(latency::run(&config, kind));
            }
        }
    }
    if let Some(dir) = &plots {
        for &service in &services {
            let series = measured_per_key(
                PolicyKind::ALL,
                &rows,
                |kind| kind.name().to_string(),
                |kind, r| r.policy == kind.name() && r.service == service,
                |r| (r.load, r.latency_us.p99),
            );
            let path = dir.join(format!("latency_p99_{}.png", service.name()));
            let title =
                format!("simulated p99 against load, {} service, Zipf({})", service.name(), a.workload.zipf);
            xy_chart(
                &path,
                &title,
                "offered load",
                "p99 latency, us",
                Scales { log_x: false, log_y: true },
                &series,
            )?;
            eprintln!("plot: {}", path.display());
        }
    }
    if a.json {
        outln!(
            "{}",
            serde_json::json!({ "rows": rows, "simulated": true, "workers": a.workers, "flows": a.workload.flows, "zipf": a.workload.zipf, "requests": requests })
        );
        return Ok(exit::OK);
    }
    outln!(
        "simulated (virtual clock, the real dispatcher and policies): {} workers, {} flows, Zipf({}), mean service {} us, {} requests a point, {} ns for a cold flow",
        a.workers,
        a.workload.flows,
        a.workload.zipf,
        a.mean_service_us,
        requests,
        a.workload.cold_ns
    );
    outln!(
        "{:<12} {:>5} {:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "service",
        "load",
        "policy",
        "p50 us",
        "p90",
        "p99",
        "p99.9",
        "p99.99",
        "max/mean",
        "reordered"
    );
    for r in &rows {
        let l = &r.latency_us;
        outln!(
            "{:<12} {:>5.2} {:<9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.3} {:>9}",
            r.service.name(),
            r.load,
            r.policy,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.p9999,
            r.max_over_mean_load,
            r.reordered
        );
    }
    Ok(exit::OK)
}

fn step_command(a: &StepArgs) -> Result<i32> {
    let phase_ms = a.phase_ms.unwrap_or(if a.quick { 50.0 } else { 200.0 });
    let service = service_named("--service", &a.service)?;
    a.workload.check().map_err(exit::usage)?;
    let checks: [(bool, String); 5] = [
        ((2..=1000).contains(&a.workers), format!("--workers {} is out of range: 2 to 1000", a.workers)),
        (
            (0.0..=1_000_000.0).contains(&a.park_idle_us),
            format!("--park-idle-us {} is out of range: 0 to 1000000", a.park_idle_us),
        ),
        (
            (0.0..=1_000_000.0).contains(&a.wake_us),
            format!("--wake-us {} is out of range: 0 to 1000000", a.wake_us),
        ),
        ((1.0..=10_000.0).contains(&phase_ms), format!("--phase-ms {phase_ms} is out of range: 1 to 10000")),
        (!a.loads.is_empty() && a.loads.len() <= 100, "--loads takes 1 to 100 phases".to_string()),
    ];
    if let Some((_, why)) = checks.into_iter().find(|(ok, _)| !ok) {
        return Err(exit::usage(why));
    }
    if let Some(bad) = a.loads.iter().find(|l| !(0.01..=0.99).contains(*l)) {
        return Err(exit::usage(format!("--loads: {bad} is out of range: 0.01 to 0.99")));
    }
    let plots = plot_dir(a.plots.as_deref())?;
    let mut rows: Vec<StepRow> = Vec::new();
    for signal in Signal::ALL {
        let mut config = StepConfig::default_step(phase_ms, signal);
        config.max_workers = a.workers;
        config.flows = a.workload.flows;
        config.phases = a.loads.iter().map(|&load| Phase { load, duration_ns: phase_ms * 1e6 }).collect();
        config.zipf = a.workload.zipf;
        config.service = service;
        config.cold_ns = a.workload.cold_ns;
        config.park_idle_ns = a.park_idle_us * 1e3;
        config.wake_ns = a.wake_us * 1e3;
        config.seed = a.workload.seed;
        for kind in PolicyKind::ALL {
            rows.push(elastic::run(&config, kind));
        }
    }
    if let Some(dir) = &plots {
        for signal in Signal::ALL {
            let charts: [(&str, &str, bool, WindowFigure); 2] = [
                ("workers", "workers in use", false, |w| w.workers),
                ("p99", "p99 latency, us", true, |w| w.p99_us),
            ];
            for (what, label, log_y, pick) in charts {
                // A series per policy: its windows of this signal, against time.
                let series: Vec<XySeries> = rows
                    .iter()
                    .filter(|r| r.signal == signal.name())
                    .enumerate()
                    .map(|(color, r)| {
                        let points = r.windows.iter().map(|w| (w.start_ms, pick(w))).collect();
                        XySeries::measured(r.policy, points, color)
                    })
                    .collect();
                let path = dir.join(format!("step_{what}_{}.png", signal.name()));
                let title = format!("load step, {}'s signal: {label} per window", signal.name());
                xy_chart(&path, &title, "window start, ms", label, Scales { log_x: false, log_y }, &series)?;
                eprintln!("plot: {}", path.display());
            }
        }
    }
    if a.json {
        outln!(
            "{}",
            serde_json::json!({ "rows": rows, "simulated": true, "workers": a.workers, "loads": a.loads, "phase_ms": phase_ms })
        );
        return Ok(exit::OK);
    }
    let loads: Vec<String> = a.loads.iter().map(|l| format!("{:.0}%", l * 100.0)).collect();
    outln!(
        "simulated (virtual clock, the real dispatcher and policies): up to {} workers, {} flows, load {} for {} ms each, {} service of 10 us, Zipf({}), {} ns for a cold flow; a worker wakes {} us after its grant and parks after {} us idle",
        a.workers,
        a.workload.flows,
        loads.join(" -> "),
        phase_ms,
        service.name(),
        a.workload.zipf,
        a.workload.cold_ns,
        a.wake_us,
        a.park_idle_us
    );
    outln!(
        "{:<9} {:<9} {:>8} {:>8} {:>9} {:>22} {:>8} {:>7} {:>7} {:>9} {:>6}",
        "signal",
        "policy",
        "p50 us",
        "p99",
        "p99.9",
        "p99 by phase",
        "workers",
        "joins",
        "parks",
        "reordered",
        "cold"
    );
    for r in &rows {
        let phases: Vec<String> = r.phase_p99_us.iter().map(|p| format!("{p:.0}")).collect();
        outln!(
            "{:<9} {:<9} {:>8.1} {:>8.1} {:>9.1} {:>22} {:>8.2} {:>7} {:>7} {:>9} {:>5.1}%",
            r.signal,
            r.policy,
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            phases.join(" / "),
            r.mean_workers,
            r.joins,
            r.leaves,
            r.reordered,
            100.0 * r.cold_fraction
        );
    }
    Ok(exit::OK)
}

fn cold_command(a: &ColdArgs) -> Result<i32> {
    let [first, second] = a.cores[..] else {
        return Err(exit::usage(format!("--cores takes two cores, A,B; it was given {}", a.cores.len())));
    };
    let mut config = kairos_lab::dispatch_cold::ColdConfig::preset(a.quick);
    config.cores = [first, second];
    config.check().map_err(exit::usage)?;
    let r = kairos_lab::dispatch_cold::run(&config)?;
    if a.json {
        outln!("{}", serde_json::to_string(&r)?);
        return Ok(exit::OK);
    }
    outln!(
        "real threads on cores {first} and {second}: a 64-byte flow state read and written per packet, {} flows a batch, {} turns; {}",
        config.batch,
        config.turns,
        r.machine.one_line()
    );
    outln!("{:<44} {:>8} {:>8} {:>8}   {:>8}", "ns per packet", "chained", "p10", "p90", "batched");
    for (what, c, b) in [
        ("warm (this worker touched the flow last)", r.chained.warm_ns, r.batched.warm_ns),
        ("cross-core (another core wrote it last)", r.chained.cross_core_ns, r.batched.cross_core_ns),
        ("memory (64 MiB table, random flows)", r.chained.memory_ns, r.batched.memory_ns),
    ] {
        outln!("{:<44} {:>8.1} {:>8.1} {:>8.1}   {:>8.1}", what, c.median, c.p10, c.p90, b.median);
    }
    outln!(
        "a moved flow's state costs {:.0} ns more than a warm one, chained (the simulations' --cold-ns); batched {:.1} ns",
        r.cold_ns,
        r.batched.cross_core_ns.median - r.batched.warm_ns.median
    );
    Ok(exit::OK)
}

fn threads_command(a: &ThreadsArgs) -> Result<i32> {
    use kairos_lab::dispatch_threads::{self, ThreadsConfig};
    let mut config = ThreadsConfig::preset(a.quick);
    config.packets = a.packets.unwrap_or(config.packets);
    config.workers = a.workers;
    config.flows = a.flows;
    config.zipf = a.zipf;
    config.change_ms = a.change_ms;
    config.idle_steering = !a.no_idle_steering;
    if !a.policies.is_empty() {
        config.policies = a.policies.clone();
    }
    if !a.cores.is_empty() {
        config.cores = a.cores.clone();
    }
    config.check().map_err(exit::usage)?;
    let bar = kairos_lab::output::progress(0, "dispatch threads");
    let r = dispatch_threads::run(&config, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    if a.json {
        outln!("{}", serde_json::to_string(&r)?);
        return Ok(exit::OK);
    }
    outln!(
        "real threads: the dispatcher on core {}, {} workers on {}; {} packets a row over {} flows (Zipf {}), a change of workers every {} ms; {}",
        config.cores.first().map_or("any".to_string(), |c| c.to_string()),
        config.workers,
        if config.cores.len() > 1 {
            format!("cores {:?}", &config.cores[1..])
        } else {
            "any core".to_string()
        },
        config.packets,
        config.flows,
        config.zipf,
        config.change_ms,
        r.machine.one_line()
    );
    outln!(
        "{:<9} {:>8} {:>8} {:>10} {:>10} {:>8} {:>11} {:>8} {:>11} {:>10} {:>6}",
        "policy",
        "hand-off",
        "changes",
        "hand-offs",
        "idle moves",
        "max held",
        "out of seq",
        "lost",
        "state moves",
        "worker ns",
        "Mpps"
    );
    for row in &r.rows {
        outln!(
            "{:<9} {:>8} {:>8} {:>10} {:>10} {:>8} {:>11} {:>8} {:>11} {:>10.1} {:>6.2}",
            row.policy,
            if row.hand_off { "on" } else { "off" },
            row.changes,
            row.handoffs,
            row.idle_moves,
            row.max_held,
            row.out_of_sequence,
            row.lost_updates,
            row.state_moves,
            row.worker_ns_per_packet,
            row.mpps
        );
    }
    Ok(exit::OK)
}
