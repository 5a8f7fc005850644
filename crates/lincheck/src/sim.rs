//! Test support: histories from a simulated store that is linearizable by construction, and a
//! brute-force checker to hold the search against.
//!
//! Mechanism: clients issue one request at a time; each request takes effect at a random
//! instant inside its interval (or, for an unknown outcome, possibly never), and the replies come
//! from [`KvModel::apply`] run in that order. Any history made so is linearizable; a mutated one
//! may not be. The brute-force checker tries every order (and every subset of unknown-outcome
//! operations) with no memoization, so it only suits a handful of operations.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::Model;
use super::history::Operation;
use super::kv_model::{KvCommand, KvInput, KvModel, KvOp, KvOutput};

/// Relative weights of the commands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mix {
    pub get: u32,
    pub set: u32,
    pub incr: u32,
    pub append: u32,
    pub del: u32,
}

/// Reads and writes only: a register.
pub(crate) const REGISTER: Mix = Mix { get: 1, set: 1, incr: 0, append: 0, del: 0 };

/// Every command.
pub(crate) const ALL: Mix = Mix { get: 4, set: 3, incr: 1, append: 1, del: 1 };

/// What to simulate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Workload {
    /// Clients running at once.
    pub clients: usize,
    /// Operations in all.
    pub ops: usize,
    /// Keys the operations spread over.
    pub keys: usize,
    pub mix: Mix,
    /// Percentage of operations whose outcome the client never learns.
    pub unknown_percent: u32,
    /// Think time between a reply and the next request: `0..max_gap_ns`.
    pub max_gap_ns: u64,
    /// Request duration: `1..=max_duration_ns`.
    pub max_duration_ns: u64,
}

impl Workload {
    pub(crate) fn new(clients: usize, ops: usize, keys: usize, mix: Mix) -> Self {
        Workload { clients, ops, keys, mix, unknown_percent: 0, max_gap_ns: 20, max_duration_ns: 100 }
    }
}

fn command(rng: &mut StdRng, mix: Mix, client: u64, seq: usize) -> KvCommand {
    let total = mix.get + mix.set + mix.incr + mix.append + mix.del;
    let mut pick = rng.random_range(0..total);
    for (weight, command) in [
        (mix.get, KvCommand::Get),
        (mix.set, KvCommand::Set(format!("{client}.{seq}").into_bytes())),
        (mix.incr, KvCommand::Incr),
        (mix.append, KvCommand::Append(format!("+{seq}").into_bytes())),
    ] {
        if pick < weight {
            return command;
        }
        pick -= weight;
    }
    KvCommand::Del
}

/// A history of a store that is linearizable by construction.
pub(crate) fn simulate(workload: Workload, seed: u64) -> Vec<KvOp> {
    let mut rng = StdRng::seed_from_u64(seed);
    // (client id, instant it is free again)
    let mut slots: Vec<(u64, u64)> = (0..workload.clients as u64).map(|c| (c, 0)).collect();
    let mut next_client = workload.clients as u64;
    let mut ops: Vec<KvOp> = Vec::with_capacity(workload.ops);
    let mut effects: Vec<(u64, usize)> = Vec::new();
    for seq in 0..workload.ops {
        // The client that has been free the longest goes next, which keeps all of them busy.
        let slot = (0..slots.len()).min_by_key(|&s| slots[s].1).unwrap_or(0);
        let (client, free_ns) = slots[slot];
        let call_ns = free_ns + rng.random_range(0..workload.max_gap_ns.max(1));
        let return_ns = call_ns + rng.random_range(1..=workload.max_duration_ns.max(1));
        let key = format!("k{}", rng.random_range(0..workload.keys)).into_bytes();
        let command = command(&mut rng, workload.mix, client, seq);
        let unknown = rng.random_range(0..100) < workload.unknown_percent;
        if !unknown || rng.random_bool(0.5) {
            effects.push((rng.random_range(call_ns..=return_ns), ops.len()));
        }
        ops.push(Operation {
            client,
            input: KvInput { key, command },
            output: None,
            call_ns,
            return_ns: (!unknown).then_some(return_ns),
        });
        slots[slot] = (client, return_ns);
        if unknown {
            // A client that lost track of a request goes on under a new id.
            slots[slot].0 = next_client;
            next_client += 1;
        }
    }
    effects.sort_unstable();
    let mut store: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for (_, index) in effects {
        let op = &mut ops[index];
        let state = store.get(&op.input.key).cloned();
        let (next, reply) = KvModel::apply(&state, &op.input.command);
        match next {
            Some(value) => store.insert(op.input.key.clone(), value),
            None => store.remove(&op.input.key),
        };
        if op.return_ns.is_some() {
            op.output = Some(reply);
        }
    }
    ops
}

/// One key's operations, without the key.
pub(crate) fn one_key(history: &[KvOp]) -> Vec<Operation<KvCommand, KvOutput>> {
    history.iter().map(|op| op.map_input(|input| input.command.clone())).collect()
}

/// Whether some order of all known-outcome operations and some of the others respects real time
/// and `model`, by trying them all.
pub(crate) fn brute_force<M: Model>(model: &M, ops: &[Operation<M::Input, M::Output>]) -> bool {
    fn extend<M: Model>(
        model: &M,
        ops: &[Operation<M::Input, M::Output>],
        done: &mut [bool],
        state: &M::State,
    ) -> bool {
        if (0..ops.len()).all(|op| done[op] || ops[op].known_output().is_none()) {
            return true;
        }
        for op in 0..ops.len() {
            if done[op] {
                continue;
            }
            let blocked = (0..ops.len()).any(|before| {
                !done[before]
                    && ops[before].effective_return_ns().is_some_and(|return_ns| return_ns < ops[op].call_ns)
            });
            if blocked {
                continue;
            }
            if let Some(next) = model.step(state, &ops[op].input, ops[op].known_output()) {
                done[op] = true;
                if extend(model, ops, done, &next) {
                    return true;
                }
                done[op] = false;
            }
        }
        false
    }
    extend(model, ops, &mut vec![false; ops.len()], &model.init())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::{Verdict, check, check_kv};

    const NO_LIMIT: Duration = Duration::from_secs(3600);

    #[test]
    fn the_search_agrees_with_brute_force_on_small_histories() {
        let mut rng = StdRng::seed_from_u64(7);
        let (mut legal, mut illegal) = (0, 0);
        for seed in 0..15_000 {
            let mix = if seed % 3 == 0 { REGISTER } else { ALL };
            let mut workload = Workload::new(rng.random_range(1..=4), rng.random_range(1..=8), 1, mix);
            workload.unknown_percent = rng.random_range(0..=60);
            // Short times so that ties between calls and returns happen.
            workload.max_gap_ns = 3;
            workload.max_duration_ns = 4;
            let mut ops = one_key(&simulate(workload, seed));
            for op in &mut ops {
                if op.output.is_some() && rng.random_bool(0.3) {
                    op.output = Some(match rng.random_range(0..5) {
                        0 => KvOutput::Value(None),
                        // A value that may have been written, or an integer INCR may have made.
                        1 => KvOutput::Value(Some(if rng.random_bool(0.5) {
                            b"0.0".to_vec()
                        } else {
                            b"1".to_vec()
                        })),
                        2 => KvOutput::Ok,
                        3 => KvOutput::Integer(rng.random_range(0..3)),
                        _ => KvOutput::Error,
                    });
                }
            }
            let expected = brute_force(&KvModel, &ops);
            let verdict = check(&KvModel, &ops, NO_LIMIT);
            assert_eq!(verdict.is_linearizable(), expected, "seed {seed}: {verdict}\n{ops:#?}");
            assert!(!verdict.is_unknown());
            if expected {
                legal += 1;
            } else {
                illegal += 1;
            }
        }
        // Both answers must be well represented, or the comparison proves little.
        assert!(legal > 3000 && illegal > 3000, "{legal} legal, {illegal} illegal");
    }

    /// Makes one completed read return the value of a write that a later write overwrote before
    /// the read was called; returns the read's index.
    fn make_one_read_stale(ops: &mut [Operation<KvCommand, KvOutput>], rng: &mut StdRng) -> Option<usize> {
        let completed_set = |op: &Operation<KvCommand, KvOutput>| {
            matches!(op.input, KvCommand::Set(_)) && op.known_output().is_some()
        };
        let reads: Vec<usize> = (0..ops.len())
            .filter(|&op| ops[op].input == KvCommand::Get && ops[op].known_output().is_some())
            .collect();
        let start = rng.random_range(0..reads.len().max(1));
        for &read in reads.iter().cycle().skip(start).take(reads.len()) {
            let call_ns = ops[read].call_ns;
            let before = |op: &Operation<KvCommand, KvOutput>, ns: u64| {
                op.effective_return_ns().is_some_and(|return_ns| return_ns < ns)
            };
            // The overwriting write: completed before the read's call, the latest such call.
            let Some(overwrite) = (0..ops.len())
                .filter(|&op| completed_set(&ops[op]) && before(&ops[op], call_ns))
                .max_by_key(|&op| ops[op].call_ns)
            else {
                continue;
            };
            let overwrite_call_ns = ops[overwrite].call_ns;
            let stale: Vec<usize> = (0..ops.len())
                .filter(|&op| completed_set(&ops[op]) && before(&ops[op], overwrite_call_ns))
                .collect();
            if stale.is_empty() {
                continue;
            }
            let KvCommand::Set(value) = &ops[stale[rng.random_range(0..stale.len())]].input else {
                continue;
            };
            ops[read].output = Some(KvOutput::Value(Some(value.clone())));
            return Some(read);
        }
        None
    }

    #[test]
    fn a_simulated_register_is_linearizable_until_one_read_goes_stale() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut mutated = 0;
        for seed in 0..40 {
            let mut workload = Workload::new(6, 300, 1, REGISTER);
            workload.unknown_percent = if seed % 2 == 0 { 0 } else { 1 };
            let mut ops = one_key(&simulate(workload, seed));
            let verdict = check(&KvModel, &ops, NO_LIMIT);
            assert_eq!(verdict, Verdict::Linearizable, "seed {seed}");

            let Some(read) = make_one_read_stale(&mut ops, &mut rng) else {
                continue;
            };
            mutated += 1;
            let verdict = check(&KvModel, &ops, NO_LIMIT);
            let Verdict::Illegal(counterexample) = &verdict else {
                panic!("seed {seed}: stale read {read} not found: {verdict}");
            };
            // The search cannot get past the stale read.
            assert!(!counterexample.prefix.contains(&read), "seed {seed}");
        }
        assert!(mutated >= 35, "only {mutated} histories had a read to make stale");
    }

    #[test]
    fn many_unknown_outcomes_do_not_blow_up_a_stale_read() {
        // About 30 lost writes, each concurrent with everything after it: without dominance in
        // the cache, proving the stale read illegal would take on the order of 2^30 steps.
        let mut rng = StdRng::seed_from_u64(5);
        for seed in 0..5 {
            let mut workload = Workload::new(6, 300, 1, REGISTER);
            workload.unknown_percent = 10;
            let mut ops = one_key(&simulate(workload, seed));
            let unknown = ops.iter().filter(|op| op.known_output().is_none()).count();
            assert!(unknown >= 15, "seed {seed}: only {unknown} unknown outcomes");
            let start = Instant::now();
            assert_eq!(check(&KvModel, &ops, Duration::from_secs(30)), Verdict::Linearizable, "seed {seed}");
            let Some(read) = make_one_read_stale(&mut ops, &mut rng) else {
                panic!("seed {seed}: no read to make stale");
            };
            let verdict = check(&KvModel, &ops, Duration::from_secs(30));
            assert!(verdict.is_illegal(), "seed {seed}: stale read {read}: {verdict}");
            eprintln!("seed {seed}: {unknown} unknown outcomes, checked twice in {:?}", start.elapsed());
        }
    }

    #[test]
    fn simulated_stores_with_every_command_are_linearizable() {
        for seed in 0..20 {
            let mut workload = Workload::new(5, 400, 4, ALL);
            workload.unknown_percent = 3;
            let history = simulate(workload, seed);
            let report = check_kv(&history, NO_LIMIT);
            assert!(report.is_linearizable(), "seed {seed}: {report}");
            assert_eq!(report.operations, 400);
        }
    }

    #[test]
    fn ten_thousand_operations_over_twenty_keys_check_quickly() {
        let mut workload = Workload::new(10, 10_000, 20, ALL);
        workload.unknown_percent = 1;
        let history = simulate(workload, 2024);
        let start = Instant::now();
        let report = check_kv(&history, Duration::from_secs(60));
        let elapsed = start.elapsed();
        eprintln!("{report}");
        assert_eq!(report.keys, 20);
        assert_eq!(report.operations, 10_000);
        assert!(report.is_linearizable(), "{report}");
        // Generous for a debug build on a loaded machine; it takes far less.
        assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    }
}
