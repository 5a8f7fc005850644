//! Loom models of the grace-period protocol: every interleaving (and every reordering the C11
//! memory model allows) of a reader and a writer on a few operations. A retired value is a
//! `loom::cell::UnsafeCell` that its destructor writes; loom reports any read of it by a reader
//! that is not ordered before that write, i.e. any use after free.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p kairos-rcu --test loom --release -- --nocapture`
//! (each model prints how many schedules it explored).
#![cfg(loom)]

use kairos_rcu::{Domain, DomainConfig, RcuCell, ReclaimPolicy};
use loom::cell::UnsafeCell;
use loom::thread;

/// A value whose destructor writes its memory, as freeing would reuse it.
struct Node {
    value: UnsafeCell<u64>,
}

impl Node {
    fn new(value: u64) -> Self {
        Self { value: UnsafeCell::new(value) }
    }

    fn get(&self) -> u64 {
        // SAFETY: the value is only written by `drop`, which the protocol under test orders after
        // every read of a reader that could reach the node; `with` reports to loom any read that
        // is not, so a protocol bug fails the model instead of going unseen.
        self.value.with(|p| unsafe { *p })
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: nothing else borrows the node; loom checks that no reader's
        // `get` races this write (the use after free the models look for).
        self.value.with_mut(|p| unsafe { *p = u64::MAX });
    }
}

// SAFETY: access to `value` is ordered by the RCU protocol under test; loom verifies it.
unsafe impl Sync for Node {}

/// Runs `f` under loom ([`kairos_sync::explore`]) and prints how many schedules it explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let n = kairos_sync::explore(None, f);
    println!("{name}: {n} schedules");
}

fn domain(policy: ReclaimPolicy) -> Domain {
    Domain::new(DomainConfig { max_readers: 2, ..DomainConfig::with_policy(policy) }).unwrap()
}

/// A reader holds a reference across the writer's replace and reclaim; then passes a quiescent
/// state and reads again.
fn reader_holds_across_replace(policy: ReclaimPolicy) {
    model(policy.name(), move || {
        let domain = domain(policy);
        let cell = loom::sync::Arc::new(RcuCell::new(&domain, Node::new(1)));
        // Under `Direct` the writer refuses to wait for a reader its own thread registered (that
        // wait could never end), so there the reader registers on the thread that reads, at any
        // point of the writer's replace.
        let reader = match policy {
            ReclaimPolicy::Direct => Err(domain.clone()),
            _ => Ok(domain.register("r").unwrap()),
        };
        let reader_cell = loom::sync::Arc::clone(&cell);
        let r = thread::spawn(move || {
            let mut reader = reader.unwrap_or_else(|domain| domain.register("r").unwrap());
            let first = reader_cell.read(&reader).get();
            assert!(first == 1 || first == 2, "saw {first}");
            reader.quiescent();
            let second = reader_cell.read(&reader).get();
            assert!(second >= first && second != u64::MAX, "saw {second} after {first}");
            reader.quiescent();
        });
        cell.replace(Node::new(2)).unwrap();
        domain.reclaim(usize::MAX, None);
        r.join().unwrap();
    });
}

#[test]
fn inline_reader_holding_a_reference_never_sees_it_freed() {
    reader_holds_across_replace(ReclaimPolicy::Inline);
}

#[test]
fn throttled_reader_holding_a_reference_never_sees_it_freed() {
    reader_holds_across_replace(ReclaimPolicy::Throttle {
        max_batch: 1,
        budget: std::time::Duration::from_secs(1),
    });
}

#[test]
fn direct_writer_waits_for_the_reader_before_freeing() {
    reader_holds_across_replace(ReclaimPolicy::Direct);
}

/// A reader coming online races with a writer that unlinks and frees: the Dekker case.
#[test]
fn a_reader_coming_online_never_reads_a_freed_value() {
    model("coming online", || {
        let domain = domain(ReclaimPolicy::Inline);
        let cell = loom::sync::Arc::new(RcuCell::new(&domain, Node::new(1)));
        let mut reader = domain.register("r").unwrap();
        let reader_cell = loom::sync::Arc::clone(&cell);
        let r = thread::spawn(move || {
            // Offline, then online again while the writer may be anywhere in replace + reclaim.
            drop(reader.offline());
            let seen = reader_cell.read(&reader).get();
            assert_ne!(seen, u64::MAX);
        });
        cell.replace(Node::new(2)).unwrap();
        domain.reclaim(usize::MAX, None);
        r.join().unwrap();
    });
}

/// Polled grace periods: a ticket never reports complete while a reader that was online when it
/// started has not passed a quiescent state.
#[test]
fn poll_never_completes_before_the_reader_is_quiescent() {
    model("poll", || {
        let domain = domain(ReclaimPolicy::Offload);
        let mut reader = domain.register("r").unwrap();
        let passed = loom::sync::Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let passed_reader = loom::sync::Arc::clone(&passed);
        let ticket = domain.start();
        let r = thread::spawn(move || {
            passed_reader.store(true, loom::sync::atomic::Ordering::Relaxed);
            reader.quiescent();
        });
        if domain.poll(ticket) {
            assert!(
                passed.load(loom::sync::atomic::Ordering::Relaxed),
                "completed before the quiescent state"
            );
        }
        r.join().unwrap();
        assert!(domain.poll(ticket));
    });
}
