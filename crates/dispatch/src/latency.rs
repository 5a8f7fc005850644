//! Shenango's synthetic server on a virtual clock: the real [`Dispatcher`] and policies, with
//! simulated workers, so latency curves for many workers run on a machine with two cores.
//!
//! # The model
//!
//! - **Arrivals**: open-loop Poisson at `load x workers / mean service`; each request belongs to
//!   a flow drawn from a Zipf law (exponent 0: uniform), carries its flow's sequence number and
//!   a service time drawn from the distribution asked for ([`Service`]: Shenango's `constant`,
//!   `exponential`, `bimodal1` and `bimodal2`).
//! - **Steering**: each arrival goes through [`Dispatcher::dispatch`] at its arrival time, so the
//!   policy, its rebalancing (every millisecond of virtual time) and the hand-off are the code
//!   that runs on real threads.
//! - **Workers**: one FIFO queue each, serving one request at a time. A request whose flow's
//!   previous request was served by another worker finds its state cold there and costs
//!   `cold_ns` more (the cache miss the source's affinity avoids; the figure is an input, by
//!   default [`CALIBRATED_COLD_NS`], what `kairos dispatch cold` measured on real threads).
//! - **Latency**: from the arrival's *intended* time to its completion (an open loop has no
//!   coordinated omission); the first 10% of requests are discarded, as Shenango's loadgen does.
//!
//! Reordering is counted as requests completed before an earlier request of their flow.

use std::collections::VecDeque;

use serde::Serialize;

use crate::dispatcher::{Dispatcher, Workers};
use crate::policy::{PolicyKind, WorkerId};
use crate::skew::{Uniform, Zipf, flow_hash};

/// The default extra cost of a request whose flow's state another worker wrote last, ns: what
/// `kairos dispatch cold` measured on a 2-vCPU AMD EPYC KVM guest (a 64-byte state line fetched
/// from the other core's cache, one miss at a time: 64-66 ns more than a warm one, in three
/// runs). A flow's state that memory holds costs about 180 ns there.
pub const CALIBRATED_COLD_NS: f64 = 65.0;

/// A service-time distribution, by Shenango's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// Every request takes the mean.
    Constant,
    /// Exponential with the mean.
    Exponential,
    /// 90% at 0.5x the mean, 10% at 5.5x (Shenango's `bimodal1`).
    Bimodal,
    /// 99.9% at 0.5x the mean, 0.1% at 500.5x (Shenango's `bimodal2`).
    Heavy,
}

impl Service {
    /// Every distribution, lightest tail first.
    pub const ALL: [Service; 4] = [Service::Constant, Service::Exponential, Service::Bimodal, Service::Heavy];

    /// The name the command line takes (`--service`, `--services`) and the reports print.
    pub fn name(self) -> &'static str {
        match self {
            Service::Constant => "constant",
            Service::Exponential => "exponential",
            Service::Bimodal => "bimodal",
            Service::Heavy => "heavy",
        }
    }

    pub(crate) fn draw(self, mean_ns: f64, u: f64) -> f64 {
        match self {
            Service::Constant => mean_ns,
            Service::Exponential => -mean_ns * (1.0 - u).ln(),
            Service::Bimodal => mean_ns * if u < 0.9 { 0.5 } else { 5.5 },
            Service::Heavy => mean_ns * if u < 0.999 { 0.5 } else { 500.5 },
        }
    }
}

/// One point's settings.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyConfig {
    /// Simulated workers, all active for the whole run, at least 1.
    pub workers: usize,
    /// Flows the requests belong to, at least 1 (flow `k` weighs `1/(k+1)^zipf`).
    pub flows: usize,
    /// The flows' Zipf exponent (0: uniform).
    pub zipf: f64,
    /// Mean service time, ns, above 0.
    pub mean_service_ns: f64,
    /// How service times are drawn around `mean_service_ns`.
    pub service: Service,
    /// Offered load, a fraction 0-1 of the workers' capacity (below 1 for a steady state).
    pub load: f64,
    /// Requests simulated (the first 10% discarded).
    pub requests: u64,
    /// Extra service time of a request whose flow's state is cold on its worker, ns.
    pub cold_ns: f64,
    /// Seed of every draw (flows, service times, gaps): a seed replays a point.
    pub seed: u64,
}

/// One point's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    /// The policy's name ([`PolicyKind::name`]).
    pub policy: &'static str,
    /// The service distribution simulated.
    pub service: Service,
    /// Offered load, a fraction 0-1 of the workers' capacity, as configured.
    pub load: f64,
    /// Latency percentiles of the requests kept (all but the first 10% completed), us.
    pub latency_us: Percentiles,
    /// Requests completed before an earlier one of their flow.
    pub reordered: u64,
    /// Requests the busiest worker completed over the mean per worker (1: even).
    pub max_over_mean_load: f64,
    /// Requests that found their flow's state cold, a fraction 0-1 of those completed (a flow's
    /// first request is always cold).
    pub cold_fraction: f64,
}

impl Percentiles {
    /// The percentiles of latencies in ns (sorted here), in us; zeros when there are none.
    pub fn of_ns(latencies: &mut [f64]) -> Self {
        latencies.sort_unstable_by(f64::total_cmp);
        let at = |q: f64| {
            if latencies.is_empty() {
                0.0
            } else {
                latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)] / 1_000.0
            }
        };
        Self { p50: at(0.5), p90: at(0.9), p99: at(0.99), p999: at(0.999), p9999: at(0.9999) }
    }
}

/// Latency percentiles, us (each the sample at that rank, no interpolation; all 0 for no
/// sample).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    /// The median, us.
    pub p50: f64,
    /// The 90th percentile, us.
    pub p90: f64,
    /// The 99th percentile, us.
    pub p99: f64,
    /// The 99.9th percentile, us.
    pub p999: f64,
    /// The 99.99th percentile, us.
    pub p9999: f64,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Request {
    pub(crate) flow: u32,
    pub(crate) seq: u32,
    pub(crate) arrival_ns: f64,
    pub(crate) service_ns: f64,
    /// When it entered its worker's queue.
    pub(crate) queued_ns: f64,
}

/// Open-loop arrivals: each request's flow (Zipf, or uniform), the flow's next sequence number
/// and a service time, and the gaps between arrivals, all from one seeded stream.
pub(crate) struct Arrivals {
    zipf: Zipf,
    draws: Uniform,
    seq: Vec<u32>,
    service: Service,
    mean_service_ns: f64,
}

impl Arrivals {
    pub(crate) fn new(
        flows: usize,
        exponent: f64,
        service: Service,
        mean_service_ns: f64,
        seed: u64,
    ) -> Self {
        Self {
            zipf: Zipf::new(flows, exponent),
            draws: Uniform::new(seed),
            seq: vec![0; flows.max(1)],
            service,
            mean_service_ns,
        }
    }

    /// The request arriving at `t_ns`, and its flow's hash.
    pub(crate) fn request(&mut self, t_ns: f64) -> (u64, Request) {
        let flow = self.zipf.sample(self.draws.next_f64()) as u32;
        let seq = &mut self.seq[flow as usize];
        let r = Request {
            flow,
            seq: *seq,
            arrival_ns: t_ns,
            service_ns: self.service.draw(self.mean_service_ns, self.draws.next_f64()),
            queued_ns: t_ns,
        };
        *seq += 1;
        (flow_hash(u64::from(flow)), r)
    }

    /// An exponential gap to the next arrival at `rate_per_ns`.
    pub(crate) fn gap_ns(&mut self, rate_per_ns: f64) -> f64 {
        -(1.0 - self.draws.next_f64()).ln() / rate_per_ns
    }
}

/// Simulated FIFO workers, one request in service each.
pub(crate) struct SimWorkers {
    pub(crate) queues: Vec<VecDeque<Request>>,
    /// When the request in service ends (`None`: idle).
    pub(crate) busy_until: Vec<Option<f64>>,
    pub(crate) in_service: Vec<Request>,
    pub(crate) done: Vec<u64>,
    pub(crate) now_ns: f64,
    last_worker: Vec<u16>,
    pub(crate) cold: u64,
    cold_ns: f64,
    /// Per flow, one past the highest sequence number completed.
    next_done: Vec<u32>,
    /// Requests completed before an earlier one of their flow.
    pub(crate) reordered: u64,
}

impl SimWorkers {
    pub(crate) fn new(workers: usize, flows: usize, cold_ns: f64) -> Self {
        Self {
            queues: vec![VecDeque::new(); workers],
            busy_until: vec![None; workers],
            in_service: vec![Request::default(); workers],
            done: vec![0; workers],
            now_ns: 0.0,
            last_worker: vec![u16::MAX; flows.max(1)],
            cold: 0,
            cold_ns,
            next_done: vec![0; flows.max(1)],
            reordered: 0,
        }
    }

    /// The earliest completion: (worker, time), or `None` when every worker is idle.
    pub(crate) fn next_completion(&self) -> Option<(usize, f64)> {
        self.busy_until
            .iter()
            .enumerate()
            .filter_map(|(w, t)| t.map(|t| (w, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Ends worker `w`'s request at its completion time (counting it reordered if a later
    /// request of its flow finished first) and starts its next; returns the one that ended.
    pub(crate) fn complete(&mut self, w: usize) -> Request {
        let r = self.in_service[w];
        self.now_ns = self.busy_until[w].take().unwrap_or(self.now_ns);
        self.done[w] += 1;
        let next = &mut self.next_done[r.flow as usize];
        self.reordered += u64::from(r.seq < *next);
        *next = (*next).max(r.seq + 1);
        if let Some(next) = self.queues[w].pop_front() {
            self.start(w, next);
        }
        r
    }

    fn start(&mut self, w: usize, r: Request) {
        let cold = self.last_worker[r.flow as usize] != w as u16;
        self.last_worker[r.flow as usize] = w as u16;
        self.cold += u64::from(cold);
        let cost = r.service_ns + if cold { self.cold_ns } else { 0.0 };
        self.in_service[w] = r;
        self.busy_until[w] = Some(self.now_ns + cost);
    }
}

impl Workers<Request> for SimWorkers {
    fn send(&mut self, worker: WorkerId, packet: Request) -> Result<(), Request> {
        let w = worker as usize;
        if self.busy_until[w].is_none() {
            self.start(w, packet);
        } else {
            let mut packet = packet;
            packet.queued_ns = self.now_ns;
            self.queues[w].push_back(packet);
        }
        Ok(())
    }

    fn done(&self, worker: WorkerId) -> u64 {
        self.done[worker as usize]
    }
}

/// Simulates one point for `kind` until `config.requests` requests have completed: `workers`
/// active throughout, rebalancing every millisecond of virtual time, the hand-off on for
/// `kairos` only (the baselines as published), no hold limit.
pub fn run(config: &LatencyConfig, kind: PolicyKind) -> LatencyRow {
    let n = config.workers;
    // A fixed set of workers: Caladan's table has exactly their slots.
    let mut policy = kind.build_for(n, n);
    let mut d = Dispatcher::new(&mut *policy, kind == PolicyKind::Kairos, crate::dispatcher::DEFAULT_GROUPS);
    d.set_hold_limit(usize::MAX);
    let mut sim = SimWorkers::new(n, config.flows, config.cold_ns);
    let rate_per_ns = config.load * n as f64 / config.mean_service_ns;
    let mut arrivals =
        Arrivals::new(config.flows, config.zipf, config.service, config.mean_service_ns, config.seed);
    let mut latencies: Vec<f64> = Vec::with_capacity(config.requests as usize);
    let discard = config.requests / 10;
    let (mut arrived, mut completed) = (0u64, 0u64);
    let mut next_arrival = 0.0f64;
    let mut next_rebalance = 1_000_000.0f64;
    while completed < config.requests {
        // The next event: an arrival, or the earliest completion.
        let (w_next, t_done) = sim.next_completion().unwrap_or((usize::MAX, f64::INFINITY));
        let arrivals_left = arrived < config.requests;
        if arrivals_left && next_arrival <= t_done {
            sim.now_ns = next_arrival;
            while sim.now_ns >= next_rebalance {
                d.policy_mut().rebalance(next_rebalance as u64);
                next_rebalance += 1_000_000.0;
            }
            let (hash, r) = arrivals.request(next_arrival);
            arrived += 1;
            d.dispatch(hash, r, sim.now_ns as u64, &mut sim);
            next_arrival += arrivals.gap_ns(rate_per_ns);
            continue;
        }
        if w_next == usize::MAX {
            // Nothing in service and no arrival left: held requests wait for nothing now.
            d.poll(sim.now_ns as u64, &mut sim);
            if sim.busy_until.iter().all(Option::is_none) {
                break;
            }
            continue;
        }
        let r = sim.complete(w_next);
        completed += 1;
        if completed > discard {
            latencies.push(t_done - r.arrival_ns);
        }
        d.poll(sim.now_ns as u64, &mut sim);
    }
    let mean = sim.done.iter().sum::<u64>() as f64 / n as f64;
    let max = sim.done.iter().copied().max().unwrap_or(0) as f64;
    LatencyRow {
        policy: kind.name(),
        service: config.service,
        load: config.load,
        latency_us: Percentiles::of_ns(&mut latencies),
        reordered: sim.reordered,
        max_over_mean_load: if mean > 0.0 { max / mean } else { 0.0 },
        cold_fraction: sim.cold as f64 / completed.max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(load: f64, zipf: f64) -> LatencyConfig {
        LatencyConfig {
            workers: 8,
            flows: 10_000,
            zipf,
            mean_service_ns: 10_000.0,
            service: Service::Exponential,
            load,
            requests: 200_000,
            cold_ns: 500.0,
            seed: 5,
        }
    }

    #[test]
    fn a_light_load_waits_little_and_an_m_m_1_like_median_comes_out() {
        // At 10% load a request rarely queues: its latency is about its service time.
        let row = run(&config(0.1, 0.0), PolicyKind::HashMod);
        assert!((6.0..9.0).contains(&row.latency_us.p50), "{row:?}");
        assert_eq!(row.reordered, 0, "flows stay put with a fixed worker set");
        // Only each flow's first request (10,000 of 200,000) finds its state cold.
        assert!((0.049..0.051).contains(&row.cold_fraction), "{row:?}");
    }

    #[test]
    fn under_skew_at_high_load_the_load_aware_table_keeps_the_tail_far_lower() {
        let c = config(0.8, 0.9);
        let kairos = run(&c, PolicyKind::Kairos);
        let shenango = run(&c, PolicyKind::HashMod);
        assert_eq!(kairos.reordered, 0, "the hand-off keeps order through rebalancing");
        assert!(kairos.max_over_mean_load < shenango.max_over_mean_load, "{kairos:?} {shenango:?}");
        assert!(kairos.latency_us.p99 * 2.0 < shenango.latency_us.p99, "{kairos:?} {shenango:?}");
    }
}
