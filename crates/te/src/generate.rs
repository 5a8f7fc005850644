//! Topology generators: a one-switch rack, a two-tier leaf-spine, and the k-ary fat-tree of
//! Al-Fares et al. (k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core switches,
//! k^3/4 hosts). Every link is duplex with the parameters given.

use crate::topology::{LinkSpec, NodeKind, Topology, TopologyError};

/// `hosts` hosts `h0..` on one switch `s0`.
pub fn rack(hosts: usize, spec: LinkSpec) -> Result<Topology, TopologyError> {
    let mut t = Topology::new();
    add_switch_with_hosts(&mut t, "s0", &[], hosts, "h", spec)?;
    Ok(t)
}

/// `leaves` leaf switches, each with `hosts_per_leaf` hosts, every leaf joined to every one of
/// `spines` spine switches. Hosts are `h<leaf>_<i>`.
pub fn leaf_spine(
    leaves: usize,
    spines: usize,
    hosts_per_leaf: usize,
    spec: LinkSpec,
) -> Result<Topology, TopologyError> {
    let mut t = Topology::new();
    let spine = add_switches(&mut t, spines, |s| format!("spine{s}"))?;
    for l in 0..leaves {
        add_switch_with_hosts(&mut t, &format!("leaf{l}"), &spine, hosts_per_leaf, &format!("h{l}_"), spec)?;
    }
    Ok(t)
}

/// The k-ary fat-tree (k even, at least 2). Names: `core<i>`, `agg<pod>_<i>`, `edge<pod>_<i>`,
/// hosts `h<pod>_<edge>_<i>`.
pub fn fat_tree(k: usize, spec: LinkSpec) -> Result<Topology, TopologyError> {
    if k < 2 || !k.is_multiple_of(2) {
        return Err(TopologyError::Invalid(format!("a fat-tree needs an even k of at least 2, got {k}")));
    }
    let half = k / 2;
    let mut t = Topology::new();
    let core = add_switches(&mut t, half * half, |c| format!("core{c}"))?;
    for pod in 0..k {
        let aggs = add_switches(&mut t, half, |a| format!("agg{pod}_{a}"))?;
        for (a, &agg) in aggs.iter().enumerate() {
            // Aggregation switch a of every pod reaches core switches a*half .. a*half+half.
            for &c in &core[a * half..(a + 1) * half] {
                t.add_duplex(agg, c, spec)?;
            }
        }
        for e in 0..half {
            add_switch_with_hosts(
                &mut t,
                &format!("edge{pod}_{e}"),
                &aggs,
                half,
                &format!("h{pod}_{e}_"),
                spec,
            )?;
        }
    }
    Ok(t)
}

/// Adds `count` switches named `name(0)..`; returns their ids.
fn add_switches(
    t: &mut Topology,
    count: usize,
    name: impl Fn(usize) -> String,
) -> Result<Vec<usize>, TopologyError> {
    (0..count).map(|i| t.add_node(&name(i), NodeKind::Switch)).collect()
}

/// Adds switch `name`, joined to every switch of `uplinks`, then `hosts` hosts below it named
/// `<host_prefix><i>`; returns the switch's id.
fn add_switch_with_hosts(
    t: &mut Topology,
    name: &str,
    uplinks: &[usize],
    hosts: usize,
    host_prefix: &str,
    spec: LinkSpec,
) -> Result<usize, TopologyError> {
    let switch = t.add_node(name, NodeKind::Switch)?;
    for &up in uplinks {
        t.add_duplex(switch, up, spec)?;
    }
    for h in 0..hosts {
        let host = t.add_node(&format!("{host_prefix}{h}"), NodeKind::Host)?;
        t.add_duplex(host, switch, spec)?;
    }
    Ok(switch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generators_build_the_textbook_sizes() {
        let spec = LinkSpec::default();
        let r = rack(4, spec).unwrap();
        assert_eq!((r.nodes().len(), r.links().len()), (5, 8));
        let ls = leaf_spine(4, 2, 3, spec).unwrap();
        assert_eq!((ls.hosts().count(), ls.links().len()), (12, 2 * (4 * 2 + 12)));
        let ft = fat_tree(8, spec).unwrap();
        // k^3/4 hosts, 5k^2/4 switches, 3k^3/4 duplex links.
        assert_eq!(ft.hosts().count(), 128);
        assert_eq!(ft.nodes().len() - 128, 80);
        assert_eq!(ft.links().len(), 2 * 384);
        assert!(fat_tree(3, spec).is_err());
    }
}
