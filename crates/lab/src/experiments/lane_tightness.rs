//! `kairos lane tightness`: how tight X-ADJ's bounds are. A fat-tree is filled with seeded random
//! requests (a third multicast), the admitted tunnels are simulated under every adversary of the
//! validator (the eight general ones, then a targeted one per tunnel that releases every other
//! tunnel so that it reaches the first link it shares with that tunnel just before it), and each
//! tunnel's announced bounds are set beside what its packets did: observed
//! maximum latency against the bound, observed spread (max - min) against the announced jitter.
//! Where the jitter bound is more than 3x the observed spread, the report says where the bound's
//! allowance goes (waiting behind other tunnels at every hop, blocking by lower sub-lanes, link
//! jitter) and why the runs did not reach it.
//!
//! Verdicts are only about tunnels whose packets were observed: an admitted tunnel none of whose
//! packets reached a receiver is listed in `unobserved`, outside every count; a run where no
//! tunnel was admitted, or none observed, is an error rather than a report of nothing.
//!
//! Every flag is checked before anything runs ([`TightnessConfig::check`]): k, the request count,
//! and the run's estimated length, at most an hour.
//!
//! # Summary fields (stable)
//! `machine`, `config`, `admitted`, `refused`, `validation` (`violations`, `drops`, `events`,
//! `simulated_ns`), `tunnels` (per observed tunnel: `name`, `sublane`, `receivers`, `hops`,
//! `sharers`, `bound_max_ns`, `observed_max_ns`, `jitter_ns`, `observed_spread_ns`,
//! `jitter_ratio`, `queueing_share`, `blocking_share`, `link_jitter_share`, `reason`),
//! `unobserved` (names of admitted tunnels with no packet observed), `within_3x` (observed
//! tunnels whose jitter bound is at most 3x the observed spread), `median_jitter_ratio`, `plots`,
//! `results_dir`. Files: `config.json`, `summary.json`, `tunnels.csv`, the two plots.

use std::collections::BTreeSet;

use anyhow::{Result, bail};
use kairos_metrics::NoiseConfig;
use kairos_te::validator::{GENERAL_RUNS, validate_adversarially, validate_targeted};
use kairos_te::{Allocation, LinkSpec, Request, Tunnel, generate, ps_to_ns};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::harness::plot::{Scales, XySeries, xy_chart};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo, human};

/// What the tightness experiment runs.
#[derive(Debug, Clone, Serialize)]
pub struct TightnessConfig {
    /// Fat-tree arity: even, 2 to [`MAX_K`].
    pub k: usize,
    /// Requests offered (some may be refused), 1 to [`MAX_REQUESTS`], and no more than the run
    /// can validate within [`MAX_SECONDS`].
    pub requests: usize,
    /// Simulated length of each general adversary run, in the longest approved period, 1 to
    /// [`MAX_PERIODS`].
    pub periods: u64,
    /// Most packet releases per adversary run, 1 to [`MAX_RELEASES`].
    pub max_releases: u64,
    /// Seed of the requests and of the validator.
    pub seed: u64,
}

/// The largest fat-tree: k = 32 has 8,192 hosts and 49,152 links; past it building the tree
/// and routing every request over it takes longer than validating it.
pub const MAX_K: usize = 32;
/// The most requests offered: admission re-adjusts every tunnel a new one shares a link with,
/// and the targeted adversary runs once per tunnel, so the work grows with the square.
pub const MAX_REQUESTS: usize = 10_000;
/// The longest run accepted, seconds (by the estimate [`TightnessConfig::plan`] makes).
pub const MAX_SECONDS: f64 = 3_600.0;
/// The most periods per general adversary run.
pub const MAX_PERIODS: u64 = 1_000_000;
/// The most packet releases per adversary run.
pub const MAX_RELEASES: u64 = 100_000_000;
/// Periods simulated by each targeted run.
const TARGETED_PERIODS: u64 = 3;
/// Packets a tunnel releases per longest approved period, on average: periods are drawn
/// log-uniformly in [10 us, 1 ms], so longest / period averages (1 ms)(1/10 us - 1/1 ms) / ln 100.
const RELEASES_PER_LONGEST_PERIOD: f64 = 21.5;
/// Simulation time per packet released: 20-25 events (the release, then an arrival and a
/// transmission per link of its tree) at about 0.11 us each (measured: 2.8e8 events in 30 s of
/// CPU for the full preset, 1.6e9 for k = 16 with 1,000 requests).
const SECONDS_PER_RELEASE: f64 = 3e-6;
/// Admission time per request per 1,000 links of the fat-tree (X-OPT's Dijkstra per receiver,
/// then X-ADJ on the tunnels it shares links with), measured: 0.25-0.3 ms at k = 16 and 32.
const SECONDS_PER_REQUEST_PER_KILOLINK: f64 = 3e-4;

impl TightnessConfig {
    /// k = 4 and 40 requests (a few seconds).
    pub fn quick() -> Self {
        Self { k: 4, requests: 40, periods: 200, max_releases: 200_000, seed: 1 }
    }

    /// k = 8 and 300 requests (about 25 s on this 2-core machine).
    pub fn full() -> Self {
        Self { k: 8, requests: 300, periods: 500, max_releases: 1_000_000, seed: 1 }
    }

    /// [`TightnessConfig::quick`] or [`TightnessConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }

    /// About how long the run takes, seconds: admission, then eight general adversary runs
    /// and one targeted run per tunnel, each of at most `max_releases` releases.
    pub fn estimate_seconds(&self) -> f64 {
        let n = self.requests as f64;
        let links = 1.5 * (self.k as f64).powi(3);
        let admission = n * SECONDS_PER_REQUEST_PER_KILOLINK * (links / 1e3).max(1.0);
        let per_run =
            |periods: u64| (periods as f64 * n * RELEASES_PER_LONGEST_PERIOD).min(self.max_releases as f64);
        let releases = GENERAL_RUNS as f64 * per_run(self.periods) + n * per_run(TARGETED_PERIODS);
        admission + releases * SECONDS_PER_RELEASE
    }

    /// Checks every field against its limit, saying why, before anything runs.
    pub fn check(&self) -> Result<(), InvalidConfig> {
        if self.k < 2 || !self.k.is_multiple_of(2) || self.k > MAX_K {
            return Err(InvalidConfig::new(format!(
                "--k must be an even fat-tree arity from 2 to {MAX_K} (k = {MAX_K} has {} hosts and {} links; larger trees take longer to build and route over than to validate), got {}",
                MAX_K.pow(3) / 4,
                3 * MAX_K.pow(3) / 2,
                self.k
            )));
        }
        if !(1..=MAX_REQUESTS).contains(&self.requests) {
            return Err(InvalidConfig::new(format!(
                "--requests must be from 1 to {MAX_REQUESTS} (the targeted adversary validates every tunnel against all the others, so the work grows with the square), got {}",
                self.requests
            )));
        }
        if !(1..=MAX_PERIODS).contains(&self.periods) {
            return Err(InvalidConfig::new(format!(
                "periods must be from 1 to {MAX_PERIODS}, got {}",
                self.periods
            )));
        }
        if !(1..=MAX_RELEASES).contains(&self.max_releases) {
            return Err(InvalidConfig::new(format!(
                "max_releases must be from 1 to {MAX_RELEASES}, got {}",
                self.max_releases
            )));
        }
        let seconds = self.estimate_seconds();
        if seconds > MAX_SECONDS {
            return Err(InvalidConfig::new(format!(
                "--k {} with --requests {} would take about {} (admission, then 8 adversary runs and one targeted run per tunnel); the limit is {}: offer fewer requests",
                self.k,
                self.requests,
                human(std::time::Duration::from_secs_f64(seconds)),
                human(std::time::Duration::from_secs_f64(MAX_SECONDS))
            )));
        }
        Ok(())
    }
}

/// One admitted tunnel whose packets were observed: its bounds beside what they did.
#[derive(Debug, Clone, Serialize)]
pub struct TunnelTightness {
    /// The request's name.
    pub name: String,
    /// Its sub-lane.
    pub sublane: u8,
    /// How many receivers.
    pub receivers: usize,
    /// Links in its tree.
    pub hops: usize,
    /// Other tunnels sharing at least one of its links.
    pub sharers: usize,
    /// Announced maximum latency, ns.
    pub bound_max_ns: f64,
    /// Highest latency seen, ns.
    pub observed_max_ns: f64,
    /// Announced maximum jitter, ns.
    pub jitter_ns: f64,
    /// Highest minus lowest latency seen, ns.
    pub observed_spread_ns: f64,
    /// `jitter_ns / observed_spread_ns` (the spread counted as at least 1 ps).
    pub jitter_ratio: f64,
    /// Shares of the tree's summed per-hop allowance: waiting behind tunnels of the same or
    /// higher sub-lanes, blocking by a lower sub-lane packet, link jitter.
    pub queueing_share: f64,
    /// See `queueing_share`.
    pub blocking_share: f64,
    /// See `queueing_share`.
    pub link_jitter_share: f64,
    /// Why the bound is loose, where it is more than 3x the observed spread.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The validator's totals over every run.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationTotals {
    /// Packets outside their bounds.
    pub violations: u64,
    /// Packets dropped.
    pub drops: u64,
    /// Events simulated.
    pub events: u64,
    /// Simulated time, summed over the runs, ns.
    pub simulated_ns: f64,
}

/// What the tightness experiment found.
#[derive(Debug, Clone, Serialize)]
pub struct TightnessSummary {
    /// Machine, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: TightnessConfig,
    /// Tunnels admitted.
    pub admitted: usize,
    /// Requests refused.
    pub refused: usize,
    /// The validator's totals.
    pub validation: ValidationTotals,
    /// The tunnels whose packets were observed, loosest last; the verdicts are about these only.
    pub tunnels: Vec<TunnelTightness>,
    /// Admitted tunnels none of whose packets reached a receiver in any run: no verdict.
    pub unobserved: Vec<String>,
    /// Tunnels of `tunnels` whose jitter bound is at most 3x the observed spread.
    pub within_3x: usize,
    /// The median `jitter_ratio` of `tunnels`.
    pub median_jitter_ratio: f64,
}

const NS: u64 = 1_000;

fn request(rng: &mut SmallRng, hosts: &[usize], i: usize) -> Request {
    let mut pick = hosts.to_vec();
    pick.shuffle(rng);
    // A third multicast, to 2-8 receivers, where there are that many other hosts (k = 2 has
    // two hosts: unicast only).
    let most = 8.min(hosts.len() - 1);
    let receivers = if most >= 2 && rng.random_range(0..3) == 0 { rng.random_range(2..=most) } else { 1 };
    Request {
        name: format!("t{i}"),
        sender: pick[0],
        receivers: pick[1..=receivers].to_vec(),
        packet_bytes: rng.random_range(64..=1_500),
        period: (10f64.powf(rng.random_range(4.0..6.0)) * NS as f64) as u64,
        sublane: rng.random_range(0..3),
    }
}

impl Experiment for TightnessConfig {
    const NAME: &'static str = "lane-tightness";
    type Summary = TightnessSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        self.check()?;
        // Three steps: admission, the general adversaries, the targeted one.
        Ok(Plan::new(3, self.estimate_seconds() / 3.0))
    }

    /// A simulation: no time is measured, so no noise probe.
    fn noise(&self) -> Option<NoiseConfig> {
        None
    }

    fn run(&self, run: &mut Run<'_>) -> Result<TightnessSummary> {
        measure(self, run)
    }
}

fn measure(config: &TightnessConfig, run: &mut Run<'_>) -> Result<TightnessSummary> {
    let spec = LinkSpec { queue_bytes: 4 << 20, ..LinkSpec::default() };
    let mut alloc = Allocation::new(generate::fat_tree(config.k, spec)?);
    let hosts: Vec<usize> = alloc.topology().hosts().collect();
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let mut refused = 0;
    run.doing("admitting");
    for i in 0..config.requests {
        if alloc.admit(request(&mut rng, &hosts, i)).is_err() {
            refused += 1;
        }
    }
    run.log(&format!(
        "fat-tree k={}: {} tunnels admitted, {refused} refused; validating under 8 adversaries",
        config.k,
        alloc.len()
    ));
    if alloc.is_empty() {
        bail!(
            "none of the {} requests was admitted on the k={} fat-tree: no bound to compare",
            config.requests,
            config.k
        );
    }
    run.step("8 general adversaries");
    let topo = alloc.topology().clone();
    let tunnels = alloc.tunnels();
    let mut report =
        validate_adversarially(&topo, &tunnels, config.periods, config.max_releases, config.seed);
    run.log(&format!(
        "targeted adversary: every other tunnel lined up against each of the {} in turn",
        tunnels.len()
    ));
    run.step("targeted adversary");
    report.merge(&validate_targeted(&topo, &tunnels, TARGETED_PERIODS, config.max_releases));
    run.step("");
    // Verdicts only about tunnels whose packets arrived: one that delivered nothing has no
    // observed spread to set its bound beside.
    let (ran, unobserved): (Vec<_>, Vec<_>) =
        tunnels.iter().zip(&report.tunnels).partition(|(_, r)| r.delivered > 0);
    let unobserved: Vec<String> = unobserved.iter().map(|(t, _)| t.request.name.clone()).collect();
    if ran.is_empty() {
        bail!(
            "no packet of the {} admitted tunnels reached a receiver in any run: nothing to set the bounds beside",
            tunnels.len()
        );
    }
    let mut rows: Vec<TunnelTightness> =
        ran.iter().map(|(t, r)| tightness(&alloc, t, r.observed_min, r.observed_max)).collect();
    rows.sort_by(|a, b| a.jitter_ratio.total_cmp(&b.jitter_ratio));
    let within_3x = rows.iter().filter(|r| r.jitter_ratio <= 3.0).count();
    let median_jitter_ratio = rows[rows.len() / 2].jitter_ratio;
    plot(&rows, run)?;
    let mut csv = String::from(
        "name,sublane,receivers,hops,sharers,bound_max_ns,observed_max_ns,jitter_ns,observed_spread_ns,jitter_ratio,queueing_share,blocking_share,link_jitter_share\n",
    );
    for r in &rows {
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3}\n",
            r.name,
            r.sublane,
            r.receivers,
            r.hops,
            r.sharers,
            r.bound_max_ns,
            r.observed_max_ns,
            r.jitter_ns,
            r.observed_spread_ns,
            r.jitter_ratio,
            r.queueing_share,
            r.blocking_share,
            r.link_jitter_share
        ));
    }
    run.dir().write_text("tunnels.csv", &csv)?;
    Ok(TightnessSummary {
        run: run.finish(),
        config: config.clone(),
        admitted: alloc.len(),
        refused,
        validation: ValidationTotals {
            violations: report.violations(),
            drops: report.drops(),
            events: report.events,
            simulated_ns: ps_to_ns(report.horizon),
        },
        tunnels: rows,
        unobserved,
        within_3x,
        median_jitter_ratio,
    })
}

fn tightness(
    alloc: &Allocation,
    t: &Tunnel,
    observed_min: Option<u64>,
    observed_max: Option<u64>,
) -> TunnelTightness {
    let topo = alloc.topology();
    let sharers: BTreeSet<u64> =
        t.links.iter().flat_map(|&l| alloc.load(l).tunnels()).filter(|&x| x != t.id).collect();
    // How many times the bound charges a same or higher sub-lane sharer: once per shared hop.
    let charges: usize = t
        .links
        .iter()
        .map(|&l| {
            alloc.load(l).by_sublane[..=t.request.sublane as usize]
                .iter()
                .flatten()
                .filter(|e| e.id != t.id)
                .count()
        })
        .sum();
    let ahead: BTreeSet<u64> = t
        .links
        .iter()
        .flat_map(|&l| alloc.load(l).by_sublane[..=t.request.sublane as usize].iter().flatten().map(|e| e.id))
        .filter(|&x| x != t.id)
        .collect();
    // The per-hop allowances summed over the tree: waiting (same and higher sub-lanes),
    // blocking (one lower sub-lane packet), link jitter.
    let (mut queueing, mut blocking, mut jitter) = (0u64, 0u64, 0u64);
    for hop in &t.hops {
        let link = topo.link(hop.link);
        let load = alloc.load(hop.link);
        // The wait includes the blocking, so the blocking is at most the wait.
        let block = match load.max_bytes_below(t.request.sublane) {
            0 => 0,
            b => link.tx_time(b).unwrap_or(u64::MAX).min(hop.wait),
        };
        // Each is at most the tunnel's maximum latency, which fits: the sums cannot overflow,
        // and saturate if they did.
        blocking = blocking.saturating_add(block);
        queueing = queueing.saturating_add(hop.wait - block);
        jitter = jitter.saturating_add(link.max_jitter);
    }
    let total = (queueing as f64 + blocking as f64 + jitter as f64).max(1.0);
    let b = t.resources;
    let spread = observed_max.zip(observed_min).map_or(0, |(a, b)| a - b);
    let ratio = b.max_jitter as f64 / spread.max(1) as f64;
    let (q, bl, j) = (queueing as f64 / total, blocking as f64 / total, jitter as f64 / total);
    let reason = if ratio <= 3.0 {
        String::new()
    } else if q >= bl && q >= j {
        format!(
            "{:.0}% of the allowance is waiting: the bound charges one packet of the {} same- or higher-sub-lane tunnels \
             on its links at every hop they share ({} charges), but one that is ahead of it at a hop stays ahead at the \
             next, so even the targeted runs pay each about once",
            q * 100.0,
            ahead.len(),
            charges
        )
    } else if bl >= j {
        format!(
            "{:.0}% of the allowance is a largest lower sub-lane packet starting just before it at every hop; \
             the runs line that up at one hop of a packet, rarely at several",
            bl * 100.0
        )
    } else {
        format!(
            "{:.0}% of the allowance is link jitter on every hop adding up; the runs did not line those up",
            j * 100.0
        )
    };
    TunnelTightness {
        name: t.request.name.clone(),
        sublane: t.request.sublane,
        receivers: t.request.receivers.len(),
        hops: t.links.len(),
        sharers: sharers.len(),
        bound_max_ns: ps_to_ns(b.max_latency()),
        observed_max_ns: observed_max.map_or(0.0, ps_to_ns),
        jitter_ns: ps_to_ns(b.max_jitter),
        observed_spread_ns: ps_to_ns(spread),
        jitter_ratio: ratio,
        queueing_share: q,
        blocking_share: bl,
        link_jitter_share: j,
        reason,
    }
}

fn plot(rows: &[TunnelTightness], run: &mut Run<'_>) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut by_bound: Vec<&TunnelTightness> = rows.iter().collect();
    by_bound.sort_by(|a, b| a.bound_max_ns.total_cmp(&b.bound_max_ns));
    let rank = |i: usize| (i + 1) as f64;
    let latency = run.plot("latency_bound_vs_observed.png");
    xy_chart(
        &latency,
        "Latency per tunnel: X-ADJ's bounds and the validator's extreme packets",
        "tunnel (sorted by bound)",
        "latency (us)",
        Scales { log_x: false, log_y: false },
        &[
            XySeries {
                name: "bound (min latency + max jitter)".into(),
                points: by_bound.iter().enumerate().map(|(i, r)| (rank(i), r.bound_max_ns / 1e3)).collect(),
                model: true,
                color: 0,
            },
            XySeries {
                name: "observed maximum".into(),
                points: by_bound
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (rank(i), r.observed_max_ns / 1e3))
                    .collect(),
                model: false,
                color: 0,
            },
            XySeries {
                name: "bound (min latency)".into(),
                points: by_bound
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (rank(i), (r.bound_max_ns - r.jitter_ns) / 1e3))
                    .collect(),
                model: true,
                color: 3,
            },
            XySeries {
                name: "observed minimum".into(),
                points: by_bound
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (rank(i), (r.observed_max_ns - r.observed_spread_ns) / 1e3))
                    .collect(),
                model: false,
                color: 3,
            },
        ],
    )?;
    let ratio = run.plot("jitter_ratio.png");
    xy_chart(
        &ratio,
        "Announced jitter / observed spread per tunnel (target: at most 3)",
        "tunnel (sorted by ratio)",
        "jitter bound / observed spread",
        Scales { log_x: false, log_y: true },
        &[
            XySeries {
                name: "ratio".into(),
                points: rows.iter().enumerate().map(|(i, r)| (rank(i), r.jitter_ratio)).collect(),
                model: false,
                color: 1,
            },
            XySeries {
                name: "3x".into(),
                points: vec![(1.0, 3.0), (rows.len() as f64, 3.0)],
                model: true,
                color: 2,
            },
        ],
    )?;
    Ok(())
}

/// The report as text.
pub fn report(s: &TightnessSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    out.push_str(&format!(
        "fat-tree k={}: {} tunnels admitted, {} refused; validator: {} events, {:.3} ms simulated, {} violations, {} drops\n\n",
        s.config.k,
        s.admitted,
        s.refused,
        s.validation.events,
        s.validation.simulated_ns / 1e6,
        s.validation.violations,
        s.validation.drops
    ));
    out.push_str(&format!(
        "{:<8} {:>3} {:>4} {:>4} {:>7} {:>12} {:>12} {:>11} {:>11} {:>7}  reason\n",
        "tunnel", "sl", "rcv", "hops", "sharers", "bound us", "obs max us", "jitter us", "spread us", "ratio"
    ));
    for r in &s.tunnels {
        out.push_str(&format!(
            "{:<8} {:>3} {:>4} {:>4} {:>7} {:>12.3} {:>12.3} {:>11.3} {:>11.3} {:>7.2}  {}\n",
            r.name,
            r.sublane,
            r.receivers,
            r.hops,
            r.sharers,
            r.bound_max_ns / 1e3,
            r.observed_max_ns / 1e3,
            r.jitter_ns / 1e3,
            r.observed_spread_ns / 1e3,
            r.jitter_ratio,
            r.reason
        ));
    }
    out.push_str(&format!(
        "\njitter bound within 3x of the observed spread: {} of {} tunnels (median ratio {:.2})\n",
        s.within_3x,
        s.tunnels.len(),
        s.median_jitter_ratio
    ));
    if !s.unobserved.is_empty() {
        out.push_str(&format!(
            "no verdict on {} admitted tunnels whose packets reached no receiver: {}\n",
            s.unobserved.len(),
            s.unobserved.join(", ")
        ));
    }
    for p in &s.run.plots {
        out.push_str(&format!("plot: {}\n", p.display()));
    }
    out.push_str(&format!("results: {}\n", s.run.results_dir.display()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_on_the_two_host_fat_tree_are_unicast() {
        // k = 2 has two hosts: a multicast draw used to ask for 2..=1 receivers and panic
        // ("cannot sample empty range").
        let mut rng = SmallRng::seed_from_u64(1);
        for i in 0..1_000 {
            let r = request(&mut rng, &[0, 1], i);
            assert_eq!(r.receivers.len(), 1);
            assert_ne!(r.sender, r.receivers[0]);
        }
        // Three hosts: multicast to both others.
        let mut rng = SmallRng::seed_from_u64(2);
        assert!((0..1_000).any(|i| request(&mut rng, &[0, 1, 2], i).receivers.len() == 2));
    }

    #[test]
    fn the_presets_and_k_2_pass_and_what_would_take_hours_is_refused_with_why() {
        for c in [
            TightnessConfig::quick(),
            TightnessConfig::full(),
            TightnessConfig { k: 2, ..TightnessConfig::quick() },
        ] {
            assert_eq!(c.check(), Ok(()), "{c:?}");
        }
        // About half a minute and a minute.
        assert!(TightnessConfig::quick().estimate_seconds() < 15.0);
        assert!((20.0..120.0).contains(&TightnessConfig::full().estimate_seconds()));
        let with = |k, requests| {
            TightnessConfig { k, requests, ..TightnessConfig::full() }.check().unwrap_err().to_string()
        };
        assert!(with(3, 40).contains("even fat-tree arity from 2 to 32"), "{}", with(3, 40));
        assert!(with(0, 40).contains("from 2 to 32"));
        assert!(with(34, 40).contains("from 2 to 32"));
        assert!(with(8, 0).contains("from 1 to 10000"));
        let hours = with(8, 8_000);
        assert!(hours.contains("would take about") && hours.contains("offer fewer requests"), "{hours}");
        // The limit the help states: about 4,000 requests at the full preset.
        assert_eq!(with_ok(8, 4_000), Ok(()));
        assert!(with_ok(8, 4_500).is_err());
    }

    fn with_ok(k: usize, requests: usize) -> Result<(), InvalidConfig> {
        TightnessConfig { k, requests, ..TightnessConfig::full() }.check()
    }
}
