//! `kairos rtu`: the real-time upcall facility from the command line.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use kairos_lab::{rtu_deadlines, rtu_partition, rtu_sched_deadline, rtu_switches, rtu_throughput};
use kairos_rtu::analysis::analyse;
use kairos_rtu::file::handlers_from_toml;
use serde::Serialize;

use crate::exit;

#[derive(Args)]
pub struct RtuArgs {
    #[command(subcommand)]
    command: RtuCommand,
}

#[derive(Subcommand)]
enum RtuCommand {
    /// Admission control for a set of periodic handlers: response-time analysis under RMDP
    /// (fixed priorities, deferred preemption), beside the Liu-Layland bound.
    Admit(AdmitArgs),
    /// The source's Fig. 5: minimum slack of 12 handlers against total utilisation, with and
    /// without background load.
    Deadlines(DeadlinesArgs),
    /// Context switches per unit of work: RMDP (no locks) against a SCHED_FIFO thread per
    /// handler with priority-inheritance mutexes.
    Switches(crate::Common),
    /// The deadline experiment's handlers as SCHED_DEADLINE threads (Linux's own EDF).
    SchedDeadline(crate::Common),
    /// The source's Fig. 6: a UDP receiver as an RTU against a plain receive loop, throughput
    /// and socket drops with and without background load.
    Throughput(crate::Common),
    /// The source's Fig. 7: six UDP streams' bandwidth, as RTUs and as plain threads.
    Partition(crate::Common),
}

#[derive(Args)]
struct DeadlinesArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Total utilisations to run, comma-separated (default: the preset's sweep).
    #[arg(long, value_delimiter = ',', value_parser = parse_utilisation)]
    utilisation: Vec<f64>,
    /// Seconds per point (default: 1.5 with --quick, 20 without).
    #[arg(long, value_parser = parse_seconds)]
    seconds: Option<f64>,
}

fn parse_utilisation(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(u) if u > 0.0 && u < 1.0 => Ok(u),
        _ => Err(format!("'{text}' is not a utilisation: give a number between 0 and 1, e.g. 0.75")),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 3600.0 => Ok(s),
        _ => Err(format!("'{text}' is not a run time: give seconds between 0 and 3600, e.g. 20")),
    }
}

#[derive(Args)]
struct AdmitArgs {
    /// A TOML file of [[handler]] tables: name, period_us, batch, iteration, unit_cost_us.
    file: PathBuf,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct HandlerRow {
    name: String,
    priority: usize,
    utilisation: f64,
    blocking_us: f64,
    response_time_us: Option<f64>,
    worst_job: usize,
    jobs_checked: usize,
    schedulable: bool,
}

#[derive(Serialize)]
struct AdmitOut {
    admitted: bool,
    handlers: Vec<HandlerRow>,
    utilisation: f64,
    liu_layland_bound: f64,
}

/// Runs an `rtu` command; `admit` ends with [`exit::REFUSED`] when the set is refused.
pub fn run(args: &RtuArgs) -> Result<i32> {
    match &args.command {
        RtuCommand::Deadlines(d) => {
            let a = &d.common;
            let mut config = rtu_deadlines::DeadlinesConfig::preset(a.quick);
            if !d.utilisation.is_empty() {
                config.utilisations = d.utilisation.clone();
            }
            if let Some(seconds) = d.seconds {
                config.seconds = seconds;
            }
            crate::experiment(a, &config, rtu_deadlines::report)
        }
        RtuCommand::Switches(a) => {
            let config = rtu_switches::SwitchesConfig::preset(a.quick);
            crate::experiment(a, &config, rtu_switches::report)
        }
        RtuCommand::SchedDeadline(a) => {
            let config =
                rtu_sched_deadline::SchedDeadlineConfig(rtu_deadlines::DeadlinesConfig::preset(a.quick));
            crate::experiment(a, &config, rtu_sched_deadline::report)
        }
        RtuCommand::Throughput(a) => {
            let config = rtu_throughput::ThroughputConfig::preset(a.quick);
            crate::experiment(a, &config, rtu_throughput::report)
        }
        RtuCommand::Partition(a) => {
            let config = rtu_partition::PartitionConfig::preset(a.quick);
            crate::experiment(a, &config, rtu_partition::report)
        }
        RtuCommand::Admit(a) => {
            let text = std::fs::read_to_string(&a.file)
                .with_context(|| format!("cannot read {}", a.file.display()))?;
            let specs =
                handlers_from_toml(&text, &a.file.display().to_string()).map_err(anyhow::Error::msg)?;
            let analysis = analyse(&specs)?;
            let us = |ns: u64| ns as f64 / 1e3;
            let out = AdmitOut {
                admitted: analysis.admitted,
                handlers: analysis
                    .handlers
                    .iter()
                    .map(|h| HandlerRow {
                        name: h.name.clone(),
                        priority: h.priority,
                        utilisation: h.utilisation,
                        blocking_us: us(h.blocking_ns),
                        response_time_us: h.response_time_ns.map(us),
                        worst_job: h.worst_job,
                        jobs_checked: h.jobs_checked,
                        schedulable: h.schedulable,
                    })
                    .collect(),
                utilisation: analysis.utilisation,
                liu_layland_bound: analysis.liu_layland_bound,
            };
            let verdict_code = if out.admitted { exit::OK } else { exit::REFUSED };
            if a.json {
                println!("{}", serde_json::to_string(&out)?);
                return Ok(verdict_code);
            }
            println!(
                "{:<12} {:>8} {:>11} {:>11} {:>13} {:>10} {:>10}  verdict",
                "handler", "priority", "period us", "blocking us", "response us", "worst job", "util"
            );
            for (h, s) in out.handlers.iter().zip(&specs) {
                let response = h.response_time_us.map_or("unbounded".to_string(), |r| format!("{r:.3}"));
                let verdict = if h.schedulable {
                    "meets every deadline".to_string()
                } else {
                    format!(
                        "misses: job {} of the {} in its busy period exceeds the period",
                        h.worst_job, h.jobs_checked
                    )
                };
                println!(
                    "{:<12} {:>8} {:>11.3} {:>11.3} {:>13} {:>10} {:>10.3}  {verdict}",
                    h.name,
                    h.priority,
                    s.period_ns as f64 / 1e3,
                    h.blocking_us,
                    response,
                    h.worst_job,
                    h.utilisation
                );
            }
            println!(
                "utilisation {:.3} (Liu-Layland bound {:.3}): {}",
                out.utilisation,
                out.liu_layland_bound,
                if out.admitted { "admitted" } else { "refused" }
            );
            Ok(verdict_code)
        }
    }
}
