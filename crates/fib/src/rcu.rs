//! The FIB under read-copy-update: an `RcuCell` per entry.
//!
//! A lookup is a hash lookup and one pointer load; a reader passes a quiescent state once per
//! burst. An update allocates a copy of the entry with the new tuple, publishes it with one
//! swap, and retires the old copy through the domain's policy: `Direct` (the writer frees it
//! after a grace period, waiting for one when readers are online: DPDK's synchronous mode, the
//! source's configuration) or `Offload` (a reclaimer thread frees it; the writer never waits).

use hashbrown::HashMap;
use kairos_rcu::{DeferError, Domain, DomainConfig, RcuCell, ReaderHandle, ReclaimPolicy};

use crate::{AddrTuple, Fib, FibError, FibReader, UserId};

/// The FIB with an [`RcuCell`] per user, in one `kairos-rcu` domain (16 reader slots).
pub struct RcuFib {
    domain: Domain,
    table: HashMap<UserId, RcuCell<AddrTuple>>,
}

impl std::fmt::Debug for RcuFib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcuFib")
            .field("users", &self.table.len())
            .field("policy", &self.domain.policy())
            .finish()
    }
}

impl RcuFib {
    /// A FIB whose retired copies are reclaimed under `policy`.
    pub fn new(
        users: impl IntoIterator<Item = UserId>,
        initial: AddrTuple,
        policy: ReclaimPolicy,
    ) -> Result<Self, FibError> {
        let domain = Domain::new(DomainConfig { max_readers: 16, ..DomainConfig::with_policy(policy) })
            .map_err(|e| FibError::Build(e.to_string()))?;
        let table = users.into_iter().map(|u| (u, RcuCell::new(&domain, initial))).collect();
        Ok(Self { domain, table })
    }

    /// The domain (for its statistics: unreclaimed copies, grace periods).
    pub fn domain(&self) -> &Domain {
        &self.domain
    }
}

/// A reader of an [`RcuFib`]: a registered RCU reader.
#[derive(Debug)]
pub struct RcuFibReader<'a> {
    fib: &'a RcuFib,
    handle: ReaderHandle,
}

impl FibReader for RcuFibReader<'_> {
    #[inline]
    fn lookup(&mut self, user: UserId) -> Option<AddrTuple> {
        self.fib.table.get(&user).map(|cell| *cell.read(&self.handle))
    }

    #[inline]
    fn quiescent(&mut self) {
        self.handle.quiescent();
    }

    fn offline_while(&mut self, f: &mut dyn FnMut()) {
        self.handle.offline_while(f)
    }
}

/// Under `ReclaimPolicy::Direct`, `update` waits for a grace period when readers are online; from
/// a thread whose own reader is online it returns [`FibError::ReaderOnline`] instead (that wait
/// would never end): update from another thread, or inside `FibReader::offline_while`.
impl Fib for RcuFib {
    type Reader<'a> = RcuFibReader<'a>;

    fn name(&self) -> &'static str {
        "rcu"
    }

    fn reader(&self) -> Result<RcuFibReader<'_>, FibError> {
        let handle = self.domain.register("fib-reader").map_err(|e| FibError::Reader(e.to_string()))?;
        Ok(RcuFibReader { fib: self, handle })
    }

    fn update(&self, user: UserId, addr: AddrTuple) -> Result<(), FibError> {
        let cell = self.table.get(&user).ok_or(FibError::UnknownUser(user))?;
        cell.replace(addr).map_err(|refused| match refused {
            DeferError::Full(full) => FibError::Backlog(full.limit),
            DeferError::ReaderOnline { error, .. } => FibError::ReaderOnline(error),
        })
    }

    fn len(&self) -> usize {
        self.table.len()
    }
}
