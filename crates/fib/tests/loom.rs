//! Loom model of the per-entry seqlock: a reader racing two writes never returns a torn tuple
//! (the MAC of one write with the stamp of another), and never one older than a tuple it
//! returned before.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p kairos-fib --test loom --release`
#![cfg(loom)]

use kairos_fib::AddrTuple;
use kairos_fib::seqlock::SeqEntry;
use loom::sync::Arc;
use loom::thread;

/// Runs `f` under loom ([`kairos_sync::explore`]) with at most three preemptions a schedule.
fn model(f: impl Fn() + Sync + Send + 'static) {
    kairos_sync::explore(Some(3), f);
}

fn tuple(n: u8) -> AddrTuple {
    AddrTuple::new([n; 6], u64::from(n))
}

#[test]
fn reader_never_sees_a_torn_or_older_tuple() {
    model(|| {
        let entry = Arc::new(SeqEntry::new(tuple(0)));
        let writer = {
            let entry = Arc::clone(&entry);
            thread::spawn(move || {
                entry.write(tuple(1));
                entry.write(tuple(2));
            })
        };
        // The reader runs in a spawned thread: loom 0.7 explored a single schedule when the
        // model's main thread took part.
        let reader = {
            let entry = Arc::clone(&entry);
            thread::spawn(move || {
                let first = entry.read();
                assert_eq!(first, tuple(first.stamp_ns as u8), "torn: {first:?}");
                let second = entry.read();
                assert_eq!(second, tuple(second.stamp_ns as u8), "torn: {second:?}");
                assert!(second.stamp_ns >= first.stamp_ns);
            })
        };
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!(entry.read(), tuple(2));
    });
}

#[test]
fn two_writers_take_turns() {
    model(|| {
        let entry = Arc::new(SeqEntry::new(tuple(0)));
        let writers: Vec<_> = [1u8, 2]
            .into_iter()
            .map(|n| {
                let entry = Arc::clone(&entry);
                thread::spawn(move || entry.write(tuple(n)))
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let last = entry.read();
        assert!(last == tuple(1) || last == tuple(2));
    });
}
