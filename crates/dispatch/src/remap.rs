//! How many flows change worker when a worker joins or leaves: the measure behind
//! `kairos dispatch remap`.
//!
//! Each flow is shown to the policy once before the change (so a stateful policy has seen it)
//! and once after; a flow whose two answers differ moved. The ideal is what any policy must
//! move to stay even: on a join to `n + 1` workers, `1/(n+1)` of the flows (the newcomer's
//! share); on a leave from `n`, `1/n` (the leaver's).

use serde::Serialize;

use crate::policy::{PolicyKind, WorkerId};

/// A change of the worker set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A worker joins the `n` active.
    Join,
    /// The first active worker leaves (Shenango's worst case: the last takes its place).
    Leave,
}

/// One policy's answer to one change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemapRow {
    /// The policy's name ([`PolicyKind::name`]).
    pub policy: &'static str,
    /// The change of the worker set measured.
    pub event: Event,
    /// Active workers before.
    pub workers_before: usize,
    /// Active workers after.
    pub workers_after: usize,
    /// Flows whose worker changed, a fraction 0-1 of all.
    pub flows_moved_fraction: f64,
    /// The least fraction of the flows any policy that stays even moves: `1/(n+1)` on a join
    /// to `n+1` workers, `1/n` on a leave from `n`.
    pub ideal_fraction: f64,
    /// The busiest worker's flows after the change over the mean per active worker (1: even).
    pub max_over_mean_flows: f64,
}

/// The fraction of `flows` (their hashes) that `policy` (with `workers` active, `0..workers`)
/// moves on `event`; `workers` must be at least 1, and at least 2 for a leave.
pub fn remap(kind: PolicyKind, workers: usize, flows: &[u64], event: Event) -> RemapRow {
    let mut policy = kind.build(workers);
    let before: Vec<Option<WorkerId>> = flows.iter().map(|&f| policy.pick(f, 0)).collect();
    let (after_n, ideal) = match event {
        Event::Join => {
            policy.join(workers as WorkerId);
            (workers + 1, 1.0 / (workers + 1) as f64)
        }
        Event::Leave => {
            policy.leave(policy.active()[0]);
            (workers - 1, 1.0 / workers as f64)
        }
    };
    let mut per_worker = vec![0u64; crate::MAX_WORKERS];
    let mut moved = 0u64;
    for (i, &f) in flows.iter().enumerate() {
        let now = policy.pick(f, 0);
        moved += u64::from(now != before[i]);
        if let Some(w) = now {
            per_worker[w as usize] += 1;
        }
    }
    let busiest = policy.active().iter().map(|&w| per_worker[w as usize]).max().unwrap_or(0);
    let mean = flows.len() as f64 / after_n.max(1) as f64;
    RemapRow {
        policy: kind.name(),
        event,
        workers_before: workers,
        workers_after: after_n,
        flows_moved_fraction: moved as f64 / flows.len().max(1) as f64,
        ideal_fraction: ideal,
        max_over_mean_flows: if mean > 0.0 { busiest as f64 / mean } else { 0.0 },
    }
}

/// `count` flow hashes from `seed` (a SplitMix64 sequence: distinct, uniform); the same seed
/// gives the same hashes.
pub fn flow_hashes(count: usize, seed: u64) -> Vec<u64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_mod_moves_nearly_everything_at_ten_workers_and_kairos_the_ideal() {
        let flows = flow_hashes(200_000, 1);
        let shenango = remap(PolicyKind::HashMod, 10, &flows, Event::Join);
        assert!((0.88..0.93).contains(&shenango.flows_moved_fraction), "{shenango:?}");
        for event in [Event::Join, Event::Leave] {
            let kairos = remap(PolicyKind::Kairos, 10, &flows, event);
            assert!(kairos.flows_moved_fraction <= 1.1 * kairos.ideal_fraction, "{kairos:?}");
            assert!(kairos.max_over_mean_flows < 1.1, "{kairos:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn kairos_never_moves_more_than_a_tenth_above_the_ideal(workers in 2usize..=32, seed: u64) {
            let flows = flow_hashes(50_000, seed);
            for event in [Event::Join, Event::Leave] {
                let row = remap(PolicyKind::Kairos, workers, &flows, event);
                prop_assert!(row.flows_moved_fraction <= 1.1 * row.ideal_fraction, "{:?}", row);
            }
        }
    }
}
