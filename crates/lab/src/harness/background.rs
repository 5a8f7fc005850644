//! Background load for experiments: `stress-ng` CPU and I/O workers, optionally pinned, owned
//! by the experiment that started them: dropping the [`OwnedChild`] ends `stress-ng` and its
//! workers on every path (an error returned mid-run, a panic, a signal).

use std::process::{Command, Stdio};

use kairos_sys::child::OwnedChild;

/// `stress-ng` could not be started (most often: it is not installed). The loaded rows of an
/// experiment are skipped with this as the reason.
#[derive(Debug, thiserror::Error)]
#[error("stress-ng could not start ({0}); install it (Debian: stress-ng) for the loaded rows")]
pub struct StressNgError(pub std::io::Error);

/// Starts `cpu_workers` `stress-ng` CPU workers and one I/O worker (on core `core` when given),
/// or says why it could not. The load lasts as long as the returned owner.
pub fn stress_ng(cpu_workers: usize, core: Option<usize>) -> Result<OwnedChild, StressNgError> {
    let mut cmd = Command::new("stress-ng");
    cmd.args(["--cpu", &cpu_workers.to_string(), "--io", "1", "--timeout", "3600s", "--quiet"]);
    if let Some(c) = core {
        cmd.args(["--taskset", &c.to_string()]);
    }
    OwnedChild::spawn(cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()))
        .map_err(StressNgError)
}

/// Runs `loaded` (an experiment's loaded rows) while `stress-ng` loads the machine, as
/// [`stress_ng`] starts it, and returns the load's description for the summary; when stress-ng
/// cannot start, `loaded` does not run and the reason is returned as the `Err` inside, for the
/// caller to log and record ([`crate::harness::Run::skipped`]). The load ends before this
/// returns, on every path.
pub fn under_stress_ng(
    cpu_workers: usize,
    core: Option<usize>,
    loaded: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Result<String, StressNgError>> {
    let load = match stress_ng(cpu_workers, core) {
        Ok(load) => load,
        Err(e) => return Ok(Err(e)),
    };
    // The workers take a moment to start: the first loaded row should see the whole load.
    std::thread::sleep(std::time::Duration::from_millis(200));
    loaded()?;
    drop(load);
    Ok(Ok(match core {
        Some(c) => format!("stress-ng --cpu {cpu_workers} --io 1 on core {c}"),
        None => format!("stress-ng --cpu {cpu_workers} --io 1"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    use kairos_sys::proc::ProcStat;

    /// Processes whose process group is `group` and that have not ended (zombies have).
    fn members(group: u32) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                ProcStat::of_process(pid).is_some_and(|s| s.process_group() == Some(group) && !s.is_zombie())
            })
            .collect()
    }

    #[test]
    fn dropping_the_load_ends_stress_ng_and_its_workers() {
        let load = match stress_ng(1, None) {
            Ok(load) => load,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        let group = load.id();
        // stress-ng forks its two workers soon after it starts.
        let deadline = Instant::now() + Duration::from_secs(10);
        while members(group).len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(members(group).len() >= 3, "stress-ng did not start its workers: {:?}", members(group));
        drop(load);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !members(group).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(members(group), Vec::<u32>::new(), "stress-ng processes outlived their owner");
    }
}
