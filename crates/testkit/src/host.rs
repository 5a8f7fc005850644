//! What the machine lets a test do, and what it holds of the test's: root, programs on the
//! PATH, network namespaces, this process's children.

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use kairos_sys::proc::ProcStat;

pub use kairos_sys::user::is_root;

/// Whether a test that needs root must be skipped: it runs as another user; then it says
/// `skipped: WHY` on stderr.
pub fn skip_unless_root(why: &str) -> bool {
    let skip = !is_root();
    if skip {
        eprintln!("skipped: {why}");
    }
    skip
}

/// Whether a test of what happens without root must be skipped: it runs as root; then it says
/// `skipped: WHY` on stderr.
pub fn skip_if_root(why: &str) -> bool {
    let skip = is_root();
    if skip {
        eprintln!("skipped: {why}");
    }
    skip
}

pub use kairos_sys::child::on_path;

/// The machine's network namespaces (`ip netns list`), by name.
pub fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The machine's network namespaces whose name starts with `prefix` (`kairos-PID-`: those of
/// one run).
pub fn namespaces_starting_with(prefix: &str) -> Vec<String> {
    namespaces().into_iter().filter(|n| n.starts_with(prefix)).collect()
}

/// A child of this process, as `/proc` shows it.
#[derive(Debug, Clone)]
pub struct ChildProcess {
    /// Its process id.
    pub pid: u32,
    /// Its name (`/proc/PID/comm`).
    pub name: String,
    /// Its `stat` line.
    pub stat: ProcStat,
}

/// This process's children, zombies (ended, not yet reaped) included.
pub fn children() -> Vec<ChildProcess> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, ProcStat::of_process(pid)?)))
        .filter(|(_, stat)| stat.parent() == Some(me))
        .map(|(pid, stat)| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            ChildProcess { pid, name: name.trim().to_string(), stat }
        })
        .collect()
}

/// This process's children that lead a process group of their own: those
/// `kairos_sys::child::OwnedChild` starts (and so the lab's harness, which a test may run in
/// its own process). The children tests start with a plain `Command` stay in this process's
/// group, so a test that checks its harness left nothing behind is not misled by another
/// test's children running at the same time.
pub fn children_in_own_groups() -> Vec<ChildProcess> {
    children().into_iter().filter(|c| c.stat.process_group() == Some(c.pid)).collect()
}

static OWN_GROUPS: Mutex<()> = Mutex::new(());

/// Held for its whole run by a test that starts children in process groups of their own, or
/// checks that none is left ([`children_in_own_groups`]): two such tests at once could not
/// tell their children apart.
pub fn own_groups_lock() -> MutexGuard<'static, ()> {
    OWN_GROUPS.lock().unwrap_or_else(|p| p.into_inner())
}
