//! What the sweep writes and prints besides its summary: every row in `rows.csv` and in the
//! table of [`TABLE_FILE`], and the conclusions printed without `--json`, verdict last.

use anyhow::Result;

use super::analysis::{KAIROS_BESIDE_PEER, row_at};
use super::{SweepRow, SweepSummary};
use crate::harness::output::RunDir;

pub(super) fn write_csv(rows: &[SweepRow], run: &RunDir) -> Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "experiment",
        "load",
        "label",
        "backend",
        "fib",
        "ring_policy",
        "ring_size",
        "control",
        "flush",
        "cdr",
        "users",
        "rate_pps",
        "sent_pps",
        "avg_age_ns",
        "peak_age_ns",
        "data_drops",
        "data_replaced",
        "ctrl_drops",
        "misaddressed",
        "received",
        "sent",
        "avg_batch",
        "fwd_avg_batch",
        "fib_age_ns",
        "tx_drops",
        "pool_drops",
        "mean_latency_ns",
        "p50_latency_ns",
        "p99_latency_ns",
        "cpu_ns_per_packet",
        "fwd_naps",
        "fwd_held_ns",
    ])?;
    for s in rows {
        let r = &s.row;
        w.write_record([
            s.experiment.to_string(),
            s.load.to_string(),
            r.label.clone(),
            r.backend.to_string(),
            r.fib.to_string(),
            r.ring_policy.to_string(),
            r.ring_size.to_string(),
            format!("{:?}", r.control).to_lowercase(),
            r.flush.to_string(),
            r.cdr.to_string(),
            r.users.to_string(),
            format!("{:.0}", r.rate_pps),
            format!("{:.0}", r.sent_pps),
            format!("{:.0}", r.avg_age_ns),
            format!("{:.0}", r.peak_age_ns),
            r.data_drops.to_string(),
            r.data_replaced.to_string(),
            r.ctrl_drops.to_string(),
            r.misaddressed.to_string(),
            r.received.to_string(),
            r.sent.to_string(),
            format!("{:.3}", r.avg_batch),
            format!("{:.3}", r.fwd_avg_batch),
            format!("{:.0}", r.fib_age_ns),
            r.tx_drops.to_string(),
            r.pool_drops.to_string(),
            format!("{:.0}", r.mean_latency_ns),
            r.p50_latency_ns.to_string(),
            r.p99_latency_ns.to_string(),
            format!("{:.0}", r.cpu_ns_per_packet),
            r.fwd_naps.to_string(),
            format!("{:.0}", r.fwd_held_ns),
        ])?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?;
    run.write_text("rows.csv", &String::from_utf8_lossy(&bytes))?;
    Ok(())
}

/// The text report.
/// The file in a run's directory that holds [`table`]'s text.
pub const TABLE_FILE: &str = "table.txt";

/// Every run of the grid, one line each (written to [`TABLE_FILE`]; `rows.csv` has the same
/// rows for a spreadsheet).
pub fn table(rows: &[SweepRow]) -> String {
    let mut out =
        format!("{:<12} {:>5} {}\n", "experiment", "load", crate::experiments::forward::row_header());
    for r in rows {
        out.push_str(&format!(
            "{:<12} {:>5.2} {}\n",
            r.experiment,
            r.load,
            crate::experiments::forward::row_line(&r.row)
        ));
    }
    out
}

/// What each plot shows, in the order a reader should look at them.
const PLOT_CAPTIONS: &[(&str, &str)] = &[
    ("fig3a_baseline_age.png", "one user, no FIB: age against offered rate, the knee where the ring fills"),
    ("fig3b_baseline_batch.png", "one user: the sender's batch grows with the rate"),
    ("fig4_age.png", "1,000 users: age against rate for each FIB"),
    ("fig4_drops.png", "1,000 users: data and control packets dropped at the rings"),
    (
        "fig4_misaddressed.png",
        "1,000 users: packets sent to a stale next hop, the source's FIBs against Kairos",
    ),
    ("fig4_fib_age.png", "1,000 users: how old the location the FIB forwards by is"),
    ("fig4c_per_user_age.png", "age per user (Zipf rank) beside the queueing model's prediction"),
    ("update_rate_crossover.png", "age against the control/data ratio: where the RW lock overtakes RCU"),
    ("beyond_baseline_age.png", "one user: tail drop against Kairos's freshness-aware rings"),
    ("beyond_age.png", "1,000 users: the source's configuration against each Kairos change and all of them"),
    ("age_control.png", "the age-controlled sender: the age it measured per window"),
    ("age_control_rate.png", "the age-controlled sender: the rate it settled at"),
];

/// The run's conclusions: the machine, the maximum rates, the checks, the freshest
/// configuration per rate and the verdict last, then where the table and figures are.
pub fn report(s: &SweepSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    for (backend, rate) in &s.max_rate_pps {
        out.push_str(&format!("maximum sustained rate ({backend}): {rate:.0} pps\n"));
    }
    out.push_str("\nfreshest configuration per rate:\n");
    for b in &s.best_per_rate {
        out.push_str(&format!(
            "  {:<8} {} load {:>4.2}: {} at {:.1} us vs the source's {:.1} us ({:.2}x)\n",
            b.grid,
            b.backend,
            b.load,
            b.best,
            b.best_age_ns / 1e3,
            b.source_age_ns / 1e3,
            b.gain
        ));
    }
    out.push_str(&format!("\npeer forwarder: {}\n", s.peer));
    for p in s.rows.iter().filter(|r| r.experiment == "peer-baseline") {
        let mut line = format!(
            "  {} load {:>4.2}: dpdk-testpmd {:.1} us, received {}",
            p.row.backend,
            p.load,
            p.row.avg_age_ns / 1e3,
            p.row.received
        );
        for (experiment, label, name) in KAIROS_BESIDE_PEER {
            if let Some(k) = row_at(&s.rows, experiment, p.row.backend, p.load, label) {
                line.push_str(&format!(
                    "; Kairos ({name}) {:.1} us, received {}",
                    k.row.avg_age_ns / 1e3,
                    k.row.received
                ));
                if k.row.data_replaced > 0 {
                    line.push_str(&format!(", replaced {}", k.row.data_replaced));
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\nchecks:\n");
    for c in &s.checks {
        let verdict = match (c.held, c.claim) {
            (true, _) => "held",
            (false, true) => "NOT held",
            (false, false) => "not held (observation)",
        };
        out.push_str(&format!("  [{verdict}] {}: {}\n", c.name, c.detail));
    }
    out.push_str(&format!("\n{}\n", verdict(s)));
    let dir = &s.run.results_dir;
    out.push_str(&format!(
        "\nevery run ({} rows): {} (rows.csv for a spreadsheet)\n",
        s.rows.len(),
        dir.join(TABLE_FILE).display()
    ));
    out.push_str(&format!("figures, in {} (docs/forwarding.md explains each):\n", dir.display()));
    for plot in &s.run.plots {
        let name = plot.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let caption = PLOT_CAPTIONS.iter().find(|(file, _)| *file == name).map_or("", |(_, c)| c);
        out.push_str(&format!("  {name:<28} {caption}\n"));
    }
    out
}

/// The short verdict: how many of the claims held, and how much fresher the best configuration
/// is than the source's where it gains most.
fn verdict(s: &SweepSummary) -> String {
    let claims = s.checks.iter().filter(|c| c.claim).count();
    let held = s.checks.iter().filter(|c| c.claim && c.held).count();
    let mut line = format!("verdict: {held} of {claims} claims held");
    if let Some(b) = s.best_per_rate.iter().max_by(|a, b| a.gain.total_cmp(&b.gain)) {
        line.push_str(&format!(
            "; at its best ({}, {} load {:.2}) {} ages {:.1}x less than the source's configuration",
            b.grid, b.backend, b.load, b.best, b.gain
        ));
    }
    if held < claims {
        line.push_str(" (a claim that did not hold is marked NOT held above)");
    }
    line
}
