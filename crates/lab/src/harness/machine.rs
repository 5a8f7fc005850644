//! What machine a figure was measured on: cores, kernel, CPU, real-time rights, clock costs.

use kairos_metrics::clock;
use kairos_sys::proc::{cpu_model, kernel_release, online_cores};
use kairos_sys::thread::set_fifo;
use serde::Serialize;

/// The machine description every summary carries under `"machine"`.
#[derive(Debug, Clone, Serialize)]
pub struct MachineInfo {
    /// Cores this process may use.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// CPU model name.
    pub cpu: String,
    /// Whether a thread could be made `SCHED_FIFO` (needs root or `CAP_SYS_NICE`).
    pub sched_fifo: bool,
    /// Why not, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sched_fifo_error: Option<String>,
    /// Cost of one `CLOCK_MONOTONIC` read, ns (median of 5 x 1,000).
    pub monotonic_read_ns: f64,
    /// Cost of one TSC read through `quanta`, ns.
    pub tsc_read_ns: f64,
}

impl MachineInfo {
    /// Probes this machine (takes a few milliseconds).
    pub fn probe() -> Self {
        let fifo = std::thread::spawn(|| set_fifo(1))
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("probe thread panicked")));
        Self {
            cores: online_cores(),
            kernel: kernel_release(),
            cpu: cpu_model(),
            sched_fifo: fifo.is_ok(),
            sched_fifo_error: fifo.err().map(|e| e.to_string()),
            monotonic_read_ns: clock::read_cost_ns(&clock::MonotonicClock, 5),
            tsc_read_ns: clock::read_cost_ns(&clock::TscClock::new(), 5),
        }
    }

    /// One line for logs: `2 cores, kernel 6.1.0, SCHED_FIFO granted`.
    pub fn one_line(&self) -> String {
        format!(
            "{} cores, kernel {}, SCHED_FIFO {}",
            self.cores,
            self.kernel,
            if self.sched_fifo { "granted" } else { "refused (run as root for real-time priority)" }
        )
    }
}
