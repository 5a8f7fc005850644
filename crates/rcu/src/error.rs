//! Errors of the domain's operations, each naming what went wrong and how to fix it.

use std::fmt;

/// `defer` refused because the backlog reached the high watermark and the domain was configured
/// with [`crate::OnFull::Fail`]. The value is handed back untouched.
pub struct Full<T> {
    /// What was to be deferred (or, for `RcuCell::replace`, the value that was not published).
    pub value: T,
    /// The high watermark that was reached.
    pub limit: usize,
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Full").field("limit", &self.limit).finish_non_exhaustive()
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the reclamation backlog is at its high watermark of {} callbacks; let readers pass \
             quiescent states, reclaim, or raise DomainConfig::high_watermark",
            self.limit
        )
    }
}

impl<T> std::error::Error for Full<T> {}

/// Registering a reader failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// Every reader slot is taken.
    #[error(
        "all {max} reader slots are taken; drop an unused ReaderHandle or raise DomainConfig::max_readers"
    )]
    TooManyReaders {
        /// The configured maximum.
        max: usize,
    },
}

/// A domain configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `max_readers` was zero.
    #[error("max_readers must be at least 1")]
    NoReaders,
    /// `Throttle { max_batch: 0 }` would never reclaim anything.
    #[error("throttle max_batch must be at least 1, or no callback would ever run")]
    ZeroBatch,
    /// A zero time budget would never reclaim anything.
    #[error("the reclamation budget must be longer than zero")]
    ZeroBudget,
    /// `high_watermark` was zero.
    #[error("high_watermark must be at least 1")]
    ZeroWatermark,
    /// The stall threshold was zero.
    #[error("the stall threshold must be longer than zero")]
    ZeroStallThreshold,
}
