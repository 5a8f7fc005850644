//! Directories and files of one test's own, removed on every path out of it.
//!
//! The tests of a binary run at once in one process, so a scratch path named after the
//! process id alone is shared by all of them; each scratch directory here is a new one, and
//! is removed with what it holds when dropped, a failed assertion included.

use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// A new directory under the temporary directory, named `kairos-WHAT-...`, removed with
/// everything in it when dropped.
#[track_caller]
pub fn scratch_dir(what: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("kairos-{what}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("a scratch directory for {what}: {e}"))
}

/// A path in a scratch directory of its own, removed with it when dropped; it derefs to the
/// path.
#[derive(Debug)]
pub struct ScratchPath {
    path: PathBuf,
    _dir: TempDir,
}

impl Deref for ScratchPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ScratchPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<OsStr> for ScratchPath {
    fn as_ref(&self) -> &OsStr {
        self.path.as_os_str()
    }
}

/// A path named `name` in a new scratch directory, with nothing there yet: where a run is to
/// write, or, refused, must not.
#[track_caller]
pub fn scratch_path(name: &str) -> ScratchPath {
    let dir = scratch_dir("path");
    ScratchPath { path: dir.path().join(name), _dir: dir }
}

/// A scratch file named `name` holding `content`.
#[track_caller]
pub fn scratch_file(name: &str, content: &str) -> ScratchPath {
    let path = scratch_path(name);
    std::fs::write(&path, content).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}
