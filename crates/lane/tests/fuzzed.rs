//! Inputs the fuzz targets (fuzz/fuzz_targets/topology_toml.rs, requests_toml.rs) found, each
//! fed exactly as found.

use kairos_lane::te::Topology;

/// Loads `text`, writes it back with `to_toml` and loads that: the round trip the
/// topology_toml target asserts.
fn round_trip(text: &str) {
    let topo = Topology::from_toml(text, "found.toml").unwrap();
    let written = topo.to_toml();
    let again = Topology::from_toml(&written, "written.toml").unwrap_or_else(|e| panic!("{e}\n{written}"));
    assert_eq!(again.nodes(), topo.nodes());
    assert_eq!(again.links(), topo.links());
}

/// A node name holding a quote and a unicode escape was written unescaped, so the file
/// `to_toml` wrote did not parse.
#[test]
fn a_name_with_a_quote_round_trips() {
    round_trip("\n[[node]]\nname = \"spinmin_=\\u15e90o[+\\\"5o[-0oDelay_ns = e5\"\nkind = \"switch\"");
}
