//! `kairos lane latency`: the express lane's one-way latency on the testbed beside what a user
//! would otherwise run (the source's Table 2 and Figs. 4-6), idle and under a flood.
//!
//! One sender host and one receiver host of a two-host [`LaneTestbed`] (network namespaces on a
//! bridge, HTB at every egress with the lane's strict-priority class), 64-byte messages every
//! 100 us, the same count per row. The rows:
//! - `kairos lane`, `kairos lane, shared receive path` and `kairos lane, no host tuning`: the
//!   whole lane ([`lane_row`]), the first and last on the testbed's lane path (devices of the
//!   lane's own, received by kernel threads on the lane core), the second on the devices the
//!   bulk traffic takes;
//! - `udp blocking`, `udp busy-poll`, `priority only` and `sockperf` ([`crate::peers::udp`]).
//!
//! Each runs idle and under the flood ([`load`]: an iperf3 TCP stream across the same bridge
//! from the sender to the receiver, and stress-ng on the core the lane does not use). Stall
//! watches ([`kairos_metrics::stall`]) run on every core during every row, so each bound
//! violation of a lane row is set against what the machine itself took ([`stats`]).
//!
//! What each row's latency is differs by what the row is, and the report says so: the lane's
//! from the sending node's release stamp to the receiving node's kernel receive stamp (it
//! spins, so it holds the packet about a microsecond later); the UDP rows' from the sender's
//! clock read before `sendto` to the receiving program's clock read after its receive call
//! returned (a blocking receiver pays its wake-up: that is the row's point), with the kernel
//! stamp's figure beside it; sockperf's is half its round trip.
//!
//! Outputs: `summary.json` (the rows in the names other tools read), one CSV of every message
//! per row under `rows/`, and the plots: latency of every message over time (Fig. 4), the
//! jitter distribution (Fig. 5) and the tail by number of nines (Fig. 6), one of each per load.

mod kinds;
pub mod lane_row;
pub mod load;
pub mod stats;

pub use kinds::{LoadKind, RowKind, Transport, UnknownName};

/// What a peer measured, message by message, and sockperf's log read into it: in
/// `kairos-peers`, the crate of the peers' formats.
pub use kairos_peers::{samples, sockperf};

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use kairos_io::lane_testbed::{CalibrationPath, LaneTestbed, LaneTestbedConfig};
use kairos_metrics::latency::LatencyRecorder;
use kairos_metrics::stall::{StallReport, StallWatch, StallWatchConfig};
use kairos_sys::clock::{monotonic_ns, realtime_ns};
use serde::Serialize;

use self::lane_row::LaneRowSettings;
use self::stats::{BoundCheck, Percentiles, Spread};
use crate::harness::plot::{Scales, Series, XySeries, tail_chart, xy_chart};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};
use crate::peers::process::on_path;
use crate::peers::udp::{self, Peer, PeerSettings, Sample};

/// The sending host and the receiving host.
const FROM: usize = 0;
const TO: usize = 1;
/// Datagrams of the testbed's calibration, whose figures become the controller's topology.
const CALIBRATION_SAMPLES: u64 = 5_000;
/// Stall watches note wake-ups later than this: the watches' default, 50 us. At 20 us a
/// quarter of a SCHED_FIFO 99 timer's wake-ups on this virtual machine counted as stalls, idle,
/// and would have explained away what the lane itself did.
const STALL_THRESHOLD_NS: u64 = 50_000;
/// Points per series on the latency-over-time plot (each the largest of its stretch).
const TIME_PLOT_POINTS: usize = 2_000;

/// What a run of `kairos lane latency` does.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyConfig {
    /// Messages per row (100 to 10,000,000).
    pub packets: u64,
    /// The period of the messages, us (10 to 1,000,000).
    pub period_us: u64,
    /// Each message's bytes (16 to 1,000).
    pub message_bytes: usize,
    /// The rows, in order.
    #[serde(serialize_with = "slugs")]
    pub rows: Vec<RowKind>,
    /// The loads, in order.
    pub loads: Vec<LoadKind>,
    /// What the lane rows' nodes send and receive on.
    pub transport: Transport,
}

fn slugs<S: serde::Serializer>(rows: &[RowKind], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(rows.iter().map(|r| r.slug()))
}

impl LatencyConfig {
    /// The full run (100,000 messages a row, 10 s each) or the quick one (3,000).
    pub fn preset(quick: bool) -> Self {
        Self {
            packets: if quick { 3_000 } else { 100_000 },
            period_us: 100,
            message_bytes: 64,
            rows: RowKind::ALL.to_vec(),
            loads: LoadKind::ALL.to_vec(),
            transport: Transport::Udp,
        }
    }

    fn cores(&self) -> Result<(usize, usize), InvalidConfig> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores < 2 {
            return Err(InvalidConfig::new(format!(
                "kairos lane latency needs 2 cores (the lane's and the load's), this machine has {cores}"
            )));
        }
        Ok((cores - 1, 0))
    }
}

/// A program the run needs, and for which rows.
fn missing_programs(config: &LatencyConfig) -> Vec<&'static str> {
    let mut need = Vec::new();
    if config.loads.contains(&LoadKind::Flood) {
        need.extend(["iperf3", "stress-ng"]);
    }
    if config.rows.contains(&RowKind::Peer(Peer::Sockperf)) {
        need.push("sockperf");
    }
    need.into_iter().filter(|p| !on_path(p)).collect()
}

/// One row of the table: the names other tools read, then what a reader needs to trust them.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The row's name (`kairos lane`, `udp blocking`, ...).
    pub name: String,
    /// `idle` or `flood`.
    pub load: String,
    /// Messages sent.
    pub packets: u64,
    /// Messages that did not arrive.
    pub lost: u64,
    /// One-way latency, ns.
    pub latency_ns: Percentiles,
    /// max - min, ns.
    pub max_jitter_ns: u64,
    /// (max - min) / mean.
    pub relative_jitter: f64,
    /// The probability that one of the next 100,000 messages exceeds 10 x p99.
    pub p_violation_100k: f64,
    /// Lane rows: messages outside the tunnel's admitted bound.
    pub bound_violations: Option<u64>,
    /// Lane rows: of those, the ones in flight while a stall watch saw a stall.
    pub violations_with_stall: Option<u64>,
    /// Stalls the watches saw during the row (every core).
    pub stalls: u64,
    /// The mean latency, ns.
    pub mean_ns: f64,
    /// What the latency runs from and to.
    pub stamps: String,
    /// UDP rows: the same messages from the sender's stamp to the kernel's receive stamp.
    pub kernel_latency_ns: Option<Percentiles>,
    /// Lane rows: the admitted bound `[min, max]`, ns.
    pub bound_ns: Option<(u64, u64)>,
    /// Lane rows: violations that arrived before the bound's minimum.
    pub early_violations: Option<u64>,
    /// The longest stall the watches saw, ns.
    pub worst_stall_ns: u64,
    /// What the row could not have as asked.
    pub notes: Vec<String>,
}

/// The goals, read off the table (the flood rows).
#[derive(Debug, Clone, Serialize)]
pub struct Goals {
    /// The lane's p50 under the flood, ns (goal: at most 5 us).
    pub lane_p50_ns: Option<u64>,
    /// The lane's p99.9 under the flood, ns (goal: at most 20 us).
    pub lane_p999_ns: Option<u64>,
    /// `udp blocking`'s p99.9 over the lane's, under the flood (goal: at least 10).
    pub udp_blocking_over_lane_p999: Option<f64>,
    /// `priority only`'s p99.9 over the lane's, under the flood (goal: at least 10).
    pub priority_only_over_lane_p999: Option<f64>,
    /// Bound violations of the host-tuned lane rows (on its own path and on the shared one) no
    /// stall explains (goal: none).
    pub unexplained_violations: u64,
    /// The same of the rows without host tuning: what a node promises on a host the doctor has
    /// not tuned (no real-time priority), reported beside the goal, not part of it.
    pub untuned_unexplained_violations: u64,
}

/// What `kairos lane latency` found.
#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: LatencyConfig,
    /// The testbed's calibration (idle, kernel stamps) the controller's topology came from.
    pub calibration: String,
    /// The rows, load by load.
    pub rows: Vec<Row>,
    /// The goals.
    pub goals: Goals,
}

impl Experiment for LatencyConfig {
    const NAME: &'static str = "lane-latency";
    type Summary = LatencySummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if !(100..=10_000_000).contains(&self.packets) {
            return Err(InvalidConfig::new(format!(
                "--packets must be from 100 to 10000000, got {}",
                self.packets
            )));
        }
        if !(10..=1_000_000).contains(&self.period_us) {
            return Err(InvalidConfig::new(format!(
                "--period-us must be from 10 to 1000000, got {}",
                self.period_us
            )));
        }
        if !(16..=1_000).contains(&self.message_bytes) {
            return Err(InvalidConfig::new(format!(
                "--message-bytes must be from 16 to 1000, got {}",
                self.message_bytes
            )));
        }
        if self.rows.is_empty() || self.loads.is_empty() {
            return Err(InvalidConfig::new("at least one row and one load are needed"));
        }
        self.cores()?;
        if !kairos_sys::user::is_root() {
            return Err(InvalidConfig::new(
                "kairos lane latency makes network namespaces and real-time threads: run it as root",
            ));
        }
        let missing = missing_programs(self);
        if !missing.is_empty() {
            return Err(InvalidConfig::new(format!(
                "{} not installed: install it (Debian: apt-get install {}) or leave out the rows or load that use it (--rows, --loads)",
                missing.join(", "),
                missing.join(" ")
            )));
        }
        let row_s = self.packets as f64 * self.period_us as f64 / 1e6 + 1.5;
        Ok(Plan::new(self.rows.len() * self.loads.len(), row_s))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<LatencySummary> {
        latency(self, run)
    }
}

/// Stall watches on every core for one row.
struct Watches(Vec<StallWatch>);

impl Watches {
    fn start(cores: usize) -> Result<Self> {
        (0..cores)
            .map(|core| {
                let config =
                    StallWatchConfig { threshold_ns: STALL_THRESHOLD_NS, ..StallWatchConfig::on_core(core) };
                StallWatch::start(config).with_context(|| format!("the stall watch of core {core}"))
            })
            .collect::<Result<Vec<_>>>()
            .map(Self)
    }

    fn finish(self) -> Result<Vec<StallReport>> {
        self.0.into_iter().map(|w| w.finish().map_err(|e| anyhow!("a stall watch died: {e}"))).collect()
    }
}

/// What a row measured, before the figures.
struct Measured {
    samples: Vec<Sample>,
    sent: u64,
    bound_ns: Option<(u64, u64)>,
    notes: Vec<String>,
}

fn measure(
    config: &LatencyConfig,
    kind: RowKind,
    testbed: &LaneTestbed,
    topology: &kairos_te::Topology,
    dir: &Path,
    lane_core: usize,
    servers: &mut udp::Servers,
) -> Result<Measured> {
    let period = Duration::from_micros(config.period_us);
    match kind {
        RowKind::Lane | RowKind::LaneShared | RowKind::LaneUntuned => {
            let settings = LaneRowSettings {
                tuned: kind != RowKind::LaneUntuned,
                own_path: kind != RowKind::LaneShared,
                lane_core,
                from: FROM,
                to: TO,
                period,
                packets: config.packets,
                message_bytes: config.message_bytes,
                transport: config.transport,
            };
            let r = lane_row::run(testbed, topology, dir, &settings)?;
            Ok(Measured { samples: r.samples, sent: r.sent, bound_ns: Some(r.bound_ns), notes: r.notes })
        }
        RowKind::Peer(peer) => {
            let settings = PeerSettings {
                from: FROM,
                to: TO,
                period,
                packets: config.packets,
                message_bytes: config.message_bytes,
            };
            let r = udp::run(testbed, peer, &settings, servers)?;
            Ok(Measured { samples: r.samples, sent: r.sent, bound_ns: None, notes: Vec::new() })
        }
    }
}

/// The row's figures from what it measured and what the watches saw.
fn figures(kind: RowKind, load: LoadKind, m: &Measured, stalls: &[StallReport], offset: i64) -> Row {
    let mut seen = HashSet::new();
    let unique: Vec<&Sample> = m.samples.iter().filter(|s| seen.insert(s.seq)).collect();
    let mut latencies: Vec<u64> = unique.iter().map(|s| s.received_ns.saturating_sub(s.sent_ns)).collect();
    let mut notes = m.notes.clone();
    let spread = stats::spread(&mut latencies).unwrap_or_else(|| {
        notes.push("no message arrived".into());
        Spread::default()
    });
    let kernel_latency_ns = (!kind.is_lane() && unique.iter().all(|s| s.kernel_ns.is_some()))
        .then(|| {
            let mut k: Vec<u64> =
                unique.iter().filter_map(|s| Some(s.kernel_ns?.saturating_sub(s.sent_ns))).collect();
            stats::spread(&mut k).map(|s| s.latency_ns)
        })
        .flatten();
    let check: Option<BoundCheck> = m.bound_ns.map(|(lo, hi)| {
        let flights: Vec<(u64, u64)> = unique.iter().map(|s| (s.sent_ns, s.received_ns)).collect();
        stats::check_bound(&flights, lo, hi, stalls, offset)
    });
    let (first, last) = (
        unique.iter().map(|s| s.sent_ns).min().unwrap_or(0),
        unique.iter().map(|s| s.received_ns).max().unwrap_or(0),
    );
    let during: Vec<_> = stalls
        .iter()
        .flat_map(|r| {
            let mono = |t: u64| (t as i64 - offset).max(0) as u64;
            r.during(mono(first), mono(last))
        })
        .collect();
    Row {
        name: kind.name().into(),
        load: load.name().into(),
        packets: m.sent,
        lost: m.sent.saturating_sub(unique.len() as u64),
        latency_ns: spread.latency_ns,
        max_jitter_ns: spread.max_jitter_ns,
        relative_jitter: spread.relative_jitter,
        p_violation_100k: spread.p_violation_100k,
        bound_violations: check.map(|c| c.violations),
        violations_with_stall: check.map(|c| c.with_stall),
        stalls: during.len() as u64,
        mean_ns: spread.mean_ns,
        stamps: kind.stamps().into(),
        kernel_latency_ns,
        bound_ns: m.bound_ns,
        early_violations: check.map(|c| c.early),
        worst_stall_ns: during.iter().map(|s| s.length_ns()).max().unwrap_or(0),
        notes,
    }
}

/// One message of a row, as the CSV keeps it.
#[derive(Serialize)]
struct MessageRecord {
    seq: u64,
    sent_ns: u64,
    received_ns: u64,
    kernel_ns: Option<u64>,
}

/// A row's messages for the plots: `(seconds since the row's first send, latency us)`.
struct Trace {
    name: String,
    load: LoadKind,
    points: Vec<(f64, f64)>,
}

fn trace(kind: RowKind, load: LoadKind, samples: &[Sample]) -> Trace {
    let start = samples.iter().map(|s| s.sent_ns).min().unwrap_or(0);
    let mut points: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| ((s.sent_ns - start) as f64 / 1e9, s.received_ns.saturating_sub(s.sent_ns) as f64 / 1e3))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    Trace { name: kind.name().into(), load, points }
}

fn latency(config: &LatencyConfig, run: &mut Run<'_>) -> Result<LatencySummary> {
    let (lane_core, stress_core) = config.cores()?;
    let cores = lane_core + 1;
    run.doing("making the testbed");
    let testbed =
        LaneTestbed::create(LaneTestbedConfig { hosts: 2, lane_path: true, ..LaneTestbedConfig::default() })
            .context("the testbed")?;
    run.doing("calibrating the testbed");
    // On the transport the lane's nodes use: the controller's minimum latency is the path's.
    let path = match config.transport {
        Transport::Udp => CalibrationPath::Udp,
        Transport::Packet => CalibrationPath::PacketRing,
    };
    let calibration =
        testbed.calibrate_on(FROM, TO, CALIBRATION_SAMPLES, path).context("the testbed's calibration")?;
    let topology =
        kairos_lane::testbed::topology(&testbed.topology(&calibration)).map_err(anyhow::Error::msg)?;
    let calibration_text = format!(
        "h{FROM} -> h{TO}, {} datagrams on {}: min {} ns, p50 {} ns, p99.9 {} ns, max {} ns",
        calibration.samples,
        match path {
            CalibrationPath::Udp => "UDP sockets",
            CalibrationPath::PacketRing => "packet rings",
        },
        calibration.min_ns,
        calibration.p50_ns,
        calibration.p999_ns,
        calibration.max_ns
    );
    run.log(&format!("calibration {calibration_text}"));
    let rows_dir = run.dir().path().join("rows");
    std::fs::create_dir_all(&rows_dir).with_context(|| format!("cannot create {}", rows_dir.display()))?;

    // Stamping stays on from here to the last row (see `RxTimestampsHeld`): otherwise each row's
    // sockets turn it on again, late under the flood.
    let _stamping = kairos_sys::net::options::RxTimestampsHeld::new().context("asking for receive stamps")?;
    // The peers' servers start before the first load and serve every load's rows.
    let peers: Vec<Peer> = config
        .rows
        .iter()
        .filter_map(|kind| match kind {
            RowKind::Peer(peer) => Some(*peer),
            _ => None,
        })
        .collect();
    run.doing("starting the peers' servers");
    let mut servers = udp::Servers::start(&testbed, &peers, TO).context("the peers' servers")?;
    let mut rows = Vec::new();
    let mut traces = Vec::new();
    for &load_kind in &config.loads {
        // The load ends with this iteration (its owner's drop), before the next load's rows.
        let mut load = match load_kind {
            LoadKind::Idle => None,
            LoadKind::Flood => {
                run.doing("starting the flood");
                Some(load::start(&testbed, FROM, TO, stress_core)?)
            }
        };
        for &kind in &config.rows {
            run.doing(&format!("{} ({})", kind.name(), load_kind.name()));
            let dir = run.dir().path().join("work").join(format!("{}-{}", kind.slug(), load_kind.name()));
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            let offset = realtime_ns() as i64 - monotonic_ns() as i64;
            let watches = Watches::start(cores)?;
            let measured = measure(config, kind, &testbed, &topology, &dir, lane_core, &mut servers);
            let stalls = watches.finish()?;
            let measured = measured.with_context(|| format!("row {} ({})", kind.name(), load_kind.name()))?;
            if let Some(load) = load.as_mut() {
                load.check().with_context(|| format!("the flood during row {}", kind.name()))?;
            }
            let records: Vec<MessageRecord> = measured
                .samples
                .iter()
                .map(|s| MessageRecord {
                    seq: s.seq,
                    sent_ns: s.sent_ns,
                    received_ns: s.received_ns,
                    kernel_ns: s.kernel_ns,
                })
                .collect();
            run.dir().write_csv(&format!("rows/{}-{}.csv", kind.slug(), load_kind.name()), &records)?;
            let row = figures(kind, load_kind, &measured, &stalls, offset);
            run.log(&format!(
                "{} ({}): p50 {:.1} us, p99.9 {:.1} us, max {:.1} us, {} lost",
                row.name,
                row.load,
                row.latency_ns.p50 as f64 / 1e3,
                row.latency_ns.p999 as f64 / 1e3,
                row.latency_ns.max as f64 / 1e3,
                row.lost
            ));
            rows.push(row);
            traces.push(trace(kind, load_kind, &measured.samples));
            run.step("");
        }
    }
    drop(servers);
    drop(testbed);
    plots(run, &traces)?;
    let goals = goals(&rows);
    Ok(LatencySummary {
        run: run.finish(),
        config: config.clone(),
        calibration: calibration_text,
        rows,
        goals,
    })
}

fn goals(rows: &[Row]) -> Goals {
    let find = |name: &str| rows.iter().find(|r| r.name == name && r.load == "flood");
    let lane = find(RowKind::Lane.name()).filter(|r| r.latency_ns.max > 0);
    // The untuned rows' count or the others'.
    let unexplained = |untuned: bool| {
        rows.iter()
            .filter(|r| (r.name == RowKind::LaneUntuned.name()) == untuned)
            .map(|r| r.bound_violations.unwrap_or(0) - r.violations_with_stall.unwrap_or(0))
            .sum()
    };
    let over = |name: &str| {
        let (peer, lane) = (find(name)?, lane?);
        (lane.latency_ns.p999 > 0 && peer.latency_ns.max > 0)
            .then(|| peer.latency_ns.p999 as f64 / lane.latency_ns.p999 as f64)
    };
    Goals {
        lane_p50_ns: lane.map(|r| r.latency_ns.p50),
        lane_p999_ns: lane.map(|r| r.latency_ns.p999),
        udp_blocking_over_lane_p999: over(Peer::UdpBlocking.name()),
        priority_only_over_lane_p999: over(Peer::PriorityOnly.name()),
        unexplained_violations: unexplained(false),
        untuned_unexplained_violations: unexplained(true),
    }
}

/// Every `n`-th stretch of `points` reduced to its largest latency (spikes stay visible).
fn thin(points: &[(f64, f64)], most: usize) -> Vec<(f64, f64)> {
    let stretch = points.len().div_ceil(most).max(1);
    points.chunks(stretch).filter_map(|c| c.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1))).collect()
}

/// The fraction of messages whose jitter (latency over the row's least) is at most x, at
/// up to 200 points.
fn jitter_cdf(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut latencies: Vec<f64> = points.iter().map(|p| p.1).collect();
    latencies.sort_by(f64::total_cmp);
    let Some(&least) = latencies.first() else { return Vec::new() };
    let n = latencies.len();
    let step = n.div_ceil(200).max(1);
    let mut cdf: Vec<(f64, f64)> =
        (0..n).step_by(step).map(|i| (latencies[i] - least, (i + 1) as f64 / n as f64)).collect();
    cdf.push((latencies[n - 1] - least, 1.0));
    // A log axis has no zero: the messages at the least latency are the curve's foot.
    cdf.retain(|p| p.0 > 0.0);
    cdf
}

fn plots(run: &mut Run<'_>, traces: &[Trace]) -> Result<()> {
    for load in LoadKind::ALL {
        let of_load: Vec<&Trace> = traces.iter().filter(|t| t.load == load && !t.points.is_empty()).collect();
        if of_load.is_empty() {
            continue;
        }
        let over_time: Vec<XySeries> = of_load
            .iter()
            .enumerate()
            .map(|(i, t)| XySeries::measured(t.name.clone(), thin(&t.points, TIME_PLOT_POINTS), i))
            .collect();
        let path = run.plot(&format!("latency_over_time_{}.png", load.name()));
        xy_chart(
            &path,
            &format!(
                "one-way latency of every message over time, {} (each point the largest of its stretch)",
                load.name()
            ),
            "time in the row, s",
            "latency, us",
            Scales { log_x: false, log_y: true },
            &over_time,
        )?;
        let jitter: Vec<XySeries> = of_load
            .iter()
            .enumerate()
            .map(|(i, t)| XySeries::measured(t.name.clone(), jitter_cdf(&t.points), i))
            .collect();
        let path = run.plot(&format!("jitter_{}.png", load.name()));
        xy_chart(
            &path,
            &format!("jitter distribution, {}: latency over the row's least", load.name()),
            "jitter, us",
            "fraction of messages at most",
            Scales { log_x: true, log_y: false },
            &jitter,
        )?;
        let tails: Vec<Series> = of_load
            .iter()
            .map(|t| {
                let mut r = LatencyRecorder::new();
                t.points.iter().for_each(|p| r.record((p.1 * 1e3) as u64));
                Series {
                    name: t.name.clone(),
                    points: r.ccdf().into_iter().map(|(v, f)| (v as f64 / 1e3, f)).collect(),
                }
            })
            .collect();
        let path = run.plot(&format!("latency_tail_{}.png", load.name()));
        tail_chart(&path, &format!("one-way latency tail by nines, {}", load.name()), "latency, us", &tails)?;
    }
    Ok(())
}

/// The table `kairos lane latency` prints.
pub fn report(s: &LatencySummary) -> String {
    let us = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
    let mut out = format!(
        "lane latency: {} messages of {} bytes every {} us per row, h{FROM} -> h{TO}; calibration {}\n",
        s.config.packets, s.config.message_bytes, s.config.period_us, s.calibration
    );
    out.push_str(&format!(
        "{:<28} {:<6} {:>7} {:>6} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>6}\n",
        "row",
        "load",
        "sent",
        "lost",
        "min us",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "p99.99",
        "max us",
        "rel jit",
        "P(100k)",
        "bound viol",
        "stalls"
    ));
    for r in &s.rows {
        let l = &r.latency_ns;
        let violations = match (r.bound_violations, r.violations_with_stall) {
            (Some(v), Some(w)) => format!("{v} ({w} st)"),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "{:<28} {:<6} {:>7} {:>6} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8.2} {:>9.2e} {:>10} {:>6}\n",
            r.name,
            r.load,
            r.packets,
            r.lost,
            us(l.min),
            us(l.p50),
            us(l.p99),
            us(l.p999),
            us(l.p9999),
            us(l.max),
            r.relative_jitter,
            r.p_violation_100k,
            violations,
            r.stalls
        ));
    }
    out.push_str("latency: lane rows from the release stamp to the receiving node's kernel receive stamp; UDP rows from before sendto to after the receiver's call returned (kernel-stamp figures in the JSON); sockperf half its round trip\n");
    for r in s.rows.iter().filter(|r| r.bound_ns.is_some()) {
        let (lo, hi) = r.bound_ns.unwrap_or_default();
        out.push_str(&format!(
            "{} ({}): bound [{}, {}] us, {} outside it ({} early), {} of them during a stall\n",
            r.name,
            r.load,
            us(lo),
            us(hi),
            r.bound_violations.unwrap_or(0),
            r.early_violations.unwrap_or(0),
            r.violations_with_stall.unwrap_or(0)
        ));
    }
    for r in s.rows.iter().filter(|r| !r.notes.is_empty()) {
        out.push_str(&format!("{} ({}): {}\n", r.name, r.load, r.notes.join("; ")));
    }
    let g = &s.goals;
    let opt_us = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{} us", us(v)));
    let opt_x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}x"));
    out.push_str(&format!(
        "goals under the flood: lane p50 {} (goal <= 5 us), p99.9 {} (goal <= 20 us); udp blocking's p99.9 {} the lane's, priority only's {} (goal >= 10x); bound violations no stall explains: {} in the host-tuned lane rows (goal 0), {} without host tuning (no goal)\n",
        opt_us(g.lane_p50_ns),
        opt_us(g.lane_p999_ns),
        opt_x(g.udp_blocking_over_lane_p999),
        opt_x(g.priority_only_over_lane_p999),
        g.unexplained_violations,
        g.untuned_unexplained_violations
    ));
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

#[cfg(test)]
mod tests;
