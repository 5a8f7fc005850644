//! The lane's topology of the testbed network ([`kairos_io::lane_testbed`]): hosts `h0` onward
//! and the switch, a duplex link from each host to the switch, all with the figures the testbed
//! measured. The one place the testbed's plain figures become the model the controller plans
//! with, for `kairos lane testbed --write-topology` and the experiments that run on a testbed.

use kairos_io::lane_testbed::TestbedTopology;

use crate::te::{LinkSpec, LinkSpecError, NodeKind, Topology, TopologyError, ns_to_ps};

/// Why a testbed's figures make no lane topology ([`topology`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TestbedTopologyError {
    /// A measured time does not fit the model.
    #[error("{what} of {ns} ns is too long (the model holds at most an hour)")]
    TooLong {
        /// Which figure: `the minimum delay` or `the jitter`.
        what: &'static str,
        /// The figure, ns.
        ns: u64,
    },
    /// The links' figures are past the model's limits.
    #[error("the testbed's links: {0}")]
    Links(LinkSpecError),
    /// The hosts and switch make no topology (a duplicate name).
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

/// The lane's topology of testbed `t`, or a one-line reason it cannot be one (a figure past the
/// model's limits).
pub fn topology(t: &TestbedTopology) -> Result<Topology, TestbedTopologyError> {
    let ps =
        |ns: u64, what: &'static str| ns_to_ps(ns as f64).ok_or(TestbedTopologyError::TooLong { what, ns });
    let spec = LinkSpec {
        bandwidth_bps: t.bandwidth_bps,
        queue_bytes: t.queue_bytes,
        min_delay: ps(t.min_delay_ns, "the minimum delay")?,
        max_jitter: ps(t.max_jitter_ns, "the jitter")?,
    };
    spec.check().map_err(TestbedTopologyError::Links)?;
    let mut topology = Topology::new();
    // Veths under HTB: a lone packet is handed on at once, so no hop's transmission is a
    // floor under a lane packet's latency (on the testbed's shared devices one arrived 28 ns
    // before the two hops' transmission, 1.728 us at 1 Gbit/s).
    topology.set_software_links(true);
    let hosts =
        t.hosts.iter().map(|h| topology.add_node(h, NodeKind::Host)).collect::<Result<Vec<_>, _>>()?;
    let switch = topology.add_node(&t.switch, NodeKind::Switch)?;
    for host in hosts {
        topology.add_duplex(host, switch, spec)?;
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
        let e = topology(&plain).unwrap_err().to_string();
        assert!(e.starts_with("the jitter of") && !e.contains('\n'), "{e}");
    }
}
