//! The rings' contracts, one behaviour per test.

use kairos_ring::{Admitted, Consumer, Overflow, RingError, RingStats, keyed, mpsc, spsc};

fn conserved(s: &RingStats) -> bool {
    s.offered == s.len as u64 + s.dequeued + s.dropped()
}

/// What one dequeue into room for `room` entries takes, oldest first.
fn one_dequeue(rx: &mut Consumer<u32>, room: usize) -> Vec<u32> {
    let mut out = vec![0; room];
    let n = rx.dequeue_burst(&mut out);
    out.truncate(n);
    out
}

#[test]
fn zero_capacity_is_refused() {
    assert_eq!(spsc::<u32>(0, Overflow::DropNewest).unwrap_err(), RingError::ZeroCapacity);
    assert_eq!(mpsc::<u32>(0, Overflow::DropOldest).unwrap_err(), RingError::ZeroCapacity);
    assert_eq!(keyed(0, 4).unwrap_err(), RingError::ZeroCapacity);
    assert_eq!(keyed(4, 0).unwrap_err(), RingError::NoKeys);
}

#[test]
fn every_capacity_holds_exactly_that_many() {
    for capacity in [1, 2, 3, 5, 63, 64, 65, 100] {
        let (mut tx, mut rx) = spsc::<u32>(capacity, Overflow::DropNewest).unwrap();
        let offered: Vec<u32> = (0..capacity as u32 + 10).collect();
        let mut evicted = Vec::new();
        let a = tx.enqueue_burst(&offered, &mut evicted);
        assert_eq!(a, Admitted { taken: capacity, evicted: 0 }, "capacity {capacity}");
        assert_eq!(rx.len(), capacity);
        assert_eq!(one_dequeue(&mut rx, capacity + 10), &offered[..capacity]);
        let s = rx.stats();
        assert_eq!(s.dropped_newest, 10);
        assert!(conserved(&s), "{s:?}");
    }
}

#[test]
fn fifo_order_survives_many_wraps() {
    let (mut tx, mut rx) = spsc::<u32>(7, Overflow::DropNewest).unwrap();
    let mut next_in = 0u32;
    let mut next_out = 0u32;
    let mut out = [0u32; 5];
    let mut evicted = Vec::new();
    for round in 0..1000 {
        let burst: Vec<u32> = (next_in..next_in + (round % 6) as u32).collect();
        let a = tx.enqueue_burst(&burst, &mut evicted);
        next_in += a.taken as u32;
        let n = rx.dequeue_burst(&mut out[..(round % 5) + 1]);
        for &v in &out[..n] {
            assert_eq!(v, next_out);
            next_out += 1;
        }
    }
    assert!(evicted.is_empty());
}

#[test]
fn one_slot_ring_is_bufferless_with_tail_drop() {
    let (mut tx, mut rx) = spsc::<u32>(1, Overflow::DropNewest).unwrap();
    let mut evicted = Vec::new();
    assert_eq!(tx.enqueue_burst(&[1], &mut evicted).taken, 1);
    assert_eq!(tx.enqueue_burst(&[2, 3], &mut evicted).taken, 0);
    assert_eq!(one_dequeue(&mut rx, 4), [1]);
    assert!(one_dequeue(&mut rx, 4).is_empty());
    assert_eq!(rx.stats().dropped_newest, 2);
}

#[test]
fn drop_oldest_keeps_the_freshest_entries() {
    let (mut tx, mut rx) = spsc::<u32>(3, Overflow::DropOldest).unwrap();
    let mut evicted = Vec::new();
    assert_eq!(tx.enqueue_burst(&[1, 2], &mut evicted), Admitted { taken: 2, evicted: 0 });
    assert_eq!(tx.enqueue_burst(&[3, 4], &mut evicted), Admitted { taken: 2, evicted: 1 });
    assert_eq!(evicted, [1]);
    // A burst larger than the ring: its own oldest entries are evicted at once.
    evicted.clear();
    assert_eq!(tx.enqueue_burst(&[5, 6, 7, 8, 9], &mut evicted), Admitted { taken: 5, evicted: 5 });
    evicted.sort();
    assert_eq!(evicted, [2, 3, 4, 5, 6]);
    assert_eq!(one_dequeue(&mut rx, 8), [7, 8, 9]);
    let s = rx.stats();
    assert_eq!(s.dropped_oldest, 6);
    assert!(conserved(&s), "{s:?}");
}

#[test]
fn one_slot_drop_oldest_always_holds_the_newest() {
    let (mut tx, mut rx) = mpsc::<u32>(1, Overflow::DropOldest).unwrap();
    let mut evicted = Vec::new();
    for v in 0..10 {
        tx.enqueue_burst(&[v], &mut evicted);
    }
    assert_eq!(evicted, (0..9).collect::<Vec<_>>());
    assert_eq!(one_dequeue(&mut rx, 2), [9]);
}

#[test]
fn mpsc_drop_newest_refuses_what_does_not_fit() {
    let (mut a, mut rx) = mpsc::<u32>(4, Overflow::DropNewest).unwrap();
    let mut b = a.clone();
    let mut evicted = Vec::new();
    assert_eq!(a.enqueue_burst(&[1, 2, 3], &mut evicted).taken, 3);
    assert_eq!(b.enqueue_burst(&[10, 11], &mut evicted).taken, 1);
    assert_eq!(one_dequeue(&mut rx, 8), [1, 2, 3, 10]);
    assert_eq!(rx.stats().dropped_newest, 1);
}

#[test]
fn keyed_ring_replaces_in_place() {
    let (mut tx, mut rx) = keyed(8, 4).unwrap();
    let mut evicted = Vec::new();
    let a = tx.enqueue_burst(&[(1, 10), (2, 20), (1, 11), (3, 30), (2, 21)], &mut evicted);
    assert_eq!(a, Admitted { taken: 5, evicted: 2 });
    assert_eq!(evicted, [10, 20]);
    assert_eq!(rx.len(), 3);
    let mut out = [(0, 0); 8];
    let n = rx.dequeue_burst(&mut out);
    // Keys keep the place in line of their first queued entry, with their latest value.
    assert_eq!(&out[..n], &[(1, 11), (2, 21), (3, 30)]);
    let s = rx.stats();
    assert_eq!(s.replaced, 2);
    assert!(conserved(&s), "{s:?}");
}

#[test]
fn keyed_ring_refuses_bad_keys_and_overflowing_keys() {
    let (mut tx, mut rx) = keyed(2, 8).unwrap();
    let mut evicted = Vec::new();
    let a = tx.enqueue_burst(&[(9, 90), (0, 1), (1, 2), (2, 3), (0, 4)], &mut evicted);
    // key 9 is out of range, key 2 finds the two places taken, (0, 4) replaces (0, 1).
    assert_eq!(a.taken, 3);
    evicted.sort();
    assert_eq!(evicted, [1, 3, 90]);
    let mut out = [(0, 0); 4];
    let n = rx.dequeue_burst(&mut out);
    assert_eq!(&out[..n], &[(0, 4), (1, 2)]);
    let s = rx.stats();
    assert_eq!((s.invalid_key, s.dropped_newest, s.replaced), (1, 1, 1));
    assert!(conserved(&s), "{s:?}");
    // Once dequeued, a key is queued afresh.
    assert_eq!(tx.enqueue_burst(&[(2, 5)], &mut evicted).taken, 1);
    assert_eq!(rx.dequeue_burst(&mut out), 1);
    assert_eq!(out[0], (2, 5));
}

#[test]
fn keyed_dequeue_fills_large_outputs() {
    let (mut tx, mut rx) = keyed(500, 500).unwrap();
    let offered: Vec<(u32, u32)> = (0..500).map(|k| (k, k + 1000)).collect();
    let mut evicted = Vec::new();
    assert_eq!(tx.enqueue_burst(&offered, &mut evicted).taken, 500);
    let mut out = vec![(0, 0); 600];
    assert_eq!(rx.dequeue_burst(&mut out), 500);
    assert_eq!(&out[..500], &offered[..]);
}

#[test]
fn policies_parse_and_print() {
    for p in [Overflow::DropNewest, Overflow::DropOldest] {
        assert_eq!(p.name().parse::<Overflow>().unwrap(), p);
    }
    assert!("fifo".parse::<Overflow>().unwrap_err().to_string().contains("drop-newest"));
}
