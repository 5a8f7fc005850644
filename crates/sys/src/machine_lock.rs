//! Locks that every process of the machine sees: an exclusive `flock` on a named file, held
//! while a value lives and released by the kernel when its holder exits, however it exits.
//!
//! For work that two processes must not do at once on a shared resource, such as probing one
//! core: two probes spinning on the same core measure each other, not the core. A lock file
//! rather than a semaphore or a pid file: the kernel drops an `flock` with its last descriptor,
//! so a process killed with SIGKILL leaves nothing stale behind for the next one to clean up.
//! The file itself stays (empty): removing it on release would let a process that opened it
//! just before lock a file no longer at the path, beside one that opens the path anew.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// An exclusive lock on a file, held until dropped (or until the process ends).
#[derive(Debug)]
pub struct MachineLock {
    _file: File,
    path: PathBuf,
}

impl MachineLock {
    /// Takes the exclusive lock on `path` (created if missing, readable and writable by every
    /// user, so that processes of other users share it), waiting up to `limit` for another
    /// holder to let it go. An error of kind [`io::ErrorKind::TimedOut`] when the limit passes;
    /// any other error when the file cannot be opened or locked.
    pub fn acquire(path: &Path, limit: Duration) -> io::Result<Self> {
        let file = match OpenOptions::new().write(true).create(true).truncate(false).mode(0o666).open(path) {
            Ok(f) => f,
            // Made by another user under a umask that left it theirs to write: a lock needs
            // only a descriptor, and a read-only one takes it as well.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => File::open(path)?,
            Err(e) => return Err(e),
        };
        let deadline = Instant::now() + limit;
        loop {
            // SAFETY: flock takes a descriptor this function owns (open until `file` drops)
            // and flags; it touches no memory of this process.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(Self { _file: file, path: path.to_path_buf() });
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
                _ => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} was held by another process for over {} s", path.display(), limit.as_secs()),
                ));
            }
            // Polled rather than a blocking flock: a blocking call has no time limit, and a
            // holder that is stopped (SIGSTOP) would hold this process for ever.
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The locked file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_for_the_first_and_times_out_while_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("core.lock");
        let first = MachineLock::acquire(&path, Duration::ZERO).unwrap();
        assert_eq!(first.path(), path);
        // flock locks belong to the open file description: a second open in the same process
        // contends as another process's would.
        let e = MachineLock::acquire(&path, Duration::from_millis(30)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(first);
        });
        let started = Instant::now();
        let _second = MachineLock::acquire(&path, Duration::from_secs(10)).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(40), "waited for the first to let go");
        released.join().unwrap();
    }
}
