//! `kv check`'s core: simulated runs turned into histories and judged by the linearizability
//! checker, with the count of acknowledged writes lost, and the checker's self-test against
//! deliberately broken replicas.
//!
//! One seed gives one history ([`check_seed`]). A correct store must make every history
//! linearizable (or, when the search budget runs out, unknown: never a guess) and lose no
//! acknowledged write. The self-test runs the same seeds with a broken replica
//! ([`Broken::AckBeforeCommit`], and followers answering reads from local state without a read
//! index, [`ReadMode::Stale`]): the checker must find at least one illegal history (or lost
//! write) for each, or it is not checking anything.

use std::time::Duration;

use super::cluster::{FaultKind, OpKind, SimConfig, SimOp, Workload, run};
use crate::kv::Reply;
use crate::replica::{Broken, ReadMode};
use kairos_lincheck::{KvCommand, KvInput, KvOp, KvOutput, Operation, Verdict, check_kv};

/// One history's verdict.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeedResult {
    /// The seed.
    pub seed: u64,
    /// Requests in the history.
    pub operations: usize,
    /// Requests whose outcome is unknown.
    pub unknown_outcomes: usize,
    /// Faults injected, by kind.
    pub faults: Vec<FaultKind>,
    /// `linearizable`, `illegal` or `unknown`.
    pub verdict: &'static str,
    /// For an illegal history: the checker's account of the first key it could not explain.
    pub detail: Option<String>,
    /// Acknowledged writes lost (`None`: the final reads failed).
    pub lost_acknowledged_writes: Option<u64>,
    /// Leader terms seen.
    pub terms: u64,
}

/// The history in the checker's terms: its single-key requests (the list-append workload's
/// transactions are judged by [`super::list_append`]).
pub fn to_checker(history: &[SimOp]) -> Vec<KvOp> {
    history
        .iter()
        .filter_map(|op| {
            let command = match &op.kind {
                OpKind::Get => KvCommand::Get,
                OpKind::Set(v) => KvCommand::Set(v.clone()),
                OpKind::Incr => KvCommand::Incr,
                OpKind::Append(v) => KvCommand::Append(v.clone()),
                OpKind::Txn(_) => return None,
            };
            let output = op.output.as_ref().map(|reply| match (reply, &op.kind) {
                (Reply::Bulk(v), _) => KvOutput::Value(Some(v.clone())),
                (Reply::Nil, OpKind::Get) => KvOutput::Value(None),
                (Reply::Ok, _) => KvOutput::Ok,
                (Reply::Integer(n), _) => KvOutput::Integer(*n),
                _ => KvOutput::Error,
            });
            Some(Operation {
                client: op.client,
                input: KvInput { key: op.key.clone(), command },
                output,
                call_ns: op.call_us * 1000,
                return_ns: op.return_us.map(|t| t * 1000),
            })
        })
        .collect()
}

/// The checker's verdict on a history (`linearizable`, `illegal` or `unknown`), with its
/// account of the first key it could not explain.
pub fn judge(history: &[SimOp], budget: Duration) -> (&'static str, Option<String>) {
    let ops = to_checker(history);
    let report = check_kv(&ops, budget);
    if report.illegal > 0 {
        let detail = report.per_key.iter().find_map(|k| match &k.verdict {
            Verdict::Illegal(c) => Some(format!("key {}: {}", String::from_utf8_lossy(&k.key), c)),
            _ => None,
        });
        ("illegal", detail)
    } else if report.unknown > 0 {
        ("unknown", None)
    } else {
        ("linearizable", None)
    }
}

/// Runs seed `config.seed` and checks its history within `budget`.
///
/// A list-append history is judged by [`super::list_append`]: strictly serializable (the
/// transactional form of linearizability, reported under that name) or illegal.
pub fn check_seed(config: SimConfig, budget: Duration) -> SeedResult {
    let outcome = run(config);
    let (verdict, detail) = match &outcome.list_append {
        Some(report) => match &report.anomaly {
            Some(anomaly) => ("illegal", Some(anomaly.clone())),
            None => ("linearizable", None),
        },
        None if outcome.history.iter().any(|o| matches!(o.kind, OpKind::Txn(_))) => {
            ("unknown", Some("the final reads failed".into()))
        }
        None => judge(&outcome.history, budget),
    };
    SeedResult {
        seed: outcome.seed,
        operations: outcome.history.len(),
        unknown_outcomes: outcome.history.iter().filter(|o| o.output.is_none()).count(),
        faults: outcome.faults.iter().map(|f| f.kind).collect(),
        verdict,
        detail,
        lost_acknowledged_writes: outcome.lost_acknowledged_writes,
        terms: outcome.terms,
    }
}

/// A broken replica the self-test must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BrokenMode {
    /// Followers (and the leader) answer reads from local state, without a read index.
    StaleReads,
    /// SETs are acknowledged when proposed, before a majority has them.
    AckBeforeCommit,
    /// Each MULTI/EXEC is proposed as two transactions in two entries (list-append).
    SplitTransactions,
}

impl BrokenMode {
    /// The register workload's modes.
    pub const ALL: [BrokenMode; 2] = [BrokenMode::StaleReads, BrokenMode::AckBeforeCommit];

    /// The modes a workload's self-test runs (a transaction's reads go through the log, so
    /// stale reads and early SET acknowledgements do not touch list-append).
    pub fn of(workload: Workload) -> &'static [BrokenMode] {
        match workload {
            Workload::Register => &Self::ALL,
            Workload::ListAppend => &[BrokenMode::SplitTransactions],
        }
    }

    /// `config` made broken this way.
    pub fn apply(self, mut config: SimConfig) -> SimConfig {
        match self {
            BrokenMode::StaleReads => config.read_mode = ReadMode::Stale,
            BrokenMode::AckBeforeCommit => config.broken = Some(Broken::AckBeforeCommit),
            BrokenMode::SplitTransactions => config.split_transactions = true,
        }
        config
    }
}

/// Whether a broken run was caught: an illegal history or a lost acknowledged write.
pub fn caught(result: &SeedResult) -> bool {
    result.verdict == "illegal" || result.lost_acknowledged_writes.is_some_and(|n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correct_replicas_give_linearizable_histories_under_every_fault() {
        for seed in 0..6 {
            let r = check_seed(SimConfig::new(seed), Duration::from_secs(10));
            assert_eq!(r.verdict, "linearizable", "seed {seed}: {:?}", r.detail);
            assert_eq!(r.lost_acknowledged_writes, Some(0), "seed {seed}");
            assert!(r.operations > 100, "seed {seed}: {} operations", r.operations);
        }
    }

    #[test]
    fn the_checker_catches_both_broken_modes() {
        for mode in BrokenMode::ALL {
            let found = (0..30)
                .any(|seed| caught(&check_seed(mode.apply(SimConfig::new(seed)), Duration::from_secs(10))));
            assert!(found, "{mode:?} was not caught in 30 seeds");
        }
    }
}
