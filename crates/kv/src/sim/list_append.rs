//! The list-append check (the workload of Jepsen's analysis of Redis-Raft): transactions of
//! RPUSH and LRANGE on a few keys, judged for strict serializability.
//!
//! Every value is appended once, so a key's final list orders its appends: the version order
//! comes from the data, not from guessing. Then:
//! - every acknowledged append is in its key's final list (else it was lost), once;
//! - every read a committed transaction made is a prefix of its key's final list (a read
//!   that is not saw an order the store did not keep), and agrees with the transaction's own
//!   appends before and after it;
//! - the graph of committed transactions has no cycle, with an edge for each dependency:
//!   write-write (consecutive appends in a final list), write-read (a read saw an append),
//!   read-write (a read did not see the next append: it precedes its writer) and real time
//!   (one returned before another was called; strictness). Real time goes through one node
//!   per return, chained in time order, so it costs O(n) edges, not O(n^2).
//!
//! Transactions whose outcome is unknown are not nodes; their appends may or may not appear,
//! and a committed one's order around them still comes from the lists.

use std::collections::{BTreeMap, HashMap};

use super::cluster::{Micro, OpKind, SimOp};
use crate::kv::Reply;

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ListAppendReport {
    /// Transactions in the history.
    pub transactions: usize,
    /// Those acknowledged with their answers.
    pub committed: usize,
    /// Acknowledged appends missing from their key's final list.
    pub lost: u64,
    /// The first anomaly found (a read that is not a prefix, a cycle, ...), if any.
    pub anomaly: Option<String>,
}

/// A committed transaction's reads: (key, the values it saw), in its order among its appends.
struct Committed {
    op: usize,
    micros: Vec<Micro>,
    reads: Vec<Option<Vec<u64>>>,
}

/// The values an LRANGE answered (`None`: not a list of numbers).
pub(super) fn values(reply: &Reply) -> Option<Vec<u64>> {
    match reply {
        Reply::Array(items) => items
            .iter()
            .map(|i| match i {
                Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Judges `history` against the keys' final lists.
pub fn check(history: &[SimOp], finals: &BTreeMap<Vec<u8>, Vec<u64>>) -> ListAppendReport {
    let mut report = ListAppendReport::default();
    let mut committed = Vec::new();
    // Which operation wrote each value (committed or not).
    let mut writer: HashMap<u64, usize> = HashMap::new();
    for (i, op) in history.iter().enumerate() {
        let OpKind::Txn(micros) = &op.kind else { continue };
        report.transactions += 1;
        for m in micros {
            if let Micro::Append(_, v) = m {
                writer.insert(*v, i);
            }
        }
        if let Some(Reply::Array(items)) = &op.output
            && items.len() == micros.len()
            && op.return_us.is_some()
        {
            let reads = micros
                .iter()
                .zip(items)
                .map(|(m, r)| matches!(m, Micro::Read(_)).then(|| values(r)).flatten())
                .collect();
            committed.push(Committed { op: i, micros: micros.clone(), reads });
        }
    }
    report.committed = committed.len();
    let position: HashMap<(&[u8], u64), usize> = finals
        .iter()
        .flat_map(|(k, list)| list.iter().enumerate().map(move |(p, v)| ((k.as_slice(), *v), p)))
        .collect();
    let mut found: Option<String> = None;
    let mut anomaly = |text: String| {
        found.get_or_insert(text);
    };
    for (key, list) in finals {
        let mut seen = std::collections::HashSet::new();
        if let Some(v) = list.iter().find(|v| !seen.insert(**v)) {
            anomaly(format!("value {v} appears twice in {}'s final list", String::from_utf8_lossy(key)));
        }
        if let Some(v) = list.iter().find(|v| !writer.contains_key(v)) {
            anomaly(format!(
                "{}'s final list holds {v}, which nobody appended",
                String::from_utf8_lossy(key)
            ));
        }
    }
    let is_committed: HashMap<usize, usize> = committed.iter().enumerate().map(|(n, c)| (c.op, n)).collect();
    for c in &committed {
        let mut own: HashMap<&[u8], Vec<u64>> = HashMap::new();
        for (m, read) in c.micros.iter().zip(&c.reads) {
            match m {
                Micro::Append(key, v) => {
                    if !position.contains_key(&(key.as_slice(), *v)) {
                        report.lost += 1;
                    }
                    own.entry(key).or_default().push(*v);
                }
                Micro::Read(key) => {
                    let Some(read) = read else {
                        anomaly(format!(
                            "transaction {} read {} and got no list",
                            c.op,
                            String::from_utf8_lossy(key)
                        ));
                        continue;
                    };
                    let list = finals.get(key).map_or(&[][..], Vec::as_slice);
                    if read.len() > list.len() || read[..] != list[..read.len()] {
                        anomaly(format!(
                            "transaction {} read {:?} of {}, not a prefix of its final list {:?}",
                            c.op,
                            read,
                            String::from_utf8_lossy(key),
                            &list[..list.len().min(read.len() + 3)]
                        ));
                    }
                    let mine = own.get(key.as_slice()).map_or(&[][..], Vec::as_slice);
                    if !read.ends_with(mine) {
                        anomaly(format!(
                            "transaction {} read {:?} of {} without its own appends {:?} before the read",
                            c.op,
                            read,
                            String::from_utf8_lossy(key),
                            mine
                        ));
                    }
                }
            }
        }
    }
    if found.is_some() {
        report.anomaly = found;
        return report;
    }
    // The dependency graph: nodes 0..n the committed transactions, then one per return time.
    let n = committed.len();
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
    let node_of = |op: usize| is_committed.get(&op).copied();
    for list in finals.values() {
        let mut last: Option<usize> = None;
        for v in list {
            let Some(w) = writer.get(v).and_then(|&op| node_of(op)) else { continue };
            if let Some(l) = last
                && l != w
            {
                edges[l].push(w);
            }
            last = Some(w);
        }
    }
    for (r, c) in committed.iter().enumerate() {
        for (m, read) in c.micros.iter().zip(&c.reads) {
            let (Micro::Read(key), Some(read)) = (m, read) else { continue };
            let list = finals.get(key).map_or(&[][..], Vec::as_slice);
            // What it saw: the last append by another committed transaction.
            if let Some(w) =
                read.iter().rev().filter_map(|v| writer.get(v).and_then(|&op| node_of(op))).find(|&w| w != r)
            {
                edges[w].push(r);
            }
            // What it did not see: the next append by another committed transaction follows it.
            if let Some(w) = list[read.len().min(list.len())..]
                .iter()
                .filter_map(|v| writer.get(v).and_then(|&op| node_of(op)))
                .find(|&w| w != r)
            {
                edges[r].push(w);
            }
        }
    }
    // Real time: T -> its return's node; each return node -> the next; the last return before
    // a call -> that transaction.
    let mut returns: Vec<(u64, usize)> =
        committed.iter().enumerate().filter_map(|(i, c)| history[c.op].return_us.map(|t| (t, i))).collect();
    returns.sort_unstable();
    edges.resize(n + returns.len(), Vec::new());
    for (k, &(_, t)) in returns.iter().enumerate() {
        edges[t].push(n + k);
        if k + 1 < returns.len() {
            edges[n + k].push(n + k + 1);
        }
    }
    for (i, c) in committed.iter().enumerate() {
        let call = history[c.op].call_us;
        let before = returns.partition_point(|&(t, _)| t < call);
        if before > 0 {
            edges[n + before - 1].push(i);
        }
    }
    if let Some(stuck) = cycle_member(&edges) {
        let c = &committed[stuck.min(n.saturating_sub(1))];
        report.anomaly = Some(format!(
            "the committed transactions' dependencies (write-write, write-read, read-write, real time) have a cycle, through transaction {} {:?}",
            c.op, c.micros
        ));
    }
    report
}

/// A node on a cycle of `edges` (one left when Kahn's sort stops), if there is a cycle.
fn cycle_member(edges: &[Vec<usize>]) -> Option<usize> {
    let mut indegree = vec![0usize; edges.len()];
    for out in edges {
        for &to in out {
            indegree[to] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..edges.len()).filter(|&v| indegree[v] == 0).collect();
    let mut sorted = 0;
    while let Some(v) = ready.pop() {
        sorted += 1;
        for &to in &edges[v] {
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.push(to);
            }
        }
    }
    (sorted < edges.len()).then(|| (0..edges.len()).find(|&v| indegree[v] > 0)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(micros: Vec<Micro>, output: Option<Vec<Reply>>, call_us: u64, return_us: u64) -> SimOp {
        SimOp {
            client: 1,
            key: Vec::new(),
            kind: OpKind::Txn(micros),
            output: output.map(Reply::Array),
            call_us,
            return_us: Some(return_us),
        }
    }

    fn list(vs: &[u64]) -> Reply {
        Reply::Array(vs.iter().map(|v| Reply::Bulk(v.to_string().into_bytes())).collect())
    }

    fn k(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn a_serial_history_passes_and_a_lost_append_is_counted() {
        let h = vec![
            txn(vec![Micro::Append(k("a"), 1)], Some(vec![Reply::Integer(1)]), 0, 10),
            txn(
                vec![Micro::Append(k("a"), 2), Micro::Read(k("a"))],
                Some(vec![Reply::Integer(2), list(&[1, 2])]),
                20,
                30,
            ),
            txn(vec![Micro::Append(k("b"), 3)], Some(vec![Reply::Integer(1)]), 40, 50),
        ];
        let finals = BTreeMap::from([(k("a"), vec![1, 2]), (k("b"), vec![3])]);
        let r = check(&h, &finals);
        assert_eq!((r.lost, r.anomaly.clone()), (0, None), "{r:?}");
        let lost = BTreeMap::from([(k("a"), vec![1, 2])]);
        assert_eq!(check(&h, &lost).lost, 1);
    }

    #[test]
    fn a_transaction_seen_half_applied_is_a_cycle() {
        // T1 appends 1 to a and 2 to b. T2, between its halves, sees a's 1 but not b's 2:
        // T1 -> T2 (write-read on a), T2 -> T1 (read-write on b).
        let h = vec![
            txn(
                vec![Micro::Append(k("a"), 1), Micro::Append(k("b"), 2)],
                Some(vec![Reply::Integer(1), Reply::Integer(1)]),
                0,
                100,
            ),
            txn(vec![Micro::Read(k("a")), Micro::Read(k("b"))], Some(vec![list(&[1]), list(&[])]), 10, 20),
        ];
        let finals = BTreeMap::from([(k("a"), vec![1]), (k("b"), vec![2])]);
        let r = check(&h, &finals);
        assert!(r.anomaly.as_deref().is_some_and(|a| a.contains("cycle")), "{r:?}");
    }

    #[test]
    fn a_stale_read_after_a_write_returned_breaks_real_time() {
        let h = vec![
            txn(vec![Micro::Append(k("a"), 1)], Some(vec![Reply::Integer(1)]), 0, 10),
            txn(vec![Micro::Read(k("a"))], Some(vec![list(&[])]), 20, 30),
        ];
        let finals = BTreeMap::from([(k("a"), vec![1])]);
        assert!(check(&h, &finals).anomaly.is_some());
        // The same read while the append was still in flight is fine.
        let concurrent = vec![h[0].clone(), txn(vec![Micro::Read(k("a"))], Some(vec![list(&[])]), 5, 30)];
        assert_eq!(check(&concurrent, &finals).anomaly, None);
    }

    #[test]
    fn a_read_that_is_not_a_prefix_is_an_anomaly() {
        let h = vec![
            txn(
                vec![Micro::Append(k("a"), 1), Micro::Append(k("a"), 2)],
                Some(vec![Reply::Integer(1), Reply::Integer(2)]),
                0,
                5,
            ),
            txn(vec![Micro::Read(k("a"))], Some(vec![list(&[2])]), 10, 20),
        ];
        let finals = BTreeMap::from([(k("a"), vec![1, 2])]);
        assert!(check(&h, &finals).anomaly.is_some_and(|a| a.contains("prefix")));
    }
}

#[cfg(test)]
mod simulated {
    use super::super::cluster::{SimConfig, run};

    #[test]
    fn list_append_histories_are_strictly_serializable_under_faults_and_membership_changes() {
        let mut changes = 0;
        for seed in 0..8 {
            let out = run(SimConfig::list_append(seed));
            let r = out.list_append.unwrap_or_else(|| panic!("seed {seed}: the final reads failed"));
            assert_eq!(r.anomaly, None, "seed {seed}");
            assert_eq!(r.lost, 0, "seed {seed}");
            assert!(r.committed > 50, "seed {seed}: {r:?}");
            changes += out.membership_changes;
        }
        assert!(changes > 0, "no membership change was applied in 8 seeds");
    }

    #[test]
    fn a_transaction_applied_in_two_entries_is_caught() {
        let caught = (0..40).find(|&seed| {
            let mut config = SimConfig::list_append(seed);
            config.split_transactions = true;
            run(config).list_append.is_some_and(|r| r.anomaly.is_some() || r.lost > 0)
        });
        assert!(caught.is_some(), "splitting transactions was not caught in 40 seeds");
    }
}
