//! The validator: a packet-level discrete-event simulation of the formal network model of the
//! source's Appendix A.1, which checks that every packet of every admitted tunnel reaches every
//! receiver within its announced `[min latency, min latency + max jitter]` and that none is
//! dropped.
//!
//! The model, as simulated: each tunnel's sender releases a packet every approved period from an
//! arbitrary phase (PD); each link has an egress queue per sub-lane, served FIFO within a
//! sub-lane and by strict priority between sub-lanes, never preempting a packet on the wire (FI,
//! ME, WC); a packet occupies the link's shared buffer from its arrival until its transmission
//! ends, and one that would overflow it is dropped (BS, GR); transmission takes `size / bw` (BW);
//! the link then delivers it after a delay anywhere in `[lambda_min, lambda_min + delta_max]`
//! (DE1, DE2), chosen at random or adversarially ([`Delays`]); a sending host whose node reported
//! a delay ([`Tunnel::host_jitter`]) lets each packet into its first queue anywhere in
//! `[0, host_jitter]` after the release, chosen the same way. A packet reaching a node is copied
//! at once into the queues of the tree's links out of that node. At equal times, transmissions end
//! before packets arrive.
//!
//! Integer picoseconds throughout, as in the analysis, so a bound met exactly is met.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use hashbrown::HashMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::request::{Resources, SUBLANES};
use crate::topology::{Link, LinkId, NodeId, Topology};
use crate::tunnel::{Tunnel, TunnelId};
use crate::units::Picos;

/// The longest simulated time: a quarter of what 64-bit picoseconds hold (about 53 days), so
/// that event times, release plus delays and waits, cannot overflow.
const HORIZON_LIMIT: Picos = Picos::MAX / 4;

/// How each link picks a packet's delay within `[lambda_min, lambda_min + delta_max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delays {
    /// Uniform at random (seeded).
    Random(u64),
    /// Always `lambda_min`.
    Min,
    /// Always `lambda_min + delta_max`.
    Max,
    /// Even packets of a tunnel the longest, odd ones the shortest: bunches packets together.
    Alternate,
}

/// Where each tunnel's first packet is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phases {
    /// All at time 0: every sender fires together.
    Zero,
    /// Uniform in `[0, period)` (seeded).
    Random(u64),
    /// The first release of each tunnel, in the order of the tunnels validated (any time, not
    /// only within the first period); for targeted adversaries that line tunnels up against one.
    Given(Vec<Picos>),
}

/// One run of the validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorConfig {
    /// Simulate this many of the longest approved period.
    pub periods: u64,
    /// At most this many packet releases in all; a shorter horizon when needed.
    pub max_releases: u64,
    /// Where each tunnel's first packet is released.
    pub phases: Phases,
    /// How links pick delays.
    pub delays: Delays,
}

impl Default for ValidatorConfig {
    fn default() -> Self {
        Self { periods: 100, max_releases: 2_000_000, phases: Phases::Random(1), delays: Delays::Random(1) }
    }
}

/// One packet outside its tunnel's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation {
    /// The tunnel.
    pub tunnel: TunnelId,
    /// The packet's number (0 is the first released).
    pub packet: u64,
    /// The receiver it reached.
    pub receiver: NodeId,
    /// Its latency there.
    pub latency: Picos,
    /// The tunnel's bounds at the time.
    pub bound: Resources,
}

/// What one tunnel's packets did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelReport {
    /// The tunnel.
    pub id: TunnelId,
    /// Its request's name.
    pub name: String,
    /// Its bounds.
    pub bound: Resources,
    /// Packets released.
    pub released: u64,
    /// Packet copies that reached a receiver.
    pub delivered: u64,
    /// Packet copies dropped at a full queue.
    pub drops: u64,
    /// The lowest latency seen, if any packet arrived.
    pub observed_min: Option<Picos>,
    /// The highest latency seen, if any packet arrived.
    pub observed_max: Option<Picos>,
    /// Packet copies outside the bounds.
    pub violations: u64,
    /// The first of them.
    pub first_violation: Option<Violation>,
}

/// What a run (or several, merged) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Simulated time.
    pub horizon: Picos,
    /// Events simulated.
    pub events: u64,
    /// One report per tunnel, in the order given.
    pub tunnels: Vec<TunnelReport>,
}

impl Report {
    /// Packet copies outside their bounds, over every tunnel.
    pub fn violations(&self) -> u64 {
        self.tunnels.iter().map(|t| t.violations).sum()
    }

    /// Packet copies dropped, over every tunnel.
    pub fn drops(&self) -> u64 {
        self.tunnels.iter().map(|t| t.drops).sum()
    }

    /// No violation and no drop.
    pub fn holds(&self) -> bool {
        self.violations() == 0 && self.drops() == 0
    }

    /// Folds another run of the same tunnels into this one (min of minima, max of maxima, sums).
    pub fn merge(&mut self, other: &Report) {
        self.horizon = self.horizon.saturating_add(other.horizon);
        self.events = self.events.saturating_add(other.events);
        for (a, b) in self.tunnels.iter_mut().zip(&other.tunnels) {
            a.released = a.released.saturating_add(b.released);
            a.delivered = a.delivered.saturating_add(b.delivered);
            a.drops = a.drops.saturating_add(b.drops);
            a.observed_min = opt(a.observed_min, b.observed_min, Picos::min);
            a.observed_max = opt(a.observed_max, b.observed_max, Picos::max);
            a.violations = a.violations.saturating_add(b.violations);
            a.first_violation = a.first_violation.or(b.first_violation);
        }
    }
}

fn opt(a: Option<Picos>, b: Option<Picos>, f: fn(Picos, Picos) -> Picos) -> Option<Picos> {
    match (a, b) {
        (Some(x), Some(y)) => Some(f(x, y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Transmission on a link ends (ordered first at equal times).
    TxEnd { link: LinkId },
    /// A packet of tunnel index `t`, number `j`, reaches `node`.
    Arrive { t: usize, j: u64, node: NodeId },
    /// Tunnel index `t` releases packet `j` at its sender.
    Release { t: usize, j: u64 },
}

#[derive(Debug, Default)]
struct LinkState {
    queues: [VecDeque<(usize, u64)>; SUBLANES as usize],
    occupancy: u64,
    sending: Option<(usize, u64)>,
}

/// Simulates `tunnels` (with their current resources) over `topo` and checks every packet.
pub fn validate(topo: &Topology, tunnels: &[&Tunnel], config: &ValidatorConfig) -> Report {
    let mut reports = blank(tunnels);
    if tunnels.is_empty() {
        return Report { horizon: 0, events: 0, tunnels: reports };
    }
    let periods: Vec<Picos> = tunnels.iter().map(|t| t.resources.period.max(1)).collect();
    let longest = *periods.iter().max().expect("not empty");
    let mut horizon = longest.saturating_mul(config.periods.max(1));
    if let Phases::Given(v) = &config.phases {
        horizon = horizon.saturating_add(v.iter().copied().max().unwrap_or(0));
    }
    let rate: f64 = periods.iter().map(|&p| 1.0 / p as f64).sum();
    if horizon as f64 * rate > config.max_releases as f64 {
        // A float-to-integer cast saturates; the cap below keeps it far from the top anyway.
        horizon = (config.max_releases as f64 / rate) as Picos;
    }
    // Event times add delays and transmissions to release times: leave them room.
    horizon = horizon.min(HORIZON_LIMIT);
    let phase_seed = match config.phases {
        Phases::Random(a) => Some(a),
        _ => None,
    };
    let mut rng = SmallRng::seed_from_u64(match (phase_seed, config.delays) {
        (Some(a), Delays::Random(b)) => a ^ b.rotate_left(17),
        (Some(a), _) | (None, Delays::Random(a)) => a,
        (None, _) => 0,
    });
    let phases: Vec<Picos> = periods
        .iter()
        .enumerate()
        .map(|(i, &p)| match &config.phases {
            Phases::Zero => 0,
            Phases::Random(_) => rng.random_range(0..p),
            Phases::Given(v) => v.get(i).copied().unwrap_or(0),
        })
        .collect();
    // The tree's links out of each node, per tunnel.
    let children: Vec<HashMap<NodeId, Vec<LinkId>>> = tunnels
        .iter()
        .map(|t| {
            let mut m: HashMap<NodeId, Vec<LinkId>> = HashMap::new();
            for &l in &t.links {
                m.entry(topo.link(l).from).or_default().push(l);
            }
            m
        })
        .collect();
    let mut links: HashMap<LinkId, LinkState> = HashMap::new();
    let mut heap: BinaryHeap<Reverse<(Picos, Event)>> = BinaryHeap::new();
    for (t, &phase) in phases.iter().enumerate() {
        if phase <= horizon {
            heap.push(Reverse((phase, Event::Release { t, j: 0 })));
        }
    }
    let mut events = 0u64;
    while let Some(Reverse((now, event))) = heap.pop() {
        events += 1;
        match event {
            Event::Release { t, j } => {
                reports[t].released += 1;
                let next = (j + 1).checked_mul(periods[t]).and_then(|d| d.checked_add(phases[t]));
                if let Some(next) = next.filter(|&n| n <= horizon) {
                    heap.push(Reverse((next, Event::Release { t, j: j + 1 })));
                }
                let entered = now.saturating_add(pick(config.delays, &mut rng, j, tunnels[t].host_jitter));
                heap.push(Reverse((entered, Event::Arrive { t, j, node: tunnels[t].request.sender })));
            }
            Event::Arrive { t, j, node } => {
                let tunnel = tunnels[t];
                if node != tunnel.request.sender && tunnel.request.receivers.contains(&node) {
                    // Release `j` happened (at most `horizon`), so this neither overflows nor
                    // goes below zero.
                    let latency = now - (phases[t] + j * periods[t]);
                    let r = &mut reports[t];
                    r.delivered += 1;
                    r.observed_min = Some(r.observed_min.map_or(latency, |m| m.min(latency)));
                    r.observed_max = Some(r.observed_max.map_or(latency, |m| m.max(latency)));
                    let b = tunnel.resources;
                    if latency < b.min_latency || latency > b.max_latency() {
                        r.violations += 1;
                        r.first_violation.get_or_insert(Violation {
                            tunnel: tunnel.id,
                            packet: j,
                            receiver: node,
                            latency,
                            bound: b,
                        });
                    }
                }
                for &l in children[t].get(&node).map_or(&[][..], |v| &v[..]) {
                    let link = topo.link(l);
                    let size = tunnel.request.packet_bytes;
                    let state = links.entry(l).or_default();
                    if state.occupancy.saturating_add(size) > link.queue_bytes {
                        reports[t].drops += 1;
                        continue;
                    }
                    state.occupancy += size;
                    state.queues[tunnel.request.sublane as usize].push_back((t, j));
                    if state.sending.is_none() {
                        start(topo, l, state, tunnels, now, &mut heap);
                    }
                }
            }
            Event::TxEnd { link: l } => {
                let link = topo.link(l);
                let state = links.get_mut(&l).expect("a link that sent has state");
                let (t, j) = state.sending.take().expect("a transmission was under way");
                state.occupancy -= tunnels[t].request.packet_bytes;
                let extra = pick(config.delays, &mut rng, j, link.max_jitter);
                let at = now.saturating_add(link.min_delay).saturating_add(extra);
                heap.push(Reverse((at, Event::Arrive { t, j, node: link.to })));
                start(topo, l, state, tunnels, now, &mut heap);
            }
        }
    }
    Report { horizon, events, tunnels: reports }
}

/// Packet `j`'s share of a jitter of up to `jitter`, as `delays` chooses it. No jitter draws
/// nothing from `rng`, so a seeded run without host delays is the run it was before them.
fn pick(delays: Delays, rng: &mut SmallRng, j: u64, jitter: Picos) -> Picos {
    match delays {
        _ if jitter == 0 => 0,
        Delays::Random(_) => rng.random_range(0..=jitter),
        Delays::Min => 0,
        Delays::Max => jitter,
        Delays::Alternate => {
            if j.is_multiple_of(2) {
                jitter
            } else {
                0
            }
        }
    }
}

/// A report with nothing observed yet, one row per tunnel.
fn blank(tunnels: &[&Tunnel]) -> Vec<TunnelReport> {
    tunnels
        .iter()
        .map(|t| TunnelReport {
            id: t.id,
            name: t.request.name.clone(),
            bound: t.resources,
            released: 0,
            delivered: 0,
            drops: 0,
            observed_min: None,
            observed_max: None,
            violations: 0,
            first_violation: None,
        })
        .collect()
}

/// Starts sending the head of the highest non-empty sub-lane queue, if any.
fn start(
    topo: &Topology,
    l: LinkId,
    state: &mut LinkState,
    tunnels: &[&Tunnel],
    now: Picos,
    heap: &mut BinaryHeap<Reverse<(Picos, Event)>>,
) {
    if let Some((t, j)) = state.queues.iter_mut().find_map(|q| q.pop_front()) {
        state.sending = Some((t, j));
        // An admitted packet's transmission time fits (its link's queue drains within the time
        // limit); one that does not ends "never".
        let tx = topo.link(l).tx_time(tunnels[t].request.packet_bytes).unwrap_or(Picos::MAX);
        heap.push(Reverse((now.saturating_add(tx), Event::TxEnd { link: l })));
    }
}

/// The runs of [`validate_adversarially`]: phases all zero and random, times four delay choices.
pub const GENERAL_RUNS: u64 = 8;

/// Runs the validator under every adversary: phases all zero and random, delays random,
/// shortest, longest and alternating ([`GENERAL_RUNS`] runs of at most `max_releases` releases
/// each); merges the reports.
pub fn validate_adversarially(
    topo: &Topology,
    tunnels: &[&Tunnel],
    periods: u64,
    max_releases: u64,
    seed: u64,
) -> Report {
    let mut merged: Option<Report> = None;
    for phases in [Phases::Zero, Phases::Random(seed)] {
        for delays in [Delays::Random(seed.wrapping_add(1)), Delays::Min, Delays::Max, Delays::Alternate] {
            let config = ValidatorConfig { periods, max_releases, phases: phases.clone(), delays };
            let r = validate(topo, tunnels, &config);
            match merged.as_mut() {
                Some(m) => m.merge(&r),
                None => merged = Some(r),
            }
        }
    }
    merged.expect("at least one run")
}

/// Release phases that line every other tunnel up against `target`: each reaches the first link
/// it shares with `target` just before `target` does (a lower sub-lane one a little earlier, so
/// that it is already on the wire), with every link delay at its longest (run them with
/// [`Delays::Max`]). `target`'s arrival at each link is worked out hop by hop: at each link it
/// waits for the tunnels lined up there (one lower sub-lane packet, then every same or higher
/// sub-lane one), and tunnels lined up upstream stay ahead of it. Tunnels sharing no link keep
/// phase 0 (before the shift that makes every release time non-negative).
pub fn targeted_phases(topo: &Topology, tunnels: &[&Tunnel], target: usize) -> Vec<Picos> {
    let t = tunnels[target];
    let on_target: HashMap<LinkId, usize> = t.links.iter().enumerate().map(|(i, &l)| (l, i)).collect();
    // Each other tunnel: the first link (in its own tree order) it shares with the target, and
    // its arrival there with no waiting and the longest delays (its host's included).
    let first_shared: Vec<Option<(LinkId, Picos)>> = tunnels
        .iter()
        .enumerate()
        .map(|(i, other)| {
            if i == target {
                return None;
            }
            let mut at: HashMap<NodeId, Picos> = HashMap::from([(other.request.sender, other.host_jitter)]);
            for &l in &other.links {
                let link = topo.link(l);
                let a = at[&link.from];
                if on_target.contains_key(&l) {
                    return Some((l, a));
                }
                at.insert(link.to, a.saturating_add(hop_time(link, other.request.packet_bytes)));
            }
            None
        })
        .collect();
    // The target's arrival at each of its links in that scenario.
    let mut target_at: HashMap<LinkId, Picos> = HashMap::new();
    let mut at: HashMap<NodeId, Picos> = HashMap::from([(t.request.sender, t.host_jitter)]);
    for &l in &t.links {
        let link = topo.link(l);
        let arrive = at[&link.from];
        target_at.insert(l, arrive);
        let (mut ahead, mut blocking): (Picos, Picos) = (0, 0);
        for (i, first) in first_shared.iter().enumerate() {
            if first.is_some_and(|(fl, _)| fl == l) {
                let other = tunnels[i];
                let tx = link.tx_time(other.request.packet_bytes).unwrap_or(Picos::MAX);
                if other.request.sublane > t.request.sublane {
                    blocking = blocking.max(tx);
                } else {
                    ahead = ahead.saturating_add(tx);
                }
            }
        }
        let leave = arrive.saturating_add(blocking).saturating_add(ahead);
        at.insert(link.to, leave.saturating_add(hop_time(link, t.request.packet_bytes)));
    }
    // The largest lower sub-lane packet at each link goes first, then the other lower ones, then
    // the rest, all before the target.
    let mut largest_lower: HashMap<LinkId, (u64, usize)> = HashMap::new();
    for (i, first) in first_shared.iter().enumerate() {
        if let Some((l, _)) = first {
            let other = tunnels[i];
            if other.request.sublane > t.request.sublane {
                let e = largest_lower.entry(*l).or_insert((0, i));
                if other.request.packet_bytes > e.0 {
                    *e = (other.request.packet_bytes, i);
                }
            }
        }
    }
    // Release times relative to the target's, then all shifted so that none is negative.
    let relative: Vec<i128> = first_shared
        .iter()
        .enumerate()
        .map(|(i, first)| {
            let Some((l, a)) = *first else { return 0 };
            let other = tunnels[i];
            let lead = if largest_lower.get(&l).is_some_and(|&(_, j)| j == i) {
                3
            } else if other.request.sublane > t.request.sublane {
                2
            } else {
                1
            };
            i128::from(target_at[&l]) - lead - i128::from(a)
        })
        .collect();
    let shift = -relative.iter().copied().min().unwrap_or(0).min(0);
    relative.iter().map(|&r| Picos::try_from(r + shift).unwrap_or(Picos::MAX)).collect()
}

/// Transmission, minimum delay and jitter of one link, saturating.
fn hop_time(link: &Link, bytes: u64) -> Picos {
    link.tx_time(bytes).unwrap_or(Picos::MAX).saturating_add(link.min_delay).saturating_add(link.max_jitter)
}

/// Runs the targeted adversary against each tunnel in turn (every delay at its longest,
/// `periods` of the longest period) and returns, per tunnel, the worst latency its own
/// packets saw, with the violations and drops of all runs.
pub fn validate_targeted(topo: &Topology, tunnels: &[&Tunnel], periods: u64, max_releases: u64) -> Report {
    let mut out = Report { horizon: 0, events: 0, tunnels: blank(tunnels) };
    for target in 0..tunnels.len() {
        let phases = Phases::Given(targeted_phases(topo, tunnels, target));
        let config = ValidatorConfig { periods, max_releases, phases, delays: Delays::Max };
        let mut r = validate(topo, tunnels, &config);
        // Every run counts for violations and drops; its extremes only for its target.
        for (i, t) in r.tunnels.iter_mut().enumerate() {
            if i != target {
                (t.observed_min, t.observed_max) = (None, None);
            }
        }
        out.merge(&r);
    }
    out
}
