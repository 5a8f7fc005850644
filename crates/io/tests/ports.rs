//! Ports, the pool, the fault injector and the namespace testbed.

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use kairos_io::memory::pair;
use kairos_io::pool::pool;
use kairos_io::{FaultPort, Faults, Kind, Packet, Port, RxTimestamps, Testbed, TestbedError, UdpPort};
use kairos_sys::clock::monotonic_ns;

fn packets(n: u64) -> Vec<Packet> {
    (0..n)
        .map(|i| Packet {
            kind: Kind::Data,
            user: i as u32 % 7,
            seq: i,
            sent_ns: 1000 + i,
            ..Packet::default()
        })
        .collect()
}

/// Receives until `n` packets arrived or 5 s passed.
fn receive(port: &mut dyn Port, n: usize) -> Vec<Packet> {
    let mut got = Vec::new();
    let mut buf = vec![Packet::default(); 64];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < n && Instant::now() < deadline {
        let k = port.rx_burst(&mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        if k == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    got
}

fn same_fields(a: &Packet, b: &Packet) -> bool {
    Packet { rx_ns: 0, ..*a } == Packet { rx_ns: 0, ..*b }
}

#[test]
fn memory_ports_carry_bursts_both_ways_with_timestamps() {
    let (mut a, mut b) = pair(64, 32);
    let sent = packets(40);
    let before = monotonic_ns();
    assert_eq!(a.tx_burst(&sent).unwrap(), 32, "a burst is capped at max_burst");
    assert_eq!(a.tx_burst(&sent[32..]).unwrap(), 8);
    let got = receive(&mut b, 40);
    assert_eq!(got.len(), 40);
    assert!(got.iter().zip(&sent).all(|(g, s)| same_fields(g, s)));
    assert!(got.iter().all(|p| p.rx_ns >= before && p.rx_ns <= monotonic_ns()));
    assert_eq!(b.tx_burst(&sent[..3]).unwrap(), 3);
    assert_eq!(receive(&mut a, 3).len(), 3);
    assert_eq!(b.capabilities().rx_timestamps, RxTimestamps::Software);
}

#[test]
fn a_full_memory_link_refuses_and_counts() {
    let (mut a, _b) = pair(4, 64);
    assert_eq!(a.tx_burst(&packets(10)).unwrap(), 4);
    assert_eq!(a.stats().tx_refused, 6);
}

#[test]
fn udp_ports_over_loopback_carry_kernel_timestamps() {
    let s1 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let s2 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (a1, a2) = (s1.local_addr().unwrap(), s2.local_addr().unwrap());
    let mut p1 = UdpPort::new(s1, a2, 1 << 20).unwrap();
    let mut p2 = UdpPort::new(s2, a1, 1 << 20).unwrap();
    let sent = packets(100);
    let before = monotonic_ns();
    let mut off = 0;
    while off < sent.len() {
        off += p1.tx_burst(&sent[off..]).unwrap();
    }
    let got = receive(&mut p2, 100);
    let after = monotonic_ns();
    assert_eq!(got.len(), 100);
    assert!(got.iter().zip(&sent).all(|(g, s)| same_fields(g, s)));
    for p in &got {
        assert!(
            p.rx_ns + 1_000_000 >= before && p.rx_ns <= after,
            "rx {} outside [{before}, {after}]",
            p.rx_ns
        );
    }
    assert_eq!(p2.capabilities().rx_timestamps, RxTimestamps::Kernel);
}

#[test]
fn foreign_datagrams_are_counted_not_delivered() {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let stray = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    let mut port = UdpPort::new(s, stray.local_addr().unwrap(), 1 << 16).unwrap();
    stray.send_to(b"not a packet", addr).unwrap();
    stray.send_to(&[0u8; 60], addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![Packet::default(); 8];
    while port.stats().rx_invalid < 2 && Instant::now() < deadline {
        assert_eq!(port.rx_burst(&mut buf).unwrap(), 0);
    }
    assert_eq!(port.stats().rx_invalid, 2);
}

#[test]
fn fault_port_drops_duplicates_and_corrupts_as_asked() {
    let (mut a, b) = pair(4096, 64);
    let mut f = FaultPort::new(b, Faults { drop: 0.1, duplicate: 0.1, reorder: 0.1, corrupt: 0.1, seed: 5 });
    let sent = packets(2000);
    for chunk in sent.chunks(64) {
        assert_eq!(a.tx_burst(chunk).unwrap(), chunk.len());
    }
    let mut got = Vec::new();
    let mut buf = vec![Packet::default(); 64];
    for _ in 0..200 {
        let k = f.rx_burst(&mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
    }
    let c = f.counts();
    assert!(c.dropped > 100 && c.duplicated > 100 && c.reordered > 100 && c.corrupted > 100, "{c:?}");
    // Every corrupted packet was caught by the checksum: none delivered altered.
    assert_eq!(f.stats().rx_invalid, c.corrupted);
    assert!(got.iter().all(|p| sent.iter().any(|s| same_fields(p, s))), "an altered packet got through");
    assert_eq!(got.len() as u64, 2000 - c.dropped - c.corrupted + c.duplicated);
}

#[test]
fn pool_hands_out_each_buffer_once() {
    let (slots, mut alloc, mut freer) = pool(100);
    let mut idx = vec![0u32; 150];
    assert_eq!(alloc.alloc_burst(&mut idx), 100);
    let mut sorted = idx[..100].to_vec();
    sorted.sort();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    assert_eq!(alloc.alloc_burst(&mut idx[..1]), 0, "an empty pool gives nothing");
    // SAFETY: this test allocated index 7 above and has not freed it.
    unsafe { slots.set(7, packets(8)[7]) };
    // SAFETY: as above.
    assert_eq!(unsafe { slots.get(7) }.seq, 7);
    freer.free_burst(&[7, 9]);
    assert_eq!(alloc.available(), 2);
}

#[test]
fn testbed_joins_two_namespaces_and_cleans_up() {
    let bed = match Testbed::create() {
        Ok(bed) => bed,
        Err(TestbedError::NotRoot) => {
            eprintln!("skipped: not root (the testbed needs network namespaces)");
            return;
        }
        Err(e) => panic!("testbed: {e}"),
    };
    let names = (bed.source_ns.clone(), bed.forwarder_ns.clone());
    let src = bed.source_socket(7000).unwrap();
    let fwd = bed.forwarder_socket(7001).unwrap();
    let mut src = UdpPort::new(src, Testbed::forwarder_addr(7001), 1 << 20).unwrap();
    let mut fwd = UdpPort::new(fwd, Testbed::source_addr(7000), 1 << 20).unwrap();
    assert_eq!(src.tx_burst(&packets(10)).unwrap(), 10);
    assert_eq!(receive(&mut fwd, 10).len(), 10);
    drop(bed);
    let list =
        String::from_utf8(Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).unwrap();
    assert!(!list.contains(&names.0) && !list.contains(&names.1), "namespaces left behind: {list}");
}
