//! The forwarder's configuration: its rings' sizes and admission policy, who applies control
//! packets, when the data thread flushes, and its scheduling. Policy chosen by the caller, as
//! data; the mechanism in [`crate::forwarder`] is the same for every choice.

use std::str::FromStr;

use serde::Serialize;

/// The data ring's admission policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RingPolicy {
    DropNewest,
    DropOldest,
    /// A latest-only slot per user (the keyed ring), instead of a FIFO.
    KeepLatest,
}

impl RingPolicy {
    pub fn name(self) -> &'static str {
        match self {
            RingPolicy::DropNewest => "drop-newest",
            RingPolicy::DropOldest => "drop-oldest",
            RingPolicy::KeepLatest => "keep-latest",
        }
    }
}

impl FromStr for RingPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "drop-newest" => Ok(RingPolicy::DropNewest),
            "drop-oldest" => Ok(RingPolicy::DropOldest),
            "keep-latest" => Ok(RingPolicy::KeepLatest),
            other => {
                Err(format!("unknown ring policy '{other}' (use drop-newest, drop-oldest or keep-latest)"))
            }
        }
    }
}

/// Who applies location updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlMode {
    /// A control thread behind a control ring (the source).
    Thread,
    /// The RX thread applies each control packet as it splits the burst, before queueing the
    /// burst's data: control is served first and never waits in a ring.
    Inline,
}

/// When the data thread sends what it has addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flush {
    /// A full burst, or what is there once nothing arrived for `drain_ns` (the source's TX
    /// thread: burst 64 or a 1 us timeout).
    Count { drain_ns: u64 },
    /// As soon as the oldest packet in the batch has waited `max_wait_ns`, or nothing more is
    /// queued.
    Age { max_wait_ns: u64 },
}

/// The forwarder's knobs; defaults are the source's (Table I and its code).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ForwarderConfig {
    pub burst: usize,
    pub ctrl_ring: usize,
    pub data_ring: usize,
    pub data_policy: RingPolicy,
    pub control: ControlMode,
    pub flush: Flush,
    /// `SCHED_FIFO` priority of the forwarder threads (0: normal scheduling).
    pub fifo_priority: i32,
    /// Extra work per data packet on the data thread, ns (0: none): makes the data thread the
    /// bottleneck, as a heavier lookup or a slower core would.
    pub data_work_ns: u64,
}

impl Default for ForwarderConfig {
    fn default() -> Self {
        // The source's forwarder: RX/TX burst 64, RX rings of 4096 (Table I); its code sizes the
        // control and data rings like the burst (64) in the routing runs (Fig. 4's caption).
        Self {
            burst: 64,
            ctrl_ring: 64,
            data_ring: 64,
            data_policy: RingPolicy::DropNewest,
            control: ControlMode::Thread,
            flush: Flush::Count { drain_ns: 1_000 },
            fifo_priority: 0,
            data_work_ns: 0,
        }
    }
}
