//! `kairos dispatch`: flow-affinity dispatch to workers that come and go, from the command line.
//!
//! The flags only parse here: they land in the experiment's configuration in
//! [`kairos_lab::experiments::dispatch`], whose `plan` checks every value against its limits before anything
//! runs (a bad value is a usage error, exit code 2, and no directory is made). Each run goes
//! through the lab's harness, so it leaves `--results`/`dispatch-<name>/<run-id>/` with its
//! `config.json`, `summary.json` and plots; the table or `--json` (the summary) follows.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use kairos_dispatch::PolicyKind;
use kairos_dispatch::latency::Service;
use kairos_lab::experiments::dispatch::{self, cold, latency, remap, skew, step, threads};

use crate::exit;

/// The service distribution `name` names, or a usage error for `flag`.
fn service_named(flag: &str, name: &str) -> Result<Service> {
    dispatch::service_named(name).ok_or_else(|| {
        exit::usage(format!(
            "{flag}: unknown distribution {name:?}: give constant, exponential, bimodal or heavy"
        ))
    })
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

/// Where a run goes and how its summary is printed: every dispatch experiment takes these.
#[derive(Args)]
struct Output {
    /// Print the summary as one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Directory the runs are written under (a subdirectory per experiment and run; created
    /// when missing).
    #[arg(long, value_name = "DIR", default_value = "results")]
    results: PathBuf,
}

impl Output {
    /// The harness's flags, with `quick` as the command had it (false where it has none).
    fn common(&self, quick: bool) -> crate::Common {
        crate::Common { quick, json: self.json, results: self.results.clone() }
    }
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
    #[command(flatten)]
    output: Output,
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
    #[command(flatten)]
    output: Output,
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
    #[command(flatten)]
    output: Output,
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
    #[command(flatten)]
    output: Output,
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
    /// The flags as the lab's workload, unchecked (the experiment's `plan` checks them).
    fn lab(&self) -> dispatch::Workload {
        dispatch::Workload { flows: self.flows, zipf: self.zipf, cold_ns: self.cold_ns, seed: self.seed }
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
    #[command(flatten)]
    output: Output,
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
    #[command(flatten)]
    output: Output,
}

/// Runs a `kairos dispatch` command.
pub fn run(args: &DispatchArgs) -> Result<i32> {
    match &args.command {
        DispatchCommand::Remap(a) => {
            let config = remap::RemapConfig { workers: a.workers, flows: a.flows, seed: a.seed };
            crate::experiment(&a.output.common(false), &config, remap::report)
        }
        DispatchCommand::Skew(a) => {
            let config = skew::SkewConfig {
                workers: a.workers,
                flows: a.flows,
                zipf: a.zipf,
                packets_per_ms: a.packets_per_ms,
                rebalance_ms: a.rebalance_ms,
                window_ms: a.window_ms,
                duration_ms: a.duration_ms,
                seed: a.seed,
            };
            crate::experiment(&a.output.common(false), &config, skew::report)
        }
        DispatchCommand::Latency(a) => {
            let mut config = latency::LatencyConfig::preset(a.quick);
            if !a.services.is_empty() {
                config.services =
                    a.services.iter().map(|name| service_named("--services", name)).collect::<Result<_>>()?;
            }
            if !a.loads.is_empty() {
                config.loads = a.loads.clone();
            }
            config.requests = a.requests.unwrap_or(config.requests);
            config.workers = a.workers;
            config.workload = a.workload.lab();
            config.mean_service_us = a.mean_service_us;
            crate::experiment(&a.output.common(a.quick), &config, latency::report)
        }
        DispatchCommand::Step(a) => {
            let mut config = step::StepConfig::preset(a.quick);
            config.service = service_named("--service", &a.service)?;
            config.phase_ms = a.phase_ms.unwrap_or(config.phase_ms);
            config.workers = a.workers;
            config.loads = a.loads.clone();
            config.workload = a.workload.lab();
            config.park_idle_us = a.park_idle_us;
            config.wake_us = a.wake_us;
            crate::experiment(&a.output.common(a.quick), &config, step::report)
        }
        DispatchCommand::Cold(a) => {
            let [first, second] = a.cores[..] else {
                return Err(exit::usage(format!(
                    "--cores takes two cores, A,B; it was given {}",
                    a.cores.len()
                )));
            };
            let config = cold::ColdConfig { cores: [first, second], ..cold::ColdConfig::preset(a.quick) };
            crate::experiment(&a.output.common(a.quick), &config, cold::report)
        }
        DispatchCommand::Threads(a) => {
            let mut config = threads::ThreadsConfig::preset(a.quick);
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
            crate::experiment(&a.output.common(a.quick), &config, threads::report)
        }
    }
}
