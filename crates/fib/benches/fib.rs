//! FIB lookups per synchronisation, beside a plain `hashbrown` lookup in the same run.
//!
//! - `no-writer/*`: a reader looks up 64 users (a fixed pseudo-random sequence over 1,000) and
//!   passes a quiescent state, as the data thread does per burst.
//! - `one-writer/*`: the same while another thread updates random users as fast as it can (the
//!   control thread under an update storm). On a 2-core machine the writer has a core of its own
//!   only if nothing else runs.
//!
//! Targets: RCU and seqlock within 1.1x of `hashbrown` without a writer; with one writer at
//! least 5x the RW lock's read throughput.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hashbrown::HashMap;
use kairos_fib::{AddrTuple, Fib, FibReader, PapayaFib, RcuFib, RwLockFib, SeqlockFib};
use kairos_rcu::ReclaimPolicy;

const USERS: u32 = 1000;
const BURST: usize = 64;

fn sequence() -> Vec<u32> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..BURST)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(USERS)) as u32
        })
        .collect()
}

fn tuple(stamp: u64) -> AddrTuple {
    AddrTuple::new([2, 0, 0, 0, 0, 1], stamp)
}

fn bench_fib<F: Fib>(c: &mut Criterion, group: &str, fib: &F, label: &str, writer: bool) {
    let users = sequence();
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        if writer {
            s.spawn(|| {
                let mut stamp = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    fib.update((stamp.wrapping_mul(2_654_435_761) % u64::from(USERS)) as u32, tuple(stamp))
                        .unwrap();
                    stamp += 1;
                }
            });
        }
        let mut reader = fib.reader().unwrap();
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(BURST as u64));
        g.bench_function(label, |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for &u in black_box(&users) {
                    sum = sum.wrapping_add(reader.lookup(u).map_or(0, |t| t.stamp_ns));
                }
                reader.quiescent();
                black_box(sum)
            })
        });
        g.finish();
        drop(reader);
        stop.store(true, Ordering::Relaxed);
    });
}

fn baseline(c: &mut Criterion, group: &str) {
    let users = sequence();
    let map: HashMap<u32, AddrTuple> = (0..USERS).map(|u| (u, tuple(0))).collect();
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(BURST as u64));
    g.bench_function("hashbrown-unsynchronised", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for &u in black_box(&users) {
                sum = sum.wrapping_add(map.get(&u).map_or(0, |t| t.stamp_ns));
            }
            black_box(sum)
        })
    });
    g.finish();
}

fn all(c: &mut Criterion, group: &str, writer: bool) {
    if !writer {
        baseline(c, group);
    }
    let users = 0..USERS;
    bench_fib(c, group, &RcuFib::new(users.clone(), tuple(0), ReclaimPolicy::Direct).unwrap(), "rcu", writer);
    bench_fib(c, group, &SeqlockFib::new(users.clone(), tuple(0)), "seqlock", writer);
    bench_fib(c, group, &RwLockFib::new(users.clone(), tuple(0)), "rwlock", writer);
    bench_fib(c, group, &PapayaFib::new(users, tuple(0)), "papaya", writer);
}

fn no_writer(c: &mut Criterion) {
    all(c, "no-writer", false);
}

fn one_writer(c: &mut Criterion) {
    all(c, "one-writer", true);
}

criterion_group!(benches, no_writer, one_writer);
criterion_main!(benches);
