//! The `papaya` concurrent hash map as a FIB: a well-kept lock-free map to measure against.
//! A reader keeps the map pinned for a burst and re-pins at its quiescent state, so it pays the
//! epoch entry once per burst, like the RCU reader.

use papaya::{HashMap, HashMapRef, LocalGuard};

use crate::{AddrTuple, Fib, FibError, FibReader, UserId};

/// The FIB as a `papaya` map: lock-free reads and writes, epoch-based reclamation inside.
#[derive(Debug)]
pub struct PapayaFib {
    map: HashMap<UserId, AddrTuple>,
}

impl PapayaFib {
    /// A FIB of `users`, each at `initial`.
    pub fn new(users: impl IntoIterator<Item = UserId>, initial: AddrTuple) -> Self {
        let map = HashMap::new();
        {
            let pinned = map.pin();
            for u in users {
                pinned.insert(u, initial);
            }
        }
        Self { map }
    }
}

/// A reader of a [`PapayaFib`].
pub struct PapayaReader<'a> {
    map: &'a HashMap<UserId, AddrTuple>,
    pinned: HashMapRef<'a, UserId, AddrTuple, std::collections::hash_map::RandomState, LocalGuard<'a>>,
}

impl std::fmt::Debug for PapayaReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PapayaReader")
    }
}

impl FibReader for PapayaReader<'_> {
    #[inline]
    fn lookup(&mut self, user: UserId) -> Option<AddrTuple> {
        self.pinned.get(&user).copied()
    }

    #[inline]
    fn quiescent(&mut self) {
        self.pinned = self.map.pin();
    }

    fn offline_while(&mut self, f: &mut dyn FnMut()) {
        // Unpin while asleep, so the map's reclamation does not wait for this reader.
        self.pinned = self.map.pin();
        f();
    }
}

impl Fib for PapayaFib {
    type Reader<'a> = PapayaReader<'a>;

    fn name(&self) -> &'static str {
        "papaya"
    }

    fn reader(&self) -> Result<PapayaReader<'_>, FibError> {
        Ok(PapayaReader { map: &self.map, pinned: self.map.pin() })
    }

    fn update(&self, user: UserId, addr: AddrTuple) -> Result<(), FibError> {
        let pinned = self.map.pin();
        // Update only an existing user, as the other FIBs do.
        match pinned.update(user, |_| addr) {
            Some(_) => Ok(()),
            None => Err(FibError::UnknownUser(user)),
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}
