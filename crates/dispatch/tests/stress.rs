//! The dispatcher on real threads: one dispatcher (this thread) and three workers, each fed by
//! an SPSC ring (`kairos-ring`), while a worker leaves or joins every millisecond. Every
//! packet carries its flow's sequence number; a worker swaps it into the flow's slot and counts
//! a packet whose predecessor was not the one just before it (an overtaken or concurrent
//! packet). With the hand-off, none may be; without it (the published baselines), moved flows
//! are reordered, which shows the check can fail.
//!
//! `KAIROS_STRESS_SCALE` (default 1) scales the packets (2,000,000 at 1).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kairos_dispatch::dispatcher::DEFAULT_GROUPS;
use kairos_dispatch::{Dispatcher, PolicyKind, Steer, WorkerId, Workers};
use kairos_ring::{Consumer, Overflow, Producer, spsc};

#[derive(Clone, Copy, Debug, Default)]
struct Packet {
    flow: u32,
    seq: u32,
}

const WORKERS: usize = 3;
const FLOWS: usize = 4096;
const NONE: u32 = u32::MAX;

fn scale() -> f64 {
    std::env::var("KAIROS_STRESS_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

struct Rings {
    producers: Vec<Producer<Packet>>,
    done: Arc<Vec<AtomicU64>>,
    evicted: Vec<Packet>,
}

impl Workers<Packet> for Rings {
    fn send(&mut self, worker: WorkerId, packet: Packet) -> Result<(), Packet> {
        // A full ring waits for its worker: a drop would break the sequence the check reads.
        loop {
            let admitted = self.producers[worker as usize].enqueue_burst(&[packet], &mut self.evicted);
            if admitted.taken == 1 {
                return Ok(());
            }
            std::thread::yield_now();
        }
    }

    fn done(&self, worker: WorkerId) -> u64 {
        self.done[worker as usize].load(Ordering::Acquire)
    }
}

/// A worker: takes packets, checks each against its flow's last, counts it done (release).
fn work(
    mut ring: Consumer<Packet>,
    id: usize,
    done: &[AtomicU64],
    last: &[AtomicU32],
    reordered: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut burst = [Packet::default(); 32];
    loop {
        let n = ring.dequeue_burst(&mut burst);
        if n == 0 {
            if stop.load(Ordering::Acquire) && ring.is_empty() {
                return;
            }
            std::thread::yield_now();
            continue;
        }
        for p in &burst[..n] {
            let before = last[p.flow as usize].swap(p.seq, Ordering::AcqRel);
            let expected = if p.seq == 0 { NONE } else { p.seq - 1 };
            if before != expected {
                reordered.fetch_add(1, Ordering::Relaxed);
            }
            done[id].fetch_add(1, Ordering::Release);
        }
    }
}

/// Runs `packets` through `policy` with a worker leaving or joining every millisecond;
/// returns (reordered packets, hand-offs, moves made).
fn run(policy: impl Steer, order: bool, packets: u64) -> (u64, u64, u64) {
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..WORKERS).map(|_| AtomicU64::new(0)).collect());
    let last: Arc<Vec<AtomicU32>> = Arc::new((0..FLOWS).map(|_| AtomicU32::new(NONE)).collect());
    let reordered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    let mut threads = Vec::new();
    for id in 0..WORKERS {
        let (tx, rx) = spsc::<Packet>(1024, Overflow::DropNewest).unwrap();
        producers.push(tx);
        let (done, last, reordered, stop) = (done.clone(), last.clone(), reordered.clone(), stop.clone());
        threads.push(std::thread::spawn(move || work(rx, id, &done, &last, &reordered, &stop)));
    }
    let mut rings = Rings { producers, done: done.clone(), evicted: Vec::new() };
    let mut d = Dispatcher::new(policy, order, DEFAULT_GROUPS);
    let mut seq = vec![0u32; FLOWS];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next_change = Instant::now() + Duration::from_millis(1);
    let mut changes = 0u64;
    for i in 0..packets {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let flow = (x % FLOWS as u64) as u32;
        d.dispatch(u64::from(flow), Packet { flow, seq: seq[flow as usize] }, i, &mut rings);
        seq[flow as usize] += 1;
        if i.is_multiple_of(64) {
            d.poll(i, &mut rings);
            if Instant::now() >= next_change {
                // Worker 1 and 2 take turns leaving and coming back.
                let w = 1 + (changes / 2 % 2) as WorkerId;
                if changes.is_multiple_of(2) {
                    d.policy_mut().leave(w);
                } else {
                    d.policy_mut().join(w);
                }
                changes += 1;
                next_change += Duration::from_millis(1);
            }
        }
    }
    while d.held_now() > 0 {
        d.poll(packets, &mut rings);
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Release);
    for t in threads {
        t.join().expect("a worker panicked");
    }
    let stats = d.stats();
    assert_eq!(stats.enqueued, packets, "every packet reached a worker: {stats:?}");
    (reordered.load(Ordering::Relaxed), stats.handoffs, changes)
}

#[test]
fn no_packet_is_reordered_through_a_change_of_workers_every_millisecond() {
    let packets = (2_000_000.0 * scale()) as u64;
    let (reordered, handoffs, changes) = run(&mut *PolicyKind::Kairos.build(WORKERS), true, packets);
    eprintln!(
        "kairos with the hand-off: {packets} packets, {changes} changes, {handoffs} hand-offs, {reordered} reordered"
    );
    assert!(changes >= 10, "the run lasted {changes} ms: too short to test anything");
    assert!(handoffs > 0);
    assert_eq!(reordered, 0);
}

#[test]
fn without_the_hand_off_hash_mod_reorders() {
    let packets = (1_000_000.0 * scale()) as u64;
    let (reordered, _, changes) = run(&mut *PolicyKind::HashMod.build(WORKERS), false, packets);
    eprintln!("hash-mod without it: {packets} packets, {changes} changes, {reordered} reordered");
    assert!(changes >= 5);
    assert!(reordered > 0, "moved flows overtook packets still queued");
}
