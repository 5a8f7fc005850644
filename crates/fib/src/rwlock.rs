//! The whole FIB under one readers-writer lock, as the source's `rte_rwlock` version.
//!
//! `std::sync::RwLock` on Linux is write-preferring (a waiting writer makes new readers wait),
//! which is what the source describes; `tests/api.rs` checks it on every run, since a
//! reader-preferring lock would starve the control thread and change the experiment.

use std::sync::{PoisonError, RwLock};

use hashbrown::HashMap;

use crate::{AddrTuple, Fib, FibError, FibReader, UserId};

/// The FIB as one hash table under a `std::sync::RwLock`.
#[derive(Debug)]
pub struct RwLockFib {
    table: RwLock<HashMap<UserId, AddrTuple>>,
}

impl RwLockFib {
    /// A FIB of `users`, each at `initial`.
    pub fn new(users: impl IntoIterator<Item = UserId>, initial: AddrTuple) -> Self {
        Self { table: RwLock::new(users.into_iter().map(|u| (u, initial)).collect()) }
    }

    /// The lock itself, for tests of its fairness.
    pub fn lock(&self) -> &RwLock<HashMap<UserId, AddrTuple>> {
        &self.table
    }
}

/// A reader of a [`RwLockFib`]: takes the read lock around each lookup.
#[derive(Debug)]
pub struct RwLockReader<'a> {
    fib: &'a RwLockFib,
}

impl FibReader for RwLockReader<'_> {
    #[inline]
    fn lookup(&mut self, user: UserId) -> Option<AddrTuple> {
        // A panicking writer leaves each entry whole (a single store), so poison is harmless.
        self.fib.table.read().unwrap_or_else(PoisonError::into_inner).get(&user).copied()
    }
}

impl Fib for RwLockFib {
    type Reader<'a> = RwLockReader<'a>;

    fn name(&self) -> &'static str {
        "rwlock"
    }

    fn reader(&self) -> Result<RwLockReader<'_>, FibError> {
        Ok(RwLockReader { fib: self })
    }

    fn update(&self, user: UserId, addr: AddrTuple) -> Result<(), FibError> {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        *table.get_mut(&user).ok_or(FibError::UnknownUser(user))? = addr;
        Ok(())
    }

    fn len(&self) -> usize {
        self.table.read().unwrap_or_else(PoisonError::into_inner).len()
    }
}
