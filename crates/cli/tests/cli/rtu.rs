//! `kairos rtu` fails well: a handlers file that is not one (a device, a directory, too large)
//! or holds what the analysis cannot represent is one line naming the file, exit code 2, at
//! once; an experiment's bad flag is refused the same way before anything runs; and every
//! subcommand's help gives each flag's unit, range and default.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kairos_testkit::{scratch_dir, usage_error};

use crate::{KAIROS, kairos};

/// Asserts a usage error (exit code 2, exactly one stderr line, `kairos: error: ...`)
/// containing every one of `needles`.
fn assert_usage_error(out: &Output, needles: &[&str]) {
    let line = usage_error(out);
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} missing: {line}");
    }
}

#[test]
fn a_device_that_never_ends_is_refused_after_one_mebibyte() {
    // Under a 2 GB address-space limit, so that reading the whole device fails here instead of
    // taking the machine's memory.
    let started = Instant::now();
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 2000000 && exec \"$0\" rtu admit /dev/zero", KAIROS.path()])
        .output()
        .expect("sh runs");
    assert_usage_error(&out, &["/dev/zero", "is a device, expected a file"]);
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

#[test]
fn a_directory_or_a_file_too_large_is_refused_naming_it() {
    let dir = scratch_dir("cli-rtu-large");
    assert_usage_error(
        &kairos(&["rtu", "admit", dir.path().to_str().unwrap()]),
        &[dir.path().to_str().unwrap(), "is a directory"],
    );
    let large = dir.path().join("large.toml");
    std::fs::write(&large, "# a comment line of a handlers file\n".repeat(40_000)).unwrap();
    assert_usage_error(
        &kairos(&["rtu", "admit", large.to_str().unwrap()]),
        &[large.to_str().unwrap(), "1 MiB"],
    );
    let missing = dir.path().join("missing.toml");
    assert_usage_error(&kairos(&["rtu", "admit", missing.to_str().unwrap()]), &[missing.to_str().unwrap()]);
}

fn handlers_file(dir: &Path, text: &str) -> String {
    let path = dir.join("handlers.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn huge_periods_are_refused_when_the_file_is_read_not_admitted() {
    // U = 0.767 + 0.451 = 1.22: its busy-period sums passed 2^64 and wrapped into "admitted".
    let dir = scratch_dir("cli-rtu-huge");
    let file = handlers_file(
        dir.path(),
        "[[handler]]\nname = \"a\"\nperiod_us = 16000000000000000\nbatch = 1\niteration = 1\n\
         unit_cost_us = 12271179270000000\n\n[[handler]]\nname = \"b\"\nperiod_us = 14000000000000000\n\
         batch = 1\niteration = 1\nunit_cost_us = 6307666464000000\n",
    );
    let out = kairos(&["rtu", "admit", &file]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("admitted"), "{out:?}");
    assert_usage_error(&out, &[&file, "line 3", "handler 'a'", "period_us must be at most 100000000000"]);
}

#[test]
fn an_unreadable_handler_is_a_usage_error_and_an_overloaded_set_a_refusal_with_its_reason() {
    let dir = scratch_dir("cli-rtu-verdicts");
    let file = handlers_file(
        dir.path(),
        "[[handler]]\nname = \"a\"\nperiod_us = 10\nbatch = -3\niteration = 1\nunit_cost_us = 1\n",
    );
    assert_usage_error(&kairos(&["rtu", "admit", &file]), &[&file, "line 4", "handler 'a': batch must be"]);
    let file = handlers_file(
        dir.path(),
        "[[handler]]\nname = \"a\"\nperiod_us = 10\nbatch = 6\niteration = 1\nunit_cost_us = 1\n\n\
         [[handler]]\nname = \"b\"\nperiod_us = 10\nbatch = 6\niteration = 1\nunit_cost_us = 1\n",
    );
    let out = kairos(&["rtu", "admit", &file]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("unbounded: the handlers at its priority and above need more than the processor"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("refused"), "{stdout}");
}

#[test]
fn bad_experiment_flags_are_refused_before_anything_runs() {
    let dir = scratch_dir("cli-rtu-flags");
    let results = dir.path().to_str().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (&["deadlines", "--utilisation", "0.5,1.5"], &["(0, 1]", "1.5"]),
        (&["deadlines", "--seconds", "0.01"], &["between 0.1 and 3600", "0.01"]),
        (&["deadlines", "--unit-us", "0"], &["1-1000 us"]),
        (&["sched-deadline", "--utilisation", "nan"], &["(0, 1]"]),
        (&["switches", "--utilisation", "0.99"], &["0.99", "admit"]),
        (&["switches", "--work-us", "5000"], &["1-1000 us"]),
        (&["throughput", "--sizes", "64,70000"], &["1-65507 bytes", "70000"]),
        (&["throughput", "--seconds", "inf"], &["between 0.1 and 3600"]),
        (&["partition", "--seconds=-1"], &["between 0.1 and 3600"]),
    ];
    for (args, needles) in cases {
        let started = Instant::now();
        let mut all = vec!["rtu"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--quick", "--results", results]);
        assert_usage_error(&kairos(&all), needles);
        assert!(started.elapsed() < Duration::from_secs(2), "{args:?} took {:?}", started.elapsed());
    }
    let written: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(written.is_empty(), "a refused run wrote {written:?}");
}

#[test]
fn every_flag_of_every_rtu_subcommand_states_its_default() {
    for command in ["admit", "deadlines", "switches", "sched-deadline", "throughput", "partition"] {
        let out = kairos(&["rtu", command, "--help"]);
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        let options = help.split("Options:").nth(1).expect("an Options section");
        // Each flag's entry: from its `--name` line to the next one.
        let mut entries: Vec<String> = Vec::new();
        for line in options.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("--") || trimmed.starts_with("-h") {
                entries.push(String::new());
            }
            if let Some(entry) = entries.last_mut() {
                entry.push_str(trimmed);
                entry.push(' ');
            }
        }
        assert!(!entries.is_empty(), "{command}: {help}");
        for entry in entries.iter().filter(|e| !e.starts_with("-h")) {
            assert!(entry.contains("default"), "rtu {command}: no default in {entry:?}");
            let numeric = ["--seconds", "--utilisation", "--unit-us", "--work-us", "--sizes"];
            if numeric.iter().any(|flag| entry.starts_with(flag)) {
                // A range is written "(0, 1]" or "LOW-HIGH" between digits (every entry starts
                // with "--", so a dash alone says nothing).
                let range = entry.contains("(0, 1]")
                    || entry
                        .as_bytes()
                        .windows(3)
                        .any(|w| w[0].is_ascii_digit() && w[1] == b'-' && w[2].is_ascii_digit());
                let unit = ["seconds", "microseconds", "bytes", "fractions of a core"]
                    .iter()
                    .any(|u| entry.contains(u));
                assert!(range && unit, "rtu {command}: unit or range missing in {entry:?}");
            }
        }
    }
}
