//! `kairos dispatch threads`: the dispatcher on real threads while workers come and go: per
//! policy, with and without the hand-off, how many packets are seen out of sequence, how many flows' state moved, and what
//! a packet costs a worker, over a forced change of workers every millisecond.
//!
//! This thread is the dispatcher: it draws each packet's flow from a trace made beforehand
//! (uniform or Zipf over the flows, so drawing costs no more than a load), gives it the flow's
//! next sequence number and dispatches it through the real [`Dispatcher`] and policy to a
//! [`WorkerPool`] (an SPSC ring per worker, a 64-byte row of state per flow, touched by every
//! packet and moving with its flow). Every `change_ms` of wall time one worker leaves or comes
//! back (workers 1 to N-1 take turns; worker 0 stays), so every policy remaps under load, and
//! the load-aware policy takes its rebalancing step as often. The
//! pool checks every packet against its flow's row, so a reordering, or two workers serving one
//! flow at once, is counted where it happens.
//!
//! Everything here is measured, not simulated. On a machine with fewer cores than workers plus
//! the dispatcher, the threads share cores (workers spin briefly, then yield), which slows the
//! run but cannot hide a reordering: the check is in the data, not in the timing.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `plots` (none), `results_dir`, `config`, `simulated` (false), `rows`, in
//! [`ThreadsConfig::rows`]' order (`policy`, `hand_off`, `packets`, `changes`, `handoffs`,
//! `max_held`, `idle_moves`, `out_of_sequence`, `lost_updates`, `state_moves`,
//! `worker_ns_per_packet`, `mpps`).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kairos_dispatch::dispatcher::DEFAULT_GROUPS;
use kairos_dispatch::pool::Packet;
use kairos_dispatch::remap::flow_hashes;
use kairos_dispatch::skew::Zipf;
use kairos_dispatch::{Dispatcher, PolicyKind, PoolConfig, Steer, WorkerId, WorkerPool};
use kairos_metrics::NoiseConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::harness::table::{TextTable, left, right};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// Packets between two looks at the clock (and at held packets).
const CHECK_EVERY: u64 = 64;
/// Flow draws made beforehand and cycled through.
const TRACE: usize = 1 << 20;

/// One run's settings.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadsConfig {
    /// Packets a row, 1000 to 10000000000.
    pub packets: u64,
    /// Worker threads, 2 to 64 (one stays while the others take turns leaving).
    pub workers: usize,
    /// Flows (rows of state), 1 to 10000000.
    pub flows: usize,
    /// The flows' Zipf exponent, 0 (uniform) to 3.
    pub zipf: f64,
    /// Wall-clock time between two changes of workers, ms (0.01 to 10000).
    pub change_ms: f64,
    /// The policies, each run with the hand-off; `hash-mod` and `kairos` also without it (at
    /// least one).
    pub policies: Vec<PolicyKind>,
    /// The dispatcher's core and the workers' (dealt round-robin), each online here; empty:
    /// none pinned.
    pub cores: Vec<usize>,
    /// The trace's seed.
    pub seed: u64,
    /// Whether the dispatcher offers idle groups a shorter queue (`kairos` takes it).
    pub idle_steering: bool,
}

impl ThreadsConfig {
    /// 1,000,000 packets a row with `quick`, else 10,000,000; 3 workers, 4,096 uniform flows, a
    /// change every millisecond, every policy, cores 0 (dispatcher) and 1 (workers) where there
    /// are two.
    pub fn preset(quick: bool) -> Self {
        let online = kairos_sys::proc::online_cores();
        Self {
            packets: if quick { 1_000_000 } else { 10_000_000 },
            workers: 3,
            flows: 4_096,
            zipf: 0.0,
            change_ms: 1.0,
            policies: PolicyKind::ALL.to_vec(),
            cores: if online >= 2 { vec![0, 1] } else { Vec::new() },
            seed: 1,
            idle_steering: true,
        }
    }

    /// The rows to run, in order: each policy with the hand-off, then the baselines without.
    pub fn rows(&self) -> Vec<(PolicyKind, bool)> {
        let mut rows: Vec<_> = self.policies.iter().map(|&p| (p, true)).collect();
        rows.extend(
            self.policies
                .iter()
                .filter(|p| matches!(p, PolicyKind::HashMod | PolicyKind::Kairos))
                .map(|&p| (p, false)),
        );
        rows
    }
}

/// One policy's run.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadsRow {
    /// The policy, as `--policy` spells it.
    pub policy: &'static str,
    /// Whether the dispatcher held moved flows until their old worker was done.
    pub hand_off: bool,
    /// Packets dispatched (and processed: the pool never drops).
    pub packets: u64,
    /// Changes of workers made during the run.
    pub changes: u64,
    /// Groups handed over to a new worker after waiting for the old.
    pub handoffs: u64,
    /// Most packets held at the dispatcher at once.
    pub max_held: u64,
    /// Groups with nothing in flight moved to a shorter queue (the `kairos` policy).
    pub idle_moves: u64,
    /// Packets a worker saw out of sequence (overtaken, or two workers on one flow).
    pub out_of_sequence: u64,
    /// Updates of a flow's state lost to another worker's.
    pub lost_updates: u64,
    /// Flow states that moved between workers.
    pub state_moves: u64,
    /// A worker's busy time per packet, ns (one clock read per burst included).
    pub worker_ns_per_packet: f64,
    /// Packets per second through the whole pipeline, millions.
    pub mpps: f64,
}

/// What the threads experiment found.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadsSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// One per (policy, hand-off).
    pub rows: Vec<ThreadsRow>,
    /// Always false: real threads.
    pub simulated: bool,
    /// The settings.
    pub config: ThreadsConfig,
}

impl Experiment for ThreadsConfig {
    const NAME: &'static str = "dispatch-threads";
    type Summary = ThreadsSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if !(1_000..=10_000_000_000).contains(&self.packets) {
            return Err(InvalidConfig::new(format!(
                "--packets {} is out of range: 1000 to 10000000000",
                self.packets
            )));
        }
        if !(2..=64).contains(&self.workers) {
            return Err(InvalidConfig::new(format!("--workers {} is out of range: 2 to 64", self.workers)));
        }
        if !(1..=10_000_000).contains(&self.flows) {
            return Err(InvalidConfig::new(format!("--flows {} is out of range: 1 to 10000000", self.flows)));
        }
        if !(0.0..=3.0).contains(&self.zipf) {
            return Err(InvalidConfig::new(format!("--zipf {} is out of range: 0 to 3", self.zipf)));
        }
        if !(0.01..=10_000.0).contains(&self.change_ms) {
            return Err(InvalidConfig::new(format!(
                "--change-ms {} is out of range: 0.01 to 10000",
                self.change_ms
            )));
        }
        if self.policies.is_empty() {
            return Err(InvalidConfig::new(
                "--policies names none: give at least one of hash-mod, calisto, caladan, kairos",
            ));
        }
        let online = kairos_sys::proc::online_cores();
        if let Some(c) = self.cores.iter().find(|&&c| c >= online) {
            return Err(InvalidConfig::new(format!(
                "--cores {c}: this machine's online cores are 0 to {}",
                online - 1
            )));
        }
        // About 10 us a packet in a debug build on two shared cores, where the load-aware rows
        // (buckets moved at every change) run slowest; a release build is tens of times faster.
        Ok(Plan::new(self.rows().len(), self.packets as f64 * 1e-5))
    }

    /// The quiet windows around the run only: the dispatcher spins on its core, and a sampler
    /// taking it for a millisecond would stall the pipeline inside a row's packets a second.
    fn noise(&self) -> Option<NoiseConfig> {
        Some(NoiseConfig::around_only())
    }

    fn run(&self, run: &mut Run<'_>) -> Result<ThreadsSummary> {
        let rows = measure(self, &mut |i, kind, hand_off| {
            if i > 0 {
                run.step("");
            }
            let how = if hand_off { "with the hand-off" } else { "without the hand-off" };
            run.doing(&format!("{} {how}", kind.name()));
        })?;
        run.step("");
        Ok(ThreadsSummary { run: run.finish(), rows, simulated: false, config: self.clone() })
    }
}

/// Runs every row in order; `next` hears each row's index, policy and hand-off before it
/// starts.
fn measure(config: &ThreadsConfig, next: &mut dyn FnMut(usize, PolicyKind, bool)) -> Result<Vec<ThreadsRow>> {
    let hashes = flow_hashes(config.flows, config.seed);
    let trace = trace(config);
    let mut rows = Vec::new();
    for (i, (kind, hand_off)) in config.rows().into_iter().enumerate() {
        next(i, kind, hand_off);
        rows.push(run_row(config, kind, hand_off, &hashes, &trace)?);
    }
    Ok(rows)
}

/// The table a person reads: per policy and hand-off, order kept, state moved, cost.
pub fn report(s: &ThreadsSummary) -> String {
    let c = &s.config;
    let mut out = format!(
        "real threads: the dispatcher on core {}, {} workers on {}; {} packets a row over {} flows (Zipf {}), a change of workers every {} ms; {}\n",
        c.cores.first().map_or("any".to_string(), |c| c.to_string()),
        c.workers,
        if c.cores.len() > 1 { format!("cores {:?}", &c.cores[1..]) } else { "any core".to_string() },
        c.packets,
        c.flows,
        c.zipf,
        c.change_ms,
        s.run.machine.one_line()
    );
    let mut table = TextTable::new(&[
        left("policy"),
        right("hand-off"),
        right("changes"),
        right("hand-offs"),
        right("idle moves"),
        right("max held"),
        right("out of seq"),
        right("lost"),
        right("state moves"),
        right("worker ns"),
        right("Mpps"),
    ]);
    for row in &s.rows {
        table.row([
            row.policy.to_string(),
            if row.hand_off { "on" } else { "off" }.to_string(),
            row.changes.to_string(),
            row.handoffs.to_string(),
            row.idle_moves.to_string(),
            row.max_held.to_string(),
            row.out_of_sequence.to_string(),
            row.lost_updates.to_string(),
            row.state_moves.to_string(),
            format!("{:.1}", row.worker_ns_per_packet),
            format!("{:.2}", row.mpps),
        ]);
    }
    out.push_str(&table.render());
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

/// The flow of each packet, drawn beforehand.
fn trace(config: &ThreadsConfig) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let len = TRACE.min(config.packets as usize);
    if config.zipf == 0.0 {
        return (0..len).map(|_| rng.random_range(0..config.flows as u32)).collect();
    }
    let zipf = Zipf::new(config.flows, config.zipf);
    (0..len).map(|_| zipf.sample(rng.random::<f64>()) as u32).collect()
}

fn run_row(
    config: &ThreadsConfig,
    kind: PolicyKind,
    hand_off: bool,
    hashes: &[u64],
    trace: &[u32],
) -> Result<ThreadsRow> {
    let worker_cores = if config.cores.len() > 1 { config.cores[1..].to_vec() } else { config.cores.clone() };
    let pool_config =
        PoolConfig { workers: config.workers, flows: config.flows, ring: 1024, cores: worker_cores };
    // The dispatcher is this thread: pinned on a thread of its own, so the caller's affinity
    // stays as it was.
    let dispatcher_core = config.cores.first().copied();
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(core) = dispatcher_core {
                kairos_sys::thread::pin_current_thread(core)?;
            }
            let mut pool = WorkerPool::start(&pool_config)?;
            let mut policy = kind.build(config.workers);
            let mut d = Dispatcher::new(&mut *policy, hand_off, DEFAULT_GROUPS);
            d.set_idle_steering(config.idle_steering);
            let mut seq = vec![0u32; config.flows];
            let period = Duration::from_secs_f64(config.change_ms / 1e3);
            let started = Instant::now();
            let mut next_change = started + period;
            let mut changes = 0u64;
            let mut now_ns = 0u64;
            for i in 0..config.packets {
                let flow = trace[i as usize % trace.len()];
                let s = &mut seq[flow as usize];
                d.dispatch(hashes[flow as usize], Packet { flow, seq: *s }, now_ns, &mut pool);
                *s = s.wrapping_add(1);
                if i % CHECK_EVERY == 0 {
                    let now = Instant::now();
                    now_ns = now.duration_since(started).as_nanos() as u64;
                    d.poll(now_ns, &mut pool);
                    if now >= next_change {
                        // The load-aware policy's step, as often as the workers change.
                        d.policy_mut().rebalance(now_ns);
                        let w = 1 + (changes / 2 % (config.workers as u64 - 1)) as WorkerId;
                        if changes.is_multiple_of(2) {
                            d.policy_mut().leave(w);
                        } else {
                            d.policy_mut().join(w);
                        }
                        changes += 1;
                        next_change += period;
                    }
                }
            }
            while d.held_now() > 0 {
                d.poll(now_ns, &mut pool);
                std::thread::yield_now();
            }
            let stats = d.stats();
            let report = pool.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
            let seconds = started.elapsed().as_secs_f64();
            if stats.enqueued != config.packets || report.processed != config.packets {
                bail!(
                    "{} packets dispatched, {} enqueued, {} processed: the pool must take every one ({stats:?})",
                    config.packets,
                    stats.enqueued,
                    report.processed
                );
            }
            Ok(ThreadsRow {
                policy: kind.name(),
                hand_off,
                packets: config.packets,
                changes,
                handoffs: stats.handoffs,
                max_held: stats.max_held,
                idle_moves: stats.idle_moves,
                out_of_sequence: report.out_of_sequence,
                lost_updates: report.lost_updates,
                state_moves: report.state_moves,
                worker_ns_per_packet: report.busy_ns_per_packet,
                mpps: config.packets as f64 / seconds / 1e6,
            })
        })
        .join()
        .unwrap_or_else(|_| bail!("the dispatcher thread panicked"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> ThreadsConfig {
        ThreadsConfig {
            packets: 200_000,
            workers: 3,
            flows: 512,
            zipf: 0.0,
            change_ms: 0.05,
            policies: vec![PolicyKind::Kairos, PolicyKind::HashMod],
            cores: Vec::new(),
            seed: 3,
            idle_steering: true,
        }
    }

    #[test]
    fn settings_out_of_range_are_refused_naming_the_flag() {
        assert!(small().plan().is_ok());
        let e = ThreadsConfig { workers: 1, ..small() }.plan().unwrap_err().to_string();
        assert!(e.starts_with("--workers 1"), "{e}");
        let e = ThreadsConfig { policies: Vec::new(), ..small() }.plan().unwrap_err().to_string();
        assert!(e.starts_with("--policies"), "{e}");
        let e = ThreadsConfig { cores: vec![4096], ..small() }.plan().unwrap_err().to_string();
        assert!(e.starts_with("--cores 4096"), "{e}");
        let e = ThreadsConfig { zipf: 4.0, ..small() }.plan().unwrap_err().to_string();
        assert!(e.starts_with("--zipf 4"), "{e}");
    }

    #[test]
    fn the_hand_off_keeps_order_and_the_baseline_without_it_is_run_beside() {
        let mut announced = Vec::new();
        let rows =
            measure(&small(), &mut |i, kind, hand_off| announced.push((i, kind.name(), hand_off))).unwrap();
        let names: Vec<_> = rows.iter().map(|r| (r.policy, r.hand_off)).collect();
        let told: Vec<_> = announced.iter().map(|&(_, p, h)| (p, h)).collect();
        assert_eq!(told, names, "each row is announced before it runs, in order");
        assert_eq!(names, [("kairos", true), ("hash-mod", true), ("kairos", false), ("hash-mod", false)]);
        for row in rows.iter().filter(|r| r.hand_off) {
            assert!(row.changes > 0 && row.state_moves > 0, "{row:?}");
            assert_eq!((row.out_of_sequence, row.lost_updates), (0, 0), "{row:?}");
        }
        assert!(rows.iter().all(|r| r.packets == 200_000 && r.mpps > 0.0));
    }

    #[test]
    fn zipf_traces_favour_the_first_flows() {
        let c = ThreadsConfig { zipf: 1.2, ..small() };
        let t = trace(&c);
        let first = t.iter().filter(|&&f| f == 0).count();
        let last = t.iter().filter(|&&f| f == 511).count();
        assert!(first > 50 * last.max(1), "{first} vs {last}");
    }
}
