//! `kairos aoi-model`: the age of information of one source through one server, simulated on the
//! virtual clock and set beside the closed forms of the literature.
//!
//! With `--rate`, one point: the simulated average and peak age (in units of the mean service
//! time `1/mu`) and, where one is known, the closed form. Without it, a sweep of the load
//! `rho = lambda/mu` for the chosen arrival and service laws and every discipline: a table and a
//! plot of the simulated ages (solid) beside the model curves (dashed). The simulator
//! measures with the same [`kairos_metrics::AgeProcess`] the forwarding experiments use, so the
//! agreement checks the age calculator too.
//!
//! # JSON fields (stable)
//! Point: `arrival`, `service`, `discipline`, `buffer`, `rate`, `service_rate`, `rho`,
//! `arrivals`, `avg_age`, `peak_age`, `closed_form_avg_age` (null when none is known),
//! `closed_form_peak_age`, `rel_error` (null without a closed form), `discarded`.
//! Sweep: `machine`, `plots`, `results_dir`, `arrival`, `service`, `points` (as above).

use anyhow::Result;
use serde::Serialize;

use crate::harness::plot::{Scales, XySeries, xy_chart};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};
use kairos_aoi::sim::{SimConfig, simulate};
pub use kairos_aoi::{Arrival, Discipline, Service, closed_form, sim};

/// One simulated point beside its closed form.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// When updates arrived.
    pub arrival: Arrival,
    /// How long service took.
    pub service: Service,
    /// The discipline's name (`fcfs`, `keep-latest`, ...).
    pub discipline: &'static str,
    /// Its waiting places (`null`: unbounded).
    pub buffer: Option<usize>,
    /// Arrival rate lambda, per unit of time.
    pub rate: f64,
    /// Service rate mu, per unit of time.
    pub service_rate: f64,
    /// Load `lambda / mu`.
    pub rho: f64,
    /// Arrivals simulated.
    pub arrivals: u64,
    /// Simulated time-average age, in units of `1/mu`.
    pub avg_age: f64,
    /// Simulated average peak age, in units of `1/mu`.
    pub peak_age: f64,
    /// The closed form's average age, where one is known.
    pub closed_form_avg_age: Option<f64>,
    /// The closed form's average peak age, where one is known.
    pub closed_form_peak_age: Option<f64>,
    /// `(simulated - closed form) / closed form`, where a closed form is known.
    pub rel_error: Option<f64>,
    /// Updates the discipline discarded.
    pub discarded: u64,
}

/// Simulates one configuration and sets the closed form beside it.
pub fn point(
    arrival: Arrival,
    service: Service,
    discipline: Discipline,
    rate: f64,
    service_rate: f64,
    arrivals: u64,
    seed: u64,
) -> Point {
    let result =
        simulate(&SimConfig { arrival, service, discipline, rate, service_rate, batch: 1, arrivals, seed });
    let rho = rate / service_rate;
    let known = closed_form::known(arrival, service, discipline, rho);
    let closed_form_avg_age = known.map(|k| k.0);
    Point {
        arrival,
        service,
        discipline: discipline.name(),
        buffer: discipline.buffer(),
        rate,
        service_rate,
        rho,
        arrivals,
        avg_age: result.avg_age,
        peak_age: result.peak_age,
        closed_form_avg_age,
        closed_form_peak_age: known.and_then(|k| k.1),
        rel_error: closed_form_avg_age.map(|c| (result.avg_age - c) / c),
        discarded: result.discarded,
    }
}

/// What a sweep simulates: the laws, the arrivals per point and the seed.
#[derive(Debug, Clone, Serialize)]
pub struct SweepConfig {
    /// When updates arrive.
    pub arrival: Arrival,
    /// How long service takes.
    pub service: Service,
    /// Arrivals simulated per point (1 to [`MAX_ARRIVALS`]).
    pub arrivals: u64,
    /// Seed of the simulation.
    pub seed: u64,
}

/// The most arrivals a point simulates: about 10 s a point here (a sweep has 60 points).
pub const MAX_ARRIVALS: u64 = 100_000_000;

impl SweepConfig {
    /// Checks the arrivals before anything runs.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        if !(1..=MAX_ARRIVALS).contains(&self.arrivals) {
            return Err(InvalidConfig::new(format!(
                "arrivals per point must be 1-{MAX_ARRIVALS} (more takes over 10 s a point), got {}",
                self.arrivals
            )));
        }
        Ok(())
    }
}

/// A sweep of the load for every discipline.
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    /// Machine, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// Arrival law of every point.
    pub arrival: Arrival,
    /// Service law of every point.
    pub service: Service,
    /// Every (discipline, load) point.
    pub points: Vec<Point>,
}

impl Experiment for SweepConfig {
    const NAME: &'static str = "aoi-model";
    type Summary = Sweep;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        self.validate()?;
        // About ten million arrivals a second here.
        Ok(Plan::new(sweep_plan().len(), self.arrivals as f64 / 1e7))
    }

    fn noise(&self) -> Option<kairos_metrics::NoiseConfig> {
        None
    }

    fn run(&self, run: &mut Run<'_>) -> Result<Sweep> {
        sweep(self, run)
    }
}

/// Every (discipline, load) point of a sweep.
fn sweep_plan() -> Vec<(Discipline, f64)> {
    sweep_disciplines()
        .into_iter()
        .flat_map(|d| sweep_loads().into_iter().map(move |rho| (d, rho)))
        // Unbounded FCFS has no steady state at or beyond full load.
        .filter(|(d, rho)| !(matches!(d, Discipline::Fcfs { buffer: None }) && *rho >= 1.0))
        .collect()
}

/// The disciplines a sweep compares.
pub fn sweep_disciplines() -> Vec<Discipline> {
    vec![
        Discipline::Fcfs { buffer: None },
        Discipline::Bufferless,
        Discipline::Fcfs { buffer: Some(1) },
        Discipline::KeepLatest,
        Discipline::LcfsPreemptive,
    ]
}

/// Loads a sweep covers: under and over load.
pub fn sweep_loads() -> Vec<f64> {
    vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.2, 1.5, 2.0, 3.0]
}

/// Simulates every point and plots them beside the closed forms (`aoi_model.png`).
fn sweep(config: &SweepConfig, run: &mut Run<'_>) -> Result<Sweep> {
    let SweepConfig { arrival, service, arrivals, seed } = *config;
    let mut points = Vec::new();
    for (discipline, rho) in sweep_plan() {
        run.doing(&format!("{} at rho {rho}", discipline.label()));
        points.push(point(arrival, service, discipline, rho, 1.0, arrivals, seed));
        run.step("");
    }
    let mut series = Vec::new();
    for (color, discipline) in sweep_disciplines().into_iter().enumerate() {
        let mine: Vec<&Point> = points
            .iter()
            .filter(|p| p.discipline == discipline.name() && p.buffer == discipline.buffer())
            .collect();
        series.push(XySeries {
            name: format!("{} simulated", discipline.label()),
            points: mine.iter().map(|p| (p.rho, p.avg_age)).collect(),
            model: false,
            color,
        });
        let model: Vec<(f64, f64)> =
            mine.iter().filter_map(|p| p.closed_form_avg_age.map(|c| (p.rho, c))).collect();
        if !model.is_empty() {
            series.push(XySeries {
                name: format!("{} closed form", discipline.label()),
                points: model,
                model: true,
                color,
            });
        }
    }
    let plot = run.plot("aoi_model.png");
    xy_chart(
        &plot,
        &format!("Average age, {arrival} arrivals, {service} service"),
        "load rho = lambda / mu",
        "average age (units of 1/mu)",
        Scales { log_x: true, log_y: true },
        &series,
    )?;
    Ok(Sweep { run: run.finish(), arrival, service, points })
}

/// The sweep as a text table.
pub fn table(sweep: &Sweep) -> String {
    let mut out = format!(
        "{:<22} {:>6} {:>10} {:>12} {:>9} {:>10}\n",
        "discipline", "rho", "avg age", "closed form", "error", "peak age"
    );
    for p in &sweep.points {
        let name = match p.buffer {
            Some(b) if p.discipline == "fcfs" || p.discipline == "drop-oldest" => {
                format!("{} ({b})", p.discipline)
            }
            _ => p.discipline.to_string(),
        };
        let closed = p.closed_form_avg_age.map_or("-".to_string(), |c| format!("{c:.4}"));
        let err = p.rel_error.map_or("-".to_string(), |e| format!("{:+.2}%", e * 100.0));
        out.push_str(&format!(
            "{name:<22} {:>6.2} {:>10.4} {closed:>12} {err:>9} {:>10.4}\n",
            p.rho, p.avg_age, p.peak_age
        ));
    }
    out.push_str(&crate::harness::output::report_footer(&sweep.run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: u64 = 2_000_000;

    fn check(arrival: Arrival, service: Service, discipline: Discipline, rho: f64) {
        let p = point(arrival, service, discipline, rho, 1.0, LONG, 7);
        let closed = p.closed_form_avg_age.expect("a closed form is known");
        let err = (p.avg_age - closed).abs() / closed;
        assert!(
            err < 0.02,
            "{discipline:?} at rho {rho}: simulated {} vs {closed} ({:.2}%)",
            p.avg_age,
            err * 100.0
        );
        if let Some(peak) = p.closed_form_peak_age {
            let err = (p.peak_age - peak).abs() / peak;
            assert!(err < 0.02, "{discipline:?} peak at rho {rho}: {} vs {peak}", p.peak_age);
        }
    }

    #[test]
    fn mm1_fcfs_matches_kaul_yates_gruteser() {
        for rho in [0.2, 0.5, 0.8] {
            check(Arrival::Poisson, Service::Exp, Discipline::Fcfs { buffer: None }, rho);
        }
    }

    #[test]
    fn bufferless_matches_mm11() {
        for rho in [0.5, 1.5] {
            check(Arrival::Poisson, Service::Exp, Discipline::Bufferless, rho);
        }
    }

    #[test]
    fn lcfs_preemptive_matches_one_over_lambda_plus_one_over_mu() {
        for rho in [0.5, 2.0] {
            check(Arrival::Poisson, Service::Exp, Discipline::LcfsPreemptive, rho);
        }
    }

    #[test]
    fn keep_latest_and_one_slot_drop_oldest_match_mm12_star() {
        for rho in [0.5, 1.5] {
            check(Arrival::Poisson, Service::Exp, Discipline::KeepLatest, rho);
            check(Arrival::Poisson, Service::Exp, Discipline::DropOldest { buffer: 1 }, rho);
        }
    }

    #[test]
    fn one_slot_fcfs_matches_mm12() {
        check(Arrival::Poisson, Service::Exp, Discipline::Fcfs { buffer: Some(1) }, 0.7);
    }

    #[test]
    fn md1_and_dm1_match() {
        check(Arrival::Poisson, Service::Det, Discipline::Fcfs { buffer: None }, 0.5);
        check(Arrival::Periodic, Service::Exp, Discipline::Fcfs { buffer: None }, 0.5);
        check(Arrival::Periodic, Service::Det, Discipline::Fcfs { buffer: None }, 0.5);
    }

    #[test]
    fn batches_stamped_together_add_half_a_batch_period() {
        // Batches of K every K/R (batch arrival rate R/K), each update taking a constant S:
        // only the first of a batch is informative, so the age is S + K/(2R).
        let (k, rate_per_update, service) = (8usize, 0.5f64, 1.0f64);
        let batch_rate = rate_per_update / k as f64;
        let r = simulate(&SimConfig {
            arrival: Arrival::Periodic,
            service: Service::Det,
            discipline: Discipline::Fcfs { buffer: None },
            rate: batch_rate,
            service_rate: 1.0 / service,
            batch: k,
            arrivals: 200_000,
            seed: 1,
        });
        let model = closed_form::batch_avg(service, k as f64, rate_per_update);
        assert!((r.avg_age - model).abs() / model < 0.02, "{} vs {model}", r.avg_age);
    }

    #[test]
    fn keep_latest_stays_bounded_where_fcfs_explodes() {
        let fcfs = point(
            Arrival::Poisson,
            Service::Exp,
            Discipline::Fcfs { buffer: Some(64) },
            1.5,
            1.0,
            200_000,
            3,
        );
        let latest = point(Arrival::Poisson, Service::Exp, Discipline::KeepLatest, 1.5, 1.0, 200_000, 3);
        assert!(
            fcfs.avg_age > 10.0 * latest.avg_age,
            "fcfs {} vs keep-latest {}",
            fcfs.avg_age,
            latest.avg_age
        );
    }

    #[test]
    fn names_parse() {
        assert_eq!(Discipline::parse("fcfs", Some(4)).unwrap(), Discipline::Fcfs { buffer: Some(4) });
        assert!(Discipline::parse("lifo", None).unwrap_err().to_string().contains("keep-latest"));
        assert!("gamma".parse::<Service>().unwrap_err().to_string().contains("exp or det"));
        assert!("bursty".parse::<Arrival>().unwrap_err().to_string().contains("poisson or periodic"));
    }
}
