//! Closing a log file that a compaction replaced, off the member's loop.
//!
//! A compaction writes the new log and renames it over the old one, whose inode then lives
//! only as long as the member's descriptor on it. Closing that descriptor frees the old log's
//! page cache, in the closing thread: for a log of 10,000 entries under load, 3 to 5 ms in
//! `truncate_inode_pages` (measured with `perf sched timehist` on a member's core), during
//! which a loop that closed it answers no one, once a compaction on each member. So the old
//! file goes to a thread of its own at `SCHED_IDLE`, which frees it when its core has nothing
//! else to run.

use std::fs::File;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

/// The thread that closes retired files, and the way to it. Dropping it closes what is queued
/// and joins the thread.
#[derive(Debug)]
pub struct Retirer {
    queue: Option<Sender<File>>,
    thread: Option<JoinHandle<()>>,
}

impl Retirer {
    /// Starts the closing thread; `None` when the thread cannot be made (files are then closed
    /// where they are retired).
    pub fn spawn() -> Option<Self> {
        let (queue, files) = channel::<File>();
        let thread = std::thread::Builder::new()
            .name("kv-retire".into())
            .spawn(move || {
                // Best effort: at normal priority it still leaves the loop's thread alone.
                let _ = kairos_sys::thread::set_idle();
                for file in files {
                    drop(file);
                }
            })
            .ok()?;
        Some(Self { queue: Some(queue), thread: Some(thread) })
    }

    /// Closes `file` on the closing thread (here, should that thread be gone: a failed send
    /// hands the file back in its error, dropped at once).
    pub fn retire(&self, file: File) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(file);
        }
    }
}

impl Drop for Retirer {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retired_file_is_closed_and_the_thread_stops_with_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let link = std::path::PathBuf::from(format!("/proc/self/fd/{fd}"));
        assert!(std::fs::read_link(&link).unwrap().to_string_lossy().contains("(deleted)"));
        let retirer = Retirer::spawn().unwrap();
        retirer.retire(file);
        drop(retirer); // joins the thread once it has closed everything queued
        // The descriptor is closed: its number names no file, or a file opened since.
        let now = std::fs::read_link(&link).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        assert!(!now.contains("old (deleted)"), "{now}");
    }
}
