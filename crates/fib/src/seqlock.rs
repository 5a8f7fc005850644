//! A sequence lock per FIB entry.
//!
//! [`SeqEntry`] holds the tuple in two word-sized atomics and a sequence number, odd while a
//! write is in progress. A writer makes it odd (a CAS, so concurrent writers of one entry take
//! turns), stores the words and makes it even again; a reader loads the sequence, the words and
//! the sequence again, and retries if a write was in progress or overlapped. Readers never block
//! the writer and the writer never allocates or copies. The fences pair as in Boehm, "Can
//! seqlocks get along with programming language memory models?" (MSPC 2012): the writer's
//! release fence after making the sequence odd, the reader's acquire fence before its second
//! load of the sequence. The atomics, fences and spin hint are `kairos-sync`'s, so under
//! `cfg(loom)` they are loom's and `tests/loom.rs` checks this code.

use kairos_sync::{AtomicU64, Ordering, fence, spin};

use crate::AddrTuple;

/// One FIB entry under a sequence lock, on a cache line of its own.
#[derive(Debug)]
#[repr(align(64))]
pub struct SeqEntry {
    seq: AtomicU64,
    mac: AtomicU64,
    stamp: AtomicU64,
}

impl SeqEntry {
    /// An entry holding `addr`.
    pub fn new(addr: AddrTuple) -> Self {
        Self {
            seq: AtomicU64::new(0),
            mac: AtomicU64::new(addr.mac_word()),
            stamp: AtomicU64::new(addr.stamp_ns),
        }
    }

    /// A consistent snapshot of the tuple.
    #[inline]
    pub fn read(&self) -> AddrTuple {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let mac = self.mac.load(Ordering::Relaxed);
                let stamp = self.stamp.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    return AddrTuple::from_words(mac, stamp);
                }
            }
            spin();
        }
    }

    /// Replaces the tuple in place.
    #[inline]
    pub fn write(&self, addr: AddrTuple) {
        let mut seq = self.seq.load(Ordering::Relaxed);
        loop {
            if seq & 1 == 0 {
                match self.seq.compare_exchange_weak(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(now) => seq = now,
                }
            } else {
                spin();
                seq = self.seq.load(Ordering::Relaxed);
            }
        }
        // A reader that sees either word below also sees the odd sequence.
        fence(Ordering::Release);
        self.mac.store(addr.mac_word(), Ordering::Relaxed);
        self.stamp.store(addr.stamp_ns, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }
}

#[cfg(not(loom))]
mod table {
    use super::SeqEntry;
    use crate::{AddrTuple, Fib, FibError, FibReader, UserId};
    use hashbrown::HashMap;

    /// The FIB with a [`SeqEntry`] per user.
    #[derive(Debug)]
    pub struct SeqlockFib {
        table: HashMap<UserId, SeqEntry>,
    }

    impl SeqlockFib {
        /// A FIB of `users`, each at `initial`.
        pub fn new(users: impl IntoIterator<Item = UserId>, initial: AddrTuple) -> Self {
            Self { table: users.into_iter().map(|u| (u, SeqEntry::new(initial))).collect() }
        }
    }

    /// A reader of a [`SeqlockFib`]; it holds nothing between lookups.
    #[derive(Debug)]
    pub struct SeqlockReader<'a> {
        fib: &'a SeqlockFib,
    }

    impl FibReader for SeqlockReader<'_> {
        #[inline]
        fn lookup(&mut self, user: UserId) -> Option<AddrTuple> {
            self.fib.table.get(&user).map(SeqEntry::read)
        }
    }

    impl Fib for SeqlockFib {
        type Reader<'a> = SeqlockReader<'a>;

        fn name(&self) -> &'static str {
            "seqlock"
        }

        fn reader(&self) -> Result<SeqlockReader<'_>, FibError> {
            Ok(SeqlockReader { fib: self })
        }

        fn update(&self, user: UserId, addr: AddrTuple) -> Result<(), FibError> {
            self.table.get(&user).ok_or(FibError::UnknownUser(user))?.write(addr);
            Ok(())
        }

        fn len(&self) -> usize {
            self.table.len()
        }
    }
}

#[cfg(not(loom))]
pub use table::{SeqlockFib, SeqlockReader};
