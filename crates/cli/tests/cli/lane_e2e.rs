//! The express lane end to end, as a user runs it (release, root; `scripts/test` runs it):
//! `kairos lane testbed --hold` makes three hosts on a bridge and writes their topology; a
//! controller runs on h0, a node on every host (`ip netns exec`); an application on h0 gets a
//! multicast tunnel to h1 and h2, whose applications listen to it, and its messages arrive
//! within the bounds h0's node promised the sensor. Strangers (no secret, garbage, a cut frame) and a node acting for
//! another host's tunnel are refused while the lane goes on; the controller is killed with
//! SIGKILL and started again from its journal, with the same tunnels, and the nodes reconnect.
//! Everything is removed at the end.
//!
//! The applications run in this process: a node's socket is a path and its bridges are files,
//! which no namespace hides.
//!
//! # The bound, asserted
//!
//! Each node's lane loop runs as a node is meant to: pinned to the lane core (the last one) at
//! `SCHED_FIFO`. Each node measures that core when it starts (`kairos lane node`'s probe), so
//! the nodes are started one after another (the three hosts share the core here, and probes at
//! once would measure each other), the receivers first: the sender's node times its send calls
//! to its peers when it starts, and those must be deliveries to running nodes. The sensor's tunnel carries the bound h0's node promised
//! (the controller's, which holds the core's and the fan-out's jitter the node reported; the
//! node's log line is printed). Every message must arrive within it, none before its minimum, and one after its
//! maximum only while a stall watch (`SCHED_FIFO` 99, one on every core the messages cross,
//! waking every 250 us) saw its core taken from every thread: time no figure measured beforehand
//! holds; up to one in a hundred late with no
//! stall seen is let pass and printed ([`UNEXPLAINED_LATE`] says why). A message may be lost
//! only while a stall was seen (a stalled release drops the oldest it holds, by design), up to
//! one in a hundred otherwise ([`UNEXPLAINED_LOST`]). The figures are printed: per
//! receiver the latencies, how many arrived within, before and after the bound, and how many
//! of those after it met a stall.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kairos_lane::node::app::{Delivery, LaneApp, Tunnel};
use kairos_lane::service::wire::TunnelSpec;
use kairos_metrics::stall::{StallReport, StallWatch, StallWatchConfig};
use kairos_sys::child::OwnedChild;
use kairos_sys::clock::{monotonic_ns, realtime_ns};
use kairos_testkit::host::{namespaces, own_groups_lock};
use kairos_testkit::{scratch_dir, skip_unless_root, wait_until};

/// The `kairos` binary, as `ip netns exec` runs it.
const KAIROS: &str = crate::KAIROS.path();
const WAIT: Duration = Duration::from_secs(10);
/// The lane core every node's lane loop is pinned to, at `SCHED_FIFO` [`LANE_FIFO`], as a
/// node is meant to run (a core of its own, real-time): the last core, the doctor's default.
fn lane_core() -> usize {
    kairos_sys::proc::last_core()
}
/// Messages of a thousand that may arrive after the promised maximum with no stall the watch
/// saw. The node's promise rests on 300 ms of its core measured at start, a sample: on this
/// shared VM a later gap can exceed it (one run of ten here: 5 of h2's 1000, at most 117 us
/// against 88.7 us promised), and a watch sees a stall shorter than its period only if
/// it covers a wake-up. One in a hundred is far below what the bound missed before the node
/// widened it (52 and 556 of 1000 late, 316 early) and what the core's share alone catches
/// (186 and 7 late without it); none may arrive early.
const UNEXPLAINED_LATE: usize = 10;
/// Messages of a thousand that may be lost with no stall the watch saw while they lived: as
/// for [`UNEXPLAINED_LATE`], a watch sees a stall shorter than its period only if it covers a
/// wake-up. A loss the watch explains is the lane's designed answer to a stalled core (a
/// release past, the freshest message kept); one with none seen is a fault of the lane's.
const UNEXPLAINED_LOST: usize = 10;
/// How often each stall watch wakes. A stall is seen when it covers a wake-up by more than the
/// watch's 50 us threshold, so at 1 ms one of 150 us (enough to make a message late) was seen
/// one time in ten; at 250 us, two times in five, and every stall of 300 us. Denser costs more
/// than it sees: at 50 us the watches' own wake-ups doubled the messages' median latency here.
const WATCH_PERIOD: Duration = Duration::from_micros(250);
/// The lane loops' priority: below the stall watch's 99.
const LANE_FIFO: &str = "50";

fn host_ip(i: usize) -> String {
    format!("10.212.0.{}", i + 1)
}

/// Starts `kairos ARGS` in namespace `ns`, its standard error in `logs/NAME.log` (kept when the
/// test fails, for the reader).
fn in_ns(ns: &str, args: &[&str], name: &str, logs: &Path) -> OwnedChild {
    let mut c = Command::new("ip");
    let log = std::fs::File::create(logs.join(format!("{}.log", name.replace([' ', ','], "-")))).unwrap();
    c.args(["netns", "exec", ns, KAIROS]).args(args).env("CI", "1").stdout(Stdio::null()).stderr(log);
    OwnedChild::spawn_named(&mut c, name).unwrap()
}

/// Runs `kairos ARGS` in namespace `ns` to its end.
fn kairos_in(ns: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip").args(["netns", "exec", ns, KAIROS]).args(args).env("CI", "1").output().unwrap()
}

/// Runs `f` with the calling thread's network namespace set to `ns`, on a thread of its own.
fn within<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        kairos_sys::netns::enter_network_namespace(&file).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// The controller's tunnel lines, read from its metrics page inside h0.
fn tunnel_lines(ns: &str, metrics: SocketAddr) -> Vec<String> {
    within(ns, move || {
        let mut s = kairos_testkit::net::connect(metrics, WAIT);
        s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut page = String::new();
        s.read_to_string(&mut page).unwrap();
        let mut lines: Vec<String> =
            page.lines().filter(|l| l.starts_with("kairos_lane_tunnel_")).map(String::from).collect();
        lines.sort();
        lines
    })
}

fn connect(dir: &Path, app: &str) -> LaneApp {
    let deadline = Instant::now() + WAIT;
    loop {
        match LaneApp::connect(dir, app, WAIT) {
            Ok(a) => return a,
            Err(e) => assert!(Instant::now() < deadline, "{app}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What [`exchange`] sent and what arrived.
struct Exchanged {
    /// Per message: when it was sent (wall clock, ns) and whether the outbox took it.
    sent: Vec<(u64, bool)>,
    /// Per monitor: the number of each message that arrived, and its delivery.
    got: Vec<Vec<(u32, Delivery)>>,
}

/// Sends `count` messages, one a period, and collects what `monitors` receive meanwhile. It
/// paces itself as a periodic application does: after a stall of its own thread longer than a
/// period it sends at once and keeps its period from then on, rather than sending the missed
/// messages back to back (a burst the lane keeps a packet and one carried of, dropping the
/// oldest as excess by design; CI lost 57 of 1000 so after stalls of up to 40 ms).
fn exchange(tunnel: &mut Tunnel, monitors: &mut [LaneApp], count: u32) -> Exchanged {
    let period = Duration::from_nanos(tunnel.grant.period_ps.div_ceil(1_000));
    let mut got = vec![Vec::new(); monitors.len()];
    let mut sent = Vec::with_capacity(count as usize);
    let mut buf = [0u8; 256];
    let mut drain = |monitors: &mut [LaneApp], got: &mut Vec<Vec<(u32, Delivery)>>| {
        for (m, g) in monitors.iter_mut().zip(got.iter_mut()) {
            while let Some(d) = m.recv(&mut buf).unwrap() {
                let text = String::from_utf8_lossy(&buf[..d.len]);
                let i = text.strip_prefix("reading ").and_then(|n| n.parse().ok()).expect("a reading");
                g.push((i, d));
            }
        }
    };
    let mut next = Instant::now();
    for i in 0..count {
        let now = Instant::now();
        if now >= next + period {
            next = now;
        }
        let at = realtime_ns();
        sent.push((at, tunnel.send(format!("reading {i}").as_bytes(), at).is_ok()));
        next += period;
        while Instant::now() < next {
            drain(monitors, &mut got);
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let end = Instant::now() + Duration::from_millis(100);
    while Instant::now() < end {
        drain(monitors, &mut got);
    }
    Exchanged { sent, got }
}

fn request(sensor: &mut LaneApp, spec: &TunnelSpec) -> Tunnel {
    let deadline = Instant::now() + WAIT;
    loop {
        match sensor.request(spec.clone(), WAIT) {
            Ok(t) => return t,
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying the request: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
#[ignore = "release and root: scripts/test runs it"]
fn the_lane_end_to_end_on_the_testbed() {
    if skip_unless_root("the lane testbed needs root") {
        return;
    }
    // Its children are `OwnedChild`ren, in process groups of their own.
    let _alone = own_groups_lock();
    // The controller's journal, the key and the topology, removed when the test ends.
    let scratch = scratch_dir("lane-e2e");
    let dir = scratch.path().to_path_buf();
    let path = |name: &str| -> PathBuf { dir.join(name) };
    std::fs::write(path("key"), b"an end-to-end secret of 32 bytes").unwrap();

    // The network, held up by its command.
    let mut testbed = crate::KAIROS.command();
    testbed
        .args(["lane", "testbed", "--hosts", "3", "--hold", "--write-topology"])
        .arg(path("topo.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut testbed = OwnedChild::spawn_named(&mut testbed, "kairos lane testbed").unwrap();
    let mut lines = BufReader::new(testbed.take_stdout().unwrap()).lines();
    let held = lines.by_ref().map_while(Result::ok).any(|l| l.starts_with("holding the testbed"));
    assert!(held, "the testbed came up and holds");
    let ns = |i: usize| format!("kairos-{}-h{i}", testbed.id());

    let (controller_addr, metrics): (SocketAddr, SocketAddr) =
        (format!("{}:7400", host_ip(0)).parse().unwrap(), format!("{}:7401", host_ip(0)).parse().unwrap());
    let state = path("state");
    let controller_args = [
        "lane",
        "controller",
        "--topology",
        path("topo.toml").to_str().unwrap(),
        "--listen",
        &controller_addr.to_string(),
        "--metrics",
        &metrics.to_string(),
        "--state",
        state.to_str().unwrap(),
        "--secret-file",
        path("key").to_str().unwrap(),
    ]
    .map(String::from);
    let args: Vec<&str> = controller_args.iter().map(String::as_str).collect();
    let mut controller = Some(in_ns(&ns(0), &args, "controller", &dir));
    let key = path("key");
    let peers: Vec<String> = (0..3).map(|i| format!("h{i}={}:7500", host_ip(i))).collect();
    let node_dirs: Vec<PathBuf> = (0..3).map(|i| path(&format!("node-h{i}"))).collect();
    let _nodes: Vec<OwnedChild> = (0..3)
        .rev()
        .map(|i| {
            let mut args = vec![
                "lane".to_string(),
                "node".into(),
                "--controller".into(),
                controller_addr.to_string(),
                "--host".into(),
                format!("h{i}"),
                "--secret-file".into(),
                key.display().to_string(),
                "--dir".into(),
                node_dirs[i].display().to_string(),
                "--lane".into(),
                format!("{}:7500", host_ip(i)),
                // Use is reported every 10 s, so no report falls in this test: one window with
                // the sensor idle (while strangers knock) would have the controller re-plan its
                // tunnel at the period it used (BW_UNUSED), which this test does not follow.
                "--report-ms".into(),
                "10000".into(),
                "--core".into(),
                lane_core().to_string(),
                "--fifo".into(),
                LANE_FIFO.into(),
            ];
            for p in &peers {
                args.extend(["--peer".into(), p.clone()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let node = in_ns(&ns(i), &args, &format!("node h{i}"), &dir);
            // One after another: each node first measures the lane core (spinning at its
            // priority), and three hosts share that core here, so probes at once would measure
            // each other rather than the core. (A host of its own has a core of its own.)
            // The receivers first (the module docs say why): started after them, h0's node
            // timed 13 us a send call against 23-75 us, and CI saw 21 of h2's 1000 late.
            let log = dir.join(format!("node-h{i}.log"));
            let started = wait_until(WAIT, Duration::from_millis(10), || {
                std::fs::read_to_string(&log).unwrap_or_default().contains("lane node for")
            });
            assert!(started, "node h{i} did not start: {log:?}");
            node
        })
        .collect();

    // The applications: a sensor on h0, a monitor on h1 and on h2.
    let mut monitors = vec![connect(&node_dirs[1], "monitor"), connect(&node_dirs[2], "monitor")];
    for m in &mut monitors {
        m.listen("sensor").unwrap();
    }
    let mut sensor = connect(&node_dirs[0], "sensor");
    let spec = TunnelSpec {
        name: "sensor".into(),
        receivers: vec!["h1".into(), "h2".into()],
        packet_bytes: 128,
        period_ps: 1_000_000_000,
        sublane: 0,
    };
    let mut tunnel = request(&mut sensor, &spec);
    while realtime_ns() < tunnel.send_from_ns {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The bound the application was promised: the controller's, which holds what h0's node
    // measured of its core and its fan-out (its log says what).
    let (min, max) = (
        tunnel.grant.min_latency_ps / 1_000,
        (tunnel.grant.min_latency_ps + tunnel.grant.max_jitter_ps) / 1_000,
    );
    // A stall watch on every core the messages cross (the lane core, and the sensor's and the
    // kernel's work elsewhere): time even a SCHED_FIFO 99 thread did not get there is the
    // machine's (the hypervisor, interrupts), which no bound measured beforehand holds.
    let watches: Vec<StallWatch> = (0..kairos_sys::proc::online_cores())
        .map(|core| {
            StallWatch::start(StallWatchConfig { period: WATCH_PERIOD, ..StallWatchConfig::on_core(core) })
                .unwrap()
        })
        .collect();
    // Lane stamps are CLOCK_REALTIME, the watch's CLOCK_MONOTONIC: one offset, read once.
    let realtime_ahead = realtime_ns() as i128 - monotonic_ns() as i128;
    let Exchanged { sent, got } = exchange(&mut tunnel, &mut monitors, 1_000);
    let watched: Vec<StallReport> = watches.into_iter().map(|w| w.finish().unwrap()).collect();
    for line in std::fs::read_to_string(dir.join("node-h0.log")).unwrap().lines() {
        eprintln!("node h0: {line}");
    }
    for stalls in &watched {
        eprintln!(
            "stall watch on cpu{} (SCHED_FIFO 99: {}): {} stalls over 50 us in {} wake-ups, the worst {} ns",
            stalls.core,
            stalls.realtime,
            stalls.stalls.len(),
            stalls.wakeups,
            stalls.worst_ns
        );
    }
    let monotonic = |realtime: u64| (realtime as i128 - realtime_ahead).max(0) as u64;
    // Whether a watch saw a stall between two wall-clock times.
    let stalled = |from: u64, to: u64| {
        let (from, to) = (monotonic(from), monotonic(to));
        watched.iter().any(|stalls| stalls.during(from, to).next().is_some())
    };
    for (h, deliveries) in got.iter().enumerate() {
        let mut latencies: Vec<u64> = deliveries.iter().map(|(_, d)| d.received_ns - d.sent_ns).collect();
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
        let early = latencies.iter().filter(|&&l| l < min).count();
        let late: Vec<&Delivery> =
            deliveries.iter().map(|(_, d)| d).filter(|d| d.received_ns - d.sent_ns > max).collect();
        let explained = late.iter().filter(|d| stalled(d.sent_ns, d.received_ns)).count();
        // A message that did not arrive was dropped while it waited (at the sender as excess
        // behind a stalled release, or in an outbox or inbox its reader left full): while it
        // lived, a period before its send to its latest promised arrival and a period on.
        let period_ns = tunnel.grant.period_ps.div_ceil(1_000);
        let mut arrived = vec![false; sent.len()];
        for (i, _) in deliveries {
            arrived[*i as usize] = true;
        }
        let lost: Vec<usize> = (0..sent.len()).filter(|&i| !arrived[i]).collect();
        let refused = lost.iter().filter(|&&i| !sent[i].1).count();
        let lost_explained = lost
            .iter()
            .filter(|&&i| stalled(sent[i].0.saturating_sub(period_ns), sent[i].0 + max + period_ns))
            .count();
        eprintln!(
            "h{}: {} of 1000 lost ({refused} refused by the outbox, {lost_explained} while a stall was seen, inbox refused {})",
            h + 1,
            lost.len(),
            monitors[h].inbox_refused(),
        );
        eprintln!(
            "h{}: {} of 1000 arrived; one-way min {} ns, p50 {} ns, p99 {} ns, max {} ns; promised [{min}, {max}] ns: {} within, {early} before, {} after ({explained} of them during a stall)",
            h + 1,
            latencies.len(),
            at(0.0),
            at(0.5),
            at(0.99),
            at(1.0),
            latencies.len() - early - late.len(),
            late.len(),
        );
        let lost_unexplained = lost.len() - lost_explained;
        assert!(
            lost_unexplained <= UNEXPLAINED_LOST,
            "h{}: {lost_unexplained} messages lost with no stall the watch saw (at most {UNEXPLAINED_LOST} allowed): {:?}",
            h + 1,
            &lost[..lost.len().min(20)]
        );
        assert!(deliveries.windows(2).all(|w| w[0].0 < w[1].0), "in order, none twice");
        assert_eq!(early, 0, "h{}: no message arrives before the promised minimum", h + 1);
        let unexplained = late.len() - explained;
        assert!(
            unexplained <= UNEXPLAINED_LATE,
            "h{}: {unexplained} messages after the promised maximum met no stall the watch saw (at most {UNEXPLAINED_LATE} allowed)",
            h + 1
        );
    }

    // Strangers and a node acting for another host, from h2.
    let (addr, key_file, tunnel_id) =
        (controller_addr.to_string(), key.display().to_string(), tunnel.id.to_string());
    let foreign = kairos_in(
        &ns(2),
        &[
            "lane",
            "release",
            "--controller",
            &addr,
            "--host",
            "h2",
            "--secret-file",
            &key_file,
            "--tunnel",
            &tunnel_id,
        ],
    );
    let said = String::from_utf8_lossy(&foreign.stdout);
    assert_eq!(foreign.status.code(), Some(3), "h2 may not release h0's tunnel: {said}");
    std::fs::write(path("wrong"), b"a wrong secret of thirty-two b..").unwrap();
    let wrong = path("wrong").display().to_string();
    let stranger = kairos_in(
        &ns(2),
        &[
            "lane",
            "request",
            "--controller",
            &addr,
            "--host",
            "h2",
            "--secret-file",
            &wrong,
            "--name",
            "x",
            "--to",
            "h0",
            "--period-us",
            "100",
        ],
    );
    let said = String::from_utf8_lossy(&stranger.stderr);
    assert!(stranger.status.code() == Some(1) && said.contains("wrong secret"), "{said}");
    within(&ns(2), move || {
        for bytes in [&b"\x00\x00\x00\x05hello"[..], &[0, 0, 0, 100, 1, 2, 3], &[0x80, 0, 0, 0]] {
            let mut s = TcpStream::connect_timeout(&controller_addr, WAIT).unwrap();
            s.write_all(bytes).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            s.set_read_timeout(Some(WAIT)).unwrap();
            let _ = s.read_to_end(&mut Vec::new());
        }
    });
    let after = exchange(&mut tunnel, &mut monitors, 100);
    assert!(
        after.got.iter().all(|d| d.len() >= 95),
        "the lane went on: {:?}",
        after.got.iter().map(Vec::len).collect::<Vec<_>>()
    );

    // SIGKILL the controller, start it again from its journal.
    let before = tunnel_lines(&ns(0), metrics);
    assert_eq!(
        before.iter().filter(|l| l.starts_with("kairos_lane_tunnel_period_ps")).count(),
        1,
        "{before:?}"
    );
    let pid = controller.as_ref().unwrap().id().to_string();
    assert!(Command::new("kill").args(["-9", &pid]).status().unwrap().success());
    drop(controller.take());
    let during = exchange(&mut tunnel, &mut monitors, 50);
    controller = Some(in_ns(&ns(0), &args, "controller again", &dir));
    assert_eq!(tunnel_lines(&ns(0), metrics), before, "the same tunnel, period and bounds after the restart");
    // The nodes come back by themselves; a new request goes through h0's node again.
    let mut second = request(
        &mut sensor,
        &TunnelSpec { name: "second".into(), receivers: vec!["h1".into()], ..spec.clone() },
    );
    let _ = second.send(b"after the restart", realtime_ns());
    let again = exchange(&mut tunnel, &mut monitors, 100);
    eprintln!(
        "while the controller was down {:?} of 50 arrived; after it came back {:?} of 100",
        during.got.iter().map(Vec::len).collect::<Vec<_>>(),
        again.got.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(
        during.got.iter().all(|d| d.len() >= 45),
        "the lane does not need the controller to carry granted tunnels"
    );
    assert!(again.got.iter().all(|d| d.len() >= 95));

    drop((sensor, monitors, controller));
    drop(_nodes);
    // This testbed's namespaces only: another run (another testbed's process) may hold its own.
    let own = format!("kairos-{}-", testbed.id());
    drop(testbed); // SIGTERM: its handler removes the namespaces
    let left = namespaces();
    assert!(!left.iter().any(|n| n.contains(&own)), "namespaces left: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
