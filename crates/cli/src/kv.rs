//! `kairos kv`: the replicated key-value store from the command line. The flags only parse
//! here: they land in the experiment's configuration, whose `plan` checks each against its
//! limits before anything starts (a bad value is a usage error, exit code 2).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use kairos_lab::kv_check;

#[derive(Args)]
pub struct KvArgs {
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(Subcommand)]
enum KvCommand {
    /// Correctness under faults: simulated clusters (crashes of the leader and followers, power
    /// loss, partitions, packet loss, pauses) with clients doing SET/GET/INCR/APPEND; every
    /// history checked for linearizability and every acknowledged write looked for at the end;
    /// then broken replicas the checker must catch. Full: 10,000 histories (a few minutes on
    /// two cores); --quick: 1,000 (under a minute).
    Check(CheckArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// 1,000 histories instead of 10,000.
    #[arg(long)]
    quick: bool,
    /// Print the summary as one JSON object on stdout; default: a table.
    #[arg(long)]
    json: bool,
    /// Directory the runs are written under (a subdirectory per experiment and run; created
    /// when missing).
    #[arg(long, value_name = "DIR", default_value = "results")]
    results: PathBuf,
    /// Histories (seeds) to check, 1-1000000; default: 1000 with --quick, else 10000.
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
    /// The first seed; a failing seed N replays with --first-seed N --seeds 1.
    #[arg(long, value_name = "N", default_value_t = 0)]
    first_seed: u64,
    /// Seeds per broken mode in the checker's self-test, 0-100000 (0: no self-test); default:
    /// 40 with --quick, else 200.
    #[arg(long, value_name = "N")]
    self_test_seeds: Option<u64>,
    /// Members of each cluster, 3-7.
    #[arg(long, value_name = "N", default_value_t = 3)]
    members: usize,
    /// Simulated time per history, milliseconds, 50-60000.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    duration_ms: u64,
}

pub fn run(args: &KvArgs) -> Result<i32> {
    match &args.command {
        KvCommand::Check(a) => {
            let mut config = kv_check::CheckConfig::preset(a.quick);
            config.seeds = a.seeds.unwrap_or(config.seeds);
            config.first_seed = a.first_seed;
            config.self_test_seeds = a.self_test_seeds.unwrap_or(config.self_test_seeds);
            config.members = a.members;
            config.duration_ms = a.duration_ms;
            let common = crate::Common { quick: a.quick, json: a.json, results: a.results.clone() };
            crate::experiment(&common, &config, kv_check::report)
        }
    }
}
