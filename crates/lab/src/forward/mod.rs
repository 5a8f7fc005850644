//! `kairos forward`: one run of the source's forwarding experiment (sections IV-V), on real
//! threads and a real port: a trace-driven token-bucket source, a forwarder whose data thread
//! reads a FIB that its control thread writes, and a receiver measuring the app-update age of
//! every user.
//!
//! Pieces: [`trace`] (Zipf users, control/data coin flips, saved and reloaded), [`source`]
//! (sender and receiver), [`forwarder`] (RX split, control thread, data thread with TX), and
//! [`sweep`] (`kairos sweep`: the grid, the figures, the report).
//!
//! # Row fields (stable)
//! `backend` (`memory`, `udp`), `fib` (`rcu`, `rwlock`, `seqlock`, `papaya`, `none`, or the
//! peer forwarder's name, `dpdk-testpmd`),
//! `ring_policy` (`drop-newest`, `drop-oldest`, `keep-latest`), `ring_size`, `control`
//! (`thread`, `inline`), `flush` (`count`, `age`), `cdr`, `users`, `rate_pps` (offered; 0 when
//! unlimited), `sent_pps` (achieved), `avg_age_ns`, `peak_age_ns`, `data_drops`, `ctrl_drops`,
//! `misaddressed`, `received`, `sent`, `avg_batch` (sender, packets per `tx_burst` that took any),
//! `fwd_avg_batch`, `fib_age_ns`, `tx_drops`, `pool_drops`, `mean_latency_ns`, `label`.

pub mod peer;
pub mod sweep;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, bail};
use kairos_fib::{Fib, FibKind, PapayaFib, RcuFib, RwLockFib, SeqlockFib};
use kairos_io::memory::pair;
use kairos_io::{ForwarderSide, Port, Testbed, UdpPort};
use kairos_rcu::ReclaimPolicy;
use serde::Serialize;

use kairos_forward::forwarder::{ForwarderStats, RingCounts};
use kairos_forward::source::{Pace, SourceResult};
use kairos_forward::trace::Trace;
pub use kairos_forward::{ControlMode, Flush, ForwarderConfig, RingPolicy, forwarder, source, trace};

/// The transport between the source and the forwarder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Memory,
    Udp,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Memory => "memory",
            Backend::Udp => "udp",
        })
    }
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "memory" => Ok(Backend::Memory),
            "udp" => Ok(Backend::Udp),
            other => Err(format!("unknown backend '{other}' (use memory or udp)")),
        }
    }
}

/// One run's configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ForwardConfig {
    pub backend: Backend,
    /// `None`: the baseline, no FIB.
    #[serde(serialize_with = "fib_name")]
    pub fib: Option<FibKind>,
    /// Reclamation of the RCU FIB (`direct`: the source's synchronous mode).
    pub rcu_policy: &'static str,
    pub forwarder: ForwarderConfig,
    /// Sender burst B.
    pub source_burst: usize,
    /// Packets per second offered; `None` for as fast as possible.
    pub rate_pps: Option<f64>,
    /// Let the sender adapt its rate to the measured age (overrides `rate_pps`).
    pub age_control: Option<source::AgeControl>,
    /// Size of each in-memory link's ring (the NIC rings; the source's TX ring is 64).
    pub link_ring: usize,
    pub drain_ns: u64,
    pub label: String,
    /// Run a peer forwarder in place of Kairos's (the UDP backend, no FIB).
    pub peer: Option<Peer>,
}

/// Another program in the forwarder's place ([`peer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    DpdkTestpmd,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        Self {
            backend: Backend::Memory,
            fib: Some(FibKind::Rcu),
            rcu_policy: "direct",
            forwarder: ForwarderConfig::default(),
            source_burst: 32,
            rate_pps: None,
            age_control: None,
            link_ring: 4096,
            drain_ns: 50_000_000,
            label: String::new(),
            peer: None,
        }
    }
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub label: String,
    pub backend: Backend,
    pub fib: &'static str,
    pub ring_policy: &'static str,
    pub ring_size: usize,
    pub control: ControlMode,
    pub flush: &'static str,
    pub cdr: f64,
    pub users: u32,
    pub rate_pps: f64,
    pub sent_pps: f64,
    pub avg_age_ns: f64,
    pub peak_age_ns: f64,
    pub data_drops: u64,
    pub ctrl_drops: u64,
    pub misaddressed: u64,
    pub received: u64,
    pub sent: u64,
    pub avg_batch: f64,
    pub fwd_avg_batch: f64,
    pub fib_age_ns: f64,
    pub tx_drops: u64,
    pub pool_drops: u64,
    pub mean_latency_ns: f64,
    /// Each user's time-average age, ns (by user id = Zipf rank - 1).
    #[serde(skip)]
    pub per_user_age_ns: Vec<f64>,
    /// The age-controlled sender's steps (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_steps: Vec<source::RateStep>,
}

fn row(config: &ForwardConfig, trace: &Trace, src: SourceResult, fwd: ForwarderStats) -> Row {
    Row {
        label: config.label.clone(),
        backend: config.backend,
        fib: config.fib.map_or("none", FibKind::name),
        ring_policy: config.forwarder.data_policy.name(),
        ring_size: config.forwarder.data_ring,
        control: config.forwarder.control,
        flush: match config.forwarder.flush {
            Flush::Count { .. } => "count",
            Flush::Age { .. } => "age",
        },
        cdr: trace.cdr,
        users: trace.users,
        rate_pps: match config.age_control {
            // The rate the controller settled on: the mean of its last quarter of steps.
            Some(_) => {
                let tail = &src.rate_steps[src.rate_steps.len() * 3 / 4..];
                if tail.is_empty() {
                    0.0
                } else {
                    tail.iter().map(|s| s.rate_pps).sum::<f64>() / tail.len() as f64
                }
            }
            None => config.rate_pps.unwrap_or(0.0),
        },
        sent_pps: src.sent_pps(),
        avg_age_ns: src.ages.avg_age_ns,
        peak_age_ns: src.ages.peak_age_ns,
        data_drops: fwd.data_ring.drops(),
        ctrl_drops: fwd.ctrl_ring.drops(),
        misaddressed: src.misaddressed,
        received: src.received,
        sent: src.sent,
        avg_batch: src.avg_batch,
        fwd_avg_batch: fwd.tx_avg_batch,
        fib_age_ns: fwd.fib_age_ns,
        tx_drops: fwd.tx_drops,
        pool_drops: fwd.pool_drops,
        mean_latency_ns: src.mean_latency_ns,
        per_user_age_ns: src.ages.per_user.iter().map(|s| s.avg_age_ns).collect(),
        rate_steps: src.rate_steps.clone(),
    }
}

fn fib_name<S: serde::Serializer>(fib: &Option<FibKind>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(fib.map_or("none", FibKind::name))
}

fn rcu_policy(name: &str) -> Result<ReclaimPolicy> {
    Ok(match name {
        "direct" => ReclaimPolicy::Direct,
        "offload" => ReclaimPolicy::Offload,
        other => bail!("unknown RCU reclamation '{other}' for the FIB (use direct or offload)"),
    })
}

/// Runs the source against a forwarder reading `fib`, over the ports given.
fn run_with<F: Fib, P: Port>(
    config: &ForwardConfig,
    trace: &Trace,
    fib: Option<&F>,
    ports: (P, P, P, P),
) -> Result<Row> {
    let (mut src_out, fwd_in, fwd_out, mut src_in) = ports;
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let pace = pace(config);
    let (src, fwd) = std::thread::scope(|s| {
        let fwd =
            s.spawn(|| forwarder::run(&config.forwarder, trace.users, fib, fwd_in, fwd_out, &stop, &started));
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let src = source::run(trace, pace, config.source_burst, &mut src_out, &mut src_in, config.drain_ns);
        stop.store(true, Ordering::Release);
        (src, fwd.join())
    });
    let fwd = fwd.map_err(|_| anyhow::anyhow!("the forwarder panicked"))?;
    Ok(row(config, trace, src, fwd))
}

fn pace(config: &ForwardConfig) -> Pace {
    match config.age_control {
        Some(c) => Pace::AgeControlled(c),
        None => config.rate_pps.map_or(Pace::Unlimited, Pace::Rate),
    }
}

/// Runs the source against a peer forwarder in the testbed's forwarder namespace.
fn run_peer(config: &ForwardConfig, trace: &Trace) -> Result<Row> {
    let bed = Testbed::create_with(ForwarderSide::Bare)?;
    let pmd = peer::Testpmd::start(&bed)?;
    // The peer swaps addresses and ports, so answers come back to the sending socket.
    let mut src_out = UdpPort::new(bed.source_socket(7001)?, Testbed::forwarder_addr(7002), 8 << 20)?;
    src_out.send_without_checksum()?;
    let mut src_in = src_out.try_clone()?;
    let src =
        source::run(trace, pace(config), config.source_burst, &mut src_out, &mut src_in, config.drain_ns);
    let stats = pmd.stop()?;
    drop(bed);
    let fwd = ForwarderStats {
        rx_packets: stats.rx_packets,
        data_ring: RingCounts {
            offered: stats.rx_packets + stats.rx_dropped,
            dropped_newest: stats.rx_dropped,
            ..RingCounts::default()
        },
        tx_drops: stats.tx_dropped,
        ..ForwarderStats::default()
    };
    let mut row = row(config, trace, src, fwd);
    row.fib = peer::TESTPMD;
    row.ring_size = 4096;
    Ok(row)
}

fn with_ports<F: Fib>(config: &ForwardConfig, trace: &Trace, fib: Option<&F>) -> Result<Row> {
    match config.backend {
        Backend::Memory => {
            let (src_out, fwd_in) = pair(config.link_ring, 64);
            let (fwd_out, src_in) = pair(config.link_ring, 64);
            run_with(config, trace, fib, (src_out, fwd_in, fwd_out, src_in))
        }
        Backend::Udp => {
            let bed = Testbed::create()?;
            let (a, b, c, d) = (7001, 7002, 7003, 7004);
            let rcvbuf = 8 << 20;
            let src_out = UdpPort::new(bed.source_socket(a)?, Testbed::forwarder_addr(b), rcvbuf)?;
            let fwd_in = UdpPort::new(bed.forwarder_socket(b)?, Testbed::source_addr(a), rcvbuf)?;
            let fwd_out = UdpPort::new(bed.forwarder_socket(c)?, Testbed::source_addr(d), rcvbuf)?;
            let src_in = UdpPort::new(bed.source_socket(d)?, Testbed::forwarder_addr(c), rcvbuf)?;
            let row = run_with(config, trace, fib, (src_out, fwd_in, fwd_out, src_in));
            drop(bed);
            row
        }
    }
}

/// One run of `trace` under `config`.
pub fn run_once(config: &ForwardConfig, trace: &Trace) -> Result<Row> {
    if config.forwarder.burst == 0 || config.source_burst == 0 {
        bail!("bursts must be at least 1");
    }
    if config.forwarder.ctrl_ring == 0 || config.forwarder.data_ring == 0 {
        bail!("ring sizes must be at least 1");
    }
    if let Some(r) = config.rate_pps {
        if !(r.is_finite() && r > 0.0) {
            bail!("the rate must be a positive number of packets per second, got {r}");
        }
    }
    if let Some(c) = config.age_control {
        if !(c.min_pps > 0.0
            && c.min_pps <= c.initial_pps
            && c.initial_pps <= c.max_pps
            && c.step > 0.0
            && c.window_ns > 0)
        {
            bail!("age control needs 0 < min <= initial <= max rates, a positive step and window");
        }
    }
    if let Some(Peer::DpdkTestpmd) = config.peer {
        if config.backend != Backend::Udp || config.fib.is_some() {
            bail!("the dpdk-testpmd peer runs on the udp backend without a FIB (--backend udp)");
        }
        return run_peer(config, trace);
    }
    let users = 0..trace.users;
    let initial = kairos_fib::AddrTuple::new(forwarder::NEXT_HOP, 0);
    match config.fib {
        None => with_ports::<SeqlockFib>(config, trace, None),
        Some(FibKind::Rcu) => {
            let fib = RcuFib::new(users, initial, rcu_policy(config.rcu_policy)?)?;
            with_ports(config, trace, Some(&fib))
        }
        Some(FibKind::RwLock) => with_ports(config, trace, Some(&RwLockFib::new(users, initial))),
        Some(FibKind::Seqlock) => with_ports(config, trace, Some(&SeqlockFib::new(users, initial))),
        Some(FibKind::Papaya) => with_ports(config, trace, Some(&PapayaFib::new(users, initial))),
    }
}

/// A one-line text form of a row.
pub fn row_line(r: &Row) -> String {
    format!(
        "{:<28} {:>7} {:>10.0} {:>10.0} {:>11.1} {:>9} {:>8} {:>8} {:>9} {:>6.2} {:>9.1}",
        if r.label.is_empty() {
            format!("{} {} {}", r.fib, r.ring_policy, r.ring_size)
        } else {
            r.label.clone()
        },
        r.backend.to_string(),
        r.rate_pps,
        r.sent_pps,
        r.avg_age_ns / 1e3,
        r.data_drops,
        r.ctrl_drops,
        r.misaddressed,
        r.received,
        r.avg_batch,
        r.fib_age_ns / 1e3,
    )
}

pub fn row_header() -> String {
    format!(
        "{:<28} {:>7} {:>10} {:>10} {:>11} {:>9} {:>8} {:>8} {:>9} {:>6} {:>9}",
        "configuration",
        "backend",
        "rate pps",
        "sent pps",
        "age us",
        "data drop",
        "ctl drop",
        "misaddr",
        "received",
        "batch",
        "fib age us"
    )
}
