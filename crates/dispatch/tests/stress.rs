//! The dispatcher on real threads: one dispatcher (this thread) and three workers of a
//! [`WorkerPool`] (an SPSC ring each, and the flow table whose rows move with their flows),
//! while a worker leaves or joins every millisecond. Every packet carries its flow's sequence
//! number, which its worker checks against the flow's row. With the hand-off, no packet may be
//! out of sequence and no update of a row lost; without it (the published baselines), moved
//! flows are reordered, which shows the check can fail.
//!
//! `KAIROS_STRESS_SCALE` (default 1) scales the packets (2,000,000 at 1).

use std::time::{Duration, Instant};

use kairos_dispatch::dispatcher::DEFAULT_GROUPS;
use kairos_dispatch::pool::Packet;
use kairos_dispatch::{
    DispatchStats, Dispatcher, PolicyKind, PoolConfig, PoolReport, Steer, WorkerId, WorkerPool,
};

const WORKERS: usize = 3;
const FLOWS: usize = 4096;

fn scale() -> f64 {
    std::env::var("KAIROS_STRESS_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

/// Runs `packets` through `policy` with a worker leaving or joining every millisecond;
/// returns the dispatcher's and the pool's counts, and the changes made.
fn run(policy: impl Steer, order: bool, packets: u64) -> (DispatchStats, PoolReport, u64) {
    let mut pool =
        WorkerPool::start(&PoolConfig { workers: WORKERS, flows: FLOWS, ring: 1024, cores: Vec::new() })
            .unwrap();
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
        d.dispatch(u64::from(flow), Packet { flow, seq: seq[flow as usize] }, i, &mut pool);
        seq[flow as usize] += 1;
        if i.is_multiple_of(64) {
            d.poll(i, &mut pool);
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
        d.poll(packets, &mut pool);
        std::thread::yield_now();
    }
    let stats = d.stats();
    let report = pool.finish().expect("a worker panicked");
    assert_eq!(stats.enqueued, packets, "every packet reached a worker: {stats:?}");
    assert_eq!(report.processed, packets, "every packet was processed: {report:?}");
    (stats, report, changes)
}

#[test]
fn no_packet_is_reordered_through_a_change_of_workers_every_millisecond() {
    let packets = (2_000_000.0 * scale()) as u64;
    let (stats, r, changes) = run(&mut *PolicyKind::Kairos.build(WORKERS), true, packets);
    eprintln!(
        "kairos with the hand-off: {packets} packets, {changes} changes, {} hand-offs, {} state moves, {} out of sequence, {} lost updates",
        stats.handoffs, r.state_moves, r.out_of_sequence, r.lost_updates
    );
    assert!(changes >= 10, "the run lasted {changes} ms: too short to test anything");
    assert!(stats.handoffs > 0 && r.state_moves > 0);
    assert_eq!((r.out_of_sequence, r.lost_updates), (0, 0));
}

#[test]
fn without_the_hand_off_hash_mod_reorders() {
    let packets = (1_000_000.0 * scale()) as u64;
    let (_, r, changes) = run(&mut *PolicyKind::HashMod.build(WORKERS), false, packets);
    eprintln!(
        "hash-mod without it: {packets} packets, {changes} changes, {} out of sequence",
        r.out_of_sequence
    );
    assert!(changes >= 5);
    assert!(r.out_of_sequence > 0, "moved flows overtook packets still queued");
}
