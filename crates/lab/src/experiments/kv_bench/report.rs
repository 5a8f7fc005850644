//! The bench's table, its CSV and its plots: latency at one client by nines (write and read,
//! one line per setup, every run's answers together) and throughput against clients (write and
//! read, the medians of the runs).

use anyhow::Result;
use serde::Serialize;

use super::client::Op;
use super::systems::Setup;
use super::{BenchSummary, Histograms, Row};
use crate::harness::Run;
use crate::harness::plot::{Scales, Series, XySeries, tail_chart, xy_chart};
use crate::harness::table::{TextTable, left, right};

/// One row of `rows.csv`.
#[derive(Debug, Serialize)]
pub struct CsvRow {
    system: String,
    members: usize,
    fsync: &'static str,
    storage: &'static str,
    clients: usize,
    op: &'static str,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    p999_us: Option<f64>,
    max_us: Option<f64>,
    ops_per_s: f64,
    runs: usize,
    p50_min_us: Option<f64>,
    p50_max_us: Option<f64>,
    ops_per_s_min: f64,
    ops_per_s_max: f64,
    errors: u64,
    server_cpu: Option<f64>,
    tool: String,
}

impl CsvRow {
    /// The CSV form of `r`.
    pub fn of(r: &Row) -> Self {
        Self {
            system: r.system.name().into(),
            members: r.members,
            fsync: r.fsync.name(),
            storage: r.storage.name(),
            clients: r.clients,
            op: r.op.name(),
            p50_us: r.latency_us.p50,
            p99_us: r.latency_us.p99,
            p999_us: r.latency_us.p999,
            max_us: r.latency_us.max,
            ops_per_s: r.ops_per_s,
            runs: r.runs,
            p50_min_us: r.range.latency_us.p50.map(|[min, _]| min),
            p50_max_us: r.range.latency_us.p50.map(|[_, max]| max),
            ops_per_s_min: r.range.ops_per_s[0],
            ops_per_s_max: r.range.ops_per_s[1],
            errors: r.errors,
            server_cpu: r.server_cpu,
            tool: r.tool.clone(),
        }
    }
}

/// Draws the plots into the run's directory.
pub(crate) fn plots(run: &mut Run<'_>, rows: &[Row], histograms: &Histograms) -> Result<()> {
    for op in Op::ALL {
        let tails: Vec<Series> = histograms
            .iter()
            .filter(|(_, o, h)| *o == op && h.count() > 0)
            .map(|(setup, _, h)| Series {
                name: setup.label(),
                points: h.ccdf().into_iter().map(|(ns, above)| (ns as f64 / 1e3, above)).collect(),
            })
            .collect();
        if !tails.is_empty() {
            let path = run.plot(&format!("{}_latency_1_client.png", op.name()));
            tail_chart(
                &path,
                &format!("{} latency at 1 client: fraction of {}s slower than x", op.name(), op.name()),
                "latency, us",
                &tails,
            )?;
        }
        let mut setups: Vec<Setup> =
            rows.iter().filter(|r| r.is_bench() && r.op == op).map(Row::setup).collect();
        setups.dedup();
        let series: Vec<XySeries> = setups
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let points = rows
                    .iter()
                    .filter(|r| r.is_bench() && r.op == op && r.setup() == *s)
                    .map(|r| (r.clients as f64, r.ops_per_s))
                    .collect();
                XySeries::measured(s.label(), points, i)
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !series.is_empty() {
            let path = run.plot(&format!("{}_throughput.png", op.name()));
            xy_chart(
                &path,
                &format!("{} throughput against closed-loop clients", op.name()),
                "clients",
                &format!("{}s answered per second", op.name()),
                Scales { log_x: true, log_y: true },
                &series,
            )?;
        }
    }
    Ok(())
}

fn us(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| if v >= 1000.0 { format!("{v:.0}") } else { format!("{v:.1}") })
}

/// A range as `min-max`.
fn span(v: Option<[f64; 2]>, figure: fn(Option<f64>) -> String) -> String {
    v.map_or("-".into(), |[min, max]| format!("{}-{}", figure(Some(min)), figure(Some(max))))
}

fn rate(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// The table `kairos kv bench` prints.
pub fn table(s: &BenchSummary) -> String {
    let c = &s.config;
    let mut out = format!(
        "kv bench: {} s a point after {} s of warm-up, closed-loop clients {:?}, {}-byte values, clients talk to the leader\n",
        c.seconds, c.warmup_seconds, c.clients, c.value_bytes
    );
    out.push_str(&format!(
        "runs: each point {} times, one run a round, the rounds interleaving the setups (each starts one setup further along); figures are medians, [min-max] beside p50 and ops/s\n",
        c.runs
    ));
    out.push_str(&format!("placement: {} (sched_setaffinity)\n", s.placement.rule));
    let mut table = TextTable::new(&[
        left("system"),
        left("op"),
        right("clients"),
        right("p50 us"),
        right("[p50 range]"),
        right("p99 us"),
        right("p99.9 us"),
        right("max us"),
        right("ops/s"),
        right("[ops/s range]"),
        right("cpu"),
    ]);
    for r in s.rows.iter().filter(|r| r.is_bench()) {
        table.row([
            r.setup().label().to_string(),
            r.op.name().to_string(),
            r.clients.to_string(),
            us(r.latency_us.p50).to_string(),
            span(r.range.latency_us.p50, us).to_string(),
            us(r.latency_us.p99).to_string(),
            us(r.latency_us.p999).to_string(),
            us(r.latency_us.max).to_string(),
            format!("{:.0}", r.ops_per_s),
            span(Some(r.range.ops_per_s), rate).to_string(),
            r.server_cpu.map_or("-".into(), |c| format!("{c:.2}")).to_string(),
        ]);
    }
    out.push_str(&table.render());
    if !s.clusters.is_empty() {
        out.push_str(
            "idle: each cluster's processes' CPU with no clients, before any load, % of one core:\n",
        );
        for cl in &s.clusters {
            out.push_str(&format!(
                "  {:<38} {:>6.1} % ({} s)\n",
                cl.label, cl.idle_cpu_percent, cl.idle_seconds
            ));
        }
    }
    let benchmark: Vec<&Row> = s.rows.iter().filter(|r| !r.is_bench()).collect();
    if let Some(first) = benchmark.first() {
        out.push_str(&format!(
            "{} (its own clients, against the leader; medians of its runs):\n",
            first.tool
        ));
        for r in &benchmark {
            out.push_str(&format!(
                "  {:<38} {:<5} {:>10.0} ops/s [{}], p50 {} us, {} runs\n",
                r.setup().label(),
                r.op.name(),
                r.ops_per_s,
                span(Some(r.range.ops_per_s), rate),
                us(r.latency_us.p50),
                r.runs
            ));
        }
    }
    out.push_str("failover: the leader SIGKILLed, until a write through another member is answered, ms:\n");
    for f in &s.failover_ms.rows {
        let setup = Setup { system: f.system, members: f.members, fsync: f.fsync, storage: f.storage };
        let q = |q: Option<super::failover::Quantiles>| {
            q.map_or("-".into(), |q| format!("p50 {:.1}, p99 {:.1}, max {:.1}", q.p50, q.p99, q.max))
        };
        out.push_str(&format!(
            "  {:<38} {} trials: write {}; new leader known {}; election timeout {}\n",
            setup.label(),
            f.trials,
            q(f.write),
            q(f.elected),
            f.election_timeout
        ));
        for n in &f.notes {
            out.push_str(&format!("    {n}\n"));
        }
    }
    out.push_str(&format!(
        "  redis sentinel: {:.0} ms before a primary is even deemed down (default down-after-milliseconds; a constant, not measured)\n",
        s.failover_ms.redis_sentinel_down_after
    ));
    for g in &s.goals {
        let vs = match (&g.peer, g.peer_value, g.ratio) {
            (Some(p), Some(v), Some(r)) => format!(" vs {p} {v:.1} {}: {r:.2}x", g.unit),
            _ => String::new(),
        };
        let goal = match (&g.goal, g.met) {
            (Some(goal), Some(met)) => format!(" (goal {goal}: {})", if met { "met" } else { "missed" }),
            _ => String::new(),
        };
        out.push_str(&format!("goal: {}: {} {:.1} {}{vs}{goal}\n", g.name, g.kairos, g.kairos_value, g.unit));
    }
    if let Some(f) = &s.fsync_probe_us {
        out.push_str(&format!(
            "one 4 KiB write + fdatasync on {}: p50 {} us, p99 {} us\n",
            s.storage.disk,
            us(f.p50),
            us(f.p99)
        ));
    }
    for o in &s.placement.oversubscribed {
        out.push_str(&format!("oversubscribed: {o}\n"));
    }
    for (what, why) in &s.skipped {
        out.push_str(&format!("skipped {what}: {why}\n"));
    }
    for n in &s.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&format!("machine: {}\n", s.run.machine.one_line()));
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}
