use super::*;

#[test]
fn rows_and_loads_are_named_as_other_tools_read_them() {
    let names: Vec<&str> = RowKind::ALL.iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        [
            "kairos lane",
            "kairos lane, shared receive path",
            "kairos lane, no host tuning",
            "udp blocking",
            "udp busy-poll",
            "priority only",
            "sockperf"
        ]
    );
    for r in RowKind::ALL {
        assert_eq!(RowKind::from_slug(r.slug()), Ok(r));
    }
    assert!(RowKind::from_slug("dpdk").unwrap_err().to_string().contains("udp-blocking"));
    assert_eq!(LoadKind::from_name("flood"), Ok(LoadKind::Flood));
    assert!(LoadKind::from_name("storm").is_err());
}

#[test]
fn bad_settings_are_refused_before_anything_starts() {
    let mut c = LatencyConfig::preset(true);
    c.packets = 10;
    assert!(c.plan().unwrap_err().to_string().contains("--packets"));
    let mut c = LatencyConfig::preset(true);
    c.period_us = 5;
    assert!(c.plan().unwrap_err().to_string().contains("--period-us"));
    let mut c = LatencyConfig::preset(true);
    c.rows.clear();
    assert!(c.plan().unwrap_err().to_string().contains("at least one row"));
}

#[test]
fn the_figures_count_duplicates_once_and_check_the_bound() {
    let s = |seq, lat| Sample { seq, sent_ns: 1_000 * seq, received_ns: 1_000 * seq + lat, kernel_ns: None };
    let m = Measured {
        samples: vec![s(0, 5_000), s(1, 6_000), s(1, 6_000), s(2, 50_000)],
        sent: 4,
        bound_ns: Some((4_000, 10_000)),
        notes: Vec::new(),
    };
    let row = figures(RowKind::Lane, LoadKind::Idle, &m, &[], 0);
    assert_eq!((row.packets, row.lost), (4, 1));
    assert_eq!((row.latency_ns.min, row.latency_ns.max), (5_000, 50_000));
    assert_eq!((row.bound_violations, row.violations_with_stall), (Some(1), Some(0)));
    let g = goals(std::slice::from_ref(&row));
    assert_eq!((g.unexplained_violations, g.untuned_unexplained_violations), (1, 0));
    assert_eq!(g.lane_p50_ns, None, "an idle row is not the goal's");
    // The shared path's violations count toward the goal, the untuned row's beside it.
    let shared = figures(RowKind::LaneShared, LoadKind::Idle, &m, &[], 0);
    let untuned = figures(RowKind::LaneUntuned, LoadKind::Idle, &m, &[], 0);
    let g = goals(&[row, shared, untuned]);
    assert_eq!((g.unexplained_violations, g.untuned_unexplained_violations), (2, 1));
}

#[test]
fn thinning_keeps_the_spikes() {
    let points: Vec<(f64, f64)> =
        (0..10_000).map(|i| (i as f64, if i == 4_321 { 900.0 } else { 5.0 })).collect();
    let thin = thin(&points, 100);
    assert_eq!(thin.len(), 100);
    assert!(thin.iter().any(|p| p.1 == 900.0));
    let cdf = jitter_cdf(&points);
    assert_eq!(cdf.last().map(|p| p.1), Some(1.0));
    assert!((cdf.last().unwrap().0 - 895.0).abs() < 1e-9);
}
