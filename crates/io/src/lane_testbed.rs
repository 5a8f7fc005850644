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
//! # The lane's own path
//!
//! With [`LaneTestbedConfig::lane_path`], each host also has a [`LANE_DEVICE`] (address
//! `10.213.0.<i+1>/24`, [`lane_address`]) into a bridge of its own, [`LANE_BRIDGE`], shaped
//! alike, and every end of those veths receives in a kernel thread of its own (threaded NAPI)
//! that the host doctor pins to the lane's core at a real-time priority (`kairos doctor --apply
//! --lane-interface lane`): lane packets
//! then never wait in the bulk traffic's receive backlog. [`LaneTestbed::lane_socket`] binds
//! there, and [`LaneTestbed::lane_address`] and [`LaneTestbed::lane_device`] say where the lane
//! is. Why, and how the threads are found, is in `lane_path`'s documentation.
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

mod calibration;
mod classes;
mod lane_path;

pub use calibration::{
    CALIBRATION_TIMEOUT_NS, Calibration, CalibrationPath, MAX_CALIBRATION_SAMPLES, transmission_ns,
};
pub use classes::{BULK_ASSURED_BPS, BULK_CLASS, ClassCount, ClassCounters, LANE_CLASS, LINK_CLASS};
pub use lane_path::{LANE_BRIDGE, LANE_DEVICE, NapiThread, lane_address};

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::sync::Mutex;

use kairos_sys::cleanup::{self, Registration};
use kairos_sys::net::options;

use crate::port::PortError;
use crate::testbed::{
    TestbedError, ip, remove_namespaces, remove_stale_namespaces, run_in_namespace, socket_in, tool,
};

/// The type-of-service byte lane sockets set: DSCP EF (46) in the top six bits.
pub const LANE_TOS: u8 = 46 << 2;

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
    /// Whether lane traffic gets a path of its own: a second veth per host into a bridge of
    /// its own, each end's receive in a kernel thread that can be pinned and prioritised (the
    /// module documentation's "The lane's own path"). Without it, lane traffic shares each host's
    /// [`HOST_DEVICE`] with the bulk traffic, in the lane class of its queues.
    pub lane_path: bool,
}

impl Default for LaneTestbedConfig {
    /// Two hosts, 1 Gbit/s, a lane queue of 64 packets and a bulk queue of 1000 (a veth's
    /// `txqueuelen`), prefix `kairos`, the lane on the shared devices.
    fn default() -> Self {
        Self {
            hosts: 2,
            rate_bps: 1_000_000_000,
            lane_limit: 64,
            bulk_limit: 1000,
            prefix: "kairos".into(),
            lane_path: false,
        }
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
    /// A lane-path egress asked of a testbed without the lane's own path.
    #[error("the testbed has no lane path of its own (LaneTestbedConfig::lane_path)")]
    NoLanePath,
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
    /// Its lane veth's peer, a port of the lane's bridge, with the lane's own path: `lane-h<i>`.
    pub lane_switch_port: String,
}

/// An egress queue of the testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Egress {
    /// Host `i`'s [`HOST_DEVICE`]: toward the switch.
    Host(usize),
    /// The bridge port toward host `i`.
    SwitchPort(usize),
    /// Host `i`'s [`LANE_DEVICE`], with the lane's own path.
    LaneHost(usize),
    /// The lane bridge's port toward host `i`, with the lane's own path.
    LaneSwitchPort(usize),
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

/// The testbed: namespaces, veths, the bridge and the classes, removed when dropped.
#[derive(Debug)]
pub struct LaneTestbed {
    config: LaneTestbedConfig,
    switch_namespace: String,
    hosts: Vec<LaneHost>,
    /// The kernel threads serving the lane path's receive (none without it).
    napi_threads: Vec<NapiThread>,
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
                lane_switch_port: lane_path::lane_switch_port(i),
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
        let mut bed = LaneTestbed {
            config,
            switch_namespace,
            hosts,
            napi_threads: Vec::new(),
            removal: Some(removal),
            _claim: claim,
        };
        bed.build()?;
        if bed.config.lane_path {
            bed.build_lane_path()?;
        }
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
        self.add_bridge(BRIDGE)?;
        for host in &self.hosts {
            self.attach(BRIDGE, &host.namespace, HOST_DEVICE, host.address, &host.switch_port)?;
            ip(&["-n", &host.namespace, "link", "set", "dev", "lo", "up"])?;
        }
        Ok(())
    }

    /// Makes bridge `bridge` in the switch's namespace, up.
    fn add_bridge(&self, bridge: &str) -> Result<(), LaneTestbedError> {
        let sw = self.switch_namespace.as_str();
        ip(&["-n", sw, "link", "add", bridge, "type", "bridge"])?;
        ip(&["-n", sw, "link", "set", "dev", bridge, "addrgenmode", "none", "up"])?;
        Ok(())
    }

    /// Joins namespace `ns` to `bridge`: a veth whose end `device` in `ns` has `address`/24 and
    /// whose other end `port` is the bridge's, both up and both shaped ([`Self::shape`]).
    fn attach(
        &self,
        bridge: &str,
        ns: &str,
        device: &str,
        address: Ipv4Addr,
        port: &str,
    ) -> Result<(), LaneTestbedError> {
        let sw = self.switch_namespace.as_str();
        ip(&["link", "add", device, "netns", ns, "type", "veth", "peer", "name", port, "netns", sw])?;
        ip(&["-n", ns, "addr", "add", &format!("{address}/24"), "dev", device])?;
        ip(&["-n", ns, "link", "set", "dev", device, "addrgenmode", "none", "up"])?;
        ip(&["-n", sw, "link", "set", "dev", port, "master", bridge, "addrgenmode", "none", "up"])?;
        self.shape(ns, device)?;
        self.shape(sw, port)
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

    /// A UDP socket of host `i` bound to `port` (0: any) on its lane address
    /// ([`Self::lane_address`]), marked ([`mark_lane_socket`]): its packets take the lane's own
    /// path if the testbed has one, and the lane class at every egress.
    pub fn lane_socket(&self, i: usize, port: u16) -> Result<UdpSocket, LaneTestbedError> {
        let host = self.host(i)?;
        let socket = socket_in(&host.namespace, SocketAddrV4::new(self.lane_address(i)?, port))?;
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
            Egress::LaneHost(_) | Egress::LaneSwitchPort(_) if !self.config.lane_path => {
                Err(LaneTestbedError::NoLanePath)
            }
            Egress::LaneHost(i) => Ok((&self.host(i)?.namespace, LANE_DEVICE)),
            Egress::LaneSwitchPort(i) => {
                Ok((&self.switch_namespace, self.host(i)?.lane_switch_port.as_str()))
            }
        }
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

#[cfg(test)]
mod tests;
