//! The one harness every experiment runs in: config -> validate -> results directory -> run with
//! progress -> records -> summary.
//!
//! An experiment says what it is ([`Experiment`]: its name, how to check a config, how many
//! steps and about how long a run takes, whether the noise probe watches it) and does its
//! measurement in [`Experiment::run`] against a [`Run`]. The harness owns the order, so no
//! experiment can get it wrong:
//!
//! 1. the config is validated before anything starts (no thread, no directory, no child);
//! 2. the run's directory is created (atomically unique) and `config.json` written into it, so
//!    an unwritable `--results` fails in milliseconds, not after the measurement;
//! 3. the machine is described and the noise probe started (where the experiment wants it);
//! 4. the experiment runs, with a progress bar on a terminal or one line on stderr otherwise;
//! 5. its summary is written as `summary.json` and returned for the table or `--json`.
//!
//! What every summary carries is [`RunInfo`] (`machine`, `noise`, `plots`, `results_dir`),
//! flattened into the summary's JSON so the field names stay where they always were.

pub mod background;
pub mod machine;
pub mod output;
pub mod plot;
pub mod table;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use indicatif::ProgressBar;
use kairos_metrics::{NoiseConfig, NoiseProbe, NoiseReport};
use serde::Serialize;

use crate::harness::machine::MachineInfo;
use crate::harness::output::{RunDir, interactive, progress};

/// An experiment the harness can run, implemented by its configuration: everything the run
/// depends on (written to `config.json`).
pub trait Experiment: Serialize {
    /// The results subdirectory and the name in progress lines (`rtu-deadlines`).
    const NAME: &'static str;
    /// What the run found; written to `summary.json`.
    type Summary: Serialize;

    /// Checks the configuration and says how much work it is. Called before anything starts;
    /// the error says what is wrong, the limit and why, in one line.
    fn plan(&self) -> Result<Plan, InvalidConfig>;

    /// The noise probe's settings, or `None` for experiments that measure no time (models,
    /// simulations).
    fn noise(&self) -> Option<NoiseConfig> {
        Some(NoiseConfig::quick())
    }

    /// Measures. Call [`Run::finish`] once the measuring is over, to stop the noise probe and
    /// take the [`RunInfo`] for the summary.
    fn run(&self, run: &mut Run<'_>) -> Result<Self::Summary>;
}

/// How much work a run is: the steps the progress bar counts (points, rows, runs) and about
/// how long each takes, for the line printed when no bar is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// Steps the progress bar counts.
    pub steps: u64,
    /// About how long one step takes, seconds.
    pub seconds_per_step: f64,
}

impl Plan {
    /// `steps` steps of about `seconds_per_step` each.
    pub fn new(steps: usize, seconds_per_step: f64) -> Self {
        Self { steps: steps as u64, seconds_per_step }
    }

    /// About how long the whole run takes.
    pub fn estimate(&self) -> Duration {
        Duration::try_from_secs_f64(self.steps as f64 * self.seconds_per_step).unwrap_or(Duration::MAX)
    }
}

/// What every summary carries, flattened into its JSON.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// The machine the figures were measured on.
    pub machine: MachineInfo,
    /// The noise probe's report (absent for experiments that measure no time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<NoiseReport>,
    /// The plots written, in the order a reader should look at them.
    pub plots: Vec<PathBuf>,
    /// Where the run's files are.
    pub results_dir: PathBuf,
}

/// One run in progress: its directory, progress bar, log, noise probe and plots.
pub struct Run<'a> {
    name: &'static str,
    dir: RunDir,
    machine: MachineInfo,
    probe: Option<NoiseProbe>,
    noise: Option<NoiseReport>,
    plots: Vec<PathBuf>,
    bar: ProgressBar,
    log: &'a dyn Fn(&str),
}

impl std::fmt::Debug for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run").field("name", &self.name).field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Run<'_> {
    /// The run's directory (for CSV series and other files).
    pub fn dir(&self) -> &RunDir {
        &self.dir
    }

    /// The machine, probed before the run.
    pub fn machine(&self) -> &MachineInfo {
        &self.machine
    }

    /// The path of a plot named `file` in the run's directory, recorded for the summary.
    pub fn plot(&mut self, file: &str) -> PathBuf {
        let path = self.dir.path().join(file);
        self.plots.push(path.clone());
        path
    }

    /// Logs one line on stderr without leaving a frozen copy of the bar above it.
    pub fn log(&self, line: &str) {
        self.bar.suspend(|| (self.log)(line));
    }

    /// Logs why part of the run was skipped and returns it, for the summary to record.
    pub fn skipped(&self, why: &impl std::fmt::Display) -> String {
        let why = why.to_string();
        self.log(&why);
        why
    }

    /// Counts one step done, with what comes next; never past the total.
    pub fn step(&self, next: &str) {
        if self.bar.length().is_some_and(|len| self.bar.position() < len) {
            self.bar.inc(1);
        }
        self.bar.set_message(next.to_string());
    }

    /// Says what the current step is, without counting one.
    pub fn doing(&self, what: &str) {
        self.bar.set_message(what.to_string());
    }

    /// Ends the measuring: stops the noise probe and the bar, and returns what the summary
    /// carries. Plots recorded after this call are not in the returned list.
    pub fn finish(&mut self) -> RunInfo {
        if let Some(probe) = self.probe.take() {
            self.noise = Some(probe.finish());
        }
        self.bar.finish_and_clear();
        RunInfo {
            machine: self.machine.clone(),
            noise: self.noise.clone(),
            plots: self.plots.clone(),
            results_dir: self.dir.path().to_path_buf(),
        }
    }
}

/// Runs the experiment `config` describes, writing `results_root/NAME/<run-id>/`.
pub fn run<E: Experiment>(config: &E, results_root: &Path, log: &dyn Fn(&str)) -> Result<E::Summary> {
    let plan = config.plan()?;
    let dir = RunDir::create(results_root, E::NAME)?;
    dir.write_json("config.json", config)?;
    if !interactive() {
        log(&format!(
            "{}: {} steps, about {}; results in {}",
            E::NAME,
            plan.steps,
            human(plan.estimate()),
            dir.path().display()
        ));
    }
    let machine = MachineInfo::probe();
    let probe = config.noise().map(NoiseProbe::start);
    let mut run = Run {
        name: E::NAME,
        dir,
        machine,
        probe,
        noise: None,
        plots: Vec::new(),
        bar: progress(plan.steps, E::NAME),
        log,
    };
    let summary = config.run(&mut run)?;
    run.finish();
    run.dir.write_json("summary.json", &summary)?;
    Ok(summary)
}

/// A config the experiment refused before starting: a usage error, not a failed run. The
/// message is one line saying what is wrong, the limit and why (usually naming the command-line
/// flag that sets the value); the command line exits with its usage code for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidConfig(pub String);

impl InvalidConfig {
    /// A refusal saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Checks a length of time given in seconds against `min..=max`, naming it `what` and saying
/// why the bounds are what they are.
pub fn check_seconds(seconds: f64, min: f64, max: f64, what: &str, why: &str) -> Result<(), InvalidConfig> {
    if seconds.is_finite() && (min..=max).contains(&seconds) {
        Ok(())
    } else {
        Err(InvalidConfig::new(format!(
            "{what} must be between {min} and {max} seconds ({why}), got {seconds}"
        )))
    }
}

/// Checks that `core` exists on this machine.
pub fn check_core(core: usize) -> Result<(), InvalidConfig> {
    let cores = kairos_sys::proc::online_cores();
    if core < cores {
        Ok(())
    } else {
        Err(InvalidConfig::new(format!("core {core} does not exist: this machine has cores 0-{}", cores - 1)))
    }
}

/// Checks the points of a real-time experiment: utilisations in (0, 1], seconds per point from
/// 0.1 (enough for `holds`) to 3600, and a core that exists.
pub fn check_points(
    utilisations: &[f64],
    seconds: f64,
    core: usize,
    holds: &str,
) -> Result<(), InvalidConfig> {
    check_utilisations(utilisations)?;
    check_seconds(seconds, 0.1, 3_600.0, "seconds per point", &format!("0.1 s holds {holds}"))?;
    check_core(core)
}

/// Checks a list of utilisations: at least one, each a fraction of a core in (0, 1].
pub fn check_utilisations(utilisations: &[f64]) -> Result<(), InvalidConfig> {
    if utilisations.is_empty() {
        return Err(InvalidConfig::new("give at least one utilisation"));
    }
    match utilisations.iter().find(|u| !(u.is_finite() && **u > 0.0 && **u <= 1.0)) {
        Some(u) => {
            Err(InvalidConfig::new(format!("utilisations are fractions of a core in (0, 1], got {u}")))
        }
        None => Ok(()),
    }
}

/// `1 h 5 min`, `3 min`, `40 s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=89 => format!("{} s", s.max(1)),
        90..=3_569 => format!("{} min", (s + 30) / 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600 + 30) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Debug, Serialize)]
    struct Counting(u32);

    #[derive(Debug, Serialize)]
    struct Summary {
        #[serde(flatten)]
        info: RunInfo,
        value: u32,
    }

    thread_local!(static RAN: Cell<bool> = const { Cell::new(false) });

    impl Experiment for Counting {
        const NAME: &'static str = "counting";
        type Summary = Summary;
        fn plan(&self) -> Result<Plan, InvalidConfig> {
            if self.0 == 0 {
                Err(InvalidConfig::new("count must be at least 1"))
            } else {
                Ok(Plan::new(self.0 as usize, 0.1))
            }
        }
        fn noise(&self) -> Option<NoiseConfig> {
            None
        }
        fn run(&self, run: &mut Run<'_>) -> Result<Summary> {
            RAN.with(|r| r.set(true));
            for _ in 0..self.0 + 3 {
                run.step("counting");
            }
            let plot = run.plot("p.png");
            std::fs::write(&plot, b"")?;
            Ok(Summary { info: run.finish(), value: self.0 })
        }
    }

    /// A results root of the test's own, removed when dropped.
    fn root() -> tempfile::TempDir {
        tempfile::Builder::new().prefix("kairos-harness-").tempdir().unwrap()
    }

    #[test]
    fn a_run_writes_config_and_summary_with_the_common_fields() {
        let root = root();
        let s = run(&Counting(3), root.path(), &|_| {}).unwrap();
        let text = std::fs::read_to_string(s.info.results_dir.join("summary.json")).unwrap();
        for field in ["\"machine\"", "\"plots\"", "\"results_dir\"", "\"value\": 3"] {
            assert!(text.contains(field), "{field} missing from {text}");
        }
        assert!(!text.contains("\"noise\""), "no probe ran, so no noise field: {text}");
        assert!(s.info.results_dir.join("config.json").exists());
    }

    #[test]
    fn a_bad_config_is_refused_before_anything_is_created_or_run() {
        let scratch = root();
        let root = scratch.path().join("refused");
        RAN.with(|r| r.set(false));
        let err = run(&Counting(0), &root, &|_| {}).unwrap_err();
        assert!(err.is::<InvalidConfig>());
        assert_eq!(err.to_string(), "count must be at least 1");
        assert!(!root.exists(), "the results directory was created for a refused config");
        assert!(!RAN.with(Cell::get));
    }

    #[test]
    fn an_unwritable_results_root_fails_before_the_run() {
        RAN.with(|r| r.set(false));
        let started = std::time::Instant::now();
        let err = run(&Counting(3), Path::new("/proc/kairos"), &|_| {}).unwrap_err();
        assert!(format!("{err:#}").contains("--results"), "{err:#}");
        assert!(!RAN.with(Cell::get), "the experiment ran although its results could not be kept");
        // Generous: the failure is one mkdir; a second means something ran first.
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(human(Duration::from_secs(40)), "40 s");
        assert_eq!(human(Duration::from_secs(17 * 60)), "17 min");
        assert_eq!(human(Duration::from_secs(3900)), "1 h 5 min");
    }
}
