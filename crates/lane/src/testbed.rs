//! The lane's topology of the testbed network ([`kairos_io::lane_testbed`]): hosts `h0` onward
//! and the switch, a duplex link from each host to the switch, all with the figures the testbed
//! measured. The one place the testbed's plain figures become the model the controller plans
//! with, for `kairos lane testbed --write-topology` and the experiments that run on a testbed.

use kairos_io::lane_testbed::TestbedTopology;

use crate::te::{LinkSpec, NodeKind, Topology, ns_to_ps};

/// The lane's topology of testbed `t`, or a one-line reason it cannot be one (a figure past the
/// model's limits).
pub fn topology(t: &TestbedTopology) -> Result<Topology, String> {
    let ps = |ns: u64, what: &str| {
        ns_to_ps(ns as f64)
            .ok_or_else(|| format!("{what} of {ns} ns is too long (the model holds at most an hour)"))
    };
    let spec = LinkSpec {
        bandwidth_bps: t.bandwidth_bps,
        queue_bytes: t.queue_bytes,
        min_delay: ps(t.min_delay_ns, "the minimum delay")?,
        max_jitter: ps(t.max_jitter_ns, "the jitter")?,
    };
    spec.check().map_err(|e| format!("the testbed's links: {e}"))?;
    let mut topology = Topology::new();
    let hosts = t
        .hosts
        .iter()
        .map(|h| topology.add_node(h, NodeKind::Host))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let switch = topology.add_node(&t.switch, NodeKind::Switch).map_err(|e| e.to_string())?;
    for host in hosts {
        topology.add_duplex(host, switch, spec).map_err(|e| e.to_string())?;
    }
    Ok(topology)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_topology_has_every_host_joined_to_the_switch_both_ways() {
        let plain = TestbedTopology {
            switch: "sw".into(),
            hosts: vec!["h0".into(), "h1".into(), "h2".into()],
            bandwidth_bps: 1_000_000_000,
            queue_bytes: 96_000,
            min_delay_ns: 1_300,
            max_jitter_ns: 14_200,
        };
        let topology = topology(&plain).unwrap();
        assert_eq!(topology.nodes().len(), 4);
        assert_eq!(topology.links().len(), 6);
        let sw = topology.find("sw").unwrap();
        for h in ["h0", "h1", "h2"] {
            let h = topology.find(h).unwrap();
            for (from, to) in [(h, sw), (sw, h)] {
                let link = topology.link(topology.link_between(from, to).unwrap());
                assert_eq!((link.bandwidth_bps, link.queue_bytes), (1_000_000_000, 96_000));
                assert_eq!((link.min_delay, link.max_jitter), (1_300_000, 14_200_000));
            }
        }
        // What is written reads back, with a comment first.
        let text = format!("# a comment\n{}", topology.to_toml());
        let back = Topology::from_toml(&text, "t.toml").unwrap();
        assert_eq!(back.links().len(), 6);
    }

    #[test]
    fn a_jitter_past_the_models_limit_is_refused_in_one_line() {
        let plain = TestbedTopology {
            switch: "sw".into(),
            hosts: vec!["h0".into(), "h1".into()],
            bandwidth_bps: 1_000_000_000,
            queue_bytes: 96_000,
            min_delay_ns: 1_300,
            max_jitter_ns: u64::MAX,
        };
        let e = topology(&plain).unwrap_err();
        assert!(e.starts_with("the jitter of") && !e.contains('\n'), "{e}");
    }
}
