//! The grid's runs, backend by backend: the maximum-rate searches, then at each rate the
//! one-user baseline (its configurations interleaved and repeated, the median run kept), the
//! routing FIBs and the variants, the age-controlled sender, and the update-rate sweep.

use std::collections::BTreeMap;

use anyhow::Result;
use kairos_fib::FibKind;
use kairos_forward::source::AgeControl;
use kairos_forward::trace::Trace;

use super::configs::{PEER_LABEL, PRIORITY, baseline_config, baseline_variants, source_config, variants};
use super::{SweepConfig, SweepRow};
use crate::experiments::forward::{Backend, ForwardConfig, Peer, Row, run_once};
use crate::harness::Run;

/// What the grid measured: its rows, each backend's maximum rates, whether the peer ran, and
/// the traces.
pub(super) type Grid = (Vec<SweepRow>, BTreeMap<String, f64>, String, BTreeMap<String, Trace>);

/// Each config's median run and the least average age of its runs, ns, and a peer's failure.
type Medians = (Vec<(Row, f64)>, Option<String>);

pub(super) fn grid(config: &SweepConfig, run: &Run<'_>) -> Result<Grid> {
    run.log(&format!("machine: {}", run.machine().one_line()));
    // Woken forwarder threads preempt the spinning source at once when they may run SCHED_FIFO.
    PRIORITY.store(if run.machine().sched_fifo { 50 } else { 0 }, std::sync::atomic::Ordering::Relaxed);
    let run_dir = run.dir();
    let traces: BTreeMap<String, Trace> = {
        let mut t = BTreeMap::new();
        t.insert("baseline".to_string(), Trace::generate(1, 0.0, config.packets, config.seed)?);
        let mut cdrs = config.cdrs.clone();
        cdrs.extend(&config.crossover_cdrs);
        for cdr in cdrs {
            t.entry(format!("{cdr}")).or_insert(Trace::generate(
                config.users,
                cdr,
                config.packets,
                config.seed,
            )?);
        }
        t
    };
    traces["0.1"].save(&run_dir.path().join("trace-cdr0.1.txt")).ok();
    let fibs = [FibKind::Rcu, FibKind::RwLock, FibKind::Seqlock, FibKind::Papaya];
    let mut rows = Vec::new();
    let mut max_rate_pps = BTreeMap::new();
    let mut peer = if config.backends.iter().all(|b| *b == Backend::Memory) {
        "not run: the dpdk-testpmd peer needs the udp or packet backend".to_string()
    } else if crate::peers::testpmd::find_testpmd().is_none() {
        "not run: dpdk-testpmd is not installed (Debian: apt install dpdk-dev)".to_string()
    } else {
        String::new()
    };
    for &backend in &config.backends {
        let mut medians = Vec::new();
        let mut go = |experiment: &'static str, load: f64, c: ForwardConfig, trace: &Trace| -> Result<Row> {
            let row = run_once(&c, trace)?;
            run.step(&format!("{backend} {experiment}"));
            rows.push(SweepRow { experiment, load, row: row.clone(), least_avg_age_ns: None });
            Ok(row)
        };
        // Runs every config `repetitions` times, interleaved, and keeps each one's median run
        // (by average age): one millisecond stall of this machine moves a short run's mean age a
        // lot, and interleaving spreads slow phases of the machine over all configurations. A
        // peer's failure is returned beside the rows (its config left out from then on); any
        // other run's failure ends the sweep.
        let median_of = |configs: Vec<ForwardConfig>, trace: &Trace| -> Result<Medians> {
            let mut runs: Vec<Vec<Row>> = vec![Vec::new(); configs.len()];
            let mut peer_failed = None;
            for _ in 0..config.repetitions.max(1) {
                for (c, out) in configs.iter().zip(runs.iter_mut()) {
                    if c.peer.is_some() && peer_failed.is_some() {
                        continue;
                    }
                    match run_once(c, trace) {
                        Ok(row) => out.push(row),
                        Err(e) if c.peer.is_some() => peer_failed = Some(format!("failed: {e:#}")),
                        Err(e) => return Err(e),
                    }
                    run.step(&format!("{backend} median runs"));
                }
            }
            let rows = configs
                .iter()
                .zip(runs)
                .filter(|(c, _)| !(c.peer.is_some() && peer_failed.is_some()))
                .map(|(_, mut r)| {
                    r.sort_by(|a, b| a.avg_age_ns.total_cmp(&b.avg_age_ns));
                    let least = r[0].avg_age_ns;
                    (r.swap_remove(r.len() / 2), least)
                })
                .collect();
            Ok((rows, peer_failed))
        };
        // The highest rate the sender achieves (within 5%: a full link ring pushes back on the
        // sender, as a NIC's TX ring does) with under 2% data loss: doubled from 50 kpps, then
        // bisected three times.
        let mut search = |make: &dyn Fn(f64) -> ForwardConfig, trace: &Trace| -> Result<f64> {
            let data = trace.data_rows() as f64;
            let mut probe = |rate: f64| -> Result<bool> {
                let row = go("max-rate", 0.0, make(rate), trace)?;
                Ok(sustained(&row, data))
            };
            let (mut good, mut bad) = (0.0, 50_000.0);
            while bad < 64e6 && probe(bad)? {
                good = bad;
                bad *= 2.0;
            }
            for _ in 0..3 {
                let mid = (good + bad) / 2.0;
                if probe(mid)? { good = mid } else { bad = mid }
            }
            Ok(if good > 0.0 { good } else { 25_000.0 })
        };
        let max_rate = search(
            &|rate| source_config(backend, Some(FibKind::Rcu), Some(rate), "max-rate probe"),
            &traces["0.01"],
        )?;
        let baseline_max = search(
            &|rate| baseline_config(backend, Some(rate), "max-rate probe (baseline)"),
            &traces["baseline"],
        )?;
        run.log(&format!(
            "{backend}: maximum sustained rate (under 2% data loss) {max_rate:.0} pps routing, {baseline_max:.0} pps baseline"
        ));
        max_rate_pps.insert(backend.to_string(), max_rate);
        max_rate_pps.insert(format!("{backend}-baseline"), baseline_max);
        if backend != Backend::Memory && peer.is_empty() {
            // The peer's own maximum on the same baseline, by the same search, so the two
            // forwarders' rates compare as measured and not at the fractions of Kairos's.
            let peer_config = |rate: f64| {
                let mut c = baseline_config(backend, Some(rate), "max-rate probe (peer)");
                c.peer = Some(Peer::DpdkTestpmd);
                c
            };
            match search(&peer_config, &traces["baseline"]) {
                Ok(peer_max) => {
                    run.log(&format!("{backend}: dpdk-testpmd's maximum sustained rate {peer_max:.0} pps"));
                    max_rate_pps.insert(format!("{backend}-peer"), peer_max);
                }
                Err(e) => {
                    peer = format!("failed: {e:#}");
                    run.log(&format!("the dpdk-testpmd peer {peer}; going on without it"));
                }
            }
        }
        for &f in &config.rate_fractions {
            let rate = Some(max_rate * f);
            let configs: Vec<ForwardConfig> = baseline_variants()
                .into_iter()
                .map(|(name, change)| {
                    let mut c = baseline_config(backend, Some(baseline_max * f), name);
                    change(&mut c);
                    c
                })
                .collect();
            // The peer's runs interleaved with Kairos's, so that a slow phase of the machine
            // falls on both forwarders' runs (run after Kairos's, the peer's met other phases:
            // two CI runs of the same forwarding code gave 0.86x and 1.70x near 200 kpps).
            let with_peer = backend != Backend::Memory && peer.is_empty();
            let peer_config = with_peer.then(|| {
                let mut c = baseline_config(backend, Some(baseline_max * f), PEER_LABEL);
                c.peer = Some(Peer::DpdkTestpmd);
                c
            });
            let (rows, peer_failed) =
                median_of(configs.into_iter().chain(peer_config).collect(), &traces["baseline"])?;
            if let Some(failed) = peer_failed {
                peer = failed;
                run.log(&format!("the dpdk-testpmd peer {peer}; going on without it"));
            }
            for (row, least) in rows {
                let experiment = if row.label == PEER_LABEL {
                    "peer-baseline"
                } else if row.label.starts_with("source") {
                    "baseline"
                } else {
                    "beyond-baseline"
                };
                medians.push(SweepRow { experiment, load: f, row, least_avg_age_ns: Some(least) });
            }
            for &cdr in &config.cdrs {
                for fib in fibs {
                    let label = format!("{fib} cdr {cdr}");
                    go(
                        "routing",
                        f,
                        source_config(backend, Some(fib), rate, &label),
                        &traces[&format!("{cdr}")],
                    )?;
                }
            }
            for (name, change) in variants() {
                let mut c = source_config(backend, Some(FibKind::Rcu), rate, name);
                change(&mut c);
                go("beyond", f, c, &traces["0.1"])?;
            }
        }
        // The age-controlled sender on the baseline, from a quarter of the maximum rate, with a
        // trace four times longer so that the controller has windows to climb in.
        {
            let mut c = baseline_config(backend, None, "age-controlled sender");
            c.age_control = Some(AgeControl {
                initial_pps: baseline_max * 0.25,
                min_pps: baseline_max * 0.02,
                max_pps: baseline_max * 3.0,
                window_ns: 20_000_000,
                step: 0.1,
            });
            let long = Trace::generate(1, 0.0, config.packets * 4, config.seed)?;
            let row = run_once(&c, &long)?;
            run.step(&format!("{backend} age-controlled sender"));
            let load = row.rate_pps / baseline_max;
            medians.push(SweepRow { experiment: "age-control", load, row, least_avg_age_ns: None });
        }
        for &cdr in &config.crossover_cdrs {
            for fib in [FibKind::Rcu, FibKind::RwLock, FibKind::Seqlock] {
                let rate = Some(max_rate * config.crossover_fraction);
                let label = format!("{fib} cdr {cdr}");
                go(
                    "update-rate",
                    config.crossover_fraction,
                    source_config(backend, Some(fib), rate, &label),
                    &traces[&format!("{cdr}")],
                )?;
            }
        }
        rows.append(&mut medians);
    }
    if peer.is_empty() {
        peer = "measured (experiment peer-baseline)".to_string();
    }
    Ok((rows, max_rate_pps, peer, traces))
}

/// [`sustained`], counting a packet replaced by a newer one of its user as delivered: that
/// newer packet carried the user's news (keep-latest's whole point); any other drop is a loss.
/// Each entry of the age check shows how much was replaced.
pub(super) fn sustained_fresh(row: &Row, data: f64) -> bool {
    kept_up(row, data, row.received + row.data_replaced)
}

/// Whether a run kept up, the maximum-rate search's rule: the sender within 5% of its rate and
/// under 2% of the trace's `data` packets lost.
pub(super) fn sustained(row: &Row, data: f64) -> bool {
    kept_up(row, data, row.received)
}

/// The sender within 5% of its rate, and `delivered` of the `data` packets short by under 2%.
fn kept_up(row: &Row, data: f64, delivered: u64) -> bool {
    (data - delivered as f64) / data < 0.02 && row.sent_pps >= 0.95 * row.rate_pps
}
