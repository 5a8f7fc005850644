//! `kairos lane node` with the lane's examples, run as docs/lane.md runs them (its section
//! "`kairos lane node`"): a controller, two nodes started together on loopback, the `monitor`
//! example on h1 and the `sensor` example on h0 at its 1,000 us grant. The sensor sends one
//! reading a period, so it must never hear `BW_EXCEEDED`, whatever its phase to its node's
//! releases and however late either thread wakes on a busy machine; the sending node says the
//! jitter it promises once for the tunnel, the receiving node not at all.
//!
//! The examples are another package's: a test binary is told the path of its own package's
//! binaries only, so they are built here, into the target directory and profile of the
//! `kairos` under test ([`example`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kairos_testkit::net::connect;
use kairos_testkit::{Guarded, free_tcp_port, free_udp_port, scratch_dir, wait_until};

use crate::KAIROS;

/// Readings the sensor sends: two seconds at its grant, twenty report windows of its node.
/// Before the node's policer counted time rather than releases, 2,000 were enough for the
/// sensor to hear `BW_EXCEEDED` in five runs of five here (500: three of five).
const READINGS: u32 = 2_000;
/// How long a program may take to come up or to end on a loaded machine (the nodes probe the
/// core in turn first, behind any other probe of it).
const WAIT: Duration = Duration::from_secs(60);

/// The `kairos-lane` example `name`: from `$KAIROS_EXAMPLES` when it names a directory (scripts/test
/// sets it to the examples its own `cargo test --workspace` build made before any test ran), else
/// built once per test process the way the `kairos` under test was (its target directory and
/// profile) with `cargo build --examples -p kairos-lane`. That build resolves the dependencies'
/// features for one package, not the workspace's tests, so after a workspace build it compiles
/// part of the tree again (about 90 s on two cores).
fn example(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("KAIROS_EXAMPLES") {
        let path = Path::new(&dir).join(name);
        assert!(path.is_file(), "KAIROS_EXAMPLES is set but holds no {name}: {}", path.display());
        return path;
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let profile_dir = Path::new(KAIROS.path()).parent().expect("kairos lies in a profile's directory");
        let target = profile_dir.parent().expect("a profile's directory lies in the target directory");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        cargo
            .args(["build", "--quiet", "--locked", "--examples", "-p", "kairos-lane", "--target-dir"])
            .arg(target);
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cargo.arg("--release");
            }
            Some(other) => {
                cargo.args(["--profile", other]);
            }
            None => return Err(format!("no profile in {}", profile_dir.display())),
        }
        let out = cargo.output().map_err(|e| format!("{cargo:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{cargo:?}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(profile_dir.join("examples"))
    });
    match dir {
        Ok(dir) => dir.join(name),
        Err(e) => panic!("the lane's examples did not build: {e}"),
    }
}

/// `program ARGS`, its standard output in `DIR/NAME.out` and its standard error in
/// `DIR/NAME.err`, killed when dropped.
fn start(program: &Path, args: &[&str], dir: &Path, name: &str) -> Guarded {
    let file = |ext: &str| std::fs::File::create(dir.join(format!("{name}.{ext}"))).unwrap();
    Guarded::spawn(
        Command::new(program)
            .args(args)
            .current_dir(dir)
            .env("CI", "1")
            .stdin(Stdio::null())
            .stdout(file("out"))
            .stderr(file("err")),
    )
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

#[test]
fn the_sensor_at_its_grant_beside_the_monitor_never_hears_it_exceeded() {
    let (sensor, monitor) = (example("sensor"), example("monitor"));
    let scratch = scratch_dir("lane-node");
    let dir = scratch.path();
    std::fs::write(dir.join("key"), b"the lane node test's 32-byte key").unwrap();
    let rack = crate::kairos(&["lane", "generate", "rack", "--hosts", "3"]);
    assert!(rack.status.success(), "kairos lane generate rack failed");
    std::fs::write(dir.join("rack.toml"), &rack.stdout).unwrap();
    let (controller, metrics) =
        (format!("127.0.0.1:{}", free_tcp_port()), format!("127.0.0.1:{}", free_tcp_port()));
    let lanes = [format!("127.0.0.1:{}", free_udp_port()), format!("127.0.0.1:{}", free_udp_port())];

    let controller_args = ["lane", "controller", "--topology", "rack.toml", "--listen", &controller];
    let controller_args =
        [&controller_args[..], &["--state", "st", "--secret-file", "key", "--metrics", &metrics]];
    let _controller = start(Path::new(KAIROS.path()), &controller_args.concat(), dir, "controller");
    connect(metrics.parse().unwrap(), WAIT);
    // Both nodes at once, as the docs start them (`&` each).
    let _nodes: Vec<Guarded> = [("h0", "n0", 0, "h1", 1), ("h1", "n1", 1, "h0", 0)]
        .map(|(host, node_dir, lane, peer, peer_lane)| {
            let peer = format!("{peer}={}", lanes[peer_lane]);
            let args = ["lane", "node", "--controller", &controller, "--host", host, "--secret-file", "key"];
            let args = [&args[..], &["--dir", node_dir, "--lane", &lanes[lane], "--peer", &peer]].concat();
            // SIGTERM, so that each removes its socket and its bridges in /dev/shm.
            start(Path::new(KAIROS.path()), &args, dir, node_dir)
                .stopped_with(libc::SIGTERM, Duration::from_secs(5))
        })
        .into_iter()
        .collect();
    for node in ["n0", "n1"] {
        let up = wait_until(WAIT, Duration::from_millis(20), || {
            read(dir, &format!("{node}.err")).contains("lane node for")
        });
        assert!(up, "node {node} did not start: {}", read(dir, &format!("{node}.err")));
    }
    let _monitor = start(&monitor, &["n1", "sensor"], dir, "monitor");
    let listening =
        wait_until(WAIT, Duration::from_millis(20), || read(dir, "monitor.out").contains("listening to"));
    assert!(listening, "the monitor did not start: {}", read(dir, "monitor.err"));

    let readings = READINGS.to_string();
    let mut sensor = start(&sensor, &["n0", "h1", "1000", &readings], dir, "sensor");
    let ended = wait_until(WAIT, Duration::from_millis(20), || matches!(sensor.try_wait(), Ok(Some(_))));
    assert!(ended, "the sensor did not end within {WAIT:?}: {}", read(dir, "sensor.out"));
    let (said, errors) = (read(dir, "sensor.out"), read(dir, "sensor.err"));
    let exceeded: Vec<&str> =
        said.lines().filter(|l| l.contains("BW_EXCEEDED") || l.contains("ended by")).collect();
    assert!(exceeded.is_empty(), "the sensor at its grant was told it exceeded it: {exceeded:?}");
    assert!(sensor.try_wait().unwrap().is_some_and(|s| s.success()), "the sensor failed: {said}{errors}");
    assert!(said.contains(&format!("sent {READINGS} readings")), "the sensor stopped short: {said}{errors}");
    let arrived = || read(dir, "monitor.out").lines().filter(|l| l.starts_with("reading ")).count();
    let half =
        wait_until(Duration::from_secs(5), Duration::from_millis(20), || arrived() >= READINGS as usize / 2);
    assert!(half, "only {} of {READINGS} readings reached the monitor", arrived());

    let jitter_lines = |node: &str| {
        read(dir, &format!("{node}.err")).matches("tunnel sensor: the controller's jitter bound").count()
    };
    // h0's node told the controller its host's delay before the sensor asked, so the grant
    // holds it and the node has nothing to widen, and nothing to say of the sensor's promise.
    let n0 = read(dir, "n0.err");
    assert!(n0.contains("the controller's bounds hold this host's delay: its core"), "{n0}");
    assert_eq!(jitter_lines("n0"), 0, "h0's node promises the controller's grant: {n0}");
    assert!(!n0.contains("refused"), "{n0}");
    assert_eq!(jitter_lines("n1"), 0, "h1's node sends no tunnel: {}", read(dir, "n1.err"));
}
