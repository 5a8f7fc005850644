//! The set of `analysis.rs`'s `response_time_analysis_admits_a_set_above_the_liu_layland_bound`,
//! scaled to milliseconds, run on the real-time shell: the utilisation bound refuses it, exact
//! analysis admits it, and it runs without a miss. A test binary of its own, so no other test's
//! real-time thread shares its core.
//!
//! It needs `SCHED_FIFO` (root): without it the shell competes with every other thread, nothing
//! is promised, and the test says so and checks only the analysis.

use std::time::Duration;

use kairos_metrics::{StallWatch, StallWatchConfig};
use kairos_rtu::analysis::{HandlerSpec, analyse};
use kairos_rtu::shell::{Context, Scheduler, ShellConfig};
use kairos_sys::clock::{monotonic_ns, spin_until_ns};
use kairos_sys::proc::last_core;

const MS: u64 = 1_000_000;

fn spec(name: &str, period_ms: u64, batch: u64) -> HandlerSpec {
    // Units of 2 ms, one per iteration.
    HandlerSpec { name: name.into(), period_ns: period_ms * MS, batch, iteration: 1, unit_cost_ns: 2 * MS }
}

#[test]
fn a_set_above_the_liu_layland_bound_misses_only_during_machine_stalls() {
    // a: T = 20 ms, 4 units (C = 8 ms); b: T = 40 ms, 10 units (C = 20 ms). U = 0.9 > 0.828.
    // Response of b: 18 units = 36 ms of its 40 (the computation is in analysis.rs, in units).
    let set = [spec("a", 20, 4), spec("b", 40, 10)];
    let analysis = analyse(&set).unwrap();
    assert!(analysis.utilisation > analysis.liu_layland_bound, "{analysis:?}");
    assert!(analysis.admitted);
    assert_eq!(analysis.handlers[1].response_time_ns, Some(36 * MS));

    let core = last_core();
    let mut sched = Scheduler::new(());
    for s in &set {
        // Each unit computes for 95% of its declared cost: the declared cost is a bound.
        let work = s.unit_cost_ns * 95 / 100;
        sched
            .register(s.clone(), move |_: &mut (), units: u64, _: &Context<'_>| {
                for _ in 0..units {
                    spin_until_ns(monotonic_ns() + work);
                }
                units
            })
            .expect("the analysis admits the set");
    }
    let watch_config = StallWatchConfig::on_core(core);
    let watch_period_ns = watch_config.period.as_nanos() as u64;
    let watch = StallWatch::start(watch_config).unwrap();
    let running = sched.spawn(ShellConfig { core: Some(core), ..ShellConfig::default() }).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let report = running.stop().unwrap();
    let stalls = watch.finish().unwrap();
    if !report.realtime {
        eprintln!(
            "skipped the run's assertions: SCHED_FIFO was not granted ({}); run as root",
            report.realtime_error.as_deref().unwrap_or("not asked")
        );
        return;
    }
    let released: u64 = report.counts.iter().map(|c| c.released).sum();
    // 3 s: 150 jobs of a and 75 of b.
    assert!(released >= 200, "{:?}", report.counts);
    // A miss is the shell's fault unless the stall watch saw the machine take the core for
    // longer than the job's slack in its window (interrupts and the hypervisor outrank every
    // real-time thread): such a miss is printed, and any other fails the test. The time taken
    // is every stall in the window together, not the longest: two stalls of 3 ms cost a job
    // 6 ms. The watch sleeps between wake-ups, so a stall it saw may have begun up to one of
    // its periods before it was due: each counts for its length plus that period.
    let slack = |handler: usize| {
        let a = &analysis.handlers[handler];
        set[handler].period_ns - a.response_time_ns.unwrap_or(0)
    };
    let (mut explained, mut unexplained) = (Vec::new(), Vec::new());
    for m in &report.missed {
        let (from, to) = (report.started_ns + m.release, report.started_ns + m.deadline);
        let seen: Vec<u64> = stalls.during(from, to).map(|s| s.length_ns()).collect();
        let taken: u64 = seen.iter().map(|l| l + watch_period_ns).sum();
        let line = format!(
            "{} job {} (stalls during it: {:?} us, up to {} us taken, slack {} us)",
            set[m.handler].name,
            m.job,
            seen.iter().map(|l| l / 1_000).collect::<Vec<_>>(),
            taken / 1_000,
            slack(m.handler) / 1_000
        );
        if taken >= slack(m.handler) { explained.push(line) } else { unexplained.push(line) }
    }
    assert!(unexplained.is_empty(), "misses no stall explains: {unexplained:?} (explained: {explained:?})");
    if !explained.is_empty() {
        eprintln!("misses during machine stalls longer than the job's slack: {explained:?}");
    }
    // Printed, not asserted: a stall of the machine may push b past the analysis's 36 ms (its
    // deadline is 40).
    let worst_b =
        report.finished.iter().filter(|f| f.handler == 1).map(|f| f.completion - f.release).max().unwrap();
    eprintln!(
        "{released} jobs, {} misses (all during stalls); b's worst response {:.2} ms (bound 36 ms); {} stalls seen, longest {} us",
        explained.len(),
        worst_b as f64 / 1e6,
        stalls.stalls.len(),
        stalls.worst_ns / 1_000
    );
}
