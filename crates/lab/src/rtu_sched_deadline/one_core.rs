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
//! root cpuset are not balanced between cores meanwhile. Sets left behind by a killed run are
//! removed, and balancing restored, the next time one is made.

use std::path::{Path, PathBuf};

const CPUSET: &str = "/sys/fs/cgroup/cpuset";
const PREFIX: &str = "kairos-dl-";

#[derive(Debug)]
pub struct OneCoreDomain {
    root: PathBuf,
    dl: PathBuf,
    rest: PathBuf,
    balance_before: String,
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

impl OneCoreDomain {
    /// Makes the one-core domain for `core` (of `cores`), or says why it cannot.
    pub fn new(core: usize, cores: usize) -> Result<Self, String> {
        let root = PathBuf::from(CPUSET);
        if !root.join("cpuset.sched_load_balance").exists() {
            return Err(format!(
                "a one-core SCHED_DEADLINE domain needs the v1 cpuset hierarchy at {CPUSET}, which this machine does not mount"
            ));
        }
        if cores < 2 {
            return Err("a one-core domain needs a second core for everything else".into());
        }
        remove_stale(&root);
        let balance_before = std::fs::read_to_string(root.join("cpuset.sched_load_balance"))
            .map_err(|e| format!("reading the root cpuset: {e}"))?
            .trim()
            .to_string();
        let pid = std::process::id();
        let domain = Self {
            dl: root.join(format!("{PREFIX}{pid}")),
            rest: root.join(format!("{PREFIX}{pid}-rest")),
            root,
            balance_before,
        };
        let mems = std::fs::read_to_string(domain.root.join("cpuset.mems")).unwrap_or_else(|_| "0".into());
        let others: Vec<String> = (0..cores).filter(|&c| c != core).map(|c| c.to_string()).collect();
        for (dir, cpus) in [(&domain.dl, core.to_string()), (&domain.rest, others.join(","))] {
            std::fs::create_dir(dir).map_err(|e| format!("making the cpuset {}: {e}", dir.display()))?;
            write(&dir.join("cpuset.cpus"), &cpus)?;
            write(&dir.join("cpuset.mems"), mems.trim())?;
            write(&dir.join("cpuset.cpu_exclusive"), "1")?;
        }
        write(&domain.root.join("cpuset.sched_load_balance"), "0")?;
        Ok(domain)
    }

    /// Moves the calling thread into the one-core set.
    pub fn join(&self) -> Result<(), String> {
        let tid = kairos_sys::thread::thread_id();
        write(&self.dl.join("tasks"), &tid.to_string())
    }
}

impl Drop for OneCoreDomain {
    fn drop(&mut self) {
        let _ = std::fs::write(self.root.join("cpuset.sched_load_balance"), &self.balance_before);
        for dir in [&self.dl, &self.rest] {
            let _ = std::fs::remove_dir(dir);
        }
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
