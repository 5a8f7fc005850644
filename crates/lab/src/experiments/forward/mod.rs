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
//! unlimited), `sent_pps` (achieved), `avg_age_ns`, `peak_age_ns`, `data_drops` (of which
//! `data_replaced`), `ctrl_drops`,
//! `misaddressed`, `received`, `sent`, `avg_batch` (sender, packets per `tx_burst` that took any),
//! `fwd_avg_batch`, `fib_age_ns`, `tx_drops`, `pool_drops`, `mean_latency_ns`, `label`,
//! `cpu_ns_per_packet`, `fwd_naps` and `fwd_held_ns` (the run-to-completion forwarder's sleeps
//! and its mean time from a packet's receive stamp to its send call), `p50_latency_ns` and
//! `p99_latency_ns`, `idle_cores_polled`.

pub mod sweep;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use kairos_fib::{Fib, FibKind, PapayaFib, RcuFib, RwLockFib, SeqlockFib};
use kairos_io::memory::pair;
use std::net::SocketAddrV4;

use kairos_io::af_packet::AfPacketSocket;
use kairos_io::testbed::{FORWARDER_IP, SOURCE_IP};
use kairos_io::{AfPacketPort, ForwarderSide, Port, Testbed, UdpPort};
use kairos_rcu::ReclaimPolicy;
use kairos_sys::memory::NoIdleStates;
use kairos_sys::net::packet_ring::{ETH_P_ALL, RingConfig};
use kairos_sys::thread::OffCore;
use serde::Serialize;

use kairos_forward::Packet;
use kairos_forward::forwarder::{ForwarderStats, RingCounts};
use kairos_forward::source::{Pace, Progress, SourceResult};
use kairos_forward::trace::Trace;
pub use kairos_forward::{
    ControlMode, Flush, ForwarderConfig, RingPolicy, Threading, forwarder, source, trace,
};
use kairos_sys::stoppable_thread::panic_message;

use crate::harness::InvalidConfig;

/// The transport between the source and the forwarder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// In-process rings between the threads: no kernel, no root.
    Memory,
    /// UDP sockets across two network namespaces joined by a veth pair (root).
    Udp,
    /// The forwarder on memory-mapped `AF_PACKET` rings on its unclaimed veth end (the sender and
    /// receiver on UDP sockets), as `dpdk-testpmd`'s `af_packet` PMD takes it.
    Packet,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Memory => "memory",
            Backend::Udp => "udp",
            Backend::Packet => "packet",
        })
    }
}

/// A backend name that is none of `memory`, `udp` and `packet`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend '{0}' (use memory, udp or packet)")]
pub struct UnknownBackend(pub String);

impl FromStr for Backend {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, UnknownBackend> {
        match s {
            "memory" => Ok(Backend::Memory),
            "udp" => Ok(Backend::Udp),
            "packet" => Ok(Backend::Packet),
            other => Err(UnknownBackend(other.to_string())),
        }
    }
}

/// One run's configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ForwardConfig {
    /// The transport between the source and the forwarder (udp and packet need root).
    pub backend: Backend,
    /// `None`: the baseline, no FIB.
    #[serde(serialize_with = "fib_name")]
    pub fib: Option<FibKind>,
    /// Reclamation of the RCU FIB (`direct`: the source's synchronous mode).
    pub rcu_policy: &'static str,
    /// The forwarder's own settings: threading, rings and their policies, control, flush,
    /// pinning and priority (checked against the trace's users by [`ForwardConfig::check`]).
    pub forwarder: ForwarderConfig,
    /// Sender burst B, packets per call (1 to the port's largest burst).
    pub source_burst: usize,
    /// Packets per second offered, 1 to [`MAX_RATE_PPS`]; `None` for as fast as the
    /// forwarder takes them.
    pub rate_pps: Option<f64>,
    /// Let the sender adapt its rate to the measured age (overrides `rate_pps`).
    pub age_control: Option<source::AgeControl>,
    /// Size of each in-memory link's ring, packets (the NIC rings; the source's TX ring is 64).
    pub link_ring: usize,
    /// How long the sender waits, after its last send, for packets still in flight, ns (at
    /// most [`MAX_DRAIN_NS`]; the wait ends early when every data packet came back).
    pub drain_ns: u64,
    /// The row's name in the table (empty: the FIB, ring policy and ring size).
    pub label: String,
    /// Run a peer forwarder in place of Kairos's (the UDP backend, no FIB).
    pub peer: Option<Peer>,
    /// Pin the sender and receiver's thread to this core (`None`: the scheduler places it). A
    /// sender left to the scheduler lands, more often than not, on the core of the polling
    /// forwarder in its own process, and the two take turns there.
    pub source_core: Option<usize>,
    /// Hold idle states off for the run (`/dev/cpu_dma_latency` at 0, root): an idle core
    /// polls instead of halting, so a thread woken on it runs at once. The run-to-completion
    /// forwarder still sleeps on an idle port (its core is free for any thread), but on this
    /// VM its first packet after a nap waited a median 11 us for it, against 39 us on a halted
    /// core (naps instrumented by hand, once). Applied to every forwarder alike, the peer's included; the row says whether it held.
    pub poll_idle_cores: bool,
}

/// Another program in the forwarder's place ([`crate::peers::testpmd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// DPDK's `dpdk-testpmd` in `io` forwarding mode on its `af_packet` driver.
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
            source_core: None,
            poll_idle_cores: true,
        }
    }
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The configuration's label ([`ForwardConfig::label`]).
    pub label: String,
    /// The transport run.
    pub backend: Backend,
    /// The FIB's name (`rcu`, `rwlock`, `seqlock`, `papaya`, `none`) or the peer forwarder's.
    pub fib: &'static str,
    /// The data ring's policy (`drop-newest`, `drop-oldest`, `keep-latest`).
    pub ring_policy: &'static str,
    /// The data ring's size, packets.
    pub ring_size: usize,
    /// Where control packets are applied: a thread of their own, or inline.
    pub control: ControlMode,
    /// Pipeline or run-to-completion.
    pub threading: Threading,
    /// When the data thread flushes its batch: `count` or `age`.
    pub flush: &'static str,
    /// The trace's control/data ratio.
    pub cdr: f64,
    /// The trace's users.
    pub users: u32,
    /// The rate offered, packets per second: the configured one, the age controller's
    /// settled rate (the mean of its last quarter of steps), or 0 when unlimited.
    pub rate_pps: f64,
    /// The rate the sender achieved, packets per second.
    pub sent_pps: f64,
    /// The app-update age: the mean over users of each one's time-average age, ns.
    pub avg_age_ns: f64,
    /// The mean over users of each one's mean peak age, ns.
    pub peak_age_ns: f64,
    /// Data packets the data ring (or policy) discarded: full-ring drops and replacements.
    pub data_drops: u64,
    /// Of `data_drops`, packets replaced by a newer one of the same user before they left
    /// (`keep-latest`): superseded, not lost, as that newer packet carries the user's news.
    pub data_replaced: u64,
    /// Control packets the control ring dropped (0 with inline control).
    pub ctrl_drops: u64,
    /// Data packets received that the FIB addressed with an entry older than their user's
    /// last control packet sent before them: received, but they do not lower the age.
    pub misaddressed: u64,
    /// Distinct data packets received back.
    pub received: u64,
    /// Packets sent, control and data.
    pub sent: u64,
    /// The sender's mean packets per `tx_burst` that took any.
    pub avg_batch: f64,
    /// The forwarder's mean packets per TX call that sent any.
    pub fwd_avg_batch: f64,
    /// Location-update age at the FIB: the mean over users of the time-average of now less
    /// the stamp of the published entry, ns.
    pub fib_age_ns: f64,
    /// Packets the forwarder's TX port refused.
    pub tx_drops: u64,
    /// Packets the forwarder dropped for an empty buffer pool.
    pub pool_drops: u64,
    /// The mean time from send to receive back of the data packets received correctly, ns.
    pub mean_latency_ns: f64,
    /// The median and 99th percentile of the same latencies, ns: the median is the path's
    /// floor, which the stalls that make the mean leave alone.
    pub p50_latency_ns: u64,
    /// The 99th percentile of the same latencies, ns.
    pub p99_latency_ns: u64,
    /// Whether idle cores polled during the run instead of entering idle states
    /// ([`ForwardConfig::poll_idle_cores`], held; false when not asked or refused).
    pub idle_cores_polled: bool,
    /// Forwarder threads refused the `SCHED_FIFO` priority asked for (0 when none was asked).
    pub fifo_refused: u64,
    /// The `SCHED_FIFO` priority the forwarder threads asked for (0: normal scheduling).
    pub fifo_priority: i32,
    /// The run-to-completion forwarder's idle spin window, us (0: a few polls).
    pub idle_spin_us: u64,
    /// The forwarder's CPU time per packet it received, ns: its threads' CPU clocks over the
    /// run (a peer's: its process's, over the sender's run), polling included.
    pub cpu_ns_per_packet: f64,
    /// Times the run-to-completion forwarder slept on its empty port between its first burst
    /// and its last (0 for the pipeline and a peer, which report none): 0 means it polled
    /// while traffic flowed.
    pub fwd_naps: u64,
    /// The run-to-completion forwarder's mean time from a packet's receive stamp to its send
    /// call, ns (0 for the pipeline and a peer).
    pub fwd_held_ns: f64,
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
        threading: config.forwarder.threading,
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
        data_replaced: fwd.data_ring.replaced,
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
        p50_latency_ns: src.p50_latency_ns,
        p99_latency_ns: src.p99_latency_ns,
        idle_cores_polled: false,
        fifo_refused: fwd.fifo_refused,
        fifo_priority: config.forwarder.fifo_priority,
        idle_spin_us: config.forwarder.idle_spin_ns / 1_000,
        cpu_ns_per_packet: if fwd.rx_packets == 0 { 0.0 } else { fwd.cpu_ns as f64 / fwd.rx_packets as f64 },
        fwd_naps: fwd.naps,
        fwd_held_ns: fwd.held_ns,
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

/// Runs the source against a forwarder reading `fib`, over the ports given. The calling thread
/// supervises: it reports the rows sent to `tick` about every 50 ms, and when either side ends
/// early (an error or a panic) it ends the other and returns the error, so no thread is left
/// waiting for one that is gone.
/// Runs the source on its two ports (`ports.0` out, `ports.3` in) against the forwarder on its
/// two (`ports.1` in, `ports.2` out).
fn run_with<F: Fib, S: Port<Packet>, P: Port<Packet>>(
    config: &ForwardConfig,
    trace: &Trace,
    fib: Option<&F>,
    ports: (S, P, P, S),
    tick: &dyn Fn(usize),
) -> Result<Row> {
    let (mut src_out, fwd_in, fwd_out, mut src_in) = ports;
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let progress = Progress::default();
    let pace = pace(config);
    // Each side wakes the supervisor when it ends, so a run's end costs no polling interval.
    let supervisor = std::thread::current();
    std::thread::scope(|s| {
        let fwd = s.spawn(|| {
            let stats = forwarder::run(&config.forwarder, trace.users, fib, fwd_in, fwd_out, &stop, &started);
            supervisor.unpark();
            stats
        });
        while !started.load(Ordering::Acquire) && !fwd.is_finished() {
            std::thread::sleep(Duration::from_micros(100));
        }
        let src = started.load(Ordering::Acquire).then(|| {
            s.spawn(|| {
                let result = pin_source(config).map(|()| {
                    source::run(
                        trace,
                        pace,
                        config.source_burst,
                        &mut src_out,
                        &mut src_in,
                        config.drain_ns,
                        &progress,
                    )
                });
                supervisor.unpark();
                result
            })
        });
        // The supervisor wakes every 50 ms: kept off the polling forwarder's core (once the
        // threads that inherit its cores are started), as testpmd keeps its housekeeping off its
        // forwarding lcore, it cannot preempt the forwarder there.
        let off_core = config.forwarder_core().and_then(|core| OffCore::new(core).ok());
        if let Some(src) = &src {
            while !src.is_finished() {
                if fwd.is_finished() {
                    // Nothing would take the sender's packets again.
                    progress.abort.store(true, Ordering::Relaxed);
                }
                tick(progress.sent.load(Ordering::Relaxed));
                std::thread::park_timeout(Duration::from_millis(50));
            }
        }
        drop(off_core);
        let src = src.map(|h| h.join());
        stop.store(true, Ordering::Release);
        let fwd = fwd.join().map_err(|p| anyhow!("the forwarder panicked: {}", panic_message(&*p)))??;
        let src = match src {
            Some(Ok(src)) => src?,
            Some(Err(p)) => bail!("the sender panicked: {}", panic_message(&*p)),
            None => bail!("the forwarder ended before it started"),
        };
        if progress.abort.load(Ordering::Relaxed) {
            bail!("the forwarder ended before the sender was done");
        }
        tick(progress.sent.load(Ordering::Relaxed));
        Ok(row(config, trace, src, fwd))
    })
}

/// Pins the calling thread (the sender and receiver's) to the configured core. An error (a
/// cpuset that leaves the core out) ends the run, as the forwarder's own pinning does: a row
/// must not say where its sender ran when it did not.
fn pin_source(config: &ForwardConfig) -> Result<()> {
    if let Some(core) = config.source_core {
        kairos_sys::thread::pin_current_thread(core)
            .map_err(|e| anyhow!("pinning the sender to core {core}: {e}"))?;
    }
    Ok(())
}

fn pace(config: &ForwardConfig) -> Pace {
    match config.age_control {
        Some(c) => Pace::AgeControlled(c),
        None => config.rate_pps.map_or(Pace::Unlimited, Pace::Rate),
    }
}

/// Runs the source against a peer forwarder in the testbed's forwarder namespace.
fn run_peer(config: &ForwardConfig, trace: &Trace) -> Result<Row> {
    let bed = Testbed::create_with(ForwarderSide::Unclaimed)?;
    let pmd = crate::peers::testpmd::Testpmd::start(&bed)?;
    // The peer swaps addresses and ports, so answers come back to the sending socket.
    let mut src_out = UdpPort::new(bed.source_socket(7001)?, Testbed::forwarder_addr(7002), 8 << 20)?;
    src_out.send_without_checksum()?;
    let mut src_in = src_out.try_clone()?;
    let progress = Progress::default();
    let cpu_before = pmd.cpu_time_ns()?;
    // On a thread of its own, as beside Kairos's forwarder, so that pinning it leaves the
    // caller's thread as it was.
    let src = std::thread::scope(|s| {
        s.spawn(|| {
            pin_source(config)?;
            Ok::<_, anyhow::Error>(source::run(
                trace,
                pace(config),
                config.source_burst,
                &mut src_out,
                &mut src_in,
                config.drain_ns,
                &progress,
            ))
        })
        .join()
    })
    .map_err(|p| anyhow!("the sender panicked: {}", panic_message(&*p)))??;
    let cpu_ns = pmd.cpu_time_ns()?.saturating_sub(cpu_before);
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
        cpu_ns,
        ..ForwarderStats::default()
    };
    let mut row = row(config, trace, src, fwd);
    row.fib = crate::peers::testpmd::TESTPMD;
    row.ring_size = 4096;
    Ok(row)
}

fn with_ports<F: Fib>(
    config: &ForwardConfig,
    trace: &Trace,
    fib: Option<&F>,
    tick: &dyn Fn(usize),
) -> Result<Row> {
    match config.backend {
        Backend::Memory => {
            let (src_out, fwd_in) = pair(config.link_ring, 64);
            let (fwd_out, src_in) = pair(config.link_ring, 64);
            run_with(config, trace, fib, (src_out, fwd_in, fwd_out, src_in), tick)
        }
        Backend::Udp => {
            let bed = Testbed::create()?;
            let (a, b, c, d) = (7001, 7002, 7003, 7004);
            let rcvbuf = 8 << 20;
            let src_out = UdpPort::new(bed.source_socket(a)?, Testbed::forwarder_addr(b), rcvbuf)?;
            let fwd_in = UdpPort::new(bed.forwarder_socket(b)?, Testbed::source_addr(a), rcvbuf)?;
            let fwd_out = UdpPort::new(bed.forwarder_socket(c)?, Testbed::source_addr(d), rcvbuf)?;
            let src_in = UdpPort::new(bed.source_socket(d)?, Testbed::forwarder_addr(c), rcvbuf)?;
            let row = run_with(config, trace, fib, (src_out, fwd_in, fwd_out, src_in), tick);
            drop(bed);
            row
        }
        Backend::Packet => {
            let bed = Testbed::create_with(ForwarderSide::Unclaimed)?;
            let (a, b, c, d) = (7001, 7002, 7003, 7004);
            let rcvbuf = 8 << 20;
            let src_out = UdpPort::new(bed.source_socket(a)?, Testbed::forwarder_addr(b), rcvbuf)?;
            let src_in = UdpPort::new(bed.source_socket(d)?, Testbed::forwarder_addr(c), rcvbuf)?;
            let source_mac = bed.source_mac()?;
            // The unclaimed end has no address and so no ARP: the source's hardware address is
            // pinned. The receiving ring takes every ethertype, as testpmd's does: a tap, it has
            // each frame before the namespace's stack runs (bound to IPv4 it came after the
            // stack's IPv4 receive; docs/forwarding.md). The sending ring is bound to an ethertype nothing
            // carries, so the kernel copies no frame into a ring no one reads.
            let open = |port: u16, ethertype: u16| -> Result<AfPacketSocket> {
                let local = SocketAddrV4::new(FORWARDER_IP, port);
                let config = RingConfig { ethertype, ..RingConfig::default() };
                let mut socket =
                    bed.in_forwarder(|| AfPacketSocket::open(&bed.forwarder_dev, local, config))??;
                socket.set_neighbour(SOURCE_IP, source_mac);
                Ok(socket)
            };
            let fwd_in = AfPacketPort::new(open(b, ETH_P_ALL)?, SocketAddrV4::new(SOURCE_IP, a))?;
            let fwd_out = AfPacketPort::new(open(c, SEND_ONLY_ETHERTYPE)?, SocketAddrV4::new(SOURCE_IP, d))?;
            let row = run_with(config, trace, fib, (src_out, fwd_in, fwd_out, src_in), tick);
            drop(bed);
            row
        }
    }
}

/// The ethertype a send-only packet socket binds to: IEEE 802's first local experimental one,
/// which no frame on the testbed carries.
const SEND_ONLY_ETHERTYPE: u16 = 0x88b5;

/// The most packets per second a run offers: more than any port here moves (the in-memory
/// link peaks near 30 million), and a rate this high reads as "unlimited" anyway.
pub const MAX_RATE_PPS: f64 = 1e8;

/// The longest time the sender waits for packets still in flight, ns.
pub const MAX_DRAIN_NS: u64 = 10_000_000_000;

impl ForwardConfig {
    /// The core the forwarder polls on, when known: testpmd's last core (its forwarding lcore,
    /// whatever `--core` says), else the run-to-completion forwarder's pinned core.
    pub fn forwarder_core(&self) -> Option<usize> {
        if self.peer.is_some() { Some(kairos_sys::proc::last_core()) } else { self.forwarder.pin_core }
    }

    /// The sender's core when none is given: the first core other than the forwarder's, when
    /// that is known (a sender left to the scheduler often lands on the polling forwarder's
    /// core); `None` otherwise or on a single core.
    pub fn default_source_core(&self) -> Option<usize> {
        let forwarder = self.forwarder_core()?;
        (0..kairos_sys::proc::online_cores()).find(|&c| c != forwarder)
    }

    /// Checks the run against `trace` before anything starts; the error says what is wrong, the
    /// limit and why.
    pub fn check(&self, trace: &Trace) -> Result<(), InvalidConfig> {
        self.forwarder.check(trace.users).map_err(|e| InvalidConfig::new(e.to_string()))?;
        if let Some(core) = self.source_core {
            kairos_forward::config::check_online_core(core, "the sender's")
                .map_err(|e| InvalidConfig::new(e.to_string()))?;
            if self.forwarder_core() == Some(core) {
                return Err(InvalidConfig::new(format!(
                    "the sender's core {core} is the forwarder's: give them different cores (or leave --source-core out), else they take turns on one"
                )));
            }
        }
        if !trace.rows.iter().any(|r| !r.control) {
            return Err(InvalidConfig::new("the trace has no data rows, so there is no age to measure"));
        }
        let max_burst = kairos_io::udp::MAX_BURST;
        if !(1..=max_burst).contains(&self.source_burst) {
            return Err(InvalidConfig::new(format!(
                "the sender's burst must be 1 to {max_burst}, got {} (a port moves at most {max_burst} packets per call)",
                self.source_burst
            )));
        }
        if !(1..=kairos_forward::config::MAX_RING).contains(&self.link_ring) {
            return Err(InvalidConfig::new(format!(
                "the link ring must hold 1 to {} packets, got {}",
                kairos_forward::config::MAX_RING,
                self.link_ring
            )));
        }
        if let Some(r) = self.rate_pps
            && !(r.is_finite() && (1.0..=MAX_RATE_PPS).contains(&r))
        {
            return Err(InvalidConfig::new(format!(
                "the rate must be 1 to {MAX_RATE_PPS:.0} packets per second, got {} (omit it to send as fast as the forwarder takes packets)",
                shown(r)
            )));
        }
        if let Some(c) = self.age_control
            && !(c.min_pps >= 1.0
                && c.min_pps <= c.initial_pps
                && c.initial_pps <= c.max_pps
                && c.max_pps <= MAX_RATE_PPS
                && c.step > 0.0
                && c.step < 1.0
                && c.window_ns > 0)
        {
            return Err(InvalidConfig::new(format!(
                "age control needs 1 <= min <= initial <= max <= {MAX_RATE_PPS:.0} packets per second, a step in (0, 1) and a positive window"
            )));
        }
        if self.drain_ns > MAX_DRAIN_NS {
            return Err(InvalidConfig::new(format!(
                "the drain wait must be at most {MAX_DRAIN_NS} ns (10 s), got {}",
                self.drain_ns
            )));
        }
        if let Some(Peer::DpdkTestpmd) = self.peer
            && (self.backend == Backend::Memory || self.fib.is_some())
        {
            return Err(InvalidConfig::new(
                "the dpdk-testpmd peer runs across the namespaces without a FIB (--backend udp or packet)",
            ));
        }
        rcu_policy(self.rcu_policy).map_err(|e| InvalidConfig::new(e.to_string()))?;
        Ok(())
    }
}

/// A number as a person reads it in an error: plain up to a billion, scientific beyond.
fn shown(x: f64) -> String {
    if x.abs() < 1e9 { x.to_string() } else { format!("{x:e}") }
}

/// One run of `trace` under `config`.
pub fn run_once(config: &ForwardConfig, trace: &Trace) -> Result<Row> {
    run_once_watched(config, trace, &|_| {})
}

/// One run of `trace` under `config`, reporting the rows sent to `tick` as it goes.
pub fn run_once_watched(config: &ForwardConfig, trace: &Trace, tick: &dyn Fn(usize)) -> Result<Row> {
    config.check(trace)?;
    // Refused without root: the run goes on with idle states, and its row says so.
    let idle = config.poll_idle_cores.then(NoIdleStates::request).and_then(Result::ok);
    let mut row = run_checked(config, trace, tick)?;
    row.idle_cores_polled = idle.is_some();
    Ok(row)
}

fn run_checked(config: &ForwardConfig, trace: &Trace, tick: &dyn Fn(usize)) -> Result<Row> {
    if config.peer.is_some() {
        return run_peer(config, trace);
    }
    let users = 0..trace.users;
    let initial = kairos_fib::AddrTuple::new(forwarder::NEXT_HOP, 0);
    match config.fib {
        None => with_ports::<SeqlockFib>(config, trace, None, tick),
        Some(FibKind::Rcu) => {
            let fib = RcuFib::new(users, initial, rcu_policy(config.rcu_policy)?)?;
            with_ports(config, trace, Some(&fib), tick)
        }
        Some(FibKind::RwLock) => with_ports(config, trace, Some(&RwLockFib::new(users, initial)), tick),
        Some(FibKind::Seqlock) => with_ports(config, trace, Some(&SeqlockFib::new(users, initial)), tick),
        Some(FibKind::Papaya) => with_ports(config, trace, Some(&PapayaFib::new(users, initial)), tick),
    }
}

/// A one-line text form of a row.
pub fn row_line(r: &Row) -> String {
    format!(
        "{:<28} {:>7} {:>10.0} {:>10.0} {:>11.1} {:>10.1} {:>9} {:>8} {:>8} {:>9} {:>6.2} {:>9.1} {:>8.0}",
        if r.label.is_empty() {
            format!("{} {} {}", r.fib, r.ring_policy, r.ring_size)
        } else {
            r.label.clone()
        },
        r.backend.to_string(),
        r.rate_pps,
        r.sent_pps,
        r.avg_age_ns / 1e3,
        r.p50_latency_ns as f64 / 1e3,
        r.data_drops,
        r.ctrl_drops,
        r.misaddressed,
        r.received,
        r.avg_batch,
        r.fib_age_ns / 1e3,
        r.cpu_ns_per_packet,
    )
}

/// The column headings of [`row_line`].
pub fn row_header() -> String {
    format!(
        "{:<28} {:>7} {:>10} {:>10} {:>11} {:>10} {:>9} {:>8} {:>8} {:>9} {:>6} {:>9} {:>8}",
        "configuration",
        "backend",
        "rate pps",
        "sent pps",
        "age us",
        "lat p50 us",
        "data drop",
        "ctl drop",
        "misaddr",
        "received",
        "batch",
        "fib age us",
        "cpu ns/p"
    )
}

/// `kairos forward`: one run in the harness, with a progress bar over the trace's rows.
#[derive(Debug, Serialize)]
pub struct ForwardRun {
    /// The run's configuration.
    pub config: ForwardConfig,
    /// Where the trace came from (a file's path), or `None` when generated.
    pub trace_file: Option<std::path::PathBuf>,
    /// The trace replayed.
    #[serde(skip)]
    pub trace: Trace,
}

/// What `kairos forward` found.
#[derive(Debug, Clone, Serialize)]
pub struct ForwardSummary {
    /// The run's configuration.
    pub config: ForwardConfig,
    /// Its measurements.
    pub row: Row,
    /// Machine, noise, plots and directory.
    #[serde(flatten)]
    pub run: crate::harness::RunInfo,
}

/// The sender's rate when it sends as fast as the forwarder takes packets, for the time a
/// run is announced to take (this machine's in-memory forwarder moves about 5 million a second).
const UNLIMITED_PPS_GUESS: f64 = 5e6;

impl crate::harness::Experiment for ForwardRun {
    const NAME: &'static str = "forward";
    type Summary = ForwardSummary;

    /// The windows around the run only ([`kairos_metrics::NoiseConfig::around_only`] says
    /// why).
    fn noise(&self) -> Option<kairos_metrics::NoiseConfig> {
        Some(kairos_metrics::NoiseConfig::around_only())
    }

    fn plan(&self) -> Result<crate::harness::Plan, InvalidConfig> {
        self.config.check(&self.trace)?;
        if self.config.backend != Backend::Memory && !kairos_sys::user::is_root() {
            return Err(InvalidConfig::new(format!(
                "--backend {} needs root (it makes two network namespaces); run as root or use --backend memory",
                self.config.backend
            )));
        }
        if self.config.forwarder.fifo_priority > 0 && !kairos_sys::user::is_root() {
            return Err(InvalidConfig::new(format!(
                "--priority {} needs SCHED_FIFO, which only root may set here (run as root, or leave --priority at 0)",
                self.config.forwarder.fifo_priority
            )));
        }
        let rate = match self.config.age_control {
            Some(c) => c.initial_pps,
            None => self.config.rate_pps.unwrap_or(UNLIMITED_PPS_GUESS),
        };
        let seconds = self.trace.rows.len() as f64 / rate + self.config.drain_ns as f64 / 1e9;
        Ok(crate::harness::Plan::new(100, seconds / 100.0))
    }

    fn run(&self, run: &mut crate::harness::Run<'_>) -> Result<ForwardSummary> {
        let rows = self.trace.rows.len().max(1);
        let shown = std::cell::Cell::new(0usize);
        let tick = |sent: usize| {
            let percent = sent * 100 / rows;
            while shown.get() < percent {
                shown.set(shown.get() + 1);
                run.step(&format!("{sent} of {rows} rows sent"));
            }
        };
        let row = run_once_watched(&self.config, &self.trace, &tick)?;
        if row.fifo_refused > 0 {
            run.log(&format!(
                "{} forwarder threads were refused SCHED_FIFO priority {}: they ran at normal priority",
                row.fifo_refused, self.config.forwarder.fifo_priority
            ));
        }
        if self.config.poll_idle_cores && !row.idle_cores_polled {
            run.log("idle states were not held off (/dev/cpu_dma_latency needs root): a forwarder woken from a nap may have waited for a halted core");
        }
        let mut csv = String::from("user,avg_age_ns\n");
        for (u, a) in row.per_user_age_ns.iter().enumerate() {
            csv.push_str(&format!("{u},{a:.1}\n"));
        }
        run.dir().write_text("per_user_age.csv", &csv)?;
        Ok(ForwardSummary { config: self.config.clone(), row, run: run.finish() })
    }
}

#[cfg(test)]
mod tests;
