//! One database (of the sixteen SELECT reaches): its keys, their expiry index, and what WATCH
//! needs to tell whether a key changed.
//!
//! Every change to a key goes through [`Db`]'s methods, which stamp the key with the store's
//! modification count ([`Db::stamp`], set by the store before each command) and keep the
//! expiry index (keys by expiry time, for the leader's expiry proposals) in step.
//!
//! WATCH: a connection records, per watched key, the key's version (0 when absent) and the
//! store's count at that moment (the mark). A key changed after the mark if it is live with
//! another version, was live and is gone, or was absent and came and went: a deletion leaves
//! a tombstone with its version so that last case is seen. Tombstones are bounded
//! ([`MAX_TOMBSTONES`]); a watch older than the oldest one kept is judged changed, which
//! aborts a transaction that might have been fine (the client retries), never the reverse.
//! A key removed by expiry or FLUSHDB leaves a tombstone at its own version (not the
//! removal's): a watch that saw it already expired is not disturbed, one made before it was
//! created is.

use std::collections::{BTreeSet, VecDeque};

use hashbrown::HashMap;
use hashbrown::hash_map::{Entry, EntryRef};

use super::reply::Reply;
use super::value::{Item, Value, WRONGTYPE};

/// Deletions remembered for WATCH.
pub const MAX_TOMBSTONES: usize = 4096;

/// One database.
#[derive(Debug, Clone, Default)]
pub struct Db {
    items: HashMap<Vec<u8>, Item>,
    expiring: BTreeSet<(u64, Vec<u8>)>,
    tombstones: HashMap<Vec<u8>, u64>,
    tombstone_order: VecDeque<(u64, Vec<u8>)>,
    tombstone_floor: u64,
    /// The store's modification count for the command being applied.
    pub stamp: u64,
}

impl PartialEq for Db {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
            && self.tombstones == other.tombstones
            && self.tombstone_floor == other.tombstone_floor
    }
}

fn wrongtype() -> Reply {
    Reply::Error(WRONGTYPE.into())
}

macro_rules! typed_access {
    ($get:ident, $get_mut:ident, $variant:ident, $ty:ty) => {
        /// The key's value if it is live and of this type; `WRONGTYPE` if of another.
        pub fn $get(&self, key: &[u8], now_ms: u64) -> Result<Option<&$ty>, Reply> {
            match self.value(key, now_ms) {
                None => Ok(None),
                Some(Value::$variant(v)) => {
                    // A container is boxed (see [`Value`]): the annotation derefs it.
                    let v: &$ty = v;
                    Ok(Some(v))
                }
                Some(_) => Err(wrongtype()),
            }
        }

        /// The key's value to change (stamped), created empty if absent and `create`;
        /// `WRONGTYPE` if of another type. A caller that leaves an aggregate empty calls
        /// [`Db::drop_if_empty`].
        pub fn $get_mut(&mut self, key: &[u8], now_ms: u64, create: bool) -> Result<Option<&mut $ty>, Reply> {
            self.purge_if_expired(key, now_ms);
            let stamp = self.stamp;
            // One lookup after the purge; the key is copied only when the value is created.
            let item = match self.items.entry_ref(key) {
                EntryRef::Occupied(e) => e.into_mut(),
                EntryRef::Vacant(_) if !create => return Ok(None),
                EntryRef::Vacant(e) => e.insert(Item {
                    value: Value::$variant(Default::default()),
                    expires_at_ms: None,
                    version: stamp,
                }),
            };
            match &mut item.value {
                Value::$variant(v) => {
                    item.version = stamp;
                    let v: &mut $ty = v;
                    Ok(Some(v))
                }
                _ => Err(wrongtype()),
            }
        }
    };
}

impl Db {
    /// The live item at `key`.
    pub fn get(&self, key: &[u8], now_ms: u64) -> Option<&Item> {
        self.items.get(key).filter(|i| i.live(now_ms))
    }

    /// The live value at `key`.
    pub fn value(&self, key: &[u8], now_ms: u64) -> Option<&Value> {
        self.get(key, now_ms).map(|i| &i.value)
    }

    /// Whether `key` is live.
    pub fn contains(&self, key: &[u8], now_ms: u64) -> bool {
        self.get(key, now_ms).is_some()
    }

    /// The live item at `key`, to change: stamped with this command's version. An expired
    /// one is removed first.
    pub fn item_mut(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Item> {
        self.purge_if_expired(key, now_ms);
        let stamp = self.stamp;
        let item = self.items.get_mut(key)?;
        item.version = stamp;
        Some(item)
    }

    typed_access!(string, string_mut, Str, Vec<u8>);
    typed_access!(list, list_mut, List, VecDeque<Vec<u8>>);
    typed_access!(hash, hash_mut, Hash, indexmap::IndexMap<Vec<u8>, Vec<u8>>);
    typed_access!(set, set_mut, Set, indexmap::IndexSet<Vec<u8>>);
    typed_access!(zset, zset_mut, ZSet, super::zset::ZSet);

    /// Writes `value` over the string at `key` in place, when `key` holds a string with no
    /// expiry (live, then): one lookup, the key kept, the old value's room reused, so a plain
    /// SET over a key every member already has allocates nothing. Returns whether it did;
    /// anything else at `key` (nothing, another type, an expiry) is left to [`Db::insert`].
    pub fn overwrite_string(&mut self, key: &[u8], value: &[u8]) -> bool {
        let stamp = self.stamp;
        let Some(Item { value: Value::Str(old), expires_at_ms: None, version }) = self.items.get_mut(key)
        else {
            return false;
        };
        // Room far beyond the new value is given back rather than kept for the key's life.
        if old.capacity() > 4 * value.len().max(64) {
            *old = value.to_vec();
        } else {
            old.clear();
            old.extend_from_slice(value);
        }
        *version = stamp;
        true
    }

    /// Puts `value` at `key` with expiry `expires_at_ms`, replacing whatever was there.
    pub fn insert(&mut self, key: Vec<u8>, value: Value, expires_at_ms: Option<u64>) {
        let item = Item { value, expires_at_ms, version: self.stamp };
        // One lookup; the key is copied for the expiry index only when an expiry is involved.
        let (old, indexed) = match self.items.entry(key) {
            Entry::Occupied(mut e) => {
                let old = e.get().expires_at_ms;
                let indexed = (old.is_some() || expires_at_ms.is_some()).then(|| e.key().clone());
                e.insert(item);
                (old, indexed)
            }
            Entry::Vacant(e) => {
                let indexed = expires_at_ms.is_some().then(|| e.key().clone());
                e.insert(item);
                (None, indexed)
            }
        };
        if let Some(key) = indexed {
            if let Some(t) = old {
                self.expiring.remove(&(t, key.clone()));
            }
            if let Some(t) = expires_at_ms {
                self.expiring.insert((t, key));
            }
        }
    }

    /// Puts a command's result at `key` (`*STORE` commands): replacing whatever was there,
    /// without expiry, or removing the key when the result is an empty aggregate.
    pub fn store(&mut self, key: &[u8], value: Value, now_ms: u64) {
        if value.is_empty_aggregate() {
            self.remove(key, now_ms);
        } else {
            self.insert(key.to_vec(), value, None);
        }
    }

    /// Removes the live key; returns its item. Leaves a tombstone for WATCH.
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> Option<Item> {
        self.purge_if_expired(key, now_ms);
        let item = self.items.remove(key)?;
        if let Some(t) = item.expires_at_ms {
            self.expiring.remove(&(t, key.to_vec()));
        }
        self.bury(key.to_vec());
        Some(item)
    }

    /// Removes `key` if it holds an empty aggregate (Redis never keeps one).
    pub fn drop_if_empty(&mut self, key: &[u8], now_ms: u64) {
        if self.value(key, now_ms).is_some_and(Value::is_empty_aggregate) {
            self.remove(key, now_ms);
        }
    }

    /// Sets or clears the live key's expiry; false when there is no such key.
    pub fn set_expiry(&mut self, key: &[u8], now_ms: u64, expires_at_ms: Option<u64>) -> bool {
        let Some(item) = self.item_mut(key, now_ms) else { return false };
        let old = std::mem::replace(&mut item.expires_at_ms, expires_at_ms);
        if let Some(t) = old {
            self.expiring.remove(&(t, key.to_vec()));
        }
        if let Some(t) = expires_at_ms {
            self.expiring.insert((t, key.to_vec()));
        }
        true
    }

    fn purge_if_expired(&mut self, key: &[u8], now_ms: u64) -> bool {
        match self.items.get(key) {
            Some(i) if !i.live(now_ms) => {
                let (t, version) = (i.expires_at_ms.unwrap_or_default(), i.version);
                self.items.remove(key);
                self.expiring.remove(&(t, key.to_vec()));
                // At the key's own version: a watch that saw it absent (already expired) is
                // not disturbed, one made before it was created is.
                self.bury_at(key.to_vec(), version);
                true
            }
            _ => false,
        }
    }

    /// Removes `key` if it has expired at `now_ms` (the leader's expiry entries); returns
    /// whether it did.
    pub fn expire_now(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.purge_if_expired(key, now_ms)
    }

    /// Up to `limit` keys whose expiry has passed at `now_ms`, oldest first.
    pub fn expired_keys(&self, now_ms: u64, limit: usize) -> Vec<Vec<u8>> {
        self.expiring.iter().take_while(|(t, _)| *t <= now_ms).take(limit).map(|(_, k)| k.clone()).collect()
    }

    /// Keys with an expiry (live or not yet removed).
    pub fn expiring_len(&self) -> usize {
        self.expiring.len()
    }

    fn bury(&mut self, key: Vec<u8>) {
        self.bury_at(key, self.stamp);
    }

    fn bury_at(&mut self, key: Vec<u8>, version: u64) {
        self.tombstones.insert(key.clone(), version);
        self.tombstone_order.push_back((version, key));
        while self.tombstone_order.len() > MAX_TOMBSTONES {
            if let Some((version, key)) = self.tombstone_order.pop_front() {
                if self.tombstones.get(&key) == Some(&version) {
                    self.tombstones.remove(&key);
                }
                self.tombstone_floor = self.tombstone_floor.max(version);
            }
        }
    }

    /// Removes every key (FLUSHDB). A key that existed and was absent when watched was
    /// created after the watch, so its version tells: the most recently changed keys are
    /// buried at their versions (as many as tombstones are kept), and the floor rises to the
    /// newest version of the rest, so a watch older than that is judged changed.
    pub fn clear(&mut self) {
        let mut versions: Vec<(u64, Vec<u8>)> = self.items.drain().map(|(k, i)| (i.version, k)).collect();
        self.expiring.clear();
        if versions.len() > MAX_TOMBSTONES {
            let cut = versions.len() - MAX_TOMBSTONES;
            versions.select_nth_unstable(cut);
            let older = versions.drain(..cut).map(|(v, _)| v).max().unwrap_or(0);
            self.tombstone_floor = self.tombstone_floor.max(older);
        }
        versions.sort_unstable();
        for (version, key) in versions {
            self.bury_at(key, version);
        }
    }

    /// The version WATCH records for `key` now: 0 when it is not live.
    pub fn version(&self, key: &[u8], now_ms: u64) -> u64 {
        self.get(key, now_ms).map_or(0, |i| i.version)
    }

    /// Whether `key`, seen at version `seen` when the store's count was `mark`, may have
    /// changed since (see the module's doc).
    pub fn changed_since(&self, key: &[u8], seen: u64, mark: u64, now_ms: u64) -> bool {
        match self.get(key, now_ms) {
            Some(item) => item.version != seen,
            None if seen != 0 => true,
            None => {
                self.tombstones.get(key).is_some_and(|&v| v > mark)
                    || (mark < self.tombstone_floor && !self.tombstones.contains_key(key))
            }
        }
    }

    /// Live keys.
    pub fn len(&self, now_ms: u64) -> usize {
        if self.expiring.is_empty() {
            return self.items.len();
        }
        self.items.values().filter(|i| i.live(now_ms)).count()
    }

    /// Whether no key is live.
    pub fn is_empty(&self, now_ms: u64) -> bool {
        self.len(now_ms) == 0
    }

    /// Every live key with its item, in no particular order.
    pub fn iter(&self, now_ms: u64) -> impl Iterator<Item = (&Vec<u8>, &Item)> {
        self.items.iter().filter(move |(_, i)| i.live(now_ms))
    }

    /// Keys stored, expired ones not yet removed included.
    pub fn stored(&self) -> usize {
        self.items.len()
    }

    /// Every stored item, for a snapshot.
    pub(crate) fn raw_items(&self) -> &HashMap<Vec<u8>, Item> {
        &self.items
    }

    /// WATCH's bookkeeping, for a snapshot: tombstones oldest first, and the floor.
    pub(crate) fn watch_state(&self) -> (&VecDeque<(u64, Vec<u8>)>, u64) {
        (&self.tombstone_order, self.tombstone_floor)
    }

    /// Rebuilds a database from a snapshot's parts.
    pub(crate) fn restore(
        items: Vec<(Vec<u8>, Item)>,
        tombstones: VecDeque<(u64, Vec<u8>)>,
        tombstone_floor: u64,
    ) -> Self {
        let mut db = Db { tombstone_floor, ..Db::default() };
        for (key, item) in items {
            if let Some(t) = item.expires_at_ms {
                db.expiring.insert((t, key.clone()));
            }
            db.items.insert(key, item);
        }
        for (version, key) in &tombstones {
            db.tombstones.insert(key.clone(), *version);
        }
        db.tombstone_order = tombstones;
        db
    }

    /// Counts every key as changed now (SWAPDB: a watched key's database was replaced).
    pub fn mark_all_changed(&mut self, _now_ms: u64) {
        let stamp = self.stamp;
        self.items.values_mut().for_each(|i| i.version = stamp);
        self.tombstone_floor = self.tombstone_floor.max(stamp);
    }

    /// Swaps the contents of two databases (SWAPDB), keeping each one's stamp.
    pub fn swap_contents(&mut self, other: &mut Db) {
        let (a, b) = (self.stamp, other.stamp);
        std::mem::swap(self, other);
        self.stamp = a;
        other.stamp = b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_without_expiry_is_overwritten_in_place_and_anything_else_is_left_to_insert() {
        let mut db = Db::default();
        assert!(!db.overwrite_string(b"k", b"v"), "an absent key is inserted, not overwritten");
        db.stamp = 1;
        db.insert(b"k".to_vec(), Value::Str(b"v".to_vec()), None);
        db.stamp = 2;
        assert!(db.overwrite_string(b"k", b"w"));
        assert_eq!(db.value(b"k", 0), Some(&Value::Str(b"w".to_vec())));
        assert_eq!(db.version(b"k", 0), 2, "stamped, so WATCH sees the change");
        // Room far beyond the new value is given back.
        db.insert(b"big".to_vec(), Value::Str(vec![b'x'; 10_000]), None);
        assert!(db.overwrite_string(b"big", b"y"));
        let Some(Item { value: Value::Str(small), .. }) = db.raw_items().get(&b"big"[..]) else {
            panic!("a string")
        };
        assert!(small.capacity() < 10_000, "kept {} bytes of room for 1", small.capacity());
        // An expiry (cleared by a plain SET) and another type go the general way.
        db.insert(b"e".to_vec(), Value::Str(b"v".to_vec()), Some(5_000));
        assert!(!db.overwrite_string(b"e", b"w"));
        db.insert(b"l".to_vec(), Value::List(Box::default()), None);
        assert!(!db.overwrite_string(b"l", b"w"));
        assert_eq!(db.value(b"e", 0), Some(&Value::Str(b"v".to_vec())), "left as it was");
    }
}
