//! `kairos lane`: exit codes, one-line errors for bad files and flags (before any work), the
//! overflow that used to understate a bound, and flags whose help states unit, range and default.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use kairos_testkit::{one_line_error, scratch_dir, scratch_file, text};

use crate::kairos;

fn plan(topology: &Path, requests: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["lane", "plan", "--topology", topology.to_str().unwrap()];
    args.extend(["--requests", requests.to_str().unwrap()]);
    args.extend(extra);
    kairos(&args)
}

/// Hosts `a` and `b` on switch `s`, every link with `link` (bandwidth, queue, delays).
fn rack(link: &str) -> String {
    let mut t = String::new();
    for (name, kind) in [("a", "host"), ("b", "host"), ("s", "switch")] {
        t.push_str(&format!("[[node]]\nname = \"{name}\"\nkind = \"{kind}\"\n\n"));
    }
    for (from, to) in [("a", "s"), ("s", "b")] {
        t.push_str(&format!("[[link]]\nfrom = \"{from}\"\nto = \"{to}\"\n{link}\n"));
    }
    t
}

const LINK: &str = "bandwidth_bps = 1e9\nqueue_bytes = 10000\nmin_delay_ns = 1000\nmax_jitter_ns = 100\n";

fn request(name: &str, bytes: &str, period_ns: &str) -> String {
    format!(
        "[[request]]\nname = \"{name}\"\nsender = \"a\"\nreceivers = [\"b\"]\npacket_bytes = {bytes}\nperiod_ns = {period_ns}\n\n"
    )
}

const EXAMPLE_TOPOLOGY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/lane/leaf-spine.toml");
const EXAMPLE_REQUESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/lane/requests.toml");

#[test]
fn plan_exits_0_when_all_are_admitted_and_3_when_any_is_refused() {
    let out = plan(Path::new(EXAMPLE_TOPOLOGY), Path::new(EXAMPLE_REQUESTS), &[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(text(&out).0.contains("h0_0 -> leaf0 -> {"), "{}", text(&out).0);

    // The second packet does not fit the 10,000 B queues beside the first.
    let topology = scratch_file("refuse-topology.toml", &rack(LINK));
    let requests =
        scratch_file("refuse.toml", &(request("small", "6000", "1e6") + &request("big", "6000", "1e6")));
    for json in [false, true] {
        let out = plan(&topology, &requests, if json { &["--json"] } else { &[] });
        assert_eq!(out.status.code(), Some(3), "{:?}", text(&out));
        let (stdout, stderr) = text(&out);
        assert!(stderr.is_empty(), "{stderr}");
        if json {
            assert!(
                stdout.contains(r#""name":"big","admitted":false,"reason":"no room for 6000 B"#),
                "{stdout}"
            );
        } else {
            assert!(stdout.contains("big") && stdout.contains("refused: no room for 6000 B"), "{stdout}");
            assert!(stdout.contains("1 of 2 requests refused"), "{stdout}");
        }
    }
}

#[test]
fn nothing_admitted_is_not_validated() {
    // A packet larger than the queues: refused, and no validation of no tunnel is reported.
    let topology = scratch_file("novalidate-topology.toml", &rack(LINK));
    let requests = scratch_file("novalidate.toml", &request("huge", "20000", "1e6"));
    let out = plan(&topology, &requests, &["--validate", "10", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{:?}", text(&out));
    assert!(!text(&out).0.contains("validation"), "{}", text(&out).0);
}

#[test]
fn plan_help_states_the_exit_codes() {
    let (help, _) = text(&kairos(&["lane", "plan", "--help"]));
    assert!(
        help.contains("3 when any is refused") && help.contains("0 when every request is admitted"),
        "{help}"
    );
}

#[test]
fn an_endless_file_is_refused_at_once_in_one_line() {
    let requests = scratch_file("any.toml", &request("r", "64", "1e4"));
    for (topology, requests) in
        [(PathBuf::from("/dev/zero"), requests.to_path_buf()), (EXAMPLE_TOPOLOGY.into(), "/dev/zero".into())]
    {
        let started = Instant::now();
        let out = plan(&topology, &requests, &[]);
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(one_line_error(&out), "kairos: error: /dev/zero: is a device, expected a file");
    }
    let out = plan(Path::new("/nonexistent/t.toml"), &requests, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("/nonexistent/t.toml: No such file"));
}

/// Regression: a 3 MB packet on a 1 bit/s link takes 2.4e19 ps, past 2^64; the transmission time
/// was cast to 64 bits, keeping the remainder, and `lane plan` admitted the tunnel with a
/// minimum latency of 5.55e12 us instead of 2.4e13 us, about 4.3x too small.
#[test]
fn a_time_past_64_bit_picoseconds_is_refused_never_understated() {
    let slow = "bandwidth_bps = 1\nqueue_bytes = 4000000\nmin_delay_ns = 0\nmax_jitter_ns = 0\n";
    let topology = scratch_file("slow.toml", &rack(slow));
    let requests = scratch_file("big.toml", &request("big", "3000000", "1e9"));
    let out = plan(&topology, &requests, &["--json"]);
    let (stdout, _) = text(&out);
    assert!(!stdout.contains(r#""admitted":true"#), "admitted with a wrapped bound: {stdout}");
    assert_eq!(out.status.code(), Some(2));
    // The queue line of the first link, and the limit.
    let error = one_line_error(&out);
    assert!(error.contains("slow.toml: line 17: queue_bytes 4000000 takes 32000000 s"), "{error}");
    assert!(error.contains("18446744 s (about 213 days) that 64-bit picoseconds hold"), "{error}");

    // Each link's queue fits 64-bit picoseconds (2e6 B at 1 bit/s: 1.6e19 ps), the two hops
    // together do not: refused at admission, saying so.
    let slow = "bandwidth_bps = 1\nqueue_bytes = 2000000\nmin_delay_ns = 0\nmax_jitter_ns = 0\n";
    let topology = scratch_file("slow2.toml", &rack(slow));
    let requests = scratch_file("big2.toml", &request("big", "2000000", "1e9"));
    let out = plan(&topology, &requests, &[]);
    assert_eq!(out.status.code(), Some(3), "{:?}", text(&out));
    let (stdout, _) = text(&out);
    assert!(stdout.contains("big") && stdout.contains("refused: "), "{stdout}");
    assert!(stdout.contains("overflows 64-bit picoseconds"), "{stdout}");
}

#[test]
fn periods_delays_and_sizes_past_their_limits_are_refused_naming_line_and_limit() {
    let topology = scratch_file("ok.toml", &rack(LINK));
    let cases = [
        (request("r", "64", "1e17"), "line 6: period_ns must be at most 3600000000000 (1 hour"),
        (request("r", "2e12", "1e4"), "line 5: packet_bytes must be at most 1099511627776 (1 TiB)"),
    ];
    for (requests, expected) in cases {
        let out = plan(&topology, &scratch_file("limits.toml", &requests), &[]);
        assert_eq!(out.status.code(), Some(2));
        let error = one_line_error(&out);
        assert!(error.contains(expected), "{error}");
    }
    let requests = scratch_file("one.toml", &request("r", "64", "1e4"));
    let cases = [
        (
            "min_delay_ns = 1000\n",
            "min_delay_ns = 1e17\n",
            "line 18: min_delay_ns must be at most 3600000000000 (1 hour",
        ),
        (
            "max_jitter_ns = 100\n",
            "max_jitter_ns = 4e12\n",
            "line 19: max_jitter_ns must be at most 3600000000000",
        ),
        (
            "queue_bytes = 10000\n",
            "queue_bytes = 1e13\n",
            "line 17: queue_bytes must be at most 1099511627776 (1 TiB)",
        ),
        (
            "bandwidth_bps = 1e9\n",
            "bandwidth_bps = 1e30\n",
            "line 16: bandwidth_bps must be at most 1000000000000000",
        ),
    ];
    for (from, to, expected) in cases {
        let out = plan(&scratch_file("limits-t.toml", &rack(&LINK.replace(from, to))), &requests, &[]);
        assert_eq!(out.status.code(), Some(2));
        let error = one_line_error(&out);
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn nothing_to_plan_is_an_error_not_an_empty_table() {
    let topology = scratch_file("t.toml", &rack(LINK));
    let out = plan(&topology, &scratch_file("empty.toml", "# nothing\n"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).ends_with("empty.toml: no [[request]] tables: nothing to plan"));

    let switches = "[[node]]\nname = \"s\"\nkind = \"switch\"\n";
    let out = plan(
        &scratch_file("switches.toml", switches),
        &scratch_file("r.toml", &request("r", "64", "1e4")),
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("switches.toml: no node has kind = \"host\""));
    let out = plan(&scratch_file("blank.toml", ""), &scratch_file("r.toml", &request("r", "64", "1e4")), &[]);
    assert!(one_line_error(&out).contains("blank.toml: no [[node]] tables"));

    for flags in [&["--validate", "0"][..], &["--validate", "2000000"], &["--max-releases", "0"]] {
        let out = plan(&topology, &scratch_file("r.toml", &request("r", "64", "1e4")), flags);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert!(one_line_error(&out).contains(flags[0]), "{flags:?}");
    }
}

#[test]
fn tightness_runs_on_the_two_host_fat_tree_and_refuses_bad_flags_before_any_work() {
    let scratch = scratch_dir("cli-lane-results");
    let results = scratch.path();
    let r = results.to_str().unwrap();
    // k = 2 used to panic ("cannot sample empty range") drawing multicast receivers.
    let out = kairos(&["lane", "tightness", "--quick", "--k", "2", "--json", "--results", r]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(text(&out).0.contains(r#""k":2"#));

    for (flags, expected) in [
        (&["--k", "3"][..], "--k must be an even fat-tree arity from 2 to 32"),
        (&["--k", "64"], "--k must be an even fat-tree arity from 2 to 32"),
        (&["--requests", "0"], "--requests must be from 1 to 10000"),
        (&["--requests", "9000"], "would take about"),
    ] {
        let fresh = results.join("refused");
        let mut args = vec!["lane", "tightness", "--results", fresh.to_str().unwrap()];
        args.extend(flags);
        let started = Instant::now();
        let out = kairos(&args);
        assert!(started.elapsed() < Duration::from_secs(2), "{flags:?}: took {:?}", started.elapsed());
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let error = one_line_error(&out);
        assert!(error.contains(expected), "{flags:?}: {error}");
        assert!(!fresh.exists(), "{flags:?}: a results directory was made before the flags were checked");
    }
}

#[test]
fn generate_refuses_bad_flags_and_what_it_writes_lane_plan_reads() {
    for (flags, expected) in [
        (&["fat-tree", "--k", "3"][..], "--k must be an even fat-tree arity from 2 to 14"),
        (&["fat-tree", "--k", "16"], "from 2 to 14"),
        (&["rack", "--hosts", "1"], "--hosts must be from 2 to 2058"),
        (&["leaf-spine", "--leaves", "0"], "--leaves must be from 1 to 2058"),
        (&["leaf-spine", "--spines", "0"], "--spines must be from 1 to 2058"),
        (&["leaf-spine", "--leaves", "1", "--hosts", "1"], "needs two hosts at least"),
        (
            &["leaf-spine", "--leaves", "100", "--spines", "100"],
            "that topology has 20800 links; at most 4116",
        ),
        (&["rack", "--bandwidth-bps", "0"], "--bandwidth-bps must be from 1 to 1000000000000000"),
        (&["rack", "--queue-bytes", "2000000000000"], "--queue-bytes must be at most 1099511627776"),
        (&["rack", "--bandwidth-bps", "1", "--queue-bytes", "4000000"], "more than the 18446744 s"),
        (&["rack", "--min-delay-ns=-1"], "--min-delay-ns must be from 0 to 3600000000000 ns"),
        (&["rack", "--max-jitter-ns", "4e12"], "--max-jitter-ns must be from 0 to 3600000000000 ns"),
        (&["rack", "--max-jitter-ns", "NaN"], "--max-jitter-ns must be from 0"),
    ] {
        let mut args = vec!["lane", "generate"];
        args.extend(flags);
        let out = kairos(&args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert!(text(&out).0.is_empty(), "{flags:?}: wrote a topology");
        let error = one_line_error(&out);
        assert!(error.contains(expected), "{flags:?}: {error}");
    }
    // The largest of each shape, with the longest numbers, fits the 1 MiB lane plan reads.
    let long = [
        "--bandwidth-bps",
        "999999999999999",
        "--queue-bytes",
        "1099511627776",
        "--min-delay-ns",
        "3599999999999.999",
        "--max-jitter-ns",
        "3599999999999.999",
    ];
    let requests = scratch_file(
        "gen-requests.toml",
        "[[request]]\nname = \"r\"\nsender = \"h0_0_0\"\nreceivers = [\"h0_0_1\"]\npacket_bytes = 64\nperiod_ns = 1e4\n",
    );
    for shape in [
        &["fat-tree", "--k", "14"][..],
        &["rack", "--hosts", "2058"],
        &["leaf-spine", "--leaves", "1", "--spines", "1", "--hosts", "2057"],
        &["leaf-spine", "--leaves", "2", "--spines", "1028", "--hosts", "1"],
        &["leaf-spine", "--leaves", "1029", "--spines", "1", "--hosts", "1"],
    ] {
        let mut args = vec!["lane", "generate"];
        args.extend(shape);
        args.extend(long);
        let out = kairos(&args);
        assert_eq!(out.status.code(), Some(0), "{shape:?}: {:?}", text(&out).1);
        assert!(out.stdout.len() < 1 << 20, "{shape:?}: {} bytes", out.stdout.len());
        if shape[0] == "fat-tree" {
            let topology = scratch_file("gen.toml", &text(&out).0);
            let out = plan(&topology, &requests, &["--json"]);
            assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
        }
    }
}

#[test]
fn every_lane_flag_says_what_it_is() {
    for command in ["plan", "generate", "tightness"] {
        let (help, _) = text(&kairos(&["lane", command, "--help"]));
        let options = help.split("Options:").nth(1).unwrap_or_else(|| panic!("{command}: {help}"));
        // `--help` puts each flag on a line of its own with its help on the lines below, and a
        // blank line between flags: a flag without help is a block of one line.
        for block in options.split("\n\n").filter(|b| !b.trim().is_empty()) {
            // Past the flag's own line, something besides clap's `[default: ...]`.
            let described = block.lines().skip(1).any(|l| !l.trim().is_empty() && !l.trim().starts_with('['));
            assert!(described, "lane {command}: a flag without help: {block:?}");
        }
    }
    let (help, _) = text(&kairos(&["lane", "generate", "--help"]));
    for stated in
        ["bits per second, 1-1e15", "bytes, 0-2^40", "nanoseconds, 0-3.6e12", "[default: 524288]", "2-14"]
    {
        assert!(help.contains(stated), "generate --help lacks {stated:?}: {help}");
    }
    let (help, _) = text(&kairos(&["lane", "tightness", "--help"]));
    for stated in ["even, 2-32", "1-10000", "[default: 8, or 4 with --quick]", "about 25 s here"] {
        assert!(help.contains(stated), "tightness --help lacks {stated:?}: {help}");
    }
}

#[test]
fn the_packet_transport_without_an_interface_is_a_one_line_usage_error() {
    let node = |extra: &[&str]| {
        let mut args = vec![
            "lane",
            "node",
            "--controller",
            "127.0.0.1:1",
            "--host",
            "h0",
            "--secret-file",
            "/nonexistent/secret",
            "--lane",
            "127.0.0.1:0",
            "--probe-ms",
            "0",
        ];
        args.extend_from_slice(extra);
        kairos(&args)
    };
    let out = node(&["--transport", "packet"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("--transport packet needs --interface NAME"));
    let out = node(&["--interface", "eth0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("--interface is for --transport packet"));
    let out = kairos(&["lane", "latency", "--transport", "carrier-pigeon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_error(&out).contains("no transport \"carrier-pigeon\": udp or packet"));
}
