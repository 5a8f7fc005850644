//! The controller's durable log: every input that reached the controller, with its time and
//! the host that sent it, appended and flushed to disk (`fdatasync`) before any notice it caused
//! goes out. The controller is deterministic, so replaying the inputs at their times rebuilds
//! exactly the allocation it had (the same tunnels, periods and bounds) after a `kill -9`.
//!
//! One JSON line per entry in `DIR/journal.jsonl`. The first line names what the inputs were
//! given to: a hash of the topology and the grace period, so a restart with another topology
//! is refused instead of replaying requests onto a network they were not admitted on. A last
//! line cut short by a crash during its write was never acknowledged (its notices were not
//! sent); it is cut off on open and reported. Damage anywhere else refuses to start, naming
//! the line.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::auth::hex;
use super::wire::ToController;
use crate::te::{Picos, Topology};

/// The journal's file name in the state directory.
pub const FILE_NAME: &str = "journal.jsonl";

/// What the journal's inputs were given to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The journal format's version.
    pub kairos_lane_journal: u32,
    /// SHA-256 of the topology in its canonical TOML form.
    pub topology_sha256: String,
    /// The controller's grace period, ps.
    pub grace_ps: Picos,
    /// The wall-clock time (ns since 1970) the controller's clock counts from: its time is
    /// picoseconds since then, which 64 bits hold for 213 days.
    pub epoch_ns: u64,
}

impl Header {
    /// The header for a controller over `topo` with `grace` whose clock starts at `epoch_ns`
    /// (a journal that exists keeps its own epoch).
    pub fn new(topo: &Topology, grace: Picos, epoch_ns: u64) -> Self {
        let digest = Sha256::digest(topo.to_toml().as_bytes());
        Self { kairos_lane_journal: 1, topology_sha256: hex(&digest), grace_ps: grace, epoch_ns }
    }
}

/// One input as the controller received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// When the controller handled it, ps.
    pub at_ps: Picos,
    /// The host whose node sent it.
    pub host: String,
    /// What it asked.
    pub input: ToController,
}

/// Why the journal could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A file system error.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A line that is not an entry, before the last.
    #[error("{path}:{line} is damaged ({reason}); move the file away to start with no tunnels")]
    Damaged {
        /// The journal.
        path: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The journal was written for another topology or grace period.
    #[error(
        "{path} was written for another topology or grace period (topology {found_topology}, grace {found_grace} ps; now {topology}, {grace} ps): start with the same ones, or another --state"
    )]
    Mismatch {
        /// The journal.
        path: PathBuf,
        /// The journal's topology hash.
        found_topology: String,
        /// The journal's grace period.
        found_grace: Picos,
        /// This controller's topology hash.
        topology: String,
        /// This controller's grace period.
        grace: Picos,
    },
}

/// The open journal, positioned at its end.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    line: Vec<u8>,
}

/// What opening found: the journal, its header, the inputs to replay, and the bytes of a torn
/// last line that were cut off (0 when none).
#[derive(Debug)]
pub struct Opened {
    /// The journal, ready to append.
    pub journal: Journal,
    /// Its header (with the epoch it was created with).
    pub header: Header,
    /// The inputs in order.
    pub records: Vec<Record>,
    /// Bytes of an unfinished last line that were cut off.
    pub torn_bytes: u64,
}

impl Journal {
    /// Opens (or creates) the journal in `dir` for a controller with `header`.
    pub fn open(dir: &Path, header: &Header) -> Result<Opened, JournalError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(FILE_NAME);
        let mut file =
            OpenOptions::new().read(true).append(true).create(true).open(&path).map_err(io(&path))?;
        let mut records = Vec::new();
        let mut good_end = 0u64;
        let mut torn_bytes = 0u64;
        let mut reader = BufReader::new(&file);
        let mut buf = Vec::new();
        let mut line_no = 0usize;
        let mut found_header = None;
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(io(&path))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if buf.last() != Some(&b'\n') {
                // A write the crash cut short: never acknowledged, so never acted on.
                torn_bytes = n as u64;
                break;
            }
            let text = &buf[..buf.len() - 1];
            let damaged =
                |reason: String| JournalError::Damaged { path: path.clone(), line: line_no, reason };
            if line_no == 1 {
                let found: Header = serde_json::from_slice(text).map_err(|e| damaged(e.to_string()))?;
                if found.topology_sha256 != header.topology_sha256 || found.grace_ps != header.grace_ps {
                    return Err(JournalError::Mismatch {
                        path,
                        found_topology: found.topology_sha256,
                        found_grace: found.grace_ps,
                        topology: header.topology_sha256.clone(),
                        grace: header.grace_ps,
                    });
                }
                found_header = Some(found);
            } else {
                records.push(serde_json::from_slice(text).map_err(|e| damaged(e.to_string()))?);
            }
            good_end += n as u64;
        }
        drop(reader);
        if torn_bytes > 0 {
            file.set_len(good_end).map_err(io(&path))?;
            file.sync_data().map_err(io(&path))?;
        }
        file.seek(SeekFrom::End(0)).map_err(io(&path))?;
        let mut journal = Journal { file, path, line: Vec::new() };
        let header = match found_header {
            Some(h) => h,
            None => {
                // An empty file, or only a header cut short: start it afresh.
                journal.file.set_len(0).map_err(io(&journal.path))?;
                journal.append_json(header)?;
                header.clone()
            }
        };
        Ok(Opened { journal, header, records, torn_bytes })
    }

    /// The journal's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` and waits until it is on disk.
    pub fn append(&mut self, record: &Record) -> Result<(), JournalError> {
        self.append_json(record)
    }

    fn append_json(&mut self, value: &impl Serialize) -> Result<(), JournalError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, value).expect("journal entries serialise");
        self.line.push(b'\n');
        let path = self.path.clone();
        let io = move |source| JournalError::Io { path, source };
        self.file.write_all(&self.line).map_err(io.clone())?;
        self.file.sync_data().map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::te::LinkSpec;
    use crate::te::generate::rack;

    fn topo() -> Topology {
        let spec =
            LinkSpec { bandwidth_bps: 1 << 30, queue_bytes: 1 << 16, min_delay: 1_000, max_jitter: 1_000 };
        rack(2, spec).unwrap()
    }

    fn record(tunnel_id: u64) -> Record {
        Record { at_ps: 5, host: "h0".into(), input: ToController::Release { tunnel_id } }
    }

    #[test]
    fn records_come_back_in_order_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let h = Header::new(&topo(), 1_000, 7);
        let mut j = Journal::open(dir.path(), &h).unwrap().journal;
        j.append(&record(1)).unwrap();
        j.append(&record(2)).unwrap();
        drop(j);
        let path = dir.path().join(FILE_NAME);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"at_ps":9,"host":"a","inp"#).unwrap();
        let o = Journal::open(dir.path(), &h).unwrap();
        assert_eq!(o.records, [record(1), record(2)]);
        assert_eq!(o.torn_bytes, 26);
        let mut j = o.journal;
        j.append(&record(3)).unwrap();
        drop(j);
        let o = Journal::open(dir.path(), &h).unwrap();
        assert_eq!((o.records.len(), o.torn_bytes), (3, 0), "the cut line is gone, the next one whole");
        let later = Header::new(&topo(), 1_000, 99);
        assert_eq!(
            Journal::open(dir.path(), &later).unwrap().header.epoch_ns,
            7,
            "a journal keeps its epoch"
        );
    }

    #[test]
    fn damage_before_the_end_and_another_topology_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let h = Header::new(&topo(), 1_000, 7);
        let mut j = Journal::open(dir.path(), &h).unwrap().journal;
        j.append(&record(1)).unwrap();
        drop(j);
        let other = Header::new(&topo(), 2_000, 7);
        let e = Journal::open(dir.path(), &other).unwrap_err().to_string();
        assert!(e.contains("another topology or grace period"), "{e}");
        let path = dir.path().join(FILE_NAME);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"garbage\n{\"at_ps\":1}\n").unwrap();
        let e = Journal::open(dir.path(), &h).unwrap_err().to_string();
        assert!(e.contains("journal.jsonl:3 is damaged"), "{e}");
    }
}
