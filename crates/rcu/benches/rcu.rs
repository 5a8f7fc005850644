//! Read-side and reclamation costs of `kairos-rcu`, beside the crates a user would otherwise
//! pick, measured in the same run.
//!
//! - `read/*`: one read of a shared value: a plain atomic load (the floor), `RcuCell::read`,
//!   `crossbeam-epoch` (pin + load), `arc-swap` (`load`), and `std::sync::RwLock` (read lock).
//! - `quiescent`: `ReaderHandle::quiescent` when no grace period is pending (the common case),
//!   and when one is (the store path).
//! - `reclaim/*`: throughput of `RcuCell::replace` with reclamation, per policy, with a reader
//!   thread passing quiescent states; beside crossbeam-epoch's `defer_destroy`. Reported per
//!   element: callbacks per second is the inverse.
//! - `offload_drain`: how fast the offload reclaimer runs callbacks (target: 5 M/s or more).
//!
//! `cargo bench -p kairos-rcu` runs them; `scripts/test` runs every bench once as a smoke test.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kairos_rcu::peer::{self, EpochCell};
use kairos_rcu::{Domain, DomainConfig, RcuCell, ReclaimPolicy};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Route {
    next_hop: u64,
}

fn reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("read");
    group.throughput(Throughput::Elements(1));

    let plain = AtomicU64::new(7);
    // Every read goes through `black_box(&container)`, so none is hoisted out of the loop.
    group.bench_function("atomic_load", |b| b.iter(|| black_box(black_box(&plain).load(Ordering::Acquire))));

    let domain = Domain::with_policy(ReclaimPolicy::Offload).unwrap();
    let cell = RcuCell::new(&domain, Route { next_hop: 7 });
    let reader = domain.register("bench").unwrap();
    group.bench_function("rcu_cell", |b| b.iter(|| black_box(black_box(&cell).read(&reader).next_hop)));

    let epoch_value = EpochCell::new(Route { next_hop: 7 });
    group.bench_function("crossbeam_epoch", |b| {
        b.iter(|| {
            let guard = peer::pin();
            black_box(epoch_value.read(&guard).next_hop)
        })
    });

    let swap = arc_swap::ArcSwap::from_pointee(Route { next_hop: 7 });
    group.bench_function("arc_swap", |b| b.iter(|| black_box(swap.load().next_hop)));

    let lock = RwLock::new(Route { next_hop: 7 });
    group.bench_function("std_rwlock", |b| {
        b.iter(|| black_box(lock.read().unwrap_or_else(|p| p.into_inner()).next_hop))
    });
    group.finish();
    drop(reader);
}

fn quiescent(c: &mut Criterion) {
    let mut group = c.benchmark_group("quiescent");
    group.throughput(Throughput::Elements(1));
    let domain = Domain::with_policy(ReclaimPolicy::Offload).unwrap();
    let mut reader = domain.register("bench").unwrap();
    group.bench_function("idle", |b| b.iter(|| reader.quiescent()));
    group.bench_function("grace_period_pending", |b| {
        b.iter_batched(
            || {
                domain.start();
            },
            |()| reader.quiescent(),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// A reader thread that passes a quiescent state every few microseconds until dropped.
struct BusyReader {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BusyReader {
    fn start(domain: &Domain) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, domain) = (Arc::clone(&stop), domain.clone());
        let thread = std::thread::spawn(move || {
            let mut reader = domain.register("busy").unwrap();
            while !stop2.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                reader.quiescent();
            }
        });
        Self { stop, thread: Some(thread) }
    }
}

impl Drop for BusyReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn reclaim(c: &mut Criterion) {
    let mut group = c.benchmark_group("reclaim");
    const BATCH: u64 = 1_000;
    group.throughput(Throughput::Elements(BATCH));
    let policies = [
        ("inline", ReclaimPolicy::Inline),
        ("throttle", ReclaimPolicy::Throttle { max_batch: 256, budget: Duration::from_micros(20) }),
        ("offload", ReclaimPolicy::Offload),
        ("adaptive", ReclaimPolicy::Adaptive { max_budget: Duration::from_micros(20) }),
        ("direct", ReclaimPolicy::Direct),
    ];
    for (name, policy) in policies {
        let domain =
            Domain::new(DomainConfig { high_watermark: 1 << 16, ..DomainConfig::with_policy(policy) })
                .unwrap();
        let cell = RcuCell::new(&domain, Route { next_hop: 0 });
        let _reader = BusyReader::start(&domain);
        // Per iteration: 1,000 replaces (each retiring the previous value), then wait until
        // they are all reclaimed, so the figure is end-to-end reclamation throughput.
        group.bench_function(name, |b| {
            b.iter(|| {
                for i in 0..BATCH {
                    let _ = cell.replace(Route { next_hop: i });
                }
                if !domain.barrier(Duration::from_secs(1)) {
                    eprintln!("reclaim/{name}: callbacks still pending after 1 s: {:?}", domain.stats());
                }
            })
        });
    }
    let value = EpochCell::new(Route { next_hop: 0 });
    group.bench_function("crossbeam_epoch", |b| {
        b.iter(|| {
            for i in 0..BATCH {
                let guard = peer::pin();
                value.replace(Route { next_hop: i }, &guard);
            }
            peer::pin().flush();
        })
    });
    group.finish();
}

/// The offload reclaimer's raw rate: 100,000 callbacks deferred at once, timed from deferral to
/// the last one run. Criterion times the whole drain per iteration.
fn offload_drain(c: &mut Criterion) {
    let mut group = c.benchmark_group("offload_drain");
    const N: usize = 100_000;
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(10);
    let domain = Domain::new(DomainConfig {
        high_watermark: 1 << 20,
        ..DomainConfig::with_policy(ReclaimPolicy::Offload)
    })
    .unwrap();
    group.bench_function("drop_256_byte_nodes", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let nodes: Vec<Box<[u64; 32]>> = (0..N).map(|i| Box::new([i as u64; 32])).collect();
                let start = Instant::now();
                domain.defer_drop_all(nodes).unwrap();
                assert!(domain.barrier(Duration::from_secs(10)));
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, reads, quiescent, reclaim, offload_drain);
criterion_main!(benches);
