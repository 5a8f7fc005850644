//! `kairos lane police`: the express lane's sender-side policing, measured (the source's
//! section 2.2: a service that uses more than it was granted loses the excess at a rate limiter
//! and hears `BW_EXCEEDED`; the others keep their timing).
//!
//! A controller, a sending node (h0) and a receiving node (h3) run in this process, their lane
//! sockets on loopback, so no root is needed. Three applications on h0 each get a tunnel to h3
//! of 64-byte packets: `good-1` and `good-2` every `good_period_us` (short, so a condition holds
//! enough of their messages for a steady p99.9) and `offender` every `period_us`. The good ones
//! send one 40-byte message a period throughout. The offender sends nothing in the `alone`
//! segments and two 60-byte messages a period of its own (each a packet's worth: twice its
//! grant) in the `offender sending` ones; the two kinds alternate, `CYCLES` pairs of
//! `phase_s / CYCLES` each, so both conditions meet the same machine (a shared machine moves a
//! p99.9 of microseconds between consecutive phases by more than the offender does). Then the
//! offender goes on until its tunnel is ended (not compared: at most three report intervals),
//! and the good tunnels run `alone again` for `phase_s`. The node carries one period's backlog and drops the oldest beyond it as excess,
//! and reports at once; the controller answers `BW_EXCEEDED` and ends the tunnel at the third
//! report (reports of excess are sent at most once an interval, `report_ms`, long enough in the
//! full run for the offender to last through the alternation).
//!
//! Measured: when `BW_EXCEEDED` reached the offender, in periods from the node's first dropped
//! message and from the first message over the grant; the offender's messages sent, delivered
//! and dropped; each good tunnel's one-way latency (from its packet's release stamp to the
//! kernel's receive stamp at h3) in every phase, the ratio of their p99.9 with the offender to
//! alone, and alone again to alone.
//!
//! `summary.json`: `{"config", "phases": [{"name", "offender_sending", "tunnels": [{"name", "sent",
//! "received", "latency_ns": {...}}]}], "offender": {"sent", "delivered", "excess_dropped",
//! "bw_exceeded_after_first_drop_periods", "bw_exceeded_after_first_excess_periods",
//! "terminated"}, "p999_ratio": {"good-1", "good-2"}, "p999_alone_again_ratio": {...}, machine,
//! noise, plots}`.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use kairos_lane::controller::Reason;
use kairos_lane::node::agent::{self, LaneTransport, NodeConfig, RunningNode};
use kairos_lane::node::app::{LaneApp, NodeToApp, Tunnel};
use kairos_lane::node::chunk::Schema;
use kairos_lane::node::lane::ReceiveMode;
use kairos_lane::service::wire::TunnelSpec;
use kairos_lane::service::{ControllerService, Secret, ServiceConfig};
use kairos_metrics::latency::{LatencyRecorder, LatencySummary};
use kairos_sys::clock::realtime_ns;
use kairos_te::LinkSpec;
use kairos_te::generate::rack;
use serde::Serialize;

use crate::harness::plot::{Series, tail_chart};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// Every tunnel's packet, bytes on the wire: the lane's 30-byte header and three 26-byte
/// chunks, 66 message bytes.
const PACKET_BYTES: u64 = 128;

/// The good tunnels' names, then the offender's.
const GOOD: [&str; 2] = ["good-1", "good-2"];
const OFFENDER: &str = "offender";

/// The three conditions: the first two alternate in [`CYCLES`] pairs of segments.
const PHASES: [&str; 3] = ["alone", "offender sending", "alone again"];
/// The pool of the offender's last stretch, after the alternation, until its tunnel is ended.
const UNTIL_ENDED: usize = 3;
/// Pairs of alone and offending segments (each `phase_s / CYCLES` long) while the offender's
/// tunnel lives.
const CYCLES: usize = 5;

/// What one condition's segments gathered, per tunnel.
struct Pool {
    recorders: Vec<LatencyRecorder>,
    received: Vec<u64>,
    sent: Vec<u64>,
}

impl Pool {
    fn new(tunnels: usize) -> Self {
        Self {
            recorders: vec![LatencyRecorder::new(); tunnels],
            received: vec![0; tunnels],
            sent: vec![0; tunnels],
        }
    }
}

/// What a run of `kairos lane police` does.
#[derive(Debug, Clone, Serialize)]
pub struct PoliceConfig {
    /// The offender's requested period, us (100 to 100,000): `BW_EXCEEDED` is timed in it.
    pub period_us: u64,
    /// The good tunnels' requested period, us (100 to `period_us`).
    pub good_period_us: u64,
    /// Each phase's length, seconds (0.2 to 600).
    pub phase_s: f64,
    /// How often a node reports use (and, at most, excess), ms (1 to 60000).
    pub report_ms: u64,
}

impl PoliceConfig {
    /// The full run (the offender's period 1 ms, the good ones' 100 us, 5 s per condition,
    /// reports every 5 s) or the quick one (1 s per condition, reports every 400 ms).
    pub fn preset(quick: bool) -> Self {
        if quick {
            Self { period_us: 1_000, good_period_us: 100, phase_s: 1.0, report_ms: 400 }
        } else {
            Self { period_us: 1_000, good_period_us: 100, phase_s: 5.0, report_ms: 5_000 }
        }
    }
}

/// One tunnel in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct TunnelRow {
    /// Its name.
    pub name: String,
    /// Messages its application sent.
    pub sent: u64,
    /// Messages the monitor received.
    pub received: u64,
    /// One-way latency, release stamp to kernel receive stamp.
    pub latency_ns: LatencySummary,
}

/// One phase.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// `alone`, `offender sending` or `alone again`.
    pub name: String,
    /// Whether the offender sent at twice its grant.
    pub offender_sending: bool,
    /// The tunnels.
    pub tunnels: Vec<TunnelRow>,
}

/// What became of the offender.
#[derive(Debug, Clone, Serialize)]
pub struct Offender {
    /// Messages it offered.
    pub sent: u64,
    /// Messages the monitor received.
    pub delivered: u64,
    /// Messages its node dropped as excess.
    pub excess_dropped: u64,
    /// Periods from its node's first dropped message to `BW_EXCEEDED` at the application.
    pub bw_exceeded_after_first_drop_periods: Option<f64>,
    /// Periods from its first message over the grant to `BW_EXCEEDED` (includes the period
    /// of backlog the node carries before it drops).
    pub bw_exceeded_after_first_excess_periods: Option<f64>,
    /// Whether the controller ended its tunnel (the third report of excess).
    pub terminated: bool,
}

/// What `kairos lane police` found.
#[derive(Debug, Clone, Serialize)]
pub struct PoliceSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: PoliceConfig,
    /// Without, then with the offender.
    pub phases: Vec<Phase>,
    /// The offender.
    pub offender: Offender,
    /// Messages of the good tunnels their node dropped (a late loop sends once for the
    /// releases it missed, so a backlog past the carry is lost).
    pub good_dropped: u64,
    /// Each good tunnel's p99.9 with the offender over without it.
    pub p999_ratio: BTreeMap<String, f64>,
    /// Each good tunnel's p99.9 in the third phase (alone again) over the first: how much the
    /// machine alone moves it between phases.
    pub p999_alone_again_ratio: BTreeMap<String, f64>,
}

impl Experiment for PoliceConfig {
    const NAME: &'static str = "lane-police";
    type Summary = PoliceSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if !(100..=100_000).contains(&self.period_us) {
            return Err(InvalidConfig::new(format!(
                "--period-us must be from 100 to 100000, got {}",
                self.period_us
            )));
        }
        if !(100..=self.period_us).contains(&self.good_period_us) {
            return Err(InvalidConfig::new(format!(
                "the good tunnels' period must be from 100 us to the offender's {} us, got {}",
                self.period_us, self.good_period_us
            )));
        }
        if !(0.2..=600.0).contains(&self.phase_s) {
            return Err(InvalidConfig::new(format!(
                "--phase-s must be from 0.2 to 600 seconds, got {}",
                self.phase_s
            )));
        }
        if !(1..=60_000).contains(&self.report_ms) {
            return Err(InvalidConfig::new(format!(
                "report interval must be from 1 to 60000 ms, got {}",
                self.report_ms
            )));
        }
        Ok(Plan::new(CYCLES + 1, 2.0 * self.phase_s / CYCLES as f64 + 0.1))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<PoliceSummary> {
        police(self, run)
    }
}

fn secret() -> Secret {
    Secret::new(b"lane police: a secret of this run".to_vec()).expect("long enough")
}

fn free_udp() -> Result<SocketAddr> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?)
}

/// The lane of the experiment: the controller and the two nodes, stopped on drop.
struct Lane {
    _controller: kairos_lane::service::RunningService,
    sender: Option<RunningNode>,
    receiver: Option<RunningNode>,
    dir: std::path::PathBuf,
}

fn lane(config: &PoliceConfig, run: &Run<'_>) -> Result<Lane> {
    let dir = run.dir().path().to_path_buf();
    let spec = LinkSpec {
        bandwidth_bps: 1_000_000_000,
        queue_bytes: 64_000,
        min_delay: 5_000_000,
        max_jitter: 50_000_000,
    };
    let service = ServiceConfig {
        topology: rack(4, spec).map_err(|e| anyhow!("{e}"))?,
        grace: 0,
        listen: "127.0.0.1:0".parse()?,
        metrics: None,
        state: dir.join("controller"),
        secret: secret(),
    };
    let controller = ControllerService::start(service)?.spawn()?;
    let lanes: HashMap<String, SocketAddr> =
        [("h0".to_string(), free_udp()?), ("h3".to_string(), free_udp()?)].into();
    let node = |host: &str| {
        agent::start(NodeConfig {
            controller: controller.local_addr(),
            host: host.into(),
            secret: secret(),
            dir: dir.join(format!("node-{host}")),
            lane_bind: lanes[host],
            peers: lanes.clone(),
            core: None,
            fifo_priority: 0,
            receive: ReceiveMode::Sleep,
            schema: Schema::Hd6,
            report_every: Duration::from_millis(config.report_ms),
            transport: LaneTransport::Udp,
        })
    };
    let (sender, receiver) = (node("h0")?, node("h3")?);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(sender.is_connected() && receiver.is_connected()) {
        if Instant::now() > deadline {
            return Err(anyhow!("the nodes did not reach the controller within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(Lane { _controller: controller, sender: Some(sender), receiver: Some(receiver), dir })
}

fn app(lane: &Lane, host: &str, name: &str) -> Result<LaneApp> {
    LaneApp::connect(&lane.dir.join(format!("node-{host}")), name, Duration::from_secs(5))
        .with_context(|| format!("application {name} on {host}"))
}

struct Sender {
    app: LaneApp,
    tunnel: Tunnel,
    sent: u64,
}

fn police(config: &PoliceConfig, run: &mut Run<'_>) -> Result<PoliceSummary> {
    let mut lane = lane(config, run)?;
    let mut monitor = app(&lane, "h3", "monitor")?;
    for name in GOOD.iter().chain([&OFFENDER]) {
        monitor.listen(name)?;
    }
    let mut senders: Vec<Sender> = Vec::new();
    for name in GOOD.iter().chain([&OFFENDER]) {
        let mut a = app(&lane, "h0", name)?;
        let spec = TunnelSpec {
            name: name.to_string(),
            receivers: vec!["h3".into()],
            packet_bytes: PACKET_BYTES,
            period_ps: if *name == OFFENDER { config.period_us } else { config.good_period_us } * 1_000_000,
            sublane: 0,
        };
        let tunnel = a.request(spec, Duration::from_secs(5)).with_context(|| format!("tunnel {name}"))?;
        senders.push(Sender { app: a, tunnel, sent: 0 });
    }
    let period_of = |s: &Sender| s.tunnel.grant.period_ps.div_ceil(1_000).max(1);
    // The loop runs at the good tunnels' period; the offender sends at its own.
    let period_ns = senders[..GOOD.len()].iter().map(period_of).max().unwrap_or(1);
    let offender_period_ns = period_of(&senders[GOOD.len()]);
    let start = senders.iter().map(|s| s.tunnel.send_from_ns).max().unwrap_or(0);
    while realtime_ns() < start {
        std::thread::sleep(Duration::from_millis(1));
    }
    let ids: HashMap<u64, usize> = senders.iter().enumerate().map(|(i, s)| (s.tunnel.id, i)).collect();

    let (mut exceeded_ns, mut first_excess_ns, mut terminated) = (None, None, false);
    let mut offender_next = 0;
    // The three conditions' pools, and one for the offender's last stretch (not compared).
    let mut pools: Vec<Pool> = (0..=PHASES.len()).map(|_| Pool::new(senders.len())).collect();
    let mut buf = [0u8; 256];
    // Alone and offending segments alternate while the offender's tunnel lives, so both
    // conditions meet the same machine; then the good tunnels alone again.
    let segment = Duration::from_secs_f64(config.phase_s / CYCLES as f64);
    let mut segments: Vec<(usize, Duration)> =
        (0..CYCLES).flat_map(|_| [(0, segment), (1, segment)]).collect();
    // A repeat offender is ended at its third report: it goes on offending until then (at most
    // three report intervals), so the good tunnels' last phase is truly alone.
    segments.push((UNTIL_ENDED, Duration::from_millis(3 * config.report_ms + 1_000)));
    segments.push((2, Duration::from_secs_f64(config.phase_s)));
    for (n, &(pool, length)) in segments.iter().enumerate() {
        if pool != 2 && terminated {
            continue;
        }
        let offending = pool == 1 || pool == UNTIL_ENDED;
        run.doing(PHASES.get(pool).copied().unwrap_or("the offender until it is ended"));
        let p = &mut pools[pool];
        let sent_before: Vec<u64> = senders.iter().map(|s| s.sent).collect();
        let end = Instant::now() + length;
        let mut next = realtime_ns();
        while Instant::now() < end && !(pool == UNTIL_ENDED && terminated) {
            let offender_due = realtime_ns() >= offender_next;
            if offender_due {
                offender_next = realtime_ns() + offender_period_ns;
            }
            for (i, s) in senders.iter_mut().enumerate() {
                let offender = i == GOOD.len();
                let messages: &[&[u8]] = match (offender, offending) {
                    (false, _) => &[&[1u8; 40]],
                    (true, true) if !terminated && offender_due => &[&[2u8; 60], &[3u8; 60]],
                    _ => &[],
                };
                for m in messages {
                    if s.tunnel.send(m, realtime_ns()).is_ok() {
                        s.sent += 1;
                        if offender {
                            first_excess_ns.get_or_insert(realtime_ns());
                        }
                    }
                }
            }
            next += period_ns;
            // Late by a whole period: go on from now, never a burst (which the node would
            // carry and drop as excess, a good tunnel's loss that is this loop's doing).
            let now = realtime_ns();
            if now > next {
                next = now + period_ns;
            }
            loop {
                while let Some(d) = monitor.recv(&mut buf)? {
                    if let Some(&i) = ids.get(&d.tunnel_id) {
                        p.recorders[i].record(d.received_ns.saturating_sub(d.sent_ns));
                        p.received[i] += 1;
                    }
                }
                for e in senders[GOOD.len()].app.events(Duration::ZERO)? {
                    match e {
                        NodeToApp::Changed { reason: Reason::BwExceeded, .. } => {
                            exceeded_ns.get_or_insert(realtime_ns());
                        }
                        NodeToApp::Ended { terminated: true, .. } => terminated = true,
                        _ => {}
                    }
                }
                let now = realtime_ns();
                if now >= next {
                    break;
                }
                std::thread::sleep(Duration::from_nanos((next - now).min(200_000)));
            }
        }
        for (i, s) in senders.iter().enumerate() {
            p.sent[i] += s.sent - sent_before[i];
        }
        if n % 2 == 1 || pool == 2 {
            run.step(if pool == 2 { "" } else { "alternating" });
        }
    }
    let offender_delivered: u64 = pools.iter().map(|p| p.received[GOOD.len()]).sum();
    let phases: Vec<(Phase, Vec<Series>)> = pools
        .iter()
        .zip(PHASES)
        .enumerate()
        .map(|(n, (p, name))| {
            let tunnels = senders
                .iter()
                .enumerate()
                .map(|(i, s)| TunnelRow {
                    name: s.tunnel_name(i),
                    sent: p.sent[i],
                    received: p.received[i],
                    latency_ns: p.recorders[i].summary(),
                })
                .collect();
            let ccdfs = p.recorders[..GOOD.len()]
                .iter()
                .enumerate()
                .filter(|(_, r)| r.count() > 0)
                .map(|(i, r)| Series {
                    name: format!("{}, {name}", GOOD[i]),
                    points: r.ccdf().into_iter().map(|(v, f)| (v as f64 / 1e3, f)).collect(),
                })
                .collect();
            (Phase { name: name.into(), offender_sending: n == 1, tunnels }, ccdfs)
        })
        .collect();
    let sender_report = lane.sender.take().map(RunningNode::stop);
    drop(lane.receiver.take());
    let good_excess: u64 = sender_report.as_ref().map_or(0, |r| {
        r.lane.tunnels.iter().filter(|t| t.name != OFFENDER).map(|t| t.counts.excess_messages).sum()
    });
    let offender_counts = sender_report
        .as_ref()
        .and_then(|r| r.lane.tunnels.iter().find(|t| t.name == OFFENDER).map(|t| t.counts));
    let first_drop_ns = offender_counts.and_then(|c| c.first_excess_ns);
    let periods = |from: Option<u64>| match (exceeded_ns, from) {
        (Some(e), Some(f)) => Some(e.saturating_sub(f) as f64 / offender_period_ns as f64),
        _ => None,
    };
    let offender = Offender {
        sent: senders[GOOD.len()].sent,
        delivered: offender_delivered,
        excess_dropped: offender_counts.map_or(0, |c| c.excess_messages),
        bw_exceeded_after_first_drop_periods: periods(first_drop_ns),
        bw_exceeded_after_first_excess_periods: periods(first_excess_ns),
        terminated,
    };
    let ratios = |of: usize| -> BTreeMap<String, f64> {
        GOOD.iter()
            .enumerate()
            .filter_map(|(i, name)| {
                let (a, b) =
                    (phases[0].0.tunnels[i].latency_ns.p999, phases[of].0.tunnels[i].latency_ns.p999);
                (a > 0).then(|| (name.to_string(), b as f64 / a as f64))
            })
            .collect()
    };
    let (p999_ratio, p999_alone_again_ratio) = (ratios(1), ratios(2));
    let series: Vec<Series> = phases.iter().flat_map(|(_, s)| s.iter().cloned()).collect();
    if !series.is_empty() {
        let path = run.plot("good_tunnels_latency_tail.png");
        tail_chart(
            &path,
            "good tunnels' one-way latency, alone and beside the offender",
            "latency, us",
            &series,
        )?;
    }
    Ok(PoliceSummary {
        run: run.finish(),
        config: config.clone(),
        phases: phases.into_iter().map(|(p, _)| p).collect(),
        offender,
        good_dropped: good_excess,
        p999_ratio,
        p999_alone_again_ratio,
    })
}

impl Sender {
    fn tunnel_name(&self, i: usize) -> String {
        GOOD.get(i).copied().unwrap_or(OFFENDER).to_string()
    }
}

/// The table `kairos lane police` prints.
pub fn report(s: &PoliceSummary) -> String {
    let mut out = format!(
        "lane police: the offender's period {} us, the good tunnels' {} us, {:.1} s a phase, reports every {} ms\n",
        s.config.period_us, s.config.good_period_us, s.config.phase_s, s.config.report_ms
    );
    out.push_str(&format!(
        "{:<10} {:<18} {:>7} {:>9} {:>10} {:>10} {:>11} {:>10}\n",
        "tunnel", "phase", "sent", "received", "p50 us", "p99 us", "p99.9 us", "max us"
    ));
    for p in &s.phases {
        let phase = &p.name;
        for t in &p.tunnels {
            let l = &t.latency_ns;
            out.push_str(&format!(
                "{:<10} {:<18} {:>7} {:>9} {:>10.1} {:>10.1} {:>11.1} {:>10.1}\n",
                t.name,
                phase,
                t.sent,
                t.received,
                l.p50 as f64 / 1e3,
                l.p99 as f64 / 1e3,
                l.p999 as f64 / 1e3,
                l.max as f64 / 1e3
            ));
        }
    }
    let o = &s.offender;
    let periods = |p: Option<f64>| p.map_or("never".to_string(), |p| format!("{p:.2} periods"));
    out.push_str(&format!(
        "offender: sent {}, delivered {}, dropped as excess {}; BW_EXCEEDED {} after its node's first drop ({} after its first message over the grant); {}\n",
        o.sent,
        o.delivered,
        o.excess_dropped,
        periods(o.bw_exceeded_after_first_drop_periods),
        periods(o.bw_exceeded_after_first_excess_periods),
        if o.terminated { "terminated at the third report" } else { "not terminated" }
    ));
    out.push_str(&format!("good tunnels' messages dropped at their node: {}\n", s.good_dropped));
    for (name, r) in &s.p999_ratio {
        let again = s.p999_alone_again_ratio.get(name).map_or("-".into(), |a| format!("{a:.2}"));
        out.push_str(&format!(
            "{name}: p99.9 beside the offender / alone = {r:.2} (alone again / alone = {again}: the machine's own variation)\n"
        ));
    }
    for p in &s.run.plots {
        out.push_str(&format!("plot: {}\n", p.display()));
    }
    out.push_str(&format!("results: {}\n", s.run.results_dir.display()));
    out
}
