use super::*;

#[test]
fn a_quiet_cluster_answers_every_request() {
    let mut config = SimConfig::new(1);
    config.faults.clear();
    config.duration_us = 200_000;
    let out = run(config);
    let answered = out.history.iter().filter(|o| o.output.is_some()).count();
    assert!(out.history.len() > 100, "only {} requests", out.history.len());
    assert_eq!(answered, out.history.len(), "every request of a quiet run is answered");
    assert_eq!(out.lost_acknowledged_writes, Some(0));
    assert_eq!(out.terms, 1, "one election, no churn");
}

fn op(client: u64, kind: OpKind, output: Option<Reply>, call_us: u64, return_us: Option<u64>) -> SimOp {
    SimOp { client, key: b"k".to_vec(), kind, output, call_us, return_us }
}

#[test]
fn an_acknowledged_append_missing_at_the_end_is_lost_unless_a_set_may_follow_it() {
    let finals = BTreeMap::from([(b"k".to_vec(), Some(b"a;".to_vec()))]);
    let appended =
        |token: &str, at| op(1, OpKind::Append(token.into()), Some(Reply::Integer(2)), at, Some(at + 5));
    assert_eq!(lost_writes(&[appended("a;", 0), appended("b;", 10)], &finals), 1);
    // Never acknowledged: not lost.
    let unknown = op(1, OpKind::Append(b"b;".to_vec()), None, 10, None);
    assert_eq!(lost_writes(&[appended("a;", 0), unknown], &finals), 0);
    // A SET that returned after the append was called may have replaced it.
    let set = op(2, OpKind::Set(b"a;".to_vec()), Some(Reply::Ok), 12, Some(30));
    assert_eq!(lost_writes(&[appended("b;", 10), set.clone()], &finals), 0);
    // One that returned before it was called cannot have.
    let early = op(2, OpKind::Set(b"x".to_vec()), Some(Reply::Ok), 0, Some(5));
    assert_eq!(lost_writes(&[early, appended("b;", 10)], &finals), 1);
    // A SET with an unknown outcome may take effect any time after its call.
    let pending = op(2, OpKind::Set(b"a;".to_vec()), None, 0, None);
    assert_eq!(lost_writes(&[pending, appended("b;", 10)], &finals), 0);
}

#[test]
fn the_detector_replaces_a_crashed_leader_sooner_than_raft_alone() {
    // Leader crashes only, over the same seeds with the detector and without: the time
    // with no leader shrinks from Raft's timeout (5-10 ms here) to the detector's
    // suspicion and one election (here 0.65 ms a crash against 7.4 ms); the histories
    // stay linearizable either way.
    let (mut with, mut without, mut crashes) = (0, 0, 0);
    for seed in 1..=6 {
        let mut config = SimConfig::new(seed);
        config.faults = vec![FaultKind::CrashLeader];
        config.detector = Some(WatchConfig {
            period_ns: 100_000,
            lambda_ns: 200_000,
            fanout: Fanout::default(),
            probe_ns: None,
        });
        let on = run(config.clone());
        config.detector = None;
        let off = run(config);
        for outcome in [&on, &off] {
            let (verdict, detail) =
                crate::sim::check::judge(&outcome.history, std::time::Duration::from_secs(10));
            assert_eq!(verdict, "linearizable", "seed {seed}: {detail:?}");
            assert_eq!(outcome.lost_acknowledged_writes, Some(0), "seed {seed}");
        }
        with += on.leaderless_us;
        without += off.leaderless_us;
        crashes += on.faults.len();
    }
    eprintln!("leaderless {with} us with the detector, {without} us without, {crashes} crashes");
    assert!(crashes >= 12, "{crashes} crashes");
    assert!(
        with * 3 < without,
        "leaderless {with} us with the detector, {without} us without, over {crashes} crashes"
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let a = run(SimConfig::new(7));
    let b = run(SimConfig::new(7));
    assert_eq!(a.history, b.history);
    assert_eq!(a.faults, b.faults);
    assert!(!a.faults.is_empty());
}
