//! The forwarder's configuration: its threads, its rings' sizes and admission policy, who
//! applies control packets, when the data thread flushes, and its scheduling. Policy chosen by the caller, as
//! data; the mechanism in [`crate::forwarder`] is the same for every choice.

use std::str::FromStr;

use serde::Serialize;

/// The data ring's admission policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RingPolicy {
    /// A FIFO that refuses what does not fit (tail drop, as DPDK's rings).
    DropNewest,
    /// A FIFO that discards its oldest entries to admit the newest.
    DropOldest,
    /// A latest-only slot per user (the keyed ring), instead of a FIFO.
    KeepLatest,
}

impl RingPolicy {
    /// The name command lines and reports use (`drop-newest`, `drop-oldest`, `keep-latest`).
    pub fn name(self) -> &'static str {
        match self {
            RingPolicy::DropNewest => "drop-newest",
            RingPolicy::DropOldest => "drop-oldest",
            RingPolicy::KeepLatest => "keep-latest",
        }
    }
}

/// A name that is not a [`RingPolicy`]'s or a [`Threading`]'s (the name as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a [`RingPolicy`]'s name.
    #[error("unknown ring policy '{0}' (use drop-newest, drop-oldest or keep-latest)")]
    UnknownRingPolicy(String),
    /// Not a [`Threading`]'s name.
    #[error("unknown threading '{0}' (use pipeline or run-to-completion)")]
    UnknownThreading(String),
}

impl FromStr for RingPolicy {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "drop-newest" => Ok(RingPolicy::DropNewest),
            "drop-oldest" => Ok(RingPolicy::DropOldest),
            "keep-latest" => Ok(RingPolicy::KeepLatest),
            other => Err(ParseError::UnknownRingPolicy(other.to_string())),
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
    Count {
        /// How long nothing must arrive before a partial burst is sent, ns.
        drain_ns: u64,
    },
    /// As soon as the oldest packet in the batch has waited `max_wait_ns`, or nothing more is
    /// queued.
    Age {
        /// The longest the oldest packet of a batch waits before the batch is sent, ns.
        max_wait_ns: u64,
    },
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
    /// The name command lines and reports use (`pipeline`, `run-to-completion`).
    pub fn name(self) -> &'static str {
        match self {
            Threading::Pipeline => "pipeline",
            Threading::RunToCompletion => "run-to-completion",
        }
    }
}

impl FromStr for Threading {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "pipeline" => Ok(Threading::Pipeline),
            "run-to-completion" | "rtc" => Ok(Threading::RunToCompletion),
            other => Err(ParseError::UnknownThreading(other.to_string())),
        }
    }
}

/// The forwarder's knobs; defaults are the source's (Table I and its code).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ForwarderConfig {
    /// Most packets one receive or send call moves, 1 to [`kairos_io::udp::MAX_BURST`]; also
    /// the full batch the data thread sends.
    pub burst: usize,
    /// The control ring's size, entries (1 to [`MAX_RING`]).
    pub ctrl_ring: usize,
    /// The data ring's size, entries (1 to [`MAX_RING`]; the keyed ring holds one per user
    /// whatever this says).
    pub data_ring: usize,
    /// What the data ring does with a packet it has no room for.
    pub data_policy: RingPolicy,
    /// Who applies control packets: a control thread, or the RX thread inline.
    pub control: ControlMode,
    /// When the data thread sends what it has addressed.
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

/// A core that is not online here ([`check_online_core`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{whose} core {core} is not online: this machine's cores are 0 to {}", .online - 1)]
pub struct OfflineCore {
    /// Whose core it is ("the forwarder's", "the sender's").
    pub whose: String,
    /// The core asked for.
    pub core: usize,
    /// How many cores are online (they are numbered from 0).
    pub online: usize,
}

/// Refuses a core that is not online here; `whose` names whose it is ("the forwarder's").
pub fn check_online_core(core: usize, whose: &str) -> Result<(), OfflineCore> {
    let online = kairos_sys::proc::online_cores();
    if core < online {
        return Ok(());
    }
    Err(OfflineCore { whose: whose.to_string(), core, online })
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
    pub fn check(&self, users: u32) -> Result<(), ConfigError> {
        let max_burst = kairos_io::udp::MAX_BURST;
        if !(1..=max_burst).contains(&self.burst) {
            return Err(ConfigError::Burst { burst: self.burst, max: max_burst });
        }
        for (ring, size) in [("control", self.ctrl_ring), ("data", self.data_ring)] {
            if !(1..=MAX_RING).contains(&size) {
                return Err(ConfigError::Ring { ring, size });
            }
        }
        if users == 0 {
            return Err(ConfigError::NoUsers);
        }
        if users > MAX_USERS {
            return Err(ConfigError::TooManyUsers { users });
        }
        if !(0..=MAX_FIFO_PRIORITY).contains(&self.fifo_priority) {
            return Err(ConfigError::FifoPriority { priority: self.fifo_priority });
        }
        if self.data_work_ns > MAX_DATA_WORK_NS {
            return Err(ConfigError::DataWork { ns: self.data_work_ns });
        }
        if let Some(core) = self.pin_core {
            check_online_core(core, "the forwarder's")?;
            if self.threading != Threading::RunToCompletion {
                return Err(ConfigError::PinNeedsRunToCompletion);
            }
        }
        if self.idle_spin_ns > MAX_IDLE_SPIN_NS {
            return Err(ConfigError::IdleSpin { ns: self.idle_spin_ns });
        }
        if self.idle_spin_ns > 0 && self.threading != Threading::RunToCompletion {
            return Err(ConfigError::IdleSpinNeedsRunToCompletion);
        }
        if self.idle_spin_ns > 0 && self.fifo_priority > 0 {
            return Err(ConfigError::IdleSpinNeedsNormalPriority { priority: self.fifo_priority });
        }
        let (Flush::Count { drain_ns: wait } | Flush::Age { max_wait_ns: wait }) = self.flush;
        if wait > MAX_FLUSH_WAIT_NS {
            return Err(ConfigError::FlushWait { ns: wait });
        }
        Ok(())
    }
}

/// A knob [`ForwarderConfig::check`] refuses: each message says what is wrong, the limit, and
/// why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The burst is 0 or more than a port moves per call.
    #[error(
        "the forwarder's burst must be 1 to {max}, got {burst} (a port moves at most {max} packets per call)"
    )]
    Burst {
        /// The burst asked for, packets.
        burst: usize,
        /// The most a port moves per call ([`kairos_io::udp::MAX_BURST`]).
        max: usize,
    },
    /// A ring is empty or larger than [`MAX_RING`].
    #[error(
        "the {ring} ring must hold 1 to {MAX_RING} entries, got {size} (each entry may hold a 48-byte buffer)"
    )]
    Ring {
        /// Which ring: `control` or `data`.
        ring: &'static str,
        /// The size asked for, entries.
        size: usize,
    },
    /// No user to serve.
    #[error("the forwarder needs at least one user (the trace has none)")]
    NoUsers,
    /// More users than [`MAX_USERS`].
    #[error("the forwarder serves at most {MAX_USERS} users, got {users} (a buffer and a FIB entry each)")]
    TooManyUsers {
        /// The users asked for.
        users: u32,
    },
    /// A priority outside 0 to [`MAX_FIFO_PRIORITY`].
    #[error("the SCHED_FIFO priority must be 0 (normal scheduling) to {MAX_FIFO_PRIORITY}, got {priority}")]
    FifoPriority {
        /// The priority asked for.
        priority: i32,
    },
    /// Extra work per data packet above [`MAX_DATA_WORK_NS`].
    #[error(
        "the extra work per data packet must be at most {MAX_DATA_WORK_NS} ns, got {ns} (a million packets would take over 17 minutes)"
    )]
    DataWork {
        /// The work asked for, ns.
        ns: u64,
    },
    /// The core to pin to is not online.
    #[error(transparent)]
    OfflineCore(#[from] OfflineCore),
    /// A core to pin to, but a forwarder of several threads.
    #[error("only the run-to-completion forwarder is pinned to a core (its one thread)")]
    PinNeedsRunToCompletion,
    /// An idle spin window above [`MAX_IDLE_SPIN_NS`].
    #[error(
        "the idle spin window must be at most {MAX_IDLE_SPIN_NS} ns (1,000 us, the forwarder's longest sleep), got {ns} ns"
    )]
    IdleSpin {
        /// The window asked for, ns.
        ns: u64,
    },
    /// An idle spin window, but a forwarder of several threads.
    #[error("only the run-to-completion forwarder has an idle spin window (its one thread)")]
    IdleSpinNeedsRunToCompletion,
    /// An idle spin window at a `SCHED_FIFO` priority.
    #[error(
        "an idle spin window needs normal priority (--priority 0), not SCHED_FIFO {priority}: a real-time thread polling while traffic flows would hold its core from the kernel's packet work"
    )]
    IdleSpinNeedsNormalPriority {
        /// The priority asked for.
        priority: i32,
    },
    /// A flush wait above [`MAX_FLUSH_WAIT_NS`].
    #[error("the flush wait must be at most {MAX_FLUSH_WAIT_NS} ns (1 s), got {ns}")]
    FlushWait {
        /// The wait asked for, ns.
        ns: u64,
    },
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
        let err = |c: ForwarderConfig, users| c.check(users).unwrap_err().to_string();
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
