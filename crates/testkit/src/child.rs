//! Children a test starts, stopped and reaped on every path out of the test, and their output
//! read line by line with a time limit.
//!
//! A test that panics midway (a failed assertion) unwinds through its locals: a [`Guarded`]
//! child among them is stopped there, so no member, controller or testbed outlives a failed
//! test and holds its ports, namespaces or cores for the next one.

use std::io::{self, BufRead, BufReader, Read};
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Output};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// How a guarded child is stopped when dropped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// SIGKILL at once.
    Kill,
    /// `signal`, up to `grace` to exit, then SIGKILL.
    Signal { signal: i32, grace: Duration },
}

/// A child process, stopped (by its process id) and reaped when dropped; it derefs to the
/// [`Child`].
#[derive(Debug)]
pub struct Guarded {
    child: Option<Child>,
    stop: Stop,
}

impl Guarded {
    /// Starts `command`; killed when dropped. Panics when it cannot start.
    #[track_caller]
    pub fn spawn(command: &mut Command) -> Self {
        let child = command.spawn().unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
        Self::new(child)
    }

    /// Guards `child`: killed when dropped.
    pub fn new(child: Child) -> Self {
        Self { child: Some(child), stop: Stop::Kill }
    }

    /// Stopped with `signal` when dropped, given up to `grace` to exit before it is killed: for
    /// a program that undoes what it made when signalled (`kv cluster` stops its members).
    pub fn stopped_with(mut self, signal: i32, grace: Duration) -> Self {
        self.stop = Stop::Signal { signal, grace };
        self
    }

    /// Reads the child's piped output to its end and reaps it (no longer guarded: it has ended).
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        self.child.take().expect("a guarded child until dropped").wait_with_output()
    }
}

impl Deref for Guarded {
    type Target = Child;

    fn deref(&self) -> &Child {
        self.child.as_ref().expect("a guarded child until dropped")
    }
}

impl DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("a guarded child until dropped")
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let Some(child) = self.child.as_mut() else { return };
        if let Stop::Signal { signal, grace } = self.stop {
            // Only while the child is unreaped: its id cannot name another process then.
            if matches!(child.try_wait(), Ok(None)) {
                send_signal(child.id(), signal);
                let deadline = Instant::now() + grace;
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        // `Child::kill` signals only a child not yet reaped.
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Sends `signal` to process `pid`, which the caller knows to be its own (a child not yet
/// reaped, or a process that child reported).
#[allow(unsafe_code)]
pub fn send_signal(pid: u32, signal: i32) -> bool {
    let pid = i32::try_from(pid).expect("a process id fits a pid_t");
    // SAFETY: kill(2) reads and writes no memory of this process; which process it reaches is
    // the caller's contract above.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// The lines a child writes, read on a thread of their own, so that a test can wait for one
/// with a time limit (a read of the pipe itself would block past any limit).
#[derive(Debug)]
pub struct Lines {
    lines: Receiver<String>,
}

impl Lines {
    /// Reads `from` (a child's stdout or stderr) line by line until it ends, also once this
    /// value is dropped: the child's writes then neither block on a full pipe nor fail on a
    /// closed one (a SIGPIPE would change how it exits).
    pub fn new(from: impl Read + Send + 'static) -> Self {
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self { lines }
    }

    /// The next line that `wanted` accepts, within `limit` (the lines before it are passed
    /// over); `None` when the limit passes or the output ends first.
    pub fn wait_for(&mut self, limit: Duration, mut wanted: impl FnMut(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;

    use super::*;

    #[test]
    fn a_guarded_child_is_gone_once_dropped_and_lines_are_waited_for() {
        let mut child = Guarded::spawn(
            Command::new("sh").args(["-c", "echo one; echo two; exec sleep 60"]).stdout(Stdio::piped()),
        );
        let pid = child.id();
        let mut lines = Lines::new(child.stdout.take().unwrap());
        assert_eq!(lines.wait_for(Duration::from_secs(10), |l| l.starts_with('t')).as_deref(), Some("two"));
        assert_eq!(lines.wait_for(Duration::from_millis(50), |_| true), None, "no third line yet");
        drop(child);
        // Reaped: no process, not even a zombie, has its id (unless another took it since).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(!stat.contains("(sleep)"), "{stat}");
    }
}
