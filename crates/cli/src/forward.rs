//! `kairos forward` and `kairos sweep`: flags and output.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use kairos_fib::FibKind;
use kairos_lab::forward::trace::Trace;
use kairos_lab::forward::{self, Backend, ControlMode, Flush, ForwardConfig, RingPolicy, sweep};
use kairos_lab::output::RunDir;

#[derive(Args)]
pub struct ForwardArgs {
    /// memory (in-process rings, no root) or udp (two network namespaces, needs root).
    #[arg(long, default_value = "memory")]
    backend: Backend,
    /// rcu, rwlock, seqlock, papaya, none (the baseline: no FIB), or dpdk-testpmd (the peer
    /// forwarder in place of Kairos's: --backend udp, root, Debian's dpdk-dev).
    #[arg(long, default_value = "rcu")]
    fib: String,
    /// Reclamation of the RCU FIB: direct (the source's synchronous mode) or offload.
    #[arg(long, default_value = "direct")]
    rcu_policy: String,
    /// Offered packets per second; omit to send as fast as the forwarder takes them.
    #[arg(long)]
    rate: Option<f64>,
    /// Users in a generated trace.
    #[arg(long, default_value_t = 1000)]
    users: u32,
    /// Control/data ratio of a generated trace.
    #[arg(long, default_value_t = 0.01)]
    cdr: f64,
    /// Rows of a generated trace.
    #[arg(long, default_value_t = 1_000_000)]
    packets: usize,
    /// Seed of a generated trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay this trace file instead of generating one.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Data ring policy: drop-newest (the source), drop-oldest, keep-latest.
    #[arg(long, default_value = "drop-newest")]
    ring_policy: RingPolicy,
    /// Data ring size.
    #[arg(long, default_value_t = 64)]
    data_ring: usize,
    /// Control ring size.
    #[arg(long, default_value_t = 64)]
    ctrl_ring: usize,
    /// Forwarder burst.
    #[arg(long, default_value_t = 64)]
    burst: usize,
    /// Sender burst B.
    #[arg(long, default_value_t = 32)]
    source_burst: usize,
    /// Apply control packets in the RX thread before the burst's data (instead of a control
    /// thread behind a ring).
    #[arg(long)]
    control_inline: bool,
    /// Flush TX batches by age after this many microseconds (instead of by count).
    #[arg(long)]
    flush_age_us: Option<f64>,
    /// Let the sender adapt its rate to the measured age, starting from --rate (or 100,000).
    #[arg(long)]
    age_control: bool,
    /// Extra work per data packet on the data thread, nanoseconds.
    #[arg(long, default_value_t = 0)]
    data_work_ns: u64,
    /// SCHED_FIFO priority of the forwarder threads (0: normal scheduling; needs root).
    #[arg(long, default_value_t = 0)]
    priority: i32,
    /// Print the row as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Where runs are written.
    #[arg(long, default_value = "results")]
    results: PathBuf,
}

pub fn forward(args: &ForwardArgs) -> Result<()> {
    let (fib, peer) = match args.fib.as_str() {
        "none" => (None, None),
        "dpdk-testpmd" => (None, Some(forward::Peer::DpdkTestpmd)),
        other => (Some(other.parse::<FibKind>().map_err(anyhow::Error::msg)?), None),
    };
    let trace = match &args.trace {
        Some(path) => Trace::load(path)?,
        None => {
            if args.packets == 0 {
                bail!("--packets must be at least 1");
            }
            Trace::generate(args.users, args.cdr, args.packets, args.seed)?
        }
    };
    let rcu_policy = match args.rcu_policy.as_str() {
        "direct" => "direct",
        "offload" => "offload",
        other => bail!("unknown --rcu-policy '{other}' (use direct or offload)"),
    };
    let flush = match args.flush_age_us {
        Some(us) if us.is_finite() && us >= 0.0 => Flush::Age { max_wait_ns: (us * 1e3) as u64 },
        Some(us) => bail!("--flush-age-us must be a non-negative number, got {us}"),
        None => Flush::Count { drain_ns: 1_000 },
    };
    let config = ForwardConfig {
        backend: args.backend,
        fib,
        rcu_policy,
        forwarder: forward::ForwarderConfig {
            burst: args.burst,
            ctrl_ring: args.ctrl_ring,
            data_ring: args.data_ring,
            data_policy: args.ring_policy,
            control: if args.control_inline { ControlMode::Inline } else { ControlMode::Thread },
            flush,
            fifo_priority: args.priority,
            data_work_ns: args.data_work_ns,
        },
        source_burst: args.source_burst,
        rate_pps: args.rate,
        age_control: args.age_control.then(|| {
            let initial = args.rate.unwrap_or(100_000.0);
            kairos_lab::forward::source::AgeControl {
                initial_pps: initial,
                min_pps: initial / 20.0,
                max_pps: initial * 20.0,
                window_ns: 20_000_000,
                step: 0.1,
            }
        }),
        peer,
        ..ForwardConfig::default()
    };
    // The results directory first: an unwritable --results fails before the run, not after it.
    let run = RunDir::create(&args.results, "forward")?;
    run.write_json("config.json", &config)?;
    let row = forward::run_once(&config, &trace)?;
    run.write_json("summary.json", &serde_json::json!({ "config": config, "row": row }))?;
    let mut csv = String::from("user,avg_age_ns\n");
    for (u, a) in row.per_user_age_ns.iter().enumerate() {
        csv.push_str(&format!("{u},{a:.1}\n"));
    }
    run.write_text("per_user_age.csv", &csv).context("writing per-user ages")?;
    if args.json {
        println!("{}", serde_json::to_string(&row)?);
    } else {
        println!("{}", forward::row_header());
        println!("{}", forward::row_line(&row));
        println!("results: {}", run.path().display());
    }
    Ok(())
}

#[derive(Args)]
pub struct SweepArgs {
    /// A short grid (under 5 minutes here) instead of the full one.
    #[arg(long)]
    quick: bool,
    /// Print the summary as one JSON object on stdout instead of the report.
    #[arg(long)]
    json: bool,
    /// Backends to run (memory, udp; udp needs root).
    #[arg(long, value_delimiter = ',', default_values_t = [Backend::Memory])]
    backend: Vec<Backend>,
    /// Trace rows per run (default: 200,000 with --quick, else 400,000).
    #[arg(long)]
    packets: Option<usize>,
    /// Where runs are written.
    #[arg(long, default_value = "results")]
    results: PathBuf,
}

pub fn sweep(args: &SweepArgs) -> Result<()> {
    let mut config =
        sweep::SweepConfig { backends: args.backend.clone(), ..sweep::SweepConfig::preset(args.quick) };
    if let Some(packets) = args.packets {
        if packets < 1_000 {
            bail!("--packets must be at least 1000 (a run needs enough updates per user to measure an age)");
        }
        config.packets = packets;
    }
    let summary = sweep::run(&config, &args.results, &|line| eprintln!("kairos: {line}"))?;
    crate::print(args.json, &summary, sweep::report(&summary))
}
