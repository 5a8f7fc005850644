//! Several producers and one consumer on small rings for every policy: every value offered is
//! accounted for exactly once (dequeued, refused, evicted or replaced), each producer's values
//! come out in order, and the counters obey their conservation law.
//!
//! `KAIROS_STRESS_SCALE` (default 1) scales the number of values.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use kairos_ring::bridge::{Bridge, BridgeLayout, HeapMemory, SendError};
use kairos_ring::{Overflow, keyed, mpsc, spsc};

mod bridge_messages;

const PRODUCERS: u32 = 3;

fn per_producer() -> u32 {
    let scale: f64 = std::env::var("KAIROS_STRESS_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    ((1_000_000.0 * scale) as u32).max(1000)
}

/// Value layout: producer in the top 8 bits, sequence number below.
fn value(producer: u32, seq: u32) -> u32 {
    (producer << 24) | seq
}

fn split(v: u32) -> (u32, u32) {
    (v >> 24, v & 0xff_ffff)
}

/// Checks that `seen` (all values that left the ring, however) holds each value exactly once.
fn each_once(mut seen: Vec<u32>, producers: u32, n: u32) {
    seen.sort_unstable();
    let expected: Vec<u32> = (0..producers).flat_map(|p| (0..n).map(move |s| value(p, s))).collect();
    assert_eq!(seen.len(), expected.len(), "values lost or duplicated");
    assert!(seen == expected, "values lost or duplicated");
}

fn fifo_ring(overflow: Overflow, capacity: usize) {
    let n = per_producer();
    let (tx, mut rx) = mpsc::<u32>(capacity, overflow).unwrap();
    let done = AtomicBool::new(false);
    let (dequeued, left) = thread::scope(|s| {
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let mut tx = tx.clone();
                s.spawn(move || {
                    let mut left = Vec::new();
                    let mut seq = 0;
                    while seq < n {
                        let burst: Vec<u32> =
                            (seq..(seq + 1 + seq % 7).min(n)).map(|q| value(p, q)).collect();
                        let mut evicted = Vec::new();
                        let a = tx.enqueue_burst(&burst, &mut evicted);
                        left.extend_from_slice(&burst[a.taken..]);
                        left.extend(evicted);
                        seq += burst.len() as u32;
                    }
                    left
                })
            })
            .collect();
        let consumer = s.spawn(|| {
            let mut got = Vec::new();
            let mut out = [0u32; 16];
            let mut last = [None::<u32>; PRODUCERS as usize];
            loop {
                let finished = done.load(Ordering::Acquire);
                let k = rx.dequeue_burst(&mut out);
                for &v in &out[..k] {
                    let (p, q) = split(v);
                    if let Some(prev) = last[p as usize] {
                        assert!(q > prev, "producer {p}: {q} after {prev}");
                    }
                    last[p as usize] = Some(q);
                }
                got.extend_from_slice(&out[..k]);
                if finished && k == 0 {
                    return (got, rx);
                }
            }
        });
        let left: Vec<u32> = producers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Release);
        let (got, rx) = consumer.join().unwrap();
        let stats = rx.stats();
        assert_eq!(stats.offered, u64::from(PRODUCERS * n));
        assert_eq!(stats.offered, stats.dequeued + stats.dropped(), "{stats:?}");
        assert_eq!(stats.dequeued, got.len() as u64);
        (got, left)
    });
    let mut all = dequeued;
    all.extend(left);
    each_once(all, PRODUCERS, n);
}

#[test]
fn mpsc_drop_newest() {
    fifo_ring(Overflow::DropNewest, 5);
}

#[test]
fn mpsc_drop_oldest() {
    fifo_ring(Overflow::DropOldest, 5);
}

#[test]
fn mpsc_drop_oldest_one_slot() {
    fifo_ring(Overflow::DropOldest, 1);
}

#[test]
fn spsc_both_policies_in_order() {
    for overflow in [Overflow::DropNewest, Overflow::DropOldest] {
        let n = per_producer();
        let (mut tx, mut rx) = spsc::<u32>(3, overflow).unwrap();
        thread::scope(|s| {
            let producer = s.spawn(move || {
                let mut left = 0u64;
                let mut evicted = Vec::new();
                for seq in (0..n).step_by(4) {
                    let burst: Vec<u32> = (seq..(seq + 4).min(n)).collect();
                    evicted.clear();
                    let a = tx.enqueue_burst(&burst, &mut evicted);
                    left += (burst.len() - a.taken + a.evicted) as u64;
                }
                left
            });
            let mut got = 0u64;
            let mut last = None;
            let mut out = [0u32; 4];
            while !producer.is_finished() || !rx.is_empty() {
                let k = rx.dequeue_burst(&mut out);
                for &v in &out[..k] {
                    assert!(last.is_none_or(|l| v > l), "{v} after {last:?}");
                    last = Some(v);
                }
                got += k as u64;
            }
            let left = producer.join().unwrap();
            got += rx.dequeue_burst(&mut out) as u64;
            assert_eq!(got + left, u64::from(n), "{overflow}");
        });
    }
}

#[test]
fn keyed_latest_values_only_grow() {
    let n = per_producer();
    const KEYS: u32 = 16;
    let (tx, mut rx) = keyed(4, KEYS as usize * PRODUCERS as usize).unwrap();
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        // Producer p owns keys p*KEYS..(p+1)*KEYS; the value's sequence grows per producer.
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let mut tx = tx.clone();
                s.spawn(move || {
                    let mut left = Vec::new();
                    let mut burst = Vec::new();
                    for seq in 0..n {
                        burst.push((p * KEYS + seq % KEYS, value(p, seq)));
                        if burst.len() == 8 || seq == n - 1 {
                            tx.enqueue_burst(&burst, &mut left);
                            burst.clear();
                        }
                    }
                    left
                })
            })
            .collect();
        let done = &done;
        let consumer = s.spawn(move || {
            let mut got = Vec::new();
            let mut last = vec![None::<u32>; (KEYS * PRODUCERS) as usize];
            let mut out = [(0u32, 0u32); 8];
            loop {
                let finished = done.load(Ordering::Acquire);
                let k = rx.dequeue_burst(&mut out);
                for &(key, v) in &out[..k] {
                    let (p, q) = split(v);
                    assert_eq!(key / KEYS, p, "key {key} carries producer {p}'s value");
                    assert_eq!(key % KEYS, q % KEYS, "key {key} carries sequence {q}");
                    if let Some(prev) = last[key as usize] {
                        assert!(q > prev, "key {key}: {q} after {prev}");
                    }
                    last[key as usize] = Some(q);
                    got.push(v);
                }
                if finished && k == 0 {
                    return (got, rx);
                }
            }
        });
        let left: Vec<u32> = producers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Release);
        let (mut all, rx) = consumer.join().unwrap();
        let stats = rx.stats();
        assert_eq!(stats.offered, stats.dequeued + stats.dropped(), "{stats:?}");
        assert!(stats.replaced > 0, "the test never exercised replacement: {stats:?}");
        all.extend(left);
        each_once(all, PRODUCERS, n);
    });
}

/// Checks a received message and its stamp (the sender stamps message `seq` with `!seq`).
fn check_bridge_message(expected_seq: u64, got: &[u8], stamp_ns: u64, max: usize, scratch: &mut Vec<u8>) {
    bridge_messages::check(expected_seq, got, max, scratch);
    assert_eq!(stamp_ns, !expected_seq, "message {expected_seq}: stamp");
}

/// A producer thread and a consumer thread move `n` messages of random sizes through a bridge
/// of `slots` slots, each side spinning (and yielding) when the bridge is full or empty, one
/// message or bursts at a time. Both edges must be met, and every message arrive whole, once
/// and in order.
fn bridge_between_threads(slots: usize, burst: usize) {
    const MAX: usize = 200;
    let n = u64::from(per_producer());
    let layout = BridgeLayout::for_messages(slots, MAX).unwrap();
    let (mut tx, mut rx) = Bridge::init(HeapMemory::for_layout(layout), layout).unwrap().split();
    thread::scope(|s| {
        let producer = s.spawn(move || {
            let mut fulls = 0u64;
            let mut messages: Vec<Vec<u8>> = vec![Vec::new(); burst];
            let mut seq = 0;
            while seq < n {
                let k = burst.min((n - seq) as usize);
                for (i, m) in messages[..k].iter_mut().enumerate() {
                    bridge_messages::message(seq + i as u64, MAX, m);
                }
                let sent = if burst == 1 {
                    match tx.try_send(&messages[0], !seq) {
                        Ok(()) => 1,
                        Err(SendError::Full) => 0,
                        Err(e) => panic!("{e}"),
                    }
                } else {
                    // One stamp per burst: the consumer checks stamps only for single sends.
                    let views: Vec<&[u8]> = messages[..k].iter().map(|m| &m[..]).collect();
                    tx.try_send_burst(&views, !seq).unwrap()
                };
                if sent == 0 {
                    fulls += 1;
                    thread::yield_now();
                }
                seq += sent as u64;
            }
            tx.close();
            fulls
        });
        let mut empties = 0u64;
        let mut next = 0u64;
        let mut buf = [0u8; MAX];
        let mut scratch = Vec::new();
        loop {
            let closed = rx.producer_closed();
            let got = if burst == 1 {
                match rx.try_recv(&mut buf).unwrap() {
                    Some(r) => {
                        check_bridge_message(next, &buf[..r.len], r.stamp_ns, MAX, &mut scratch);
                        1
                    }
                    None => 0,
                }
            } else {
                rx.try_recv_burst(&mut buf, burst, |m, _| {
                    let seq = u64::from_ne_bytes(m[..8].try_into().unwrap());
                    check_bridge_message(next, m, !seq, MAX, &mut scratch);
                    next += 1;
                })
                .unwrap()
            };
            if burst == 1 {
                next += got as u64;
            }
            if got == 0 {
                if closed {
                    break;
                }
                empties += 1;
                thread::yield_now();
            }
        }
        let fulls = producer.join().unwrap();
        assert_eq!(next, n, "messages lost");
        let stats = rx.stats();
        assert_eq!((stats.sent, stats.received, stats.dropped_too_large), (n, n, 0));
        assert!(fulls > 0 && empties > 0, "an edge was never met: {fulls} full, {empties} empty");
        assert!(stats.dropped_full >= fulls, "{stats:?}");
    });
}

#[test]
fn bridge_one_slot() {
    bridge_between_threads(1, 1);
}

#[test]
fn bridge_few_slots() {
    bridge_between_threads(3, 1);
}

#[test]
fn bridge_bursts() {
    bridge_between_threads(16, 8);
}
