//! The controller's state in the Prometheus text format (version 0.0.4), for `--metrics`:
//! tunnels admitted now and their grants, per-link reserved bandwidth, requests admitted and
//! refused, notices sent and frames refused by reason, nodes connected. Counters start at zero
//! when the controller starts (a replay does not count again); the gauges describe the
//! allocation, replayed or not.

use std::fmt::Write;

use super::core::Core;

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The metrics page for `core` with `nodes` nodes connected.
pub fn render(core: &Core, nodes: usize) -> String {
    let mut out = String::new();
    let alloc = core.controller().allocation();
    let topo = alloc.topology();
    let c = &core.counters;

    family(&mut out, "kairos_lane_nodes_connected", "gauge", "Nodes connected and authenticated.");
    let _ = writeln!(out, "kairos_lane_nodes_connected {nodes}");
    family(&mut out, "kairos_lane_tunnels", "gauge", "Tunnels admitted now.");
    let _ = writeln!(out, "kairos_lane_tunnels {}", alloc.len());
    family(&mut out, "kairos_lane_requests_admitted_total", "counter", "Requests and changes admitted.");
    let _ = writeln!(out, "kairos_lane_requests_admitted_total {}", c.admitted);
    family(
        &mut out,
        "kairos_lane_requests_refused_total",
        "counter",
        "Requests, changes, releases and reports refused.",
    );
    let _ = writeln!(out, "kairos_lane_requests_refused_total {}", c.refused);
    family(&mut out, "kairos_lane_notices_sent_total", "counter", "Notices to nodes, by kind.");
    for (kind, n) in &c.notices {
        let _ = writeln!(out, "kairos_lane_notices_sent_total{{kind=\"{kind}\"}} {n}");
    }
    family(
        &mut out,
        "kairos_lane_frames_refused_total",
        "counter",
        "Frames and inputs refused before the controller, by reason.",
    );
    for (reason, n) in &c.refused_frames {
        let _ = writeln!(out, "kairos_lane_frames_refused_total{{reason=\"{reason}\"}} {n}");
    }

    family(
        &mut out,
        "kairos_lane_link_reserved_bps",
        "gauge",
        "Bandwidth the admitted tunnels reserve on each link (one packet a period).",
    );
    for (id, link) in topo.links().iter().enumerate() {
        let bps: f64 = alloc
            .load(id)
            .tunnels()
            .filter_map(|t| alloc.tunnel(t))
            .map(|t| t.resources.packet_bytes as f64 * 8.0 * 1e12 / t.resources.period.max(1) as f64)
            .fold(0.0, |a, b| a + b);
        let (from, to) = (&topo.node(link.from).name, &topo.node(link.to).name);
        let _ = writeln!(
            out,
            "kairos_lane_link_reserved_bps{{from=\"{}\",to=\"{}\",capacity_bps=\"{}\"}} {bps}",
            escape(from),
            escape(to),
            link.bandwidth_bps
        );
    }

    let tunnels = alloc.tunnels();
    for (name, help, value) in [
        (
            "kairos_lane_tunnel_period_ps",
            "A tunnel's approved period.",
            (|r: &crate::te::Resources| r.period) as fn(&_) -> u64,
        ),
        ("kairos_lane_tunnel_min_latency_ps", "A tunnel's minimum latency bound.", |r| r.min_latency),
        ("kairos_lane_tunnel_max_jitter_ps", "A tunnel's maximum jitter bound.", |r| r.max_jitter),
        ("kairos_lane_tunnel_packet_bytes", "A tunnel's largest packet.", |r| r.packet_bytes),
    ] {
        family(&mut out, name, "gauge", help);
        for t in &tunnels {
            let _ = writeln!(
                out,
                "{name}{{tunnel=\"{}\",name=\"{}\",sender=\"{}\"}} {}",
                t.id,
                escape(&t.request.name),
                escape(&topo.node(t.request.sender).name),
                value(&t.resources)
            );
        }
    }
    out
}
