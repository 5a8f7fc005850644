//! The forwarder's configuration: its threads, its rings' sizes and admission policy, who
//! applies control packets, when the data thread flushes, and its scheduling. Policy chosen by the caller, as
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

/// How the forwarder's stages are laid over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Threading {
    /// The source's pipeline: an RX thread splits each burst into a control ring (or applies
    /// control inline) and a data ring, and a data thread looks up, stamps and transmits.
    Pipeline,
    /// One thread takes each burst from receive to transmit: the burst's control applied
    /// first, its data admitted by the data policy (see [`crate::rtc`]), looked up, stamped and
    /// sent in one call. No ring, no hand-off, and no wake-up between stages.
    RunToCompletion,
}

impl Threading {
    pub fn name(self) -> &'static str {
        match self {
            Threading::Pipeline => "pipeline",
            Threading::RunToCompletion => "run-to-completion",
        }
    }
}

impl FromStr for Threading {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pipeline" => Ok(Threading::Pipeline),
            "run-to-completion" | "rtc" => Ok(Threading::RunToCompletion),
            other => Err(format!("unknown threading '{other}' (use pipeline or run-to-completion)")),
        }
    }
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
    /// The stages' threads.
    pub threading: Threading,
    /// The core the run-to-completion thread is pinned to (`None`: not pinned). Where the
    /// sender shares the machine, a forwarder on a core of its own (as `dpdk-testpmd`'s
    /// forwarding lcore on the last one) does not take the sender's core when it wakes.
    pub pin_core: Option<usize>,
    /// How long the run-to-completion thread keeps polling its idle port after its last burst
    /// before it sleeps, ns (0: [`crate::forwarder`]'s few polls), counted from the end of that
    /// burst. A window longer than the gap between the sender's bursts keeps it polling while
    /// traffic flows, as a busy poller does, and asleep when it stops: the RT shell's
    /// discipline (spin while there is work or for a short window, sleep otherwise). Only at
    /// normal priority: a `SCHED_FIFO` thread polling while traffic flows would hold its core
    /// from the kernel's packet work there.
    pub idle_spin_ns: u64,
}

/// The longest idle spin window, ns: the forwarder's longest sleep on an idle port
/// ([`crate::forwarder`]'s nap), so it never polls an idle port for longer than it sleeps on it.
pub const MAX_IDLE_SPIN_NS: u64 = 1_000_000;

/// Refuses a core that is not online here; `whose` names whose it is ("the forwarder's").
pub fn check_online_core(core: usize, whose: &str) -> Result<(), String> {
    let online = kairos_sys::proc::online_cores();
    if core < online {
        return Ok(());
    }
    Err(format!("{whose} core {core} is not online: this machine's cores are 0 to {}", online - 1))
}

/// The largest ring the forwarder makes, entries: every entry may hold a pool buffer (a 48-byte
/// packet), so 16 Mi entries is already 800 MB of buffers.
pub const MAX_RING: usize = 1 << 24;

/// The most users a forwarder serves: the pool and the keyed ring hold a buffer per user, and
/// the FIB an entry per user.
pub const MAX_USERS: u32 = 1 << 24;

/// The most extra work per data packet, ns: at 1 ms a million packets already take 17 minutes.
pub const MAX_DATA_WORK_NS: u64 = 1_000_000;

/// The longest flush wait, ns: a batch held longer than a second is no longer a batch.
pub const MAX_FLUSH_WAIT_NS: u64 = 1_000_000_000;

/// The highest `SCHED_FIFO` priority Linux gives.
pub const MAX_FIFO_PRIORITY: i32 = 99;

impl ForwarderConfig {
    /// Checks the knobs against what the forwarder can run for `users` users, before any
    /// thread starts: the error says what is wrong, the limit, and why.
    pub fn check(&self, users: u32) -> Result<(), String> {
        let max_burst = kairos_io::udp::MAX_BURST;
        if !(1..=max_burst).contains(&self.burst) {
            return Err(format!(
                "the forwarder's burst must be 1 to {max_burst}, got {} (a port moves at most {max_burst} packets per call)",
                self.burst
            ));
        }
        for (name, size) in [("control", self.ctrl_ring), ("data", self.data_ring)] {
            if !(1..=MAX_RING).contains(&size) {
                return Err(format!(
                    "the {name} ring must hold 1 to {MAX_RING} entries, got {size} (each entry may hold a 48-byte buffer)"
                ));
            }
        }
        if users == 0 {
            return Err("the forwarder needs at least one user (the trace has none)".into());
        }
        if users > MAX_USERS {
            return Err(format!(
                "the forwarder serves at most {MAX_USERS} users, got {users} (a buffer and a FIB entry each)"
            ));
        }
        if !(0..=MAX_FIFO_PRIORITY).contains(&self.fifo_priority) {
            return Err(format!(
                "the SCHED_FIFO priority must be 0 (normal scheduling) to {MAX_FIFO_PRIORITY}, got {}",
                self.fifo_priority
            ));
        }
        if self.data_work_ns > MAX_DATA_WORK_NS {
            return Err(format!(
                "the extra work per data packet must be at most {MAX_DATA_WORK_NS} ns, got {} (a million packets would take over 17 minutes)",
                self.data_work_ns
            ));
        }
        if let Some(core) = self.pin_core {
            check_online_core(core, "the forwarder's")?;
            if self.threading != Threading::RunToCompletion {
                return Err(
                    "only the run-to-completion forwarder is pinned to a core (its one thread)".into()
                );
            }
        }
        if self.idle_spin_ns > MAX_IDLE_SPIN_NS {
            return Err(format!(
                "the idle spin window must be at most {MAX_IDLE_SPIN_NS} ns (1,000 us, the forwarder's longest sleep), got {} ns",
                self.idle_spin_ns
            ));
        }
        if self.idle_spin_ns > 0 && self.threading != Threading::RunToCompletion {
            return Err(
                "only the run-to-completion forwarder has an idle spin window (its one thread)".into()
            );
        }
        if self.idle_spin_ns > 0 && self.fifo_priority > 0 {
            return Err(format!(
                "an idle spin window needs normal priority (--priority 0), not SCHED_FIFO {}: a real-time thread polling while traffic flows would hold its core from the kernel's packet work",
                self.fifo_priority
            ));
        }
        let (Flush::Count { drain_ns: wait } | Flush::Age { max_wait_ns: wait }) = self.flush;
        if wait > MAX_FLUSH_WAIT_NS {
            return Err(format!("the flush wait must be at most {MAX_FLUSH_WAIT_NS} ns (1 s), got {wait}"));
        }
        Ok(())
    }
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
            threading: Threading::Pipeline,
            pin_core: None,
            idle_spin_ns: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Knobs the forwarder cannot run are refused before any thread starts, each with its
    /// limit: a burst over what a port moves (it used to lose about 10% of packets as TX drops),
    /// a ring that cannot be made (it used to panic a thread and hang the run), no users.
    #[test]
    fn knobs_the_forwarder_cannot_run_are_refused_with_the_limit() {
        let ok = ForwarderConfig::default();
        assert_eq!(ok.check(1000), Ok(()));
        let err = |c: ForwarderConfig, users| c.check(users).unwrap_err();
        assert!(err(ForwarderConfig { burst: 256, ..ok }, 10).contains("burst must be 1 to 64, got 256"));
        assert!(err(ForwarderConfig { burst: 0, ..ok }, 10).contains("got 0"));
        let huge = ForwarderConfig { data_ring: usize::MAX, ..ok };
        assert!(err(huge, 10).contains("data ring must hold 1 to 16777216 entries"));
        assert!(err(ForwarderConfig { ctrl_ring: 0, ..ok }, 10).contains("control ring"));
        assert!(err(ok, 0).contains("at least one user"));
        assert!(
            err(ForwarderConfig { fifo_priority: 200, ..ok }, 10)
                .contains("0 (normal scheduling) to 99, got 200")
        );
        assert!(err(ForwarderConfig { fifo_priority: -1, ..ok }, 10).contains("got -1"));
        assert!(err(ForwarderConfig { data_work_ns: u64::MAX, ..ok }, 10).contains("extra work"));
        let slow = ForwarderConfig { flush: Flush::Age { max_wait_ns: u64::MAX }, ..ok };
        assert!(err(slow, 10).contains("flush wait"));
        let rtc = ForwarderConfig { threading: Threading::RunToCompletion, ..ok };
        assert!(
            err(ForwarderConfig { pin_core: Some(100_000), ..rtc }, 10).contains("core 100000 is not online")
        );
        assert!(err(ForwarderConfig { pin_core: Some(0), ..ok }, 10).contains("only the run-to-completion"));
        assert_eq!(ForwarderConfig { pin_core: Some(0), ..rtc }.check(10), Ok(()));
        assert!(err(ForwarderConfig { idle_spin_ns: 1_000_500, ..rtc }, 10).contains("got 1000500 ns"));
        let fifo = ForwarderConfig { idle_spin_ns: 1_000, fifo_priority: 50, ..rtc };
        assert!(err(fifo, 10).contains("needs normal priority"));
        assert!(
            err(ForwarderConfig { idle_spin_ns: 1_000, ..ok }, 10).contains("only the run-to-completion")
        );
        assert_eq!(ForwarderConfig { idle_spin_ns: 200_000, ..rtc }.check(10), Ok(()));
    }
}
