//! `kairos`: the command-line front of the Kairos lab. It parses flags, calls the lab, prints a
//! table (or, with `--json`, the summary as one JSON object on stdout) and sends progress to
//! stderr. Errors are one line and a non-zero exit; SIGINT, SIGTERM and SIGHUP end a run after
//! undoing its system changes, with exit status 128 + the signal ([`kairos_sys::cleanup`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// The doc comments of the flags are clap's help texts, plain text for a terminal: the TOML
// tables (`[[link]]`) and placeholders (`<pid>`) they name are not rustdoc links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

/// `print!` to standard output through [`exit::write_out`]: a closed pipe ends the command
/// quietly (exit 141) instead of panicking. Used in functions returning `anyhow::Result`.
macro_rules! out {
    ($($arg:tt)*) => { $crate::exit::write_out(format_args!($($arg)*))? };
}

/// `println!` through [`exit::write_out`], as [`out!`].
macro_rules! outln {
    () => { $crate::exit::write_out(format_args!("\n"))? };
    ($($arg:tt)*) => { $crate::exit::write_out(format_args!("{}\n", format_args!($($arg)*)))? };
}

mod aoi_model;
mod dispatch;
mod doctor;
mod exit;
mod fd;
mod forward;
mod kv;
mod kv_bench;
mod lane;
mod lane_node;
mod lane_service;
mod lane_testbed;
mod rtu;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use kairos_lab::experiments::{rcu_grace, rcu_latency};
use kairos_lab::harness;
use std::path::PathBuf;
use std::time::Duration;

/// The store's members allocate a handful of small buffers for every write (a request's words,
/// its log entry, its answer). Under glibc's allocator that cost them 12% of their writes a
/// second at 50 clients against the store before its data types (docs/store.md); mimalloc's
/// per-thread free lists bring them back to that rate.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "kairos",
    version,
    about = "Timely packet processing: mechanisms and the lab that measures them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Realtime lateness under RCU callback storms, per reclamation policy (the source's Table 1).
    RcuLatency(RcuLatencyArgs),
    /// Grace-period latency, offline readers and stall detection of the RCU domain.
    RcuGrace(RcuGraceArgs),
    /// The two RCU experiments at their presets, rcu-latency then rcu-grace.
    Lab(LabArgs),
    /// Age of information of one queue: simulation beside the closed forms.
    AoiModel(aoi_model::AoiModelArgs),
    /// One run of the forwarding experiment: trace, token-bucket source, forwarder, FIB, ages.
    Forward(forward::ForwardArgs),
    /// The forwarding experiment's grid: the source's figures and the freshness variants.
    Sweep(forward::SweepArgs),
    /// The express lane's controller: admit periodic tunnels, print their latency and jitter
    /// bounds, validate them by simulation.
    Lane(lane::LaneArgs),
    /// Real-time upcalls: admission control of periodic handlers under RMDP.
    Rtu(rtu::RtuArgs),
    /// The host doctor for the express lane's core: checks isolation, the tick, RCU callbacks,
    /// idle states, watchdogs, IRQ affinity, RT throttling, frequency, steal and SMT, measures
    /// what the missing parts cost with a short probe on the core (2 s by default), and gives
    /// each fix; --apply makes the run-time fixes, --revert undoes exactly those.
    ///
    /// Exit status: 0 when it examined (whatever it found), 2 for a bad flag, 1 when --apply or
    /// --revert failed or was not permitted (they need root).
    Doctor(doctor::DoctorArgs),
    /// The replicated key-value store: Raft on the lane's members, and its checks.
    Kv(Box<kv::KvArgs>),
    Fd(fd::FdArgs),
    Dispatch(dispatch::DispatchArgs),
}

/// The flags every experiment takes.
#[derive(Args, Clone)]
pub(crate) struct Common {
    /// Short runs instead of the full ones (each command's help says how long; a line on stderr
    /// says it again when the run starts); default: the full runs.
    #[arg(long)]
    pub quick: bool,
    /// Print the summary as one JSON object on stdout; default: a table.
    #[arg(long)]
    pub json: bool,
    /// Directory the runs are written under (a subdirectory per experiment and run; created
    /// when missing).
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub results: PathBuf,
}

#[derive(Args)]
struct RcuLatencyArgs {
    #[command(flatten)]
    common: Common,
    /// Seconds per row and run, enough for 100 periods, at most 3600 (default: 1 with --quick,
    /// else 4).
    #[arg(long)]
    seconds: Option<f64>,
    /// Runs of every row, interleaved, 1-100 (default: 3 with --quick, else 5); verdicts use the
    /// median.
    #[arg(long)]
    runs: Option<usize>,
    /// Period of the realtime task, microseconds, 1-1000000.
    #[arg(long, default_value_t = 1_000)]
    period_us: u64,
    /// Storm sizes, callbacks per grace period, 1-10000000 (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', default_values_t = [1_660usize, 30_000])]
    storm: Vec<usize>,
    /// Extra work per callback, nanoseconds, 0-1000000, on top of freeing a 256-byte node.
    #[arg(long, default_value_t = 0)]
    callback_work_ns: u64,
    /// Core of the realtime task, 0 to the last core (default: the last core).
    #[arg(long)]
    rt_core: Option<usize>,
    /// Core of the writer and the offload reclaimer, 0 to the last core.
    #[arg(long, default_value_t = 0)]
    housekeeping_core: usize,
    /// SCHED_FIFO priority of the realtime task, 1-98 (0: do not ask; needs root).
    #[arg(long, default_value_t = 80)]
    priority: i32,
    /// Throttle: callbacks per reader call, 1-1000000.
    #[arg(long, default_value_t = 256)]
    throttle_batch: usize,
    /// Throttle and Adaptive: time budget per reader call, microseconds, 1 up to the period.
    #[arg(long, default_value_t = 20)]
    budget_us: u64,
    /// Do not run cyclictest beside the inline and offload rows.
    #[arg(long)]
    no_cyclictest: bool,
    /// Only these rows (comma-separated: baseline, inline, throttle, adaptive, offload,
    /// offload-same-core, direct, crossbeam-epoch).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

#[derive(Args)]
struct RcuGraceArgs {
    #[command(flatten)]
    common: Common,
    /// Length of the run without stalls that checks for false reports, seconds, 0.1-86400
    /// (default: 10 with --quick, else 60).
    #[arg(long)]
    clean_seconds: Option<f64>,
}

#[derive(Args)]
struct LabArgs {
    #[command(flatten)]
    common: Common,
}

fn main() {
    // First, so that SIGINT, SIGTERM or SIGHUP at any point undoes what the run has changed
    // (children, namespaces, cpusets) and exits with 128 + the signal.
    if let Err(e) = kairos_sys::cleanup::install() {
        log(&format!("{e}; a signal will end the run without removing what it made"));
    }
    // `kv serve --config FILE`: the file's settings become flags before the parse.
    let serve_flags: Vec<String> = {
        use clap::CommandFactory as _;
        let cli = Cli::command();
        let serve = cli.find_subcommand("kv").and_then(|kv| kv.find_subcommand("serve"));
        serve
            .map(|s| s.get_arguments().filter_map(|a| a.get_long()).map(String::from).collect())
            .unwrap_or_default()
    };
    let args = match kv::config_file::expand(std::env::args_os().collect(), &serve_flags) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("kairos: error: {e}");
            std::process::exit(exit::USAGE);
        }
    };
    let cli = Cli::parse_from(args);
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            let code = exit::code_of(&error);
            if code != exit::STDOUT_CLOSED {
                eprintln!("kairos: error: {}", exit::one_line(&error));
            }
            std::process::exit(code);
        }
    }
}

/// Writes one progress line to stderr, prefixed `kairos: `.
fn log(line: &str) {
    eprintln!("kairos: {line}");
}

/// `value` seconds as a duration, or a usage error naming `flag` unless it is finite, above 0
/// and at most 86400 (a day).
fn seconds(value: f64, flag: &str) -> Result<Duration> {
    if !value.is_finite() || value <= 0.0 || value > 86_400.0 {
        return Err(exit::usage(format!(
            "{flag} must be a number of seconds between 0 and 86400, got {value}"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

/// `rcu-latency`'s configuration: the preset for `--quick` or not, with the flags given on top.
fn latency_config(args: &RcuLatencyArgs) -> Result<rcu_latency::RcuLatencyConfig> {
    let mut config = rcu_latency::RcuLatencyConfig::preset(args.common.quick);
    if let Some(s) = args.seconds {
        config.row_duration = seconds(s, "--seconds")?;
    }
    if let Some(runs) = args.runs {
        config.repetitions = runs;
    }
    config.period = Duration::from_micros(args.period_us);
    config.storms = args.storm.clone();
    if config.storms.is_empty() || config.storms.contains(&0) {
        return Err(exit::usage("--storm needs one or more sizes above 0"));
    }
    config.callback_work_ns = args.callback_work_ns;
    if let Some(core) = args.rt_core {
        config.realtime_core = core;
    }
    config.housekeeping_core = args.housekeeping_core;
    config.fifo_priority = args.priority;
    config.throttle_max_batch = args.throttle_batch;
    config.budget = Duration::from_micros(args.budget_us);
    config.cyclictest = !args.no_cyclictest;
    config.only = args.only.clone();
    Ok(config)
}

/// `rcu-grace`'s configuration: the preset for `--quick` or not, with `--clean-seconds` on top.
fn grace_config(args: &RcuGraceArgs) -> Result<rcu_grace::RcuGraceConfig> {
    let mut config = rcu_grace::RcuGraceConfig::preset(args.common.quick);
    if let Some(s) = args.clean_seconds {
        config.clean_run = seconds(s, "--clean-seconds")?;
    }
    Ok(config)
}

/// Runs experiment `E` through the lab's harness and prints its summary: one JSON object with
/// `--json`, else its `table`.
pub(crate) fn experiment<E: kairos_lab::harness::Experiment>(
    common: &Common,
    config: &E,
    table: fn(&E::Summary) -> String,
) -> Result<i32> {
    let summary = kairos_lab::harness::run(config, &common.results, &log)?;
    print(common.json, &summary, table(&summary))?;
    Ok(exit::OK)
}

/// Prints a run's summary as one JSON object (`--json`) or its table.
pub(crate) fn print<S: serde::Serialize>(json: bool, summary: &S, table: String) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string(summary)?);
    } else {
        out!("{table}");
    }
    Ok(())
}

/// Runs the command; the exit code on success ([`exit::OK`], or [`exit::REFUSED`] when an
/// admission analysis refused part of the request).
fn run(cli: Cli) -> Result<i32> {
    let done = |r: Result<()>| r.map(|()| exit::OK);
    match cli.command {
        Command::RcuLatency(args) => {
            let config = latency_config(&args)?;
            experiment(&args.common, &config, rcu_latency::Summary::table)
        }
        Command::RcuGrace(args) => {
            let config = grace_config(&args)?;
            experiment(&args.common, &config, rcu_grace::Summary::table)
        }
        Command::AoiModel(args) => aoi_model::run(&args),
        Command::Forward(args) => done(forward::forward(&args)),
        Command::Sweep(args) => done(forward::sweep(&args)),
        Command::Lane(args) => lane::run(&args),
        Command::Rtu(args) => rtu::run(&args),
        Command::Kv(args) => kv::run(&args),
        Command::Fd(args) => fd::run(&args),
        Command::Dispatch(args) => dispatch::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Lab(args) => {
            let c = &args.common;
            let (latency, grace) =
                (rcu_latency::RcuLatencyConfig::preset(c.quick), rcu_grace::RcuGraceConfig::preset(c.quick));
            let latency = harness::run(&latency, &c.results, &log)?;
            let grace = harness::run(&grace, &c.results, &log)?;
            if c.json {
                outln!("{}", serde_json::json!({ "rcu-latency": latency, "rcu-grace": grace }));
            } else {
                out!("{}\n{}", latency.table(), grace.table());
            }
            Ok(exit::OK)
        }
    }
}
