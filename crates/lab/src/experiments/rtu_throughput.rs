//! `kairos rtu throughput`: the source's Fig. 6. A UDP sender on one core sends datagrams as fast
//! as it can over loopback to a receiver on the other core, for several datagram sizes; the
//! receiver is an RTU (a handler every 1 ms on the real-time shell, reading up to 1,000
//! datagrams per period at a declared 0.75 us each, its job ending early when the socket is
//! empty), an RTU fed by an I/O thread (`kairos_rtu::io` at `SCHED_FIFO` 70 on the same core
//! reads the socket into the handler's inbox, SPSC rings of buffer indices; the handler drains up
//! to 2,000 a period at a declared 0.25 us each), or a plain receive loop (a normal thread in
//! blocking `recv`). Each runs without and with background load
//! (`stress-ng` CPU and I/O workers on the receiver's core). Reported: datagrams and bytes per
//! second received, and the datagrams the kernel dropped for a full socket buffer.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `config`, `background` (how the load was made, or why not),
//! `rtu_realtime` (every RTU row's shell and I/O thread got `SCHED_FIFO`), `rows` (`receiver`,
//! `packet_bytes`, `background_load`, `received_pps`, `received_mbps`, `socket_drops`,
//! `inbox_drops`),
//! `kept` (per receiver and size: loaded over unloaded throughput), `plots` (`throughput.png`).
//! Files: `summary.json`, `rows.csv`, `throughput.png`.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};

use kairos_rtu::analysis::HandlerSpec;
use kairos_rtu::inbox::{Inbox, inbox};
use kairos_rtu::io::{IoConfig, spawn_udp};
use kairos_rtu::shell::{Context, Scheduler, ShellConfig};
use kairos_sys::clock::monotonic_ns;
use kairos_sys::proc::online_cores;
use kairos_sys::stoppable_thread::StoppableThread;
use kairos_sys::thread::pin_current_thread;
use serde::Serialize;

use crate::harness::plot::{Scales, measured_per_key, xy_chart};
use crate::harness::table::{TextTable, left, right};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo, check_core, check_seconds};

/// What a run of `kairos rtu throughput` does: the datagram sizes, how long each receiver runs
/// at each, and the receiver's core.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputConfig {
    /// Datagram sizes, UDP payload bytes (each 1 to 65507; at least one).
    pub packet_sizes: Vec<usize>,
    /// How long each receiver runs at each size, seconds (0.1 to 3600).
    pub seconds: f64,
    /// Receiver core (the sender takes another one when there is one).
    pub core: usize,
}

impl ThroughputConfig {
    /// The quick preset: 64, 1024 and 8192 bytes, 1 s a row, the receiver on the last core.
    pub fn quick() -> Self {
        let cores = online_cores();
        Self { packet_sizes: vec![64, 1024, 8192], seconds: 1.0, core: cores - 1 }
    }

    /// The full preset: five sizes from 64 to 8192 bytes, 5 s a row.
    pub fn full() -> Self {
        Self { packet_sizes: vec![64, 256, 1024, 4096, 8192], seconds: 5.0, ..Self::quick() }
    }

    /// [`ThroughputConfig::quick`] or [`ThroughputConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }
}

/// One receiver at one size, with or without load (a row of `rows.csv`).
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    /// `rtu`, `rtu + io thread` or `plain loop`.
    pub receiver: &'static str,
    /// The datagrams' UDP payload, bytes.
    pub packet_bytes: usize,
    /// Whether stress-ng loaded the receiver's core.
    pub background_load: bool,
    /// Datagrams received per second.
    pub received_pps: f64,
    /// Payload received, Mbit/s.
    pub received_mbps: f64,
    /// Datagrams the kernel dropped for a full socket buffer during the row.
    pub socket_drops: u64,
    /// Datagrams the I/O thread read but dropped for a full inbox (the inbox receiver only).
    pub inbox_drops: u64,
}

const RTU: &str = "rtu";
const RTU_INBOX: &str = "rtu + io thread";
const PLAIN: &str = "plain loop";
const RECEIVERS: [&str; 3] = [RTU, RTU_INBOX, PLAIN];

/// The receiving handler: a 1 ms period, up to `batch` datagrams in iterations of 50.
fn rx_spec(batch: u64, unit_cost_ns: u64) -> HandlerSpec {
    HandlerSpec { name: "rx".into(), period_ns: 1_000_000, batch, iteration: 50, unit_cost_ns }
}

/// How much of its throughput a receiver kept under load, at one size.
#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    /// `rtu`, `rtu + io thread` or `plain loop`.
    pub receiver: &'static str,
    /// The datagrams' UDP payload, bytes.
    pub packet_bytes: usize,
    /// Loaded throughput over unloaded.
    pub kept: f64,
}

/// What `kairos rtu throughput` found (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: ThroughputConfig,
    /// How the background load was made, or why it could not be (no loaded rows then).
    pub background: String,
    /// Every RTU row's shell and I/O thread got `SCHED_FIFO` (the plain loop asks for none).
    pub rtu_realtime: bool,
    /// Every receiver at every size, unloaded then loaded.
    pub rows: Vec<ThroughputRow>,
    /// Loaded over unloaded throughput, per receiver and size (none without the load).
    pub kept: Vec<Kept>,
}

/// Datagrams the kernel dropped on `socket` (the last column of `/proc/net/udp`; 0 if unread).
fn socket_drops(socket: &UdpSocket) -> u64 {
    kairos_sys::net::drops::kernel_drops(socket).unwrap_or(0)
}

/// Asks for a receive buffer of `bytes` (the forcing form when root): the RTU reads once per
/// period, so the buffer must hold a period of traffic; both receivers get the same.
pub(crate) fn grow_receive_buffer(socket: &UdpSocket, bytes: usize) {
    // Best effort: without it the rows still say how many datagrams the kernel dropped.
    let _ = kairos_sys::net::options::set_receive_buffer(socket, bytes);
}

/// Starts a sender flooding `to` with `size`-byte datagrams. It is owned: dropping it (an
/// early return included) stops and joins it, and `stop` says whether it died.
fn sender(to: std::net::SocketAddr, size: usize, core: Option<usize>) -> Result<StoppableThread<()>> {
    let socket = UdpSocket::bind("127.0.0.1:0").context("bind the sender")?;
    let thread = StoppableThread::spawn("sender", move |stop| {
        if let Some(c) = core {
            let _ = pin_current_thread(c);
        }
        let buf = vec![0x5au8; size];
        while !stop.load(Ordering::Relaxed) {
            let _ = socket.send_to(&buf, to);
        }
    })?;
    Ok(thread)
}

/// One receiver at one size: its row, and whether its real-time threads got `SCHED_FIFO`
/// (`None` for the plain loop, which asks for none).
fn point(
    receiver: &'static str,
    size: usize,
    config: &ThroughputConfig,
) -> Result<(ThroughputRow, Option<bool>)> {
    let socket = UdpSocket::bind("127.0.0.1:0").context("bind the receiver")?;
    grow_receive_buffer(&socket, 4 << 20);
    let to = socket.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let sender_core = (config.core > 0).then_some(0);
    let drops_before = socket_drops(&socket);
    let mut io_drops = 0;
    let mut realtime = None;
    let start = monotonic_ns();
    let send = sender(to, size, sender_core)?;
    let (packets, bytes) = if receiver == RTU {
        socket.set_nonblocking(true)?;
        let mut sched = Scheduler::new((socket.try_clone()?, vec![0u8; 65_536], 0u64, 0u64));
        // Up to 1,000 datagrams per 1 ms period in iterations of 50, declared at 0.75 us each
        // (a receive system call here): a reservation of 0.75 of the core.
        sched
            .register(
                rx_spec(1_000, 750),
                |st: &mut (UdpSocket, Vec<u8>, u64, u64), units: u64, _: &Context<'_>| {
                    let (socket, buf, packets, bytes) = st;
                    for done in 0..units {
                        match socket.recv(buf) {
                            Ok(n) => {
                                *packets += 1;
                                *bytes += n as u64;
                            }
                            Err(_) => return done,
                        }
                    }
                    units
                },
            )
            .expect("one handler at 0.75 is admitted");
        let running =
            sched.spawn(ShellConfig { core: Some(config.core), spin_ns: 5_000, ..ShellConfig::default() })?;
        std::thread::sleep(Duration::from_secs_f64(config.seconds));
        let report = running.stop()?;
        realtime = Some(report.realtime);
        (report.shared.2, report.shared.3)
    } else if receiver == RTU_INBOX {
        // The I/O thread (SCHED_FIFO 70, same core) reads the socket into the handler's inbox;
        // the handler (80) drains it: 2,000 datagrams a period declared at 0.25 us each (a
        // drain touches no socket, so it can promise more than the reading RTU).
        let (ingress, inbox) = inbox(4_096, size.max(1))?;
        let mut sched = Scheduler::new((inbox, 0u64, 0u64));
        sched
            .register(rx_spec(2_000, 250), |st: &mut (Inbox, u64, u64), units: u64, _: &Context<'_>| {
                let (inbox, packets, bytes) = st;
                inbox.drain(units, |d| {
                    *packets += 1;
                    *bytes += d.len() as u64;
                })
            })
            .expect("one handler at 0.5 is admitted");
        let io = spawn_udp(
            vec![(socket.try_clone()?, ingress)],
            IoConfig { core: Some(config.core), ..IoConfig::default() },
        )?;
        let running =
            sched.spawn(ShellConfig { core: Some(config.core), spin_ns: 5_000, ..ShellConfig::default() })?;
        std::thread::sleep(Duration::from_secs_f64(config.seconds));
        let report = running.stop()?;
        let io = io.stop()?;
        io_drops = io.sources[0].dropped;
        realtime = Some(report.realtime && io.realtime);
        (report.shared.1, report.shared.2)
    } else {
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        let recv_socket = socket.try_clone()?;
        let stop_rx = Arc::clone(&stop);
        let core = config.core;
        let rx = std::thread::spawn(move || {
            let _ = pin_current_thread(core);
            let mut buf = vec![0u8; 65_536];
            let (mut packets, mut bytes) = (0u64, 0u64);
            while !stop_rx.load(Ordering::Relaxed) {
                if let Ok(n) = recv_socket.recv(&mut buf) {
                    packets += 1;
                    bytes += n as u64;
                }
            }
            (packets, bytes)
        });
        std::thread::sleep(Duration::from_secs_f64(config.seconds));
        stop.store(true, Ordering::Relaxed);
        rx.join().map_err(|_| anyhow::anyhow!("the receive loop panicked"))?
    };
    send.stop()?;
    let wall = (monotonic_ns() - start) as f64 / 1e9;
    let row = ThroughputRow {
        receiver,
        packet_bytes: size,
        background_load: false,
        received_pps: packets as f64 / wall,
        received_mbps: bytes as f64 * 8.0 / wall / 1e6,
        socket_drops: socket_drops(&socket).saturating_sub(drops_before),
        inbox_drops: io_drops,
    };
    Ok((row, realtime))
}

impl Experiment for ThroughputConfig {
    const NAME: &'static str = "rtu-throughput";
    type Summary = ThroughputSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if self.packet_sizes.is_empty() {
            return Err(InvalidConfig::new("give at least one packet size"));
        }
        if let Some(s) = self.packet_sizes.iter().find(|&&s| !(1..=65_507).contains(&s)) {
            return Err(InvalidConfig::new(format!(
                "packet sizes are UDP payloads of 1-65507 bytes, got {s}"
            )));
        }
        check_seconds(
            self.seconds,
            0.1,
            3_600.0,
            "seconds per point",
            "0.1 s holds a hundred receiver periods",
        )?;
        check_core(self.core)?;
        Ok(Plan::new(self.packet_sizes.len() * RECEIVERS.len() * 2, self.seconds + 0.1))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<ThroughputSummary> {
        measure(self, run)
    }
}

fn measure(config: &ThroughputConfig, run: &mut Run<'_>) -> Result<ThroughputSummary> {
    let mut rows = Vec::new();
    let mut rtu_realtime = true;
    for &size in &config.packet_sizes {
        for receiver in RECEIVERS {
            let (row, realtime) = point(receiver, size, config)?;
            rtu_realtime &= realtime.unwrap_or(true);
            rows.push(row);
            run.step("");
        }
    }
    let background_note = crate::harness::background::under_stress_ng(1, Some(config.core), || {
        for &size in &config.packet_sizes {
            for receiver in RECEIVERS {
                let (mut row, realtime) = point(receiver, size, config)?;
                rtu_realtime &= realtime.unwrap_or(true);
                run.step("");
                row.background_load = true;
                rows.push(row);
            }
        }
        Ok(())
    })?
    .unwrap_or_else(|e| run.skipped(&e));
    let kept = rows
        .iter()
        .filter(|r| r.background_load)
        .filter_map(|loaded| {
            let base = rows.iter().find(|r| {
                !r.background_load && r.receiver == loaded.receiver && r.packet_bytes == loaded.packet_bytes
            })?;
            Some(Kept {
                receiver: loaded.receiver,
                packet_bytes: loaded.packet_bytes,
                kept: loaded.received_pps / base.received_pps.max(1.0),
            })
        })
        .collect();
    run.dir().write_csv("rows.csv", &rows)?;
    let plot = run.plot("throughput.png");
    let series = measured_per_key(
        [false, true].into_iter().flat_map(|bg| RECEIVERS.into_iter().map(move |r| (bg, r))),
        &rows,
        |(bg, receiver)| format!("{receiver}, {}", if *bg { "stress-ng" } else { "no load" }),
        |(bg, receiver), r| r.receiver == *receiver && r.background_load == *bg,
        |r| (r.packet_bytes as f64, r.received_pps / 1e3),
    );
    xy_chart(
        &plot,
        "UDP receive throughput on loopback: RTU, RTU fed by an I/O thread, plain loop",
        "datagram size (bytes)",
        "datagrams received (thousands per second)",
        Scales { log_x: true, log_y: false },
        &series,
    )?;
    let summary = ThroughputSummary {
        run: run.finish(),
        config: config.clone(),
        background: background_note,
        rtu_realtime,
        rows,
        kept,
    };
    Ok(summary)
}

/// The summary as the table a person reads.
pub fn report(s: &ThroughputSummary) -> String {
    let mut out = format!("machine: {}\nbackground: {}\n", s.run.machine.one_line(), s.background);
    if !s.rtu_realtime {
        out.push_str("SCHED_FIFO NOT granted: the RTU rows' shell and I/O thread ran at normal priority\n");
    }
    let mut table = TextTable::new(&[
        left("receiver"),
        right("bytes"),
        right("background"),
        right("received/s"),
        right("Mbit/s"),
        right("socket drops"),
        right("inbox drops"),
    ]);
    for r in &s.rows {
        table.row([
            r.receiver.to_string(),
            r.packet_bytes.to_string(),
            if r.background_load { "stress-ng" } else { "none" }.to_string(),
            format!("{:.0}", r.received_pps),
            format!("{:.1}", r.received_mbps),
            r.socket_drops.to_string(),
            r.inbox_drops.to_string(),
        ]);
    }
    out.push_str(&table.render());
    for k in &s.kept {
        out.push_str(&format!(
            "{} at {} B keeps {:.1}% of its unloaded throughput\n",
            k.receiver,
            k.packet_bytes,
            k.kept * 100.0
        ));
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_sender_stops_sending() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let send = sender(receiver.local_addr().unwrap(), 64, None).unwrap();
        let mut buf = [0u8; 64];
        receiver.recv(&mut buf).expect("the sender sends");
        // An early return (an error on the receiving side) drops the sender.
        drop(send);
        // Drain what was sent before the drop (for at most 5 s); then nothing more comes.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while receiver.recv(&mut buf).is_ok() && std::time::Instant::now() < deadline {}
        assert!(receiver.recv(&mut buf).is_err(), "a dropped sender is still sending");
    }
}
