//! `kairos aoi-model`: flags and output of the queue-model command.

use anyhow::Result;
use clap::Args;
use kairos_lab::experiments::aoi_model::{self, Arrival, Discipline, Service, SweepConfig};

use crate::exit::usage;
use std::path::PathBuf;

#[derive(Args)]
pub struct AoiModelArgs {
    /// Arrival law: poisson or periodic (default: poisson).
    #[arg(long, default_value = "poisson")]
    arrival: Arrival,
    /// Service law: exp (exponential) or det (deterministic) (default: exp).
    #[arg(long, default_value = "exp")]
    service: Service,
    /// Arrival rate lambda, updates per unit of time, above 0 and up to 1e12 (below --service-rate
    /// for unbounded fcfs). Without it, sweeps the load 0.1-3 over every discipline.
    #[arg(long)]
    rate: Option<f64>,
    /// Service rate mu, updates per unit of time, above 0 and up to 1e12; ages are reported in
    /// units of 1/mu (default: 1).
    #[arg(long, default_value_t = 1.0)]
    service_rate: f64,
    /// Queue discipline: fcfs, bufferless, lcfs-preemptive, drop-oldest or keep-latest (default:
    /// fcfs).
    #[arg(long, default_value = "fcfs")]
    discipline: String,
    /// Waiting places, 1 or more (fcfs: unbounded when absent; drop-oldest: 1 when absent).
    #[arg(long)]
    buffer: Option<usize>,
    /// Arrivals simulated per point, 1 to 100,000,000 (default: 1,000,000: ten points a second).
    #[arg(long, default_value_t = 1_000_000)]
    arrivals: u64,
    /// Seed of the simulation, any 64-bit number (default: 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Where the sweep's run directory is written (a directory per run under `aoi-model/`).
    #[arg(long, default_value = "results")]
    results: PathBuf,
}

/// Runs `kairos aoi-model`: without `--rate`, the sweep through the lab's harness and its
/// summary; with it, that one point, printed as a line (or one JSON object with `--json`). A
/// bad flag is a usage error (exit code 2); the exit code on success.
pub fn run(args: &AoiModelArgs) -> Result<i32> {
    let discipline = Discipline::parse(&args.discipline, args.buffer).map_err(|e| usage(e.to_string()))?;
    if !(args.service_rate.is_finite() && args.service_rate > 0.0 && args.service_rate <= 1e12) {
        return Err(usage(format!(
            "--service-rate must be a positive number up to 1e12, got {}",
            args.service_rate
        )));
    }
    let config = SweepConfig {
        arrival: args.arrival,
        service: args.service,
        arrivals: args.arrivals,
        seed: args.seed,
    };
    config.validate().map_err(|why| usage(format!("--arrivals: {why}")))?;
    let Some(rate) = args.rate else {
        let common = crate::Common { quick: false, json: args.json, results: args.results.clone() };
        return crate::experiment(&common, &config, aoi_model::table);
    };
    if !(rate.is_finite() && rate > 0.0 && rate <= 1e12) {
        return Err(usage(format!("--rate must be a positive number up to 1e12, got {rate}")));
    }
    if matches!(discipline, Discipline::Fcfs { buffer: None }) && rate >= args.service_rate {
        return Err(usage(format!(
            "an unbounded FCFS queue at load {:.3} >= 1 has no steady state: lower --rate or give --buffer",
            rate / args.service_rate
        )));
    }
    let p = aoi_model::point(
        args.arrival,
        args.service,
        discipline,
        rate,
        args.service_rate,
        args.arrivals,
        args.seed,
    );
    if args.json {
        outln!("{}", serde_json::to_string(&p)?);
    } else {
        let closed = p.closed_form_avg_age.map_or("none known".to_string(), |c| format!("{c:.4}"));
        outln!(
            "{} arrivals, {} service, {} at rho {:.3}: average age {:.4}, peak age {:.4} (units of 1/mu); closed form {closed}",
            p.arrival,
            p.service,
            args.discipline,
            p.rho,
            p.avg_age,
            p.peak_age
        );
    }
    Ok(crate::exit::OK)
}
