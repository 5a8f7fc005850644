//! Closed forms of the average and peak age of single-server queues, in units of the mean
//! service time `1/mu`, as functions of the load `rho = lambda / mu`.
//!
//! Sources: Kaul, Yates, Gruteser, "Real-time status: how often should one update?" (INFOCOM
//! 2012) for M/M/1, M/D/1 and D/M/1 FCFS; Costa, Codreanu, Ephremides, "On the age of information
//! in status update systems with packet management" (IEEE T-IT 62(4), 2016) for M/M/1/1,
//! M/M/1/2 and M/M/1/2* and the M/M/1 peak age; Yates and Kaul (IEEE T-IT 65(3), 2019) for LCFS
//! with preemption.

use crate::{Arrival, Discipline, Service};

/// M/M/1 FCFS, infinite buffer (`rho < 1`).
pub fn mm1_fcfs_avg(rho: f64) -> f64 {
    1.0 + 1.0 / rho + rho * rho / (1.0 - rho)
}

/// M/M/1 FCFS, infinite buffer: the average peak age (`rho < 1`).
pub fn mm1_fcfs_peak(rho: f64) -> f64 {
    1.0 + 1.0 / rho + rho / (1.0 - rho)
}

/// M/D/1 FCFS (`rho < 1`).
pub fn md1_fcfs_avg(rho: f64) -> f64 {
    1.0 / (2.0 * (1.0 - rho)) + 0.5 + (1.0 - rho) * rho.exp() / rho
}

/// D/M/1 FCFS (`rho < 1`): `1/(2 rho) + 1/(1 - beta)` with `beta = exp(-(1 - beta)/rho)`.
pub fn dm1_fcfs_avg(rho: f64) -> f64 {
    // The fixed point in (0, 1) is attracting from below; 0 converges to it for rho < 1.
    let mut beta: f64 = 0.0;
    for _ in 0..10_000 {
        let next = (-(1.0 - beta) / rho).exp();
        if (next - beta).abs() < 1e-15 {
            break;
        }
        beta = next;
    }
    1.0 / (2.0 * rho) + 1.0 / (1.0 - beta)
}

/// D/D/1 (`rho <= 1`): every update waits for nothing, age is `S + d/2`.
pub fn dd1_avg(rho: f64) -> f64 {
    1.0 + 1.0 / (2.0 * rho)
}

/// M/M/1/1: arrivals while the server is busy are discarded.
pub fn mm11_avg(rho: f64) -> f64 {
    1.0 + 1.0 / rho + rho / (1.0 + rho)
}

/// M/M/1/1: the average peak age.
pub fn mm11_peak(rho: f64) -> f64 {
    2.0 + 1.0 / rho
}

/// M/M/1/2: one waiting place, arrivals finding it taken are discarded.
pub fn mm12_avg(rho: f64) -> f64 {
    1.0 + 1.0 / rho + 2.0 * rho * rho / (1.0 + rho + rho * rho)
}

/// M/M/1/2*: one waiting place, a new arrival replaces the waiting update.
pub fn mm12_star_avg(rho: f64) -> f64 {
    let r2 = rho * rho;
    1.0 + 1.0 / rho + r2 * (1.0 + 3.0 * rho + r2) / ((1.0 + rho + r2) * (1.0 + rho) * (1.0 + rho))
}

/// M/M/1 LCFS with preemption in service.
pub fn lcfs_preemptive_avg(rho: f64) -> f64 {
    1.0 + 1.0 / rho
}

/// M/M/1 LCFS with preemption in service: the average peak age.
pub fn lcfs_preemptive_peak(rho: f64) -> f64 {
    1.0 + 1.0 / rho + 1.0 / (1.0 + rho)
}

/// Periodic batches of `k` updates stamped together, every `k / rate`, each taking `service`
/// (constant, the batch's first update leaving after `service`): `S + k / (2 rate)`.
pub fn batch_avg(service: f64, k: f64, rate: f64) -> f64 {
    service + k / (2.0 * rate)
}

/// A user receiving a share `p` of a constant-rate stream of `rate` packets per unit time,
/// delivered after a constant `delay` (Bernoulli-thinned lattice): `S + (1/R)(1/p - 1/2)`.
pub fn zipf_user_avg(delay: f64, rate: f64, p: f64) -> f64 {
    delay + (1.0 / p - 0.5) / rate
}

/// The closed-form (average, peak) age of a configuration, where one is known.
pub fn known(
    arrival: Arrival,
    service: Service,
    discipline: Discipline,
    rho: f64,
) -> Option<(f64, Option<f64>)> {
    use Arrival::{Periodic, Poisson};
    use Discipline::*;
    use Service::{Det, Exp};
    if rho <= 0.0 {
        return None;
    }
    let stable = rho < 1.0;
    match (arrival, service, discipline) {
        (Poisson, Exp, Fcfs { buffer: None }) if stable => {
            Some((mm1_fcfs_avg(rho), Some(mm1_fcfs_peak(rho))))
        }
        (Poisson, Det, Fcfs { buffer: None }) if stable => Some((md1_fcfs_avg(rho), None)),
        (Periodic, Exp, Fcfs { buffer: None }) if stable => Some((dm1_fcfs_avg(rho), None)),
        (Periodic, Det, Fcfs { .. } | DropOldest { .. } | KeepLatest | Bufferless | LcfsPreemptive)
            if stable =>
        {
            Some((dd1_avg(rho), Some(1.0 + 1.0 / rho)))
        }
        (Poisson, Exp, Bufferless | Fcfs { buffer: Some(0) }) => Some((mm11_avg(rho), Some(mm11_peak(rho)))),
        (Poisson, Exp, Fcfs { buffer: Some(1) }) => Some((mm12_avg(rho), None)),
        (Poisson, Exp, KeepLatest | DropOldest { buffer: 1 }) => Some((mm12_star_avg(rho), None)),
        (Poisson, Exp, DropOldest { buffer: 0 }) => Some((mm11_avg(rho), Some(mm11_peak(rho)))),
        (Poisson, Exp, LcfsPreemptive) => Some((lcfs_preemptive_avg(rho), Some(lcfs_preemptive_peak(rho)))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test vectors at rho = 0.5 and 1.5 (mu = 1), from the literature's formulas evaluated
    /// independently.
    #[test]
    fn formulas_match_published_vectors() {
        let close = |a: f64, b: f64| (a - b).abs() < 5e-4;
        assert!(close(mm1_fcfs_avg(0.5), 3.5));
        assert!(close(md1_fcfs_avg(0.5), 3.1487));
        assert!(close(dm1_fcfs_avg(0.5), 2.2550), "{}", dm1_fcfs_avg(0.5));
        assert!(close(mm11_avg(0.5), 3.3333));
        assert!(close(mm12_star_avg(0.5), 3.1746));
        assert!(close(mm12_avg(0.5), 3.2857));
        assert!(close(lcfs_preemptive_avg(0.5), 3.0));
        assert!(close(mm11_avg(1.5), 2.2667));
        assert!(close(mm12_star_avg(1.5), 2.2540));
        assert!(close(mm12_avg(1.5), 2.6140));
        assert!(close(lcfs_preemptive_avg(1.5), 1.6667));
    }
}
