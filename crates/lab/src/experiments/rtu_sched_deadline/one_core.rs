//! A root domain of one core for `SCHED_DEADLINE` threads, so EDF can be compared with RMDP on
//! the same single core.
//!
//! The kernel refuses `SCHED_DEADLINE` to a thread whose affinity is narrower than its root
//! domain, and a root domain is narrowed only by cpusets (the kernel's sched-deadline
//! documentation, section 5). On the v1 cpuset hierarchy this makes two exclusive sibling
//! cpusets, one holding the chosen core and one the others, and turns load balancing off in the
//! root cpuset, which splits the machine into one root domain per sibling. Threads join the
//! one-core set by writing their thread id into its `tasks` file. Dropping the guard turns load
//! balancing back on and removes the sets (the threads that joined must have exited).
//!
//! This changes a system-wide setting for the length of a run: other processes' threads in the
//! root cpuset are not balanced between cores meanwhile. So the guard registers the same undo
//! with [`kairos_sys::cleanup`]: on SIGINT, SIGTERM or SIGHUP the signal thread ends the
//! reservations of the threads still in the sets (a set with tasks cannot be removed, and a
//! deadline thread could not be moved without its bandwidth), moves them to the root, restores
//! balancing and removes the sets. Sets left behind by a killed run (SIGKILL) are removed, and
//! balancing restored, the next time one is made.

use std::path::{Path, PathBuf};

use kairos_sys::cleanup::{self, Registration};

const CPUSET: &str = "/sys/fs/cgroup/cpuset";
const PREFIX: &str = "kairos-dl-";

/// A root domain of one core for `SCHED_DEADLINE` threads: two exclusive cpusets, one holding
/// the chosen core and one the rest, with load balancing off in the root cpuset. Dropping it
/// undoes all of that (see the module documentation).
#[derive(Debug)]
pub struct OneCoreDomain {
    root: PathBuf,
    dl: PathBuf,
    rest: PathBuf,
    balance_before: String,
    /// The undo, should a signal end the process first.
    undo: Option<Registration>,
}

/// Why a one-core domain could not be made or joined.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// The machine does not mount the v1 cpuset hierarchy.
    #[error(
        "a one-core SCHED_DEADLINE domain needs the v1 cpuset hierarchy at {CPUSET}, which this machine does not mount"
    )]
    NoCpusets,
    /// The machine has one core, which cannot be set apart from the rest.
    #[error("a one-core domain needs a second core for everything else")]
    OneCore,
    /// The root cpuset's balancing setting could not be read.
    #[error("reading the root cpuset: {0}")]
    ReadRoot(std::io::Error),
    /// A cpuset could not be made.
    #[error("making the cpuset {}: {error}", .path.display())]
    MakeSet {
        /// The cpuset's directory.
        path: PathBuf,
        /// What the file system said.
        error: std::io::Error,
    },
    /// A cpuset file refused a value.
    #[error("writing {value:?} to {}: {error}", .path.display())]
    Write {
        /// What was written.
        value: String,
        /// The file.
        path: PathBuf,
        /// What the file system said.
        error: std::io::Error,
    },
}

fn write(path: &Path, value: &str) -> Result<(), DomainError> {
    std::fs::write(path, value).map_err(|error| DomainError::Write {
        value: value.to_string(),
        path: path.to_path_buf(),
        error,
    })
}

impl OneCoreDomain {
    /// Makes the one-core domain for `core` (of `cores`), or says why it cannot.
    pub fn new(core: usize, cores: usize) -> Result<Self, DomainError> {
        let root = PathBuf::from(CPUSET);
        if !root.join("cpuset.sched_load_balance").exists() {
            return Err(DomainError::NoCpusets);
        }
        if cores < 2 {
            return Err(DomainError::OneCore);
        }
        remove_stale(&root);
        let balance_before = std::fs::read_to_string(root.join("cpuset.sched_load_balance"))
            .map_err(DomainError::ReadRoot)?
            .trim()
            .to_string();
        let pid = std::process::id();
        let (dl, rest) = (root.join(format!("{PREFIX}{pid}")), root.join(format!("{PREFIX}{pid}-rest")));
        // Made under a hold, the undo registered first: a signal is handled before any change
        // or with all of them registered; a failure half-way is undone by drop.
        let _hold = cleanup::hold_off();
        let undo = {
            let (root, dl, rest, balance) = (root.clone(), dl.clone(), rest.clone(), balance_before.clone());
            cleanup::register(
                format!(
                    "cpusets {PREFIX}{pid}, {PREFIX}{pid}-rest (cpuset.sched_load_balance back to {balance})"
                ),
                move || undo(&root, &[&dl, &rest], &balance),
            )
        };
        let domain = Self { dl, rest, root, balance_before, undo: Some(undo) };
        let mems = std::fs::read_to_string(domain.root.join("cpuset.mems")).unwrap_or_else(|_| "0".into());
        let others: Vec<String> = (0..cores).filter(|&c| c != core).map(|c| c.to_string()).collect();
        for (dir, cpus) in [(&domain.dl, core.to_string()), (&domain.rest, others.join(","))] {
            std::fs::create_dir(dir)
                .map_err(|error| DomainError::MakeSet { path: dir.to_path_buf(), error })?;
            write(&dir.join("cpuset.cpus"), &cpus)?;
            write(&dir.join("cpuset.mems"), mems.trim())?;
            write(&dir.join("cpuset.cpu_exclusive"), "1")?;
        }
        write(&domain.root.join("cpuset.sched_load_balance"), "0")?;
        Ok(domain)
    }

    /// Moves the calling thread into the one-core set.
    pub fn join(&self) -> Result<(), DomainError> {
        let tid = kairos_sys::thread::thread_id();
        write(&self.dl.join("tasks"), &tid.to_string())
    }
}

impl Drop for OneCoreDomain {
    fn drop(&mut self) {
        // Withdrawn and undone under one hold: a signal now is handled once the sets are gone.
        let _hold = cleanup::hold_off();
        drop(self.undo.take());
        undo(&self.root, &[&self.dl, &self.rest], &self.balance_before);
    }
}

/// Moves the threads still in `sets` to the root cpuset (ending their deadline reservations
/// first), writes `balance` back to the root and removes the sets. Best effort: a step that
/// fails does not stop the others.
fn undo(root: &Path, sets: &[&Path], balance: &str) {
    for set in sets {
        let tasks = std::fs::read_to_string(set.join("tasks")).unwrap_or_default();
        for tid in tasks.lines().filter_map(|t| t.trim().parse::<i32>().ok()) {
            let _ = kairos_sys::sched_deadline::end_reservation_of(tid);
            let _ = std::fs::write(root.join("tasks"), tid.to_string());
        }
    }
    let _ = std::fs::write(root.join("cpuset.sched_load_balance"), balance);
    for set in sets {
        let _ = std::fs::remove_dir(set);
    }
}

/// Removes sets a killed run left behind (their threads are gone) and turns balancing back on.
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    let mut removed = false;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(PREFIX) {
            removed |= std::fs::remove_dir(entry.path()).is_ok();
        }
    }
    if removed {
        let _ = std::fs::write(root.join("cpuset.sched_load_balance"), "1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_undone_with_a_thread_still_in_it_is_removed_and_balancing_restored() {
        let cores = kairos_sys::proc::online_cores();
        let balance = Path::new(CPUSET).join("cpuset.sched_load_balance");
        let Ok(before) = std::fs::read_to_string(&balance) else {
            eprintln!("skipped: no v1 cpuset hierarchy at {CPUSET}");
            return;
        };
        if !kairos_sys::user::is_root() || cores < 2 {
            eprintln!("skipped: needs root and two cores");
            return;
        }
        let domain = OneCoreDomain::new(cores - 1, cores).unwrap();
        let (dl, rest) = (domain.dl.clone(), domain.rest.clone());
        let domain = std::sync::Arc::new(domain);
        let (joined, has_joined) = std::sync::mpsc::channel();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        // A thread in the set, as a signal finds the experiment's threads.
        let member = {
            let domain = std::sync::Arc::clone(&domain);
            std::thread::spawn(move || {
                let result = domain.join();
                drop(domain);
                joined.send(result).unwrap();
                let _ = wait.recv();
            })
        };
        has_joined.recv().unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&balance).unwrap().trim(), "0");
        drop(std::sync::Arc::into_inner(domain).expect("the member dropped its handle"));
        assert!(!dl.exists() && !rest.exists(), "a set with a thread in it was left behind");
        assert_eq!(std::fs::read_to_string(&balance).unwrap(), before);
        release.send(()).unwrap();
        member.join().unwrap();
    }
}
