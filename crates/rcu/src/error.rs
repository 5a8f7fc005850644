//! Errors of the domain's operations, each naming what went wrong and how to fix it.

use std::fmt;

/// `defer` refused because the backlog reached the high watermark and the domain was configured
/// with [`crate::OnFull::Fail`]. The value is handed back untouched (inside
/// [`DeferError::Full`]).
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

/// A blocking wait for a grace period was refused: the calling thread has a reader of the same
/// domain online, which cannot pass a quiescent state while its own thread waits, so the wait
/// would never end. Nothing was waited for, published or retired.
///
/// A reader counts as the calling thread's when this thread registered it or last brought it
/// online (`Offline::online`, or dropping the `Offline` guard).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this thread's reader '{reader}' is online, and a grace period would wait for it forever: take \
     it offline (ReaderHandle::offline) or call from another thread"
)]
pub struct ReaderOnline {
    /// The name the reader registered with.
    pub reader: String,
}

/// `defer` (and its variants) or `RcuCell::replace` did not take a value; it comes back
/// untouched.
pub enum DeferError<T> {
    /// The backlog is at its high watermark and the domain is configured with
    /// [`crate::OnFull::Fail`].
    Full(Full<T>),
    /// Taking the value would wait for a grace period (under `ReclaimPolicy::Direct`, or at the
    /// watermark under `OnFull::Synchronize`) that this thread's own online reader holds up.
    ReaderOnline {
        /// What was to be deferred, or the value that was not published.
        value: T,
        /// Which reader.
        error: ReaderOnline,
    },
}

impl<T> DeferError<T> {
    /// The value handed back.
    pub fn into_value(self) -> T {
        match self {
            Self::Full(full) => full.value,
            Self::ReaderOnline { value, .. } => value,
        }
    }
}

impl<T> fmt::Debug for DeferError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(full) => f.debug_tuple("Full").field(full).finish(),
            Self::ReaderOnline { error, .. } => {
                f.debug_struct("ReaderOnline").field("error", error).finish_non_exhaustive()
            }
        }
    }
}

impl<T> fmt::Display for DeferError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(full) => full.fmt(f),
            Self::ReaderOnline { error, .. } => error.fmt(f),
        }
    }
}

impl<T> std::error::Error for DeferError<T> {}

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
