//! The topology and request files: round trips and one-line errors that name the line.

use kairos_te::{
    LinkSpec, NodeKind, Topology, TopologyError, generate, requests_from_file, requests_from_toml,
};

fn err(text: &str) -> String {
    Topology::from_toml(text, "t.toml").unwrap_err().to_string()
}

const NODES: &str = "[[node]]\nname = \"a\"\nkind = \"host\"\n\n[[node]]\nname = \"s\"\nkind = \"switch\"\n";

fn link(from: &str, to: &str, bw: &str) -> String {
    format!(
        "\n[[link]]\nfrom = \"{from}\"\nto = \"{to}\"\nbandwidth_bps = {bw}\nqueue_bytes = 1000\nmin_delay_ns = 10\nmax_jitter_ns = 1.5\n"
    )
}

#[test]
fn a_generated_topology_reads_back_the_same() {
    let t = generate::fat_tree(4, LinkSpec::default()).unwrap();
    let back = Topology::from_toml(&t.to_toml(), "ft.toml").unwrap();
    assert_eq!(back.nodes(), t.nodes());
    assert_eq!(back.links(), t.links());
}

#[test]
fn bidirectional_links_and_float_numbers_load() {
    let text = format!("{NODES}{}bidirectional = true\n", link("a", "s", "1e9"));
    let t = Topology::from_toml(&text, "t.toml").unwrap();
    assert_eq!(t.links().len(), 2);
    assert_eq!(t.links()[0].bandwidth_bps, 1_000_000_000);
    assert_eq!(t.links()[1].max_jitter, 1_500);
}

#[test]
fn errors_name_the_line_and_the_problem() {
    // Line 10 is `from = "zz"` in the first link.
    let e = err(&format!("{NODES}{}", link("zz", "s", "1")));
    assert_eq!(e, "t.toml: line 10: unknown node 'zz' (declare it in a [[node]] table)");
    let e = err(&format!("{NODES}{}", link("a", "s", "-5")));
    assert_eq!(e, "t.toml: line 12: bandwidth_bps must be positive, got -5");
    let e = err(&format!("{NODES}{}{}", link("a", "s", "1"), link("a", "s", "2")));
    assert!(e.starts_with("t.toml: line 17: duplicate link 'a' -> 's'"), "{e}");
    let e = err(&format!("{NODES}[[node]]\nname = \"a\"\nkind = \"host\"\n"));
    assert!(e.contains("line 9") && e.contains("duplicate node 'a'"), "{e}");
    let e = err("[[node]]\nname = \"a\"\nkind = \"router\"\n");
    assert!(e.starts_with("t.toml: line 3:") && e.contains("router"), "{e}");
    let e = err(&format!("{NODES}{}", link("a", "s", "\"fast\"")));
    assert!(e.contains("bandwidth_bps must be a number"), "{e}");
    assert!(matches!(Topology::from_toml("[[nodes]]\n", "t.toml"), Err(TopologyError::At { line: 1, .. })));
}

#[test]
fn request_errors_name_the_line() {
    let t = generate::rack(2, LinkSpec::default()).unwrap();
    let ok = "[[request]]\nname = \"x\"\nsender = \"h0\"\nreceivers = [\"h1\"]\npacket_bytes = 64\nperiod_ns = 1e4\n";
    let r = requests_from_toml(ok, "r.toml", &t).unwrap();
    assert_eq!((r[0].period, r[0].sublane), (10_000_000, 0));
    let e = requests_from_toml(&ok.replace("\"h1\"]", "\"s0\"]"), "r.toml", &t).unwrap_err().to_string();
    assert_eq!(e, "r.toml: line 4: 's0' is a switch; tunnels start and end at hosts");
    let e = requests_from_toml(&ok.replace("= 64", "= 0"), "r.toml", &t).unwrap_err().to_string();
    assert!(e.starts_with("r.toml: line 5: packet_bytes must be a positive integer"), "{e}");
    let e = requests_from_toml(&ok.replace("\"h1\"]", "\"h0\"]"), "r.toml", &t).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("cannot receive its own"), "{e}");
    let e = requests_from_toml(&format!("{ok}\n{ok}"), "r.toml", &t).unwrap_err().to_string();
    assert!(e.contains("line 9") && e.contains("duplicate request name 'x'"), "{e}");
}

#[test]
fn names_that_need_escaping_read_back_the_same() {
    let mut t = Topology::new();
    let a = t.add_node("a \"quoted\" \\ name", NodeKind::Host).unwrap();
    let b = t.add_node("b\nnewline = 1", NodeKind::Switch).unwrap();
    t.add_duplex(a, b, LinkSpec { min_delay: 1, max_jitter: 1_234_567, ..LinkSpec::default() }).unwrap();
    let back = Topology::from_toml(&t.to_toml(), "t.toml").unwrap();
    assert_eq!(back.nodes(), t.nodes());
    assert_eq!(back.links(), t.links());
}

#[test]
fn files_are_read_bounded_and_nothing_to_plan_is_refused() {
    let e = Topology::load(std::path::Path::new("/dev/zero")).unwrap_err();
    assert!(matches!(e, TopologyError::Read(_)), "{e}");
    assert!(e.to_string().starts_with("/dev/zero: is a device"), "{e}");
    let dir = tempfile::Builder::new().prefix("kairos-te-files-").tempdir().unwrap();
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let e = Topology::load(&empty).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "empty.toml: no [[node]] tables: tunnels start and end at hosts, so there is nothing to plan"
        ),
        "{e}"
    );
    let t = generate::rack(2, LinkSpec::default()).unwrap();
    let e = requests_from_file(&empty, &t).unwrap_err().to_string();
    assert!(e.ends_with("empty.toml: no [[request]] tables: nothing to plan"), "{e}");
}
