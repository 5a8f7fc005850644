//! `kairos rtu`: the real-time upcall facility from the command line.
//!
//! `admit` reads a handlers file (bounded: [`HANDLERS_FILE_LIMIT`]) and runs the admission
//! analysis. The experiments' flags only parse here: they land in the experiment's
//! configuration, whose `plan` checks every value against its limits (saying why) before any
//! thread starts; a bad value is a usage error (exit code 2).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use kairos_lab::experiments::{
    rtu_deadlines, rtu_partition, rtu_sched_deadline, rtu_switches, rtu_throughput,
};
use kairos_rtu::analysis::analyse;
use kairos_rtu::file::handlers_from_toml;
use serde::Serialize;

use crate::exit;

/// The largest handlers file `rtu admit` reads: the most handlers a file may hold (1024) take
/// well under 200 KiB, and a larger file is more likely the wrong one (a device, a log).
pub(crate) const HANDLERS_FILE_LIMIT: u64 = 1 << 20;

#[derive(Args)]
pub struct RtuArgs {
    #[command(subcommand)]
    command: RtuCommand,
}

#[derive(Subcommand)]
enum RtuCommand {
    /// Admission control for a set of periodic handlers: response-time analysis under RMDP
    /// (fixed priorities, deferred preemption), beside the Liu-Layland bound. Exit code 0:
    /// admitted; 3: refused; 2: the file is wrong.
    Admit(AdmitArgs),
    /// The source's Fig. 5: minimum slack of 12 handlers against total utilisation, with and
    /// without background load. Full: 12 points of 20 s, each twice (about 8 min); --quick: 7
    /// points of 1.5 s, each twice (about 25 s).
    Deadlines(DeadlinesArgs),
    /// Context switches per unit of work: RMDP (no locks) against a SCHED_FIFO thread per
    /// handler with priority-inheritance mutexes. Full: 6 utilisations, each way 20 s (about 4
    /// min); --quick: 3 utilisations, each way 2 s (about 12 s).
    Switches(SwitchesArgs),
    /// The deadline experiment's handlers as SCHED_DEADLINE threads (Linux's own EDF), beside
    /// RMDP: every point three ways (RMDP, global EDF, one-core EDF). Full: 12 points of 20 s
    /// (about 13 min); --quick: 7 points of 1.5 s (about 40 s).
    SchedDeadline(DeadlinesArgs),
    /// The source's Fig. 6: a UDP receiver as an RTU against a plain receive loop, throughput
    /// and socket drops with and without background load. Full: 5 sizes, 3 receivers, 5 s each,
    /// twice (about 2.5 min); --quick: 3 sizes, 1 s each (about 20 s).
    Throughput(ThroughputArgs),
    /// The source's Fig. 7: six UDP streams' bandwidth, as RTUs and as plain threads. Eight
    /// points (two loads, two ways, with and without stress-ng) of 10 s (about 80 s); --quick:
    /// of 2 s (about 18 s).
    Partition(PartitionArgs),
}

#[derive(Args)]
struct DeadlinesArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Total utilisations of the twelve handlers, one point each: fractions of a core in (0, 1],
    /// comma-separated; default: 0.1,0.3,0.5,0.7,0.8,0.9,0.95 with --quick, else 12 points from
    /// 0.1 to 0.95.
    #[arg(long, value_name = "U,...", value_delimiter = ',')]
    utilisation: Vec<f64>,
    /// Run time per point, seconds, 0.1-3600 (0.1 s holds a few jobs of the 45 ms handler);
    /// default: 1.5 with --quick, else 20.
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Cost of one unit of work, microseconds, 1-1000 (each handler's batch is a whole number of
    /// units); default: 50.
    #[arg(long, value_name = "US")]
    unit_us: Option<u64>,
}

#[derive(Args)]
struct SwitchesArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Total utilisations of the six handlers, one point each: fractions of a core in (0, 1]
    /// that the analysis admits (the RMDP way runs admitted sets only), comma-separated;
    /// default: 0.2,0.4,0.6 with --quick, else 0.1 to 0.6 in steps of 0.1.
    #[arg(long, value_name = "U,...", value_delimiter = ',')]
    utilisation: Vec<f64>,
    /// Run time per point and way, seconds, 0.1-3600 (0.1 s holds a few jobs of every
    /// handler); default: 2 with --quick, else 20.
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Computation per unit of work, microseconds, 1-1000; default: 20.
    #[arg(long, value_name = "US")]
    work_us: Option<u64>,
}

#[derive(Args)]
struct ThroughputArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Datagram sizes, UDP payload bytes, 1-65507 (the most a UDP datagram carries),
    /// comma-separated; default: 64,1024,8192 with --quick, else 64,256,1024,4096,8192.
    #[arg(long, value_name = "BYTES,...", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Run time per point, seconds, 0.1-3600 (0.1 s holds a hundred receiver periods);
    /// default: 1 with --quick, else 5.
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
}

#[derive(Args)]
struct PartitionArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Run time per point, seconds, 0.1-3600 (0.1 s holds five sender periods); default: 2
    /// with --quick, else 10.
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
}

#[derive(Args)]
struct AdmitArgs {
    /// A TOML file of [[handler]] tables, at most 1 MiB and 1024 handlers: name (1-64
    /// characters), period_us (0.001 to 100000000000, i.e. 100000 s), batch and iteration
    /// (whole numbers, at least 1), unit_cost_us (at least 0.001; batch x unit cost at most 1000
    /// periods). Example: examples/rtu/handlers.toml.
    file: PathBuf,
    /// Print one JSON object on stdout; default: a table.
    #[arg(long)]
    json: bool,
}

impl DeadlinesArgs {
    fn config(&self) -> rtu_deadlines::DeadlinesConfig {
        let mut config = rtu_deadlines::DeadlinesConfig::preset(self.common.quick);
        if !self.utilisation.is_empty() {
            config.utilisations = self.utilisation.clone();
        }
        config.seconds = self.seconds.unwrap_or(config.seconds);
        config.unit_us = self.unit_us.unwrap_or(config.unit_us);
        config
    }
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
    /// Why there is no response time, when there is none.
    unbounded: Option<String>,
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
        RtuCommand::Deadlines(d) => crate::experiment(&d.common, &d.config(), rtu_deadlines::report),
        RtuCommand::SchedDeadline(d) => {
            let config = rtu_sched_deadline::SchedDeadlineConfig(d.config());
            crate::experiment(&d.common, &config, rtu_sched_deadline::report)
        }
        RtuCommand::Switches(a) => {
            let mut config = rtu_switches::SwitchesConfig::preset(a.common.quick);
            if !a.utilisation.is_empty() {
                config.utilisations = a.utilisation.clone();
            }
            config.seconds = a.seconds.unwrap_or(config.seconds);
            if let Some(us) = a.work_us {
                config.work_ns = us.saturating_mul(1_000);
            }
            crate::experiment(&a.common, &config, rtu_switches::report)
        }
        RtuCommand::Throughput(a) => {
            let mut config = rtu_throughput::ThroughputConfig::preset(a.common.quick);
            if !a.sizes.is_empty() {
                config.packet_sizes = a.sizes.clone();
            }
            config.seconds = a.seconds.unwrap_or(config.seconds);
            crate::experiment(&a.common, &config, rtu_throughput::report)
        }
        RtuCommand::Partition(a) => {
            let mut config = rtu_partition::PartitionConfig::preset(a.common.quick);
            config.seconds = a.seconds.unwrap_or(config.seconds);
            crate::experiment(&a.common, &config, rtu_partition::report)
        }
        RtuCommand::Admit(a) => admit(a),
    }
}

/// `rtu admit`: a file that cannot be read or holds what the analysis cannot represent is a
/// usage error; the analysis' refusal is [`exit::REFUSED`].
fn admit(a: &AdmitArgs) -> Result<i32> {
    let text =
        kairos_sys::fs::read_text(&a.file, HANDLERS_FILE_LIMIT).map_err(|e| exit::usage(e.to_string()))?;
    let name = a.file.display().to_string();
    let specs = handlers_from_toml(&text, &name).map_err(|e| exit::usage(e.to_string()))?;
    // The reader checked every handler the way the analysis does; this is a second guard.
    let analysis = analyse(&specs).map_err(|e| exit::usage(format!("{name}: {e}")))?;
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
                unbounded: h.unbounded.map(|why| why.to_string()),
            })
            .collect(),
        utilisation: analysis.utilisation,
        liu_layland_bound: analysis.liu_layland_bound,
    };
    let verdict_code = if out.admitted { exit::OK } else { exit::REFUSED };
    if a.json {
        outln!("{}", serde_json::to_string(&out)?);
        return Ok(verdict_code);
    }
    outln!(
        "{:<12} {:>8} {:>11} {:>11} {:>13} {:>10} {:>10}  verdict",
        "handler",
        "priority",
        "period us",
        "blocking us",
        "response us",
        "worst job",
        "util"
    );
    for (h, s) in out.handlers.iter().zip(&specs) {
        let response = h.response_time_us.map_or("unbounded".to_string(), |r| format!("{r:.3}"));
        let verdict = match (&h.unbounded, h.schedulable) {
            (Some(why), _) => format!("unbounded: {why}"),
            (None, true) => "meets every deadline".to_string(),
            (None, false) => format!(
                "misses: job {} of the {} in its busy period exceeds the period",
                h.worst_job, h.jobs_checked
            ),
        };
        outln!(
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
    outln!(
        "utilisation {:.3} (Liu-Layland bound {:.3}): {}",
        out.utilisation,
        out.liu_layland_bound,
        if out.admitted { "admitted" } else { "refused" }
    );
    Ok(verdict_code)
}
