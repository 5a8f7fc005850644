//! Bridges in shared-memory files: a `kairos_ring::bridge` laid out in a
//! `kairos_sys::shm::SharedRegion`, so that two processes (an application and the express
//! lane's node) exchange messages with no system call per message.
//!
//! The ring (its layout, its protocol, what it trusts) is `kairos_ring::bridge`'s and the file
//! (created exclusively, mode 0600, removed by its creator) is `kairos_sys::shm`'s; this module
//! only joins them, which is the one step that needs `unsafe`: vouching that the mapping lives
//! as long as the bridge that reads it. It does, because the bridge owns the region. The same
//! step maps plain words ([`create_words`], [`attach_words`]) for layouts that are not rings.
//!
//! A peer that can open the file can also shrink it; touching the lost pages would then end
//! this process with `SIGBUS`. Both ends run as the same user (the file's mode), so that peer is
//! one's own process family: the node serves the applications of its host's user.

use std::ops::RangeInclusive;
use std::path::Path;

use kairos_ring::bridge::{Bridge, BridgeError, BridgeLayout, HEADER_BYTES, Mapped};
use kairos_sys::shm::{SharedRegion, ShmError};

/// A bridge whose memory is a shared file.
pub type SharedBridge = Bridge<Mapped<SharedRegion>>;

/// Why a bridge file could not be made or joined.
#[derive(Debug, thiserror::Error)]
pub enum BridgeFileError {
    /// The file could not be created, opened or mapped.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// The file's contents are not a bridge (or not one this version reads).
    #[error("{path}: {source}")]
    Bridge {
        /// The file.
        path: String,
        /// What is wrong.
        source: BridgeError,
    },
}

/// The sizes a bridge file may have: a header and at least one slot, at most a gibibyte.
const FILE_BYTES: RangeInclusive<usize> = HEADER_BYTES + 24..=1 << 30;

fn mapped(region: SharedRegion) -> Result<Mapped<SharedRegion>, BridgeFileError> {
    let (ptr, len) = (region.as_ptr(), region.len());
    let path = region.path().display().to_string();
    // SAFETY: `ptr` and `len` describe the mapping `region` holds, valid for reads and writes
    // until `region` is dropped; `Mapped` takes `region` in, so the mapping lives exactly as
    // long as the bridge's memory, and moving `region` does not move a mapping. Nothing in this
    // process reaches the mapped bytes except the bridge's atomic operations: the region is not
    // handed out, and `Mapped::owner` gives only `&SharedRegion`, whose pointer is raw.
    unsafe { Mapped::new(region, ptr, len) }.map_err(|source| BridgeFileError::Bridge { path, source })
}

/// Creates the file `path` holding a fresh bridge of `layout`; the file is removed when the
/// returned bridge (or the end taken from it) is dropped.
pub fn create(path: &Path, layout: BridgeLayout) -> Result<SharedBridge, BridgeFileError> {
    let region = SharedRegion::create(path, layout.region_bytes())?;
    let display = path.display().to_string();
    Bridge::init(mapped(region)?, layout).map_err(|source| BridgeFileError::Bridge { path: display, source })
}

/// Joins the bridge in the file `path` that another process created; the file stays when the
/// bridge is dropped (its creator removes it).
pub fn attach(path: &Path) -> Result<SharedBridge, BridgeFileError> {
    let region = SharedRegion::open(path, FILE_BYTES)?;
    let display = path.display().to_string();
    Bridge::attach(mapped(region)?).map_err(|source| BridgeFileError::Bridge { path: display, source })
}

/// Plain words in a shared file, for layouts other than a ring (the failure detector's alive
/// table and liveness counter, `kairos_fd::table`): the region seen as atomic words,
/// through the same vouching step as a bridge's.
pub type SharedWords = Mapped<SharedRegion>;

/// Creates the file `path` of `bytes` zeroed bytes and maps it as words; the file is removed
/// when the returned words are dropped.
pub fn create_words(path: &Path, bytes: usize) -> Result<SharedWords, BridgeFileError> {
    mapped(SharedRegion::create(path, bytes)?)
}

/// Maps the existing file `path`, whose size must be within `bytes`, as words; the file stays
/// when they are dropped (unless [`SharedRegion::set_unlink_on_drop`] is asked of the owner
/// first, which this function does not).
pub fn attach_words(path: &Path, bytes: RangeInclusive<usize>) -> Result<SharedWords, BridgeFileError> {
    mapped(SharedRegion::open(path, bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kairos_sys::shm::shm_path;

    #[test]
    fn a_created_bridge_is_joined_through_its_file_and_removed_by_its_creator() {
        let path = shm_path(&format!("kairos-io-bridge-test-{}", std::process::id())).unwrap();
        let layout = BridgeLayout::for_messages(4, 100).unwrap();
        let mut tx = create(&path, layout).unwrap().into_producer();
        let mut rx = attach(&path).unwrap().into_consumer();
        tx.try_send(b"hello", 42).unwrap();
        let mut buf = [0u8; 128];
        let got = rx.try_recv(&mut buf).unwrap().unwrap();
        assert_eq!((&buf[..got.len], got.stamp_ns), (&b"hello"[..], 42));
        drop(rx);
        assert!(path.exists(), "the joiner leaves the file");
        drop(tx);
        assert!(!path.exists(), "the creator removes it");
        let e = attach(&path).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn words_in_a_file_are_seen_by_both_sides() {
        use kairos_ring::bridge::BridgeMemory;
        use std::sync::atomic::Ordering;
        let path = shm_path(&format!("kairos-io-words-test-{}", std::process::id())).unwrap();
        let a = create_words(&path, 4096).unwrap();
        let b = attach_words(&path, 1..=4096).unwrap();
        a.words()[7].store(99, Ordering::Release);
        assert_eq!(b.words()[7].load(Ordering::Acquire), 99);
        assert_eq!(b.words().len(), 512);
        drop(b);
        drop(a);
        assert!(!path.exists());
    }

    #[test]
    fn a_file_that_is_not_a_bridge_is_refused() {
        let path = shm_path(&format!("kairos-io-bridge-garbage-{}", std::process::id())).unwrap();
        let region = SharedRegion::create(&path, 4096).unwrap();
        let e = attach(&path).unwrap_err().to_string();
        assert!(e.contains("kairos-io-bridge-garbage"), "{e}");
        drop(region);
    }
}
