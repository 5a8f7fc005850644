//! The per-packet steering decision, each policy beside `hash-mod` (Shenango's) in the same
//! run, for 10^3 to 10^6 active flows (their hashes drawn uniformly, visited in a random
//! order, so the tables are touched as real traffic would touch them).
//!
//! - `pick/<policy>/<flows>`: the decision alone (hash to worker), 10 workers.
//! - `dispatch/<policy>/<flows>`: the decision plus the order check, the idle steering
//!   (`kairos`) and the enqueue of the packet on its worker's SPSC ring (`kairos-ring`), the
//!   rings drained (and counted done) and the dispatcher polled every 1,024 packets on the same
//!   thread, so the figure is the dispatcher's cost per packet.
//!
//! Throughput is in packets: criterion's time per element is the cost per packet.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kairos_dispatch::remap::flow_hashes;
use kairos_dispatch::{
    Buckets, Caladan, Calisto, Dispatcher, HashMod, Steer, WorkerId, Workers, buckets, caladan, calisto,
};
use kairos_ring::{Consumer, Overflow, Producer, spsc};

const WORKERS: usize = 10;
const BATCH: usize = 1_024;

/// The flows' hashes in a random visiting order, BATCH at a time.
fn traffic(flows: usize) -> Vec<u64> {
    let hashes = flow_hashes(flows, 7);
    let order = flow_hashes(64 * BATCH, 11);
    order.iter().map(|&r| hashes[(r % flows as u64) as usize]).collect()
}

struct Rings {
    producers: Vec<Producer<u64>>,
    consumers: Vec<Consumer<u64>>,
    evicted: Vec<u64>,
    done: Vec<u64>,
}

impl Workers<u64> for Rings {
    fn send(&mut self, worker: WorkerId, packet: u64) -> Result<(), u64> {
        let admitted = self.producers[worker as usize].enqueue_burst(&[packet], &mut self.evicted);
        if admitted.taken == 1 { Ok(()) } else { Err(packet) }
    }
    fn done(&self, worker: WorkerId) -> u64 {
        self.done[worker as usize]
    }
}

impl Rings {
    fn drain(&mut self) {
        let mut out = [0u64; 256];
        for (c, done) in self.consumers.iter_mut().zip(&mut self.done) {
            loop {
                let n = c.dequeue_burst(&mut out);
                if n == 0 {
                    break;
                }
                *done += n as u64;
            }
        }
    }
}

fn started<S: Steer>(mut policy: S) -> S {
    for w in 0..WORKERS as WorkerId {
        policy.join(w);
    }
    policy
}

fn bench_pick<S: Steer>(g: &mut BenchmarkGroup<'_, WallTime>, mut policy: S, packets: &[u64], flows: usize) {
    // Every flow seen once, so the calisto table holds them.
    for &h in packets {
        policy.pick(h, 0);
    }
    let name = policy.name();
    let mut at = 0;
    g.bench_with_input(BenchmarkId::new(name, flows), &flows, |b, _| {
        b.iter(|| {
            let batch = &packets[at..at + BATCH];
            at = (at + BATCH) % packets.len();
            let mut sum = 0u32;
            for &h in batch {
                sum = sum.wrapping_add(u32::from(policy.pick(black_box(h), 1).unwrap_or(0)));
            }
            black_box(sum)
        })
    });
}

fn bench_dispatch<S: Steer>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    policy: S,
    order: bool,
    packets: &[u64],
    flows: usize,
) {
    let name = policy.name();
    let mut d = Dispatcher::new(policy, order, 4_096);
    let (producers, consumers): (Vec<_>, Vec<_>) =
        (0..WORKERS).map(|_| spsc::<u64>(2 * BATCH, Overflow::DropNewest).unwrap()).unzip();
    let mut rings = Rings { producers, consumers, evicted: Vec::new(), done: vec![0; WORKERS] };
    let mut at = 0;
    g.bench_with_input(BenchmarkId::new(name, flows), &flows, |b, _| {
        b.iter(|| {
            let batch = &packets[at..at + BATCH];
            at = (at + BATCH) % packets.len();
            for &h in batch {
                d.dispatch(black_box(h), h, 1, &mut rings);
            }
            rings.drain();
            // Once a burst, as a dispatcher loop does: held groups, and the workers' counts
            // the idle steering of the next burst reads.
            d.poll(1, &mut rings);
        })
    });
}

fn steer(c: &mut Criterion) {
    let mut g = c.benchmark_group("pick");
    g.throughput(Throughput::Elements(BATCH as u64));
    for flows in [1_000usize, 10_000, 100_000, 1_000_000] {
        let packets = traffic(flows);
        bench_pick(&mut g, started(HashMod::new()), &packets, flows);
        bench_pick(&mut g, started(Calisto::new(calisto::DEFAULT_CAPACITY)), &packets, flows);
        bench_pick(&mut g, started(Caladan::new(caladan::SLOTS)), &packets, flows);
        bench_pick(&mut g, started(Buckets::new(buckets::DEFAULT_BUCKETS)), &packets, flows);
    }
    g.finish();

    let mut g = c.benchmark_group("dispatch");
    g.throughput(Throughput::Elements(BATCH as u64));
    for flows in [1_000usize, 1_000_000] {
        let packets = traffic(flows);
        bench_dispatch(&mut g, started(HashMod::new()), false, &packets, flows);
        bench_dispatch(&mut g, started(Buckets::new(buckets::DEFAULT_BUCKETS)), true, &packets, flows);
    }
    g.finish();
}

criterion_group!(benches, steer);
criterion_main!(benches);
