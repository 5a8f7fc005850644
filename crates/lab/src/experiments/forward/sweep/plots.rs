//! The sweep's figures, drawn from its rows: the source's Figs. 3 and 4, the update-rate
//! crossover, the variants beside the source's configuration, and the age-controlled sender.

use std::path::PathBuf;

use anyhow::Result;

use super::{PerUser, SweepRow};
use crate::harness::output::RunDir;
use crate::harness::plot::{Scales, XySeries, measured_per_key, xy_chart};

fn series_by(
    rows: &[SweepRow],
    experiment: &str,
    x: impl Fn(&SweepRow) -> f64,
    y: impl Fn(&SweepRow) -> f64,
    label: impl Fn(&SweepRow) -> String,
) -> Vec<XySeries> {
    let mut names: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.experiment == experiment) {
        let name = label(r);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    measured_per_key(
        names,
        rows,
        |name| name.clone(),
        |name, r| r.experiment == experiment && &label(r) == name,
        |r| (x(r), y(r)),
    )
}

pub(super) fn plots(rows: &[SweepRow], per_user: &[PerUser], run: &RunDir) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let dir = run.path();
    let mpps = |r: &SweepRow| r.row.rate_pps / 1e6;
    let label = |r: &SweepRow| format!("{} {}", r.row.label, r.row.backend);
    let log_xy = Scales { log_x: true, log_y: true };
    // The baseline's rows and the peer forwarder's, numbered so that colours differ.
    let with_peer = |rows: &[SweepRow], y: fn(&SweepRow) -> f64| {
        let mut series = series_by(rows, "baseline", mpps, y, label);
        series.extend(series_by(rows, "peer-baseline", mpps, y, label));
        for (i, s) in series.iter_mut().enumerate() {
            s.color = i;
        }
        series
    };
    let mut chart =
        |name: &str, title: &str, xl: &str, yl: &str, scales: Scales, series: Vec<XySeries>| -> Result<()> {
            let series: Vec<XySeries> = series.into_iter().filter(|s| !s.points.is_empty()).collect();
            if series.is_empty() {
                return Ok(());
            }
            let path = dir.join(name);
            xy_chart(&path, title, xl, yl, scales, &series)?;
            out.push(path);
            Ok(())
        };
    chart(
        "fig3a_baseline_age.png",
        "Baseline (1 user, no FIB): average age vs offered rate",
        "offered rate R (Mpps)",
        "average age (us)",
        log_xy,
        with_peer(rows, |r| r.row.avg_age_ns / 1e3),
    )?;
    chart(
        "fig3b_baseline_batch.png",
        "Baseline: average sender batch vs offered rate",
        "offered rate R (Mpps)",
        "packets per tx_burst",
        Scales { log_x: true, log_y: false },
        with_peer(rows, |r| r.row.avg_batch),
    )?;
    chart(
        "fig4_age.png",
        "Routing (1000 users): average age vs offered rate",
        "offered rate R (Mpps)",
        "average age per user (us)",
        log_xy,
        series_by(rows, "routing", mpps, |r| r.row.avg_age_ns / 1e3, label),
    )?;
    let mut drops =
        series_by(rows, "routing", mpps, |r| r.row.data_drops as f64 + 0.5, |r| format!("data {}", label(r)));
    drops.extend(series_by(
        rows,
        "routing",
        mpps,
        |r| r.row.ctrl_drops as f64 + 0.5,
        |r| format!("control {}", label(r)),
    ));
    for (i, s) in drops.iter_mut().enumerate() {
        s.color = i;
    }
    chart(
        "fig4_drops.png",
        "Routing: packets dropped at the data and control rings (+0.5 for the log axis)",
        "offered rate R (Mpps)",
        "packets dropped",
        log_xy,
        drops,
    )?;
    // The source's FIBs beside Kairos's configuration at the same CDR 0.1: its 0 (drawn at 0.5)
    // is the point of the figure.
    let mut misaddressed = series_by(rows, "routing", mpps, |r| r.row.misaddressed as f64 + 0.5, label);
    misaddressed.extend(
        series_by(rows, "beyond", mpps, |r| r.row.misaddressed as f64 + 0.5, label)
            .into_iter()
            .filter(|s| s.name.starts_with("kairos")),
    );
    for (i, s) in misaddressed.iter_mut().enumerate() {
        s.color = i;
    }
    chart(
        "fig4_misaddressed.png",
        "Routing: misaddressed data packets, the source's FIBs and Kairos (+0.5 for the log axis)",
        "offered rate R (Mpps)",
        "misaddressed packets",
        log_xy,
        misaddressed,
    )?;
    chart(
        "fig4_fib_age.png",
        "Routing: location-update age at the FIB",
        "offered rate R (Mpps)",
        "average location age (us)",
        log_xy,
        series_by(rows, "routing", mpps, |r| r.row.fib_age_ns / 1e3, label),
    )?;
    if !per_user.is_empty() {
        chart(
            "fig4c_per_user_age.png",
            "Per-user average age at the highest sustainable rate (RW lock, CDR 0.1)",
            "user rank (Zipf)",
            "average age (us)",
            log_xy,
            vec![
                XySeries {
                    name: "measured".into(),
                    points: per_user.iter().map(|p| (p.rank as f64, p.avg_age_ns / 1e3)).collect(),
                    model: false,
                    color: 0,
                },
                XySeries {
                    name: "Zipf oracle S + (1/R)(1/p - 1/2)".into(),
                    points: per_user.iter().map(|p| (p.rank as f64, p.oracle_ns / 1e3)).collect(),
                    model: true,
                    color: 1,
                },
            ],
        )?;
    }
    chart(
        "update_rate_crossover.png",
        "Average age vs control/data ratio at a fixed rate",
        "control/data ratio (CDR)",
        "average age per user (us)",
        log_xy,
        series_by(
            rows,
            "update-rate",
            |r| r.row.cdr,
            |r| r.row.avg_age_ns / 1e3,
            |r| format!("{} {}", r.row.fib, r.row.backend),
        ),
    )?;
    let mut baseline_variants = series_by(rows, "baseline", mpps, |r| r.row.avg_age_ns / 1e3, label);
    baseline_variants.extend(series_by(rows, "beyond-baseline", mpps, |r| r.row.avg_age_ns / 1e3, label));
    for (i, s) in baseline_variants.iter_mut().enumerate() {
        s.color = i;
    }
    chart(
        "beyond_baseline_age.png",
        "One user, no FIB: average age vs offered rate, tail drop against freshness-aware rings",
        "offered rate R (Mpps)",
        "average age (us)",
        log_xy,
        baseline_variants,
    )?;
    // The age-controlled sender's rate and the age it measured, per 20 ms window: two charts,
    // as kpps and microseconds share no axis.
    let control = |y: fn(&kairos_forward::source::RateStep) -> f64, what: &str| -> Vec<XySeries> {
        rows.iter()
            .filter(|r| r.experiment == "age-control")
            .enumerate()
            .map(|(i, r)| XySeries {
                name: format!("{what} {}", r.row.backend),
                points: r.row.rate_steps.iter().map(|s| (s.t_ns as f64 / 1e6, y(s))).collect(),
                model: false,
                color: i,
            })
            .collect()
    };
    chart(
        "age_control.png",
        "Age-controlled sender (one user, no FIB): measured age per 20 ms window",
        "time (ms)",
        "window average age (us)",
        Scales { log_x: false, log_y: true },
        control(|s| s.window_age_ns / 1e3, "age"),
    )?;
    chart(
        "age_control_rate.png",
        "Age-controlled sender (one user, no FIB): the rate it chose per 20 ms window",
        "time (ms)",
        "offered rate (kpps)",
        Scales { log_x: false, log_y: false },
        control(|s| s.rate_pps / 1e3, "rate"),
    )?;
    chart(
        "beyond_age.png",
        "CDR 0.1: average age vs offered rate, source configuration and Kairos variants",
        "offered rate R (Mpps)",
        "average age per user (us)",
        log_xy,
        series_by(rows, "beyond", mpps, |r| r.row.avg_age_ns / 1e3, label),
    )?;
    Ok(out)
}
