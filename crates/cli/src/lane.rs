//! `kairos lane`: the express lane's planner from the command line: flags, their checks, and the
//! text rendering of what `kairos-te` computes.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use kairos_lab::experiments::lane_tightness;
use kairos_te::plan::{self, Plan};
use kairos_te::{
    LinkSpec, MAX_BANDWIDTH_BPS, MAX_BYTES, MAX_TIME_NS, Topology, generate, ns_to_ps, requests_from_file,
};

use crate::exit::{self, usage};

#[derive(Args)]
pub struct LaneArgs {
    #[command(subcommand)]
    command: LaneCommand,
}

#[derive(Subcommand)]
enum LaneCommand {
    /// Admit requests into a topology, in order, and print each tunnel's tree and bounds.
    ///
    /// Exit status: 0 when every request is admitted, 3 when any is refused (the table or JSON
    /// says which and why), 2 for a bad flag or file (nothing planned), 1 when the run failed.
    Plan(PlanArgs),
    /// Write a generated topology as TOML on stdout (what `lane plan --topology` reads).
    ///
    /// Every link is duplex with the same parameters. The topology is at most 4,116 links (the
    /// k = 14 fat-tree), so that its TOML stays within the 1 MiB `lane plan` reads.
    Generate(GenerateArgs),
    /// How tight the bounds are: a fat-tree of random tunnels, simulated, bound beside observed.
    ///
    /// Full run: k = 8 and 300 requests, about 25 s here. --quick: k = 4 and 40 requests, a few
    /// seconds. Flags are checked before anything runs, and a run estimated at more than an hour
    /// is refused.
    Tightness(TightnessArgs),
    /// Sender-side policing: an application at twice its grant beside two well-behaved ones.
    ///
    /// A controller and two nodes on loopback (no root). Prints when BW_EXCEEDED reached the
    /// offender (in periods), its drops, and the good tunnels' latency with and without it.
    /// Full run: 5 s alone and 5 s offending, alternating, then 5 s alone again; --quick: 1 s
    /// each.
    Police(PoliceArgs),
    /// The lane's one-way latency on a two-host testbed beside UDP sockets (blocking,
    /// busy-polling, in the priority class) and sockperf, idle and under a flood (the source's
    /// Table 2 and Figs. 4-6).
    ///
    /// Needs root, and iperf3, stress-ng and sockperf for the flood and the sockperf row. Every
    /// row sends --packets messages every --period-us; stall watches run on every core, and each
    /// lane message outside its tunnel's bound is set against them. Full run: 100,000 messages
    /// a row (4 to 15 minutes: under the flood the rows stretch as their senders lose the
    /// core); --quick: 3,000.
    Latency(LatencyArgs),
    /// Serve the controller to node agents: admission, notices, a journal, metrics.
    ///
    /// Nodes prove the shared secret (--secret-file) and act only for their own host. Every
    /// input is on disk (--state) before its answer goes out: after a crash, the same command
    /// replays the journal and holds the same tunnels, and nodes reconnect. Runs until a signal.
    Controller(crate::lane_service::ControllerArgs),
    /// Ask a controller for one tunnel as the node of --host, and print the answer.
    ///
    /// Exit status: 0 granted, 3 refused, 2 bad flags, 1 no answer.
    Request(crate::lane_service::RequestArgs),
    /// Release a tunnel of --host at a controller. Exit status: 0 released, 3 refused.
    Release(crate::lane_service::ReleaseArgs),
    /// Run the node agent of one host: tunnels for its applications, their packets on the lane.
    ///
    /// Applications connect to DIR/node.sock (see `kairos_lane::node::app::LaneApp` and the
    /// `sensor` and `monitor` examples). Runs until a signal; its socket and bridges go with it.
    Node(crate::lane_node::NodeArgs),
    /// Make the lane's testbed network (hosts as network namespaces on a bridge, lane traffic
    /// in a strict-priority class at every egress), calibrate it, and write its topology.
    ///
    /// Needs root. Prints the namespaces, addresses, classes and calibrated latencies; removes
    /// the testbed at the end, or with --hold on Ctrl-C or SIGTERM. Exit status: 0 written, 2 bad
    /// flags (nothing made), 1 not root or a failure.
    Testbed(crate::lane_testbed::TestbedArgs),
}

#[derive(Args)]
struct TightnessArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Fat-tree arity: even, 2-32 (k^3/4 hosts) [default: 8, or 4 with --quick].
    #[arg(long)]
    k: Option<usize>,
    /// Requests offered, a third of them multicast: 1-10000, and refused when the run would take
    /// over an hour (about 4,000 at the full preset) [default: 300, or 40 with --quick].
    #[arg(long)]
    requests: Option<usize>,
    /// Seed of the requests and of the validator: any integer from 0 to 2^64-1.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
struct PoliceArgs {
    #[command(flatten)]
    common: crate::Common,
    /// The offender's requested period, us: 100-100000 (BW_EXCEEDED is timed in it).
    #[arg(long, default_value_t = 1_000)]
    period_us: u64,
    /// The good tunnels' requested period, us: 100 to --period-us.
    #[arg(long, default_value_t = 100)]
    good_period_us: u64,
    /// Each phase's length, seconds: 0.2-600 [default: 5, or 1 with --quick].
    #[arg(long)]
    phase_s: Option<f64>,
}

#[derive(Args)]
struct LatencyArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Messages per row: 100-10000000 [default: 100000, or 3000 with --quick].
    #[arg(long)]
    packets: Option<u64>,
    /// The messages' period, us: 10-1000000.
    #[arg(long, default_value_t = 100)]
    period_us: u64,
    /// Each message's bytes: 16-1000.
    #[arg(long, default_value_t = 64)]
    message_bytes: usize,
    /// The rows, comma-separated: lane, lane-shared, lane-untuned, udp-blocking, udp-busy-poll,
    /// priority-only, sockperf [default: all].
    #[arg(long, value_delimiter = ',')]
    rows: Vec<String>,
    /// The loads, comma-separated: idle, flood [default: both].
    #[arg(long, value_delimiter = ',')]
    loads: Vec<String>,
    /// What the lane rows' nodes send and receive on: udp (the kernel's socket) or packet (a
    /// memory-mapped AF_PACKET ring on the testbed host's interface).
    #[arg(long, default_value = "udp")]
    transport: String,
}

#[derive(Args)]
struct PlanArgs {
    /// Topology TOML, at most 1 MiB ([[node]] name, kind; [[link]] from, to, bandwidth_bps
    /// 1-1e15, queue_bytes 0-2^40, min_delay_ns and max_jitter_ns 0-3.6e12 (1 hour), optional
    /// bidirectional). Required.
    #[arg(long)]
    topology: PathBuf,
    /// Requests TOML, at most 1 MiB ([[request]] name, sender, receivers, packet_bytes 1-2^40,
    /// period_ns up to 3.6e12 (1 hour), optional sublane 0-7, 0 the highest). Required.
    #[arg(long)]
    requests: PathBuf,
    /// Validate by simulation: this many of the longest approved period per general adversary
    /// run, 1-1000000, under every adversary (eight general ones, and one per tunnel lining the
    /// others up against it); prints the observed latencies beside the bounds [default: no
    /// validation].
    #[arg(long)]
    validate: Option<u64>,
    /// With --validate: most packet releases per adversary run, 1-10000000 (a shorter simulation
    /// when needed).
    #[arg(long, default_value_t = 250_000)]
    max_releases: u64,
    /// With --validate: seed of the validator's random phases and delays, any integer from 0 to
    /// 2^64-1.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print {"tunnels": [...]} (and "validation") on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Shape {
    Rack,
    LeafSpine,
    FatTree,
}

#[derive(Args)]
struct GenerateArgs {
    /// rack (one switch s0, hosts h0..), leaf-spine (every leaf joined to every spine), or
    /// fat-tree (k pods, (k/2)^2 cores, k^3/4 hosts).
    shape: Shape,
    /// fat-tree: arity, even, 2-14.
    #[arg(long, default_value_t = 4)]
    k: usize,
    /// rack: hosts on the switch, 2-2058; leaf-spine: hosts per leaf, 1-2058 (two hosts in all
    /// at least).
    #[arg(long, default_value_t = 4)]
    hosts: usize,
    /// leaf-spine: leaf switches, 1-2058.
    #[arg(long, default_value_t = 4)]
    leaves: usize,
    /// leaf-spine: spine switches, 1-2058.
    #[arg(long, default_value_t = 2)]
    spines: usize,
    /// Every link's bandwidth, bits per second, 1-1e15.
    #[arg(long, default_value_t = 10_000_000_000)]
    bandwidth_bps: u64,
    /// Every link's egress queue, bytes, 0-2^40, and sent within 64-bit picoseconds (about 213
    /// days) at --bandwidth-bps.
    #[arg(long, default_value_t = 524_288)]
    queue_bytes: u64,
    /// Every link's minimum delay, nanoseconds, 0-3.6e12 (1 hour).
    #[arg(long, default_value_t = 1_000.0)]
    min_delay_ns: f64,
    /// Every link's jitter (most a delay exceeds the minimum), nanoseconds, 0-3.6e12 (1 hour).
    #[arg(long, default_value_t = 100.0)]
    max_jitter_ns: f64,
}

/// The most links `lane generate` writes: the k = 14 fat-tree's. A link's TOML is at most about
/// 190 bytes and a node's 50, so the file stays within the 1 MiB `lane plan` reads.
const MAX_GENERATED_LINKS: usize = 4_116;
/// The largest fat-tree `lane generate` writes (4,116 links).
const MAX_GENERATED_K: usize = 14;
/// The most validated periods per adversary run for `lane plan --validate`.
const MAX_VALIDATE_PERIODS: u64 = 1_000_000;
/// The most releases per adversary run for `lane plan --validate` (a run takes about a second
/// per million; there are 8 plus one per tunnel).
const MAX_PLAN_RELEASES: u64 = 10_000_000;

/// Runs a `lane` command; `plan` ends with [`exit::REFUSED`] when any request is refused.
pub fn run(args: &LaneArgs) -> Result<i32> {
    match &args.command {
        LaneCommand::Plan(a) => plan_command(a),
        LaneCommand::Tightness(a) => {
            let mut config = lane_tightness::TightnessConfig::preset(a.common.quick);
            if let Some(k) = a.k {
                config.k = k;
            }
            if let Some(r) = a.requests {
                config.requests = r;
            }
            config.seed = a.seed;
            crate::experiment(&a.common, &config, lane_tightness::report)
        }
        LaneCommand::Police(a) => {
            let mut config = kairos_lab::experiments::lane_police::PoliceConfig::preset(a.common.quick);
            config.period_us = a.period_us;
            config.good_period_us = a.good_period_us;
            if let Some(s) = a.phase_s {
                config.phase_s = s;
                // Reports of excess at most once a condition's length: the third, which ends the
                // tunnel, comes after the alternation (twice that length) is over.
                config.report_ms = ((s * 1_000.0) as u64).max(1);
            }
            crate::experiment(&a.common, &config, kairos_lab::experiments::lane_police::report)
        }
        LaneCommand::Latency(a) => {
            use kairos_lab::experiments::lane_latency::{
                LatencyConfig, LoadKind, RowKind, Transport, report,
            };
            let mut config = LatencyConfig::preset(a.common.quick);
            if let Some(p) = a.packets {
                config.packets = p;
            }
            config.period_us = a.period_us;
            config.message_bytes = a.message_bytes;
            config.transport = Transport::from_name(&a.transport).map_err(|e| usage(e.to_string()))?;
            if !a.rows.is_empty() {
                config.rows = a
                    .rows
                    .iter()
                    .map(|r| RowKind::from_slug(r))
                    .collect::<Result<_, _>>()
                    .map_err(|e| usage(e.to_string()))?;
            }
            if !a.loads.is_empty() {
                config.loads = a
                    .loads
                    .iter()
                    .map(|l| LoadKind::from_name(l))
                    .collect::<Result<_, _>>()
                    .map_err(|e| usage(e.to_string()))?;
            }
            crate::experiment(&a.common, &config, report)
        }
        LaneCommand::Controller(a) => crate::lane_service::controller(a),
        LaneCommand::Request(a) => crate::lane_service::request(a),
        LaneCommand::Release(a) => crate::lane_service::release(a),
        LaneCommand::Node(a) => crate::lane_node::node(a),
        LaneCommand::Testbed(a) => crate::lane_testbed::run(a),
        LaneCommand::Generate(g) => {
            let topo = generated(g)?;
            out!("{}", topo.to_toml());
            Ok(exit::OK)
        }
    }
}

fn plan_command(a: &PlanArgs) -> Result<i32> {
    if let Some(periods) = a.validate
        && !(1..=MAX_VALIDATE_PERIODS).contains(&periods)
    {
        return Err(usage(format!(
            "--validate must be from 1 to {MAX_VALIDATE_PERIODS} periods, got {periods}"
        )));
    }
    if !(1..=MAX_PLAN_RELEASES).contains(&a.max_releases) {
        return Err(usage(format!(
            "--max-releases must be from 1 to {MAX_PLAN_RELEASES} (each of the 8 + one-per-tunnel adversary runs simulates that many releases, about a second per million), got {}",
            a.max_releases
        )));
    }
    // Files are input: a missing, oversized or malformed one is a usage error, nothing planned.
    let topo = Topology::load(&a.topology).map_err(|e| usage(e.to_string()))?;
    let requests = requests_from_file(&a.requests, &topo).map_err(|e| usage(e.to_string()))?;
    let p = plan::plan(&topo, &requests, a.validate.map(|n| (n, a.max_releases, a.seed)));
    crate::print(a.json, &p, table(&p))?;
    Ok(if p.refused() > 0 { exit::REFUSED } else { exit::OK })
}

/// The plan as a table: a row per request (its tree drawn from the sender), then the
/// validation's totals.
fn table(plan: &Plan) -> String {
    let validated = plan.validation.is_some();
    let mut out = format!(
        "{:<12} {:>7} {:>12} {:>12} {:>11}",
        "tunnel", "sublane", "period us", "min lat us", "jitter us"
    );
    if validated {
        out.push_str(&format!(
            " {:>12} {:>12} {:>12} {:>6}",
            "obs min us", "obs max us", "bound us", "drops"
        ));
    }
    out.push_str("  tree\n");
    let us = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.3}", v / 1e3));
    for r in &plan.tunnels {
        if !r.admitted {
            out.push_str(&format!(
                "{:<12} {:>7} refused: {}\n",
                r.name,
                r.sublane,
                r.reason.as_deref().unwrap_or("")
            ));
            continue;
        }
        out.push_str(&format!(
            "{:<12} {:>7} {:>12} {:>12} {:>11}",
            r.name,
            r.sublane,
            us(r.period_ns),
            us(r.min_latency_ns),
            us(r.max_jitter_ns)
        ));
        if validated {
            let bound = r.min_latency_ns.zip(r.max_jitter_ns).map(|(a, b)| a + b);
            out.push_str(&format!(
                " {:>12} {:>12} {:>12} {:>6}",
                us(r.observed_min_ns),
                us(r.observed_max_ns),
                us(bound),
                r.drops.map_or("-".into(), |d| d.to_string())
            ));
        }
        out.push_str(&format!("  {}\n", draw(&r.edges)));
    }
    if let Some(v) = &plan.validation {
        out.push_str(&format!(
            "validation: {} adversary runs, {:.3} ms simulated, {} events: {} violations, {} drops\n",
            v.runs,
            v.simulated_ns / 1e6,
            v.events,
            v.violations,
            v.drops
        ));
    }
    let refused = plan.refused();
    if refused > 0 {
        out.push_str(&format!("{refused} of {} requests refused\n", plan.tunnels.len()));
    }
    out
}

/// A tree given as `[from, to]` edges in preorder from its root, as text: `a -> b -> {c, d -> e}`.
fn draw(edges: &[[String; 2]]) -> String {
    fn from(node: &str, edges: &[[String; 2]], depth: usize) -> String {
        let children: Vec<&str> = edges.iter().filter(|e| e[0] == node).map(|e| e[1].as_str()).collect();
        // A tree has no cycle; the depth bound only keeps a malformed one from recursing forever.
        if depth > edges.len() {
            return format!("{node} -> ...");
        }
        match children.as_slice() {
            [] => node.to_string(),
            [one] => format!("{node} -> {}", from(one, edges, depth + 1)),
            many => {
                let parts: Vec<String> = many.iter().map(|c| from(c, edges, depth + 1)).collect();
                format!("{node} -> {{{}}}", parts.join(", "))
            }
        }
    }
    match edges.first() {
        Some([root, _]) => from(root, edges, 0),
        None => String::new(),
    }
}

/// The topology `lane generate` asked for, after checking every flag (before building it).
fn generated(g: &GenerateArgs) -> Result<Topology> {
    let time = |ns: f64, flag: &str| {
        if !(ns.is_finite() && (0.0..=MAX_TIME_NS as f64).contains(&ns)) {
            return Err(usage(format!(
                "{flag} must be from 0 to {MAX_TIME_NS} ns (1 hour; bounds add such times up in 64-bit picoseconds), got {ns}"
            )));
        }
        ns_to_ps(ns).ok_or_else(|| usage(format!("{flag}: {ns} ns is not a time")))
    };
    let spec = LinkSpec {
        bandwidth_bps: g.bandwidth_bps,
        queue_bytes: g.queue_bytes,
        min_delay: time(g.min_delay_ns, "--min-delay-ns")?,
        max_jitter: time(g.max_jitter_ns, "--max-jitter-ns")?,
    };
    if !(1..=MAX_BANDWIDTH_BPS).contains(&g.bandwidth_bps) {
        return Err(usage(format!(
            "--bandwidth-bps must be from 1 to {MAX_BANDWIDTH_BPS} (1 Pbit/s), got {}",
            g.bandwidth_bps
        )));
    }
    if g.queue_bytes > MAX_BYTES {
        return Err(usage(format!(
            "--queue-bytes must be at most {MAX_BYTES} (1 TiB), got {}",
            g.queue_bytes
        )));
    }
    spec.check().map_err(|why| usage(format!("--queue-bytes: {why}")))?;
    let count = |what: &str, n: usize, min: usize| {
        if (min..=MAX_GENERATED_LINKS / 2).contains(&n) {
            Ok(n)
        } else {
            Err(usage(format!("--{what} must be from {min} to {}, got {n}", MAX_GENERATED_LINKS / 2)))
        }
    };
    // Duplex links, two per cable.
    let links = match g.shape {
        Shape::Rack => 2 * count("hosts", g.hosts, 2)?,
        Shape::LeafSpine => {
            let (leaves, spines, hosts) =
                (count("leaves", g.leaves, 1)?, count("spines", g.spines, 1)?, count("hosts", g.hosts, 1)?);
            if leaves * hosts < 2 {
                return Err(usage(
                    "a leaf-spine needs two hosts at least (--leaves times --hosts): tunnels run between hosts",
                ));
            }
            2 * leaves * (spines + hosts)
        }
        Shape::FatTree => {
            if g.k < 2 || !g.k.is_multiple_of(2) || g.k > MAX_GENERATED_K {
                return Err(usage(format!(
                    "--k must be an even fat-tree arity from 2 to {MAX_GENERATED_K} (k = 14: 686 hosts, 4,116 links, the most that fit the 1 MiB lane plan reads), got {}",
                    g.k
                )));
            }
            3 * g.k.pow(3) / 2
        }
    };
    if links > MAX_GENERATED_LINKS {
        return Err(usage(format!(
            "that topology has {links} links; at most {MAX_GENERATED_LINKS} fit the 1 MiB topology file lane plan reads"
        )));
    }
    let topo = match g.shape {
        Shape::Rack => generate::rack(g.hosts, spec)?,
        Shape::LeafSpine => generate::leaf_spine(g.leaves, g.spines, g.hosts, spec)?,
        Shape::FatTree => generate::fat_tree(g.k, spec)?,
    };
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(e: &[(&str, &str)]) -> Vec<[String; 2]> {
        e.iter().map(|(a, b)| [a.to_string(), b.to_string()]).collect()
    }

    /// The help text, rendered as `kairos lane COMMAND --help` prints it, states the limits
    /// the checks apply (the text is written by hand; the constants are what is checked).
    #[test]
    fn the_help_states_the_limits_the_checks_apply() {
        use clap::CommandFactory;
        let mut cli = crate::Cli::command();
        let mut help = |name: &str| {
            let lane = cli.find_subcommand_mut("lane").expect("kairos lane");
            lane.find_subcommand_mut(name).expect("the subcommand").render_long_help().to_string()
        };
        let tightness = help("tightness");
        assert!(tightness.contains(&format!("2-{}", lane_tightness::MAX_K)), "{tightness}");
        assert!(tightness.contains(&format!("1-{}", lane_tightness::MAX_REQUESTS)), "{tightness}");
        let generate = help("generate");
        assert!(generate.contains(&format!("2-{MAX_GENERATED_K}")), "{generate}");
        assert!(generate.contains(&format!("1-{}", MAX_GENERATED_LINKS / 2)), "{generate}");
        assert_eq!(3 * MAX_GENERATED_K.pow(3) / 2, MAX_GENERATED_LINKS, "the k = 14 fat-tree's links");
    }

    #[test]
    fn trees_are_drawn_from_the_sender() {
        assert_eq!(draw(&edges(&[("h0", "s0"), ("s0", "h1")])), "h0 -> s0 -> h1");
        let multicast = edges(&[("h0", "s0"), ("s0", "s1"), ("s1", "h2"), ("s0", "h1")]);
        assert_eq!(draw(&multicast), "h0 -> s0 -> {s1 -> h2, h1}");
        assert_eq!(draw(&[]), "");
        // Not a tree: still ends.
        assert!(draw(&edges(&[("a", "b"), ("b", "a")])).ends_with("..."));
    }
}
