//! Loom models of the ring protocol: every interleaving (and every reordering the C11 memory
//! model allows) of producers and a consumer on tiny rings. Payloads live in loom cells, so any
//! read not ordered after its write (or a write racing a read) is reported; the assertions check
//! that each value leaves the ring exactly once and in order.
//!
//! The consumer runs in a spawned thread, not on the model's main thread: loom 0.7 explored a
//! single schedule when the main thread took part (each model's iteration count is printed with
//! `LOOM_LOG=info`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p kairos-ring --test loom --release`
#![cfg(loom)]

use kairos_ring::bridge::{Bridge, BridgeLayout, HeapMemory, Received, SendError};
use kairos_ring::{Consumer, Overflow, SharedProducer, keyed, mpsc, spsc};
use loom::thread::{self, JoinHandle};

/// Runs `f` under loom over every schedule ([`kairos_sync::explore`]).
fn model(f: impl Fn() + Sync + Send + 'static) {
    kairos_sync::explore(None, f);
}

/// As [`model`], with at most `preemptions` preemptions per schedule: the two-producer models
/// explore about 900,000 schedules unbounded (three minutes); three preemptions cover every
/// ordering of one producer's reservation, write and publication against the other's and the
/// consumer's.
fn bounded_model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    kairos_sync::explore(preemptions, f);
}

/// Starts a producer that offers `burst` once, on its own handle of an MPSC ring. It hands back
/// what the ring refused or evicted.
fn offer_once(mut tx: SharedProducer<u32>, burst: Vec<u32>) -> JoinHandle<Vec<u32>> {
    thread::spawn(move || {
        let mut left = Vec::new();
        let a = tx.enqueue_burst(&burst, &mut left);
        left.extend_from_slice(&burst[a.taken..]);
        left
    })
}

/// Starts the consumer: one dequeue of up to `room` entries, racing the producers. It hands
/// back the ring and what it took.
fn consume_once(mut rx: Consumer<u32>, room: usize) -> JoinHandle<(Consumer<u32>, Vec<u32>)> {
    thread::spawn(move || {
        let mut out = vec![0u32; room];
        let n = rx.dequeue_burst(&mut out);
        out.truncate(n);
        (rx, out)
    })
}

/// Joins the consumer and drains what the ring still holds: the ring and everything it
/// delivered, in the order it delivered it.
fn delivered(consumer: JoinHandle<(Consumer<u32>, Vec<u32>)>) -> (Consumer<u32>, Vec<u32>) {
    let (mut rx, mut got) = consumer.join().unwrap();
    let mut out = [0u32; 4];
    loop {
        let n = rx.dequeue_burst(&mut out);
        if n == 0 {
            return (rx, got);
        }
        got.extend_from_slice(&out[..n]);
    }
}

/// Checks that each of `offered` either left the ring (`got`) or came back to its producer
/// (`returned`: refused or evicted), exactly once.
fn assert_each_once(got: &[u32], returned: impl IntoIterator<Item = u32>, offered: &[u32]) {
    let mut all = got.to_vec();
    all.extend(returned);
    all.sort();
    assert_eq!(all, offered);
}

#[test]
fn spsc_one_slot_tail_drop() {
    model(|| {
        let (mut tx, rx) = spsc::<u32>(1, Overflow::DropNewest).unwrap();
        let producer = thread::spawn(move || {
            let mut refused = Vec::new();
            let mut evicted = Vec::new();
            for v in [1, 2] {
                if tx.enqueue_burst(&[v], &mut evicted).taken == 0 {
                    refused.push(v);
                }
            }
            assert!(evicted.is_empty());
            refused
        });
        let consumer = consume_once(rx, 2);
        let refused = producer.join().unwrap();
        let (rx, got) = delivered(consumer);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
        assert_each_once(&got, refused, &[1, 2]);
        let s = rx.stats();
        assert_eq!(s.offered, s.dequeued + s.dropped());
    });
}

#[test]
fn spsc_two_slots_drop_oldest() {
    model(|| {
        let (mut tx, rx) = spsc::<u32>(2, Overflow::DropOldest).unwrap();
        let producer = thread::spawn(move || {
            let mut left = Vec::new();
            let a = tx.enqueue_burst(&[1, 2], &mut left);
            assert_eq!(a.taken, 2);
            let b = tx.enqueue_burst(&[3], &mut left);
            if b.taken == 0 {
                left.push(3);
            }
            left
        });
        let consumer = consume_once(rx, 1);
        let left = producer.join().unwrap();
        let (_, got) = delivered(consumer);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
        assert_each_once(&got, left, &[1, 2, 3]);
    });
}

#[test]
fn mpsc_one_slot_drop_oldest_two_producers() {
    bounded_model(Some(3), || {
        let (tx, rx) = mpsc::<u32>(1, Overflow::DropOldest).unwrap();
        let producers = [10u32, 20].map(|v| offer_once(tx.clone(), vec![v]));
        let consumer = consume_once(rx, 1);
        let left: Vec<u32> = producers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let (rx, got) = delivered(consumer);
        assert_each_once(&got, left, &[10, 20]);
        let s = rx.stats();
        assert_eq!(s.offered, s.dequeued + s.dropped());
    });
}

#[test]
fn mpsc_two_producers_tail_drop_keep_their_order() {
    bounded_model(Some(3), || {
        let (tx, rx) = mpsc::<u32>(2, Overflow::DropNewest).unwrap();
        let producers = [10u32, 20].map(|base| offer_once(tx.clone(), vec![base, base + 1]));
        let consumer = consume_once(rx, 2);
        let left: Vec<u32> = producers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let (_, got) = delivered(consumer);
        for base in [10, 20] {
            let mine: Vec<u32> = got.iter().copied().filter(|v| v / 10 == base / 10).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "producer {base} out of order: {got:?}");
        }
        assert_each_once(&got, left, &[10, 11, 20, 21]);
    });
}

#[test]
fn keyed_replacement_races_the_consumer() {
    model(|| {
        let (mut tx, mut rx) = keyed(1, 2).unwrap();
        let producer = thread::spawn(move || {
            let mut left = Vec::new();
            tx.enqueue_burst(&[(0, 1)], &mut left);
            tx.enqueue_burst(&[(0, 2)], &mut left);
            left
        });
        let consumer = thread::spawn(move || {
            let mut out = [(0u32, 0u32); 1];
            let n = rx.dequeue_burst(&mut out);
            let got: Vec<u32> = out[..n]
                .iter()
                .map(|&(k, v)| {
                    assert_eq!(k, 0);
                    v
                })
                .collect();
            (rx, got)
        });
        let left = producer.join().unwrap();
        let (mut rx, mut got) = consumer.join().unwrap();
        let mut out = [(0u32, 0u32); 1];
        let n = rx.dequeue_burst(&mut out);
        got.extend(out[..n].iter().map(|&(_, v)| v));
        assert!(got.windows(2).all(|w| w[0] < w[1]), "stale after fresh: {got:?}");
        // The latest value is never lost.
        assert_eq!(got.last(), Some(&2));
        assert_each_once(&got, left, &[1, 2]);
    });
}

/// A bridge's message: 12 bytes (a whole word and a zero-padded half word), distinct per `i`;
/// the models' slots hold 16 (32 bytes, the fewest atomics to explore).
fn message(i: u8) -> [u8; 12] {
    std::array::from_fn(|k| i.wrapping_mul(37).wrapping_add(k as u8))
}

/// The bridge's protocol: a producer sends `n` messages, retrying while the bridge is full, a
/// consumer receives them, waiting while it is empty; every message arrives once, in order,
/// with its bytes and stamp. The slots' words are relaxed atomics, so only the positions'
/// release/acquire orders them: a weaker producer side shows up as torn or stale bytes here; a
/// weaker consumer side (a slot refilled while it is read) as a race on the slot's shadow cell
/// (`sync::SlotShadow`). Each of the four orderings made relaxed fails these models. Unbounded:
/// about 24,000 schedules each, two seconds for all three.
fn bridge_in_order(slots: usize, n: u8, preemptions: Option<usize>) {
    bounded_model(preemptions, move || {
        let layout = BridgeLayout::new(slots, 32).unwrap();
        let (mut tx, mut rx) = Bridge::init(HeapMemory::for_layout(layout), layout).unwrap().split();
        let producer = thread::spawn(move || {
            for i in 1..=n {
                loop {
                    match tx.try_send(&message(i), u64::from(i)) {
                        Ok(()) => break,
                        Err(SendError::Full) => thread::yield_now(),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            tx.close();
        });
        let consumer = thread::spawn(move || {
            let mut buf = [0u8; 12];
            for i in 1..=n {
                loop {
                    match rx.try_recv(&mut buf).unwrap() {
                        Some(got) => {
                            assert_eq!(got, Received { len: 12, stamp_ns: u64::from(i) });
                            assert_eq!(buf, message(i), "message {i} torn or stale");
                            break;
                        }
                        None => thread::yield_now(),
                    }
                }
            }
            rx
        });
        producer.join().unwrap();
        let mut rx = consumer.join().unwrap();
        assert!(rx.producer_closed());
        assert_eq!(rx.try_recv(&mut [0u8; 12]).unwrap(), None, "a message twice");
        let s = rx.stats();
        assert_eq!((s.sent, s.received, s.queued()), (u64::from(n), u64::from(n), 0));
    });
}

#[test]
fn bridge_one_slot_full_and_empty_edges() {
    bridge_in_order(1, 3, None);
}

#[test]
fn bridge_two_slots_wrap() {
    bridge_in_order(2, 3, None);
}

/// A producer that never retries on a one-slot bridge: what it was refused is counted in the
/// header, and what was taken arrives once and in order.
#[test]
fn bridge_refusals_are_counted() {
    model(|| {
        let layout = BridgeLayout::new(1, 32).unwrap();
        let (mut tx, mut rx) = Bridge::init(HeapMemory::for_layout(layout), layout).unwrap().split();
        let producer = thread::spawn(move || {
            let mut refused = Vec::new();
            for i in 1..=2u8 {
                match tx.try_send(&message(i), u64::from(i)) {
                    Ok(()) => {}
                    Err(SendError::Full) => refused.push(i),
                    Err(e) => panic!("{e}"),
                }
            }
            refused
        });
        let consumer = thread::spawn(move || {
            let mut buf = [0u8; 12];
            let got = rx.try_recv(&mut buf).unwrap().map(|r| {
                assert_eq!(buf, message(r.stamp_ns as u8));
                r.stamp_ns as u8
            });
            (rx, got)
        });
        let refused = producer.join().unwrap();
        let (mut rx, got) = consumer.join().unwrap();
        let mut got: Vec<u8> = got.into_iter().collect();
        let mut buf = [0u8; 12];
        while let Some(r) = rx.try_recv(&mut buf).unwrap() {
            assert_eq!(buf, message(r.stamp_ns as u8));
            got.push(r.stamp_ns as u8);
        }
        assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
        assert_eq!(rx.stats().dropped_full, refused.len() as u64);
        let mut all = got;
        all.extend(refused);
        all.sort();
        assert_eq!(all, [1, 2]);
    });
}
