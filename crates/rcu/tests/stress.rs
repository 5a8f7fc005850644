//! Many readers and writers on real threads, under every policy. Every retired node is poisoned
//! by its destructor before its memory is freed, and readers check, before and after lingering
//! on a reference, that they never see poison: a use after free would show as poison (or, under
//! valgrind, as an invalid read).
//!
//! `KAIROS_STRESS_SCALE` (default 1.0) scales the number of replacements; CI runs a small scale
//! under valgrind memcheck.
#![cfg(not(loom))]

use kairos_rcu::{Domain, DomainConfig, RcuCell, ReclaimPolicy};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const POISON: u64 = 0xdead_dead_dead_dead;
const CELLS: usize = 4;
const READERS: usize = 4;
const WRITERS: usize = 2;

struct Node {
    /// A value and its complement: a torn or poisoned node breaks the pair.
    value: AtomicU64,
    check: AtomicU64,
    _payload: [u64; 30],
}

impl Node {
    fn new(value: u64) -> Self {
        Self { value: AtomicU64::new(value), check: AtomicU64::new(!value), _payload: [value; 30] }
    }

    fn verify(&self) -> u64 {
        let value = self.value.load(Ordering::Relaxed);
        let check = self.check.load(Ordering::Relaxed);
        assert_ne!(value, POISON, "a reader saw a freed node");
        assert_eq!(check, !value, "a reader saw a torn or freed node");
        value
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.value.store(POISON, Ordering::Relaxed);
        self.check.store(POISON, Ordering::Relaxed);
    }
}

fn scale() -> f64 {
    std::env::var("KAIROS_STRESS_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

fn stress(policy: ReclaimPolicy, replaces_per_writer: usize) {
    let replaces = ((replaces_per_writer as f64 * scale()) as usize).max(10);
    let config = DomainConfig { high_watermark: 4_096, ..DomainConfig::with_policy(policy) };
    let domain = Domain::new(config).unwrap();
    let cells: Arc<Vec<RcuCell<Node>>> =
        Arc::new((0..CELLS).map(|i| RcuCell::new(&domain, Node::new(i as u64))).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    // Writers start once every reader is registered, so the readers really race them.
    let online = Arc::new(std::sync::Barrier::new(READERS + 1));

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (domain, cells, stop, reads, online) = (
                domain.clone(),
                Arc::clone(&cells),
                Arc::clone(&stop),
                Arc::clone(&reads),
                Arc::clone(&online),
            );
            std::thread::spawn(move || {
                let mut handle = domain.register(format!("reader-{r}")).unwrap();
                online.wait();
                let mut last = [0u64; CELLS];
                let mut iteration = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for (i, cell) in cells.iter().enumerate() {
                        let node = cell.read(&handle);
                        let value = node.verify();
                        // Linger on the reference, then check it again.
                        for _ in 0..(iteration % 64) {
                            std::hint::spin_loop();
                        }
                        assert_eq!(node.verify(), value);
                        assert!(value >= last[i], "cell {i} went back from {} to {value}", last[i]);
                        last[i] = value;
                    }
                    handle.quiescent();
                    iteration += 1;
                    if iteration.is_multiple_of(1_000) {
                        handle.offline_while(|| std::thread::sleep(Duration::from_micros(50)));
                    }
                    if iteration.is_multiple_of(5_000) {
                        // Leave and come back: slot reuse under load.
                        drop(handle);
                        handle = domain.register(format!("reader-{r}")).unwrap();
                    }
                }
                reads.fetch_add(iteration, Ordering::Relaxed);
            })
        })
        .collect();
    online.wait();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let cells = Arc::clone(&cells);
            std::thread::spawn(move || {
                for n in 0..replaces {
                    // Each cell has one writer, so its values only grow.
                    let cell = &cells[w + WRITERS * (n % (CELLS / WRITERS))];
                    let value = CELLS as u64 + n as u64;
                    if let Err(full) = cell.replace(Node::new(value)) {
                        panic!("default OnFull::Synchronize never refuses: {full}");
                    }
                }
            })
        })
        .collect();

    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(reads.load(Ordering::Relaxed) > 0);
    // With every reader gone, all grace periods end: what is left can be reclaimed here.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while domain.pending() > 0 && std::time::Instant::now() < deadline {
        domain.reclaim(usize::MAX, None);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(domain.pending(), 0, "{policy:?}: callbacks left behind");
    let stats = domain.stats();
    assert_eq!(stats.callbacks_deferred, (replaces * WRITERS) as u64, "{policy:?}: {stats:?}");
    assert!(stats.peak_pending <= 4_096, "{policy:?}: backlog exceeded the watermark: {stats:?}");
    drop(cells);
    drop(domain);
}

#[test]
fn stress_inline() {
    stress(ReclaimPolicy::Inline, 200_000);
}

#[test]
fn stress_throttle() {
    stress(ReclaimPolicy::Throttle { max_batch: 16, budget: Duration::from_micros(20) }, 200_000);
}

#[test]
fn stress_offload() {
    stress(ReclaimPolicy::Offload, 200_000);
}

#[test]
fn stress_adaptive() {
    stress(ReclaimPolicy::Adaptive { max_budget: Duration::from_micros(20) }, 200_000);
}

#[test]
fn stress_direct() {
    // Every replace waits for a grace period: fewer of them.
    stress(ReclaimPolicy::Direct, 5_000);
}
