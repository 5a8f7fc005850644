//! X-ADJ on small trees, against computations done by hand (written out in each test), and the
//! validator's verdict on them.
//!
//! Every link here: 1 Gbit/s (a byte takes 8 ns, so 125 B take 1 us), lambda_min = 1 us,
//! delta_max = 0.1 us, a queue of 64 KiB.

use kairos_te::validator::{Delays, Phases, ValidatorConfig, validate, validate_adversarially};
use kairos_te::{AdjOptions, Allocation, HostDelay, LinkSpec, Refusal, Request, generate};

const US: u64 = 1_000_000; // picoseconds

fn spec() -> LinkSpec {
    LinkSpec { bandwidth_bps: 1_000_000_000, queue_bytes: 64 * 1024, min_delay: US, max_jitter: US / 10 }
}

fn req(a: &Allocation, name: &str, from: &str, to: &[&str], bytes: u64, period: u64, sublane: u8) -> Request {
    let t = a.topology();
    Request {
        name: name.into(),
        sender: t.find(from).unwrap(),
        receivers: to.iter().map(|r| t.find(r).unwrap()).collect(),
        packet_bytes: bytes,
        period,
        sublane,
    }
}

#[test]
fn one_tunnel_through_one_switch() {
    // h0 -> s0 -> h1, 125 B (t = 1 us on each link), nothing else: W = 0 everywhere.
    //   lo(s0) = lo(h1) + lambda_min + t = 0 + 1 + 1 = 2 us;  lo(h0) = 2 + 1 + 1 = 4 us
    //   hi(s0) = 0 + 1 + 0.1 + 1 + 0 = 2.1 us;               hi(h0) = 2.1 + 2.1 = 4.2 us
    //   D(s0) = max(W + t, D(h1) + W + delta) = max(1, 0.1) = 1 us
    //   D(h0) = max(1, 1 + 0 + 0.1) = 1.1 us
    // So min latency 4 us, jitter 0.2 us, and a 10 us request keeps its period.
    let mut a = Allocation::new(generate::rack(2, spec()).unwrap());
    let r = a.admit(req(&a, "t", "h0", &["h1"], 125, 10 * US, 0)).unwrap().resources;
    assert_eq!((r.min_latency, r.max_jitter, r.period), (4 * US, US / 5, 10 * US));
    // Asking for 0.5 us, shorter than the packet's own transmission: raised to D(h0) = 1.1 us.
    let r = a.admit(req(&a, "fast", "h1", &["h0"], 125, US / 2, 0)).unwrap().resources;
    assert_eq!(r.period, 11 * US / 10);
}

#[test]
fn two_tunnels_sharing_the_last_link() {
    // A: h0 -> h2, 125 B (1 us); B: h1 -> h2, 250 B (2 us); both sub-lane 0, sharing s0 -> h2.
    // A on s0 -> h2 waits at most one packet of B: W = 2 us; on h0 -> s0, W = 0.
    //   lo(A) = (1 + 1) + (1 + 1) = 4 us
    //   hi(s0) = 0 + 1 + 0.1 + 1 + 2 = 4.1 us; hi(h0) = 4.1 + 1 + 0.1 + 1 + 0 = 6.2 us -> jitter 2.2
    //   D(s0) = max(2 + 1, 0 + 2 + 0.1) = 3 us; D(h0) = max(0 + 1, 3 + 0 + 0.1) = 3.1 us
    // B on s0 -> h2 waits one packet of A: W = 1 us.
    //   lo(B) = (1 + 2) + (1 + 2) = 6 us
    //   hi(s0) = 0 + 1 + 0.1 + 2 + 1 = 4.1 us; hi(h1) = 4.1 + 1 + 0.1 + 2 = 7.2 us -> jitter 1.2
    //   D(s0) = max(1 + 2, 0 + 1 + 0.1) = 3 us; D(h1) = max(2, 3 + 0.1) = 3.1 us
    let mut a = Allocation::new(generate::rack(3, spec()).unwrap());
    let first = a.admit(req(&a, "A", "h0", &["h2"], 125, US, 0)).unwrap();
    // Alone, A would have had jitter 0.2 and period max(1, 1.1) = 1.1 us.
    assert_eq!((first.resources.max_jitter, first.resources.period), (US / 5, 11 * US / 10));
    let second = a.admit(req(&a, "B", "h1", &["h2"], 250, US, 0)).unwrap();
    let b = second.resources;
    assert_eq!((b.min_latency, b.max_jitter, b.period), (6 * US, 12 * US / 10, 31 * US / 10));
    // Admitting B changed A, and the admission says so.
    assert_eq!(second.changed.len(), 1);
    let ra = second.changed[0].after;
    assert_eq!((ra.min_latency, ra.max_jitter, ra.period), (4 * US, 22 * US / 10, 31 * US / 10));
    assert_eq!(a.tunnel(first.id).unwrap().resources, ra);
    // Releasing B gives A its old bounds back.
    let changes = a.release(second.id).unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].after, first.resources);
}

#[test]
fn multicast_to_two_receivers() {
    // h0 -> s0 -> {h1, h2}, 125 B, alone: both branches are alike.
    //   lo(s0) = min(0 + 1 + 1, 0 + 1 + 1) = 2 us; lo(h0) = 4 us; hi(s0) = 2.1; hi(h0) = 4.2 us
    //   D(s0) = max over branches of max(1, 0.1) = 1 us; D(h0) = 1.1 us
    let mut a = Allocation::new(generate::rack(3, spec()).unwrap());
    let adm = a.admit(req(&a, "m", "h0", &["h1", "h2"], 125, US, 0)).unwrap();
    let r = adm.resources;
    assert_eq!((r.min_latency, r.max_jitter, r.period), (4 * US, US / 5, 11 * US / 10));
    assert_eq!(a.tunnel(adm.id).unwrap().links.len(), 3, "one link up, one down to each receiver");
}

#[test]
fn a_lower_sub_lane_packet_blocks_once() {
    // A (sub-lane 0, 125 B) and B (sub-lane 1, 1,500 B: 12 us) share s0 -> h2. A cannot preempt
    // a B packet already on the wire: W_A = 12 us on s0 -> h2.
    //   hi(s0) = 0 + 1 + 0.1 + 1 + 12 = 14.1; hi(h0) = 14.1 + 2.1 = 16.2 -> jitter 16.2 - 4 = 12.2 us
    // B sees A as higher priority: W_B = 1 us (A's period, at least 13.1 us, is far longer).
    let mut a = Allocation::new(generate::rack(3, spec()).unwrap());
    let ida = a.admit(req(&a, "A", "h0", &["h2"], 125, 20 * US, 0)).unwrap().id;
    a.admit(req(&a, "B", "h1", &["h2"], 1500, 50 * US, 1)).unwrap();
    let ra = a.tunnel(ida).unwrap().resources;
    assert_eq!((ra.min_latency, ra.max_jitter), (4 * US, 122 * US / 10));
    let tunnels = a.tunnels();
    let report = validate_adversarially(a.topology(), &tunnels, 2_000, 200_000, 7);
    assert!(report.holds(), "{report:?}");
    // Without the blocking term the bound is the one-tunnel bound, and it does not hold.
    let without = AdjOptions { lower_blocking: false, ..AdjOptions::default() };
    let mut printed = Allocation::with_options(a.topology().clone(), without);
    for t in a.tunnels() {
        printed.admit(t.request.clone()).unwrap();
    }
    let ta = printed.tunnels()[0].resources;
    assert_eq!(ta.max_jitter, US / 5);
    let report = validate_adversarially(printed.topology(), &printed.tunnels(), 2_000, 200_000, 7);
    assert!(report.violations() > 0, "the validator must catch the missing blocking term: {report:?}");
}

#[test]
fn the_printed_period_bound_overloads_a_fast_tunnel() {
    // One 125 B tunnel asking for a packet every 0.5 us on 1 Gbit/s links (1 us to send one).
    // As printed, D(h0) = 0.1 + 0.1 = 0.2 us, so 0.5 us is approved: twice the link's capacity.
    let topo = generate::rack(2, spec()).unwrap();
    let mut printed = Allocation::with_options(topo.clone(), AdjOptions::as_printed());
    let r = printed.admit(req(&printed, "t", "h0", &["h1"], 125, US / 2, 0)).unwrap().resources;
    assert_eq!(r.period, US / 2);
    let config =
        ValidatorConfig { periods: 10_000, max_releases: 100_000, phases: Phases::Zero, delays: Delays::Min };
    let report = validate(&topo, &printed.tunnels(), &config);
    assert!(report.drops() > 0 && report.violations() > 0, "{report:?}");
    // Fixed: the period becomes 1.1 us and every packet arrives in time.
    let mut fixed = Allocation::new(topo.clone());
    fixed.admit(req(&fixed, "t", "h0", &["h1"], 125, US / 2, 0)).unwrap();
    let report = validate(&topo, &fixed.tunnels(), &config);
    assert!(report.holds(), "{report:?}");
}

#[test]
fn tightened_bounds_are_caught() {
    // The one-switch tunnel's bounds are exact: with every delay at its longest a packet takes
    // 4.2 us, with every delay at its shortest 4 us. Shave a picosecond off either end and the
    // validator must report it.
    let mut a = Allocation::new(generate::rack(2, spec()).unwrap());
    a.admit(req(&a, "t", "h0", &["h1"], 125, 10 * US, 0)).unwrap();
    let topo = a.topology().clone();
    let mut tunnel = a.tunnels()[0].clone();
    let exact = validate_adversarially(&topo, &[&tunnel], 100, 10_000, 1);
    assert!(exact.holds());
    assert_eq!(exact.tunnels[0].observed_min, Some(4 * US));
    assert_eq!(exact.tunnels[0].observed_max, Some(42 * US / 10));
    tunnel.resources.max_jitter -= 1;
    let late = validate_adversarially(&topo, &[&tunnel], 100, 10_000, 1);
    assert!(late.violations() > 0);
    tunnel.resources.max_jitter += 2;
    tunnel.resources.min_latency += 1;
    let early = validate_adversarially(&topo, &[&tunnel], 100, 10_000, 1);
    assert!(early.violations() > 0);
}

#[test]
fn the_targeted_adversary_reaches_the_two_tunnel_bound() {
    // The two-tunnel case above: A's bound is 6.2 us, met when B's packet reaches s0 -> h2 just
    // before A's and every delay is at its longest. The targeted adversary builds that run.
    let mut a = Allocation::new(generate::rack(3, spec()).unwrap());
    a.admit(req(&a, "A", "h0", &["h2"], 125, US, 0)).unwrap();
    a.admit(req(&a, "B", "h1", &["h2"], 250, US, 0)).unwrap();
    let tunnels = a.tunnels();
    let report = kairos_te::validator::validate_targeted(a.topology(), &tunnels, 3, 10_000);
    assert!(report.holds(), "{report:?}");
    // Within a few picoseconds: the other packet arrives 1-3 ps ahead, so starts that much early.
    for (t, bound) in report.tunnels.iter().zip([62 * US / 10, 72 * US / 10]) {
        let seen = t.observed_max.unwrap();
        assert!(seen <= bound && bound - seen <= 3, "{} saw {seen} ps, bound {bound} ps", t.name);
    }
}

#[test]
fn software_links_leave_transmission_out_of_the_minimum_only() {
    // The tree of `one_tunnel_through_one_switch`, on links that hand a lone packet on at once:
    //   lo(h0) = 2 lambda_min = 2 us (no t); hi(h0) = 4.2 us as on a wire; jitter 2.2 us.
    let mut topology = generate::rack(2, spec()).unwrap();
    topology.set_software_links(true);
    let back = kairos_te::Topology::from_toml(&topology.to_toml(), "t.toml").unwrap();
    assert!(back.software_links(), "the file says so and reads back");
    let mut a = Allocation::new(topology);
    let r = a.admit(req(&a, "t", "h0", &["h1"], 125, 10 * US, 0)).unwrap().resources;
    assert_eq!((r.min_latency, r.min_latency + r.max_jitter), (2 * US, 42 * US / 10));
    // The validator's packets always take their transmission: none arrives before the minimum.
    let v = validate(a.topology(), &a.tunnels(), &ValidatorConfig::default());
    assert!(v.violations() == 0 && v.tunnels.iter().all(|t| t.delivered > 0), "{v:?}");
}

#[test]
fn the_sending_host_delay_widens_the_jitter_and_the_period_only() {
    // The tree of `one_tunnel_through_one_switch` from a host that lets a packet into its first
    // queue up to J after its release (a link of jitter J before h0 -> s0):
    //   one receiver, J = 0.5 us:  lo(h0) = 4 us; hi(h0) = 4.2 + 0.5 = 4.7 us -> jitter 0.7 us
    //                              D(h0) = 1.1 + 0.5 = 1.6 us
    //   two receivers, J = 0.5 + 0.3 us (one more send call): jitter 0.2 + 0.8 = 1.0 us
    let mut a = Allocation::new(generate::rack(3, spec()).unwrap());
    let h0 = a.topology().find("h0").unwrap();
    let one = a.admit(req(&a, "one", "h0", &["h1"], 125, US / 2, 0)).unwrap();
    let two = a.admit(req(&a, "two", "h0", &["h1", "h2"], 125, 10 * US, 0)).unwrap();
    let before = a.tunnel(one.id).unwrap().resources;
    let delay = HostDelay { core_jitter: US / 2, per_receiver: 3 * US / 10 };
    let changed = a.set_host_delay(h0, delay).unwrap();
    assert_eq!(changed.iter().map(|c| c.id).collect::<Vec<_>>(), [one.id, two.id], "both of h0's tunnels");
    let r = a.tunnel(one.id).unwrap().resources;
    assert_eq!(r.min_latency, before.min_latency, "the host only ever delays");
    // "one" shares h0 -> s0 -> h1 with "two": each waits one packet of the other there.
    assert_eq!(r.max_jitter, before.max_jitter + US / 2);
    assert_eq!(r.period, before.period + US / 2);
    let r2 = a.tunnel(two.id).unwrap().resources;
    assert_eq!(r2.max_jitter, two.resources.max_jitter + 8 * US / 10);
    assert_eq!(a.host_delay(h0), delay);
    // The validator delays each packet at the host as the analysis assumed, and the bounds hold.
    let report = validate_adversarially(a.topology(), &a.tunnels(), 2_000, 200_000, 3);
    assert!(report.holds(), "{report:?}");
    // Setting the same delay again changes nothing; setting it back to zero restores the bounds.
    assert!(a.set_host_delay(h0, delay).unwrap().is_empty());
    a.set_host_delay(h0, HostDelay::default()).unwrap();
    assert_eq!(a.tunnel(one.id).unwrap().resources, before);
    // A switch has no node to report a delay.
    let s0 = a.topology().find("s0").unwrap();
    assert!(matches!(a.set_host_delay(s0, delay), Err(Refusal::Invalid(_))));
}

#[test]
fn bounds_that_ignore_the_host_delay_are_caught() {
    // What the controller granted before it held the host's delay: the validator, delaying each
    // packet at its host, finds packets past that bound. B, a lower sub-lane on A's last link,
    // counts A's packets from A's spread there; A's period grows with the delay as its spread
    // does, so B still meets one A packet a wait and keeps its bounds. (That the re-analysis
    // reaches such tunnels when it must is the property test's drift check.)
    let mut a = Allocation::new(generate::rack(3, spec()).unwrap());
    a.admit(req(&a, "A", "h0", &["h2"], 125, 3 * US, 0)).unwrap();
    a.admit(req(&a, "B", "h1", &["h2"], 125, 3 * US, 1)).unwrap();
    let stale: Vec<kairos_te::Tunnel> = a.tunnels().into_iter().cloned().collect();
    let h0 = a.topology().find("h0").unwrap();
    let changed = a.set_host_delay(h0, HostDelay { core_jitter: 5 * US, per_receiver: 0 }).unwrap();
    assert_eq!(changed.len(), 1, "A's own bound only: {changed:?}");
    let held = a.tunnels();
    let report = validate_adversarially(a.topology(), &held, 2_000, 200_000, 5);
    assert!(report.holds(), "{report:?}");
    let mut unaware = stale.clone();
    for (t, now) in unaware.iter_mut().zip(&held) {
        t.host_jitter = now.host_jitter;
    }
    let unaware: Vec<&kairos_te::Tunnel> = unaware.iter().collect();
    let report = validate_adversarially(a.topology(), &unaware, 2_000, 200_000, 5);
    assert!(report.tunnels[0].violations > 0, "{report:?}");
}
