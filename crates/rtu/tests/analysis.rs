//! The response-time analysis against hand computations, and against the RMDP schedule itself
//! (the policy on a virtual clock).

use kairos_rtu::analysis::{HandlerSpec, analyse, job_responses};
use kairos_rtu::sim::simulate;
use proptest::prelude::*;

fn h(name: &str, period_ns: u64, batch: u64, iteration: u64, unit_cost_ns: u64) -> HandlerSpec {
    HandlerSpec { name: name.into(), period_ns, batch, iteration, unit_cost_ns }
}

#[test]
fn the_first_job_meets_its_deadline_and_the_second_misses() {
    // a: T = 8, one unit of 3 (C = 3). b: T = 10, B = 3 units of 2 in iterations of 2: subjobs
    // of 4 then 2 (C = 6, F = 2). U = 3/8 + 6/10 = 0.975. b is the lowest priority: no blocking.
    // Busy period: L = ceil(L/8) 3 + ceil(L/10) 6: 9 -> 2*3 + 6 = 12 -> 2*3 + 2*6 = 18 ->
    //   3*3 + 2*6 = 21 -> 3*3 + 3*6 = 27 -> 4*3 + 3*6 = 30 -> 30: three jobs of b.
    // Job 0: S = (1*6 - 2) + (floor(S/8) + 1) 3 = 4 + 3 = 7 (floor(7/8) = 0); R = 7 + 2 = 9 <= 10.
    // Job 1: S = (2*6 - 2) + (floor(S/8) + 1) 3: 13 -> 10 + 6 = 16 -> 10 + 9 = 19 -> 19;
    //   R = 19 + 2 - 10 = 11 > 10: a's third job (released at 16) comes between b's subjobs.
    // Job 2: S = (3*6 - 2) + (floor(S/8) + 1) 3: 19 -> 16 + 9 = 25 -> 16 + 12 = 28 -> 28;
    //   R = 28 + 2 - 20 = 10 <= 10.
    let set = [h("a", 8, 1, 1, 3), h("b", 10, 3, 2, 2)];
    assert_eq!(job_responses(&set, 1), Some(vec![9, 11, 10]));
    let analysis = analyse(&set).unwrap();
    let b = &analysis.handlers[1];
    assert_eq!((b.response_time_ns, b.worst_job, b.jobs_checked, b.schedulable), (Some(11), 1, 3, false));
    assert!(!analysis.admitted, "a first-job analysis would have admitted it");
    // The schedule agrees: b's job 1 (released at 10) completes at 21.
    let run = simulate(&set, &[0, 0], 30);
    let job1 = run.finished.iter().find(|f| f.handler == 1 && f.job == 1).unwrap();
    assert_eq!((job1.release, job1.completion), (10, 21));
    assert!(run.misses >= 1);
    assert_eq!(run.missed.len() as u64, run.misses, "every miss is kept with its times");
    assert!(run.missed.iter().any(|m| m.handler == 1 && m.job == 1 && m.completion == Some(21)));
}

#[test]
fn blocking_is_the_longest_lower_priority_iteration() {
    // hi: T = 10, C = 2. lo: T = 40, B = 6 units of 1 in iterations of 3 (subjob 3).
    // hi: blocking 3, busy period 3 + 2 = 5 -> one job; R = 3 + 2 = 5 (starts after lo's subjob).
    // lo: no blocking; C = 6, F = 3. Busy period: L = ceil(L/10) 2 + ceil(L/40) 6: 8 -> 8.
    //   Job 0: S = (6 - 3) + (floor(S/10) + 1) 2 = 5; R = 5 + 3 = 8.
    let set = [h("hi", 10, 1, 1, 2), h("lo", 40, 6, 3, 1)];
    let a = analyse(&set).unwrap();
    assert_eq!((a.handlers[0].blocking_ns, a.handlers[0].response_time_ns), (3, Some(5)));
    assert_eq!((a.handlers[1].blocking_ns, a.handlers[1].response_time_ns), (0, Some(8)));
    // The worst case for hi: lo starts an iteration just before hi is released.
    let run = simulate(&set, &[1, 0], 400);
    assert_eq!(run.worst_response(0), Some(4), "lo's subjob started 1 ns earlier: 3 - 1 + 2");
    assert_eq!(run.misses, 0);
}

#[test]
fn response_time_analysis_admits_a_set_above_the_liu_layland_bound() {
    // a: T = 10, C = 4 (4 units of 1, iterations of 1); b: T = 20, C = 10 (10 units of 1).
    // U = 0.4 + 0.5 = 0.9 > 2 (2^(1/2) - 1) = 0.828.
    // a: blocking 1; R = 1 + 4 = 5 <= 10.
    // b: L = ceil(L/10) 4 + ceil(L/20) 10: 14 -> 18 -> 18: one job.
    //    S = (10 - 1) + (floor(S/10) + 1) 4: 13 -> 17 -> 17; R = 17 + 1 = 18 <= 20.
    let set = [h("a", 10, 4, 1, 1), h("b", 20, 10, 1, 1)];
    let a = analyse(&set).unwrap();
    assert!(a.utilisation > a.liu_layland_bound);
    assert!((a.liu_layland_bound - 0.8284).abs() < 1e-4);
    assert!(a.admitted);
    assert_eq!(a.handlers[1].response_time_ns, Some(18));
    for phases in [[0, 0], [1, 0], [0, 1], [3, 7]] {
        let run = simulate(&set, &phases, 20_000);
        assert_eq!(run.misses, 0, "phases {phases:?}");
        // 2,000 jobs of a and 1,000 of b are released; the last few may still run at the horizon.
        assert!(run.finished.len() >= 2_998, "{}", run.finished.len());
    }
}

#[test]
fn bad_handlers_are_refused_with_the_reason() {
    let e = analyse(&[h("x", 0, 1, 1, 1)]).unwrap_err().to_string();
    assert_eq!(e, "handler 'x': the period must be positive");
    let e = analyse(&[h("y", 10, 0, 1, 1)]).unwrap_err().to_string();
    assert!(e.contains("batch and iteration"), "{e}");
    // Over-utilised: no bound.
    let a = analyse(&[h("a", 10, 6, 1, 1), h("b", 10, 6, 1, 1)]).unwrap();
    assert!(!a.admitted && a.handlers[1].response_time_ns.is_none());
}

fn cases() -> u32 {
    std::env::var("KAIROS_RTU_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Soundness: an admitted set never misses in the schedule, whichever handler starts an
    /// iteration just before the others are released, and no job's response exceeds the
    /// analysis.
    #[test]
    fn admitted_sets_never_miss(
        raw in prop::collection::vec((5u64..60, 1u64..6, 1u64..6, 1u64..4), 1..5),
    ) {
        let set: Vec<HandlerSpec> = raw
            .iter()
            .enumerate()
            .map(|(i, &(period, batch, iteration, cost))| h(&format!("h{i}"), period * 10, batch, iteration.min(batch), cost))
            .collect();
        let analysis = analyse(&set).unwrap();
        prop_assume!(analysis.admitted);
        let horizon = set.iter().map(|x| x.period_ns).max().unwrap() * 50;
        for first in 0..set.len() {
            let phases: Vec<u64> = (0..set.len()).map(|i| u64::from(i != first)).collect();
            let run = simulate(&set, &phases, horizon);
            prop_assert_eq!(run.misses, 0, "phases {:?}", phases);
            for (i, a) in analysis.handlers.iter().enumerate() {
                if let Some(seen) = run.worst_response(i) {
                    prop_assert!(seen <= a.response_time_ns.unwrap(), "{}: {} > {:?}", a.name, seen, a.response_time_ns);
                }
            }
        }
    }
}

#[test]
fn an_overrunning_handler_is_detected_and_demoted() {
    use kairos_rtu::sim::simulate_with_costs;
    // In milliseconds (the tolerance has a 20 us floor): good: T = 100, 10 units of 2 (C = 20);
    // bad declares T = 50, 4 units of 1 in iterations of 4 but really costs 10 per unit.
    // Admitted as declared: U = 0.2 + 0.08.
    const MS: u64 = 1_000_000;
    let set = [h("good", 100 * MS, 10, 2, 2 * MS), h("bad", 50 * MS, 4, 4, MS)];
    assert!(analyse(&set).unwrap().admitted);
    let (run, policy) = simulate_with_costs(&set, &[2 * MS, 10 * MS], &[0, 0], 10_000 * MS);
    let bad = policy.counts(1);
    assert!(bad.demoted && bad.overruns >= 3, "{bad:?}");
    // The first dispatch ran 4 units: 40 instead of 4 ms, 36 too many.
    assert_eq!(bad.worst_excess_ns, 36 * MS);
    // Once demoted it runs one unit (10 ms) at a time below `good`, which then meets every
    // deadline: its misses, if any, all come from before the demotion.
    let late: Vec<_> =
        run.finished.iter().filter(|f| f.handler == 0 && f.completion > f.release + 100 * MS).collect();
    assert!(late.iter().all(|f| f.release < 300 * MS), "good missed after the demotion: {late:?}");
    assert_eq!(policy.counts(0).overruns, 0);
}
