//! `kairos dispatch cold`: what a flow's state costs when it is not warm in the worker's cache,
//! the figure the dispatch simulations take as `--cold-ns`, measured on this machine with real
//! threads.
//!
//! Each flow's state is one 64-byte line of eight counters, read and written by every packet
//! of the flow (a per-flow table as a worker keeps it). Three costs per packet:
//! - **warm**: the worker touched the flow's state last (its own cache has it);
//! - **cross-core**: the state was last written by another worker on another core, as after a
//!   flow moves (the line comes from that core's cache);
//! - **memory**: the state was not touched for a long while (a table far larger than the
//!   caches, visited in random order).
//!
//! Two threads pinned to two cores take turns over one batch of flows (`batch` lines, in a
//! shuffled order): in its turn a thread passes over the batch twice, timed apart, the first
//! pass finding every line in the other core's cache, the second in its own. The memory pass
//! runs on one thread. Each is done twice: chained (each flow's line names the next, so one
//! packet's state is found only after the previous one's: the latency a packet sees when its
//! state is on its critical path) and batched (independent flows, whose misses the core
//! overlaps). Every figure is ns per packet, median and range over the turns.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `plots` (none), `results_dir`, `chained` and `batched` (each `warm_ns`,
//! `cross_core_ns`, `memory_ns`, each `median`, `p10`, `p90`, `min`, `max`), `cold_ns`,
//! `config`, `simulated` (false). `scripts/test` reads `chained.*.median` and `cold_ns`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Result, bail};
use kairos_metrics::NoiseConfig;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::Serialize;

use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// One flow's state: a cache line of counters; the first word names the flow the chained pass
/// visits next.
#[repr(align(64))]
#[derive(Default)]
struct FlowState([AtomicU64; 8]);

impl FlowState {
    /// A packet's work on its flow's state: read every counter, write each back moved; returns
    /// the next flow of the chain.
    #[inline]
    fn touch(&self) -> usize {
        for c in &self.0[1..] {
            let v = c.load(Ordering::Relaxed);
            c.store(v + 1, Ordering::Relaxed);
        }
        self.0[0].load(Ordering::Relaxed) as usize
    }
}

/// Links `table`'s flows in `order` into one cycle through their first words.
fn chain(table: &[FlowState], order: &[usize]) {
    for (i, &f) in order.iter().enumerate() {
        table[f].0[0].store(order[(i + 1) % order.len()] as u64, Ordering::Relaxed);
    }
}

/// One pass over `order`'s flows: `chained`, each flow found from the previous one's state (a
/// packet's state access on its critical path: one miss at a time), else in the listed order
/// (independent accesses the core overlaps). Returns ns per packet.
fn pass(table: &[FlowState], order: &[usize], chained: bool) -> f64 {
    let start = Instant::now();
    if chained {
        let mut f = order[0];
        for _ in 0..order.len() {
            f = table[f].touch();
        }
        std::hint::black_box(f);
    } else {
        let mut sink = 0;
        for &f in order {
            sink ^= table[f].touch();
        }
        std::hint::black_box(sink);
    }
    start.elapsed().as_nanos() as f64 / order.len() as f64
}

/// The measurement's settings.
#[derive(Debug, Clone, Serialize)]
pub struct ColdConfig {
    /// Flows in the batch the two cores pass back and forth (1 to `memory_flows`).
    pub batch: usize,
    /// Turns, 2 to 10000000 (each thread has half; the first finds its lines fresh).
    pub turns: usize,
    /// Flows in the table of the memory pass, 64 bytes each (1 to 16777216: 1 GiB).
    pub memory_flows: usize,
    /// Samples of the memory pass, each a visit of `batch` random flows (1 to 1000000).
    pub memory_samples: usize,
    /// The two cores: distinct, and online here (`--cores`).
    pub cores: [usize; 2],
}

impl ColdConfig {
    /// 512 flows a batch; 2,000 turns (500 with `quick`); a 64 MiB table for the memory pass.
    pub fn preset(quick: bool) -> Self {
        Self {
            batch: 512,
            turns: if quick { 500 } else { 2_000 },
            memory_flows: 1 << 20,
            memory_samples: if quick { 200 } else { 1_000 },
            cores: [0, 1],
        }
    }
}

/// Median and range of a per-packet cost, ns.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Least.
    pub min: f64,
    /// Most.
    pub max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Self {
        v.sort_unstable_by(f64::total_cmp);
        let at = |q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        Self { median: at(0.5), p10: at(0.1), p90: at(0.9), min: at(0.0), max: at(1.0) }
    }
}

/// The three costs, ns per packet.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Costs {
    /// The worker touched the flow last.
    pub warm_ns: Spread,
    /// Another core wrote the flow's state last.
    pub cross_core_ns: Spread,
    /// The state comes from memory.
    pub memory_ns: Spread,
}

/// What was measured.
#[derive(Debug, Clone, Serialize)]
pub struct ColdSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// Each packet's state found after the previous packet's (one miss at a time).
    pub chained: Costs,
    /// Independent packets, whose misses the core overlaps.
    pub batched: Costs,
    /// The cost of a moved flow's state: chained cross-core less chained warm, medians.
    pub cold_ns: f64,
    /// The settings.
    pub config: ColdConfig,
    /// Always false: measured on real threads.
    pub simulated: bool,
}

impl Experiment for ColdConfig {
    const NAME: &'static str = "dispatch-cold";
    type Summary = ColdSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        let online = kairos_sys::proc::online_cores();
        let [a, b] = self.cores;
        if a == b || a >= online || b >= online {
            return Err(InvalidConfig::new(format!(
                "--cores {a},{b}: the measurement needs two distinct cores below {online} (this machine's online cores)"
            )));
        }
        // Past 1 GiB the table is no longer an experiment's allocation but a machine's.
        if !(1..=1 << 24).contains(&self.memory_flows) {
            return Err(InvalidConfig::new(format!(
                "memory_flows must be 1 to 16777216 (1 GiB), got {}",
                self.memory_flows
            )));
        }
        // A chained pass needs a flow to start from, and a memory sample a batch to walk.
        if !(1..=self.memory_flows).contains(&self.batch) {
            return Err(InvalidConfig::new(format!(
                "batch must be 1 to memory_flows ({}) flows, got {}",
                self.memory_flows, self.batch
            )));
        }
        // The first turn finds its lines fresh, not in the other core's cache: two turns at
        // least for one cross-core figure.
        if !(2..=10_000_000).contains(&self.turns) {
            return Err(InvalidConfig::new(format!("turns must be 2 to 10000000, got {}", self.turns)));
        }
        if !(1..=1_000_000).contains(&self.memory_samples) {
            return Err(InvalidConfig::new(format!(
                "memory_samples must be 1 to 1000000, got {}",
                self.memory_samples
            )));
        }
        // Chained then batched, each two passes a turn (about 100 ns a packet) and the memory
        // pass, whose table is made and touched (about 1 us a flow in a debug build).
        let turns = self.turns as f64 * self.batch as f64 * 2.0 * 1e-7;
        Ok(Plan::new(2, turns + self.memory_flows as f64 * 1e-6))
    }

    /// The quiet windows around the run only: its two threads own two cores, and a sampler
    /// taking either for a millisecond would land in a turn's figure.
    fn noise(&self) -> Option<NoiseConfig> {
        Some(NoiseConfig::around_only())
    }

    fn run(&self, run: &mut Run<'_>) -> Result<ColdSummary> {
        run.doing("chained");
        let chained = costs(self, true)?;
        run.step("batched");
        let batched = costs(self, false)?;
        run.step("");
        Ok(ColdSummary {
            run: run.finish(),
            cold_ns: (chained.cross_core_ns.median - chained.warm_ns.median).max(0.0),
            chained,
            batched,
            config: self.clone(),
            simulated: false,
        })
    }
}

/// The table a person reads: the three costs chained and batched, and the cold miss.
pub fn report(s: &ColdSummary) -> String {
    let [first, second] = s.config.cores;
    let mut out = format!(
        "real threads on cores {first} and {second}: a 64-byte flow state read and written per packet, {} flows a batch, {} turns; {}\n",
        s.config.batch,
        s.config.turns,
        s.run.machine.one_line()
    );
    out.push_str(&format!(
        "{:<44} {:>8} {:>8} {:>8}   {:>8}\n",
        "ns per packet", "chained", "p10", "p90", "batched"
    ));
    for (what, c, b) in [
        ("warm (this worker touched the flow last)", s.chained.warm_ns, s.batched.warm_ns),
        ("cross-core (another core wrote it last)", s.chained.cross_core_ns, s.batched.cross_core_ns),
        ("memory (64 MiB table, random flows)", s.chained.memory_ns, s.batched.memory_ns),
    ] {
        out.push_str(&format!(
            "{:<44} {:>8.1} {:>8.1} {:>8.1}   {:>8.1}\n",
            what, c.median, c.p10, c.p90, b.median
        ));
    }
    out.push_str(&format!(
        "a moved flow's state costs {:.0} ns more than a warm one, chained (the simulations' --cold-ns); batched {:.1} ns\n",
        s.cold_ns,
        s.batched.cross_core_ns.median - s.batched.warm_ns.median
    ));
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

fn costs(config: &ColdConfig, chained: bool) -> Result<Costs> {
    let table: Vec<FlowState> = (0..config.batch).map(|_| FlowState::default()).collect();
    let mut order: Vec<usize> = (0..config.batch).collect();
    order.shuffle(&mut StdRng::seed_from_u64(1));
    chain(&table, &order);
    let turn = AtomicU64::new(0);
    let (table, order, turn) = (&table, &order, &turn);
    let results: Vec<Result<(Vec<f64>, Vec<f64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|me| {
                s.spawn(move || -> Result<(Vec<f64>, Vec<f64>)> {
                    kairos_sys::thread::pin_current_thread_to(&[config.cores[me]])?;
                    let (mut cross, mut warm) = (Vec::new(), Vec::new());
                    for t in (me..config.turns).step_by(2) {
                        while turn.load(Ordering::Acquire) != t as u64 {
                            std::hint::spin_loop();
                        }
                        let first = pass(table, order, chained);
                        // The first turn finds the lines fresh from their allocation, not in
                        // the other core's cache.
                        if t > 0 {
                            cross.push(first);
                        }
                        warm.push(pass(table, order, chained));
                        turn.store(t as u64 + 1, Ordering::Release);
                    }
                    Ok((cross, warm))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("a measuring thread panicked")))
            .collect()
    });
    let (mut cross, mut warm) = (Vec::new(), Vec::new());
    for r in results {
        let (c, w) = r?;
        cross.extend(c);
        warm.extend(w);
    }
    // On a thread of its own, so the caller's affinity stays as it was.
    let memory = std::thread::scope(|s| s.spawn(|| memory_pass(config, chained)).join())
        .unwrap_or_else(|_| bail!("the memory pass panicked"))?;
    Ok(Costs { warm_ns: Spread::of(warm), cross_core_ns: Spread::of(cross), memory_ns: Spread::of(memory) })
}

/// ns per packet over random flows of a table far past the caches, on the first core.
fn memory_pass(config: &ColdConfig, chained: bool) -> Result<Vec<f64>> {
    kairos_sys::thread::pin_current_thread_to(&[config.cores[0]])?;
    let table: Vec<FlowState> = (0..config.memory_flows).map(|_| FlowState::default()).collect();
    let mut order: Vec<usize> = (0..config.memory_flows).collect();
    order.shuffle(&mut StdRng::seed_from_u64(2));
    // Each sample a chain of its own through `batch` random flows; every line written here, so
    // its page exists.
    let samples: Vec<&[usize]> = order.chunks(config.batch).take(config.memory_samples).collect();
    for chunk in &samples {
        chain(&table, chunk);
    }
    // Evict what the chaining left in the caches: touch the whole table once in order.
    for f in &table {
        f.touch();
    }
    for chunk in &samples {
        chain(&table, chunk);
    }
    Ok(samples.iter().map(|chunk| pass(&table, chunk, chained)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cores_must_be_distinct() {
        let mut config = ColdConfig::preset(true);
        config.cores = [0, 0];
        assert!(config.plan().unwrap_err().to_string().contains("two distinct cores"));
        // The preset's cores exist only where there are two.
        if kairos_sys::proc::online_cores() >= 2 {
            let config = ColdConfig { turns: 1, ..ColdConfig::preset(true) };
            assert!(config.plan().unwrap_err().to_string().starts_with("turns must be"));
        }
    }
}
