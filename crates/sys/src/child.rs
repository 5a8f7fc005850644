//! Child processes with an owner: each runs in a process group of its own, and dropping its
//! [`OwnedChild`] ends the whole group and reaps the child, on every path (returns, errors,
//! panics, and SIGINT/SIGTERM/SIGHUP through [`crate::cleanup`]).
//!
//! Why a group: the process started is not always the one that matters or the only one. A
//! wrapper (`ip netns exec`, `stdbuf`) may exec the real program in place, which keeps the
//! process id, or fork it, which does not; `stress-ng` forks its workers. Signalling the group
//! (whose id is the child's process id) reaches all of them. A group in its own right also
//! keeps a terminal's Ctrl-C from reaching the children before the owner's handler runs.
//!
//! Ending a child: SIGTERM to the group, up to [`GRACE`] for the child to exit, then SIGKILL
//! to the group (a child that ignored SIGTERM, or members it left behind), then reap. The child
//! is reaped only here (waits first observe the exit without reaping, `waitid(WNOWAIT)`), so
//! while the group is signalled its id still names an unreaped process and cannot have been
//! reused. Blocking: ending takes at most [`GRACE`] plus the kernel's delivery of SIGKILL.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cleanup::{self, Registration};

/// How long an ended child has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(1);

/// The child and whether it has been reaped (after which its id may name another process).
#[derive(Debug)]
struct Tracked {
    child: Child,
    reaped: bool,
}

/// A running child process, ended (with its process group) and reaped when dropped.
#[derive(Debug)]
pub struct OwnedChild {
    name: String,
    pid: u32,
    tracked: Arc<Mutex<Tracked>>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    registration: Option<Registration>,
}

impl OwnedChild {
    /// Starts `command` in a process group of its own, named after its program in the
    /// signal handler's line.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        let program = Path::new(command.get_program()).file_name().unwrap_or(OsStr::new("?"));
        let name = program.to_string_lossy().into_owned();
        Self::spawn_named(command, name)
    }

    /// Starts `command` in a process group of its own; `name` says what it is (a wrapper's
    /// program name would not).
    pub fn spawn_named(command: &mut Command, name: impl Into<String>) -> io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let name = name.into();
        // Spawned and registered under one hold, so a signal cannot fall between the two.
        let _hold = cleanup::hold_off();
        let mut child = command.process_group(0).spawn()?;
        let pid = child.id();
        let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let tracked = Arc::new(Mutex::new(Tracked { child, reaped: false }));
        let registration = {
            let tracked = Arc::clone(&tracked);
            cleanup::register(format!("child {name} (pid {pid})"), move || end(&tracked, GRACE))
        };
        Ok(Self { name, pid, tracked, stdin, stdout, stderr, registration: Some(registration) })
    }

    /// The child's process id (and its process group's).
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// What the child is, as given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `signal` (`libc::SIGKILL`, `SIGSTOP`, ...) to the child's process group now,
    /// without waiting or reaping (the owner still reaps it, on drop or a wait). Fails once the
    /// child has been reaped, when its id may name another process.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        let tracked = lock(&self.tracked);
        if tracked.reaped {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{} was reaped", self.name)));
        }
        signal_group(self.pid, signal);
        Ok(())
    }

    /// The child's standard input, if piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The child's standard output, if piped and not taken yet.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// The child's standard error, if piped and not taken yet.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// The child's exit status if it has exited (then it is reaped and what it left in its
    /// group is killed), `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        let mut tracked = lock(&self.tracked);
        if tracked.reaped || exited(self.pid)? { reap(&mut tracked).map(Some) } else { Ok(None) }
    }

    /// Waits for the child to exit, then reaps it and kills what it left in its group.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        self.stdin = None;
        wait_exited(self.pid)?;
        reap(&mut lock(&self.tracked))
    }

    /// Ends the child at once, as a crash would: SIGKILL to its group with no grace (no
    /// SIGTERM first, so it gets no chance to finish anything), then reaps it and returns its
    /// status. A child that had already exited is only reaped. Blocks for the kernel's delivery
    /// of SIGKILL.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        self.stdin = None;
        reap(&mut lock(&self.tracked))
    }

    /// Reads the child's piped standard output and error to their ends, then waits for it.
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        self.stdin = None;
        let stderr = read_on_a_thread(self.stderr.take());
        let mut stdout = Vec::new();
        if let Some(mut out) = self.stdout.take() {
            out.read_to_end(&mut stdout)?;
        }
        let stderr = stderr.join()?;
        let status = self.wait()?;
        Ok(Output { status, stdout, stderr })
    }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        // Closed first: a child that reads its input to the end may exit on its own.
        self.stdin = None;
        // Withdrawn and ended under one hold: a signal now is handled after the child is gone.
        let _hold = cleanup::hold_off();
        drop(self.registration.take());
        end(&self.tracked, GRACE);
    }
}

/// Whether an executable file named `program` is on `PATH` (what a spawn by name would find),
/// so a caller can say a tool is missing before it starts anything.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Runs `command` to its end as an owned child (standard input empty, output and error
/// captured), like [`Command::output`].
pub fn output(command: &mut Command) -> io::Result<Output> {
    let child =
        OwnedChild::spawn(command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()))?;
    child.wait_with_output()
}

/// Like [`output`], but a child still running after `limit` is ended with its group (as a
/// dropped owner is) and the answer is an error of kind `TimedOut` that says so: for tools that
/// answer in milliseconds and must not hold their caller for ever when the system is stuck.
pub fn output_within(command: &mut Command, limit: Duration) -> io::Result<Output> {
    let deadline = Instant::now() + limit;
    let mut child =
        OwnedChild::spawn(command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()))?;
    // Both streams read on threads, so a child that fills a pipe is not stalled by the wait.
    let (stdout, stderr) = (read_on_a_thread(child.take_stdout()), read_on_a_thread(child.take_stderr()));
    let mut nap = Duration::from_micros(500);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let name = child.name().to_string();
            // Ending the group closes the pipes' write ends, so the readers finish.
            drop(child);
            let _ = (stdout.join(), stderr.join());
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("`{name}` ran past {limit:?} and was killed"),
            ));
        }
        std::thread::sleep(nap.min(deadline.saturating_duration_since(Instant::now())));
        nap = (nap * 2).min(Duration::from_millis(20));
    };
    Ok(Output { status, stdout: stdout.join()?, stderr: stderr.join()? })
}

/// A child's output stream read to its end on a thread of its own (nothing when `stream` is
/// `None`).
struct StreamReader(std::thread::JoinHandle<io::Result<Vec<u8>>>);

fn read_on_a_thread(stream: Option<impl Read + Send + 'static>) -> StreamReader {
    StreamReader(std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut stream) = stream {
            stream.read_to_end(&mut bytes)?;
        }
        Ok(bytes)
    }))
}

impl StreamReader {
    /// What the stream held, once it ended.
    fn join(self) -> io::Result<Vec<u8>> {
        self.0.join().map_err(|_| io::Error::other("a reader of the child's output panicked"))?
    }
}

fn lock(tracked: &Mutex<Tracked>) -> MutexGuard<'_, Tracked> {
    // A panic cannot leave `Tracked` half-changed (`reaped` is set after the reap), so a
    // poisoned lock still holds the truth.
    tracked.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// SIGTERM to the group, up to `grace` for the child to exit, then SIGKILL and reap.
fn end(tracked: &Mutex<Tracked>, grace: Duration) {
    let mut tracked = lock(tracked);
    if tracked.reaped {
        return;
    }
    let pid = tracked.child.id();
    signal_group(pid, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    while !exited(pid).unwrap_or(true) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = reap(&mut tracked);
}

/// Kills what is left of the child's group and reaps the child (which must have exited, or
/// be about to from the SIGKILL).
fn reap(tracked: &mut Tracked) -> io::Result<ExitStatus> {
    if !tracked.reaped {
        // The child is unreaped, so its id still names its group: nothing else can be hit.
        signal_group(tracked.child.id(), libc::SIGKILL);
    }
    let status = tracked.child.wait()?;
    tracked.reaped = true;
    Ok(status)
}

fn signal_group(pid: u32, signal: i32) {
    // SAFETY: kill takes no pointers; a negative id names the process group the child leads,
    // which exists while the child is unreaped (the callers' precondition). An empty group is
    // answered with ESRCH, which changes nothing.
    unsafe { libc::kill(-(pid as libc::pid_t), signal) };
}

/// Whether child `pid` has exited, without reaping it.
fn exited(pid: u32) -> io::Result<bool> {
    waitid_no_reap(pid, libc::WNOHANG)
}

/// Waits until child `pid` has exited, without reaping it.
fn wait_exited(pid: u32) -> io::Result<()> {
    waitid_no_reap(pid, 0).map(drop)
}

fn waitid_no_reap(pid: u32, flags: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: siginfo_t is plain data for which all-zero is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the child unreaped.
        let rc = unsafe {
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT | flags)
        };
        if rc == 0 {
            // SAFETY: waitid filled `info` (all zero when WNOHANG found no exited child), and
            // si_pid is valid for the SIGCHLD information it stores.
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Already reaped (by this module, under the lock the caller takes next).
            Some(libc::ECHILD) => return Ok(true),
            _ => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    /// Whether process `pid` is gone: no /proc entry, or a zombie (ended; its parent, or init
    /// for an orphan, reaps it).
    fn gone(pid: u32) -> bool {
        crate::proc::ProcStat::of_process(pid).is_none_or(|stat| stat.is_zombie())
    }

    /// Starts `script` under `sh` and returns it with the first line it prints.
    fn shell(script: &str) -> (OwnedChild, String) {
        let mut child =
            OwnedChild::spawn(Command::new("sh").args(["-c", script]).stdout(Stdio::piped())).unwrap();
        let mut line = String::new();
        BufReader::new(child.take_stdout().unwrap()).read_line(&mut line).unwrap();
        (child, line.trim().to_string())
    }

    #[test]
    fn a_dropped_owner_leaves_no_process() {
        let (child, _) = shell("echo started; sleep 1000");
        let pid = child.id();
        assert!(!gone(pid));
        let started = Instant::now();
        drop(child);
        // Reaped: not even a zombie is left.
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} is still there");
        assert!(started.elapsed() < GRACE, "sh should have ended at SIGTERM, not SIGKILL");
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed() {
        let (child, _) = shell("trap '' TERM; echo started; while :; do sleep 1; done");
        let pid = child.id();
        let started = Instant::now();
        drop(child);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} is still there");
        assert!(started.elapsed() >= GRACE, "SIGKILL came before the grace ran out");
    }

    #[test]
    fn what_a_wrapper_forked_is_ended_with_it() {
        // The wrapper forks its program instead of exec'ing it: the owner holds the wrapper's id.
        let (child, grandchild) = shell("trap '' TERM; sleep 1000 & echo $!; wait");
        let grandchild: u32 = grandchild.parse().unwrap();
        assert!(!gone(grandchild));
        drop(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !gone(grandchild) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone(grandchild), "the wrapper's child {grandchild} outlived the owner");
    }

    #[test]
    fn a_signal_reaches_the_child_and_a_reaped_child_refuses_it() {
        let (mut child, _) = shell("echo started; exec sleep 30");
        child.signal(libc::SIGKILL).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        assert!(child.signal(libc::SIGKILL).is_err());
    }

    #[test]
    fn a_child_that_exited_on_its_own_is_reaped_by_wait() {
        let mut child = OwnedChild::spawn(Command::new("sh").args(["-c", "exit 3"])).unwrap();
        let pid = child.id();
        assert_eq!(child.wait().unwrap().code(), Some(3));
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        assert_eq!(child.try_wait().unwrap().and_then(|s| s.code()), Some(3), "the status is kept");
    }

    #[test]
    fn output_captures_both_streams_and_the_status() {
        let out = output(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 2"])).unwrap();
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(2));
        assert!(output(&mut Command::new("/nonexistent/program")).is_err());
    }

    #[test]
    fn output_within_its_limit_is_the_output_and_past_it_the_child_is_killed() {
        let out = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(
            (out.stdout.as_slice(), out.stderr.as_slice(), out.status.code()),
            (&b"out\n"[..], &b"err\n"[..], Some(3))
        );
        // A child that ignores SIGTERM and keeps its pipes open, with a grandchild holding them too.
        let started = Instant::now();
        let error = output_within(
            Command::new("sh").args(["-c", "trap '' TERM; sleep 1000 & wait"]),
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(error.to_string().contains("`sh` ran past 200ms and was killed"), "{error}");
        // Within the limit plus the grace before SIGKILL, and the readers did not hang.
        assert!(
            started.elapsed() < Duration::from_millis(200) + GRACE + Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn kill_ends_a_child_at_once_even_if_it_ignores_sigterm() {
        use std::os::unix::process::ExitStatusExt;
        let (mut child, _) = shell("trap '' TERM; echo started; while :; do sleep 1; done");
        let pid = child.id();
        let started = Instant::now();
        let status = child.kill().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        assert!(started.elapsed() < GRACE, "kill waited for a grace it does not give");
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} is still there");
        assert_eq!(child.try_wait().unwrap().and_then(|s| s.signal()), Some(libc::SIGKILL));
        drop(child);
    }

    #[test]
    fn a_running_child_is_not_waited_for_by_try_wait() {
        let (mut child, _) = shell("echo started; sleep 1000");
        assert!(child.try_wait().unwrap().is_none());
    }
}
