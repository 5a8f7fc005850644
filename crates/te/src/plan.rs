//! `kairos lane plan`: admit a file of requests into a topology, in order, and report each
//! tunnel's tree and bounds; optionally validate them by simulation. The result is data
//! ([`Plan`], serializable); the command line renders it as a table.
//!
//! # JSON (stable)
//! `{"tunnels": [...]}`, one object per request in order: `name`, `admitted`, `reason` (when
//! refused), `period_ns`, `min_latency_ns`, `max_jitter_ns`, `sublane`, `edges` (a list of
//! `[from, to]` node names), and with validation `observed_min_ns`, `observed_max_ns`, `drops`.
//! With validation the object also has `validation` at the top: the simulated time and packets.

use serde::Serialize;

use crate::alloc::Allocation;
use crate::request::Request;
use crate::topology::Topology;
use crate::tunnel::TunnelId;
use crate::units::ps_to_ns;
use crate::validator::{GENERAL_RUNS, validate_adversarially, validate_targeted};

/// One request of the plan, admitted or refused.
#[derive(Debug, Clone, Serialize)]
pub struct PlanRow {
    /// The request's name.
    pub name: String,
    /// Whether it was admitted.
    pub admitted: bool,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The approved period (admitted only), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ns: Option<f64>,
    /// The minimum latency to every receiver (admitted only), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_latency_ns: Option<f64>,
    /// The maximum jitter (admitted only), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_jitter_ns: Option<f64>,
    /// The request's sub-lane.
    pub sublane: u8,
    /// The tree's links as `[from, to]` node names, in preorder from the sender (empty when
    /// refused).
    pub edges: Vec<[String; 2]>,
    /// The lowest latency the validator saw (with validation), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_min_ns: Option<f64>,
    /// The highest latency the validator saw (with validation), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_max_ns: Option<f64>,
    /// Packets dropped in the validator's runs (with validation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drops: Option<u64>,
    /// The tunnel (admitted only).
    #[serde(skip)]
    pub id: Option<TunnelId>,
}

/// What the validator did over every adversary run.
#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    /// Simulated time per adversary run, summed over the runs, ns.
    pub simulated_ns: f64,
    /// Adversary runs (eight general ones, one targeted per tunnel).
    pub runs: u64,
    /// Events simulated.
    pub events: u64,
    /// Packets outside their bounds.
    pub violations: u64,
    /// Packets dropped.
    pub drops: u64,
}

/// The plan: every request in order, and the validation when asked for.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// One row per request, in the file's order.
    pub tunnels: Vec<PlanRow>,
    /// The validator's totals, with validation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation: Option<Validation>,
}

impl Plan {
    /// How many requests were refused.
    pub fn refused(&self) -> usize {
        self.tunnels.iter().filter(|r| !r.admitted).count()
    }
}

/// Admits `requests` in order; with `validate = Some((periods, max_releases, seed))` simulates
/// the admitted tunnels under every adversary and fills in what was observed (when at least one
/// was admitted).
pub fn plan(topo: &Topology, requests: &[Request], validate: Option<(u64, u64, u64)>) -> Plan {
    let mut alloc = Allocation::new(topo.clone());
    let mut rows: Vec<PlanRow> = requests
        .iter()
        .map(|r| {
            let mut row = PlanRow {
                name: r.name.clone(),
                admitted: false,
                reason: None,
                period_ns: None,
                min_latency_ns: None,
                max_jitter_ns: None,
                sublane: r.sublane,
                edges: Vec::new(),
                observed_min_ns: None,
                observed_max_ns: None,
                drops: None,
                id: None,
            };
            match alloc.admit(r.clone()) {
                Ok(adm) => {
                    row.admitted = true;
                    row.id = Some(adm.id);
                }
                Err(e) => row.reason = Some(e.to_string()),
            }
            row
        })
        .collect();
    // Later admissions change earlier tunnels' bounds: report the final ones.
    for row in rows.iter_mut() {
        let Some(t) = row.id.and_then(|id| alloc.tunnel(id)) else { continue };
        let r = t.resources;
        row.period_ns = Some(ps_to_ns(r.period));
        row.min_latency_ns = Some(ps_to_ns(r.min_latency));
        row.max_jitter_ns = Some(ps_to_ns(r.max_jitter));
        row.edges = t
            .edges(topo)
            .into_iter()
            .map(|(a, b)| [topo.node(a).name.clone(), topo.node(b).name.clone()])
            .collect();
    }
    // Validating no tunnel would report runs of nothing: no validation then.
    let validation = validate.filter(|_| !alloc.is_empty()).map(|(periods, max_releases, seed)| {
        let tunnels = alloc.tunnels();
        let mut report = validate_adversarially(topo, &tunnels, periods, max_releases, seed);
        report.merge(&validate_targeted(topo, &tunnels, periods.min(10), max_releases));
        for tr in &report.tunnels {
            if let Some(row) = rows.iter_mut().find(|r| r.id == Some(tr.id)) {
                row.observed_min_ns = tr.observed_min.map(ps_to_ns);
                row.observed_max_ns = tr.observed_max.map(ps_to_ns);
                row.drops = Some(tr.drops);
            }
        }
        Validation {
            simulated_ns: ps_to_ns(report.horizon),
            runs: tunnels.len() as u64 + GENERAL_RUNS,
            events: report.events,
            violations: report.violations(),
            drops: report.drops(),
        }
    });
    Plan { tunnels: rows, validation }
}
