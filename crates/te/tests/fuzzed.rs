//! Inputs that broke what the fuzz targets (fuzz/fuzz_targets/topology_toml.rs) assert, each fed
//! exactly as found.

use kairos_te::Topology;

/// Loads `text`, writes it back with `to_toml` and loads that: the round trip the
/// topology_toml target asserts.
fn round_trip(text: &str) {
    let topo = Topology::from_toml(text, "found.toml").unwrap();
    let written = topo.to_toml();
    let again = Topology::from_toml(&written, "written.toml").unwrap_or_else(|e| panic!("{e}\n{written}"));
    assert_eq!(again.nodes(), topo.nodes());
    assert_eq!(again.links(), topo.links());
}

fn link(field: &str, value: &str) -> String {
    let text = "[[node]]\nname = \"a\"\nkind = \"host\"\n[[node]]\nname = \"b\"\nkind = \"host\"\n[[link]]\n\
                from = \"a\"\nto = \"b\"\nbandwidth_bps = 1e9\nqueue_bytes = 0\nmin_delay_ns = 0\nmax_jitter_ns = 0\n";
    let at = text.find(&format!("{field} = ")).unwrap();
    let end = at + text[at..].find('\n').unwrap();
    format!("{}{field} = {value}{}", &text[..at], &text[end..])
}

/// A node name holding a quote and a unicode escape was written unescaped, so the file
/// `to_toml` wrote did not parse.
#[test]
fn a_name_with_a_quote_round_trips() {
    round_trip("\n[[node]]\nname = \"spinmin_=\\u15e90o[+\\\"5o[-0oDelay_ns = e5\"\nkind = \"switch\"");
}

/// A bandwidth or queue beyond i64 loaded, and `to_toml` wrote it as an integer TOML refuses.
#[test]
fn counts_beyond_what_toml_writes_are_refused() {
    let e = Topology::from_toml(&link("bandwidth_bps", "1e19"), "t.toml").unwrap_err().to_string();
    assert!(e.starts_with("t.toml: line 10: bandwidth_bps must be at most"), "{e}");
    let e = Topology::from_toml(&link("queue_bytes", "1.5e19"), "t.toml").unwrap_err().to_string();
    assert!(e.starts_with("t.toml: line 11: queue_bytes must be at most"), "{e}");
    round_trip(&link("bandwidth_bps", "1e15"));
}

/// A delay of about 74 minutes loaded, and `to_toml` wrote nanoseconds that read back a
/// picosecond off (4429767333022317 ps became 4429767333022318).
#[test]
fn delays_beyond_an_exact_round_trip_are_refused() {
    let e =
        Topology::from_toml(&link("min_delay_ns", "4429767333022.316"), "t.toml").unwrap_err().to_string();
    assert!(e.starts_with("t.toml: line 12: min_delay_ns must be at most"), "{e}");
    round_trip(&link("max_jitter_ns", "999999999999.999"));
}
