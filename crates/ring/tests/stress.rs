//! Several producers and one consumer on small rings for every policy: every value offered is
//! accounted for exactly once (dequeued, refused, evicted or replaced), each producer's values
//! come out in order, and the counters obey their conservation law.
//!
//! `KAIROS_STRESS_SCALE` (default 1) scales the number of values.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use kairos_ring::{Overflow, keyed, mpsc, spsc};

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
