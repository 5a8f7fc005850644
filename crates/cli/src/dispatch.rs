//! `kairos dispatch`: flow-affinity dispatch to workers that come and go. `remap` counts the
//! flows each steering policy moves when a worker joins or leaves, against the ideal.

use anyhow::Result;
use clap::{Args, Subcommand};
use kairos_dispatch::PolicyKind;
use kairos_dispatch::remap::{Event, RemapRow, flow_hashes, remap};

use crate::exit;

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
