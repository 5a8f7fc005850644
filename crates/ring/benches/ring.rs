//! Ring throughput per policy, beside `crossbeam_queue::ArrayQueue` in the same run.
//!
//! - `burst32/*`: one thread offers a burst of 32 indices and takes 32 back (a ring of 64, no
//!   overflow): the cost of the hand-off itself, per entry (throughput is in entries).
//! - `overload32/*`: the ring is full and every burst of 32 must displace 32 queued entries.
//! - `transfer/*`: a producer thread and a consumer thread move 100,000 indices in bursts of 32
//!   (on a 2-core machine the two threads share the cores with everything else: noisy).

use std::hint::black_box;
use std::thread;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_queue::ArrayQueue;
use kairos_ring::{Overflow, keyed, mpsc, spsc};

const BURST: usize = 32;

fn burst(c: &mut Criterion) {
    let mut g = c.benchmark_group("burst32");
    g.throughput(Throughput::Elements(BURST as u64));
    let items: Vec<u32> = (0..BURST as u32).collect();
    let mut out = [0u32; BURST];
    let mut evicted = Vec::with_capacity(BURST);

    for overflow in [Overflow::DropNewest, Overflow::DropOldest] {
        let (mut tx, mut rx) = spsc::<u32>(2 * BURST, overflow).unwrap();
        g.bench_function(format!("spsc-{overflow}"), |b| {
            b.iter(|| {
                tx.enqueue_burst(black_box(&items), &mut evicted);
                black_box(rx.dequeue_burst(&mut out))
            })
        });
        let (mut tx, mut rx) = mpsc::<u32>(2 * BURST, overflow).unwrap();
        g.bench_function(format!("mpsc-{overflow}"), |b| {
            b.iter(|| {
                tx.enqueue_burst(black_box(&items), &mut evicted);
                black_box(rx.dequeue_burst(&mut out))
            })
        });
    }

    let (mut tx, mut rx) = keyed(2 * BURST, 1000).unwrap();
    let keyed_items: Vec<(u32, u32)> = items.iter().map(|&i| (i * 31 % 1000, i)).collect();
    let mut keyed_out = [(0u32, 0u32); BURST];
    g.bench_function("keyed-keep-latest", |b| {
        b.iter(|| {
            tx.enqueue_burst(black_box(&keyed_items), &mut evicted);
            black_box(rx.dequeue_burst(&mut keyed_out))
        })
    });

    let queue = ArrayQueue::<u32>::new(2 * BURST);
    g.bench_function("crossbeam-arrayqueue", |b| {
        b.iter(|| {
            for &i in black_box(&items) {
                let _ = queue.push(i);
            }
            for slot in out.iter_mut() {
                *slot = queue.pop().unwrap_or(0);
            }
            black_box(&out);
        })
    });
    g.finish();
}

fn overload(c: &mut Criterion) {
    let mut g = c.benchmark_group("overload32");
    g.throughput(Throughput::Elements(BURST as u64));
    let items: Vec<u32> = (0..BURST as u32).collect();
    let mut evicted = Vec::with_capacity(BURST);

    let (mut tx, _rx) = spsc::<u32>(BURST, Overflow::DropOldest).unwrap();
    tx.enqueue_burst(&items, &mut evicted);
    g.bench_function("spsc-drop-oldest", |b| {
        b.iter(|| {
            evicted.clear();
            black_box(tx.enqueue_burst(black_box(&items), &mut evicted))
        })
    });

    let (mut tx, _rx) = keyed(BURST, BURST).unwrap();
    let keyed_items: Vec<(u32, u32)> = items.iter().map(|&i| (i, i)).collect();
    tx.enqueue_burst(&keyed_items, &mut evicted);
    g.bench_function("keyed-keep-latest", |b| {
        b.iter(|| {
            evicted.clear();
            black_box(tx.enqueue_burst(black_box(&keyed_items), &mut evicted))
        })
    });

    // ArrayQueue's own overwrite mode (`force_push`) is the nearest peer to drop-oldest.
    let queue = ArrayQueue::<u32>::new(BURST);
    for &i in &items {
        let _ = queue.push(i);
    }
    g.bench_function("crossbeam-arrayqueue-force-push", |b| {
        b.iter(|| {
            for &i in black_box(&items) {
                black_box(queue.force_push(i));
            }
        })
    });
    g.finish();
}

fn transfer(c: &mut Criterion) {
    const N: u32 = 100_000;
    let mut g = c.benchmark_group("transfer");
    g.throughput(Throughput::Elements(u64::from(N)));
    g.sample_size(20);
    g.bench_function("spsc-drop-newest", |b| {
        b.iter(|| {
            let (mut tx, mut rx) = spsc::<u32>(256, Overflow::DropNewest).unwrap();
            thread::scope(|s| {
                s.spawn(move || {
                    let mut next = 0;
                    let mut evicted = Vec::new();
                    let mut burst = [0u32; BURST];
                    while next < N {
                        let k = (N - next).min(BURST as u32);
                        for (i, slot) in burst[..k as usize].iter_mut().enumerate() {
                            *slot = next + i as u32;
                        }
                        next += tx.enqueue_burst(&burst[..k as usize], &mut evicted).taken as u32;
                    }
                });
                let mut got = 0;
                let mut out = [0u32; BURST];
                while got < N {
                    got += rx.dequeue_burst(&mut out) as u32;
                }
            });
        })
    });
    g.bench_function("crossbeam-arrayqueue", |b| {
        b.iter(|| {
            let queue = ArrayQueue::<u32>::new(256);
            thread::scope(|s| {
                s.spawn(|| {
                    let mut next = 0;
                    while next < N {
                        if queue.push(next).is_ok() {
                            next += 1;
                        }
                    }
                });
                let mut got = 0;
                while got < N {
                    if queue.pop().is_some() {
                        got += 1;
                    }
                }
            });
        })
    });
    g.finish();
}

criterion_group!(benches, burst, overload, transfer);
criterion_main!(benches);
