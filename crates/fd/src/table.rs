//! The alive table where applications read it without a system call: 64-bit words in memory
//! shared between the member's node and its applications (a file under `/dev/shm`, mapped by
//! each; see `kairos_io::bridge::create_words`), and the application's liveness counter beside
//! it.
//!
//! # Layout
//!
//! Native-endian `u64` words (every side runs on one machine):
//!
//! | word | field | written by |
//! |---|---|---|
//! | 0 | magic, `"KAIROSFD"` as bytes ([`MAGIC`]) | the node, last, with release |
//! | 1 | version ([`VERSION`]) | node |
//! | 2 | rows | node |
//! | 3, 4 | period `T` and threshold Lambda, ns | node |
//! | 5, 6 | this member's id and incarnation | node |
//! | 7 | the node loop's last wake-up, ns (`CLOCK_MONOTONIC`; 0: not running) | node |
//! | 8 | heartbeats sent | node |
//! | 16 | the application's liveness counter | application ([`AliveTable::bump`]) |
//! | 17 | 1 while the demonstration application is told to stop bumping (a hang, for tests) | anyone |
//! | 32 + 16 i | row `i` (below) | node |
//!
//! A row: a sequence word (odd while the node writes the row), the member's id, incarnation,
//! last heartbeat's receive time, counter, last fresh heartbeat's receive time, suspected
//! since (0: alive), when the node noticed, the count of suspicions, then [`PEER_SLOTS`] words
//! with the peer detectors' verdicts on the member (when each noticed it failed; 0: it trusts
//! it), for comparison.
//!
//! # Contract
//!
//! One writer per row (the node's loop); any number of readers, in any process. A reader takes
//! a row whole or not at all (a sequence lock: it reads the sequence word, the fields, and the
//! sequence word again, and retries at most [`READ_TRIES`] times). Every access is an atomic
//! load or store of an aligned word, so a peer writing garbage at any time makes a reader read
//! garbage, never undefined behaviour; the row count is validated against the memory's size
//! once, at [`AliveTable::attach`], and kept privately, so no access leaves the memory.
//! Reads and writes never allocate, block or make a system call.

use kairos_ring::bridge::BridgeMemory;
use std::sync::atomic::{Ordering, fence};

use super::detector::{Entry, Verdict};

/// The first word: `"KAIROSFD"` as native-endian bytes.
pub const MAGIC: u64 = u64::from_ne_bytes(*b"KAIROSFD");
/// The layout's version.
pub const VERSION: u64 = 1;
/// The most rows a table has.
pub const MAX_ROWS: usize = 256;
/// Words in a row.
pub const ROW_WORDS: usize = 16;
/// The peer detectors' verdict slots in a row.
pub const PEER_SLOTS: usize = 4;
/// How many times a reader retries a row the node was writing.
pub const READ_TRIES: usize = 64;

const ROWS_AT: usize = 2;
const PERIOD_AT: usize = 3;
const THRESHOLD_AT: usize = 4;
const MEMBER_AT: usize = 5;
const INCARNATION_AT: usize = 6;
const NODE_BEAT_AT: usize = 7;
const SENT_AT: usize = 8;
const LIVENESS_AT: usize = 16;
const PAUSE_AT: usize = 17;
const FIRST_ROW_AT: usize = 32;

/// Why a table could not be made or joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The memory cannot hold the rows asked for (or the rows the header states).
    #[error("the memory has {have} words, a table of {rows} rows needs {needs}")]
    TooSmall {
        /// Words of memory.
        have: usize,
        /// Rows asked for or found.
        rows: usize,
        /// Words needed.
        needs: usize,
    },
    /// More rows than [`MAX_ROWS`].
    #[error("{0} rows: a table has at most {MAX_ROWS}")]
    TooManyRows(u64),
    /// The memory holds no table (or one not initialised yet).
    #[error("no alive table in the memory (first word {0:#018x})")]
    NotATable(u64),
    /// The table is of another layout version.
    #[error("alive table version {0}, this side reads version {VERSION}")]
    Version(u64),
}

/// The table's fixed facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableHeader {
    /// The heartbeat period, ns.
    pub period_ns: u64,
    /// The threshold Lambda, ns.
    pub threshold_ns: u64,
    /// The member whose node writes the table.
    pub member: u64,
    /// Its incarnation.
    pub incarnation: u64,
}

/// One member's row, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Row {
    /// The member.
    pub member: u64,
    /// Its incarnation as last heard.
    pub incarnation: u64,
    /// When its last heartbeat came, ns (0: never).
    pub last_heartbeat_ns: u64,
    /// Its liveness counter, as last heard fresh.
    pub counter: u64,
    /// When its last fresh heartbeat came, ns.
    pub last_fresh_ns: u64,
    /// Suspected since, ns (`None`: alive).
    pub suspected_since_ns: Option<u64>,
    /// When the node noticed the suspicion, ns.
    pub noticed_ns: Option<u64>,
    /// How many times it was suspected.
    pub suspicions: u64,
    /// When each peer detector noticed the member failed, ns (0: the peer trusts it).
    pub peers_noticed_ns: [u64; PEER_SLOTS],
}

impl Row {
    /// The row of a detector's entry, with no peer verdicts.
    pub fn from_entry(entry: &Entry) -> Self {
        let (since, noticed) = match entry.verdict {
            Verdict::Alive => (None, None),
            Verdict::Suspected { since_ns, noticed_ns } => (Some(since_ns), Some(noticed_ns)),
        };
        Self {
            member: entry.member,
            incarnation: entry.incarnation,
            last_heartbeat_ns: entry.last_heartbeat_ns,
            counter: entry.counter,
            last_fresh_ns: entry.last_fresh_ns,
            suspected_since_ns: since,
            noticed_ns: noticed,
            suspicions: entry.suspicions,
            peers_noticed_ns: [0; PEER_SLOTS],
        }
    }

    /// Whether the node suspects the member.
    pub fn is_suspected(&self) -> bool {
        self.suspected_since_ns.is_some()
    }
}

/// The alive table in some memory of words; see the module doc.
#[derive(Debug)]
pub struct AliveTable<M> {
    memory: M,
    rows: usize,
}

/// The words a table of `rows` rows takes.
pub const fn words_for(rows: usize) -> usize {
    FIRST_ROW_AT + rows * ROW_WORDS
}

/// The bytes a table of `rows` rows takes.
pub const fn bytes_for(rows: usize) -> usize {
    words_for(rows) * 8
}

impl<M: BridgeMemory> AliveTable<M> {
    /// Writes a fresh table for `members` (one row each, in order, every one alive and never
    /// heard) into `memory`, which must hold [`words_for`] their count. The liveness counter
    /// and the pause word keep their values (an application may already be bumping).
    pub fn init(memory: M, header: &TableHeader, members: &[u64]) -> Result<Self, TableError> {
        let rows = members.len();
        if rows > MAX_ROWS {
            return Err(TableError::TooManyRows(rows as u64));
        }
        let words = memory.words();
        if words.len() < words_for(rows) {
            return Err(TableError::TooSmall { have: words.len(), rows, needs: words_for(rows) });
        }
        words[0].store(0, Ordering::Release);
        words[1].store(VERSION, Ordering::Relaxed);
        words[ROWS_AT].store(rows as u64, Ordering::Relaxed);
        words[PERIOD_AT].store(header.period_ns, Ordering::Relaxed);
        words[THRESHOLD_AT].store(header.threshold_ns, Ordering::Relaxed);
        words[MEMBER_AT].store(header.member, Ordering::Relaxed);
        words[INCARNATION_AT].store(header.incarnation, Ordering::Relaxed);
        words[NODE_BEAT_AT].store(0, Ordering::Relaxed);
        words[SENT_AT].store(0, Ordering::Relaxed);
        for (i, &member) in members.iter().enumerate() {
            let at = FIRST_ROW_AT + i * ROW_WORDS;
            for w in &words[at..at + ROW_WORDS] {
                w.store(0, Ordering::Relaxed);
            }
            words[at + 1].store(member, Ordering::Relaxed);
        }
        words[0].store(MAGIC, Ordering::Release);
        Ok(Self { memory, rows })
    }

    /// Joins the table another side wrote in `memory`, after checking its header.
    pub fn attach(memory: M) -> Result<Self, TableError> {
        let words = memory.words();
        let magic = words.first().map_or(0, |w| w.load(Ordering::Acquire));
        if magic != MAGIC {
            return Err(TableError::NotATable(magic));
        }
        let version = words.get(1).map_or(0, |w| w.load(Ordering::Relaxed));
        if version != VERSION {
            return Err(TableError::Version(version));
        }
        let rows = words.get(ROWS_AT).map_or(0, |w| w.load(Ordering::Relaxed));
        if rows > MAX_ROWS as u64 {
            return Err(TableError::TooManyRows(rows));
        }
        let rows = rows as usize;
        if words.len() < words_for(rows) {
            return Err(TableError::TooSmall { have: words.len(), rows, needs: words_for(rows) });
        }
        Ok(Self { memory, rows })
    }

    /// The memory the table lives in.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    fn word(&self, at: usize) -> u64 {
        self.memory.words()[at].load(Ordering::Acquire)
    }

    /// The table's fixed facts, as its node wrote them.
    pub fn header(&self) -> TableHeader {
        TableHeader {
            period_ns: self.word(PERIOD_AT),
            threshold_ns: self.word(THRESHOLD_AT),
            member: self.word(MEMBER_AT),
            incarnation: self.word(INCARNATION_AT),
        }
    }

    /// Rows in the table.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Application side: proves the application alive (call it at least every `T/3`); returns
    /// the counter's new value.
    pub fn bump(&self) -> u64 {
        self.memory.words()[LIVENESS_AT].fetch_add(1, Ordering::Release).wrapping_add(1)
    }

    /// The application's liveness counter.
    pub fn liveness(&self) -> u64 {
        self.word(LIVENESS_AT)
    }

    /// Tells the demonstration application to stop bumping (`true`) or to go on.
    pub fn set_app_paused(&self, paused: bool) {
        self.memory.words()[PAUSE_AT].store(u64::from(paused), Ordering::Release);
    }

    /// Whether the demonstration application is told to stop bumping.
    pub fn app_paused(&self) -> bool {
        self.word(PAUSE_AT) != 0
    }

    /// Node side: the loop's wake-up at `now_ns` and the heartbeats sent so far.
    pub fn beat(&self, now_ns: u64, heartbeats_sent: u64) {
        let words = self.memory.words();
        words[NODE_BEAT_AT].store(now_ns, Ordering::Release);
        words[SENT_AT].store(heartbeats_sent, Ordering::Release);
    }

    /// The node loop's last wake-up, ns (0: not running yet).
    pub fn node_beat_ns(&self) -> u64 {
        self.word(NODE_BEAT_AT)
    }

    /// Heartbeats the node has sent.
    pub fn heartbeats_sent(&self) -> u64 {
        self.word(SENT_AT)
    }

    /// Node side: writes row `index` (ignored past the last row). One writer per row.
    pub fn publish(&self, index: usize, row: &Row) {
        if index >= self.rows {
            return;
        }
        let words = &self.memory.words()[FIRST_ROW_AT + index * ROW_WORDS..][..ROW_WORDS];
        let seq = words[0].load(Ordering::Relaxed);
        // Odd while writing; the fence keeps the field stores after it.
        words[0].store(seq | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let fields = [
            row.member,
            row.incarnation,
            row.last_heartbeat_ns,
            row.counter,
            row.last_fresh_ns,
            row.suspected_since_ns.unwrap_or(0),
            row.noticed_ns.unwrap_or(0),
            row.suspicions,
        ];
        for (w, v) in words[1..].iter().zip(fields.iter().chain(row.peers_noticed_ns.iter())) {
            w.store(*v, Ordering::Relaxed);
        }
        words[0].store((seq | 1).wrapping_add(1), Ordering::Release);
    }

    /// Reads row `index` whole, or `None` past the last row or when the node kept writing it
    /// through [`READ_TRIES`] tries.
    pub fn row(&self, index: usize) -> Option<Row> {
        if index >= self.rows {
            return None;
        }
        let words = &self.memory.words()[FIRST_ROW_AT + index * ROW_WORDS..][..ROW_WORDS];
        for _ in 0..READ_TRIES {
            let before = words[0].load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut f = [0u64; 8 + PEER_SLOTS];
            for (v, w) in f.iter_mut().zip(&words[1..]) {
                *v = w.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if words[0].load(Ordering::Relaxed) != before {
                continue;
            }
            let nonzero = |v: u64| (v != 0).then_some(v);
            let mut peers_noticed_ns = [0; PEER_SLOTS];
            peers_noticed_ns.copy_from_slice(&f[8..]);
            return Some(Row {
                member: f[0],
                incarnation: f[1],
                last_heartbeat_ns: f[2],
                counter: f[3],
                last_fresh_ns: f[4],
                suspected_since_ns: nonzero(f[5]),
                noticed_ns: nonzero(f[6]),
                suspicions: f[7],
                peers_noticed_ns,
            });
        }
        None
    }

    /// The row of `member`, if the table has one and it could be read.
    pub fn find(&self, member: u64) -> Option<Row> {
        (0..self.rows).filter_map(|i| self.row(i)).find(|r| r.member == member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kairos_ring::bridge::HeapMemory;
    use std::sync::Arc;

    fn header() -> TableHeader {
        TableHeader { period_ns: 100_000, threshold_ns: 200_000, member: 1, incarnation: 42 }
    }

    #[test]
    fn a_table_is_written_by_its_node_and_read_by_an_application() {
        let memory = Arc::new(HeapMemory::new(bytes_for(2)));
        let node = AliveTable::init(Arc::clone(&memory), &header(), &[2, 3]).unwrap();
        let app = AliveTable::attach(Arc::clone(&memory)).unwrap();
        assert_eq!(app.header(), header());
        assert_eq!(app.rows(), 2);
        assert_eq!(app.find(3), Some(Row { member: 3, ..Row::default() }));
        let row = Row {
            member: 3,
            incarnation: 7,
            last_heartbeat_ns: 10,
            counter: 5,
            last_fresh_ns: 9,
            suspected_since_ns: Some(400),
            noticed_ns: Some(401),
            suspicions: 1,
            peers_noticed_ns: [0, 500, 0, 9_000],
        };
        node.publish(1, &row);
        assert_eq!(app.find(3), Some(row));
        assert!(app.find(3).unwrap().is_suspected());
        assert_eq!(app.row(2), None);
        node.publish(9, &row);
        assert_eq!(app.bump(), 1);
        assert_eq!(app.bump(), 2);
        assert_eq!(node.liveness(), 2);
        node.beat(77, 3);
        assert_eq!((app.node_beat_ns(), app.heartbeats_sent()), (77, 3));
        app.set_app_paused(true);
        assert!(node.app_paused());
    }

    #[test]
    fn memory_without_a_table_or_too_small_is_refused() {
        assert!(matches!(AliveTable::attach(HeapMemory::new(bytes_for(1))), Err(TableError::NotATable(0))));
        assert!(matches!(
            AliveTable::init(HeapMemory::new(bytes_for(1)), &header(), &[2, 3]),
            Err(TableError::TooSmall { rows: 2, .. })
        ));
        // A header that claims more rows than the memory holds.
        let memory = Arc::new(HeapMemory::new(bytes_for(2)));
        AliveTable::init(Arc::clone(&memory), &header(), &[2, 3]).unwrap();
        memory.words()[ROWS_AT].store(1_000, Ordering::Relaxed);
        assert!(matches!(AliveTable::attach(Arc::clone(&memory)), Err(TableError::TooManyRows(1_000))));
        memory.words()[ROWS_AT].store(200, Ordering::Relaxed);
        assert!(matches!(AliveTable::attach(Arc::clone(&memory)), Err(TableError::TooSmall { .. })));
        memory.words()[1].store(9, Ordering::Relaxed);
        assert!(matches!(AliveTable::attach(memory), Err(TableError::Version(9))));
    }

    #[test]
    fn a_reader_never_sees_a_torn_row() {
        let memory = Arc::new(HeapMemory::new(bytes_for(1)));
        let node = AliveTable::init(Arc::clone(&memory), &header(), &[2]).unwrap();
        let app = AliveTable::attach(Arc::clone(&memory)).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut v = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    let row = Row {
                        member: 2,
                        incarnation: v,
                        last_heartbeat_ns: v,
                        counter: v,
                        last_fresh_ns: v,
                        suspected_since_ns: Some(v),
                        noticed_ns: Some(v),
                        suspicions: v,
                        peers_noticed_ns: [v; PEER_SLOTS],
                    };
                    node.publish(0, &row);
                    v += 1;
                }
            });
            // The writer may not have run yet on a busy machine: wait for its first row, so
            // every read below races a writer that is running (or was preempted mid-row).
            while app.row(0).is_none_or(|r| r.incarnation == 0) {
                std::thread::yield_now();
            }
            let mut read = 0;
            for _ in 0..200_000 {
                if let Some(r) = app.row(0)
                    && r.incarnation != 0
                {
                    let v = r.incarnation;
                    assert_eq!(
                        (r.counter, r.suspicions, r.peers_noticed_ns),
                        (v, v, [v; PEER_SLOTS]),
                        "torn"
                    );
                    read += 1;
                }
            }
            stop.store(true, Ordering::Relaxed);
            assert!(read > 0);
        });
    }
}
