//! A sensor thread that produces faster than its consumer can keep up, through a ring of 8, once
//! with tail drop (DPDK's behaviour) and once with drop-oldest: how old the readings are that
//! the consumer gets, and what each ring dropped.
//!
//! ```text
//! cargo run --release -p kairos-ring --example freshest
//! ```
//! With tail drop a full ring keeps the oldest readings and refuses the new ones, so the consumer
//! works through stale data; with drop-oldest the ring holds the freshest eight offered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use kairos_ring::{Overflow, spsc};

/// Readings the producer offers, one every microsecond.
const READINGS: u64 = 200_000;
/// The consumer's time per reading: five times the producer's period.
const WORK: Duration = Duration::from_micros(5);

fn main() {
    for overflow in [Overflow::DropNewest, Overflow::DropOldest] {
        match run(overflow) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("freshest: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// One run through a ring of 8 with `overflow`; the line that reports it.
fn run(overflow: Overflow) -> Result<String, kairos_ring::RingError> {
    // A reading is the instant it was taken, in ns since `start`.
    let (mut producer, mut consumer) = spsc::<u64>(8, overflow)?;
    let start = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let sensor = {
        let done = Arc::clone(&done);
        thread::spawn(move || {
            // Readings the ring evicted to admit newer ones (drop-oldest); a packet path would
            // return their buffers to the pool here.
            let mut evicted = Vec::new();
            for i in 0..READINGS {
                let due = Duration::from_micros(i);
                while start.elapsed() < due {
                    std::hint::spin_loop();
                }
                producer.enqueue_burst(&[start.elapsed().as_nanos() as u64], &mut evicted);
                evicted.clear();
            }
            done.store(true, Ordering::Release);
            producer.stats()
        })
    };
    let (mut ages_us, mut burst) = (Vec::new(), [0u64; 8]);
    while !done.load(Ordering::Acquire) || !consumer.is_empty() {
        let n = consumer.dequeue_burst(&mut burst);
        for &taken_ns in &burst[..n] {
            ages_us.push((start.elapsed().as_nanos() as u64).saturating_sub(taken_ns) as f64 / 1e3);
            let until = Instant::now() + WORK;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }
    let stats = sensor.join().expect("the sensor thread panicked");
    ages_us.sort_by(f64::total_cmp);
    let pick = |q: f64| ages_us[((ages_us.len() - 1) as f64 * q) as usize];
    Ok(format!(
        "{:<12} consumed {:>6} of {} readings, age at consumption median {:>6.1} us, p99 {:>6.1} us; \
         refused {}, evicted {}",
        overflow.name(),
        ages_us.len(),
        READINGS,
        pick(0.5),
        pick(0.99),
        stats.dropped_newest,
        stats.dropped_oldest
    ))
}
