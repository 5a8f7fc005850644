//! `kairos lane`: the express lane's planner from the command line.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use kairos_lab::lane_tightness;
use kairos_lane::plan;
use kairos_lane::te::{LinkSpec, Topology, generate, ns_to_ps, requests_from_toml};

#[derive(Args)]
pub struct LaneArgs {
    #[command(subcommand)]
    command: LaneCommand,
}

#[derive(Subcommand)]
enum LaneCommand {
    /// Admit requests into a topology, in order, and print each tunnel's tree and bounds.
    Plan(PlanArgs),
    /// Write a generated topology as TOML on stdout.
    Generate(GenerateArgs),
    /// How tight the bounds are: a fat-tree of random tunnels, simulated, bound beside observed.
    Tightness(TightnessArgs),
}

#[derive(Args)]
struct TightnessArgs {
    /// --quick: a k=4 fat-tree with 40 requests instead of k=8 with 300.
    #[command(flatten)]
    common: crate::Common,
    /// Fat-tree arity (overrides the preset).
    #[arg(long)]
    k: Option<usize>,
    /// Requests offered (overrides the preset).
    #[arg(long)]
    requests: Option<usize>,
    /// Seed of the requests and of the validator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
struct PlanArgs {
    /// Topology TOML ([[node]] name, kind; [[link]] from, to, bandwidth_bps, queue_bytes,
    /// min_delay_ns, max_jitter_ns, optional bidirectional).
    #[arg(long)]
    topology: PathBuf,
    /// Requests TOML ([[request]] name, sender, receivers, packet_bytes, period_ns, optional sublane).
    #[arg(long)]
    requests: PathBuf,
    /// Simulate this many of the longest approved period under every adversary (eight general
    /// ones, and one per tunnel lining the others up against it) and print the observed
    /// latencies beside the bounds.
    #[arg(long)]
    validate: Option<u64>,
    /// Most packet releases per adversary run (a shorter simulation when needed).
    #[arg(long, default_value_t = 250_000)]
    max_releases: u64,
    /// Seed of the validator's random phases and delays.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print {"tunnels": [...]} on stdout instead of the table.
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
    /// rack (one switch), leaf-spine, or fat-tree.
    shape: Shape,
    /// Fat-tree arity (even).
    #[arg(long, default_value_t = 4)]
    k: usize,
    /// Hosts (rack) or hosts per leaf (leaf-spine).
    #[arg(long, default_value_t = 4)]
    hosts: usize,
    #[arg(long, default_value_t = 4)]
    leaves: usize,
    #[arg(long, default_value_t = 2)]
    spines: usize,
    #[arg(long, default_value_t = 10_000_000_000)]
    bandwidth_bps: u64,
    #[arg(long, default_value_t = 524_288)]
    queue_bytes: u64,
    #[arg(long, default_value_t = 1_000.0)]
    min_delay_ns: f64,
    #[arg(long, default_value_t = 100.0)]
    max_jitter_ns: f64,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

pub fn run(args: &LaneArgs) -> Result<()> {
    match &args.command {
        LaneCommand::Plan(a) => {
            let topo = Topology::from_toml(&read(&a.topology)?, &a.topology.display().to_string())?;
            let requests = requests_from_toml(&read(&a.requests)?, &a.requests.display().to_string(), &topo)?;
            if a.validate == Some(0) {
                bail!("--validate needs a number of periods above 0");
            }
            let p = plan::plan(&topo, &requests, a.validate.map(|n| (n, a.max_releases.max(1), a.seed)));
            crate::print(a.json, &p, plan::table(&p))
        }
        LaneCommand::Tightness(a) => {
            let mut config = lane_tightness::TightnessConfig::preset(a.common.quick);
            if let Some(k) = a.k {
                config.k = k;
            }
            if let Some(r) = a.requests {
                config.requests = r;
            }
            config.seed = a.seed;
            let s = lane_tightness::run(&config, &a.common.results, &|l| eprintln!("kairos: {l}"))?;
            crate::print(a.common.json, &s, lane_tightness::report(&s))
        }
        LaneCommand::Generate(g) => {
            if !(g.min_delay_ns >= 0.0 && g.max_jitter_ns >= 0.0) || g.bandwidth_bps == 0 {
                bail!("delays must not be negative and the bandwidth must be positive");
            }
            let spec = LinkSpec {
                bandwidth_bps: g.bandwidth_bps,
                queue_bytes: g.queue_bytes,
                min_delay: ns_to_ps(g.min_delay_ns),
                max_jitter: ns_to_ps(g.max_jitter_ns),
            };
            let topo = match g.shape {
                Shape::Rack => generate::rack(g.hosts, spec)?,
                Shape::LeafSpine => generate::leaf_spine(g.leaves, g.spines, g.hosts, spec)?,
                Shape::FatTree => generate::fat_tree(g.k, spec)?,
            };
            print!("{}", topo.to_toml());
            Ok(())
        }
    }
}
