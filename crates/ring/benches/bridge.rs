//! Bridges moving 64-byte messages, beside `crossbeam_queue::ArrayQueue<[u8; 64]>` in the same
//! run (the baseline: an in-process queue of the same messages by value).
//!
//! - `bridge64/pair/*`: one thread sends a message and receives it back: the cost of the two
//!   copies and the position stores, no cache line crossing cores.
//! - `bridge64/transfer/*`: a producer thread sends 100,000 messages and the consumer thread
//!   receives them through 256 slots (throughput in messages). Each side yields its core when
//!   the queue is full or empty: on a machine with more runnable threads than cores (2 cores
//!   shared with builds, here) a side that spun would burn the time slice its peer needs, and
//!   the figures would measure the scheduler (a tenfold spread between runs). Noisy all the
//!   same: compare within one run. `bridge` has the default layout (`for_messages`: 128-byte
//!   slots, whole cache lines), `bridge-80B-slots` packs the slots (header and message only).

use std::hint::black_box;
use std::thread;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_queue::ArrayQueue;
use kairos_ring::bridge::{Bridge, BridgeLayout, HeapMemory};

const MESSAGE: usize = 64;
const SLOTS: usize = 256;
const N: u64 = 100_000;

fn bridge(slot_bytes: Option<usize>) -> Bridge<HeapMemory> {
    let layout = match slot_bytes {
        Some(bytes) => BridgeLayout::new(SLOTS, bytes).unwrap(),
        None => BridgeLayout::for_messages(SLOTS, MESSAGE).unwrap(),
    };
    Bridge::init(HeapMemory::for_layout(layout), layout).unwrap()
}

fn pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("bridge64/pair");
    g.throughput(Throughput::Elements(1));
    let message = [7u8; MESSAGE];
    let mut out = [0u8; MESSAGE];

    let (mut tx, mut rx) = bridge(None).split();
    g.bench_function("bridge", |b| {
        b.iter(|| {
            tx.try_send(black_box(&message), 1).unwrap();
            black_box(rx.try_recv(&mut out).unwrap());
            black_box(&out);
        })
    });

    let queue = ArrayQueue::<[u8; MESSAGE]>::new(SLOTS);
    g.bench_function("crossbeam-arrayqueue", |b| {
        b.iter(|| {
            queue.push(*black_box(&message)).unwrap();
            out = queue.pop().unwrap();
            black_box(&out);
        })
    });
    g.finish();
}

fn transfer(c: &mut Criterion) {
    let mut g = c.benchmark_group("bridge64/transfer");
    g.throughput(Throughput::Elements(N));
    g.sample_size(20);

    for (name, slot_bytes) in [("bridge", None), ("bridge-80B-slots", Some(80))] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let (mut tx, mut rx) = bridge(slot_bytes).split();
                thread::scope(|s| {
                    s.spawn(move || {
                        let mut message = [0u8; MESSAGE];
                        let mut next = 0;
                        while next < N {
                            message[..8].copy_from_slice(&next.to_ne_bytes());
                            if tx.try_send(&message, next).is_ok() {
                                next += 1;
                            } else {
                                thread::yield_now();
                            }
                        }
                    });
                    let mut got = 0;
                    let mut out = [0u8; MESSAGE];
                    while got < N {
                        if rx.try_recv(&mut out).unwrap().is_some() {
                            black_box(&out);
                            got += 1;
                        } else {
                            thread::yield_now();
                        }
                    }
                });
            })
        });
    }

    g.bench_function("crossbeam-arrayqueue", |b| {
        b.iter(|| {
            let queue = ArrayQueue::<[u8; MESSAGE]>::new(SLOTS);
            thread::scope(|s| {
                s.spawn(|| {
                    let mut message = [0u8; MESSAGE];
                    let mut next = 0u64;
                    while next < N {
                        message[..8].copy_from_slice(&next.to_ne_bytes());
                        if queue.push(message).is_ok() {
                            next += 1;
                        } else {
                            thread::yield_now();
                        }
                    }
                });
                let mut got = 0;
                while got < N {
                    if let Some(out) = queue.pop() {
                        black_box(&out);
                        got += 1;
                    } else {
                        thread::yield_now();
                    }
                }
            });
        })
    });
    g.finish();
}

criterion_group!(benches, pair, transfer);
criterion_main!(benches);
