//! The lane's own path through the testbed: a second veth per host ([`LANE_DEVICE`], address
//! [`lane_address`]) into a bridge of its own ([`LANE_BRIDGE`]) in the switch's namespace, so
//! lane packets share no queue, no bridge and no receive backlog with the bulk traffic; each
//! end's receive runs in a kernel thread of its own (threaded NAPI), which the host doctor pins
//! to the lane's core at a real-time priority (`kairos doctor --apply --lane-interface lane`,
//! `kairos_doctor::receive`).
//!
//! Why: on the shared path a veth hands each packet to the receiving side through the sending
//! core's backlog, processed in that core's softirq one packet after another, so a lane packet
//! waits behind the bulk flood's 64 KB segments already queued there; the strict-priority class
//! orders the qdiscs, not that backlog. A veth whose receiving end has GRO on takes packets
//! through NAPI instead (a ring per device, polled), and `threaded` NAPI
//! (`/sys/class/net/DEV/threaded`) polls it from a kernel thread, `napi/DEV-ID`, that can be
//! placed and prioritised like any thread: the source's receive ring of the lane's own, served
//! on the lane's core.
//!
//! The devices are shaped as the bulk path's are (the same HTB tree at the link rate), so the
//! lane's model describes both paths alike. Which kernel thread serves which device is learnt
//! by the threads that appear when `threaded` is turned on (under a process-wide lock, and
//! checked against the device's name); the threads go with the devices when the namespaces are
//! removed.

use std::net::Ipv4Addr;
use std::sync::Mutex;

use super::{LaneTestbed, LaneTestbedError};
use crate::testbed::{TestbedError, ip};

/// The host's end of its lane veth.
pub const LANE_DEVICE: &str = "lane";
/// The lane's bridge in the switch namespace.
pub const LANE_BRIDGE: &str = "br-lane";

/// The address of host `i` on its lane device (`10.213.0.<i+1>/24`).
pub fn lane_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 213, 0, (i + 1) as u8)
}

/// The bridge's port toward host `i`'s lane device.
pub(super) fn lane_switch_port(i: usize) -> String {
    format!("lane-h{i}")
}

/// A kernel thread that serves one lane device's receive (threaded NAPI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NapiThread {
    /// Its thread id.
    pub pid: i32,
    /// The namespace of the device it serves.
    pub namespace: String,
    /// The device.
    pub device: String,
}

/// Held while a device's `threaded` is turned on and its new threads looked for, so that two
/// testbeds of this process do not take each other's.
static DISCOVERY: Mutex<()> = Mutex::new(());

/// Turns GRO and then threaded NAPI on for `device` in namespace `ns` (both ends of its veth
/// must be up) and returns the kernel threads that now serve it.
///
/// Segmentation offload goes off too: a veth hands a packet to its peer's NAPI ring only when
/// the sending end has no TSO (else to the backlog, as without GRO; the kernel's
/// `veth_skb_is_eligible_for_gro`), and every end here sends as well as receives. Lane packets
/// are small datagrams, which TSO never touched.
pub(super) fn threaded_napi(ns: &str, device: &str) -> Result<Vec<NapiThread>, TestbedError> {
    ip(&["netns", "exec", ns, "ethtool", "-K", device, "gro", "on", "tso", "off"])?;
    let _one_at_a_time = DISCOVERY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let prefix = kairos_sys::host::napi_thread_prefix(device);
    let before = kairos_sys::host::kernel_threads_named(&prefix);
    // `ip netns exec` mounts the namespace's own /sys, where the device is.
    let set = format!("echo 1 > /sys/class/net/{device}/threaded");
    ip(&["netns", "exec", ns, "sh", "-c", &set])?;
    let threads: Vec<NapiThread> = kairos_sys::host::kernel_threads_named(&prefix)
        .difference(&before)
        .map(|&pid| NapiThread { pid, namespace: ns.to_string(), device: device.to_string() })
        .collect();
    if threads.is_empty() {
        return Err(TestbedError::Io {
            what: format!("threaded NAPI on {device} in {ns} started no kernel thread (is GRO on?)"),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    Ok(threads)
}

impl LaneTestbed {
    /// Makes the lane's path: the bridge, each host's lane veth with its address, both ends
    /// shaped as the bulk path's and served by threaded NAPI.
    pub(super) fn build_lane_path(&mut self) -> Result<(), LaneTestbedError> {
        self.add_bridge(LANE_BRIDGE)?;
        let sw = self.switch_namespace.clone();
        for i in 0..self.hosts.len() {
            let (ns, port) = (self.hosts[i].namespace.clone(), self.hosts[i].lane_switch_port.clone());
            self.attach(LANE_BRIDGE, &ns, LANE_DEVICE, lane_address(i), &port)?;
            let mut threads = threaded_napi(&ns, LANE_DEVICE)?;
            threads.extend(threaded_napi(&sw, &port)?);
            self.napi_threads.extend(threads);
        }
        Ok(())
    }

    /// Whether the testbed has the lane's own path ([`super::LaneTestbedConfig::lane_path`]).
    pub fn has_lane_path(&self) -> bool {
        self.config.lane_path
    }

    /// The address lane traffic of host `i` uses: its [`LANE_DEVICE`]'s with the lane's own
    /// path, else its address on the shared device.
    pub fn lane_address(&self, i: usize) -> Result<Ipv4Addr, LaneTestbedError> {
        let host = self.host(i)?;
        Ok(if self.config.lane_path { lane_address(i) } else { host.address })
    }

    /// The device lane traffic leaves and enters a host by: [`LANE_DEVICE`] with the lane's own
    /// path, else the shared [`super::HOST_DEVICE`].
    pub fn lane_device(&self) -> &'static str {
        if self.config.lane_path { LANE_DEVICE } else { super::HOST_DEVICE }
    }

    /// The kernel threads serving the lane devices' receive (empty without the lane's path).
    pub fn napi_threads(&self) -> &[NapiThread] {
        &self.napi_threads
    }
}
