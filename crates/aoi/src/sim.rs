//! A discrete-event simulator of one updating source through one server, on the virtual clock.
//!
//! Updates arrive (Poisson or periodic, optionally in batches stamped together), are served one
//! at a time (exponential or deterministic service) under a queue discipline, and are delivered
//! to a monitor whose age [`kairos_metrics::AgeProcess`] integrates, reading a
//! [`kairos_metrics::VirtualClock`] that the simulator moves from event to event. The same age
//! code measures the real forwarder, so agreement with the closed forms checks both.

use std::collections::VecDeque;

use kairos_metrics::{AgeProcess, Clock, VirtualClock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{Arrival, Discipline, Service};

/// Virtual nanoseconds in one mean service time: ages are reported in units of `1/mu`.
pub const UNIT_NS: f64 = 1_000_000.0;

/// One simulation's parameters. Rates are per unit of time; only their ratio matters.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// When updates arrive.
    pub arrival: Arrival,
    /// How long service takes.
    pub service: Service,
    /// What happens to an update that finds the server busy.
    pub discipline: Discipline,
    /// Arrival rate of batches (lambda).
    pub rate: f64,
    /// Service rate (mu).
    pub service_rate: f64,
    /// Updates per arrival, all stamped with the arrival time.
    pub batch: usize,
    /// Arrivals to simulate.
    pub arrivals: u64,
    /// Seed of the arrival and service draws: the same seed gives the same result.
    pub seed: u64,
}

/// What one simulation measured, in units of `1/mu`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimResult {
    /// Time-average age at the monitor.
    pub avg_age: f64,
    /// Average of the age's peaks (just before each delivery that lowered it).
    pub peak_age: f64,
    /// Updates delivered to the monitor.
    pub delivered: u64,
    /// Updates the discipline discarded.
    pub discarded: u64,
}

/// Draws from an exponential distribution of the given mean (inverse CDF).
fn exponential(rng: &mut StdRng, mean: f64) -> f64 {
    let u: f64 = rng.random();
    -mean * (1.0 - u).ln()
}

/// Runs one simulation of `config.arrivals` arrivals.
pub fn simulate(config: &SimConfig) -> SimResult {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let clock = VirtualClock::new();
    let mean_gap = UNIT_NS * config.service_rate / config.rate;
    let mean_service = UNIT_NS;
    let next_gap = |rng: &mut StdRng| -> u64 {
        let gap = match config.arrival {
            Arrival::Poisson => exponential(rng, mean_gap),
            Arrival::Periodic => mean_gap,
        };
        (gap.round() as u64).max(1)
    };
    let next_service = |rng: &mut StdRng| -> u64 {
        let s = match config.service {
            Service::Exp => exponential(rng, mean_service),
            Service::Det => mean_service,
        };
        (s.round() as u64).max(1)
    };

    let mut age = AgeProcess::new(0);
    // (generation time, completion time) of the update in service.
    let mut in_service: Option<(u64, u64)> = None;
    let mut waiting: VecDeque<u64> = VecDeque::new();
    let mut next_arrival = next_gap(&mut rng);
    let mut arrived = 0;
    let mut discarded = 0u64;
    let mut delivered = 0u64;

    loop {
        let departure = in_service.map(|(_, done)| done);
        let arrival_due = arrived < config.arrivals;
        // Departures first on ties, so a periodic system at exactly full load does not discard.
        let take_departure = match departure {
            Some(done) => !arrival_due || done <= next_arrival,
            None => false,
        };
        if take_departure {
            let (generated, done) = in_service.take().expect("a departure needs an update in service");
            clock.set(done);
            age.deliver(generated, clock.now_ns());
            delivered += 1;
            let next = match config.discipline {
                Discipline::KeepLatest => waiting.pop_back(),
                _ => waiting.pop_front(),
            };
            if let Some(generated) = next {
                in_service = Some((generated, clock.now_ns() + next_service(&mut rng)));
            }
            continue;
        }
        if !arrival_due {
            break;
        }
        clock.set(next_arrival);
        let now = clock.now_ns();
        arrived += 1;
        next_arrival = now + next_gap(&mut rng);
        for _ in 0..config.batch {
            if in_service.is_none() {
                in_service = Some((now, now + next_service(&mut rng)));
                continue;
            }
            match config.discipline {
                Discipline::Fcfs { buffer } => {
                    if buffer.is_none_or(|b| waiting.len() < b) {
                        waiting.push_back(now);
                    } else {
                        discarded += 1;
                    }
                }
                Discipline::Bufferless => discarded += 1,
                Discipline::LcfsPreemptive => {
                    in_service = Some((now, now + next_service(&mut rng)));
                    discarded += 1;
                }
                Discipline::DropOldest { buffer } => {
                    if waiting.len() < buffer {
                        waiting.push_back(now);
                    } else {
                        discarded += 1;
                        if buffer > 0 {
                            waiting.pop_front();
                            waiting.push_back(now);
                        }
                    }
                }
                Discipline::KeepLatest => {
                    discarded += waiting.len() as u64;
                    waiting.clear();
                    waiting.push_back(now);
                }
            }
        }
    }
    let summary = age.summary(clock.now_ns());
    SimResult {
        avg_age: summary.avg_age_ns / UNIT_NS,
        peak_age: summary.peak_age_ns / UNIT_NS,
        delivered,
        discarded,
    }
}
