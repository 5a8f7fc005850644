//! `kairos lane plan`: admit a file of requests into a topology, in order, and report each
//! tunnel's tree and bounds; optionally validate them by simulation.
//!
//! # JSON (stable)
//! `{"tunnels": [...]}`, one object per request in order: `name`, `admitted`, `reason` (when
//! refused), `period_ns`, `min_latency_ns`, `max_jitter_ns`, `sublane`, `edges` (a list of
//! `[from, to]` node names), and with validation `observed_min_ns`, `observed_max_ns`, `drops`.
//! With validation the object also has `validation` at the top: the simulated time and packets.

use serde::Serialize;

use crate::te::{Allocation, NodeId, Request, Topology, TunnelId, ps_to_ns};
use crate::validator::{validate_adversarially, validate_targeted};

#[derive(Debug, Clone, Serialize)]
pub struct PlanRow {
    pub name: String,
    pub admitted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_latency_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_jitter_ns: Option<f64>,
    pub sublane: u8,
    pub edges: Vec<[String; 2]>,
    /// The tree drawn from the sender, e.g. `h0 -> s0 -> {h1, h2}`.
    #[serde(skip)]
    pub tree: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_min_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_max_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drops: Option<u64>,
    #[serde(skip)]
    pub id: Option<TunnelId>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    /// Simulated time per adversary run, summed over the runs, ns.
    pub simulated_ns: f64,
    /// Adversary runs (phases x delay choices).
    pub runs: u32,
    pub events: u64,
    pub violations: u64,
    pub drops: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub tunnels: Vec<PlanRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation: Option<Validation>,
}

/// Admits `requests` in order; with `validate = Some((periods, max_releases, seed))` simulates
/// the admitted tunnels under every adversary and fills in what was observed.
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
                tree: String::new(),
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
        row.tree = draw(topo, t.request.sender, &t.edges(topo));
    }
    let validation = validate.map(|(periods, max_releases, seed)| {
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
            runs: 8 + tunnels.len() as u32,
            events: report.events,
            violations: report.violations(),
            drops: report.drops(),
        }
    });
    Plan { tunnels: rows, validation }
}

/// The tree as text from `root`: `a -> b -> {c, d -> e}`.
pub fn draw(topo: &Topology, root: NodeId, edges: &[(NodeId, NodeId)]) -> String {
    let children: Vec<NodeId> = edges.iter().filter(|e| e.0 == root).map(|e| e.1).collect();
    let name = topo.node(root).name.clone();
    match children.len() {
        0 => name,
        1 => format!("{name} -> {}", draw(topo, children[0], edges)),
        _ => {
            let parts: Vec<String> = children.iter().map(|&c| draw(topo, c, edges)).collect();
            format!("{name} -> {{{}}}", parts.join(", "))
        }
    }
}

/// The plan as a table.
pub fn table(plan: &Plan) -> String {
    let validated = plan.validation.is_some();
    let mut out = format!(
        "{:<12} {:>7} {:>12} {:>12} {:>11}",
        "tunnel", "sublane", "period us", "min lat us", "jitter us"
    );
    if validated {
        out.push_str(&format!(
            " {:>12} {:>12} {:>12} {:>6}",
            "obs min us", "obs max us", "bound us", "drops"
        ));
    }
    out.push_str("  tree\n");
    let us = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.3}", v / 1e3));
    for r in &plan.tunnels {
        if !r.admitted {
            out.push_str(&format!(
                "{:<12} {:>7} refused: {}\n",
                r.name,
                r.sublane,
                r.reason.as_deref().unwrap_or("")
            ));
            continue;
        }
        out.push_str(&format!(
            "{:<12} {:>7} {:>12} {:>12} {:>11}",
            r.name,
            r.sublane,
            us(r.period_ns),
            us(r.min_latency_ns),
            us(r.max_jitter_ns)
        ));
        if validated {
            let bound = r.min_latency_ns.zip(r.max_jitter_ns).map(|(a, b)| a + b);
            out.push_str(&format!(
                " {:>12} {:>12} {:>12} {:>6}",
                us(r.observed_min_ns),
                us(r.observed_max_ns),
                us(bound),
                r.drops.map_or("-".into(), |d| d.to_string())
            ));
        }
        out.push_str(&format!("  {}\n", r.tree));
    }
    if let Some(v) = &plan.validation {
        out.push_str(&format!(
            "validation: {} adversary runs, {:.3} ms simulated, {} events: {} violations, {} drops\n",
            v.runs,
            v.simulated_ns / 1e6,
            v.events,
            v.violations,
            v.drops
        ));
    }
    out
}
