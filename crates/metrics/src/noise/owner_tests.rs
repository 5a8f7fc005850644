//! The sampler owns its threads: dropping it joins them, and a thread that died is an error of
//! `Sampler::finish` and a note in the probe's report, never a silently missing core.

use super::*;

/// Whether a thread of this process is named `name`, within a second: the kernel may list a
/// task a moment before it takes its name, and a moment after it exits.
fn within_a_second(name: &str, listed: bool) -> bool {
    (0..100).any(|_| {
        let seen = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .any(|comm| comm.trim() == name);
        std::thread::sleep(Duration::from_millis(10));
        seen == listed
    })
}

/// One core no other test probes (pinning to an absent core fails, and the sampler runs
/// anyway), so the thread's name, at most 15 bytes in the kernel, is this test's alone.
fn lone_core(core: usize) -> NoiseConfig {
    NoiseConfig {
        cores: vec![core],
        window: Duration::from_millis(10),
        sample_for: Duration::from_millis(1),
        sample_every: Duration::from_millis(10),
        gap_floor_ns: 1_000,
    }
}

fn dead_sampler(config: &NoiseConfig) -> Sampler {
    let thread = StoppableThread::spawn("noise-sampler-x", |_: &AtomicBool| -> (CoreNoise, u64) {
        panic!("meter overflow")
    })
    .unwrap();
    Sampler { config: config.clone(), threads: vec![thread], started_ns: monotonic_ns(), steal_start: None }
}

#[test]
fn dropping_the_sampler_stops_and_joins_its_threads() {
    let sampler = Sampler::start(&lone_core(7)).unwrap();
    assert!(within_a_second("noise-sampler-7", true), "the sampler runs");
    drop(sampler);
    assert!(within_a_second("noise-sampler-7", false), "a sampler thread outlived its owner");
}

#[test]
fn finish_reports_the_cores_sampled() {
    let sampler = Sampler::start(&lone_core(8)).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let during = sampler.finish().unwrap();
    assert_eq!(during.cores.len(), 1);
    assert_eq!(during.error, None);
}

#[test]
fn a_sampler_thread_that_died_makes_finish_an_error() {
    let err = dead_sampler(&lone_core(9)).finish().unwrap_err();
    assert_eq!(err.to_string(), "thread noise-sampler-x died: meter overflow");
}

#[test]
fn the_probe_says_its_sampler_died_and_keeps_its_quiet_windows() {
    let config = lone_core(9);
    let probe = NoiseProbe {
        before: measure_window(&config),
        sampler: Some(Ok(dead_sampler(&config))),
        config,
        clock_read_ns: 0.0,
    };
    let report = probe.finish();
    assert_eq!(report.during.error.as_deref(), Some("thread noise-sampler-x died: meter overflow"));
    assert!(report.during.cores.is_empty());
    assert_eq!((report.before.len(), report.after.len()), (1, 1));
}
