//! Who runs reclamation, and how much at a time: the policy half of the domain.
//!
//! The mechanism (grace periods, queues) is the same for every policy; a [`ReclaimPolicy`] only
//! decides where ready callbacks run and how much of them one call may run. The source document
//! (Sarma and McKenney, "Making RCU Safe for Deep Sub-Millisecond Response Realtime
//! Applications", USENIX 2004) measured the first four; `Adaptive` is Kairos's own.

use std::time::Duration;

/// Where and how much deferred reclamation runs. See each variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// The reader whose `quiescent()` sees a grace period end runs every ready callback at once,
    /// as epoch schemes whose readers free garbage do (and as the 2.6 kernel's softirq did).
    /// The baseline that shows the problem: the stall is unbounded.
    Inline,
    /// Like `Inline`, but one reader call runs at most `max_batch` callbacks and stops once
    /// `budget` has passed (checked after every callback); the rest wait for the reader's next
    /// `quiescent()`. The source's throttling, with the time limit it proposed.
    Throttle {
        /// Most callbacks one call runs (at least 1).
        max_batch: usize,
        /// Most time one call spends (at least one callback always runs).
        budget: Duration,
    },
    /// A reclaimer thread runs every callback; readers never do (the source's per-CPU krcud,
    /// the kernel's `rcu_nocbs`). Pin it and lower its priority with
    /// [`crate::DomainConfig::reclaimer_init`].
    Offload,
    /// The writer runs each callback itself: at once when no reader is online, otherwise after
    /// waiting for a grace period (DPDK's synchronous mode). Readers never run callbacks;
    /// writers block.
    Direct,
    /// Readers run callbacks within a time budget that adapts to how much arrives per call: it
    /// doubles (up to `max_budget`) while work is left over and shrinks while calls finish early;
    /// what a reader cannot finish within `max_budget` is spilled to the reclaimer thread. The
    /// stall per call stays under `max_budget` plus one callback, and the backlog stays bounded
    /// because the reclaimer takes what readers cannot.
    Adaptive {
        /// Most time one reader call spends.
        max_budget: Duration,
    },
}

impl ReclaimPolicy {
    /// The policy's name as experiments print it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Inline => "inline",
            Self::Throttle { .. } => "throttle",
            Self::Offload => "offload",
            Self::Direct => "direct",
            Self::Adaptive { .. } => "adaptive",
        }
    }

    /// Whether readers run callbacks under this policy.
    pub(crate) fn readers_reclaim(&self) -> bool {
        matches!(self, Self::Inline | Self::Throttle { .. } | Self::Adaptive { .. })
    }

    /// Whether the domain needs a reclaimer thread.
    pub(crate) fn needs_reclaimer(&self) -> bool {
        matches!(self, Self::Offload | Self::Adaptive { .. })
    }
}

/// What `defer` does when the backlog has reached the high watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFull {
    /// Wait for a grace period and run the callback in the caller (DPDK's fallback when its
    /// defer queue is full): the backlog never grows past the watermark, the writer slows down.
    #[default]
    Synchronize,
    /// Refuse: hand the value back in [`crate::Full`] and let the caller decide.
    Fail,
}
