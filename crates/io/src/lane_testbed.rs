//! The express lane's testbed network: N hosts, each a network namespace, joined by a Linux
//! bridge in a namespace of its own (the switch), where lane packets have strict priority over
//! everything else at every egress queue. It owns the namespaces, the veth pairs, the bridge and
//! the queueing disciplines, and removes them all (by removing the namespaces) on drop, after a
//! panic, on SIGINT, SIGTERM or SIGHUP (through [`kairos_sys::cleanup`]), and, for a run that was
//! killed, at the next creation: namespaces are named `<prefix>-<pid>-sw` and
//! `<prefix>-<pid>-h<i>`, and those whose process is gone are stale. Every `ip` and `tc` command
//! runs as a [`kairos_sys::child::OwnedChild`].
//!
//! # The network
//!
//! Host `i` holds the veth end `to-sw` with address `10.212.0.<i+1>/24` (a private range used
//! only inside these namespaces; the two-namespace [`crate::testbed`] uses `10.211.0.0/24`); its
//! peer `to-h<i>` is a port of the bridge `br0` in the switch namespace. IPv6 address generation
//! is off on every device, so nothing but what a test or node sends crosses the network.
//!
//! Every egress, the host end of each veth and each bridge port (the switch's egress toward a
//! host), has the same queueing: an `htb` root (`1:`) with one class at the link rate (`1:1`,
//! the shaping: a veth has no rate of its own), under it the lane class `1:10` at priority 0
//! and rate the link's, and the bulk class `1:20` at priority 1, with an assured rate of
//! 8 kbit/s and the link rate as ceiling; bulk is the default class. Each has a `pfifo` leaf
//! (`10:`, `20:`) of the configured limit. The lane class is always under its rate (the lane is
//! admitted below the link's bandwidth), so HTB serves it first; bulk sends almost only by
//! borrowing the parent's spare tokens, which it gets when the lane has nothing queued: strict
//! priority, apart from the one bulk packet already on its way.
//!
//! # Classification: the DSCP byte, not the socket priority
//!
//! A `u32` filter on the root puts IPv4 packets whose DSCP is EF (type-of-service byte `0xb8`
//! under the mask `0xfc`, so ECN bits do not matter) in the lane class; lane sockets set
//! `IP_TOS` to [`LANE_TOS`] ([`mark_lane_socket`]), which any user may do. The source's way,
//! `SO_PRIORITY` set to the lane class's id (HTB takes a packet whose `skb->priority` names one
//! of its leaves without a filter), works only at the sending host's own egress: measured on
//! this kernel (6.18), 100 datagrams sent with `SO_PRIORITY` 1:10 from h0 to h1 were counted in
//! the lane class of h0's `to-sw` and in the bulk class of the bridge port `to-h1`, since the
//! veth that hands a packet to the switch's namespace resets `skb->priority` to 0; 100 with
//! `IP_TOS` 0xb8 and the filter were counted in the lane class at both. The byte travels in the
//! IP header, so every egress, in any namespace, reads the same mark. (`SO_PRIORITY` above 6
//! also needs `CAP_NET_ADMIN`, which a node's process should not need.)
//!
//! # Calibration
//!
//! [`LaneTestbed::calibrate`] sends small UDP datagrams one at a time from one host to another
//! across the bridge, idle, each stamped with `CLOCK_MONOTONIC` as it is sent; the receiving
//! socket is read by a spinning non-blocking loop and each datagram's time is the kernel's
//! software receive stamp ([`crate::UdpPort`]'s), taken as the datagram enters the receiving
//! host's stack. So a sample is both hops (host to switch, switch to host) with the sender's
//! stack, both queueing disciplines and the bridge, without the receiver's wake-up, which is the
//! endhost's business, not the link's. The topology's `min_delay` of each link is half the
//! minimum (the two hops are alike) less the transmission time of a full frame ([`MTU_BYTES`])
//! at the link rate, at least 0; its `max_jitter` half of [`JITTER_PERCENTILE`] less that
//! `min_delay`, rounded up.
//!
//! Why less a frame's transmission: the lane's model (`kairos_lane::te`) charges every hop the
//! packet's transmission time at the link rate, in the minimum latency as in the maximum, as a
//! wire takes it. A veth takes none: HTB shapes by a token bucket, and a lone packet finds
//! tokens and passes at once, so only a backlog drains at the rate. Measured on the testbed
//! (three hosts, 1 Gbit/s, 128-byte lane packets), a `min_delay` of half the minimum put the
//! model's minimum above a third of the first receiver's packets. A hop's minimum delay plus
//! the transmission of any lane packet (at most a frame) must stay at or below what the wire
//! does, so the frame's transmission comes off the measured minimum; the jitter takes it back,
//! so a hop's latest arrival (`min_delay + max_jitter`, plus the transmission and the wait the
//! model adds) is as before. At 1 Gbit/s a frame takes 12 us, more than a hop's measured
//! minimum here, so `min_delay` is 0 and the model's minimum is the transmission alone.
//!
//! [`LaneTestbed::calibrate_on`] with [`CalibrationPath::PacketRing`] measures the same path on
//! packet rings, as a lane node on the packet transport sends and receives: the sender's qdisc
//! and UDP layer skipped, the ring's stamp as the frame reaches the receiver (about 0.3 us less
//! at the median than the UDP sockets' path here). The model's minimum stays the transmission
//! alone, which the ring's fastest lane packets (1.3 us against 1.7 us modelled) beat: a hop's
//! transmission is still more than a veth takes.
//!
//! The calibration is idle, as the link parameters are meant: with nothing else queued, both
//! hops run inside the sender's system call (the veths hand packets on in software). Under
//! load the same CPUs also carry the bulk traffic's softirq work, so lane packets see more
//! jitter than the idle figure even with their class served first (the strict-priority test in
//! `tests/lane_testbed.rs` prints both). On the testbed a packet's whole path runs on the
//! sending core, in its send call, so what load adds there is that core's jitter, which the
//! lane's node measures when it starts and adds to what it promises (`kairos_lane::node::promise`).
//!
//! A virtual machine gives no hard bound on delay: its vCPUs are descheduled by the host for
//! milliseconds at a time, so the largest of a few thousand samples measures the host's
//! scheduler on that run, not the network, and the next run would exceed it. The analysis
//! needs a bound, so the calibration takes a high percentile: p99.9 (p99 would leave one packet
//! in a hundred outside the bounds; the maximum would make every bound milliseconds and the
//! lane pointless here). Bounds computed from it hold for the packets inside that percentile,
//! not for all: that is a property of the machine, said in the topology file it goes into.
//!
//! Needs root (`CAP_NET_ADMIN`, `ip` and `tc` from iproute2); without it,
//! [`LaneTestbed::create`] says so.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::sync::Mutex;

use kairos_sys::cleanup::{self, Registration};
use kairos_sys::clock::monotonic_ns;
use kairos_sys::net::options;

use kairos_sys::net::{RingConfig, RxLayout};

use crate::af_packet::{AfPacketPort, AfPacketSocket};
use crate::packet::{Kind, Packet};
use crate::port::{Port, PortError};
use crate::testbed::{
    TestbedError, ip, remove_namespaces, remove_stale_namespaces, run_in_namespace, socket_in, tool,
};
use crate::udp::UdpPort;

/// The type-of-service byte lane sockets set: DSCP EF (46) in the top six bits.
pub const LANE_TOS: u8 = 46 << 2;
/// The mask the filter reads the byte through: DSCP only, whatever the ECN bits.
const DSCP_MASK: u8 = 0xfc;

/// The class every egress shapes to the link rate.
pub const LINK_CLASS: &str = "1:1";
/// The lane's class: priority 0, the link rate.
pub const LANE_CLASS: &str = "1:10";
/// Everything else (the default class): priority 1, borrowing what the lane leaves.
pub const BULK_CLASS: &str = "1:20";
/// The bulk class's own assured rate: the least HTB keeps exact, so bulk gets the link only by
/// borrowing, after the lane.
pub const BULK_ASSURED_BPS: u64 = 8_000;

/// The bytes a queued packet is counted as in the topology's queue size: the veths' MTU.
pub const MTU_BYTES: u64 = 1500;
/// The percentile of the calibration the jitter is taken at (see the module documentation).
pub const JITTER_PERCENTILE: f64 = 99.9;

/// The fewest and most hosts.
pub const MIN_HOSTS: usize = 2;
/// The most hosts (addresses and port names stay short; creation stays within seconds).
pub const MAX_HOSTS: usize = 16;
/// The slowest and fastest link rate, bits per second.
pub const MIN_RATE_BPS: u64 = 1_000_000;
/// The fastest link rate: far past what a veth carries here, so the shaping is what limits.
pub const MAX_RATE_BPS: u64 = 100_000_000_000;
/// The longest queue limit, packets.
pub const MAX_QUEUE_LIMIT: u32 = 100_000;
/// The longest name prefix (namespace names add the process id and the role).
pub const MAX_PREFIX_LEN: usize = 24;

/// Every namespace, process-wide, starts with this: so a stale one is known to be Kairos's.
const PREFIX_START: &str = "kairos";
/// The host's end of its veth.
pub const HOST_DEVICE: &str = "to-sw";
/// The bridge in the switch namespace.
pub const BRIDGE: &str = "br0";
/// The name of the switch in the topology.
pub const SWITCH_NAME: &str = "sw";

/// The address of host `i`.
pub fn host_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 212, 0, (i + 1) as u8)
}

/// The nftables table a host's namespace holds while [`LaneTestbed::block_udp_port`] blocks.
const NFT_TABLE: &str = "kairos_testbed";

/// Whether `nft` (nftables), which [`LaneTestbed::block_udp_port`] runs, is installed.
pub fn nftables_available() -> bool {
    tool("nft", &["--version"]).is_ok()
}

/// Sets what lane sockets must set for their packets to take the lane class at every egress:
/// `IP_TOS` = [`LANE_TOS`].
pub fn mark_lane_socket(socket: &UdpSocket) -> std::io::Result<()> {
    options::set_type_of_service(socket, LANE_TOS)
}

/// What to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneTestbedConfig {
    /// Hosts, [`MIN_HOSTS`] to [`MAX_HOSTS`].
    pub hosts: usize,
    /// The rate every veth is shaped to, bits per second.
    pub rate_bps: u64,
    /// The lane class's `pfifo` limit, packets.
    pub lane_limit: u32,
    /// The bulk class's `pfifo` limit, packets.
    pub bulk_limit: u32,
    /// Namespace names start with it: `kairos` followed by lower-case letters, digits and
    /// dashes, at most [`MAX_PREFIX_LEN`] bytes.
    pub prefix: String,
}

impl Default for LaneTestbedConfig {
    /// Two hosts, 1 Gbit/s, a lane queue of 64 packets and a bulk queue of 1000 (a veth's
    /// `txqueuelen`), prefix `kairos`.
    fn default() -> Self {
        Self { hosts: 2, rate_bps: 1_000_000_000, lane_limit: 64, bulk_limit: 1000, prefix: "kairos".into() }
    }
}

impl LaneTestbedConfig {
    /// Checks every field against its limit; the error names the field and the limit.
    pub fn check(&self) -> Result<(), LaneTestbedConfigError> {
        if !(MIN_HOSTS..=MAX_HOSTS).contains(&self.hosts) {
            return Err(LaneTestbedConfigError::Hosts { hosts: self.hosts });
        }
        if !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&self.rate_bps) {
            return Err(LaneTestbedConfigError::Rate { rate_bps: self.rate_bps });
        }
        for (class, limit) in [("lane", self.lane_limit), ("bulk", self.bulk_limit)] {
            if !(1..=MAX_QUEUE_LIMIT).contains(&limit) {
                return Err(LaneTestbedConfigError::QueueLimit { class, limit });
            }
        }
        let p = &self.prefix;
        let allowed = p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !p.starts_with(PREFIX_START) || !allowed || p.ends_with('-') || p.len() > MAX_PREFIX_LEN {
            return Err(LaneTestbedConfigError::Prefix { prefix: p.clone() });
        }
        Ok(())
    }

    /// The lane class's queue in bytes, as the lane's topology counts it: the limit in packets
    /// of [`MTU_BYTES`].
    pub fn lane_queue_bytes(&self) -> u64 {
        u64::from(self.lane_limit) * MTU_BYTES
    }
}

/// A [`LaneTestbedConfig`] field past its limit ([`LaneTestbedConfig::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneTestbedConfigError {
    /// The number of hosts is outside [`MIN_HOSTS`] to [`MAX_HOSTS`].
    #[error("hosts must be from {MIN_HOSTS} to {MAX_HOSTS}, got {hosts}")]
    Hosts {
        /// The number asked for.
        hosts: usize,
    },
    /// The link rate is outside [`MIN_RATE_BPS`] to [`MAX_RATE_BPS`].
    #[error(
        "the link rate must be from {} to {} Mbit/s, got {rate_bps} bit/s",
        MIN_RATE_BPS / 1_000_000,
        MAX_RATE_BPS / 1_000_000
    )]
    Rate {
        /// The rate asked for, bits per second.
        rate_bps: u64,
    },
    /// A class's `pfifo` limit is outside 1 to [`MAX_QUEUE_LIMIT`] packets.
    #[error("the {class} queue limit must be from 1 to {MAX_QUEUE_LIMIT} packets, got {limit}")]
    QueueLimit {
        /// The class: `lane` or `bulk`.
        class: &'static str,
        /// The limit asked for, packets.
        limit: u32,
    },
    /// The namespace name prefix is not `kairos` followed by lower-case letters, digits and
    /// dashes, or is longer than [`MAX_PREFIX_LEN`] bytes.
    #[error(
        "the name prefix must start with `{PREFIX_START}`, hold only a-z, 0-9 and dashes, not end with a dash, and be at most {MAX_PREFIX_LEN} bytes, got `{prefix}`"
    )]
    Prefix {
        /// The prefix asked for.
        prefix: String,
    },
}

/// Why a lane testbed could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum LaneTestbedError {
    /// The process is not root; making namespaces needs `CAP_NET_ADMIN`.
    #[error(
        "the lane testbed makes network namespaces, a bridge and queueing disciplines, which need root (CAP_NET_ADMIN): run as root"
    )]
    NotRoot,
    /// The configuration is past a limit ([`LaneTestbedConfig::check`]).
    #[error(transparent)]
    Config(#[from] LaneTestbedConfigError),
    /// Another testbed of this process holds the prefix (the prefix).
    #[error("a lane testbed with prefix `{0}` is already up in this process: give another prefix")]
    PrefixInUse(String),
    /// A host index past the testbed's hosts.
    #[error("no host {host}: the testbed has {hosts}")]
    NoHost {
        /// The index asked for.
        host: usize,
        /// How many hosts the testbed has.
        hosts: usize,
    },
    /// An `ip` or `tc` command, or a socket in a namespace, failed.
    #[error(transparent)]
    Setup(#[from] TestbedError),
    /// A calibration port failed to send or receive.
    #[error("calibration: {0}")]
    Port(#[from] PortError),
    /// A calibration could not be run (the same host twice, samples past the limit, a packet
    /// ring that could not be opened).
    #[error("calibration from h{from} to h{to}: {what}")]
    Calibration {
        /// The sending host's index.
        from: usize,
        /// The receiving host's index.
        to: usize,
        /// What went wrong.
        what: String,
    },
    /// `tc -s class show` printed no counters for the lane and bulk classes.
    #[error("class counters of {device} in {namespace}: {what}")]
    Counters {
        /// The namespace of the egress.
        namespace: String,
        /// The device of the egress.
        device: String,
        /// What was wrong with `tc`'s output.
        what: String,
    },
}

/// One host: its names and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneHost {
    /// Its name in the topology: `h<i>`.
    pub name: String,
    /// Its network namespace (`ip netns exec <namespace> ...`).
    pub namespace: String,
    /// Its address on [`HOST_DEVICE`] (a /24).
    pub address: Ipv4Addr,
    /// Its veth peer, a port of the bridge in the switch namespace: `to-h<i>`.
    pub switch_port: String,
}

/// An egress queue of the testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Egress {
    /// Host `i`'s [`HOST_DEVICE`]: toward the switch.
    Host(usize),
    /// The bridge port toward host `i`.
    SwitchPort(usize),
}

/// A class's counters (`tc -s class show`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassCount {
    /// Packets it sent.
    pub packets: u64,
    /// Bytes it sent (with the Ethernet header).
    pub bytes: u64,
    /// Packets its queue dropped.
    pub dropped: u64,
}

/// The lane and bulk classes' counters at one egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassCounters {
    /// [`LANE_CLASS`].
    pub lane: ClassCount,
    /// [`BULK_CLASS`].
    pub bulk: ClassCount,
}

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
    /// hops) less a frame's transmission at that rate, which the lane's model adds to every hop
    /// and a veth does not take (see the module documentation); at least 0.
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

/// What the lane's controller needs of the testbed, as plain data (the lane's `Topology` is a
/// layer above): hosts and the switch, and every host's duplex link to it, all alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestbedTopology {
    /// The switch's name: [`SWITCH_NAME`].
    pub switch: String,
    /// The hosts' names, `h0` onward; each has a link to the switch and one back.
    pub hosts: Vec<String>,
    /// Every link's bandwidth: the shaped rate.
    pub bandwidth_bps: u64,
    /// Every link's egress queue for the lane: the lane limit in MTU-sized packets.
    pub queue_bytes: u64,
    /// Every link's minimum delay ([`Calibration::min_delay_per_link_ns`]).
    pub min_delay_ns: u64,
    /// Every link's jitter ([`Calibration::max_jitter_per_link_ns`]).
    pub max_jitter_ns: u64,
}

/// The prefixes of the lane testbeds up in this process: a second one with the same prefix
/// would make the same namespace names, and its removal would remove the first one's.
static LIVE_PREFIXES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// This process's claim on a prefix, given back on drop.
#[derive(Debug)]
struct PrefixClaim(String);

impl PrefixClaim {
    fn take(prefix: &str) -> Result<Self, LaneTestbedError> {
        let mut live = LIVE_PREFIXES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if live.iter().any(|p| p == prefix) {
            return Err(LaneTestbedError::PrefixInUse(prefix.to_string()));
        }
        live.push(prefix.to_string());
        Ok(Self(prefix.to_string()))
    }
}

impl Drop for PrefixClaim {
    fn drop(&mut self) {
        let mut live = LIVE_PREFIXES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        live.retain(|p| *p != self.0);
    }
}

/// The process id a lane testbed's namespace is named after (`kairos...-<pid>-sw` or
/// `kairos...-<pid>-h<i>`); `None` for any other name, the two-namespace testbed's included.
fn owner_of(name: &str) -> Option<u32> {
    if !name.starts_with(PREFIX_START) {
        return None;
    }
    let (rest, role) = name.rsplit_once('-')?;
    let host = role.strip_prefix('h').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if role != SWITCH_NAME && !host {
        return None;
    }
    rest.rsplit_once('-')?.1.parse().ok()
}

/// What a calibration's datagrams travel on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CalibrationPath {
    /// UDP sockets, the kernel stamping each datagram as it reaches the receiver's socket.
    #[default]
    Udp,
    /// Memory-mapped packet rings ([`crate::af_packet`]) on the hosts' [`HOST_DEVICE`], as a
    /// lane node on the packet transport sends and receives: the qdisc and the UDP layers
    /// skipped, the ring's stamp taken as the frame reaches it.
    PacketRing,
}

/// Sends `samples` packets (after [`CALIBRATION_WARMUP`] more) from `tx` to `rx` one at a
/// time, each awaited up to [`CALIBRATION_TIMEOUT_NS`]; returns their one-way latencies (the
/// sender's clock before the send to the receiver's kernel stamp, ns; a packet whose stamp is
/// not after its send is left out) and how many were lost.
fn one_way(tx: &mut dyn Port, rx: &mut dyn Port, samples: u64) -> Result<(Vec<u64>, u64), PortError> {
    let mut latencies = Vec::with_capacity(samples as usize);
    let mut lost = 0;
    let mut arrived = [Packet::default(); 1];
    for seq in 0..CALIBRATION_WARMUP + samples {
        let kind = if seq < CALIBRATION_WARMUP { Kind::Warmup } else { Kind::Data };
        let packet = Packet { kind, seq, sent_ns: monotonic_ns(), ..Packet::default() };
        let sent = tx.tx_burst(&[packet])? == 1;
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
        match (kind, latency) {
            (Kind::Warmup, _) => {}
            (_, Some(Some(ns))) => latencies.push(ns),
            // Arrived with a receive stamp not after its send: not a measurement (a packet
            // ring now and then reports a frame's stamp from before it was sent); left out.
            (_, Some(None)) => {}
            (_, None) => lost += 1,
        }
    }
    Ok((latencies, lost))
}

/// The testbed: namespaces, veths, the bridge and the classes, removed when dropped.
#[derive(Debug)]
pub struct LaneTestbed {
    config: LaneTestbedConfig,
    switch_namespace: String,
    hosts: Vec<LaneHost>,
    /// The namespaces' removal, should a signal end the process first.
    removal: Option<Registration>,
    /// Dropped after the namespaces are gone (fields drop after `Drop::drop`).
    _claim: PrefixClaim,
}

impl LaneTestbed {
    /// Makes the testbed `config` describes: checks it, removes stale namespaces of killed
    /// runs, then makes the namespaces, the bridge, the veths and every egress's classes.
    pub fn create(config: LaneTestbedConfig) -> Result<Self, LaneTestbedError> {
        config.check()?;
        if !kairos_sys::user::is_root() {
            return Err(LaneTestbedError::NotRoot);
        }
        let claim = PrefixClaim::take(&config.prefix)?;
        remove_stale_namespaces(owner_of);
        let (prefix, pid) = (&config.prefix, std::process::id());
        let switch_namespace = format!("{prefix}-{pid}-{SWITCH_NAME}");
        let hosts: Vec<LaneHost> = (0..config.hosts)
            .map(|i| LaneHost {
                name: format!("h{i}"),
                namespace: format!("{prefix}-{pid}-h{i}"),
                address: host_address(i),
                switch_port: format!("to-h{i}"),
            })
            .collect();
        let mut names: Vec<String> = hosts.iter().map(|h| h.namespace.clone()).collect();
        names.push(switch_namespace.clone());
        // Registered before the first namespace exists, so a failure half-way is undone by
        // drop and a signal by the handler.
        let removal = {
            let _hold = cleanup::hold_off();
            cleanup::register(format!("network namespaces {}", names.join(", ")), move || {
                remove_namespaces(&names)
            })
        };
        let bed = LaneTestbed { config, switch_namespace, hosts, removal: Some(removal), _claim: claim };
        bed.build()?;
        Ok(bed)
    }

    fn build(&self) -> Result<(), LaneTestbedError> {
        let sw = self.switch_namespace.as_str();
        for ns in std::iter::once(sw).chain(self.hosts.iter().map(|h| h.namespace.as_str())) {
            // Each namespace is made under a hold: a signal's handler then either removes it
            // or finds it not yet made, never made just after its removal.
            let _hold = cleanup::hold_off();
            ip(&["netns", "add", ns])?;
        }
        ip(&["-n", sw, "link", "add", BRIDGE, "type", "bridge"])?;
        ip(&["-n", sw, "link", "set", "dev", BRIDGE, "addrgenmode", "none", "up"])?;
        for host in &self.hosts {
            let (ns, port) = (host.namespace.as_str(), host.switch_port.as_str());
            ip(&[
                "link",
                "add",
                HOST_DEVICE,
                "netns",
                ns,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                sw,
            ])?;
            ip(&["-n", ns, "addr", "add", &format!("{}/24", host.address), "dev", HOST_DEVICE])?;
            ip(&["-n", ns, "link", "set", "dev", HOST_DEVICE, "addrgenmode", "none", "up"])?;
            ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
            ip(&["-n", sw, "link", "set", "dev", port, "master", BRIDGE, "addrgenmode", "none", "up"])?;
            self.shape(ns, HOST_DEVICE)?;
            self.shape(sw, port)?;
        }
        Ok(())
    }

    /// The classes and the lane filter on the egress of `device` in `namespace`.
    fn shape(&self, namespace: &str, device: &str) -> Result<(), LaneTestbedError> {
        let rate = format!("{}bit", self.config.rate_bps);
        let bulk_rate = format!("{BULK_ASSURED_BPS}bit");
        let (lane_limit, bulk_limit) =
            (self.config.lane_limit.to_string(), self.config.bulk_limit.to_string());
        let bulk_minor = BULK_CLASS.rsplit(':').next().unwrap_or("20");
        // An explicit quantum (one full frame) keeps the kernel from deriving one from the rate
        // and logging that it is too big (the lane) or too small (bulk).
        let quantum = (MTU_BYTES + 14).to_string();
        let tc = |args: &[&str]| -> Result<(), TestbedError> {
            let mut all = vec!["-n", namespace];
            all.extend_from_slice(args);
            tool("tc", &all).map(drop)
        };
        tc(&["qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", bulk_minor])?;
        tc(&["class", "add", "dev", device, "parent", "1:", "classid", LINK_CLASS, "htb", "rate", &rate])?;
        tc(&[
            "class", "add", "dev", device, "parent", LINK_CLASS, "classid", LANE_CLASS, "htb", "rate", &rate,
            "ceil", &rate, "prio", "0", "quantum", &quantum,
        ])?;
        tc(&[
            "class", "add", "dev", device, "parent", LINK_CLASS, "classid", BULK_CLASS, "htb", "rate",
            &bulk_rate, "ceil", &rate, "prio", "1", "quantum", &quantum,
        ])?;
        for (class, handle, limit) in [(LANE_CLASS, "10:", &lane_limit), (BULK_CLASS, "20:", &bulk_limit)] {
            tc(&["qdisc", "add", "dev", device, "parent", class, "handle", handle, "pfifo", "limit", limit])?;
        }
        let (tos, mask) = (format!("{LANE_TOS:#04x}"), format!("{DSCP_MASK:#04x}"));
        tc(&[
            "filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
            "ip", "dsfield", &tos, &mask, "flowid", LANE_CLASS,
        ])?;
        Ok(())
    }

    /// What was made.
    pub fn config(&self) -> &LaneTestbedConfig {
        &self.config
    }

    /// The hosts, `h0` onward.
    pub fn hosts(&self) -> &[LaneHost] {
        &self.hosts
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> Result<&LaneHost, LaneTestbedError> {
        self.hosts.get(i).ok_or(LaneTestbedError::NoHost { host: i, hosts: self.hosts.len() })
    }

    /// The namespace that holds the bridge ([`BRIDGE`]) and its ports.
    pub fn switch_namespace(&self) -> &str {
        &self.switch_namespace
    }

    /// A UDP socket of host `i` bound to `port` (0: any), unmarked: its packets take the bulk
    /// class.
    pub fn socket(&self, i: usize, port: u16) -> Result<UdpSocket, LaneTestbedError> {
        let host = self.host(i)?;
        Ok(socket_in(&host.namespace, SocketAddrV4::new(host.address, port))?)
    }

    /// A UDP socket of host `i` bound to `port` (0: any), marked ([`mark_lane_socket`]): its
    /// packets take the lane class at every egress.
    pub fn lane_socket(&self, i: usize, port: u16) -> Result<UdpSocket, LaneTestbedError> {
        let socket = self.socket(i, port)?;
        mark_lane_socket(&socket)
            .map_err(|source| TestbedError::Io { what: "setsockopt IP_TOS".into(), source })?;
        Ok(socket)
    }

    /// Runs `work` on a thread inside host `i`'s namespace and returns what it returned
    /// (sockets it makes stay there).
    pub fn in_host<T: Send>(&self, i: usize, work: impl FnOnce() -> T + Send) -> Result<T, LaneTestbedError> {
        Ok(run_in_namespace(&self.host(i)?.namespace, work)?)
    }

    /// Takes the bridge's port to host `i` down (`up: false`) or back up: the host is cut off
    /// from every other, and they from it.
    pub fn set_host_link(&self, i: usize, up: bool) -> Result<(), LaneTestbedError> {
        let port = &self.host(i)?.switch_port;
        let state = if up { "up" } else { "down" };
        Ok(ip(&["-n", &self.switch_namespace, "link", "set", "dev", port, state])?)
    }

    /// Drops UDP to and from `port` in host `i`'s namespace (`blocked: true`; an nftables table
    /// of the testbed's own, input and output) or lifts it: the host's other traffic flows on.
    /// Needs `nft` ([`nftables_available`]).
    pub fn block_udp_port(&self, i: usize, port: u16, blocked: bool) -> Result<(), LaneTestbedError> {
        let ns = &self.host(i)?.namespace;
        let rules = if blocked {
            format!(
                "table inet {NFT_TABLE} {{ \
                 chain input {{ type filter hook input priority 0; policy accept; udp dport {port} drop; }}; \
                 chain output {{ type filter hook output priority 0; policy accept; udp dport {port} drop; }}; }}"
            )
        } else {
            format!("delete table inet {NFT_TABLE}")
        };
        Ok(ip(&["netns", "exec", ns, "nft", &rules])?)
    }

    /// A command that runs `program` inside host `i`'s namespace (`ip netns exec`, which execs
    /// it in place); add its arguments and start it as a [`kairos_sys::child::OwnedChild`].
    pub fn host_command(&self, i: usize, program: &str) -> Result<Command, LaneTestbedError> {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.host(i)?.namespace, program]);
        Ok(command)
    }

    /// The namespace and device of an egress.
    pub fn egress(&self, egress: Egress) -> Result<(&str, &str), LaneTestbedError> {
        match egress {
            Egress::Host(i) => Ok((&self.host(i)?.namespace, HOST_DEVICE)),
            Egress::SwitchPort(i) => Ok((&self.switch_namespace, &self.host(i)?.switch_port)),
        }
    }

    /// The lane and bulk classes' counters at `egress`.
    pub fn class_counters(&self, egress: Egress) -> Result<ClassCounters, LaneTestbedError> {
        let (namespace, device) = self.egress(egress)?;
        let text = tool("tc", &["-n", namespace, "-s", "class", "show", "dev", device])?;
        parse_class_counters(&text).map_err(|what| LaneTestbedError::Counters {
            namespace: namespace.into(),
            device: device.into(),
            what: what.to_string(),
        })
    }

    /// Measures `samples` one-way latencies (1 to [`MAX_CALIBRATION_SAMPLES`]) from host `from`
    /// to host `to` across the bridge, idle, with lane-marked datagrams sent one at a time
    /// (see the module documentation).
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
        let sender = self.lane_socket(from, 0)?;
        let receiver = self.socket(to, 0)?;
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
                    self.in_host(host, || AfPacketSocket::open(HOST_DEVICE, addr, config))?
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

    /// The lane's view of the testbed with the delays `calibration` measured.
    pub fn topology(&self, calibration: &Calibration) -> TestbedTopology {
        TestbedTopology {
            switch: SWITCH_NAME.into(),
            hosts: self.hosts.iter().map(|h| h.name.clone()).collect(),
            bandwidth_bps: self.config.rate_bps,
            queue_bytes: self.config.lane_queue_bytes(),
            min_delay_ns: calibration.min_delay_per_link_ns(self.config.rate_bps),
            max_jitter_ns: calibration.max_jitter_per_link_ns(self.config.rate_bps),
        }
    }

    fn namespaces(&self) -> Vec<String> {
        let mut names: Vec<String> = self.hosts.iter().map(|h| h.namespace.clone()).collect();
        names.push(self.switch_namespace.clone());
        names
    }
}

impl Drop for LaneTestbed {
    fn drop(&mut self) {
        // Withdrawn and removed under one hold: a signal now is handled once all are gone. The
        // veths, the bridge and the queueing disciplines go with their namespaces.
        let _hold = cleanup::hold_off();
        drop(self.removal.take());
        remove_namespaces(&self.namespaces());
    }
}

/// What `tc -s class show` printed that is not the two classes' counters.
#[derive(Debug, thiserror::Error)]
enum CountersParseError {
    /// A counter that is not a number.
    #[error("{text}: {source}")]
    Number {
        /// The word.
        text: String,
        /// Why it is not a count.
        source: std::num::ParseIntError,
    },
    /// One of the classes has no counters in the output.
    #[error("no counters of classes {LANE_CLASS} and {BULK_CLASS} in: {output}")]
    Missing {
        /// The output, trimmed.
        output: String,
    },
}

/// The lane and bulk classes' counters from `tc -s class show` output.
fn parse_class_counters(text: &str) -> Result<ClassCounters, CountersParseError> {
    let mut lane = None;
    let mut bulk = None;
    let mut class = "";
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["class", _kind, id, ..] => class = id,
            ["Sent", bytes, "bytes", packets, "pkt", "(dropped", dropped, ..] => {
                let number = |s: &str| {
                    s.trim_end_matches(',')
                        .parse::<u64>()
                        .map_err(|source| CountersParseError::Number { text: s.into(), source })
                };
                let count = ClassCount {
                    packets: number(packets)?,
                    bytes: number(bytes)?,
                    dropped: number(dropped)?,
                };
                if class == LANE_CLASS {
                    lane = Some(count);
                } else if class == BULK_CLASS {
                    bulk = Some(count);
                }
            }
            _ => {}
        }
    }
    match (lane, bulk) {
        (Some(lane), Some(bulk)) => Ok(ClassCounters { lane, bulk }),
        _ => Err(CountersParseError::Missing { output: text.trim().into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_is_checked_field_by_field() {
        assert_eq!(LaneTestbedConfig::default().check(), Ok(()));
        let with = |change: fn(&mut LaneTestbedConfig)| {
            let mut config = LaneTestbedConfig::default();
            change(&mut config);
            config.check().unwrap_err().to_string()
        };
        assert!(with(|c| c.hosts = 1).contains("hosts must be from 2 to 16, got 1"));
        assert!(with(|c| c.hosts = 17).contains("got 17"));
        assert!(with(|c| c.rate_bps = 999_999).contains("from 1 to 100000 Mbit/s"));
        assert!(with(|c| c.lane_limit = 0).contains("lane queue limit"));
        assert!(with(|c| c.bulk_limit = MAX_QUEUE_LIMIT + 1).contains("bulk queue limit"));
        for prefix in ["other", "kairos-", "kairos/x", "Kairos", "kairos-a-very-long-prefix-x"] {
            let config = LaneTestbedConfig { prefix: prefix.into(), ..LaneTestbedConfig::default() };
            assert!(config.check().unwrap_err().to_string().contains("name prefix"), "{prefix}");
        }
        let config = LaneTestbedConfig { prefix: "kairos-prio2".into(), ..LaneTestbedConfig::default() };
        assert_eq!(config.check(), Ok(()));
        assert_eq!(config.lane_queue_bytes(), 64 * 1500);
    }

    #[test]
    fn stale_names_are_this_testbeds_only() {
        assert_eq!(owner_of("kairos-1234-sw"), Some(1234));
        assert_eq!(owner_of("kairos-1234-h15"), Some(1234));
        assert_eq!(owner_of("kairos-prio-77-h0"), Some(77));
        // The two-namespace testbed's, another tool's, and near misses.
        assert_eq!(owner_of("kairos-src-3-1234"), None);
        assert_eq!(owner_of("kairos-fwd-0-99"), None);
        assert_eq!(owner_of("other-1234-sw"), None);
        assert_eq!(owner_of("kairos-1234-h"), None);
        assert_eq!(owner_of("kairos-1234-hx"), None);
        assert_eq!(owner_of("kairos-x-sw"), None);
    }

    #[test]
    fn a_prefix_is_claimed_once_at_a_time() {
        let first = PrefixClaim::take("kairos-claim-test").unwrap();
        assert!(matches!(PrefixClaim::take("kairos-claim-test"), Err(LaneTestbedError::PrefixInUse(_))));
        drop(first);
        PrefixClaim::take("kairos-claim-test").unwrap();
    }

    #[test]
    fn the_lane_mark_is_dscp_ef() {
        assert_eq!(LANE_TOS, 0xb8);
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        mark_lane_socket(&socket).unwrap();
        assert_eq!(options::type_of_service(&socket).unwrap(), 0xb8);
    }

    #[test]
    fn counters_are_read_from_tc_output() {
        let text = "class htb 1:10 parent 1:1 leaf 10: prio 0 rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b \n Sent 7400 bytes 100 pkt (dropped 0, overlimits 14 requeues 0) \n backlog 0b 0p requeues 0\n\nclass htb 1:1 root rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b \n Sent 75792604 bytes 50666 pkt (dropped 0, overlimits 0 requeues 0) \n\nclass htb 1:20 parent 1:1 leaf 20: prio 1 rate 8Kbit ceil 100Mbit burst 1600b cburst 1600b \n Sent 75785204 bytes 50566 pkt (dropped 49094, overlimits 50052 requeues 0) \n";
        let counters = parse_class_counters(text).unwrap();
        assert_eq!(counters.lane, ClassCount { packets: 100, bytes: 7400, dropped: 0 });
        assert_eq!(counters.bulk, ClassCount { packets: 50566, bytes: 75785204, dropped: 49094 });
        assert!(
            parse_class_counters("class htb 1:1 root\n").unwrap_err().to_string().contains("no counters")
        );
    }

    #[test]
    fn calibration_figures_and_their_split_over_two_hops() {
        let mut latencies: Vec<u64> = (1..=1000).map(|i| 10_000 + i).collect();
        latencies.reverse();
        let c = Calibration::from_latencies(0, 1, &mut latencies, 2).unwrap();
        assert_eq!((c.samples, c.lost, c.min_ns, c.max_ns), (1000, 2, 10_001, 11_000));
        assert_eq!((c.p50_ns, c.p99_ns, c.p999_ns), (10_500, 10_990, 10_999));
        // A frame takes 1.2 us at 10 Gbit/s: off the minimum, onto the jitter.
        assert_eq!(transmission_ns(MTU_BYTES, 10_000_000_000), 1_200);
        assert_eq!(c.min_delay_per_link_ns(10_000_000_000), 5_000 - 1_200);
        assert_eq!(c.max_jitter_per_link_ns(10_000_000_000), 5_500 - 3_800);
        // At 1 Gbit/s a frame (12 us) takes longer than the hop: no minimum delay is left.
        assert_eq!(c.min_delay_per_link_ns(1_000_000_000), 0);
        assert_eq!(c.max_jitter_per_link_ns(1_000_000_000), 5_500);
        for rate in [1_000_000_000, 10_000_000_000, 100_000_000_000] {
            let (min, jitter) = (c.min_delay_per_link_ns(rate), c.max_jitter_per_link_ns(rate));
            // The model's minimum for any lane packet (at most a frame) is below the wire's...
            assert!(
                2 * (min + transmission_ns(MTU_BYTES, rate))
                    <= c.min_ns.max(2 * transmission_ns(MTU_BYTES, rate))
            );
            // ...and two hops' minimum and jitter add up to at least the percentile.
            assert!(2 * (min + jitter) >= c.p999_ns);
        }
        assert_eq!(transmission_ns(1, 3), 2_666_666_667, "rounded up");
        assert!(Calibration::from_latencies(0, 1, &mut [], 5).is_none());
    }
}
