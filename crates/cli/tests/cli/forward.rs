//! `kairos forward` refuses what it cannot run: one line saying what was wrong and the limit,
//! exit code 2, at once and before any thread starts or any directory is made.

use std::time::{Duration, Instant};

use kairos_testkit::{scratch_path, skip_if_root, stderr, usage_error};

use crate::kairos;

/// Flags that used to be accepted (and lose packets, panic a thread and hang, run with a
/// priority it never had, or print a 31-digit rate), with what the error must say now.
const REFUSED: &[(&[&str], &str)] = &[
    (&["--burst", "256"], "burst must be 1 to 64, got 256"),
    (&["--data-ring", "18446744073709551615"], "data ring must hold 1 to 16777216 entries"),
    (&["--priority", "200"], "0 (normal scheduling) to 99, got 200"),
    (&["--rate", "1e30"], "got 1e30"),
    (&["--cdr", "1.5"], "from 0 to 1, got 1.5"),
    (&["--cdr", "NaN"], "got NaN"),
    (&["--users", "0", "--ring-policy", "keep-latest"], "got 0"),
    (&["--trace", "/dev/zero"], "/dev/zero"),
    (&["--trace", "/tmp"], "/tmp: is a directory"),
    (&["--threading", "run-to-completion", "--core", "100000"], "core 100000 is not online"),
    (&["--core", "0"], "only the run-to-completion forwarder is pinned"),
    (&["--source-core", "100000"], "sender's core 100000 is not online"),
    (&["--threading", "run-to-completion", "--core", "0", "--source-core", "0"], "core 0 is the forwarder's"),
];

#[test]
fn forward_refuses_what_it_cannot_run_in_one_line_with_exit_code_2() {
    let results = scratch_path("results");
    for (flags, says) in REFUSED {
        let mut args = vec!["forward"];
        args.extend(*flags);
        args.extend(["--results", results.to_str().unwrap()]);
        let started = Instant::now();
        let out = kairos(&args);
        let error = usage_error(&out);
        assert!(error.contains(says), "{flags:?}: {error}");
        assert!(started.elapsed() < Duration::from_secs(5), "{flags:?} took {:?}", started.elapsed());
    }
    assert!(!results.exists(), "a refused run made its results directory");
}

/// As a normal user a SCHED_FIFO priority cannot take effect: refused, not recorded as applied.
#[test]
fn a_priority_that_cannot_take_effect_is_refused() {
    if skip_if_root("root may set SCHED_FIFO, so --priority takes effect") {
        return;
    }
    let out = kairos(&["forward", "--priority", "50", "--results", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("only root"));
}
