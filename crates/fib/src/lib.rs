//! A forwarding information base (FIB) read by the data path and written by the control path at
//! the same time, with the synchronisations whose freshness the source compares.
//!
//! The FIB maps a user id to an [`AddrTuple`]: a next-hop MAC and the time stamp of the location
//! update that wrote it (the source's address tuple; the stamp is what tells a fresh address from
//! a stale one). The set of users is fixed when the FIB is built, as the source loads its FIB
//! from a file; lookups go through a `hashbrown` table of that set like any hash-table FIB.
//!
//! [`Fib`] is the interface: per-thread readers ([`FibReader::lookup`], and
//! [`FibReader::quiescent`] once per burst) and [`Fib::update`]. Implementations:
//!
//! - [`RcuFib`]: read-copy-update on `kairos-rcu`. Each write copies the entry into a new
//!   allocation and publishes it with one pointer swap; the old copy is freed after a grace
//!   period, by the writer itself (`ReclaimPolicy::Direct`, DPDK's synchronous mode that the
//!   source ran) or by a reclaimer thread (`Offload`).
//! - [`RwLockFib`]: the whole table under one write-preferring readers-writer lock (the source's
//!   `rte_rwlock` around every lookup and every update). The std lock used is write-preferring:
//!   `tests/api.rs` shows a waiting writer holding off new readers.
//! - [`SeqlockFib`]: a sequence lock per entry. Readers never block the writer (they retry if a
//!   write overlapped) and the writer never copies: the update-heavy case where the source found
//!   both RCU and the RW lock wanting. Modelled with `loom` in `tests/loom.rs`.
//! - `PapayaFib` (feature `peers`): the `papaya` concurrent hash map, a well-kept peer.

#![warn(missing_docs)]
// The seqlock is built from atomics alone; nothing in this crate needs `unsafe`.
#![forbid(unsafe_code)]

#[cfg(all(feature = "peers", not(loom)))]
mod peer;
#[cfg(not(loom))]
mod rcu;
#[cfg(not(loom))]
mod rwlock;
pub mod seqlock;

use std::fmt;
use std::str::FromStr;

#[cfg(all(feature = "peers", not(loom)))]
pub use peer::{PapayaFib, PapayaReader};
#[cfg(not(loom))]
pub use rcu::{RcuFib, RcuFibReader};
#[cfg(not(loom))]
pub use rwlock::{RwLockFib, RwLockReader};
#[cfg(not(loom))]
pub use seqlock::{SeqlockFib, SeqlockReader};

/// A user (a mobile terminal) as the FIB keys it.
pub type UserId = u32;

/// Where a user is: the next-hop MAC and the sender's time stamp of the location update that
/// put it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct AddrTuple {
    /// The next hop's MAC address.
    pub mac: [u8; 6],
    /// The sender's time stamp of the location update that wrote this tuple, in nanoseconds
    /// on the sender's clock.
    pub stamp_ns: u64,
}

impl AddrTuple {
    /// The tuple of `mac`, written by the location update stamped `stamp_ns`.
    pub fn new(mac: [u8; 6], stamp_ns: u64) -> Self {
        Self { mac, stamp_ns }
    }

    /// The MAC in the low 48 bits of a `u64` (for word-sized atomic stores).
    pub fn mac_word(&self) -> u64 {
        let mut bytes = [0u8; 8];
        bytes[..6].copy_from_slice(&self.mac);
        u64::from_le_bytes(bytes)
    }

    /// The tuple whose MAC is the low 48 bits of `mac` (the inverse of [`AddrTuple::mac_word`]).
    pub fn from_words(mac: u64, stamp_ns: u64) -> Self {
        let bytes = mac.to_le_bytes();
        let mut m = [0u8; 6];
        m.copy_from_slice(&bytes[..6]);
        Self { mac: m, stamp_ns }
    }
}

/// A FIB operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FibError {
    /// The user is not in the FIB.
    #[error("user {0} is not in the FIB (the user set is fixed when the FIB is built)")]
    UnknownUser(UserId),
    /// The RCU domain's backlog of retired entries is at its watermark (the number given).
    #[error(
        "the RCU backlog of retired entries is full ({0} waiting): readers are not passing quiescent states"
    )]
    Backlog(usize),
    /// An RCU update under `ReclaimPolicy::Direct` from a thread whose own reader is online: it
    /// would wait for a grace period that reader holds up. Nothing was written.
    #[error("cannot update the RCU FIB: {0}")]
    ReaderOnline(kairos_rcu::ReaderOnline),
    /// No reader could be registered (the reason given).
    #[error("cannot register a FIB reader: {0}")]
    Reader(String),
    /// The FIB could not be built (the reason given).
    #[error("cannot build the FIB: {0}")]
    Build(String),
}

/// A reader's view of a FIB: one per thread.
pub trait FibReader {
    /// The address tuple of `user`, or `None` if the user is not in the FIB.
    fn lookup(&mut self, user: UserId) -> Option<AddrTuple>;
    /// Tells the FIB that this reader holds no reference obtained before (once per burst).
    fn quiescent(&mut self) {}
    /// Runs `f` (a sleep) with the reader offline: writers waiting for readers do not wait for
    /// this one meanwhile.
    fn offline_while(&mut self, f: &mut dyn FnMut()) {
        f()
    }
}

/// A FIB that readers and writers use concurrently.
pub trait Fib: Send + Sync {
    /// The implementation's reader, borrowing the FIB.
    type Reader<'a>: FibReader
    where
        Self: 'a;

    /// The name experiments print (`rcu`, `rwlock`, `seqlock`, `papaya`).
    fn name(&self) -> &'static str;
    /// A reader for the calling thread.
    fn reader(&self) -> Result<Self::Reader<'_>, FibError>;
    /// Sets `user`'s address tuple. Safe from several threads; the experiments use one writer.
    fn update(&self, user: UserId, addr: AddrTuple) -> Result<(), FibError>;
    /// Users in the FIB.
    fn len(&self) -> usize;
    /// Whether the FIB has no users.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The implementations, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FibKind {
    /// [`RcuFib`].
    Rcu,
    /// [`RwLockFib`].
    RwLock,
    /// [`SeqlockFib`].
    Seqlock,
    /// [`PapayaFib`].
    Papaya,
}

impl FibKind {
    /// Every implementation, in the order experiments report them.
    pub const ALL: [FibKind; 4] = [FibKind::Rcu, FibKind::RwLock, FibKind::Seqlock, FibKind::Papaya];

    /// The name command lines and reports use (`rcu`, `rwlock`, `seqlock`, `papaya`).
    pub fn name(self) -> &'static str {
        match self {
            FibKind::Rcu => "rcu",
            FibKind::RwLock => "rwlock",
            FibKind::Seqlock => "seqlock",
            FibKind::Papaya => "papaya",
        }
    }
}

impl fmt::Display for FibKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`FibKind`]'s (the name as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown FIB '{0}' (use rcu, rwlock, seqlock or papaya)")]
pub struct UnknownFibKind(pub String);

impl FromStr for FibKind {
    type Err = UnknownFibKind;
    fn from_str(s: &str) -> Result<Self, UnknownFibKind> {
        FibKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| UnknownFibKind(s.to_string()))
    }
}
