//! One-way latency of small datagrams across the two-namespace veth testbed, for the ways
//! Kairos can move them: a UDP socket, and UDP framed on a memory-mapped `AF_PACKET` ring
//! (`kairos_io::af_packet`), each way round, with the receiver spinning (or, for comparison,
//! sleeping in `ppoll`).
//!
//! `cargo run --release -p kairos-io --example packet_latency [-- --samples N --period-us P --rounds R]`,
//! as root (namespaces, `CAP_NET_RAW`). The sender, pinned to the first core, writes its
//! `CLOCK_REALTIME` stamp into each 60-byte payload and sends one datagram every `P` us (idle:
//! one in flight at a time); the receiver, pinned to the last core, records for each datagram
//! the kernel's receive stamp minus the sender's ("to kernel") and its own clock read when it
//! saw the datagram minus the sender's ("to user": what the application sees). The first 1,000
//! datagrams of each row warm up and are not counted. Rows run interleaved in `R` rounds
//! (`--rounds`, default 5), so background load on a shared machine falls on every row alike;
//! both threads run at nice -20 where permitted. Prints a Markdown table, in us.

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kairos_io::af_packet::AfPacketSocket;
use kairos_io::testbed::{FORWARDER_IP, SOURCE_IP};
use kairos_io::{ForwarderSide, Testbed};
use kairos_metrics::latency::LatencyRecorder;
use kairos_sys::clock::{monotonic_ns, realtime_ns, sleep_until_ns};
use kairos_sys::net::packet_ring::{ETH_P_IP, RingConfig, RxLayout};
use kairos_sys::net::{MmsgBatch, options, poll};

const WARMUP: usize = 1000;
const PAYLOAD: usize = 60;
const MAGIC: &[u8; 4] = b"KLAT";
const SRC_PORT: u16 = 7101;
const DST_PORT: u16 = 7102;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Transport {
    Udp,
    Ring(RxLayout),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Wait {
    Spin,
    Poll,
}

struct Row {
    name: &'static str,
    tx: Transport,
    rx: Transport,
    wait: Wait,
}

const FRAMES: RxLayout = RxLayout::Frames { count: 4096 };
const BLOCKS: RxLayout = RxLayout::Blocks { count: 64, block_size: 1 << 16, timeout_ms: 1 };

enum Sender {
    Udp(UdpSocket),
    Ring(Box<AfPacketSocket>),
}

enum Receiver {
    Udp(UdpSocket, Box<MmsgBatch>),
    Ring(Box<AfPacketSocket>),
}

fn payload(seq: u32, sent_ns: u64) -> [u8; PAYLOAD] {
    let mut p = [0u8; PAYLOAD];
    p[0..4].copy_from_slice(MAGIC);
    p[4..8].copy_from_slice(&seq.to_le_bytes());
    p[8..16].copy_from_slice(&sent_ns.to_le_bytes());
    p
}

fn read_payload(p: &[u8]) -> Option<(u32, u64)> {
    if p.len() != PAYLOAD || &p[0..4] != MAGIC {
        return None;
    }
    Some((u32::from_le_bytes(p[4..8].try_into().ok()?), u64::from_le_bytes(p[8..16].try_into().ok()?)))
}

fn ring(layout: RxLayout) -> RingConfig {
    RingConfig { rx: layout, tx_frames: 256, ethertype: ETH_P_IP, ..RingConfig::default() }
}

struct Measured {
    to_kernel: LatencyRecorder,
    to_user: LatencyRecorder,
    received: usize,
}

impl Measured {
    fn record(&mut self, seq: u32, sent: u64, kernel: u64, user: u64) {
        self.received += 1;
        if seq as usize >= WARMUP {
            self.to_kernel.record(kernel.saturating_sub(sent));
            self.to_user.record(user.saturating_sub(sent));
        }
    }
}

/// Where the two threads run: apart, so a spinning receiver never waits for the sender's core.
struct Cores {
    sender: usize,
    receiver: usize,
}

fn receive(
    mut receiver: Receiver,
    wait: Wait,
    total: usize,
    core: usize,
    ready: &AtomicBool,
    done: &AtomicBool,
) -> Measured {
    kairos_sys::thread::pin_current_thread(core).expect("pin the receiver");
    let _ = kairos_sys::thread::set_nice(-20);
    let mut m = Measured { to_kernel: LatencyRecorder::new(), to_user: LatencyRecorder::new(), received: 0 };
    let mut storage = vec![[0u8; 128]; 64];
    ready.store(true, Ordering::Release);
    let mut grace_until = None;
    loop {
        let before = m.received;
        match &mut receiver {
            Receiver::Udp(socket, batch) => {
                if wait == Wait::Poll {
                    let _ = poll::wait_readable(socket, Duration::from_millis(10));
                }
                let mut buffers: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
                if let Ok(n) = batch.recv_into(socket, &mut buffers, true) {
                    let user = realtime_ns();
                    for ((buf, &len), &stamp) in
                        storage.iter().zip(batch.lengths()).zip(batch.rx_timestamps_ns()).take(n)
                    {
                        if let (Some((seq, sent)), Some(kernel)) = (read_payload(&buf[..len]), stamp) {
                            m.record(seq, sent, kernel, user);
                        }
                    }
                }
            }
            Receiver::Ring(socket) => {
                if wait == Wait::Poll {
                    let _ = socket.wait_readable(Duration::from_millis(10));
                }
                socket.recv(|_, p, kernel| {
                    let user = realtime_ns();
                    if let Some((seq, sent)) = read_payload(p) {
                        m.record(seq, sent, kernel, user);
                    }
                });
            }
        }
        if m.received >= total {
            break;
        }
        if done.load(Ordering::Acquire) && m.received == before {
            let now = monotonic_ns();
            let until = *grace_until.get_or_insert(now + 200_000_000);
            if now > until {
                break;
            }
        }
    }
    m
}

fn run(row: &Row, samples: usize, period_ns: u64, cores: &Cores) -> Measured {
    let side = if row.rx == Transport::Udp { ForwarderSide::Kernel } else { ForwarderSide::Bare };
    let bed = Testbed::create_with(side).expect("testbed (run as root)");
    let src = SocketAddrV4::new(SOURCE_IP, SRC_PORT);
    let dst = SocketAddrV4::new(FORWARDER_IP, DST_PORT);
    let receiver = bed
        .in_forwarder(|| match row.rx {
            Transport::Udp => {
                let socket = UdpSocket::bind(dst).expect("bind");
                socket.set_nonblocking(true).expect("non-blocking");
                options::enable_rx_timestamps(&socket).expect("SO_TIMESTAMPING");
                Receiver::Udp(socket, Box::new(MmsgBatch::new()))
            }
            Transport::Ring(layout) => Receiver::Ring(Box::new(
                AfPacketSocket::open(&bed.forwarder_dev, dst, ring(layout)).expect("ring"),
            )),
        })
        .expect("forwarder namespace");
    let forwarder_mac = bed.forwarder_mac().expect("forwarder MAC");
    let sender = bed
        .in_source(|| match row.tx {
            Transport::Udp => Sender::Udp(UdpSocket::bind(src).expect("bind")),
            Transport::Ring(layout) => {
                let mut socket = AfPacketSocket::open(&bed.source_dev, src, ring(layout)).expect("ring");
                socket.set_neighbour(FORWARDER_IP, forwarder_mac);
                Sender::Ring(Box::new(socket))
            }
        })
        .expect("source namespace");
    let total = samples + WARMUP;
    let ready = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let (wait, core) = (row.wait, cores.receiver);
    let rx = {
        let (ready, done) = (ready.clone(), done.clone());
        std::thread::spawn(move || receive(receiver, wait, total, core, &ready, &done))
    };
    while !ready.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    kairos_sys::thread::pin_current_thread(cores.sender).expect("pin the sender");
    let _ = kairos_sys::thread::set_nice(-20);
    let mut sender = sender;
    let mut next = monotonic_ns() + 10_000_000;
    for seq in 0..total as u32 {
        sleep_until_ns(next);
        next += period_ns;
        let p = payload(seq, realtime_ns());
        match &mut sender {
            Sender::Udp(socket) => {
                socket.send_to(&p, dst).expect("send_to");
            }
            Sender::Ring(socket) => socket.send_to(dst, &p).expect("ring send_to"),
        }
    }
    done.store(true, Ordering::Release);
    let measured = rx.join().expect("receiver thread");
    drop(bed);
    measured
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn main() {
    let mut samples = 30_000usize;
    let mut period_us = 50u64;
    let mut rounds = 5usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        match (pair[0].as_str(), pair.get(1).and_then(|v| v.parse::<u64>().ok())) {
            ("--samples", Some(n)) if n > 0 => samples = n as usize,
            ("--period-us", Some(p)) if p > 0 => period_us = p,
            ("--rounds", Some(r)) if r > 0 => rounds = r as usize,
            _ => {
                eprintln!("usage: packet_latency [--samples N] [--period-us P] [--rounds R]");
                std::process::exit(2);
            }
        }
    }
    if !kairos_sys::user::is_root() {
        eprintln!("packet_latency: needs root (network namespaces, CAP_NET_RAW)");
        std::process::exit(1);
    }
    let rows = [
        Row {
            name: "UDP socket -> UDP socket, spin",
            tx: Transport::Udp,
            rx: Transport::Udp,
            wait: Wait::Spin,
        },
        Row {
            name: "TX ring -> RX ring (V2 frames), spin",
            tx: Transport::Ring(FRAMES),
            rx: Transport::Ring(FRAMES),
            wait: Wait::Spin,
        },
        Row {
            name: "UDP socket -> RX ring (V2 frames), spin",
            tx: Transport::Udp,
            rx: Transport::Ring(FRAMES),
            wait: Wait::Spin,
        },
        Row {
            name: "TX ring -> UDP socket, spin",
            tx: Transport::Ring(FRAMES),
            rx: Transport::Udp,
            wait: Wait::Spin,
        },
        Row {
            name: "TX ring -> RX ring (V3 blocks, 1 ms), spin",
            tx: Transport::Ring(BLOCKS),
            rx: Transport::Ring(BLOCKS),
            wait: Wait::Spin,
        },
        Row {
            name: "UDP socket -> UDP socket, ppoll",
            tx: Transport::Udp,
            rx: Transport::Udp,
            wait: Wait::Poll,
        },
        Row {
            name: "TX ring -> RX ring (V2 frames), ppoll",
            tx: Transport::Ring(FRAMES),
            rx: Transport::Ring(FRAMES),
            wait: Wait::Poll,
        },
    ];
    // Chosen before the first pin: threads spawned later inherit the main thread's mask.
    let cores = Cores { sender: 0, receiver: kairos_sys::proc::last_core() };
    if cores.receiver == cores.sender {
        eprintln!("packet_latency: needs two cores (sender and receiver apart)");
        std::process::exit(1);
    }
    let per_round = samples.div_ceil(rounds);
    println!(
        "{} datagrams of {PAYLOAD} bytes a row in {rounds} interleaved rounds, one every {period_us} us; kernel {}, {} cores",
        per_round * rounds,
        kairos_sys::proc::kernel_release(),
        kairos_sys::proc::online_cores()
    );
    let mut merged: Vec<(LatencyRecorder, LatencyRecorder, usize)> =
        rows.iter().map(|_| (LatencyRecorder::new(), LatencyRecorder::new(), 0)).collect();
    for _ in 0..rounds {
        for (row, (to_kernel, to_user, lost)) in rows.iter().zip(&mut merged) {
            let m = run(row, per_round, period_us * 1000, &cores);
            to_kernel.merge(&m.to_kernel);
            to_user.merge(&m.to_user);
            *lost += (per_round + WARMUP).saturating_sub(m.received);
        }
    }
    println!();
    println!(
        "| path | lost | to kernel: min / p50 / p99 / p99.9 / max (us) | to user: min / p50 / p99 / p99.9 / max (us) |"
    );
    println!("|---|---|---|---|");
    let cells = |r: &LatencyRecorder| {
        [0.0, 0.5, 0.99, 0.999]
            .iter()
            .map(|&q| us(r.value_at_quantile(q)))
            .chain([us(r.max())])
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for (row, (to_kernel, to_user, lost)) in rows.iter().zip(&merged) {
        println!("| {} | {lost} | {} | {} |", row.name, cells(to_kernel), cells(to_user));
    }
}
