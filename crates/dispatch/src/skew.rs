//! Load balance under skewed flow popularity, on a virtual clock: how far the busiest worker is
//! above the mean, window by window, while a load-aware policy rebalances.
//!
//! Flows are drawn from a Zipf law (flow `k` with probability proportional to `1/(k+1)^s`);
//! each millisecond of virtual time brings `packets_per_ms` packets, each steered by the
//! policy and counted against its worker; every `rebalance_ms` the policy's `rebalance` runs
//! (a no-op for policies that do not watch load). Each window's figure is the busiest worker's
//! packets over the mean.
//!
//! No policy that keeps a flow on one worker can beat the floor this sets: the busiest worker
//! carries at least the heaviest flow, so max/mean is at least that flow's share times the
//! number of workers ([`SkewReport::floor`]); under Zipf(1.1) over 700,000 flows the heaviest
//! flow alone is about 12% of the traffic, above the mean share of 14 workers. The report
//! states the floor beside the figures.

use serde::Serialize;

use crate::policy::{Steer, WorkerId};

/// Uniform draws in [0, 1) from a seed (xorshift64: the virtual-clock runs' only randomness, so a
/// seed replays a run).
#[derive(Debug, Clone)]
pub struct Uniform(u64);

impl Uniform {
    /// The stream of `seed`, any value: its lowest bit is set, as xorshift needs a non-zero
    /// state, so seeds `2k` and `2k + 1` give the same stream.
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// The next draw, in [0, 1), with 53 bits of resolution.
    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Flow `index`'s hash in the virtual-clock runs: its index spread, as a NIC's hash would be.
pub fn flow_hash(index: u64) -> u64 {
    index.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ 0x5851_F42D
}

/// Zipf-distributed draws over `flows` flows, by inverse transform on the cumulative weights.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The law over `flows` flows (at least one) with exponent `s` (0: uniform).
    pub fn new(flows: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(flows.max(1));
        let mut total = 0.0;
        for k in 0..flows.max(1) {
            total += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(total);
        }
        cdf.iter_mut().for_each(|c| *c /= total);
        Self { cdf }
    }

    /// The flow for a uniform draw `u` in [0, 1).
    pub fn sample(&self, u: f64) -> usize {
        self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1)
    }

    /// The heaviest flow's (flow 0's) share of the traffic, a fraction 0-1.
    pub fn top_share(&self) -> f64 {
        self.cdf[0]
    }
}

/// One run's settings.
#[derive(Debug, Clone, Serialize)]
pub struct SkewConfig {
    /// Active workers, as the policy given to [`run`] was built with (the run takes the
    /// policy's active set; this is the record of it).
    pub workers: usize,
    /// Flows the packets are drawn from, at least 1.
    pub flows: usize,
    /// The Zipf exponent: flow `k` weighs `1/(k+1)^exponent` (0: uniform).
    pub exponent: f64,
    /// Packets per millisecond of virtual time.
    pub packets_per_ms: u64,
    /// Milliseconds between rebalances (0: never).
    pub rebalance_ms: u64,
    /// The window the balance is measured over, ms (0 is taken as 1).
    pub window_ms: u64,
    /// Virtual time simulated, ms.
    pub duration_ms: u64,
    /// Seed of the flow draws: a seed replays a run.
    pub seed: u64,
}

/// One window's balance.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SkewWindow {
    /// Virtual time at the window's end, ms.
    pub end_ms: u64,
    /// The busiest active worker's packets in the window over the mean per active worker (1:
    /// even; 0 when no packet was steered).
    pub max_over_mean: f64,
}

/// One run's windows and what they add up to.
#[derive(Debug, Clone, Serialize)]
pub struct SkewReport {
    /// The policy's name ([`Steer::name`]).
    pub policy: &'static str,
    /// Every window, in order.
    pub windows: Vec<SkewWindow>,
    /// The floor no flow-keeping policy beats: the heaviest flow's share times the workers
    /// (or 1).
    pub floor: f64,
    /// The end of the first window from which every window is within 5% of the mean
    /// (`max_over_mean` at most 1.05), ms; `None` when the last window is not, or there is none.
    pub balanced_from_ms: Option<u64>,
}

/// Runs `policy` (its workers already joined) under the Zipf load `config` describes.
pub fn run(config: &SkewConfig, policy: &mut dyn Steer) -> SkewReport {
    let zipf = Zipf::new(config.flows, config.exponent);
    let mut counts = vec![0u64; crate::MAX_WORKERS];
    let mut windows = Vec::new();
    let mut uniform = Uniform::new(config.seed);
    let active: Vec<WorkerId> = policy.active().to_vec();
    for ms in 1..=config.duration_ms {
        let now_ns = ms * 1_000_000;
        for _ in 0..config.packets_per_ms {
            let flow = zipf.sample(uniform.next_f64()) as u64;
            if let Some(w) = policy.pick(flow_hash(flow), now_ns) {
                counts[w as usize] += 1;
            }
        }
        if config.rebalance_ms > 0 && ms.is_multiple_of(config.rebalance_ms) {
            policy.rebalance(now_ns);
        }
        if ms.is_multiple_of(config.window_ms.max(1)) {
            let loads: Vec<u64> = active.iter().map(|&w| counts[w as usize]).collect();
            let mean = loads.iter().sum::<u64>() as f64 / loads.len().max(1) as f64;
            let max = loads.iter().copied().max().unwrap_or(0) as f64;
            windows.push(SkewWindow { end_ms: ms, max_over_mean: if mean > 0.0 { max / mean } else { 0.0 } });
            counts.iter_mut().for_each(|c| *c = 0);
        }
    }
    let balanced_from_ms = windows
        .iter()
        .rposition(|w| w.max_over_mean > 1.05)
        .map_or(windows.first().map(|w| w.end_ms), |i| windows.get(i + 1).map(|w| w.end_ms));
    SkewReport {
        policy: policy.name(),
        windows,
        floor: (zipf.top_share() * active.len() as f64).max(1.0),
        balanced_from_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buckets, HashMod};

    fn config(exponent: f64) -> SkewConfig {
        SkewConfig {
            workers: 8,
            flows: 100_000,
            exponent,
            packets_per_ms: 50_000,
            rebalance_ms: 1,
            window_ms: 5,
            duration_ms: 50,
            seed: 3,
        }
    }

    fn started(mut p: impl Steer, n: usize) -> impl Steer {
        for w in 0..n {
            p.join(w as WorkerId);
        }
        p
    }

    #[test]
    fn zipf_draws_follow_the_law() {
        let z = Zipf::new(1_000, 1.0);
        let h: f64 = (1..=1_000).map(|k| 1.0 / k as f64).sum();
        assert!((z.top_share() - 1.0 / h).abs() < 1e-12);
        assert_eq!(z.sample(0.0), 0);
        assert_eq!(z.sample(0.999_999_999), 999);
        let uniform = Zipf::new(4, 0.0);
        assert_eq!([0.1, 0.3, 0.6, 0.9].map(|u| uniform.sample(u)), [0, 1, 2, 3]);
    }

    #[test]
    fn the_load_aware_table_evens_a_moderate_skew_within_milliseconds_and_hash_mod_does_not() {
        // Zipf(0.8) over 100,000 flows: the heaviest flow is 2.2% of the traffic, a sixth of a
        // worker's share at 8 workers, so a balance within 5% is possible.
        let c = config(0.8);
        let kairos = run(&c, &mut started(Buckets::new(4_096), c.workers));
        assert!(kairos.floor < 1.05, "{}", kairos.floor);
        let from = kairos.balanced_from_ms.expect("balanced");
        assert!(from <= 10, "balanced from {from} ms: {:?}", kairos.windows);
        let shenango = run(&c, &mut started(HashMod::new(), c.workers));
        let figures =
            |r: &SkewReport| r.windows.iter().map(|w| format!("{:.3}", w.max_over_mean)).collect::<Vec<_>>();
        eprintln!(
            "kairos balanced from {from} ms: {:?}; hash-mod: {:?}",
            figures(&kairos),
            figures(&shenango)
        );
        assert!(
            shenango
                .windows
                .iter()
                .skip(5)
                .all(|w| w.max_over_mean > kairos.windows.last().unwrap().max_over_mean),
            "{:?}",
            shenango.windows
        );
    }

    #[test]
    fn under_zipf_one_point_one_the_heaviest_flow_sets_a_floor_above_the_goal() {
        let mut c = config(1.1);
        c.duration_ms = 20;
        let r = run(&c, &mut started(Buckets::new(4_096), c.workers));
        assert!(r.floor > 1.05, "floor {}", r.floor);
        assert!(r.windows.iter().all(|w| w.max_over_mean >= r.floor * 0.95), "{r:?}");
    }
}
