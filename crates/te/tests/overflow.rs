//! Arithmetic past 64 bits is a refusal that says so, never an admission with a wrapped or
//! truncated bound, and the allocation is left as it was.

use kairos_te::plan::plan;
use kairos_te::{Allocation, LinkSpec, MAX_TIME, NodeKind, Refusal, Request, Topology, generate, tx_time};

fn request(topo: &Topology, from: &str, to: &str, bytes: u64) -> Request {
    Request {
        name: "r".into(),
        sender: topo.find(from).unwrap(),
        receivers: vec![topo.find(to).unwrap()],
        packet_bytes: bytes,
        period: 1_000_000,
        sublane: 0,
    }
}

#[test]
fn transmission_times_that_add_up_past_64_bits_are_refused() {
    // Each link's queue (2 MB at 1 bit/s: 1.6e19 ps) fits 64-bit picoseconds; the two hops of
    // h0 -> s0 -> h1 together (3.2e19) do not.
    let spec = LinkSpec { bandwidth_bps: 1, queue_bytes: 2_000_000, min_delay: 0, max_jitter: 0 };
    assert_eq!(tx_time(2_000_000, 1), Some(16_000_000_000_000_000_000));
    let topo = generate::rack(2, spec).unwrap();
    let mut alloc = Allocation::new(topo.clone());
    let refusal = alloc.admit(request(&topo, "h0", "h1", 2_000_000)).unwrap_err();
    assert!(matches!(refusal, Refusal::Overflow { .. }), "{refusal}");
    assert!(refusal.to_string().contains("overflows 64-bit picoseconds"), "{refusal}");
    assert!(alloc.is_empty());
    assert!(topo.links().iter().enumerate().all(|(l, _)| alloc.load(l).bytes == 0));
    // Half the packet fits: two hops of 8e18 ps.
    let p = plan(&topo, &[request(&topo, "h0", "h1", 1_000_000)], None);
    assert!(p.tunnels[0].admitted, "{:?}", p.tunnels[0].reason);
}

#[test]
fn delays_that_add_up_past_64_bits_are_refused() {
    // A chain of 5,200 links of an hour each: 5,200 h, past the 5,124 h 64-bit picoseconds
    // hold.
    let spec = LinkSpec { min_delay: MAX_TIME, ..LinkSpec::default() };
    let mut topo = Topology::new();
    let mut prev = topo.add_node("a", NodeKind::Host).unwrap();
    for i in 0..5_199 {
        let s = topo.add_node(&format!("s{i}"), NodeKind::Switch).unwrap();
        topo.add_link(prev, s, spec).unwrap();
        prev = s;
    }
    let b = topo.add_node("b", NodeKind::Host).unwrap();
    topo.add_link(prev, b, spec).unwrap();
    let p = plan(&topo, &[request(&topo, "a", "b", 64)], None);
    let row = &p.tunnels[0];
    assert!(!row.admitted);
    let reason = row.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("overflows 64-bit picoseconds"), "{reason}");
    assert_eq!(p.refused(), 1);
}

#[test]
fn links_past_the_file_limits_fail_their_check_and_hand_built_ones_need_a_bandwidth() {
    for (spec, what) in [
        (LinkSpec { bandwidth_bps: 0, ..LinkSpec::default() }, "bandwidth_bps must be between 1 and"),
        (LinkSpec { queue_bytes: u64::MAX, ..LinkSpec::default() }, "queue_bytes must be at most"),
        (LinkSpec { min_delay: MAX_TIME + 1, ..LinkSpec::default() }, "min_delay_ns must be at most"),
        (LinkSpec { bandwidth_bps: 1, queue_bytes: 4_000_000, ..LinkSpec::default() }, "64-bit picoseconds"),
    ] {
        let e = spec.check().unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
    assert_eq!(LinkSpec::default().check(), Ok(()));
    let mut topo = Topology::new();
    let (a, b) = (topo.add_node("a", NodeKind::Host).unwrap(), topo.add_node("b", NodeKind::Host).unwrap());
    let e = topo.add_link(a, b, LinkSpec { bandwidth_bps: 0, ..LinkSpec::default() }).unwrap_err();
    assert_eq!(e.to_string(), "a link needs a positive bandwidth");
    // "Unbounded" queues by hand: admission stays checked, and the TOML written for them is
    // refused when read, past the file limit, instead of failing to write.
    let huge = LinkSpec { queue_bytes: u64::MAX, ..LinkSpec::default() };
    topo.add_duplex(a, b, huge).unwrap();
    let mut alloc = Allocation::new(topo.clone());
    assert!(alloc.admit(request(&topo, "a", "b", 1_500)).is_ok());
    let e = Topology::from_toml(&topo.to_toml(), "huge.toml").unwrap_err().to_string();
    assert!(e.contains("queue_bytes must be at most 1099511627776"), "{e}");
}
