//! Workers that come and go with the load: a core allocator's congestion signal adds a worker,
//! idleness parks one, and each steering policy lives with the changes; on a virtual clock,
//! with the same simulated workers, dispatcher and policies as [`crate::latency`].
//!
//! # The allocator (policy, kept apart from the steering mechanism)
//!
//! - [`Signal::Shenango`]: every 5 us, a worker whose queue holds a request that was already
//!   queued at the previous check is congested (Shenango's IOKernel).
//! - [`Signal::Caladan`]: every 10 us, a worker whose oldest queued request has waited longer
//!   than a threshold (10 us by default) is congested (Caladan's queueing-delay signal).
//!
//! On congestion, one parked worker is granted per check; it becomes a target of the policy
//! `wake_ns` later (the core's wake-up). A worker with nothing queued or in service for
//! `park_idle_ns` parks (the policy's `leave`), down to one. Parking an idle worker strands
//! nothing: everything sent to it is done.
//!
//! # The load step
//!
//! Offered load (a fraction of every worker's capacity) follows [`StepConfig::phases`], by
//! default 10% -> 80% -> 10%. Latency is from the intended arrival to completion; windows of
//! `window_ns` report the mean of the workers in use (sampled at each check) and the p99 of the
//! requests that arrived in them.

use serde::Serialize;

use crate::dispatcher::{DEFAULT_GROUPS, Dispatcher};
use crate::latency::{Arrivals, Percentiles, Service, SimWorkers};
use crate::policy::{PolicyKind, WorkerId};

/// When a worker is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Signal {
    /// A request still queued since the last check, checked every 5 us.
    Shenango,
    /// The oldest queued request's wait over a threshold, checked every 10 us.
    Caladan,
}

impl Signal {
    /// Both signals, Shenango's first.
    pub const ALL: [Signal; 2] = [Signal::Shenango, Signal::Caladan];

    /// The name the command line takes and the reports print.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Shenango => "shenango",
            Signal::Caladan => "caladan",
        }
    }

    /// How often the allocator checks for congestion, ns of virtual time: 5,000 (Shenango),
    /// 10,000 (Caladan).
    pub fn interval_ns(self) -> f64 {
        match self {
            Signal::Shenango => 5_000.0,
            Signal::Caladan => 10_000.0,
        }
    }
}

/// One stretch of the load step.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Phase {
    /// Offered load, a fraction of all `max_workers`' capacity.
    pub load: f64,
    /// Its length, ns of virtual time.
    pub duration_ns: f64,
}

/// A load step's settings.
#[derive(Debug, Clone, Serialize)]
pub struct StepConfig {
    /// Workers the allocator may use (one is always active); offered load is a fraction of
    /// all of them.
    pub max_workers: usize,
    /// Flows the requests belong to, at least 1 (flow `k` weighs `1/(k+1)^zipf`).
    pub flows: usize,
    /// The flows' Zipf exponent (0: uniform).
    pub zipf: f64,
    /// Mean service time, ns.
    pub mean_service_ns: f64,
    /// How service times are drawn around `mean_service_ns`.
    pub service: Service,
    /// The load, stretch by stretch, in order; arrivals stop at the end of the last.
    pub phases: Vec<Phase>,
    /// Extra service time of a request whose flow's state is cold on its worker, ns.
    pub cold_ns: f64,
    /// The congestion signal that grants workers.
    pub signal: Signal,
    /// Caladan's queueing-delay threshold, ns (unused with [`Signal::Shenango`]).
    pub delay_threshold_ns: f64,
    /// From a grant until the worker takes packets, ns.
    pub wake_ns: f64,
    /// Idle time after which a worker parks, ns.
    pub park_idle_ns: f64,
    /// The reporting window, ns of virtual time.
    pub window_ns: f64,
    /// Seed of every draw (flows, service times, gaps): a seed replays a run.
    pub seed: u64,
}

impl StepConfig {
    /// The default step under `signal`: 16 workers, 10% -> 80% -> 10% for `phase_ms` (ms)
    /// each, exponential service of 10 us, 700,000 uniform flows, the calibrated cold miss
    /// ([`crate::latency::CALIBRATED_COLD_NS`]), a 10 us delay threshold, a 5 us wake-up,
    /// parking after 10 us idle, 10 ms windows, seed 1.
    pub fn default_step(phase_ms: f64, signal: Signal) -> Self {
        let phase = |load| Phase { load, duration_ns: phase_ms * 1e6 };
        Self {
            max_workers: 16,
            flows: 700_000,
            zipf: 0.0,
            mean_service_ns: 10_000.0,
            service: Service::Exponential,
            phases: vec![phase(0.1), phase(0.8), phase(0.1)],
            cold_ns: crate::latency::CALIBRATED_COLD_NS,
            signal,
            delay_threshold_ns: 10_000.0,
            wake_ns: 5_000.0,
            park_idle_ns: 10_000.0,
            window_ns: 10e6,
            seed: 1,
        }
    }

    /// The phase that time `t_ns` falls in (`None`: past the last).
    fn phase_at(&self, t_ns: f64) -> Option<usize> {
        let mut end = 0.0;
        self.phases.iter().position(|p| {
            end += p.duration_ns;
            t_ns < end
        })
    }

    fn load_at(&self, t_ns: f64) -> Option<f64> {
        self.phase_at(t_ns).map(|i| self.phases[i].load)
    }
}

/// One window of the step.
#[derive(Debug, Clone, Serialize)]
pub struct StepWindow {
    /// Its start, ms of virtual time.
    pub start_ms: f64,
    /// The offered load at its start, a fraction 0-1 of all `max_workers`' capacity (0 past
    /// the last phase).
    pub load: f64,
    /// Workers in use, the mean over the allocator's checks in the window (0 when none fell
    /// in it).
    pub workers: f64,
    /// p99 latency of the requests that arrived in it, us (0 when none did).
    pub p99_us: f64,
    /// Requests that arrived in it (and completed).
    pub requests: u64,
}

/// A policy's run through the step.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// The policy's name ([`PolicyKind::name`]).
    pub policy: &'static str,
    /// The congestion signal's name ([`Signal::name`]).
    pub signal: &'static str,
    /// Latency percentiles of every completed request (none discarded), us.
    pub latency_us: Percentiles,
    /// p99 latency of the requests that arrived in each phase, us, in phase order.
    pub phase_p99_us: Vec<f64>,
    /// Workers in use, the mean over every check of the allocator in the run.
    pub mean_workers: f64,
    /// Workers granted (and taken on after their wake-up).
    pub joins: u64,
    /// Workers parked.
    pub leaves: u64,
    /// Requests completed before an earlier one of their flow.
    pub reordered: u64,
    /// Requests that found their flow's state cold, a fraction 0-1 of those completed.
    pub cold_fraction: f64,
    /// The run window by window ([`StepConfig::window_ns`] each), in time order.
    pub windows: Vec<StepWindow>,
}

/// Simulates the step for `kind` until every request that arrived is done: worker 0 active
/// from the start, the others granted and parked by the allocator, rebalancing every
/// millisecond of virtual time, the hand-off on for `kairos` only, no hold limit.
pub fn run(config: &StepConfig, kind: PolicyKind) -> StepRow {
    let n = config.max_workers.max(1);
    let mut policy = kind.build_for(1, n);
    let mut d = Dispatcher::new(&mut *policy, kind == PolicyKind::Kairos, DEFAULT_GROUPS);
    d.set_hold_limit(usize::MAX);
    let mut sim = SimWorkers::new(n, config.flows, config.cold_ns);
    let mut active = vec![false; n];
    active[0] = true;
    let mut waking: Vec<(f64, usize)> = Vec::new();
    let mut idle_since: Vec<Option<f64>> = vec![None; n];
    idle_since[0] = Some(0.0);
    let mut arrivals =
        Arrivals::new(config.flows, config.zipf, config.service, config.mean_service_ns, config.seed);
    let total_ns: f64 = config.phases.iter().map(|p| p.duration_ns).sum();
    let windows = (total_ns / config.window_ns).ceil().max(1.0) as usize;
    let mut window_latencies: Vec<Vec<f64>> = vec![Vec::new(); windows];
    let mut window_workers: Vec<(f64, u64)> = vec![(0.0, 0); windows];
    let mut phase_latencies: Vec<Vec<f64>> = vec![Vec::new(); config.phases.len()];
    let (mut joins, mut leaves) = (0u64, 0u64);
    let interval = config.signal.interval_ns();
    let (mut next_check, mut last_check) = (interval, 0.0f64);
    let mut next_rebalance = 1e6;
    let mut next_arrival = arrivals.gap_ns(rate(config, 0.0));
    let mut all = Vec::new();
    loop {
        let arrival = if next_arrival < total_ns { next_arrival } else { f64::INFINITY };
        let completion = sim.next_completion();
        let t_done = completion.map_or(f64::INFINITY, |c| c.1);
        let wake = waking.iter().map(|w| w.0).fold(f64::INFINITY, f64::min);
        let active_count = active.iter().filter(|&&a| a).count();
        let park = if active_count > 1 {
            (0..n)
                .filter(|&w| active[w])
                .filter_map(|w| idle_since[w].map(|t| (t + config.park_idle_ns, w)))
                .min_by(|a, b| a.0.total_cmp(&b.0))
        } else {
            None
        };
        let t_park = park.map_or(f64::INFINITY, |p| p.0);
        let check = if next_check < total_ns || completion.is_some() { next_check } else { f64::INFINITY };
        let t = arrival.min(t_done).min(wake).min(t_park).min(check);
        if !t.is_finite() {
            break;
        }
        if t == t_done {
            let Some((w, _)) = completion else { break };
            let r = sim.complete(w);
            let latency = sim.now_ns - r.arrival_ns;
            all.push(latency);
            let wi = ((r.arrival_ns / config.window_ns) as usize).min(windows - 1);
            window_latencies[wi].push(latency);
            if let Some(p) = config.phase_at(r.arrival_ns) {
                phase_latencies[p].push(latency);
            }
            d.poll(sim.now_ns as u64, &mut sim);
        } else if t == arrival {
            sim.now_ns = t;
            while sim.now_ns >= next_rebalance {
                d.policy_mut().rebalance(next_rebalance as u64);
                next_rebalance += 1e6;
            }
            let (hash, r) = arrivals.request(t);
            d.dispatch(hash, r, t as u64, &mut sim);
            next_arrival = t + arrivals.gap_ns(rate(config, t));
        } else if t == wake {
            sim.now_ns = t;
            let i = waking.iter().position(|w| w.0 == t).unwrap_or(0);
            let (_, w) = waking.swap_remove(i);
            active[w] = true;
            joins += 1;
            d.policy_mut().join(w as WorkerId);
            d.poll(t as u64, &mut sim);
        } else if t == t_park {
            sim.now_ns = t;
            if let Some((_, w)) = park {
                active[w] = false;
                leaves += 1;
                d.policy_mut().leave(w as WorkerId);
                d.poll(t as u64, &mut sim);
            }
        } else {
            sim.now_ns = t;
            let congested = (0..n).any(|w| {
                active[w]
                    && sim.queues[w].front().is_some_and(|r| match config.signal {
                        Signal::Shenango => r.queued_ns <= last_check,
                        Signal::Caladan => t - r.queued_ns > config.delay_threshold_ns,
                    })
            });
            if congested && let Some(w) = (0..n).find(|&w| !active[w] && !waking.iter().any(|x| x.1 == w)) {
                waking.push((t + config.wake_ns, w));
            }
            let wi = ((t / config.window_ns) as usize).min(windows - 1);
            // Only a wake or a park changes `active`, and this pass is neither.
            window_workers[wi].0 += active_count as f64;
            window_workers[wi].1 += 1;
            last_check = t;
            next_check += interval;
        }
        // Who is idle now (a send may have started a worker; a completion may have idled it).
        for w in 0..n {
            let idle = active[w] && sim.busy_until[w].is_none() && sim.queues[w].is_empty();
            idle_since[w] = match (idle, idle_since[w]) {
                (true, Some(since)) => Some(since),
                (true, None) => Some(sim.now_ns),
                (false, _) => None,
            };
        }
    }
    let completed = all.len().max(1);
    let samples: u64 = window_workers.iter().map(|w| w.1).sum();
    let mean_workers = window_workers.iter().map(|w| w.0).sum::<f64>() / samples.max(1) as f64;
    let windows = window_latencies
        .iter_mut()
        .zip(&window_workers)
        .enumerate()
        .map(|(i, (lat, &(sum, count)))| {
            let start = i as f64 * config.window_ns;
            StepWindow {
                start_ms: start / 1e6,
                load: config.load_at(start).unwrap_or(0.0),
                workers: if count > 0 { sum / count as f64 } else { 0.0 },
                p99_us: Percentiles::of_ns(lat).p99,
                requests: lat.len() as u64,
            }
        })
        .collect();
    StepRow {
        policy: kind.name(),
        signal: config.signal.name(),
        latency_us: Percentiles::of_ns(&mut all),
        phase_p99_us: phase_latencies.iter_mut().map(|l| Percentiles::of_ns(l).p99).collect(),
        mean_workers,
        joins,
        leaves,
        reordered: sim.reordered,
        cold_fraction: sim.cold as f64 / completed as f64,
        windows,
    }
}

/// Arrivals per ns at time `t`.
fn rate(config: &StepConfig, t: f64) -> f64 {
    let load = config.load_at(t).unwrap_or(config.phases.last().map_or(0.1, |p| p.load));
    (load * config.max_workers as f64 / config.mean_service_ns).max(1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_follow_the_load_up_and_down_and_the_hand_off_keeps_order() {
        let config = StepConfig::default_step(20.0, Signal::Shenango);
        let row = run(&config, PolicyKind::Kairos);
        assert_eq!(row.reordered, 0, "{row:?}");
        let at = |ms: f64| row.windows.iter().find(|w| w.start_ms == ms).map(|w| w.workers).unwrap_or(0.0);
        // 80% of 16 workers' capacity needs about 13 of them; 10% about 2.
        assert!(at(30.0) > 11.0, "high phase: {:?}", row.windows);
        assert!(at(10.0) < 6.0 && at(50.0) < 6.0, "low phases: {:?}", row.windows);
        assert!(row.joins > 10 && row.leaves > 10, "{row:?}");
    }

    #[test]
    fn hash_mod_reorders_when_workers_come_and_go() {
        // Few flows, so a flow often has a request in flight when the workers change.
        let mut config = StepConfig::default_step(20.0, Signal::Caladan);
        config.flows = 1_000;
        let row = run(&config, PolicyKind::HashMod);
        assert!(row.reordered > 0, "every change moves most flows: {row:?}");
    }
}
