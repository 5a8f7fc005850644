//! Ports, the pool, the fault injector and the namespace testbed.

mod common;
use common::Packet;
use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use kairos_io::memory::pair;
use kairos_io::pool::{Buf, PoolError, buf_ring, keyed_buf_ring, pool};
use kairos_io::{FaultPort, Faults, Port, PortBase, RxTimestamps, Testbed, TestbedError, UdpPort};
use kairos_ring::Overflow;
use kairos_sys::clock::monotonic_ns;

fn packets(n: u64) -> Vec<Packet> {
    (0..n).map(|i| Packet { user: i as u32 % 7, seq: i, sent_ns: 1000 + i, ..Packet::default() }).collect()
}

/// Receives until `n` packets arrived or 5 s passed.
fn receive(port: &mut dyn Port<Packet>, n: usize) -> Vec<Packet> {
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
    let (pool, mut alloc, mut freer) = pool::<Packet>(100).unwrap();
    let mut bufs = Vec::new();
    assert_eq!(alloc.alloc_burst(150, &mut bufs), 100);
    let mut sorted: Vec<u32> = bufs.iter().map(|b| b.index()).collect();
    sorted.sort();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    assert_eq!(alloc.alloc_burst(1, &mut Vec::new()), 0, "an empty pool gives nothing");
    *pool.packet_mut(&mut bufs[7]) = packets(8)[7];
    assert_eq!(pool.packet(&bufs[7]).seq, 7);
    freer.free_all(bufs.drain(5..7));
    assert_eq!(alloc.available(), 2);
    assert!(matches!(kairos_io::pool::pool::<Packet>(0), Err(PoolError::Size(0))));
}

/// Buffers move through the pool's rings by value: what a drop-oldest ring evicts comes back
/// to the sender as buffers to free, and the receiver reads the packets the sender wrote.
#[test]
fn buffers_cross_the_pool_rings_and_evictions_come_back() {
    let (pool, mut alloc, mut freer) = pool::<Packet>(16).unwrap();
    let (mut tx, mut rx) = buf_ring(&pool, 4, Overflow::DropOldest).unwrap();
    let mut bufs = Vec::new();
    alloc.alloc_burst(6, &mut bufs);
    for (i, b) in bufs.iter_mut().enumerate() {
        pool.packet_mut(b).seq = i as u64;
    }
    let mut dropped = Vec::new();
    assert_eq!(tx.send(&mut bufs, &mut dropped), 6);
    assert!(bufs.is_empty());
    let dropped_seqs: Vec<u64> = dropped.iter().map(|b| pool.packet(b).seq).collect();
    assert_eq!(dropped_seqs, [0, 1], "the two oldest were evicted");
    freer.free_all(dropped.drain(..));
    let mut got = Vec::new();
    assert_eq!(rx.recv(8, &mut got), 4);
    assert_eq!(got.iter().map(|b| pool.packet(b).seq).collect::<Vec<_>>(), [2, 3, 4, 5]);
    freer.free_all(got.drain(..));
    assert_eq!(alloc.available(), 16, "every buffer is back");
    let (kpool, mut kalloc, _) = kairos_io::pool::pool::<Packet>(4).unwrap();
    let (mut ktx, mut krx) = keyed_buf_ring(&kpool, 4, 2).unwrap();
    let mut kb = Vec::new();
    kalloc.alloc_burst(3, &mut kb);
    let mut keyed: Vec<(u32, Buf)> = kb.drain(..).zip([0, 1, 0]).map(|(b, k)| (k, b)).collect();
    let mut replaced = Vec::new();
    ktx.send(&mut keyed, &mut replaced);
    assert_eq!(replaced.len(), 1, "the second buffer for key 0 replaced the first");
    assert_eq!(krx.recv(4, &mut kb), 2);
}

/// A buffer of one pool cannot reach another pool's slots: its index there may be owned by
/// someone else.
#[test]
#[should_panic(expected = "used with pool")]
fn a_buffer_of_another_pool_is_refused() {
    let (a, mut alloc_a, _) = pool::<Packet>(4).unwrap();
    let (b, _, _) = pool::<Packet>(4).unwrap();
    let mut bufs = Vec::new();
    alloc_a.alloc_burst(1, &mut bufs);
    let _ = a.packet(&bufs[0]);
    let _ = b.packet(&bufs[0]);
}

#[test]
#[should_panic(expected = "freed to pool")]
fn a_buffer_freed_to_another_pool_is_refused() {
    let (_a, mut alloc_a, _) = pool::<Packet>(4).unwrap();
    let (_b, _, mut free_b) = pool::<Packet>(4).unwrap();
    let mut bufs = Vec::new();
    alloc_a.alloc_burst(1, &mut bufs);
    free_b.free_all(bufs);
}

#[test]
#[should_panic(expected = "sent on a ring of pool")]
fn a_buffer_sent_on_another_pools_ring_is_refused() {
    let (_a, mut alloc_a, _) = pool::<Packet>(4).unwrap();
    let (b, _, _) = pool::<Packet>(4).unwrap();
    let (mut tx, _rx) = buf_ring(&b, 4, Overflow::DropNewest).unwrap();
    let mut bufs = Vec::new();
    alloc_a.alloc_burst(1, &mut bufs);
    tx.send(&mut bufs, &mut Vec::new());
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
