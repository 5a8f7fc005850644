//! The lane latency experiment's peer rows and load on the real kernel (root; it says it
//! skipped otherwise): a two-host lane testbed, each of the four peers run for 300 messages
//! every 100 us idle and then under the load (an iperf3 flood across the bridge and stress-ng
//! on one core), and nothing left afterwards. It floods the link and loads a core for a few
//! seconds, so the debug run ignores it; `scripts/test` runs it in release as root.

use std::time::Duration;

use kairos_io::lane_testbed::{ClassCounters, Egress};
use kairos_io::{LaneTestbed, LaneTestbedConfig, LaneTestbedError};
use kairos_lab::experiments::lane_latency::load;
use kairos_lab::peers::process::require_tool;
use kairos_lab::peers::udp::{self as peers, Peer, PeerRun, PeerSettings};
use kairos_testkit::host::{children, namespaces_starting_with};

const PREFIX: &str = "kairos-peers";

fn testbed() -> Option<LaneTestbed> {
    let config = LaneTestbedConfig { prefix: PREFIX.into(), ..LaneTestbedConfig::default() };
    match LaneTestbed::create(config) {
        Ok(bed) => Some(bed),
        Err(LaneTestbedError::NotRoot) => {
            eprintln!("skipped: not root (the lane testbed needs network namespaces and qdiscs)");
            None
        }
        Err(e) => panic!("lane testbed: {e}"),
    }
}

/// Whether the tools the rows and the load run are installed; says which is not.
fn tools() -> bool {
    for (program, package) in [("sockperf", "sockperf"), ("iperf3", "iperf3"), ("stress-ng", "stress-ng")] {
        if let Err(e) = require_tool(program, package, "this test") {
            eprintln!("skipped: {e}");
            return false;
        }
    }
    true
}

/// The percentile `q` (0 to 100) of sorted, non-empty `sorted`, nearest rank.
fn percentile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Checks what every row must show and returns its one-way latencies, sorted (ns).
fn check(peer: Peer, run: &PeerRun, settings: &PeerSettings, loaded: bool) -> Vec<u64> {
    let what = format!("{} ({})", peer.name(), if loaded { "loaded" } else { "idle" });
    let received = run.samples.len() as u64;
    if peer == Peer::Sockperf {
        // sockperf runs whole seconds, enough for the messages asked for in its valid window at
        // the period; but it is a closed loop, so under the flood, where a round trip takes
        // longer than the period, it sends fewer.
        let least = if loaded { 30 } else { settings.packets * 9 / 10 };
        assert!(run.sent >= least, "{what}: sent {}", run.sent);
    } else {
        assert_eq!(run.sent, settings.packets, "{what}");
    }
    assert!(received <= run.sent, "{what}: {received} received of {} sent", run.sent);
    // Most arrive: the bulk rows under the flood lose some to the full bulk queue.
    let floor = if loaded { run.sent / 2 } else { run.sent * 9 / 10 };
    assert!(received >= floor, "{what}: only {received} of {} arrived", run.sent);
    let mut seqs: Vec<u64> = run.samples.iter().map(|s| s.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len() as u64, received, "{what}: a sequence number twice");
    let mut latencies = Vec::new();
    for s in &run.samples {
        assert!(s.received_ns > s.sent_ns, "{what}: {s:?} arrived before it was sent");
        let latency = s.received_ns - s.sent_ns;
        assert!(latency < 1_000_000_000, "{what}: {s:?} took a second or more");
        match (peer, s.kernel_ns) {
            (Peer::Sockperf, kernel) => assert_eq!(kernel, None, "{what}"),
            (_, Some(kernel)) => {
                assert!(kernel <= s.received_ns, "{what}: the kernel stamp after the program's: {s:?}");
                assert!(kernel + 1_000 >= s.sent_ns, "{what}: the kernel stamp before the send: {s:?}");
            }
            (_, None) => {}
        }
        latencies.push(latency);
    }
    if peer != Peer::Sockperf {
        let stamped = run.samples.iter().filter(|s| s.kernel_ns.is_some()).count();
        assert!(stamped * 10 >= run.samples.len() * 9, "{what}: {stamped} samples with a kernel stamp");
        // Arrival order is the order the receiver read them in.
        assert!(run.samples.windows(2).all(|w| w[0].received_ns <= w[1].received_ns), "{what}");
    }
    latencies.sort_unstable();
    latencies
}

fn lane_packets(before: ClassCounters, after: ClassCounters) -> u64 {
    after.lane.packets - before.lane.packets
}

/// Processes this process started that are still running (zombies have ended).
fn children_left() -> Vec<String> {
    children().into_iter().filter(|c| !c.stat.is_zombie()).map(|c| format!("{} {}", c.pid, c.name)).collect()
}

/// The namespaces of this process's testbed still listed.
fn namespaces_left() -> Vec<String> {
    namespaces_starting_with(&format!("{PREFIX}-{}-", std::process::id()))
}

#[test]
#[ignore = "floods the testbed and loads a core; scripts/test runs it in release as root"]
fn every_peer_measures_idle_and_under_the_load_and_nothing_is_left() {
    if !tools() {
        return;
    }
    let Some(bed) = testbed() else { return };
    // As the experiment does: stamping on for every row, not turned on again by each under the flood.
    let _stamping = kairos_sys::net::options::RxTimestampsHeld::new().expect("asking for receive stamps");
    let settings =
        PeerSettings { from: 0, to: 1, period: Duration::from_micros(100), packets: 300, message_bytes: 64 };
    let egresses = [Egress::Host(0), Egress::SwitchPort(1)];
    let counters = || egresses.map(|e| bed.class_counters(e).unwrap());
    let mut servers = peers::Servers::start(&bed, &Peer::ALL, 1).expect("the peers' servers");
    let mut table = Vec::new();
    for loaded in [false, true] {
        let mut load = loaded.then(|| load::start(&bed, 0, 1, 0).unwrap());
        for peer in Peer::ALL {
            let before = counters();
            let run = peers::run(&bed, peer, &settings, &mut servers).unwrap_or_else(|e| panic!("{e:#}"));
            let after = counters();
            let latencies = check(peer, &run, &settings, loaded);
            if peer == Peer::PriorityOnly {
                // Every message that arrived went through the lane class at both egresses.
                for i in 0..2 {
                    let lane = lane_packets(before[i], after[i]);
                    assert!(
                        lane >= run.samples.len() as u64,
                        "priority only: {lane} lane packets at {:?} for {} messages",
                        egresses[i],
                        run.samples.len()
                    );
                }
            } else {
                for i in 0..2 {
                    assert!(
                        lane_packets(before[i], after[i]) < 10,
                        "{}: lane packets at {:?}",
                        peer.name(),
                        egresses[i]
                    );
                }
            }
            if let Some(load) = load.as_mut() {
                load.check().unwrap();
            }
            // The network's part alone: send to the kernel's receive stamp.
            let mut network: Vec<u64> =
                run.samples.iter().filter_map(|s| Some(s.kernel_ns?.saturating_sub(s.sent_ns))).collect();
            network.sort_unstable();
            table.push((peer, loaded, run.sent, run.samples.len(), latencies, network));
        }
        if let Some(load) = load {
            let report = load.stop().unwrap();
            println!(
                "load: iperf3 moved {} bytes in the bulk class at h0's egress in {:.2} s ({:.0} Mbit/s), {} bulk drops",
                report.bulk_bytes,
                report.seconds,
                report.bulk_bits_per_second / 1e6,
                report.bulk_dropped
            );
            // Far more than the measured rows' own bulk messages (some tens of kB).
            assert!(report.bulk_bytes > 10 << 20, "{report:?}");
        }
    }
    println!(
        "{:<14} {:<6} {:>6} {:>8} {:>9} {:>9} {:>9} {:>11} {:>11}",
        "peer", "load", "sent", "received", "p50 us", "p99 us", "max us", "net p50 us", "net p99 us"
    );
    let us = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
    for (peer, loaded, sent, received, latencies, network) in &table {
        let (net_p50, net_p99) = if network.is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            (us(percentile(network, 50.0)), us(percentile(network, 99.0)))
        };
        println!(
            "{:<14} {:<6} {:>6} {:>8} {:>9} {:>9} {:>9} {:>11} {:>11}",
            peer.name(),
            if *loaded { "flood" } else { "idle" },
            sent,
            received,
            us(percentile(latencies, 50.0)),
            us(percentile(latencies, 99.0)),
            us(latencies[latencies.len() - 1]),
            net_p50,
            net_p99
        );
    }
    drop(servers);
    drop(bed);
    assert_eq!(namespaces_left(), Vec::<String>::new(), "namespaces left behind");
    assert_eq!(children_left(), Vec::<String>::new(), "child processes left behind");
}
