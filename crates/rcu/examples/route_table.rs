//! A packet loop reads a routing table of 10,000 routes while a control thread replaces the
//! whole table 2,000 times. The loop announces a quiescent state once per burst of 32 lookups,
//! as a poll-mode data plane would. Run once with `Inline` reclamation (the reader that passes a
//! quiescent state frees what is due, as most epoch schemes do) and once with `Offload` (a
//! reclaimer thread frees it): the loop's slow bursts show who paid for the frees (freeing a
//! table of 10,000 entries takes tens of microseconds). On a shared machine the very slowest
//! burst is the machine's (a preempted vCPU), so the 99.99th percentile is printed beside it.
//!
//! ```text
//! cargo run --release -p kairos-rcu --example route_table
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use kairos_rcu::{Domain, RcuCell, ReclaimPolicy};

const ROUTES: u32 = 10_000;
const UPDATES: u32 = 2_000;

/// A destination's next hop: an interface number.
type Table = HashMap<u32, u16>;

fn main() {
    for policy in [ReclaimPolicy::Inline, ReclaimPolicy::Offload] {
        if let Err(e) = run(policy) {
            eprintln!("route_table: {e}");
            std::process::exit(1);
        }
    }
}

fn run(policy: ReclaimPolicy) -> Result<(), Box<dyn std::error::Error>> {
    let domain = Domain::with_policy(policy)?;
    let table = Arc::new(RcuCell::new(&domain, table_version(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let packet_loop = {
        let (domain, table, stop) = (domain.clone(), Arc::clone(&table), Arc::clone(&stop));
        thread::spawn(move || -> Result<Vec<u32>, kairos_rcu::RegisterError> {
            let mut reader = domain.register("packet-loop")?;
            // Each burst's time, ns.
            let (mut bursts, mut dst) = (Vec::with_capacity(1 << 22), 0u32);
            while !stop.load(Ordering::Relaxed) {
                let burst = Instant::now();
                let routes = table.read(&reader);
                for _ in 0..32 {
                    dst = (dst + 7919) % ROUTES;
                    std::hint::black_box(routes.get(&dst));
                }
                // Nothing read above is held past this point: old tables may go.
                reader.quiescent();
                bursts.push(u32::try_from(burst.elapsed().as_nanos()).unwrap_or(u32::MAX));
            }
            Ok(bursts)
        })
    };
    for version in 1..=UPDATES {
        table.replace(table_version(version))?;
        thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let mut bursts = packet_loop.join().expect("the packet loop panicked")?;
    bursts.sort_unstable();
    let us = |q: f64| f64::from(bursts[((bursts.len() - 1) as f64 * q) as usize]) / 1e3;
    let stats = domain.stats();
    println!(
        "{:<8} {:>9} bursts of 32 lookups: median {:.2} us, p99.99 {:>7.1} us, max {:>8.1} us; \
         {} old tables freed, in {} calls of the packet loop",
        policy.name(),
        bursts.len(),
        us(0.5),
        us(0.9999),
        us(1.0),
        stats.callbacks_run,
        stats.reader_reclaim_calls
    );
    Ok(())
}

/// The whole table as the control plane computed it at `version`.
fn table_version(version: u32) -> Table {
    (0..ROUTES).map(|dst| (dst, ((dst + version) % 48) as u16)).collect()
}
