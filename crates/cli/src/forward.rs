//! `kairos forward` and `kairos sweep`: flags and output.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use kairos_fib::FibKind;
use kairos_lab::experiments::forward::trace::Trace;
use kairos_lab::experiments::forward::{
    self, Backend, ControlMode, Flush, ForwardConfig, RingPolicy, Threading, sweep,
};
use kairos_lab::harness;

use crate::exit::usage;

#[derive(Args)]
pub struct ForwardArgs {
    /// memory (in-process rings, no root), udp (two network namespaces, needs root), or packet
    /// (the same namespaces, the forwarder on memory-mapped AF_PACKET rings; needs root).
    #[arg(long, default_value = "memory")]
    backend: Backend,
    /// The forwarder's threads: pipeline (the source's RX, control and data threads behind
    /// rings) or run-to-completion (one thread takes each burst from receive to transmit).
    #[arg(long, default_value = "pipeline")]
    threading: Threading,
    /// Pin the sender and receiver's thread to this core, another than the forwarder's (default:
    /// the first other core when the forwarder's is known, from --core or testpmd's last core,
    /// since a sender left to the scheduler often lands on the polling forwarder's core; else
    /// not pinned).
    #[arg(long)]
    source_core: Option<usize>,
    /// Pin the run-to-completion forwarder's thread to this core (default: not pinned).
    #[arg(long)]
    core: Option<usize>,
    /// Microseconds the run-to-completion forwarder keeps polling its idle port after its last
    /// burst before it sleeps, 0 to 1,000 (0: a few polls; needs --priority 0).
    #[arg(long, value_name = "US", default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=1_000))]
    idle_spin_us: u64,
    /// Let idle cores enter idle states during the run. By default the run holds them off
    /// (`/dev/cpu_dma_latency` at 0, root only), so a thread woken on an idle core runs at once:
    /// the forwarder woken from a nap, or the receiving thread. The row says whether it held.
    #[arg(long)]
    allow_idle_states: bool,
    /// rcu, rwlock, seqlock, papaya, none (the baseline: no FIB), or dpdk-testpmd (the peer
    /// forwarder in place of Kairos's: --backend udp or packet, root, Debian's dpdk-dev).
    #[arg(long, default_value = "rcu")]
    fib: String,
    /// Reclamation of the RCU FIB: direct (the source's synchronous mode) or offload.
    #[arg(long, default_value = "direct")]
    rcu_policy: String,
    /// Offered packets per second, 1 to 100,000,000; omit to send as fast as the forwarder takes
    /// them.
    #[arg(long)]
    rate: Option<f64>,
    /// Users in a generated trace, 1 to 16,777,216 (Zipf-popular).
    #[arg(long, default_value_t = 1000)]
    users: u32,
    /// Control/data ratio of a generated trace, 0 to 1 (control rows per data row).
    #[arg(long, default_value_t = 0.01)]
    cdr: f64,
    /// Rows of a generated trace, 1 to 50,000,000.
    #[arg(long, default_value_t = 1_000_000)]
    packets: usize,
    /// Seed of a generated trace (any 64-bit number).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay this trace file (`kairos-trace v1`, as every run saves) instead of generating one.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Data ring policy: drop-newest (the source), drop-oldest, keep-latest.
    #[arg(long, default_value = "drop-newest")]
    ring_policy: RingPolicy,
    /// Data ring size, entries, 1 to 16,777,216.
    #[arg(long, default_value_t = 64)]
    data_ring: usize,
    /// Control ring size, entries, 1 to 16,777,216.
    #[arg(long, default_value_t = 64)]
    ctrl_ring: usize,
    /// Forwarder burst, packets per port call, 1 to 64 (what a port moves at most).
    #[arg(long, default_value_t = 64)]
    burst: usize,
    /// Sender burst B, packets per port call, 1 to 64.
    #[arg(long, default_value_t = 32)]
    source_burst: usize,
    /// Apply control packets in the RX thread before the burst's data (instead of a control
    /// thread behind a ring).
    #[arg(long)]
    control_inline: bool,
    /// Flush TX batches by age after this many microseconds, 0 to 1,000,000 (instead of by
    /// count).
    #[arg(long)]
    flush_age_us: Option<f64>,
    /// Let the sender adapt its rate to the measured age, starting from --rate (or 100,000).
    #[arg(long)]
    age_control: bool,
    /// Extra work per data packet on the data thread, nanoseconds, 0 to 1,000,000.
    #[arg(long, default_value_t = 0)]
    data_work_ns: u64,
    /// SCHED_FIFO priority of the forwarder threads, 1 to 99 (needs root), or 0 for normal
    /// scheduling.
    #[arg(long, default_value_t = 0)]
    priority: i32,
    /// Print the row as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Where runs are written (a directory per run under `forward/`).
    #[arg(long, default_value = "results")]
    results: PathBuf,
}

/// Runs `kairos forward`: one run of the forwarding experiment through the lab's harness, from
/// a trace file or one generated from the flags, printed as a row (or its JSON with `--json`).
/// A bad flag or trace is a usage error (exit code 2).
pub fn forward(args: &ForwardArgs) -> Result<()> {
    let (fib, peer) = match args.fib.as_str() {
        "none" => (None, None),
        "dpdk-testpmd" => (None, Some(forward::Peer::DpdkTestpmd)),
        other => (Some(other.parse::<FibKind>().map_err(|e| usage(format!("--fib: {e}")))?), None),
    };
    let trace = match &args.trace {
        Some(path) => Trace::load(path).map_err(|e| usage(format!("{e:#}")))?,
        None => Trace::generate(args.users, args.cdr, args.packets, args.seed)
            .map_err(|e| usage(format!("--users, --cdr or --packets: {e:#}")))?,
    };
    let rcu_policy = match args.rcu_policy.as_str() {
        "direct" => "direct",
        "offload" => "offload",
        other => return Err(usage(format!("unknown --rcu-policy '{other}' (use direct or offload)"))),
    };
    let flush = match args.flush_age_us {
        Some(us) if us.is_finite() && (0.0..=1e6).contains(&us) => {
            Flush::Age { max_wait_ns: (us * 1e3) as u64 }
        }
        Some(us) => return Err(usage(format!("--flush-age-us must be 0 to 1000000 microseconds, got {us}"))),
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
            threading: args.threading,
            pin_core: args.core,
            idle_spin_ns: args.idle_spin_us * 1_000,
        },
        source_burst: args.source_burst,
        rate_pps: args.rate,
        age_control: args.age_control.then(|| {
            let initial = args.rate.unwrap_or(100_000.0);
            kairos_lab::experiments::forward::source::AgeControl {
                initial_pps: initial,
                min_pps: initial / 20.0,
                max_pps: initial * 20.0,
                window_ns: 20_000_000,
                step: 0.1,
            }
        }),
        peer,
        source_core: args.source_core,
        poll_idle_cores: !args.allow_idle_states,
        ..ForwardConfig::default()
    };
    let config =
        ForwardConfig { source_core: config.source_core.or_else(|| config.default_source_core()), ..config };
    let experiment = forward::ForwardRun { config, trace_file: args.trace.clone(), trace };
    let summary = harness::run(&experiment, &args.results, &|line| eprintln!("kairos: {line}"))?;
    if args.json {
        outln!("{}", serde_json::to_string(&summary.row)?);
    } else {
        outln!("{}", forward::row_header());
        outln!("{}", forward::row_line(&summary.row));
        outln!("results: {}", summary.run.results_dir.display());
    }
    Ok(())
}

#[derive(Args)]
pub struct SweepArgs {
    /// A short grid (about 2 minutes on 2 idle cores, memory backend) instead of the full one
    /// (twice the trace, more rates and repetitions).
    #[arg(long)]
    quick: bool,
    /// Print the summary as one JSON object on stdout instead of the report.
    #[arg(long)]
    json: bool,
    /// Backends to run, comma-separated: memory, udp, packet (udp and packet need root: two
    /// network namespaces; on packet, Kairos runs its run-to-completion forwarder on AF_PACKET
    /// rings).
    #[arg(long, value_delimiter = ',', default_values_t = [Backend::Memory])]
    backend: Vec<Backend>,
    /// Trace rows per run, 1,000 to 50,000,000 (default: 200,000 with --quick, else 400,000).
    #[arg(long)]
    packets: Option<usize>,
    /// Where runs are written (a directory per run under `sweep/`).
    #[arg(long, default_value = "results")]
    results: PathBuf,
}

/// Runs `kairos sweep`: the forwarding experiment's grid, written under `--results`, and prints
/// its summary (a table, or one JSON object with `--json`).
pub fn sweep(args: &SweepArgs) -> Result<()> {
    let mut config =
        sweep::SweepConfig { backends: args.backend.clone(), ..sweep::SweepConfig::preset(args.quick) };
    if let Some(packets) = args.packets {
        if packets < 1_000 {
            return Err(usage(
                "--packets must be at least 1000 (a run needs enough updates per user to measure an age)",
            ));
        }
        config.packets = packets;
    }
    let summary = sweep::run(&config, &args.results, &|line| eprintln!("kairos: {line}"))?;
    crate::print(args.json, &summary, sweep::report(&summary))
}
