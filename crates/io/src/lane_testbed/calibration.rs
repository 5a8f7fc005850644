//! Calibration: one-way latencies measured across the bridge, idle, on UDP sockets or packet
//! rings, and the per-link minimum delay and jitter the lane's topology takes from them (the
//! reasoning is in the `lane_testbed` module's documentation).

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};

use kairos_sys::clock::monotonic_ns;
use kairos_sys::net::options;
use kairos_sys::net::{RingConfig, RxLayout};

use super::{JITTER_PERCENTILE, LANE_TOS, LaneTestbed, LaneTestbedError, MTU_BYTES};
use crate::af_packet::{AfPacketPort, AfPacketSocket};
use crate::port::{MAX_WIRE_BYTES, Message, Port, PortError};
use crate::testbed::TestbedError;
use crate::udp::UdpPort;

/// One-way latencies from one host to another across the bridge (both hops), ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calibration {
    /// The sending host.
    pub from: usize,
    /// The receiving host.
    pub to: usize,
    /// Datagrams measured.
    pub samples: u64,
    /// Datagrams that did not arrive within [`CALIBRATION_TIMEOUT_NS`].
    pub lost: u64,
    /// The least latency.
    pub min_ns: u64,
    /// The median.
    pub p50_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
    /// At [`JITTER_PERCENTILE`].
    pub p999_ns: u64,
    /// The largest latency.
    pub max_ns: u64,
}

/// How long a calibration datagram may take before it counts as lost.
pub const CALIBRATION_TIMEOUT_NS: u64 = 100_000_000;
/// Datagrams sent before the measured ones (the first waits for ARP).
const CALIBRATION_WARMUP: u64 = 64;
/// The most samples a calibration takes (some seconds even when every one is slow).
pub const MAX_CALIBRATION_SAMPLES: u64 = 1_000_000;

impl Calibration {
    /// The figures of `latencies_ns` (one per datagram that arrived, any order); `None` when
    /// there are none.
    pub fn from_latencies(from: usize, to: usize, latencies_ns: &mut [u64], lost: u64) -> Option<Self> {
        if latencies_ns.is_empty() {
            return None;
        }
        latencies_ns.sort_unstable();
        let at = |q: f64| percentile(latencies_ns, q);
        Some(Self {
            from,
            to,
            samples: latencies_ns.len() as u64,
            lost,
            min_ns: latencies_ns[0],
            p50_ns: at(50.0),
            p99_ns: at(99.0),
            p999_ns: at(JITTER_PERCENTILE),
            max_ns: latencies_ns[latencies_ns.len() - 1],
        })
    }

    /// Each link's minimum delay on links of `rate_bps`: half the path's minimum (two alike
    /// hops) less a frame's transmission at that rate, at least 0. The lane's model leaves
    /// transmission out of the minimum over the testbed's software links, so the subtraction
    /// only keeps the figure below what a faster path than the calibrated one (the shared
    /// devices beside the lane's own) takes.
    pub fn min_delay_per_link_ns(&self, rate_bps: u64) -> u64 {
        (self.min_ns / 2).saturating_sub(transmission_ns(MTU_BYTES, rate_bps))
    }

    /// Each link's jitter on links of `rate_bps`: half of [`JITTER_PERCENTILE`] less the
    /// minimum delay, rounded so that two hops' minimum delay and jitter add up to at least the
    /// path's percentile.
    pub fn max_jitter_per_link_ns(&self, rate_bps: u64) -> u64 {
        self.p999_ns.div_ceil(2) - self.min_delay_per_link_ns(rate_bps)
    }
}

/// Nanoseconds to send `bytes` at `rate_bps` (positive), rounded up: what the lane's model
/// charges a hop for a packet of that size.
pub fn transmission_ns(bytes: u64, rate_bps: u64) -> u64 {
    let ns = (u128::from(bytes) * 8 * 1_000_000_000).div_ceil(u128::from(rate_bps.max(1)));
    ns.min(u128::from(u64::MAX)) as u64
}

/// The nearest-rank percentile `q` (0-100, in tenths) of sorted, non-empty `sorted`.
fn percentile(sorted: &[u64], q: f64) -> u64 {
    // In integer thousandths: 0.999 * 1000 is 999.0000000000001 in floating point, whose
    // ceiling would be the maximum.
    let per_mille = (q * 10.0).round() as usize;
    let rank = (per_mille * sorted.len()).div_ceil(1000);
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What a calibration's datagrams travel on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CalibrationPath {
    /// UDP sockets, the kernel stamping each datagram as it reaches the receiver's socket.
    #[default]
    Udp,
    /// Memory-mapped packet rings ([`crate::af_packet`]) on the hosts' lane device
    /// ([`LaneTestbed::lane_device`]: [`super::HOST_DEVICE`] or [`super::LANE_DEVICE`]), as a
    /// lane node on the packet transport sends and receives: the qdisc and the UDP layers
    /// skipped, the ring's stamp taken as the frame reaches it.
    PacketRing,
}

/// A calibration datagram: `"KC"`, its sequence number and its send time (18 bytes), and when
/// it arrived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Probe {
    seq: u64,
    sent_ns: u64,
    rx_ns: u64,
}

const PROBE_MAGIC: [u8; 2] = *b"KC";
const PROBE_BYTES: usize = 18;

impl Message for Probe {
    fn encode(&self, buf: &mut [u8; MAX_WIRE_BYTES]) -> usize {
        buf[..2].copy_from_slice(&PROBE_MAGIC);
        buf[2..10].copy_from_slice(&self.seq.to_le_bytes());
        buf[10..18].copy_from_slice(&self.sent_ns.to_le_bytes());
        PROBE_BYTES
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; PROBE_BYTES] = bytes.try_into().ok()?;
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        (bytes[..2] == PROBE_MAGIC).then(|| Probe { seq: word(2), sent_ns: word(10), rx_ns: 0 })
    }

    fn set_rx_ns(&mut self, rx_ns: u64) {
        self.rx_ns = rx_ns;
    }

    fn rx_ns(&self) -> u64 {
        self.rx_ns
    }
}

/// Sends `samples` probes (after [`CALIBRATION_WARMUP`] more) from `tx` to `rx` one at a
/// time, each awaited up to [`CALIBRATION_TIMEOUT_NS`]; returns their one-way latencies (the
/// sender's clock before the send to the receiver's kernel stamp, ns; a probe whose stamp is
/// not after its send is left out) and how many were lost.
fn one_way(
    tx: &mut dyn Port<Probe>,
    rx: &mut dyn Port<Probe>,
    samples: u64,
) -> Result<(Vec<u64>, u64), PortError> {
    let mut latencies = Vec::with_capacity(samples as usize);
    let mut lost = 0;
    let mut arrived = [Probe::default(); 1];
    for seq in 0..CALIBRATION_WARMUP + samples {
        let warmup = seq < CALIBRATION_WARMUP;
        let probe = Probe { seq, sent_ns: monotonic_ns(), rx_ns: 0 };
        let sent = tx.tx_burst(&[probe])? == 1;
        let deadline = monotonic_ns() + CALIBRATION_TIMEOUT_NS;
        let latency = loop {
            if !sent || monotonic_ns() > deadline {
                break None;
            }
            // A late datagram of an earlier round is read and passed over.
            if rx.rx_burst(&mut arrived)? == 1 && arrived[0].seq == seq {
                break Some(arrived[0].rx_ns.checked_sub(arrived[0].sent_ns).filter(|&ns| ns > 0));
            }
            std::hint::spin_loop();
        };
        match (warmup, latency) {
            (true, _) => {}
            (_, Some(Some(ns))) => latencies.push(ns),
            // Arrived with a receive stamp not after its send: not a measurement (a packet
            // ring now and then reports a frame's stamp from before it was sent); left out.
            (_, Some(None)) => {}
            (_, None) => lost += 1,
        }
    }
    Ok((latencies, lost))
}

impl LaneTestbed {
    /// Measures `samples` one-way latencies (1 to [`MAX_CALIBRATION_SAMPLES`]) from host `from`
    /// to host `to` across the bridge, idle, with lane-marked datagrams sent one at a time
    /// (see `lane_testbed`'s module documentation).
    pub fn calibrate(&self, from: usize, to: usize, samples: u64) -> Result<Calibration, LaneTestbedError> {
        self.calibrate_on(from, to, samples, CalibrationPath::Udp)
    }

    /// As [`Self::calibrate`], the datagrams sent and received on `path`.
    pub fn calibrate_on(
        &self,
        from: usize,
        to: usize,
        samples: u64,
        path: CalibrationPath,
    ) -> Result<Calibration, LaneTestbedError> {
        let fail = |what: String| LaneTestbedError::Calibration { from, to, what };
        if from == to {
            return Err(fail("the two hosts must differ".into()));
        }
        if !(1..=MAX_CALIBRATION_SAMPLES).contains(&samples) {
            return Err(fail(format!("samples must be from 1 to {MAX_CALIBRATION_SAMPLES}, got {samples}")));
        }
        // Both on the lane's addresses: the lane's own path when the testbed has one.
        let sender = self.lane_socket(from, 0)?;
        let receiver = self.lane_socket(to, 0)?;
        let local = |s: &UdpSocket| {
            s.local_addr().map_err(|source| TestbedError::Io { what: "getsockname".into(), source })
        };
        let (sender_addr, receiver_addr): (SocketAddr, SocketAddr) = (local(&sender)?, local(&receiver)?);
        let (mut latencies, lost) = match path {
            CalibrationPath::Udp => {
                let mut tx = UdpPort::new(sender, receiver_addr, 1 << 20)?;
                let mut rx = UdpPort::new(receiver, sender_addr, 1 << 20)?;
                one_way(&mut tx, &mut rx, samples)?
            }
            CalibrationPath::PacketRing => {
                let (SocketAddr::V4(tx_addr), SocketAddr::V4(rx_addr)) = (sender_addr, receiver_addr) else {
                    return Err(fail("the hosts' sockets are not IPv4".into()));
                };
                // The sockets stay bound (their ports reachable: no ICMP errors from the
                // kernel's stack, which sees the datagrams too), dropping what they receive.
                for s in [&sender, &receiver] {
                    options::drop_all_received(s)
                        .map_err(|source| TestbedError::Io { what: "SO_ATTACH_FILTER".into(), source })?;
                }
                let ring = |host: usize, addr: SocketAddrV4| {
                    let config = RingConfig {
                        rx: RxLayout::Frames { count: 256 },
                        tx_frames: 64,
                        ethertype: kairos_sys::net::packet_ring::ETH_P_IP,
                        ..Default::default()
                    };
                    self.in_host(host, || AfPacketSocket::open(self.lane_device(), addr, config))?
                        .map_err(|e| fail(e.to_string()))
                };
                let (mut tx_ring, mut rx_ring) = (ring(from, tx_addr)?, ring(to, rx_addr)?);
                tx_ring.set_tos(LANE_TOS);
                // Each other's hardware address, as the rings report it: no ARP needed.
                tx_ring.set_neighbour(*rx_addr.ip(), rx_ring.local().mac);
                rx_ring.set_neighbour(*tx_addr.ip(), tx_ring.local().mac);
                let port = |ring, peer| AfPacketPort::new(ring, peer).map_err(|e| fail(e.to_string()));
                let (mut tx, mut rx) = (port(tx_ring, rx_addr)?, port(rx_ring, tx_addr)?);
                one_way(&mut tx, &mut rx, samples)?
            }
        };
        Calibration::from_latencies(from, to, &mut latencies, lost)
            .ok_or_else(|| fail(format!("none of {samples} datagrams arrived")))
    }
}
