//! The replica's durable state: Raft's log, hard state, membership and latest snapshot, kept
//! in memory for `raft` to read and written to a [`Disk`] as one record per Ready (group
//! commit: one write, and one `fsync` when asked, for everything a Ready persists).
//!
//! `raft` reads its storage synchronously inside `step` and `ready`, so the whole log after
//! the latest snapshot stays in memory; [`LogStore::compact`] bounds it by replacing the
//! applied prefix with a snapshot of the store, and rewrites the file to match.
//!
//! The file is a sequence of records, `[len: u32 LE][crc32c: u32 LE][payload]`. A load reads
//! records until the first that is short or fails its CRC (a write cut by a crash) and drops
//! the rest, so what survives is exactly a prefix of what was written:
//! - with `fsync` on ([`Sync::Always`]), every record written before a Ready's messages were
//!   sent survives a crash of the process *and* of the machine;
//! - with it off ([`Sync::Never`]), records survive a crash of the process (they are in the
//!   page cache) but not of the machine. A member cannot tell which happened, so it must not
//!   return as the voter it was: see [`crate::replica`].

// protobuf's messages carry hidden fields (unknown fields, cached size): they are built from
// `Default` and then filled, as `raft` itself does.
#![allow(clippy::field_reassign_with_default)]

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

use super::retire::Retirer;
use super::wire::{
    decode_conf_state, decode_entry, decode_hard_state, decode_snapshot, encode_conf_state, encode_entry,
    encode_hard_state, encode_snapshot,
};
use kairos_services::codec::{Reader, put_u64};

/// CRC-32C, sixteen bytes a step: every record a member writes is checksummed on its loop, and
/// a byte a step was 7% of a follower's time at 50 clients (`perf annotate`).
static CRC: crc::Crc<u32, crc::Table<16>> = crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);
const TAG_HARD_STATE: u8 = 1;
const TAG_ENTRIES: u8 = 2;
const TAG_SNAPSHOT: u8 = 3;
const TAG_CONF_STATE: u8 = 4;

/// Whether a write waits until it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// `fsync` every Ready's record before its messages go out.
    Always,
    /// Leave records in the page cache.
    Never,
}

/// Where the records go: a file, or memory in the simulator.
pub trait Disk {
    /// Appends bytes; with [`Sync::Always`], returns once they are durable.
    fn append(&mut self, bytes: &[u8], sync: Sync) -> io::Result<()>;
    /// Replaces the whole contents, atomically (all old or all new after a crash).
    fn replace(&mut self, bytes: &[u8], sync: Sync) -> io::Result<()>;
    /// Everything written so far.
    fn load(&mut self) -> io::Result<Vec<u8>>;
}

/// A log file in a directory of its own (`raft.log`, replaced through `raft.log.new`; the
/// replaced file is closed off the caller's thread, [`Retirer`]).
#[derive(Debug)]
pub struct FileDisk {
    dir: PathBuf,
    file: File,
    /// Started at the first replace.
    retirer: Option<Retirer>,
}

impl FileDisk {
    /// Opens (or creates) the log in `dir`, creating the directory.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let file = OpenOptions::new().create(true).append(true).read(true).open(dir.join("raft.log"))?;
        Ok(Self { dir: dir.to_path_buf(), file, retirer: None })
    }
}

impl Disk for FileDisk {
    fn append(&mut self, bytes: &[u8], sync: Sync) -> io::Result<()> {
        self.file.write_all(bytes)?;
        if sync == Sync::Always {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn replace(&mut self, bytes: &[u8], sync: Sync) -> io::Result<()> {
        let fresh = self.dir.join("raft.log.new");
        let mut file = File::create(&fresh)?;
        file.write_all(bytes)?;
        if sync == Sync::Always {
            file.sync_all()?;
        }
        std::fs::rename(&fresh, self.dir.join("raft.log"))?;
        if sync == Sync::Always {
            File::open(&self.dir)?.sync_all()?;
        }
        let fresh = OpenOptions::new().append(true).read(true).open(self.dir.join("raft.log"))?;
        let old = std::mem::replace(&mut self.file, fresh);
        if self.retirer.is_none() {
            self.retirer = Retirer::spawn();
        }
        match &self.retirer {
            Some(retirer) => retirer.retire(old),
            None => drop(old),
        }
        Ok(())
    }

    fn load(&mut self) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        File::open(self.dir.join("raft.log"))?.read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

/// A disk in memory, for the simulator: `durable` survives a machine crash, `cached` only a
/// process crash.
#[derive(Debug, Clone, Default)]
pub struct MemDisk {
    /// Bytes that reached the platter.
    pub durable: Vec<u8>,
    /// Bytes in the page cache: the full contents as the process sees them.
    pub cached: Vec<u8>,
}

impl MemDisk {
    /// What the disk holds after the machine lost power: the page cache is gone.
    pub fn power_loss(&mut self) {
        self.cached = self.durable.clone();
    }
}

impl Disk for MemDisk {
    fn append(&mut self, bytes: &[u8], sync: Sync) -> io::Result<()> {
        self.cached.extend_from_slice(bytes);
        if sync == Sync::Always {
            self.durable = self.cached.clone();
        }
        Ok(())
    }

    fn replace(&mut self, bytes: &[u8], sync: Sync) -> io::Result<()> {
        self.cached = bytes.to_vec();
        if sync == Sync::Always {
            self.durable = self.cached.clone();
        }
        Ok(())
    }

    fn load(&mut self) -> io::Result<Vec<u8>> {
        Ok(self.cached.clone())
    }
}

/// Raft's state in memory, mirrored on a disk.
#[derive(Debug)]
pub struct LogStore<D> {
    disk: D,
    sync: Sync,
    hard_state: HardState,
    conf_state: ConfState,
    snapshot: Snapshot,
    entries: Vec<Entry>,
    record: Vec<u8>,
}

fn push_record(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    payload(out);
    let len = (out.len() - start - 8) as u32;
    let crc = CRC.checksum(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What loading a disk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    /// Records read.
    pub records: usize,
    /// Bytes dropped at the end (a write cut by a crash).
    pub torn_bytes: usize,
}

impl<D: Disk> LogStore<D> {
    /// A store for a member starting the cluster with `voters` (empty for a member that joins
    /// later and learns the membership from the leader); writes the initial membership.
    pub fn create(mut disk: D, sync: Sync, voters: &[u64]) -> io::Result<Self> {
        let mut conf_state = ConfState::default();
        conf_state.set_voters(voters.to_vec());
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().set_conf_state(conf_state.clone());
        let mut record = Vec::new();
        push_record(&mut record, |out| {
            out.push(TAG_CONF_STATE);
            encode_conf_state(&conf_state, out);
        });
        disk.replace(&record, sync)?;
        Ok(Self {
            disk,
            sync,
            hard_state: HardState::default(),
            conf_state,
            snapshot,
            entries: Vec::new(),
            record: Vec::new(),
        })
    }

    /// Reads the state back from `disk`.
    pub fn load(mut disk: D, sync: Sync) -> io::Result<(Self, Loaded)> {
        let bytes = disk.load()?;
        let mut store = Self {
            disk,
            sync,
            hard_state: HardState::default(),
            conf_state: ConfState::default(),
            snapshot: Snapshot::default(),
            entries: Vec::new(),
            record: Vec::new(),
        };
        let mut at = 0;
        let mut records = 0;
        while bytes.len() - at >= 8 {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
            let Some(payload) = bytes.get(at + 8..at + 8 + len) else { break };
            if CRC.checksum(payload) != crc || store.replay(payload).is_err() {
                break;
            }
            at += 8 + len;
            records += 1;
        }
        Ok((store, Loaded { records, torn_bytes: bytes.len() - at }))
    }

    fn replay(&mut self, payload: &[u8]) -> Result<(), kairos_services::codec::DecodeError> {
        let mut r = Reader::new(payload);
        match r.u8("record tag")? {
            TAG_HARD_STATE => self.hard_state = decode_hard_state(&mut r)?,
            TAG_CONF_STATE => self.conf_state = decode_conf_state(&mut r)?,
            TAG_SNAPSHOT => {
                let snap = decode_snapshot(&mut r)?;
                self.install_snapshot(snap);
            }
            TAG_ENTRIES => {
                let n = r.count("entry count", 6)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    entries.push(decode_entry(&mut r)?);
                }
                self.append_entries(&entries);
            }
            other => {
                return Err(kairos_services::codec::DecodeError::Invalid {
                    field: "record tag",
                    value: u64::from(other),
                });
            }
        }
        r.finish()
    }

    /// The hard state (term, vote, commit) last persisted.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// The membership last persisted.
    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The latest snapshot (index 0 when there is none).
    pub fn latest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Entries in memory (after the snapshot).
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// The disk, for the simulator's crashes.
    pub fn disk(&self) -> &D {
        &self.disk
    }

    /// Takes the disk back (the member stops).
    pub fn into_disk(self) -> D {
        self.disk
    }

    fn first(&self) -> u64 {
        self.snapshot.get_metadata().index + 1
    }

    fn last(&self) -> u64 {
        self.entries.last().map_or(self.snapshot.get_metadata().index, |e| e.index)
    }

    fn install_snapshot(&mut self, snap: Snapshot) {
        let meta = snap.get_metadata();
        self.entries.retain(|e| e.index > meta.index);
        // Entries after the snapshot are kept only if they agree with it at its index.
        if self.entries.first().is_some_and(|e| e.index != meta.index + 1) {
            self.entries.clear();
        }
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.conf_state = meta.get_conf_state().clone();
        self.snapshot = snap;
    }

    fn append_entries(&mut self, entries: &[Entry]) {
        let first = self.first();
        let entries: Vec<&Entry> = entries.iter().filter(|e| e.index >= first).collect();
        let Some(head) = entries.first() else { return };
        // Anything from the first new index on is replaced (a new leader's log wins).
        let keep = (head.index - first) as usize;
        self.entries.truncate(keep.min(self.entries.len()));
        if self.entries.last().is_some_and(|e| e.index + 1 != head.index)
            || (self.entries.is_empty() && head.index != first)
        {
            // A gap: `raft` never asks this; refuse to make a log with holes.
            return;
        }
        self.entries.extend(entries.into_iter().cloned());
    }

    /// Persists what one Ready asks, in the order `raft` requires (snapshot, then entries,
    /// then hard state), as one record group written (and synced) at once.
    pub fn persist(
        &mut self,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> io::Result<()> {
        let mut record = std::mem::take(&mut self.record);
        record.clear();
        if let Some(snap) = snapshot {
            push_record(&mut record, |out| {
                out.push(TAG_SNAPSHOT);
                encode_snapshot(snap, out);
            });
        }
        if !entries.is_empty() {
            push_record(&mut record, |out| {
                out.push(TAG_ENTRIES);
                put_u64(out, entries.len() as u64);
                entries.iter().for_each(|e| encode_entry(e, out));
            });
        }
        // Only a snapshot, entries, or a new term or vote must be durable before the messages
        // that promise them leave. A hard state that moves only the commit index is not
        // written at all: Raft's commit index is volatile (a restarted member learns it again
        // from the leader, and replays from its snapshot only what the disk says committed),
        // and the next record with entries or a new term carries the newest along. That saves
        // the leader a write between a write's commit and its answer, and each follower one
        // for every heartbeat that moves its commit index.
        let promises = snapshot.is_some()
            || !entries.is_empty()
            || hard_state
                .is_some_and(|hs| hs.term != self.hard_state.term || hs.vote != self.hard_state.vote);
        if let Some(hs) = hard_state.filter(|_| promises) {
            push_record(&mut record, |out| {
                out.push(TAG_HARD_STATE);
                encode_hard_state(hs, out);
            });
        }
        let written = if record.is_empty() { Ok(()) } else { self.disk.append(&record, self.sync) };
        self.record = record;
        written?;
        if let Some(snap) = snapshot {
            self.install_snapshot(snap.clone());
        }
        self.append_entries(entries);
        if let Some(hs) = hard_state {
            self.hard_state = hs.clone();
        }
        Ok(())
    }

    /// Records only a new commit index (a LightReady's).
    pub fn persist_commit(&mut self, commit: u64) -> io::Result<()> {
        let mut hs = self.hard_state.clone();
        hs.commit = commit;
        self.persist(None, &[], Some(&hs))
    }

    /// Records a membership applied from a committed configuration change.
    pub fn persist_conf_state(&mut self, conf_state: ConfState) -> io::Result<()> {
        let mut record = Vec::new();
        push_record(&mut record, |out| {
            out.push(TAG_CONF_STATE);
            encode_conf_state(&conf_state, out);
        });
        self.disk.append(&record, self.sync)?;
        self.conf_state = conf_state;
        Ok(())
    }

    /// Replaces entries up to `applied` (which the store has applied) with a snapshot whose
    /// data is `store_bytes`, and rewrites the disk with only what is left: memory and file
    /// stay bounded by the entries since the last compaction.
    pub fn compact(&mut self, applied: u64, store_bytes: Vec<u8>) -> io::Result<()> {
        if applied <= self.snapshot.get_metadata().index || applied > self.last() {
            return Ok(());
        }
        // The entries are contiguous from `first()`, and `applied` is among them (checked above).
        let applied_at = (applied - self.first()) as usize;
        let term = self.entries.get(applied_at).map_or(0, |e| e.term);
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = applied;
        snap.mut_metadata().term = term;
        snap.mut_metadata().set_conf_state(self.conf_state.clone());
        snap.data = store_bytes.into();
        let mut bytes = Vec::new();
        push_record(&mut bytes, |out| {
            out.push(TAG_SNAPSHOT);
            encode_snapshot(&snap, out);
        });
        push_record(&mut bytes, |out| {
            out.push(TAG_CONF_STATE);
            encode_conf_state(&self.conf_state, out);
        });
        let rest = &self.entries[applied_at + 1..];
        if !rest.is_empty() {
            push_record(&mut bytes, |out| {
                out.push(TAG_ENTRIES);
                put_u64(out, rest.len() as u64);
                rest.iter().for_each(|e| encode_entry(e, out));
            });
        }
        push_record(&mut bytes, |out| {
            out.push(TAG_HARD_STATE);
            encode_hard_state(&self.hard_state, out);
        });
        self.disk.replace(&bytes, self.sync)?;
        self.snapshot = snap;
        // Drained rather than rebuilt: the vector keeps its room for the entries that follow,
        // so the next compaction's worth of appends is not copied again into fresh memory as a
        // new vector doubles (each copy faults its pages in on the loop).
        self.entries.drain(..=applied_at);
        Ok(())
    }
}

impl<D: Disk> raft::Storage for LogStore<D> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let offset = self.first();
        let mut entries = self.entries[(low - offset) as usize..(high - offset) as usize].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot.get_metadata().index < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    #[test]
    fn records_carry_crc32c_so_logs_written_before_read_the_same() {
        // CRC-32C's check value, and a record's checksum as a byte a step computed it.
        assert_eq!(CRC.checksum(b"123456789"), 0xE306_9283);
        let bytewise = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 15, 16, 17, 999, 1000] {
            assert_eq!(CRC.checksum(&payload[..len]), bytewise.checksum(&payload[..len]), "{len} bytes");
        }
    }

    fn entry(index: u64, term: u64) -> Entry {
        let mut e = Entry::default();
        e.index = index;
        e.term = term;
        e.data = vec![index as u8; 3].into();
        e
    }

    fn hs(term: u64, vote: u64, commit: u64) -> HardState {
        let mut h = HardState::default();
        h.term = term;
        h.vote = vote;
        h.commit = commit;
        h
    }

    #[test]
    fn a_reload_gives_back_what_was_persisted() {
        let mut store = LogStore::create(MemDisk::default(), Sync::Always, &[1, 2, 3]).unwrap();
        store.persist(None, &[entry(1, 1), entry(2, 1), entry(3, 1)], Some(&hs(1, 2, 1))).unwrap();
        // A new leader overwrites from index 3.
        store.persist(None, &[entry(3, 2), entry(4, 2)], Some(&hs(2, 3, 2))).unwrap();
        let disk = store.into_disk();
        let (back, loaded) = LogStore::load(disk, Sync::Always).unwrap();
        assert_eq!(loaded, Loaded { records: 5, torn_bytes: 0 });
        assert_eq!(back.hard_state(), &hs(2, 3, 2));
        assert_eq!(back.conf_state().get_voters(), &[1, 2, 3]);
        assert_eq!((back.first_index().unwrap(), back.last_index().unwrap()), (1, 4));
        assert_eq!(back.term(3).unwrap(), 2);
        assert_eq!(back.entries(1, 5, None, GetEntriesContext::empty(false)).unwrap().len(), 4);
    }

    #[test]
    fn only_what_promises_is_written_and_synced() {
        let mut store = LogStore::create(MemDisk::default(), Sync::Always, &[1]).unwrap();
        store.persist(None, &[entry(1, 1)], Some(&hs(1, 1, 0))).unwrap();
        let synced = store.disk().durable.len();
        assert_eq!(synced, store.disk().cached.len(), "entries and a vote are synced");
        store.persist(None, &[], Some(&hs(1, 1, 1))).unwrap();
        assert_eq!(store.disk().cached.len(), synced, "a commit index alone is not even written");
        assert_eq!(store.hard_state().commit, 1, "but kept for raft");
        store.persist(None, &[], Some(&hs(2, 0, 1))).unwrap();
        assert!(store.disk().durable.len() > synced);
        assert_eq!(store.disk().durable.len(), store.disk().cached.len(), "a new term is synced");
        let (back, _) = LogStore::load(store.into_disk(), Sync::Always).unwrap();
        assert_eq!(back.hard_state(), &hs(2, 0, 1), "the commit index rode with the new term");
    }

    #[test]
    fn a_torn_tail_is_dropped_and_what_precedes_it_kept() {
        let mut store = LogStore::create(MemDisk::default(), Sync::Always, &[1]).unwrap();
        store.persist(None, &[entry(1, 1)], Some(&hs(1, 1, 1))).unwrap();
        let before = store.disk().cached.len();
        store.persist(None, &[entry(2, 1)], None).unwrap();
        let full = store.into_disk().cached;
        for cut in 1..full.len() - before {
            let disk = MemDisk { durable: Vec::new(), cached: full[..full.len() - cut].to_vec() };
            let (back, loaded) = LogStore::load(disk, Sync::Always).unwrap();
            assert_eq!(back.last_index().unwrap(), 1, "cut {cut}");
            assert!(loaded.torn_bytes > 0);
        }
        let mut flipped = full.clone();
        let n = flipped.len();
        flipped[n - 1] ^= 1;
        let (back, _) =
            LogStore::load(MemDisk { durable: Vec::new(), cached: flipped }, Sync::Always).unwrap();
        assert_eq!(back.last_index().unwrap(), 1, "a record failing its CRC is dropped");
    }

    #[test]
    fn without_fsync_a_power_loss_keeps_only_the_synced_prefix() {
        let mut store = LogStore::create(MemDisk::default(), Sync::Never, &[1]).unwrap();
        store.persist(None, &[entry(1, 1)], Some(&hs(1, 1, 1))).unwrap();
        let mut disk = store.into_disk();
        disk.power_loss();
        let (back, _) = LogStore::load(disk, Sync::Never).unwrap();
        assert_eq!(back.last_index().unwrap(), 0);
        assert_eq!(back.conf_state().get_voters(), &[] as &[u64]);
    }

    #[test]
    fn compaction_bounds_memory_and_file_and_survives_a_reload() {
        let mut store = LogStore::create(MemDisk::default(), Sync::Always, &[1, 2]).unwrap();
        for i in 1..=100 {
            store.persist(None, &[entry(i, 1)], Some(&hs(1, 1, i))).unwrap();
        }
        let before = store.disk().cached.len();
        let room = store.entries.capacity();
        store.compact(90, b"state".to_vec()).unwrap();
        assert_eq!(store.entry_count(), 10);
        assert_eq!(store.entries.capacity(), room, "the vector keeps its room for the entries to come");
        assert_eq!((store.entries[0].index, store.entries[9].index), (91, 100));
        assert!(store.disk().cached.len() < before / 4);
        assert_eq!(store.term(90).unwrap(), 1);
        assert!(matches!(store.term(89), Err(raft::Error::Store(StorageError::Compacted))));
        let (back, _) = LogStore::load(store.into_disk(), Sync::Always).unwrap();
        assert_eq!((back.first_index().unwrap(), back.last_index().unwrap()), (91, 100));
        assert_eq!(&back.latest_snapshot().data[..], b"state");
        assert_eq!(back.hard_state().commit, 100);
    }

    #[test]
    fn an_installed_snapshot_replaces_an_older_log() {
        let mut store = LogStore::create(MemDisk::default(), Sync::Always, &[1, 2, 3]).unwrap();
        store.persist(None, &[entry(1, 1), entry(2, 1)], None).unwrap();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 50;
        snap.mut_metadata().term = 4;
        snap.mut_metadata().mut_conf_state().set_voters(vec![1, 2, 3, 4]);
        store.persist(Some(&snap), &[], None).unwrap();
        assert_eq!((store.first_index().unwrap(), store.last_index().unwrap()), (51, 50));
        assert_eq!(store.hard_state().commit, 50);
        assert_eq!(store.conf_state().get_voters(), &[1, 2, 3, 4]);
        let (back, _) = LogStore::load(store.into_disk(), Sync::Always).unwrap();
        assert_eq!(back.last_index().unwrap(), 50);
    }
}
