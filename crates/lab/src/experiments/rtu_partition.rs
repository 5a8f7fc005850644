//! `kairos rtu partition`: the source's Fig. 7, bandwidth partitioning. Six UDP streams over
//! loopback: each sender sends 4 datagrams of 8 KB every 20 ms and each receiver reads up to 2
//! every 10 ms, so each stream is promised 13.1 Mbit/s; and the same sixteen times heavier
//! (210 Mbit/s a stream), since the source's rates barely load this machine. Run two ways, each without and with
//! `stress-ng` on both cores: as RTUs (one scheduler of six sender handlers on core 0; on the
//! last core, an I/O thread at `SCHED_FIFO` 70 reading the six sockets into the streams' inboxes,
//! and one scheduler of six receiver handlers at 80 draining them) and as plain threads (a thread per sender sleeping 20 ms
//! between bursts, a thread per receiver in blocking `recv`, pinned alike). Reported per stream:
//! the throughput received.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `config`, `background`, `rtu_realtime` (every RTU point's shells and I/O
//! thread got `SCHED_FIFO`), `rows` (`scale`, `way`, `background_load`, `stream`,
//! `received_mbps`), `promised_mbps` (at scale 1), `spread` (per scale, way and load: min and max
//! stream over the promise), `plots`. Files: `summary.json`, `rows.csv`, `per_stream.png`.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};

use kairos_rtu::analysis::HandlerSpec;
use kairos_rtu::inbox::{Inbox, inbox};
use kairos_rtu::io::{IoConfig, spawn_udp};
use kairos_rtu::shell::{Context, Scheduler, ShellConfig};
use kairos_sys::proc::{last_core, online_cores};
use kairos_sys::thread::pin_current_thread;
use serde::Serialize;

use crate::harness::plot::{Scales, measured_per_key, xy_chart};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo, check_seconds};

const STREAMS: usize = 6;
const DATAGRAM: usize = 8_192;
const SEND_PERIOD_NS: u64 = 20_000_000;
const SEND_BATCH: u64 = 4;
const RECV_PERIOD_NS: u64 = 10_000_000;
const RECV_BATCH: u64 = 2;
/// The source's load, and one sixteen times heavier (its machine was a 100 MHz Pentium: the
/// source's rates barely load this one).
const SCALES: [u64; 2] = [1, 16];

#[derive(Debug, Clone, Serialize)]
/// What the partitioning experiment runs.
pub struct PartitionConfig {
    /// Seconds per point, 0.1 to 3600 (eight points: two scales, two ways, with and without
    /// load).
    pub seconds: f64,
}

impl PartitionConfig {
    /// 2 s points with `quick`, else 10 s.
    pub fn preset(quick: bool) -> Self {
        Self { seconds: if quick { 2.0 } else { 10.0 } }
    }
}

#[derive(Debug, Clone, Serialize)]
/// One stream's throughput at one point.
pub struct PartitionRow {
    /// Datagrams per period over the source's (4 sent every 20 ms, 2 read every 10 ms).
    pub scale: u64,
    /// `rtu` (receivers drain inboxes on the real-time shell) or `threads` (a thread per stream).
    pub way: &'static str,
    /// Whether `stress-ng` loaded both cores.
    pub background_load: bool,
    /// The stream's index, 0-5.
    pub stream: usize,
    /// What the stream's receiver read, Mbit/s.
    pub received_mbps: f64,
}

#[derive(Debug, Clone, Serialize)]
/// The spread of the six streams at one point.
pub struct Spread {
    /// Datagrams per period over the source's.
    pub scale: u64,
    /// `rtu` or `threads`.
    pub way: &'static str,
    /// Whether `stress-ng` loaded both cores.
    pub background_load: bool,
    /// Slowest and fastest stream over the promised rate.
    pub min_over_promise: f64,
    /// Fastest stream over the promised rate.
    pub max_over_promise: f64,
}

#[derive(Debug, Clone, Serialize)]
/// What the partitioning experiment found.
pub struct PartitionSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: PartitionConfig,
    /// How the background load was made, or why it was not.
    pub background: String,
    /// Every RTU point's shells and I/O thread got `SCHED_FIFO` (the threads way asks for none).
    pub rtu_realtime: bool,
    /// Each stream's promised rate at scale 1, Mbit/s.
    pub promised_mbps: f64,
    /// Every stream at every point.
    pub rows: Vec<PartitionRow>,
    /// Every point's spread.
    pub spread: Vec<Spread>,
}

/// Six receiver sockets and six sender sockets connected to them.
fn sockets() -> Result<(Vec<UdpSocket>, Vec<UdpSocket>)> {
    let mut rx = Vec::new();
    let mut tx = Vec::new();
    for _ in 0..STREAMS {
        let r = UdpSocket::bind("127.0.0.1:0").context("bind a receiver")?;
        // A receiver handler reads once per period: its buffer must hold a period of traffic.
        crate::experiments::rtu_throughput::grow_receive_buffer(&r, 4 << 20);
        let t = UdpSocket::bind("127.0.0.1:0").context("bind a sender")?;
        t.connect(r.local_addr()?)?;
        rx.push(r);
        tx.push(t);
    }
    Ok((rx, tx))
}

/// A sender's or receiver's handler: `batch` datagrams every `period_ns`, one per iteration,
/// each declared to cost 20 us.
fn stream_handler(name: String, period_ns: u64, batch: u64) -> HandlerSpec {
    HandlerSpec { name, period_ns, batch, iteration: 1, unit_cost_ns: 20_000 }
}

/// Datagrams received per stream, RTU way, and whether its shells and I/O thread got
/// `SCHED_FIFO`.
fn rtu(seconds: f64, scale: u64) -> Result<(Vec<u64>, bool)> {
    let (rx, tx) = sockets()?;
    let mut senders = Scheduler::new((tx, vec![0x5au8; DATAGRAM]));
    // The receivers' I/O thread reads each socket into that stream's inbox (SPSC rings of
    // buffer indices); receiver handlers drain their inbox and never make a system call.
    let mut sources = Vec::new();
    let mut inboxes = Vec::new();
    for r in rx {
        let (ingress, inbox) = inbox(128 * scale as usize, DATAGRAM)?;
        sources.push((r, ingress));
        inboxes.push(inbox);
    }
    let mut receivers = Scheduler::new((inboxes, vec![0u64; STREAMS]));
    for i in 0..STREAMS {
        let send = stream_handler(format!("send{i}"), SEND_PERIOD_NS, SEND_BATCH * scale);
        senders
            .register(send, move |st: &mut (Vec<UdpSocket>, Vec<u8>), units: u64, _: &Context<'_>| {
                for _ in 0..units {
                    let _ = st.0[i].send(&st.1);
                }
                units
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let recv = stream_handler(format!("recv{i}"), RECV_PERIOD_NS, RECV_BATCH * scale);
        receivers
            .register(recv, move |st: &mut (Vec<Inbox>, Vec<u64>), units: u64, _: &Context<'_>| {
                let done = st.0[i].drain(units, |_| {});
                st.1[i] += done;
                done
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let io = spawn_udp(sources, IoConfig { core: Some(last_core()), ..IoConfig::default() })?;
    let rx_run = receivers.spawn(ShellConfig { core: Some(last_core()), ..ShellConfig::default() })?;
    let tx_run = senders.spawn(ShellConfig { core: Some(0), ..ShellConfig::default() })?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let tx = tx_run.stop()?;
    let rx = rx_run.stop()?;
    let io = io.stop()?;
    Ok((rx.shared.1, tx.realtime && rx.realtime && io.realtime))
}

/// Datagrams received per stream, a thread per sender and per receiver.
fn threads(seconds: f64, scale: u64) -> Result<Vec<u64>> {
    let (rx, tx) = sockets()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in tx {
        let stop = Arc::clone(&stop);
        handles.push(std::thread::spawn(move || {
            let _ = pin_current_thread(0);
            let buf = vec![0x5au8; DATAGRAM];
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..SEND_BATCH * scale {
                    let _ = t.send(&buf);
                }
                std::thread::sleep(Duration::from_nanos(SEND_PERIOD_NS));
            }
            0u64
        }));
    }
    let mut receivers = Vec::new();
    for r in rx {
        r.set_read_timeout(Some(Duration::from_millis(20)))?;
        let stop = Arc::clone(&stop);
        receivers.push(std::thread::spawn(move || {
            let _ = pin_current_thread(last_core());
            let mut buf = vec![0u8; 65_536];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if r.recv(&mut buf).is_ok() {
                    n += 1;
                }
            }
            n
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    receivers
        .into_iter()
        .map(|h| h.join().map_err(|_| anyhow::anyhow!("a receiver thread panicked")))
        .collect()
}

impl Experiment for PartitionConfig {
    const NAME: &'static str = "rtu-partition";
    type Summary = PartitionSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        check_seconds(self.seconds, 0.1, 3_600.0, "seconds per point", "0.1 s holds five sender periods")?;
        // Two scales, two ways, with and without load.
        Ok(Plan::new(8, self.seconds + 0.2))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<PartitionSummary> {
        measure(self, run)
    }
}

fn measure(config: &PartitionConfig, run: &mut Run<'_>) -> Result<PartitionSummary> {
    let promised_mbps = (SEND_BATCH as f64 * DATAGRAM as f64 * 8.0) / (SEND_PERIOD_NS as f64 / 1e9) / 1e6;
    let mut rows = Vec::new();
    let mut record = |scale: u64, way: &'static str, loaded: bool, counts: Vec<u64>| {
        for (stream, n) in counts.into_iter().enumerate() {
            let mbps = n as f64 * DATAGRAM as f64 * 8.0 / config.seconds / 1e6;
            rows.push(PartitionRow { scale, way, background_load: loaded, stream, received_mbps: mbps });
        }
    };
    let mut rtu_realtime = true;
    let mut both_ways_at_every_scale = |loaded: bool| -> Result<()> {
        for scale in SCALES {
            let (counts, realtime) = rtu(config.seconds, scale)?;
            rtu_realtime &= realtime;
            record(scale, "rtu", loaded, counts);
            run.step("");
            record(scale, "threads", loaded, threads(config.seconds, scale)?);
            run.step("");
        }
        Ok(())
    };
    both_ways_at_every_scale(false)?;
    let cores = online_cores();
    let background =
        crate::harness::background::under_stress_ng(cores, None, || both_ways_at_every_scale(true))?;
    let background = background.unwrap_or_else(|e| run.skipped(&e));
    let mut spread = Vec::new();
    for (scale, way, loaded) in SCALES
        .iter()
        .flat_map(|&s| ["rtu", "threads"].into_iter().flat_map(move |w| [(s, w, false), (s, w, true)]))
    {
        {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.scale == scale && r.way == way && r.background_load == loaded)
                .map(|r| r.received_mbps / (promised_mbps * scale as f64))
                .collect();
            if v.is_empty() {
                continue;
            }
            spread.push(Spread {
                scale,
                way,
                background_load: loaded,
                min_over_promise: v.iter().copied().fold(f64::INFINITY, f64::min),
                max_over_promise: v.iter().copied().fold(0.0, f64::max),
            });
        }
    }
    run.dir().write_csv("rows.csv", &rows)?;
    let plot = run.plot("per_stream.png");
    let series = measured_per_key(
        &spread,
        &rows,
        |sp| {
            format!("x{} {}, {}", sp.scale, sp.way, if sp.background_load { "stress-ng" } else { "no load" })
        },
        |sp, r| r.scale == sp.scale && r.way == sp.way && r.background_load == sp.background_load,
        |r| (r.stream as f64, r.received_mbps / (promised_mbps * r.scale as f64)),
    );
    xy_chart(
        &plot,
        "Bandwidth partitioning: each stream's throughput over its promise",
        "stream",
        "received / promised",
        Scales::default(),
        &series,
    )?;
    let summary = PartitionSummary {
        run: run.finish(),
        config: config.clone(),
        background,
        rtu_realtime,
        promised_mbps,
        rows,
        spread,
    };
    Ok(summary)
}

/// The report a person reads: each point's streams and their spread.
pub fn report(s: &PartitionSummary) -> String {
    let mut out = format!(
        "machine: {}\nbackground: {}\npromised per stream: {:.1} Mbit/s\n",
        s.run.machine.one_line(),
        s.background,
        s.promised_mbps
    );
    if !s.rtu_realtime {
        out.push_str("SCHED_FIFO NOT granted: the RTU rows' shells and I/O thread ran at normal priority\n");
    }
    for sp in &s.spread {
        let per: Vec<String> = s
            .rows
            .iter()
            .filter(|r| r.scale == sp.scale && r.way == sp.way && r.background_load == sp.background_load)
            .map(|r| format!("{:.1}", r.received_mbps))
            .collect();
        out.push_str(&format!(
            "x{:<3} {:<8} {:<10} streams {} Mbit/s: {:.0}%-{:.0}% of the promise\n",
            sp.scale,
            sp.way,
            if sp.background_load { "stress-ng" } else { "no load" },
            per.join(" "),
            sp.min_over_promise * 100.0,
            sp.max_over_promise * 100.0
        ));
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}
