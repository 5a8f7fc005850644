//! Background load for experiments: `stress-ng` CPU and I/O workers, optionally pinned.

use std::process::{Child, Command, Stdio};

/// Starts `cpu_workers` `stress-ng` CPU workers and one I/O worker (on core `core` when given),
/// or says why it could not. Kill the child when done.
pub fn stress_ng(cpu_workers: usize, core: Option<usize>) -> Result<Child, String> {
    let mut cmd = Command::new("stress-ng");
    cmd.args(["--cpu", &cpu_workers.to_string(), "--io", "1", "--timeout", "3600s", "--quiet"]);
    if let Some(c) = core {
        cmd.args(["--taskset", &c.to_string()]);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(|e| {
        format!("stress-ng could not start ({e}); install it (Debian: stress-ng) for the loaded rows")
    })
}
