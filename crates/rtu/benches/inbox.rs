//! The inbox's cost per datagram against the crate one would otherwise use: bursts of 32
//! datagrams of 64 B pushed by one thread and drained by another through the inbox (two SPSC
//! rings of buffer indices over a fixed pool), and through two `crossbeam_queue::ArrayQueue`s
//! of owned buffers (full and free lists, the usual way to recycle buffers without a lock).
//! Both sides write and read every byte. Reported as throughput (datagrams per second).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_queue::ArrayQueue;
use kairos_rtu::inbox;

const BURST: u64 = 32;
const BYTES: usize = 64;
const POOL: usize = 256;

fn fill(buf: &mut [u8], seq: u64) -> usize {
    buf[..BYTES].fill(seq as u8);
    BYTES
}

fn read(d: &[u8]) -> u64 {
    d.iter().map(|&b| u64::from(b)).sum()
}

fn inbox_round_trips(n: u64) {
    let (mut ingress, mut inbox) = inbox(POOL, 2_048).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    let consumer = std::thread::spawn(move || {
        let mut got = 0u64;
        let mut sum = 0u64;
        while got < n {
            got += inbox.drain(BURST, |d| sum += read(d));
        }
        flag.store(true, Ordering::Release);
        black_box(sum)
    });
    let mut seq = 0u64;
    while seq < n {
        for _ in 0..BURST.min(n - seq) {
            if ingress.push_with(|b| Ok::<_, ()>(fill(b, seq))).unwrap() {
                seq += 1;
            }
        }
    }
    consumer.join().unwrap();
    assert!(done.load(Ordering::Acquire));
}

fn crossbeam_round_trips(n: u64) {
    let full: Arc<ArrayQueue<(Box<[u8]>, usize)>> = Arc::new(ArrayQueue::new(POOL));
    let free: Arc<ArrayQueue<Box<[u8]>>> = Arc::new(ArrayQueue::new(POOL));
    for _ in 0..POOL {
        let _ = free.push(vec![0u8; 2_048].into_boxed_slice());
    }
    let (full_rx, free_tx) = (Arc::clone(&full), Arc::clone(&free));
    let consumer = std::thread::spawn(move || {
        let mut got = 0u64;
        let mut sum = 0u64;
        while got < n {
            for _ in 0..BURST {
                let Some((buf, len)) = full_rx.pop() else { break };
                sum += read(&buf[..len]);
                let _ = free_tx.push(buf);
                got += 1;
            }
        }
        black_box(sum)
    });
    let mut seq = 0u64;
    while seq < n {
        for _ in 0..BURST.min(n - seq) {
            if let Some(mut buf) = free.pop() {
                let len = fill(&mut buf, seq);
                let _ = full.push((buf, len));
                seq += 1;
            }
        }
    }
    consumer.join().unwrap();
}

fn bench(c: &mut Criterion) {
    const N: u64 = 200_000;
    let mut group = c.benchmark_group("inbox_64B_bursts_of_32");
    group.throughput(Throughput::Elements(N));
    group.sample_size(20);
    group.bench_function("kairos_inbox", |b| b.iter(|| inbox_round_trips(N)));
    group.bench_function("crossbeam_array_queues", |b| b.iter(|| crossbeam_round_trips(N)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
