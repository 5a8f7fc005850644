//! The RMDP policy's own cost, beside a plain (not inlined) function call: the check a handler
//! makes between iterations (`should_yield`, one flag load) and a whole dispatch (release what
//! is due, pick the next handler, account for and complete the iteration), with 12 handlers
//! registered as in the deadline experiment; and the clock reads the shell adds per dispatch.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kairos_rtu::analysis::HandlerSpec;
use kairos_rtu::policy::{Decision, Policy};

#[inline(never)]
fn plain_call(x: u64) -> u64 {
    x.wrapping_mul(3).wrapping_add(1)
}

fn handlers() -> Vec<HandlerSpec> {
    (0..12)
        .map(|i| HandlerSpec {
            name: format!("h{i}"),
            period_ns: 20_000_000 + 5_000_000 * (i % 6),
            batch: 16,
            iteration: 4,
            unit_cost_ns: 10_000,
        })
        .collect()
}

fn policy(c: &mut Criterion) {
    let mut group = c.benchmark_group("rmdp");
    group.bench_function("plain function call", |b| b.iter(|| plain_call(black_box(7))));
    let p = Policy::new(&handlers(), &[]);
    group.bench_function("iteration check (should_yield)", |b| b.iter(|| black_box(&p).should_yield()));
    let specs = handlers();
    let mut p = Policy::new(&specs, &[]);
    let mut now = 0u64;
    group.bench_function("dispatch (release, next, account, completed)", |b| {
        b.iter(|| {
            p.release(now);
            match p.next(now) {
                Decision::Run { handler, units } => {
                    let elapsed = units * specs[handler].unit_cost_ns;
                    now += elapsed;
                    p.account(handler, units, elapsed);
                    black_box(p.completed(handler, units, now));
                }
                Decision::Idle { until } => now = until,
            }
        })
    });
    // The most the shell adds to a dispatch: one monotonic clock read and two reads of the
    // thread's CPU time (a system call: no vDSO for CPU-time clocks); one of those two while
    // iterations follow each other.
    group.bench_function("shell clock reads (monotonic + 2 thread CPU time)", |b| {
        b.iter(|| {
            black_box(kairos_sys::clock::monotonic_ns());
            black_box(kairos_sys::thread::thread_cpu_time_ns());
            black_box(kairos_sys::thread::thread_cpu_time_ns())
        })
    });
    group.finish();
}

criterion_group!(benches, policy);
criterion_main!(benches);
