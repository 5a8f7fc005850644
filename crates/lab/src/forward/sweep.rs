//! `kairos sweep`: the grid of forwarding runs behind the source's figures and Kairos's variants.
//!
//! 1. **Maximum rate.** The highest offered rate that the sender achieves (within 5%) and at
//!    which under 2% of the data packets are lost: doubled from 50 kpps until that fails, then
//!    bisected three times; once for the routing configuration (RCU, 1,000 users, CDR 0.01,
//!    rings of 64) and once for the baseline (one user, no FIB, rings of 4096). Rates are
//!    fractions of these (`rate_fractions`); above 1 is overload.
//! 2. **Baseline (Fig. 3).** One user, no FIB, the forwarder's 4096-slot RX ring of Table I, and
//!    1 us of work per packet on the data thread so that it is the bottleneck: average age and
//!    average sender batch against R; the ring variants beside it.
//! 3. **Routing (Fig. 4).** 1,000 users, CDR 0.01 and 0.1, each FIB: average age, data and
//!    control drops, misaddressed against R; per-user age at the highest sustainable rate beside
//!    the Zipf oracle `S + (1/R)(1/p_i - 1/2)`.
//! 4. **Update rate.** CDR from 0.001 to 0.5 at half the maximum rate, RCU against the RW lock
//!    (and the seqlock): where the crossover falls.
//! 5. **Beyond the source.** At CDR 0.1, every rate: the source's configuration against small
//!    rings, drop-oldest, the latest-only slot per user, control first, the seqlock FIB, age
//!    flushing, and all of them together. The report names the freshest per rate and its ratio.
//!
//!    On the UDP and packet backends, as root, with `dpdk-testpmd` installed, DPDK's testpmd
//!    runs the same baseline as a peer forwarder (experiment `peer-baseline`; see
//!    [`super::peer`]) on the same veth, with the same sender and receiver. On the packet
//!    backend Kairos's rows are its run-to-completion forwarder ([`kairos_forward::rtc`]) on
//!    memory-mapped rings, as testpmd's `af_packet` PMD is.
//! 6. **Age-controlled sender.** The baseline with a sender that adapts its rate to the measured
//!    age ([`super::source::AgeControl`]), against the best fixed rate of step 2.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `config`, `max_rate_pps` (by backend), `rows` (each a
//! [`super::Row`] with `experiment`), `per_user` (rank, measured and oracle age at the highest
//! sustainable rate), `best_per_rate`, `checks`, `peer` (whether the peer forwarder ran, or why
//! not), `plots`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use kairos_fib::FibKind;
use serde::Serialize;

use super::{Backend, ControlMode, Flush, ForwardConfig, Peer, RingPolicy, Row, Threading, run_once};
use crate::harness::{self, Experiment, InvalidConfig, Plan, Run, RunInfo};
use crate::output::RunDir;
use crate::plot::{Scales, XySeries, measured_per_key, xy_chart};
use kairos_aoi::closed_form::zipf_user_avg;
use kairos_forward::source::AgeControl;
use kairos_forward::trace::Trace;

/// The grid.
#[derive(Debug, Clone, Serialize)]
pub struct SweepConfig {
    /// The backends the whole grid runs on, in turn (at least one; udp and packet need root).
    pub backends: Vec<Backend>,
    /// Trace rows per run ([`MIN_PACKETS`] to the trace's maximum).
    pub packets: usize,
    /// Users of the routing grid's traces (the baseline's have one).
    pub users: u32,
    /// Control/data ratios of the routing grid; must include 0.01 and 0.1, which the
    /// maximum-rate search and the variants use.
    pub cdrs: Vec<f64>,
    /// Offered rates, as fractions of the backend's maximum rate, each in (0, 10]: above 1 is
    /// overload.
    pub rate_fractions: Vec<f64>,
    /// CDRs of the update-rate sweep.
    pub crossover_cdrs: Vec<f64>,
    /// Rate (fraction of the maximum) of the update-rate sweep.
    pub crossover_fraction: f64,
    /// Interleaved runs of each one-user configuration (1 to 20); the median (by average age)
    /// is kept.
    pub repetitions: usize,
    /// The traces' seed: the same seed draws the same traces.
    pub seed: u64,
}

impl SweepConfig {
    /// The quick preset: the memory backend, 200,000 rows a run, five rates, three repetitions.
    pub fn quick() -> Self {
        Self {
            backends: vec![Backend::Memory],
            packets: 200_000,
            users: 1000,
            cdrs: vec![0.01, 0.1],
            rate_fractions: vec![0.25, 0.5, 0.8, 1.0, 2.0],
            crossover_cdrs: vec![0.001, 0.01, 0.1, 0.5],
            crossover_fraction: 0.5,
            repetitions: 3,
            seed: 1,
        }
    }

    /// The full preset: 400,000 rows a run, ten rates, seven update-rate CDRs, five
    /// repetitions.
    pub fn full() -> Self {
        Self {
            packets: 400_000,
            rate_fractions: vec![0.05, 0.1, 0.25, 0.5, 0.65, 0.8, 0.9, 1.0, 1.5, 2.0],
            crossover_cdrs: vec![0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.5],
            repetitions: 5,
            ..Self::quick()
        }
    }

    /// [`SweepConfig::quick`] or [`SweepConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }
}

/// A row with the part of the grid it belongs to.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// The part of the grid: `max-rate`, `baseline`, `peer-baseline`, `routing`,
    /// `update-rate`, `beyond`, `beyond-baseline` or `age-control`.
    pub experiment: &'static str,
    /// Offered rate as a fraction of the backend's maximum.
    pub load: f64,
    /// The run's row (its fields flattened into this one's in the JSON).
    #[serde(flatten)]
    pub row: Row,
    /// Of a row kept as the median of interleaved runs, the least average age any of them had,
    /// ns: a stall of the machine only adds age, so the least is the configuration's age with
    /// the fewest stalls in it (`None` for a row of one run).
    pub least_avg_age_ns: Option<f64>,
}

/// One user's age at the highest sustainable rate (RW lock, CDR 0.1), beside the Zipf oracle.
#[derive(Debug, Clone, Serialize)]
pub struct PerUser {
    /// The user's Zipf rank, from 1 (the most packets).
    pub rank: usize,
    /// Its measured time-average age, ns.
    pub avg_age_ns: f64,
    /// The oracle's age for it, `S + (1/R)(1/p_i - 1/2)`, ns.
    pub oracle_ns: f64,
}

/// The freshest configuration at one rate.
#[derive(Debug, Clone, Serialize)]
pub struct Best {
    /// `one user` (the baseline grid) or `cdr 0.1` (the routing grid).
    pub grid: &'static str,
    /// The backend.
    pub backend: Backend,
    /// The offered rate, as a fraction of the backend's maximum.
    pub load: f64,
    /// The freshest configuration's label.
    pub best: String,
    /// Its average age, ns.
    pub best_age_ns: f64,
    /// The source's configuration's average age at the same rate, ns.
    pub source_age_ns: f64,
    /// `source_age_ns / best_age_ns`.
    pub gain: f64,
}

/// A check computed from the rows.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What is checked, in a few words.
    pub name: String,
    /// Whether it held.
    pub held: bool,
    /// Whether the check is a claim docs/forwarding.md makes, so a test run fails when it does not
    /// hold; the others are observations, reported either way.
    pub claim: bool,
    /// The figures it was decided on.
    pub detail: String,
}

/// What `kairos sweep` found (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct SweepSummary {
    /// The grid run.
    pub config: SweepConfig,
    /// The maximum rate found, packets per second, by backend (`udp`), with the baseline's
    /// (`udp-baseline`) and the peer forwarder's (`udp-peer`) where they ran.
    pub max_rate_pps: BTreeMap<String, f64>,
    /// Every run, kept medians for repeated configurations.
    pub rows: Vec<SweepRow>,
    /// Per-user age against the oracle at the highest sustainable rate.
    pub per_user: Vec<PerUser>,
    /// The freshest configuration at each rate, per grid and backend.
    pub best_per_rate: Vec<Best>,
    /// What the rows show, claim by claim.
    pub checks: Vec<Check>,
    /// Whether the peer forwarder (dpdk-testpmd) ran, or why not.
    pub peer: String,
    /// Machine, noise, plots and directory.
    #[serde(flatten)]
    pub run: RunInfo,
}

/// The source's configuration at a rate.
fn source_config(backend: Backend, fib: Option<FibKind>, rate: Option<f64>, label: &str) -> ForwardConfig {
    let mut c =
        ForwardConfig { backend, fib, rate_pps: rate, label: label.to_string(), ..ForwardConfig::default() };
    c.forwarder.fifo_priority = PRIORITY.load(std::sync::atomic::Ordering::Relaxed);
    // On packet rings Kairos runs its run-to-completion forwarder (the fast path); elsewhere
    // the source's pipeline.
    if backend == Backend::Packet {
        c.forwarder.threading = Threading::RunToCompletion;
        // On the last core, where testpmd's forwarding lcore is; the sender and receiver on the
        // first, for Kairos's rows and testpmd's alike. Left to the scheduler, the sender most
        // often joined the polling forwarder in its own process on its core, and the two took
        // turns there: at 62.5 kpps the age was 88-146 us against testpmd's 41-51 (a separate
        // process), 36 against 34-49 with the sender pinned (docs/forwarding.md).
        let last = kairos_sys::proc::last_core();
        c.forwarder.pin_core = Some(last);
        c.source_core = c.default_source_core();
        // Polling while traffic flows, at normal priority, as testpmd's lcore (the sweep's
        // priority is for the pipeline's threads): a forwarder that slept between the sender's
        // bursts paid a wake-up on a packet's path whenever it lost the race, and one at
        // SCHED_FIFO took its core's turn from the kernel's packet work and the sender's (at
        // 200 kpps offered the sender reached 116 kpps beside it, 170 kpps beside the polling
        // one at normal priority; docs/forwarding.md).
        c.forwarder.fifo_priority = 0;
        c.forwarder.idle_spin_ns = PACKET_IDLE_SPIN_NS;
    }
    c
}

/// The packet backend's idle spin window: longer than the gap between packets at the rates the
/// grids offer (down to 25 kpps, 40 us apart), so the forwarder polls while traffic flows and
/// sleeps once it stops; below 5 kpps (the age-controlled sender's lowest steps) it sleeps
/// between packets.
pub const PACKET_IDLE_SPIN_NS: u64 = 200_000;

/// The source's baseline configuration: no FIB, and the forwarder's RX ring of Table I (4096).
/// The data thread does [`BASELINE_WORK_NS`] of work per packet, so that it (not the sender or
/// the RX thread) is the bottleneck and overload queues in its ring, as in the source's testbed
/// (not on the packet backend, whose run-to-completion forwarder has no ring).
fn baseline_config(backend: Backend, rate: Option<f64>, label: &str) -> ForwardConfig {
    let mut c = source_config(backend, None, rate, label);
    c.forwarder.data_ring = 4096;
    // On packet rings the forwarder runs to completion (no ring to fill) beside testpmd, which
    // does no such work: the spun microsecond would only handicap it (a profile found 20% of
    // its core in the clock reads of that spin).
    if backend != Backend::Packet {
        c.forwarder.data_work_ns = BASELINE_WORK_NS;
    }
    c
}

/// The peer forwarder's rows.
const PEER_LABEL: &str = "peer: dpdk-testpmd";

/// Per-packet work of the baseline's data thread: a capacity of at most 1 Mpps.
pub const BASELINE_WORK_NS: u64 = 1_000;

/// `SCHED_FIFO` priority of the pipeline's forwarder threads in this sweep (0 when not
/// permitted); the packet backend's run-to-completion forwarder runs at normal priority
/// ([`source_config`]).
static PRIORITY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// A named change to the source's configuration.
type Variant = (&'static str, fn(&mut ForwardConfig));

/// The variants of the one-user baseline that do not need a FIB: (name, config change).
fn baseline_variants() -> Vec<Variant> {
    vec![
        ("source: tail-drop 4096", |_| {}),
        ("drop-oldest 8", drop_oldest_8),
        ("latest-only slot per user", |c| latest_only_per_user(c, 1)),
        ("age flush 5 us", age_flush_5us),
    ]
}

/// The variants of the "beyond the source" grid: (name, config change).
fn variants() -> Vec<Variant> {
    vec![
        ("source: rcu, tail-drop 64", |_| {}),
        ("small ring 8", |c| c.forwarder.data_ring = 8),
        ("drop-oldest 8", drop_oldest_8),
        ("latest-only slot per user", |c| latest_only_per_user(c, 1000)),
        ("control first", |c| c.forwarder.control = ControlMode::Inline),
        ("seqlock FIB", |c| c.fib = Some(FibKind::Seqlock)),
        ("age flush 5 us", age_flush_5us),
        ("kairos: all of the above", |c| {
            c.fib = Some(FibKind::Seqlock);
            latest_only_per_user(c, 1000);
            c.forwarder.control = ControlMode::Inline;
        }),
    ]
}

/// A data ring of 8 that evicts its oldest entry for a new one.
fn drop_oldest_8(c: &mut ForwardConfig) {
    c.forwarder.data_ring = 8;
    c.forwarder.data_policy = RingPolicy::DropOldest;
}

/// The data thread sends its batch once the oldest packet in it has waited 5 us (or nothing more
/// is queued), not once the batch is full.
fn age_flush_5us(c: &mut ForwardConfig) {
    c.forwarder.flush = Flush::Age { max_wait_ns: 5_000 };
}

/// A data ring holding the latest packet of each of `users` users. It hands the data thread one
/// packet per user at a time, so it is paired with flushing by age: a count flush would hold
/// each packet until 63 more came.
fn latest_only_per_user(c: &mut ForwardConfig, users: usize) {
    c.forwarder.data_ring = users;
    c.forwarder.data_policy = RingPolicy::KeepLatest;
    age_flush_5us(c);
}

/// Runs the grid `config` describes in the harness, writing `results_root/sweep/<run-id>/`.
pub fn run(config: &SweepConfig, results_root: &Path, log: &dyn Fn(&str)) -> Result<SweepSummary> {
    harness::run(config, results_root, log)
}

/// The forwarding runs on the progress bar besides the grid's own: two maximum-rate searches
/// of about eight probes each, and the age-controlled sender.
const SEARCH_AND_CONTROL_RUNS: usize = 17;

impl SweepConfig {
    /// The forwarding runs of the grid (the maximum-rate searches estimated).
    fn runs(&self) -> usize {
        let fibs = 4;
        let per_backend = |backend: &Backend| {
            let peer = usize::from(*backend != Backend::Memory);
            SEARCH_AND_CONTROL_RUNS
                + self.rate_fractions.len()
                    * ((baseline_variants().len() + peer) * self.repetitions
                        + self.cdrs.len() * fibs
                        + variants().len())
                + self.crossover_cdrs.len() * 3
        };
        self.backends.iter().map(per_backend).sum()
    }

    fn check(&self) -> Result<(), InvalidConfig> {
        if self.backends.is_empty() {
            return Err(InvalidConfig::new("--backend needs at least one of memory, udp, packet"));
        }
        if let Some(b) = self.backends.iter().find(|b| **b != Backend::Memory)
            && !kairos_sys::user::is_root()
        {
            return Err(InvalidConfig::new(format!(
                "--backend {b} needs root (it makes two network namespaces); run as root or use --backend memory"
            )));
        }
        if !(MIN_PACKETS..=kairos_forward::trace::MAX_ROWS).contains(&self.packets) {
            return Err(InvalidConfig::new(format!(
                "--packets must be {MIN_PACKETS} to {}, got {} (a run needs enough updates per user to measure an age)",
                kairos_forward::trace::MAX_ROWS,
                self.packets
            )));
        }
        for needed in ["0.01", "0.1"] {
            if !self.cdrs.iter().any(|c| format!("{c}") == needed) {
                return Err(InvalidConfig::new(format!(
                    "the sweep's CDRs must include {needed} (its maximum-rate search and variants use it)"
                )));
            }
        }
        if !(1..=20).contains(&self.repetitions) {
            return Err(InvalidConfig::new(format!("repetitions must be 1 to 20, got {}", self.repetitions)));
        }
        if self.rate_fractions.iter().any(|f| !(f.is_finite() && *f > 0.0 && *f <= 10.0)) {
            return Err(InvalidConfig::new(
                "rate fractions must be in (0, 10] (fractions of the maximum rate)",
            ));
        }
        Ok(())
    }
}

/// The fewest trace rows a sweep's run replays.
pub const MIN_PACKETS: usize = 1_000;

impl Experiment for SweepConfig {
    const NAME: &'static str = "sweep";
    type Summary = SweepSummary;

    /// The windows around the sweep only, as for `kairos forward`
    /// ([`kairos_metrics::NoiseConfig::around_only`] says why).
    fn noise(&self) -> Option<kairos_metrics::NoiseConfig> {
        Some(kairos_metrics::NoiseConfig::around_only())
    }

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        self.check()?;
        // Measured here (2 cores): a step of the quick sweep in memory (200,000 packets, the
        // median of three runs for the one-user rows) takes about 1.4 s (169 steps in 4 min);
        // over UDP, where the kernel holds the rate near 50-90 kpps and most runs offer a
        // fraction of it, one of 40,000 packets takes about 1 s.
        let seconds_per_packet = if self.backends.iter().any(|b| *b != Backend::Memory) {
            1.0 / 40_000.0
        } else {
            1.4 / 200_000.0
        };
        Ok(Plan::new(self.runs(), seconds_per_packet * self.packets as f64))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<SweepSummary> {
        let (rows, max_rate_pps, peer, traces) = grid(self, run)?;
        let mut info = run.finish();
        let run_dir = run.dir();
        let per_user = per_user(&rows, self, &traces["0.1"]);
        let best_per_rate = best_per_rate(&rows);
        let checks = checks(&rows, self);
        info.plots = plots(&rows, &per_user, run_dir)?;
        write_csv(&rows, run_dir)?;
        run_dir.write_text(TABLE_FILE, &table(&rows))?;
        Ok(SweepSummary {
            config: self.clone(),
            max_rate_pps,
            rows,
            per_user,
            best_per_rate,
            checks,
            peer,
            run: info,
        })
    }
}

/// What the grid measured: its rows, each backend's maximum rates, whether the peer ran, and
/// the traces.
type Grid = (Vec<SweepRow>, BTreeMap<String, f64>, String, BTreeMap<String, Trace>);

/// Each config's median run and the least average age of its runs, ns, and a peer's failure.
type Medians = (Vec<(Row, f64)>, Option<String>);

fn grid(config: &SweepConfig, run: &Run<'_>) -> Result<Grid> {
    run.log(&format!("machine: {}", run.machine().one_line()));
    // Woken forwarder threads preempt the spinning source at once when they may run SCHED_FIFO.
    PRIORITY.store(if run.machine().sched_fifo { 50 } else { 0 }, std::sync::atomic::Ordering::Relaxed);
    let run_dir = run.dir();
    let traces: BTreeMap<String, Trace> = {
        let mut t = BTreeMap::new();
        t.insert("baseline".to_string(), Trace::generate(1, 0.0, config.packets, config.seed)?);
        let mut cdrs = config.cdrs.clone();
        cdrs.extend(&config.crossover_cdrs);
        for cdr in cdrs {
            t.entry(format!("{cdr}")).or_insert(Trace::generate(
                config.users,
                cdr,
                config.packets,
                config.seed,
            )?);
        }
        t
    };
    traces["0.1"].save(&run_dir.path().join("trace-cdr0.1.txt")).ok();
    let fibs = [FibKind::Rcu, FibKind::RwLock, FibKind::Seqlock, FibKind::Papaya];
    let mut rows = Vec::new();
    let mut max_rate_pps = BTreeMap::new();
    let mut peer = if config.backends.iter().all(|b| *b == Backend::Memory) {
        "not run: the dpdk-testpmd peer needs the udp or packet backend".to_string()
    } else if super::peer::find_testpmd().is_none() {
        "not run: dpdk-testpmd is not installed (Debian: apt install dpdk-dev)".to_string()
    } else {
        String::new()
    };
    for &backend in &config.backends {
        let mut medians = Vec::new();
        let mut go = |experiment: &'static str, load: f64, c: ForwardConfig, trace: &Trace| -> Result<Row> {
            let row = run_once(&c, trace)?;
            run.step(&format!("{backend} {experiment}"));
            rows.push(SweepRow { experiment, load, row: row.clone(), least_avg_age_ns: None });
            Ok(row)
        };
        // Runs every config `repetitions` times, interleaved, and keeps each one's median run
        // (by average age): one millisecond stall of this machine moves a short run's mean age a
        // lot, and interleaving spreads slow phases of the machine over all configurations. A
        // peer's failure is returned beside the rows (its config left out from then on); any
        // other run's failure ends the sweep.
        let median_of = |configs: Vec<ForwardConfig>, trace: &Trace| -> Result<Medians> {
            let mut runs: Vec<Vec<Row>> = vec![Vec::new(); configs.len()];
            let mut peer_failed = None;
            for _ in 0..config.repetitions.max(1) {
                for (c, out) in configs.iter().zip(runs.iter_mut()) {
                    if c.peer.is_some() && peer_failed.is_some() {
                        continue;
                    }
                    match run_once(c, trace) {
                        Ok(row) => out.push(row),
                        Err(e) if c.peer.is_some() => peer_failed = Some(format!("failed: {e:#}")),
                        Err(e) => return Err(e),
                    }
                    run.step(&format!("{backend} median runs"));
                }
            }
            let rows = configs
                .iter()
                .zip(runs)
                .filter(|(c, _)| !(c.peer.is_some() && peer_failed.is_some()))
                .map(|(_, mut r)| {
                    r.sort_by(|a, b| a.avg_age_ns.total_cmp(&b.avg_age_ns));
                    let least = r[0].avg_age_ns;
                    (r.swap_remove(r.len() / 2), least)
                })
                .collect();
            Ok((rows, peer_failed))
        };
        // The highest rate the sender achieves (within 5%: a full link ring pushes back on the
        // sender, as a NIC's TX ring does) with under 2% data loss: doubled from 50 kpps, then
        // bisected three times.
        let mut search = |make: &dyn Fn(f64) -> ForwardConfig, trace: &Trace| -> Result<f64> {
            let data = trace.data_rows() as f64;
            let mut probe = |rate: f64| -> Result<bool> {
                let row = go("max-rate", 0.0, make(rate), trace)?;
                Ok(sustained(&row, data))
            };
            let (mut good, mut bad) = (0.0, 50_000.0);
            while bad < 64e6 && probe(bad)? {
                good = bad;
                bad *= 2.0;
            }
            for _ in 0..3 {
                let mid = (good + bad) / 2.0;
                if probe(mid)? { good = mid } else { bad = mid }
            }
            Ok(if good > 0.0 { good } else { 25_000.0 })
        };
        let max_rate = search(
            &|rate| source_config(backend, Some(FibKind::Rcu), Some(rate), "max-rate probe"),
            &traces["0.01"],
        )?;
        let baseline_max = search(
            &|rate| baseline_config(backend, Some(rate), "max-rate probe (baseline)"),
            &traces["baseline"],
        )?;
        run.log(&format!(
            "{backend}: maximum sustained rate (under 2% data loss) {max_rate:.0} pps routing, {baseline_max:.0} pps baseline"
        ));
        max_rate_pps.insert(backend.to_string(), max_rate);
        max_rate_pps.insert(format!("{backend}-baseline"), baseline_max);
        if backend != Backend::Memory && peer.is_empty() {
            // The peer's own maximum on the same baseline, by the same search, so the two
            // forwarders' rates compare as measured and not at the fractions of Kairos's.
            let peer_config = |rate: f64| {
                let mut c = baseline_config(backend, Some(rate), "max-rate probe (peer)");
                c.peer = Some(Peer::DpdkTestpmd);
                c
            };
            match search(&peer_config, &traces["baseline"]) {
                Ok(peer_max) => {
                    run.log(&format!("{backend}: dpdk-testpmd's maximum sustained rate {peer_max:.0} pps"));
                    max_rate_pps.insert(format!("{backend}-peer"), peer_max);
                }
                Err(e) => {
                    peer = format!("failed: {e:#}");
                    run.log(&format!("the dpdk-testpmd peer {peer}; going on without it"));
                }
            }
        }
        for &f in &config.rate_fractions {
            let rate = Some(max_rate * f);
            let configs: Vec<ForwardConfig> = baseline_variants()
                .into_iter()
                .map(|(name, change)| {
                    let mut c = baseline_config(backend, Some(baseline_max * f), name);
                    change(&mut c);
                    c
                })
                .collect();
            // The peer's runs interleaved with Kairos's, so that a slow phase of the machine
            // falls on both forwarders' runs (run after Kairos's, the peer's met other phases:
            // two CI runs of the same forwarding code gave 0.86x and 1.70x near 200 kpps).
            let with_peer = backend != Backend::Memory && peer.is_empty();
            let peer_config = with_peer.then(|| {
                let mut c = baseline_config(backend, Some(baseline_max * f), PEER_LABEL);
                c.peer = Some(Peer::DpdkTestpmd);
                c
            });
            let (rows, peer_failed) =
                median_of(configs.into_iter().chain(peer_config).collect(), &traces["baseline"])?;
            if let Some(failed) = peer_failed {
                peer = failed;
                run.log(&format!("the dpdk-testpmd peer {peer}; going on without it"));
            }
            for (row, least) in rows {
                let experiment = if row.label == PEER_LABEL {
                    "peer-baseline"
                } else if row.label.starts_with("source") {
                    "baseline"
                } else {
                    "beyond-baseline"
                };
                medians.push(SweepRow { experiment, load: f, row, least_avg_age_ns: Some(least) });
            }
            for &cdr in &config.cdrs {
                for fib in fibs {
                    let label = format!("{fib} cdr {cdr}");
                    go(
                        "routing",
                        f,
                        source_config(backend, Some(fib), rate, &label),
                        &traces[&format!("{cdr}")],
                    )?;
                }
            }
            for (name, change) in variants() {
                let mut c = source_config(backend, Some(FibKind::Rcu), rate, name);
                change(&mut c);
                go("beyond", f, c, &traces["0.1"])?;
            }
        }
        // The age-controlled sender on the baseline, from a quarter of the maximum rate, with a
        // trace four times longer so that the controller has windows to climb in.
        {
            let mut c = baseline_config(backend, None, "age-controlled sender");
            c.age_control = Some(AgeControl {
                initial_pps: baseline_max * 0.25,
                min_pps: baseline_max * 0.02,
                max_pps: baseline_max * 3.0,
                window_ns: 20_000_000,
                step: 0.1,
            });
            let long = Trace::generate(1, 0.0, config.packets * 4, config.seed)?;
            let row = run_once(&c, &long)?;
            run.step(&format!("{backend} age-controlled sender"));
            let load = row.rate_pps / baseline_max;
            medians.push(SweepRow { experiment: "age-control", load, row, least_avg_age_ns: None });
        }
        for &cdr in &config.crossover_cdrs {
            for fib in [FibKind::Rcu, FibKind::RwLock, FibKind::Seqlock] {
                let rate = Some(max_rate * config.crossover_fraction);
                let label = format!("{fib} cdr {cdr}");
                go(
                    "update-rate",
                    config.crossover_fraction,
                    source_config(backend, Some(fib), rate, &label),
                    &traces[&format!("{cdr}")],
                )?;
            }
        }
        rows.append(&mut medians);
    }
    if peer.is_empty() {
        peer = "measured (experiment peer-baseline)".to_string();
    }
    Ok((rows, max_rate_pps, peer, traces))
}

/// Highest load at or under 1 (the highest sustainable rate).
fn top_sustainable(config: &SweepConfig) -> f64 {
    config.rate_fractions.iter().copied().filter(|f| *f <= 1.0).fold(0.0, f64::max)
}

fn per_user(rows: &[SweepRow], config: &SweepConfig, trace: &Trace) -> Vec<PerUser> {
    let top = top_sustainable(config);
    let Some(r) =
        rows.iter().find(|r| r.experiment == "routing" && r.load == top && r.row.label == "rwlock cdr 0.1")
    else {
        return Vec::new();
    };
    let shares = trace.data_shares();
    let data_fraction = trace.data_rows() as f64 / trace.rows.len().max(1) as f64;
    let rate = r.row.sent_pps / 1e9;
    r.row
        .per_user_age_ns
        .iter()
        .enumerate()
        .filter(|(u, _)| shares[*u] > 0.0)
        .map(|(u, &age)| PerUser {
            rank: u + 1,
            avg_age_ns: age,
            oracle_ns: zipf_user_avg(r.row.mean_latency_ns, rate, shares[u] * data_fraction),
        })
        .collect()
}

fn best_per_rate(rows: &[SweepRow]) -> Vec<Best> {
    let mut out = Vec::new();
    for (grid, members) in [("one user", &["baseline", "beyond-baseline"][..]), ("cdr 0.1", &["beyond"][..])]
    {
        let mut keys: Vec<(Backend, u64)> = rows
            .iter()
            .filter(|r| members.contains(&r.experiment))
            .map(|r| (r.row.backend, r.load.to_bits()))
            .collect();
        keys.dedup();
        for (backend, load) in keys {
            let here: Vec<&SweepRow> = rows
                .iter()
                .filter(|r| {
                    members.contains(&r.experiment) && r.row.backend == backend && r.load.to_bits() == load
                })
                .collect();
            let Some(source) = here.iter().find(|r| r.row.label.starts_with("source")) else { continue };
            let Some(best) = here.iter().min_by(|a, b| a.row.avg_age_ns.total_cmp(&b.row.avg_age_ns)) else {
                continue;
            };
            out.push(Best {
                grid,
                backend,
                load: f64::from_bits(load),
                best: best.row.label.clone(),
                best_age_ns: best.row.avg_age_ns,
                source_age_ns: source.row.avg_age_ns,
                gain: source.row.avg_age_ns / best.row.avg_age_ns.max(1.0),
            });
        }
    }
    out
}

/// The row of `experiment` on `backend` at `load` whose label starts with `label`.
fn row_at<'a>(
    rows: &'a [SweepRow],
    experiment: &str,
    backend: Backend,
    load: f64,
    label: &str,
) -> Option<&'a SweepRow> {
    rows.iter().find(|r| {
        r.experiment == experiment
            && r.load == load
            && r.row.backend == backend
            && r.row.label.starts_with(label)
    })
}

fn checks(rows: &[SweepRow], config: &SweepConfig) -> Vec<Check> {
    let mut out = Vec::new();
    // The queueing effect of the data ring shows in the one-user baseline; with 1,000 Zipf users
    // the mean age is dominated by the gaps between a rare user's updates (see the report).
    // Over UDP the kernel's path, not the forwarder's ring, is the bottleneck (the ring never
    // fills), so there the baseline's checks are observations, not claims.
    for &backend in &config.backends {
        let find = |experiment: &str, load: f64, label: &str| row_at(rows, experiment, backend, load, label);
        let claim = backend == Backend::Memory;
        for &load in &config.rate_fractions {
            let (Some(src), Some(latest)) =
                (find("baseline", load, "source"), find("beyond-baseline", load, "latest-only"))
            else {
                continue;
            };
            let ratio = src.row.avg_age_ns / latest.row.avg_age_ns.max(1.0);
            if load > 1.0 {
                out.push(Check {
                    name: format!(
                        "{backend} baseline, overload {load}x: latest-only slot at least 2x fresher than tail-drop 4096"
                    ),
                    held: ratio >= 2.0,
                    claim,
                    detail: format!(
                        "tail-drop {:.1} us, latest-only {:.1} us, ratio {ratio:.2} (mean peak age {:.1} vs {:.1} us)",
                        src.row.avg_age_ns / 1e3,
                        latest.row.avg_age_ns / 1e3,
                        src.row.peak_age_ns / 1e3,
                        latest.row.peak_age_ns / 1e3
                    ),
                });
            } else if load <= 0.8 {
                // Below the maximum both policies forward every packet at once, so what tells
                // them apart is which runs the machine stalled: one stall of a few milliseconds
                // moves a run's time-average age by tens of percent (two runs of the same
                // sweep, the median of three each, differed by +11% and +113%), and a stall
                // only adds age. So the claim is judged on each policy's least-stalled run
                // (the least age of its interleaved runs); the medians are shown beside it.
                let least = |r: &SweepRow| r.least_avg_age_ns.unwrap_or(r.row.avg_age_ns);
                let worse = least(latest) / least(src).max(1.0) - 1.0;
                out.push(Check {
                    name: format!(
                        "{backend} baseline, load {load}: latest-only slot within 5% of tail-drop 4096"
                    ),
                    held: worse <= 0.05,
                    claim,
                    detail: format!(
                        "least of the interleaved runs: tail-drop {:.1} us, latest-only {:.1} us ({:+.1}%); medians {:.1} and {:.1} us",
                        least(src) / 1e3,
                        least(latest) / 1e3,
                        worse * 100.0,
                        src.row.avg_age_ns / 1e3,
                        latest.row.avg_age_ns / 1e3
                    ),
                });
            }
        }
    }
    out.extend(peer_checks(rows, config));
    for acp in rows.iter().filter(|r| r.experiment == "age-control") {
        let best = rows
            .iter()
            .filter(|r| r.experiment == "baseline" && r.row.backend == acp.row.backend)
            .min_by(|a, b| a.row.avg_age_ns.total_cmp(&b.row.avg_age_ns));
        if let Some(best) = best {
            let ratio = acp.row.avg_age_ns / best.row.avg_age_ns.max(1.0);
            out.push(Check {
                name: format!("{}: age-controlled sender within 10% of the best fixed rate's age", acp.row.backend),
                held: ratio <= 1.10,
                // A hill-climber on two shared cores: reported, not claimed.
                claim: false,
                detail: format!(
                    "settled at {:.0} kpps ({:.2} of the maximum), age {:.1} us over the whole run; best fixed rate {:.0} kpps, {:.1} us ({:.2}x)",
                    acp.row.rate_pps / 1e3,
                    acp.load,
                    acp.row.avg_age_ns / 1e3,
                    best.row.rate_pps / 1e3,
                    best.row.avg_age_ns / 1e3,
                    ratio
                ),
            });
        }
    }
    let top = top_sustainable(config);
    for &backend in &config.backends {
        let at_top = |experiment: &str, label: &str| row_at(rows, experiment, backend, top, label);
        if let (Some(rcu), Some(rwl), Some(best)) = (
            at_top("routing", "rcu cdr 0.1"),
            at_top("routing", "rwlock cdr 0.1"),
            at_top("beyond", "kairos"),
        ) {
            // The run-to-completion forwarder (the packet backend) applies every burst's
            // control before its data, so no configuration of it misaddresses by a control
            // thread's lag: there "fewer" is "no more", and an observation.
            let rtc = backend == Backend::Packet;
            let least = rcu.row.misaddressed.min(rwl.row.misaddressed);
            out.push(Check {
                name: format!("{backend} CDR 0.1 at load {top}: best Kairos configuration misaddresses fewer than RCU and RW lock, no control drops"),
                held: (best.row.misaddressed < least || (rtc && best.row.misaddressed <= least)) && best.row.ctrl_drops == 0,
                claim: !rtc,
                detail: format!(
                    "misaddressed: kairos {}, rcu {}, rwlock {}; kairos control drops {}",
                    best.row.misaddressed, rcu.row.misaddressed, rwl.row.misaddressed, best.row.ctrl_drops
                ),
            });
        }
    }
    out
}

/// Kairos's forwarder against `dpdk-testpmd` on the same veth (the udp and packet backends):
/// its maximum sustained baseline rate (forwarding every packet) at least the peer's, and at
/// every rate testpmd sustains (under 2% of the data lost; a packet replaced by its user's newer
/// one is not lost, and a rate Kairos does not sustain counts against it) a lower average age
/// with its latest-only admission, the source's configuration reported beside it, and the median
/// latencies. Observations: the goals of the fast path,
/// reported with their ratios whether they hold or not.
fn peer_checks(rows: &[SweepRow], config: &SweepConfig) -> Vec<Check> {
    let mut out = Vec::new();
    for &backend in config.backends.iter().filter(|b| **b != Backend::Memory) {
        let probes = |label: &str| -> f64 {
            rows.iter()
                .filter(|r| r.experiment == "max-rate" && r.row.backend == backend && r.row.label == label)
                // A baseline trace is all data: what was sent is the data.
                .filter(|r| sustained(&r.row, r.row.sent as f64))
                .map(|r| r.row.rate_pps)
                .fold(0.0, f64::max)
        };
        let (kairos, peer) = (probes("max-rate probe (baseline)"), probes("max-rate probe (peer)"));
        if peer > 0.0 {
            out.push(Check {
                name: format!("{backend}: Kairos sustains at least dpdk-testpmd's rate on the same veth"),
                held: kairos >= peer,
                claim: false,
                detail: format!(
                    "Kairos {:.0} kpps, dpdk-testpmd {:.0} kpps ({:.2}x)",
                    kairos / 1e3,
                    peer / 1e3,
                    kairos / peer
                ),
            });
        }
        let at = |experiment: &str, load: f64, label: &str| row_at(rows, experiment, backend, load, label);
        // The CPU time and the median latencies, from the rows that forward every packet.
        let mut cpu = Vec::new();
        let mut floors = Vec::new();
        // Kairos's age beside testpmd's, for each of its configurations set beside it: lower at
        // [..], not lower (or not sustained) at [..].
        let mut ages: Vec<(&str, Vec<String>, Vec<String>)> =
            KAIROS_BESIDE_PEER.iter().map(|(_, _, name)| (*name, Vec::new(), Vec::new())).collect();
        let mut peer_sustained = false;
        for &load in &config.rate_fractions {
            let Some(p) = at("peer-baseline", load, PEER_LABEL) else { continue };
            if !sustained(&p.row, p.row.sent as f64) {
                continue;
            }
            peer_sustained = true;
            for ((experiment, label, _), (_, lower, higher)) in KAIROS_BESIDE_PEER.iter().zip(ages.iter_mut())
            {
                let Some(k) = at(experiment, load, label) else { continue };
                let data = k.row.sent as f64;
                if !sustained_fresh(&k.row, data) {
                    // Where testpmd keeps up and Kairos does not, Kairos is not fresher there.
                    let lost = data - (k.row.received + k.row.data_replaced) as f64;
                    higher.push(format!(
                        "{:.0} kpps not sustained ({:.1}% lost)",
                        k.row.rate_pps / 1e3,
                        100.0 * lost / data.max(1.0)
                    ));
                    continue;
                }
                let ratio = k.row.avg_age_ns / p.row.avg_age_ns.max(1.0);
                // Where Kairos's share of the age is: its run-to-completion forwarder's hold
                // (receive stamp to send call) and whether it slept between bursts (the pipeline
                // times neither); and what latest-only replaced.
                let mut entry = format!("{:.0} kpps {ratio:.2}x", k.row.rate_pps / 1e3);
                if k.row.data_replaced > 0 {
                    entry.push_str(&format!(
                        ", {:.1}% replaced",
                        100.0 * k.row.data_replaced as f64 / data.max(1.0)
                    ));
                }
                if k.row.threading == Threading::RunToCompletion {
                    entry.push_str(&format!(
                        " (Kairos held a packet {:.1} us, slept {} times)",
                        k.row.fwd_held_ns / 1e3,
                        k.row.fwd_naps
                    ));
                }
                if ratio < 1.0 { lower.push(entry) } else { higher.push(entry) }
            }
            let Some(k) = at("baseline", load, "source") else { continue };
            if !sustained(&k.row, k.row.sent as f64) {
                continue;
            }
            if p.row.cpu_ns_per_packet > 0.0 {
                cpu.push((k.row.rate_pps, k.row.cpu_ns_per_packet, p.row.cpu_ns_per_packet));
            }
            floors.push(format!(
                "{:.0} kpps {:.1} vs {:.1} us",
                k.row.rate_pps / 1e3,
                k.row.p50_latency_ns as f64 / 1e3,
                p.row.p50_latency_ns as f64 / 1e3
            ));
        }
        if !cpu.is_empty() {
            out.push(Check {
                name: format!("{backend}: Kairos's CPU time per packet is below dpdk-testpmd's at every rate both sustain"),
                held: cpu.iter().all(|(_, k, p)| k < p),
                claim: false,
                detail: format!(
                    "ns per packet, Kairos against testpmd (its polling included): {}",
                    cpu.iter()
                        .map(|(rate, k, p)| format!("{:.0} kpps {k:.0} vs {p:.0} ({:.2}x)", rate / 1e3, k / p))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        // Held by Kairos's own configuration: its admission at the port's ring, which the fast
        // path exists for; the source's, forwarding every packet as testpmd does, beside it.
        let (_, lower, higher) = &ages[0];
        if peer_sustained {
            let detail = ages
                .iter()
                .map(|(name, lower, higher)| {
                    format!("{name}: lower at [{}], not lower at [{}]", lower.join(", "), higher.join(", "))
                })
                .chain((!floors.is_empty()).then(|| {
                    format!("median latency, Kairos (every packet) against testpmd: {}", floors.join(", "))
                }))
                .collect::<Vec<_>>()
                .join("; ");
            out.push(Check {
                name: format!(
                    "{backend}: at every rate dpdk-testpmd sustains, Kairos's average age (its latest-only admission) is lower than dpdk-testpmd's"
                ),
                held: higher.is_empty() && !lower.is_empty(),
                claim: false,
                detail: format!("Kairos's age over testpmd's, {detail}"),
            });
        }
    }
    out
}

/// Kairos's baseline configurations set beside the peer's: (experiment, label prefix, name),
/// all from the runs interleaved with the peer's. The first
/// decides the age goal: Kairos's admission at the port's ring, each user's newest packet.
const KAIROS_BESIDE_PEER: [(&str, &str, &str); 2] = [
    ("beyond-baseline", "latest-only", "latest-only admission"),
    ("baseline", "source", "forwarding every packet"),
];

/// [`sustained`], counting a packet replaced by a newer one of its user as delivered: that
/// newer packet carried the user's news (keep-latest's whole point); any other drop is a loss.
/// Each entry of the age check shows how much was replaced.
fn sustained_fresh(row: &Row, data: f64) -> bool {
    kept_up(row, data, row.received + row.data_replaced)
}

/// Whether a run kept up, the maximum-rate search's rule: the sender within 5% of its rate and
/// under 2% of the trace's `data` packets lost.
fn sustained(row: &Row, data: f64) -> bool {
    kept_up(row, data, row.received)
}

/// The sender within 5% of its rate, and `delivered` of the `data` packets short by under 2%.
fn kept_up(row: &Row, data: f64, delivered: u64) -> bool {
    (data - delivered as f64) / data < 0.02 && row.sent_pps >= 0.95 * row.rate_pps
}

fn series_by(
    rows: &[SweepRow],
    experiment: &str,
    x: impl Fn(&SweepRow) -> f64,
    y: impl Fn(&SweepRow) -> f64,
    label: impl Fn(&SweepRow) -> String,
) -> Vec<XySeries> {
    let mut names: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.experiment == experiment) {
        let name = label(r);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    measured_per_key(
        names,
        rows,
        |name| name.clone(),
        |name, r| r.experiment == experiment && &label(r) == name,
        |r| (x(r), y(r)),
    )
}

fn plots(rows: &[SweepRow], per_user: &[PerUser], run: &RunDir) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let dir = run.path();
    let mpps = |r: &SweepRow| r.row.rate_pps / 1e6;
    let label = |r: &SweepRow| format!("{} {}", r.row.label, r.row.backend);
    let log_xy = Scales { log_x: true, log_y: true };
    // The baseline's rows and the peer forwarder's, numbered so that colours differ.
    let with_peer = |rows: &[SweepRow], y: fn(&SweepRow) -> f64| {
        let mut series = series_by(rows, "baseline", mpps, y, label);
        series.extend(series_by(rows, "peer-baseline", mpps, y, label));
        for (i, s) in series.iter_mut().enumerate() {
            s.color = i;
        }
        series
    };
    let mut chart =
        |name: &str, title: &str, xl: &str, yl: &str, scales: Scales, series: Vec<XySeries>| -> Result<()> {
            let series: Vec<XySeries> = series.into_iter().filter(|s| !s.points.is_empty()).collect();
            if series.is_empty() {
                return Ok(());
            }
            let path = dir.join(name);
            xy_chart(&path, title, xl, yl, scales, &series)?;
            out.push(path);
            Ok(())
        };
    chart(
        "fig3a_baseline_age.png",
        "Baseline (1 user, no FIB): average age vs offered rate",
        "offered rate R (Mpps)",
        "average age (us)",
        log_xy,
        with_peer(rows, |r| r.row.avg_age_ns / 1e3),
    )?;
    chart(
        "fig3b_baseline_batch.png",
        "Baseline: average sender batch vs offered rate",
        "offered rate R (Mpps)",
        "packets per tx_burst",
        Scales { log_x: true, log_y: false },
        with_peer(rows, |r| r.row.avg_batch),
    )?;
    chart(
        "fig4_age.png",
        "Routing (1000 users): average age vs offered rate",
        "offered rate R (Mpps)",
        "average age per user (us)",
        log_xy,
        series_by(rows, "routing", mpps, |r| r.row.avg_age_ns / 1e3, label),
    )?;
    let mut drops =
        series_by(rows, "routing", mpps, |r| r.row.data_drops as f64 + 0.5, |r| format!("data {}", label(r)));
    drops.extend(series_by(
        rows,
        "routing",
        mpps,
        |r| r.row.ctrl_drops as f64 + 0.5,
        |r| format!("control {}", label(r)),
    ));
    for (i, s) in drops.iter_mut().enumerate() {
        s.color = i;
    }
    chart(
        "fig4_drops.png",
        "Routing: packets dropped at the data and control rings (+0.5 for the log axis)",
        "offered rate R (Mpps)",
        "packets dropped",
        log_xy,
        drops,
    )?;
    // The source's FIBs beside Kairos's configuration at the same CDR 0.1: its 0 (drawn at 0.5)
    // is the point of the figure.
    let mut misaddressed = series_by(rows, "routing", mpps, |r| r.row.misaddressed as f64 + 0.5, label);
    misaddressed.extend(
        series_by(rows, "beyond", mpps, |r| r.row.misaddressed as f64 + 0.5, label)
            .into_iter()
            .filter(|s| s.name.starts_with("kairos")),
    );
    for (i, s) in misaddressed.iter_mut().enumerate() {
        s.color = i;
    }
    chart(
        "fig4_misaddressed.png",
        "Routing: misaddressed data packets, the source's FIBs and Kairos (+0.5 for the log axis)",
        "offered rate R (Mpps)",
        "misaddressed packets",
        log_xy,
        misaddressed,
    )?;
    chart(
        "fig4_fib_age.png",
        "Routing: location-update age at the FIB",
        "offered rate R (Mpps)",
        "average location age (us)",
        log_xy,
        series_by(rows, "routing", mpps, |r| r.row.fib_age_ns / 1e3, label),
    )?;
    if !per_user.is_empty() {
        chart(
            "fig4c_per_user_age.png",
            "Per-user average age at the highest sustainable rate (RW lock, CDR 0.1)",
            "user rank (Zipf)",
            "average age (us)",
            log_xy,
            vec![
                XySeries {
                    name: "measured".into(),
                    points: per_user.iter().map(|p| (p.rank as f64, p.avg_age_ns / 1e3)).collect(),
                    model: false,
                    color: 0,
                },
                XySeries {
                    name: "Zipf oracle S + (1/R)(1/p - 1/2)".into(),
                    points: per_user.iter().map(|p| (p.rank as f64, p.oracle_ns / 1e3)).collect(),
                    model: true,
                    color: 1,
                },
            ],
        )?;
    }
    chart(
        "update_rate_crossover.png",
        "Average age vs control/data ratio at a fixed rate",
        "control/data ratio (CDR)",
        "average age per user (us)",
        log_xy,
        series_by(
            rows,
            "update-rate",
            |r| r.row.cdr,
            |r| r.row.avg_age_ns / 1e3,
            |r| format!("{} {}", r.row.fib, r.row.backend),
        ),
    )?;
    let mut baseline_variants = series_by(rows, "baseline", mpps, |r| r.row.avg_age_ns / 1e3, label);
    baseline_variants.extend(series_by(rows, "beyond-baseline", mpps, |r| r.row.avg_age_ns / 1e3, label));
    for (i, s) in baseline_variants.iter_mut().enumerate() {
        s.color = i;
    }
    chart(
        "beyond_baseline_age.png",
        "One user, no FIB: average age vs offered rate, tail drop against freshness-aware rings",
        "offered rate R (Mpps)",
        "average age (us)",
        log_xy,
        baseline_variants,
    )?;
    // The age-controlled sender's rate and the age it measured, per 20 ms window: two charts,
    // as kpps and microseconds share no axis.
    let control = |y: fn(&kairos_forward::source::RateStep) -> f64, what: &str| -> Vec<XySeries> {
        rows.iter()
            .filter(|r| r.experiment == "age-control")
            .enumerate()
            .map(|(i, r)| XySeries {
                name: format!("{what} {}", r.row.backend),
                points: r.row.rate_steps.iter().map(|s| (s.t_ns as f64 / 1e6, y(s))).collect(),
                model: false,
                color: i,
            })
            .collect()
    };
    chart(
        "age_control.png",
        "Age-controlled sender (one user, no FIB): measured age per 20 ms window",
        "time (ms)",
        "window average age (us)",
        Scales { log_x: false, log_y: true },
        control(|s| s.window_age_ns / 1e3, "age"),
    )?;
    chart(
        "age_control_rate.png",
        "Age-controlled sender (one user, no FIB): the rate it chose per 20 ms window",
        "time (ms)",
        "offered rate (kpps)",
        Scales { log_x: false, log_y: false },
        control(|s| s.rate_pps / 1e3, "rate"),
    )?;
    chart(
        "beyond_age.png",
        "CDR 0.1: average age vs offered rate, source configuration and Kairos variants",
        "offered rate R (Mpps)",
        "average age per user (us)",
        log_xy,
        series_by(rows, "beyond", mpps, |r| r.row.avg_age_ns / 1e3, label),
    )?;
    Ok(out)
}

fn write_csv(rows: &[SweepRow], run: &RunDir) -> Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "experiment",
        "load",
        "label",
        "backend",
        "fib",
        "ring_policy",
        "ring_size",
        "control",
        "flush",
        "cdr",
        "users",
        "rate_pps",
        "sent_pps",
        "avg_age_ns",
        "peak_age_ns",
        "data_drops",
        "data_replaced",
        "ctrl_drops",
        "misaddressed",
        "received",
        "sent",
        "avg_batch",
        "fwd_avg_batch",
        "fib_age_ns",
        "tx_drops",
        "pool_drops",
        "mean_latency_ns",
        "p50_latency_ns",
        "p99_latency_ns",
        "cpu_ns_per_packet",
        "fwd_naps",
        "fwd_held_ns",
    ])?;
    for s in rows {
        let r = &s.row;
        w.write_record([
            s.experiment.to_string(),
            s.load.to_string(),
            r.label.clone(),
            r.backend.to_string(),
            r.fib.to_string(),
            r.ring_policy.to_string(),
            r.ring_size.to_string(),
            format!("{:?}", r.control).to_lowercase(),
            r.flush.to_string(),
            r.cdr.to_string(),
            r.users.to_string(),
            format!("{:.0}", r.rate_pps),
            format!("{:.0}", r.sent_pps),
            format!("{:.0}", r.avg_age_ns),
            format!("{:.0}", r.peak_age_ns),
            r.data_drops.to_string(),
            r.data_replaced.to_string(),
            r.ctrl_drops.to_string(),
            r.misaddressed.to_string(),
            r.received.to_string(),
            r.sent.to_string(),
            format!("{:.3}", r.avg_batch),
            format!("{:.3}", r.fwd_avg_batch),
            format!("{:.0}", r.fib_age_ns),
            r.tx_drops.to_string(),
            r.pool_drops.to_string(),
            format!("{:.0}", r.mean_latency_ns),
            r.p50_latency_ns.to_string(),
            r.p99_latency_ns.to_string(),
            format!("{:.0}", r.cpu_ns_per_packet),
            r.fwd_naps.to_string(),
            format!("{:.0}", r.fwd_held_ns),
        ])?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?;
    run.write_text("rows.csv", &String::from_utf8_lossy(&bytes))?;
    Ok(())
}

/// The text report.
/// The file in a run's directory that holds [`table`]'s text.
pub const TABLE_FILE: &str = "table.txt";

/// Every run of the grid, one line each (written to [`TABLE_FILE`]; `rows.csv` has the same
/// rows for a spreadsheet).
pub fn table(rows: &[SweepRow]) -> String {
    let mut out = format!("{:<12} {:>5} {}\n", "experiment", "load", super::row_header());
    for r in rows {
        out.push_str(&format!("{:<12} {:>5.2} {}\n", r.experiment, r.load, super::row_line(&r.row)));
    }
    out
}

/// What each plot shows, in the order a reader should look at them.
const PLOT_CAPTIONS: &[(&str, &str)] = &[
    ("fig3a_baseline_age.png", "one user, no FIB: age against offered rate, the knee where the ring fills"),
    ("fig3b_baseline_batch.png", "one user: the sender's batch grows with the rate"),
    ("fig4_age.png", "1,000 users: age against rate for each FIB"),
    ("fig4_drops.png", "1,000 users: data and control packets dropped at the rings"),
    (
        "fig4_misaddressed.png",
        "1,000 users: packets sent to a stale next hop, the source's FIBs against Kairos",
    ),
    ("fig4_fib_age.png", "1,000 users: how old the location the FIB forwards by is"),
    ("fig4c_per_user_age.png", "age per user (Zipf rank) beside the queueing model's prediction"),
    ("update_rate_crossover.png", "age against the control/data ratio: where the RW lock overtakes RCU"),
    ("beyond_baseline_age.png", "one user: tail drop against Kairos's freshness-aware rings"),
    ("beyond_age.png", "1,000 users: the source's configuration against each Kairos change and all of them"),
    ("age_control.png", "the age-controlled sender: the age it measured per window"),
    ("age_control_rate.png", "the age-controlled sender: the rate it settled at"),
];

/// The run's conclusions: the machine, the maximum rates, the checks, the freshest
/// configuration per rate and the verdict last, then where the table and figures are.
pub fn report(s: &SweepSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    for (backend, rate) in &s.max_rate_pps {
        out.push_str(&format!("maximum sustained rate ({backend}): {rate:.0} pps\n"));
    }
    out.push_str("\nfreshest configuration per rate:\n");
    for b in &s.best_per_rate {
        out.push_str(&format!(
            "  {:<8} {} load {:>4.2}: {} at {:.1} us vs the source's {:.1} us ({:.2}x)\n",
            b.grid,
            b.backend,
            b.load,
            b.best,
            b.best_age_ns / 1e3,
            b.source_age_ns / 1e3,
            b.gain
        ));
    }
    out.push_str(&format!("\npeer forwarder: {}\n", s.peer));
    for p in s.rows.iter().filter(|r| r.experiment == "peer-baseline") {
        let mut line = format!(
            "  {} load {:>4.2}: dpdk-testpmd {:.1} us, received {}",
            p.row.backend,
            p.load,
            p.row.avg_age_ns / 1e3,
            p.row.received
        );
        for (experiment, label, name) in KAIROS_BESIDE_PEER {
            if let Some(k) = row_at(&s.rows, experiment, p.row.backend, p.load, label) {
                line.push_str(&format!(
                    "; Kairos ({name}) {:.1} us, received {}",
                    k.row.avg_age_ns / 1e3,
                    k.row.received
                ));
                if k.row.data_replaced > 0 {
                    line.push_str(&format!(", replaced {}", k.row.data_replaced));
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\nchecks:\n");
    for c in &s.checks {
        let verdict = match (c.held, c.claim) {
            (true, _) => "held",
            (false, true) => "NOT held",
            (false, false) => "not held (observation)",
        };
        out.push_str(&format!("  [{verdict}] {}: {}\n", c.name, c.detail));
    }
    out.push_str(&format!("\n{}\n", verdict(s)));
    let dir = &s.run.results_dir;
    out.push_str(&format!(
        "\nevery run ({} rows): {} (rows.csv for a spreadsheet)\n",
        s.rows.len(),
        dir.join(TABLE_FILE).display()
    ));
    out.push_str(&format!("figures, in {} (docs/forwarding.md explains each):\n", dir.display()));
    for plot in &s.run.plots {
        let name = plot.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let caption = PLOT_CAPTIONS.iter().find(|(file, _)| *file == name).map_or("", |(_, c)| c);
        out.push_str(&format!("  {name:<28} {caption}\n"));
    }
    out
}

/// The short verdict: how many of the claims held, and how much fresher the best configuration
/// is than the source's where it gains most.
fn verdict(s: &SweepSummary) -> String {
    let claims = s.checks.iter().filter(|c| c.claim).count();
    let held = s.checks.iter().filter(|c| c.claim && c.held).count();
    let mut line = format!("verdict: {held} of {claims} claims held");
    if let Some(b) = s.best_per_rate.iter().max_by(|a, b| a.gain.total_cmp(&b.gain)) {
        line.push_str(&format!(
            "; at its best ({}, {} load {:.2}) {} ages {:.1}x less than the source's configuration",
            b.grid, b.backend, b.load, b.best, b.gain
        ));
    }
    if held < claims {
        line.push_str(" (a claim that did not hold is marked NOT held above)");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet-backend baseline row: `label`, offered and achieved `kpps`, average age `age_us`,
    /// and what of its 1,000 data packets arrived or were replaced.
    fn row(
        experiment: &'static str,
        label: &str,
        kpps: f64,
        age_us: f64,
        received: u64,
        replaced: u64,
    ) -> SweepRow {
        let row = Row {
            label: label.into(),
            backend: Backend::Packet,
            fib: "none",
            ring_policy: if replaced > 0 { "keep-latest" } else { "drop-newest" },
            ring_size: 4096,
            control: ControlMode::Thread,
            threading: Threading::RunToCompletion,
            flush: "count",
            cdr: 0.0,
            users: 1,
            rate_pps: kpps * 1e3,
            sent_pps: kpps * 1e3,
            avg_age_ns: age_us * 1e3,
            peak_age_ns: age_us * 1e3,
            data_drops: replaced,
            data_replaced: replaced,
            ctrl_drops: 0,
            misaddressed: 0,
            received,
            sent: 1_000,
            avg_batch: 1.0,
            fwd_avg_batch: 1.0,
            fib_age_ns: 0.0,
            tx_drops: 0,
            pool_drops: 0,
            mean_latency_ns: 5_000.0,
            p50_latency_ns: 4_500,
            p99_latency_ns: 9_000,
            idle_cores_polled: true,
            fifo_refused: 0,
            fifo_priority: 0,
            idle_spin_us: 200,
            cpu_ns_per_packet: 1_000.0,
            fwd_naps: 0,
            fwd_held_ns: 1_500.0,
            per_user_age_ns: Vec::new(),
            rate_steps: Vec::new(),
        };
        SweepRow { experiment, load: kpps / 200.0, row, least_avg_age_ns: None }
    }

    fn age_check(rows: &[SweepRow]) -> Check {
        let config = SweepConfig {
            backends: vec![Backend::Packet],
            rate_fractions: vec![0.25, 0.5],
            ..SweepConfig::quick()
        };
        peer_checks(rows, &config).into_iter().find(|c| c.name.contains("average age")).expect("an age check")
    }

    #[test]
    fn the_age_goal_is_kairos_latest_only_admission_with_replaced_packets_not_lost() {
        let peer = |kpps, age| {
            let mut p = row("peer-baseline", PEER_LABEL, kpps, age, 1_000, 0);
            p.row.p50_latency_ns = 5_200;
            p
        };
        let mut rows = vec![
            peer(50.0, 20.0),
            peer(100.0, 30.0),
            row("baseline", "source: tail-drop 4096", 50.0, 25.0, 1_000, 0),
            row("baseline", "source: tail-drop 4096", 100.0, 29.0, 1_000, 0),
            // Other variants at the same rates, which the check must not take for latest-only.
            row("beyond-baseline", "drop-oldest 8", 50.0, 99.0, 1_000, 0),
            row("beyond-baseline", "drop-oldest 8", 100.0, 99.0, 1_000, 0),
            // 5% replaced, none lost: sustained, and fresher than testpmd at both rates.
            row("beyond-baseline", "latest-only slot per user", 50.0, 19.0, 950, 50),
            row("beyond-baseline", "latest-only slot per user", 100.0, 28.0, 950, 50),
        ];
        let check = age_check(&rows);
        assert!(check.held, "{check:?}");
        let detail = &check.detail;
        assert!(detail.contains("latest-only admission: lower at [50 kpps 0.95x, 5.0% replaced"), "{detail}");
        assert!(detail.contains("forwarding every packet: lower at [100 kpps 0.97x"), "{detail}");
        assert!(detail.contains("not lower at [50 kpps 1.25x"), "{detail}");
        assert!(
            detail.contains("against testpmd: 50 kpps 4.5 vs 5.2 us, 100 kpps 4.5 vs 5.2 us"),
            "{detail}"
        );
        assert!(!detail.contains("99"), "another variant's row was taken: {detail}");

        // Older at one rate: not held.
        rows[7].row.avg_age_ns = 31_000.0;
        let check = age_check(&rows);
        assert!(!check.held && check.detail.contains("not lower at [100 kpps 1.03x"), "{}", check.detail);

        // 5% lost outright (not replaced) where testpmd lost nothing: not sustained, not held.
        rows[7].row.data_replaced = 0;
        let check = age_check(&rows);
        assert!(!check.held, "{check:?}");
        assert!(
            check.detail.contains("not lower at [100 kpps not sustained (5.0% lost)]"),
            "{}",
            check.detail
        );

        // No latest-only rows: the check is still there, not held, with what there is.
        rows.truncate(6);
        let check = age_check(&rows);
        assert!(
            !check.held && check.detail.contains("forwarding every packet: lower at [100 kpps"),
            "{check:?}"
        );

        // A rate testpmd does not sustain is nobody's goal.
        let mut rows =
            vec![peer(50.0, 20.0), row("beyond-baseline", "latest-only slot per user", 50.0, 30.0, 1_000, 0)];
        rows[0].row.received = 900;
        let config = SweepConfig {
            backends: vec![Backend::Packet],
            rate_fractions: vec![0.25],
            ..SweepConfig::quick()
        };
        assert!(peer_checks(&rows, &config).iter().all(|c| !c.name.contains("average age")));
    }

    #[test]
    fn below_the_maximum_latest_only_is_judged_on_each_policy_s_least_stalled_run() {
        // Load 0.25 (50 of 200 kpps): medians 40 and 60 us (a stall in the median run), least
        // runs 40 and 41 us.
        let mut rows = vec![
            row("baseline", "source: tail-drop 4096", 50.0, 40.0, 1_000, 0),
            row("beyond-baseline", "latest-only slot per user", 50.0, 60.0, 1_000, 0),
        ];
        rows[0].least_avg_age_ns = Some(40_000.0);
        rows[1].least_avg_age_ns = Some(41_000.0);
        let config = SweepConfig {
            backends: vec![Backend::Packet],
            rate_fractions: vec![0.25],
            ..SweepConfig::quick()
        };
        let judged = |rows: &[SweepRow]| {
            checks(rows, &config).into_iter().find(|c| c.name.contains("latest-only slot within 5%")).unwrap()
        };
        let check = judged(&rows);
        assert!(
            check.held && check.detail.contains("+2.5%") && check.detail.contains("medians 40.0 and 60.0"),
            "{check:?}"
        );
        // Slower in its least-stalled run too: not held.
        rows[1].least_avg_age_ns = Some(43_000.0);
        assert!(!judged(&rows).held);
    }
}
