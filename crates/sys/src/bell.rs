//! A doorbell between processes: a named pipe (FIFO) that one side rings with a byte and the
//! other polls with its sockets, so a process that sleeps in `ppoll` wakes when shared memory
//! has news for it instead of looking on a timer. Named, so it crosses network namespaces as
//! the shared-memory files it goes with do.
//!
//! Mechanism: the ringer opens the pipe read-write and non-blocking (so opening never waits for
//! a reader, and a ring with no reader is not an error); a full pipe means the other side has
//! rings it has not read, so a ring that does not fit is one it does not need. The listener
//! opens it read-only and non-blocking, polls it for readability, and [`Bell::clear`]s it before
//! looking at the shared memory: a ring that comes after the look is kept for the next poll.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// One end of a doorbell.
#[derive(Debug)]
pub struct Bell {
    file: File,
    /// The pipe's path, removed on drop, when this end made it.
    owned: Option<std::path::PathBuf>,
}

impl Drop for Bell {
    fn drop(&mut self) {
        if let Some(path) = &self.owned {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Makes the named pipe at `path` (mode 0600).
pub fn create(path: &Path) -> io::Result<()> {
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: `name` is a NUL-terminated string that lives across the call; mkfifo reads it and
    // touches no memory of ours.
    let rc = unsafe { libc::mkfifo(name.as_ptr(), 0o600) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Bell {
    /// Makes the pipe at `path` and returns its ringing end, which removes the pipe when
    /// dropped (the listener's open end keeps working until it is closed).
    pub fn create_ringer(path: &Path) -> io::Result<Self> {
        create(path)?;
        match Self::ringer(path) {
            Ok(mut bell) => {
                bell.owned = Some(path.to_path_buf());
                Ok(bell)
            }
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// The ringing end of the pipe at `path`.
    pub fn ringer(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(path)?;
        Ok(Self { file, owned: None })
    }

    /// The listening end of the pipe at `path`.
    pub fn listener(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
        Ok(Self { file, owned: None })
    }

    /// Rings: one byte, or none when unread rings fill the pipe.
    pub fn ring(&self) {
        let _ = (&self.file).write(&[1]);
    }

    /// Reads every ring waiting; returns how many bytes there were.
    pub fn clear(&self) -> usize {
        let mut buf = [0u8; 256];
        let mut total = 0;
        loop {
            match (&self.file).read(&mut buf) {
                Ok(0) => return total,
                Ok(n) => total += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return total,
            }
        }
    }
}

impl AsFd for Bell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_makes_the_listener_readable_until_cleared_and_a_full_pipe_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bell");
        create(&path).unwrap();
        assert!(create(&path).is_err(), "it exists");
        let ringer = Bell::ringer(&path).unwrap();
        let listener = Bell::listener(&path).unwrap();
        let readable = |b: &Bell| {
            let fds = [b.as_fd()];
            let mut set = crate::net::poll::PollSet::readable(fds.iter());
            set.wait(std::time::Duration::ZERO).unwrap();
            set.is_readable(0)
        };
        assert!(!readable(&listener));
        assert_eq!(listener.clear(), 0);
        ringer.ring();
        ringer.ring();
        assert!(readable(&listener));
        assert_eq!(listener.clear(), 2);
        assert!(!readable(&listener));
        for _ in 0..100_000 {
            ringer.ring();
        }
        assert!(listener.clear() >= 4_096, "a pipe holds at least a page");
        // The end that made the pipe removes it when dropped.
        let made = dir.path().join("made");
        let owner = Bell::create_ringer(&made).unwrap();
        assert!(made.exists());
        drop(owner);
        assert!(!made.exists());
    }
}
