//! The ratios and figures the store's goals ask for, read from the rows: Kairos's write and
//! read latency and throughput beside the peer that promises as much (redis+wait, or
//! redis-aof+wait where both fsync; etcd on tmpfs or on the disk), and its failover time.

use super::client::Op;
use super::systems::{Fsync, Setup, Storage, SystemKind};
use super::{FailoverRow, Goal, Row};

/// The ratios and figures the store's goals ask for, from the rows.
pub fn goals(rows: &[Row], failover: &[FailoverRow]) -> Vec<Goal> {
    let find = |system: SystemKind,
                members: Option<usize>,
                fsync: Option<Fsync>,
                storage: Option<Storage>,
                clients: usize,
                op: Op| {
        rows.iter().find(|r| {
            r.is_bench()
                && r.system == system
                && members.is_none_or(|m| r.members == m)
                && fsync.is_none_or(|f| r.fsync == f)
                && storage.is_none_or(|s| r.storage == s)
                && r.clients == clients
                && r.op == op
        })
    };
    let most_clients = rows.iter().filter(|r| r.is_bench()).map(|r| r.clients).max().unwrap_or(1);
    let many = if rows.iter().any(|r| r.is_bench() && r.clients == 50) { 50 } else { most_clients };
    let mut counts: Vec<usize> = rows.iter().filter(|r| r.is_bench()).map(|r| r.clients).collect();
    counts.sort_unstable();
    counts.dedup();
    // Kairos's figure over the peer's, against the most (or, `at_least`, the least) it may be.
    let compare =
        |name: String, k: &Row, p: &Row, kv: f64, pv: f64, unit: &str, bound: Option<(f64, bool)>| {
            let ratio = (pv > 0.0).then(|| kv / pv);
            Goal {
                name,
                kairos: k.setup().label(),
                peer: Some(p.setup().label()),
                kairos_value: kv,
                peer_value: Some(pv),
                unit: unit.into(),
                ratio,
                goal: bound.map(|(b, at_least)| format!("{} {b}x", if at_least { ">=" } else { "<=" })),
                met: bound.and_then(|(b, at_least)| ratio.map(|r| if at_least { r >= b } else { r <= b })),
            }
        };
    let p50 = |r: &Row| r.latency_us.p50.unwrap_or(0.0);
    let p99 = |r: &Row| r.latency_us.p99.unwrap_or(0.0);
    let mut goals = Vec::new();
    for fsync in [Fsync::Never, Fsync::Always] {
        // Like with like: the fsync-always rows beside the Redis and etcd that sync too.
        let (etcd_storage, redis, throughput_goal) = match fsync {
            Fsync::Always => (Storage::Disk, SystemKind::RedisAofWait, 1.0),
            Fsync::Never => (Storage::Tmpfs, SystemKind::RedisWait, 1.5),
        };
        let kairos = |clients, op| find(SystemKind::Kairos, Some(3), Some(fsync), None, clients, op);
        if let (Some(k), Some(p)) = (kairos(1, Op::Write), find(redis, None, None, None, 1, Op::Write)) {
            let name = format!("kairos write p50 at 1 client over {}'s", redis.name());
            goals.push(compare(name, k, p, p50(k), p50(p), "us", Some((1.0, false))));
        }
        if let (Some(k), Some(p)) = (kairos(many, Op::Write), find(redis, None, None, None, many, Op::Write))
        {
            let name = format!("kairos write throughput at {many} clients over {}'s", redis.name());
            goals.push(compare(name, k, p, k.ops_per_s, p.ops_per_s, "ops/s", Some((throughput_goal, true))));
            if fsync == Fsync::Never {
                let name = format!("kairos write p99 at {many} clients over {}'s", redis.name());
                goals.push(compare(name, k, p, p99(k), p99(p), "us", Some((1.0, false))));
            }
        }
        // Linearizable reads against Redis alone's, which reads its memory.
        if fsync == Fsync::Never
            && let (Some(k), Some(p)) =
                (kairos(1, Op::Read), find(SystemKind::Redis, None, None, None, 1, Op::Read))
        {
            let name = "kairos read p50 at 1 client over redis's".to_string();
            goals.push(compare(name, k, p, p50(k), p50(p), "us", Some((1.3, false))));
        }
        // Below etcd at every client count, writes and reads.
        for &clients in &counts {
            for op in Op::ALL {
                let etcd = find(SystemKind::Etcd, Some(3), None, Some(etcd_storage), clients, op);
                if let (Some(k), Some(p)) = (kairos(clients, op), etcd) {
                    let who =
                        if clients == 1 { "1 client".to_string() } else { format!("{clients} clients") };
                    let name = format!("kairos {} p50 at {who} over etcd's", op.name());
                    goals.push(compare(name, k, p, p50(k), p50(p), "us", Some((1.0, false))));
                }
            }
        }
    }
    for f in failover.iter().filter(|f| f.system == SystemKind::Kairos) {
        let Some(write) = f.write else { continue };
        goals.push(Goal {
            name: "kairos failover p99 (SIGKILL of the leader to a write answered through another member)"
                .into(),
            kairos: Setup { system: f.system, members: f.members, fsync: f.fsync, storage: f.storage }
                .label(),
            peer: None,
            kairos_value: write.p99,
            peer_value: None,
            unit: "ms".into(),
            ratio: None,
            goal: Some("< 10 ms".into()),
            met: Some(write.p99 < 10.0),
        });
    }
    goals
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::kv_bench::failover::Quantiles;
    use crate::experiments::kv_bench::rounds::Ranges;
    use crate::experiments::kv_bench::{LatencyUs, TOOL};

    fn row(
        system: SystemKind,
        members: usize,
        fsync: Fsync,
        storage: Storage,
        clients: usize,
        p50: f64,
        ops: f64,
    ) -> Row {
        Row {
            system,
            members,
            fsync,
            storage,
            clients,
            op: Op::Write,
            latency_us: LatencyUs { p50: Some(p50), p99: Some(p50), p999: Some(p50), max: Some(p50) },
            ops_per_s: ops,
            runs: 3,
            range: Ranges::default(),
            tool: TOOL.into(),
            ops: 1,
            errors: 0,
            server_cpu: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_goals_compare_like_with_like() {
        let rows = vec![
            row(SystemKind::RedisWait, 2, Fsync::Never, Storage::Memory, 1, 50.0, 20_000.0),
            row(SystemKind::RedisWait, 2, Fsync::Never, Storage::Memory, 50, 400.0, 100_000.0),
            row(SystemKind::Etcd, 3, Fsync::Never, Storage::Tmpfs, 1, 1000.0, 1000.0),
            row(SystemKind::Kairos, 3, Fsync::Never, Storage::Disk, 1, 150.0, 6_000.0),
            row(SystemKind::Kairos, 3, Fsync::Never, Storage::Disk, 50, 500.0, 50_000.0),
            row(SystemKind::Kairos, 3, Fsync::Always, Storage::Disk, 1, 2000.0, 500.0),
            row(SystemKind::RedisAofWait, 2, Fsync::Always, Storage::Disk, 1, 1000.0, 1000.0),
        ];
        let failover = vec![FailoverRow {
            system: SystemKind::Kairos,
            members: 3,
            fsync: Fsync::Always,
            storage: Storage::Disk,
            trials: 2,
            write: Some(Quantiles { p50: 12.0, p99: 15.0, max: 15.0 }),
            elected: None,
            samples: Vec::new(),
            election_timeout: String::new(),
            notes: Vec::new(),
        }];
        let goals = goals(&rows, &failover);
        let ratio = |name: &str, kairos: &str| {
            goals.iter().find(|g| g.name.contains(name) && g.kairos.contains(kairos)).and_then(|g| g.ratio)
        };
        assert_eq!(ratio("over redis+wait's", "fsync never"), Some(3.0));
        assert_eq!(ratio("write p50 at 1 client over etcd's", "fsync never"), Some(0.15));
        assert_eq!(ratio("write p50 at 50 clients over etcd's", "fsync never"), None, "no etcd row at 50");
        let met = |name: &str, kairos: &str| {
            goals.iter().find(|g| g.name.contains(name) && g.kairos.contains(kairos)).and_then(|g| g.met)
        };
        assert_eq!(met("write p50 at 1 client over redis+wait's", "fsync never"), Some(false));
        assert_eq!(met("write p50 at 1 client over etcd's", "fsync never"), Some(true));
        assert_eq!(met("throughput at 50 clients", "fsync never"), Some(false), "0.5x, not 1.5x");
        assert_eq!(met("write p99 at 50 clients", "fsync never"), Some(false), "500 against 400 us");
        assert_eq!(ratio("throughput at 50 clients", "fsync never"), Some(0.5));
        assert_eq!(ratio("over etcd's", "fsync always"), None, "no etcd on the disk to compare with");
        assert_eq!(met("throughput at 50 clients", "fsync always"), None, "no fsync-always row at 50");
        assert_eq!(ratio("over redis+wait's", "fsync always"), None, "fsync always is compared with the AOF");
        assert_eq!(ratio("over redis-aof+wait's", "fsync always"), Some(2.0));
        assert_eq!(ratio("over redis-aof+wait's", "fsync never"), None);
        let f = goals.iter().find(|g| g.name.contains("failover")).unwrap();
        assert_eq!((f.kairos_value, f.met), (15.0, Some(false)));
    }
}
