//! What the lab's handling of other programs shares, in one place: finding a program on `PATH`
//! ([`on_path`], [`require_tool`]), starting one as an [`OwnedChild`] (ended with its process
//! group on every path out, a signal included) with its output in a file ([`spawn_logged`]) or
//! from a thread pinned to given cores ([`spawn_pinned`]), the last line it wrote, for an
//! error ([`last_line`]), waiting until a server in a lane testbed host has bound its port
//! ([`wait_bound`]), and a directory for a child's files removed on drop and on a signal
//! ([`OwnedDir`]).
//!
//! Pinning: a child inherits its parent thread's affinity, so a program started from a thread
//! pinned (`sched_setaffinity`) to some cores runs, with all of its threads, on those cores
//! only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kairos_io::lane_testbed::LaneTestbed;
use kairos_sys::child::OwnedChild;

/// How long a server has to bind its socket. Servers start before any load (a `sockperf
/// server` started under the flood once took longer than 5 s to bind); one that binds is
/// waited for only as long as it takes, so the limit costs nothing but on a failure.
const SERVER_START: Duration = Duration::from_secs(10);

/// Says in one line that `program` is missing and which Debian package has it, unless an
/// executable of that name is on `PATH`.
pub fn require_tool(program: &str, package: &str, for_what: &str) -> Result<()> {
    if on_path(program) {
        Ok(())
    } else {
        Err(anyhow!("{program} is not installed: install it (Debian: {package}) for {for_what}"))
    }
}

pub use kairos_sys::child::on_path;

/// Starts `command` from a thread pinned to `cores`, so the child and every thread it makes
/// inherit that affinity.
pub fn spawn_pinned(command: &mut Command, name: &str, cores: &[usize]) -> Result<OwnedChild> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                kairos_sys::thread::pin_current_thread_to(cores)
                    .with_context(|| format!("cannot pin {name}'s starter to cores {cores:?}"))?;
                OwnedChild::spawn_named(command, name).with_context(|| format!("cannot start {name}"))
            })
            .join()
            .map_err(|_| anyhow!("the thread starting {name} panicked"))?
    })
}

/// Starts `command` as an owned child with its output and errors in `out` (a file, so a long
/// run never fills a pipe nobody reads).
pub fn spawn_logged(command: &mut Command, out: &Path, name: &str) -> Result<OwnedChild> {
    let file = std::fs::File::create(out).with_context(|| format!("create {}", out.display()))?;
    command.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    OwnedChild::spawn_named(command, name).with_context(|| format!("start {name}"))
}

/// The last non-empty line of a child's output file (or log), for its error.
pub fn last_line(out: &Path) -> String {
    let text = kairos_sys::fs::read_text(out, 1 << 20).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_string()
}

/// Waits until a socket of host `host` is bound to `port` (`protocol` `udp`) or listens on it
/// (`tcp`), while `child`, which is to make it, runs; `out` has the child's output.
pub fn wait_bound(
    testbed: &LaneTestbed,
    host: usize,
    port: u16,
    protocol: &str,
    child: &mut OwnedChild,
    out: &Path,
) -> Result<()> {
    let deadline = Instant::now() + SERVER_START;
    loop {
        if testbed.in_host(host, || bound(port, protocol))?? {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{} ended before it was ready ({status}): {}", child.name(), last_line(out));
        }
        if Instant::now() > deadline {
            bail!("{} did not bind port {port} within {} s", child.name(), SERVER_START.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a socket of the calling thread's network namespace is bound (UDP) or listening
/// (TCP) on `port`: `/proc/thread-self/net/{udp,tcp}`, which are the thread's namespace's (the
/// `/proc/net` link is the process's).
pub fn bound(port: u16, protocol: &str) -> Result<bool> {
    let path = format!("/proc/thread-self/net/{protocol}");
    let text = kairos_sys::fs::read_text(Path::new(&path), 16 << 20)?;
    let want = format!(":{port:04X}");
    Ok(text.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // local_address is `ADDR:PORT` in hex; TCP's state 0A is LISTEN.
        fields.get(1).is_some_and(|local| local.ends_with(&want))
            && (protocol != "tcp" || fields.get(3) == Some(&"0A"))
    }))
}

/// A directory of this process's for a child's files (a server's data, a tool's output),
/// removed with them on drop and on a signal.
#[derive(Debug)]
pub struct OwnedDir {
    path: PathBuf,
    /// Removes the directory if a signal ends the process before this is dropped.
    _undo: kairos_sys::cleanup::Registration,
}

impl OwnedDir {
    /// Creates `path` and its parents (removing what an earlier process left there).
    pub fn create(path: PathBuf) -> Result<Self> {
        Self::make(path, "directory", |path| {
            std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))
        })
    }

    /// Creates a fresh directory of this process's under the system's temporary directory,
    /// named after `what`.
    pub fn scratch(what: &str) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("kairos-{what}-{}-{n}", std::process::id()));
        Self::make(path, "scratch directory", |path| {
            std::fs::create_dir(path).with_context(|| format!("create {}", path.display()))
        })
    }

    /// Makes `path` with `create` and registers its removal, `what` naming it to the cleanup.
    fn make(path: PathBuf, what: &str, create: impl Fn(&Path) -> Result<()>) -> Result<Self> {
        // Made and registered under one hold: a signal between the two would leave it behind.
        let _hold = kairos_sys::cleanup::hold_off();
        // Left by an earlier process (of the same id, for a scratch directory): ours now.
        let _ = std::fs::remove_dir_all(&path);
        create(&path)?;
        let doomed = path.clone();
        let undo = kairos_sys::cleanup::register(format!("{what} {}", path.display()), move || {
            let _ = std::fs::remove_dir_all(doomed);
        });
        Ok(Self { path, _undo: undo })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OwnedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use super::*;

    #[test]
    fn a_missing_tool_is_one_line_naming_its_package() {
        let error =
            require_tool("kairos-no-such-tool", "kairos-pkg", "the flood rows").unwrap_err().to_string();
        assert_eq!(
            error,
            "kairos-no-such-tool is not installed: install it (Debian: kairos-pkg) for the flood rows"
        );
        require_tool("sh", "dash", "a shell").unwrap();
    }

    #[test]
    fn a_pinned_start_gives_the_child_the_cores() {
        let mut child =
            spawn_pinned(Command::new("sh").args(["-c", "sleep 5"]).stdout(Stdio::null()), "sleeper", &[0])
                .unwrap();
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
        let cores =
            status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
        assert_eq!(cores, "0");
        child.kill().unwrap();
    }

    #[test]
    fn a_bound_udp_socket_is_seen_in_the_threads_namespace() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(bound(port, "udp").unwrap());
        drop(socket);
        assert!(!bound(port, "udp").unwrap());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(bound(port, "tcp").unwrap());
    }

    #[test]
    fn a_scratch_directory_goes_with_its_files() {
        let dir = OwnedDir::scratch("peers-test").unwrap();
        std::fs::write(dir.path().join("x"), b"y").unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }
}
