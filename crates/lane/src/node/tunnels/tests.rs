use super::*;

const US: u64 = 1_000;

fn grant(period_us: u64, bytes: u64) -> Grant {
    Grant {
        packet_bytes: bytes,
        period_ps: period_us * 1_000_000,
        min_latency_ps: 1,
        max_jitter_ps: 1,
        sublane: 0,
    }
}

fn granted(t: &mut NodeTunnels, id: TunnelId, period_us: u64, send_from_ns: u64) {
    let m = ToNode::Granted {
        app_ref: 1,
        name: format!("t{id}"),
        tunnel_id: id,
        grant: grant(period_us, 64),
        send_from_ns,
    };
    t.apply(&m, 0);
}

#[test]
fn releases_keep_their_phase_and_a_late_loop_sends_once() {
    let mut t = NodeTunnels::new("h", 1_000 * US);
    granted(&mut t, 1, 100, 50 * US);
    granted(&mut t, 2, 30, 0);
    assert_eq!(t.next_release_ns(), Some(0));
    let order: Vec<(TunnelId, u64)> =
        std::iter::from_fn(|| t.due(120 * US)).map(|r| (r.tunnel_id, r.due_ns / US)).collect();
    assert_eq!(order.first(), Some(&(2, 0)));
    // Tunnel 2 was due at 0 and is served once with its missed releases counted, tunnel 1 once.
    assert_eq!(order, [(2, 0), (1, 50)]);
    let counts: Vec<_> = t.sending().map(|(i, c)| (i.tunnel_id, c.missed)).collect();
    assert_eq!(counts, [(1, 0), (2, 4)]);
    assert_eq!(t.next_release_ns(), Some(150 * US), "2 is next at 150, in phase; 1 at 150 too");
    assert_eq!(t.due(149 * US), None);
}

#[test]
fn a_change_holds_from_its_effective_time() {
    let mut t = NodeTunnels::new("h", 1_000 * US);
    granted(&mut t, 1, 100, 0);
    let change = ToNode::BandwidthChanged {
        tunnel_id: 1,
        grant: grant(200, 32),
        reason: crate::controller::Reason::Te,
        effective_at_ns: 150 * US,
    };
    t.apply(&change, 10 * US);
    let r = [0, 100, 200, 400].map(|at| t.due(at * US).map(|r| (r.due_ns / US, r.packet_bytes)));
    assert_eq!(r[..2], [Some((0, 64)), Some((100, 64))], "the old grant before 150 us");
    assert_eq!(r[2], Some((200, 32)), "the new one from the first release after it...");
    assert_eq!(r[3], Some((400, 32)), "... with its period");
}

fn offer(messages: u64) -> Offered {
    Offered { messages, bytes: 64 * messages, packets: 0, max_message: 64 }
}

#[test]
fn excess_is_reported_at_once_then_once_an_interval() {
    let mut t = NodeTunnels::new("h", 1_000 * US);
    granted(&mut t, 1, 100, 0);
    assert!(t.reports(10 * US).is_empty(), "nothing due yet");
    // Two packets at once: the period's and the one more for the phase; a third in the
    // next period is still within (its period brought one), a fourth is not, and it is
    // reported at once, over the stretch since the credit was full.
    assert_eq!(t.offered(1, offer(2), 0), 0);
    assert_eq!(t.offered(1, offer(1), 100 * US), 0);
    assert!(t.reports(101 * US).is_empty(), "within the grant");
    assert_eq!(t.offered(1, offer(2), 200 * US), 1, "five in the first two periods");
    t.settled(1, Settled { sent: 1, excess: 1, late: 0 });
    let r = t.reports(201 * US);
    assert_eq!(
        r,
        [ToController::Usage { tunnel_id: 1, window_ps: 200 * US * 1_000, packets: 5, max_bytes: 64 }]
    );
    assert_eq!(t.offered(1, offer(3), 300 * US), 2);
    assert!(t.reports(500 * US).is_empty(), "a second excess waits for the interval");
    let r = t.reports(1_210 * US);
    assert_eq!(
        r,
        [ToController::Usage { tunnel_id: 1, window_ps: 300 * US * 1_000, packets: 8, max_bytes: 64 }],
        "then it is reported over the stretch since the credit was last full"
    );
    let (_, c) = t.sending().next().unwrap();
    assert_eq!(
        (c.excess_messages, c.excess_reports, c.messages, c.first_excess_ns),
        (1, 2, 1, Some(200 * US))
    );
}

#[test]
fn a_message_larger_than_the_packet_is_excess_at_once() {
    let mut t = NodeTunnels::new("h", 1_000 * US);
    granted(&mut t, 1, 100, 0);
    let large = Offered { messages: 1, bytes: 100, packets: 1, max_message: 82 };
    assert_eq!(t.offered(1, large, 0), 0, "one packet's count: not beyond the grant");
    let r = t.reports(1);
    assert!(matches!(r[..], [ToController::Usage { max_bytes: 82, .. }]), "{r:?}");
}

#[test]
fn reconnecting_ends_what_the_controller_no_longer_holds() {
    let mut t = NodeTunnels::new("h", 1_000 * US);
    granted(&mut t, 1, 100, 0);
    granted(&mut t, 2, 100, 0);
    let kept = TunnelInfo {
        tunnel_id: 2,
        name: "t2".into(),
        sender: "h".into(),
        receivers: vec![],
        grant: grant(300, 64),
    };
    let new = TunnelInfo {
        tunnel_id: 5,
        name: "t5".into(),
        sender: "h".into(),
        receivers: vec![],
        grant: grant(100, 64),
    };
    let incoming = TunnelInfo {
        tunnel_id: 6,
        name: "in".into(),
        sender: "x".into(),
        receivers: vec!["h".into()],
        grant: grant(100, 64),
    };
    t.reconcile(&Welcome { host: "h".into(), now_ns: 0, tunnels: vec![kept, new, incoming] }, 7 * US);
    let ids: Vec<_> = t.sending().map(|(i, _)| i.tunnel_id).collect();
    assert_eq!(ids, [2, 5]);
    assert_eq!(t.grant(2).map(|g| g.period_ps), Some(300_000_000));
    assert_eq!(t.receiving().map(|i| i.tunnel_id).collect::<Vec<_>>(), [6]);
}

/// A controller over two hosts `a` -> `b` with a tunnel of 64-byte packets every 100 us
/// granted at 0, and the grant the node holds.
fn controller() -> (crate::controller::Controller, TunnelId, Grant) {
    use crate::controller::{Controller, Input, Notice};
    use crate::te::{Allocation, LinkSpec, NodeKind, Request, Topology};

    let mut topo = Topology::new();
    let a = topo.add_node("a", NodeKind::Host).unwrap();
    let b = topo.add_node("b", NodeKind::Host).unwrap();
    let spec =
        LinkSpec { bandwidth_bps: 1_000_000_000, queue_bytes: 1 << 20, min_delay: 1_000, max_jitter: 1_000 };
    topo.add_duplex(a, b, spec).unwrap();
    let mut c = Controller::new(Allocation::new(topo), 0);
    let request = Request {
        name: "x".into(),
        sender: a,
        receivers: vec![b],
        packet_bytes: 64,
        period: 100_000_000,
        sublane: 0,
    };
    let Notice::Granted { tunnel, resources, .. } = c.handle(Input::Request(request), 0).remove(0) else {
        panic!()
    };
    (c, tunnel, Grant::from(resources))
}

/// Hands `reports` to the controller; the first change it makes of `tunnel`, if any (an
/// end counts as `BW_EXCEEDED`'s last).
fn verdict_of(
    c: &mut crate::controller::Controller,
    tunnel: TunnelId,
    reports: Vec<ToController>,
) -> Option<crate::controller::Reason> {
    use crate::controller::{Input, Notice, Reason};
    for report in reports {
        let ToController::Usage { window_ps, packets, max_bytes, .. } = report else { panic!() };
        for n in c.handle(Input::Usage { tunnel, window: window_ps, packets, max_bytes }, 1) {
            match n {
                Notice::BandwidthChanged { tunnel: t, reason, .. } if t == tunnel => return Some(reason),
                Notice::Terminated { tunnel: t } if t == tunnel => return Some(Reason::BwExceeded),
                _ => {}
            }
        }
    }
    None
}

/// A node's loop on a virtual clock, sending on the tunnel of [`controller`]: the
/// application offers a message at each of `sends` (ns, sorted); the loop wakes for each
/// release `late()` ns after it is due (more than a period late misses releases), reads
/// what was offered since its last read, and hands its reports (every `every_periods`) to
/// the controller. Returns the packets the policer found beyond the grant, and the first
/// change the controller made.
fn drive(
    sends: &[u64],
    late: &mut dyn FnMut() -> u64,
    every_periods: u64,
) -> (u64, Option<crate::controller::Reason>) {
    let (mut c, tunnel, g) = controller();
    let period = period_ns(&g);
    let mut t = NodeTunnels::new("a", every_periods * period);
    let granted =
        ToNode::Granted { app_ref: 0, name: "x".into(), tunnel_id: tunnel, grant: g, send_from_ns: 0 };
    t.apply(&granted, 0);
    let (mut beyond, mut read, mut now) = (0, 0, 0);
    let end = sends.last().copied().unwrap_or(0) + 2 * period;
    while now < end {
        now = t.next_release_ns().unwrap().max(now) + late();
        while let Some(r) = t.due(now) {
            let taken = sends[read..].iter().take_while(|&&at| at <= now).count();
            read += taken;
            beyond += t.offered(r.tunnel_id, offer(taken as u64), now);
        }
        if let Some(reason) = verdict_of(&mut c, tunnel, t.reports(now)) {
            return (beyond, Some(reason));
        }
    }
    (beyond, None)
}

/// What the sensor example met beside the monitor: an application sending exactly one
/// message a period, at any phase to the node's releases, each message late by up to most
/// of a period (its sleep's overshoot), while the node's loop wakes late now and then (by
/// up to four periods, missing releases). Nothing it offers is beyond its grant, and the
/// controller never answers `BW_EXCEEDED`.
#[test]
fn an_application_at_its_grant_is_never_told_it_exceeded_whatever_its_phase_and_jitter() {
    use rand::{Rng, SeedableRng};
    for phase_us in [0, 1, 5, 50, 95, 99] {
        for max_jitter_us in [0, 10, 60, 95] {
            let mut app = rand::rngs::SmallRng::seed_from_u64(phase_us * 1_000 + max_jitter_us);
            let sends: Vec<u64> = (0..3_000)
                .map(|k| phase_us * US + k * 100 * US + app.random_range(0..max_jitter_us * US + 1))
                .collect();
            let mut node = rand::rngs::SmallRng::seed_from_u64(phase_us * 100 + max_jitter_us);
            let mut late = || match node.random_range(0..100) {
                0..4 => node.random_range(100 * US..400 * US),
                4..20 => node.random_range(0..99 * US),
                _ => node.random_range(0..3 * US),
            };
            assert_eq!(
                drive(&sends, &mut late, 1_000),
                (0, None),
                "phase {phase_us} us, jitter up to {max_jitter_us} us: judged over its grant"
            );
        }
    }
}

/// An application that loses its core for periods at a time, in its sleep or between its
/// clock read and its send, and keeps its period as the sensor example does (a message that
/// went out a period late or more puts the next one a period after it): within its grant
/// throughout, while the node's loop is late as well.
#[test]
fn an_application_that_stalls_and_keeps_its_period_stays_within_its_grant() {
    use rand::{Rng, SeedableRng};
    for seed in 0..8 {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let stall = |rng: &mut rand::rngs::SmallRng| match rng.random_range(0..100) {
            0..3 => rng.random_range(50 * US..500 * US),
            3..30 => rng.random_range(0..90 * US),
            _ => rng.random_range(0..5 * US),
        };
        let (mut sends, mut next, mut sent) = (Vec::new(), 37 * US, 0);
        for _ in 0..3_000 {
            let woke = next.max(sent) + stall(&mut rng);
            sent = woke + stall(&mut rng);
            sends.push(sent);
            if sent >= next + 100 * US {
                next = sent;
            }
            next += 100 * US;
        }
        let mut node = rand::rngs::SmallRng::seed_from_u64(seed + 100);
        let mut late = || stall(&mut node);
        assert_eq!(drive(&sends, &mut late, 1_000), (0, None), "seed {seed}: judged over its grant");
    }
}

/// What the grant does not allow is still found at once, whatever the node's timing: twice
/// the grant, a quarter over it, and four messages at once after a quiet stretch.
#[test]
fn an_application_over_its_grant_is_told_so_whatever_the_node_timing() {
    use crate::controller::Reason;
    use rand::{Rng, SeedableRng};
    let mut node = rand::rngs::SmallRng::seed_from_u64(11);
    let mut late = || if node.random_range(0..10) == 0 { node.random_range(0..250 * US) } else { 0 };
    let twice: Vec<u64> = (0..400).map(|k| 30 * US + k * 50 * US).collect();
    let (beyond, reason) = drive(&twice, &mut late, 1_000);
    assert!(beyond > 0 && reason == Some(Reason::BwExceeded), "twice: {beyond} {reason:?}");
    let quarter: Vec<u64> = (0..1_000).map(|k| 30 * US + k * 80 * US).collect();
    let (beyond, reason) = drive(&quarter, &mut late, 1_000);
    assert!(beyond > 0 && reason == Some(Reason::BwExceeded), "1.25x: {beyond} {reason:?}");
    // Catching up on four periods at once after a stall of its own: more than a release's
    // packet and one carried.
    let mut burst: Vec<u64> = (0..20).map(|k| 30 * US + k * 100 * US).collect();
    burst.extend([2_430 * US; 4]);
    let (beyond, reason) = drive(&burst, &mut || 0, 1_000);
    assert!(beyond > 0 && reason == Some(Reason::BwExceeded), "burst: {beyond} {reason:?}");
}

/// The node's reports and the controller's rules agree: an application offering twice its
/// grant is told `BW_EXCEEDED` on the node's first report; one offering a twentieth of it
/// is re-planned (`BW_UNUSED`); one offering what it was granted is left alone.
#[test]
fn the_controller_reads_the_reports_as_the_node_means_them() {
    use crate::controller::Reason;

    // Runs `windows` report windows of `periods` periods each, the application offering
    // `offer(period)`, feeding every report to the controller; the first change it makes.
    let verdict = |offer: &dyn Fn(u64) -> Offered, periods: u64, windows: u64| {
        let (mut c, tunnel, g) = controller();
        let every = periods * period_ns(&g);
        let mut t = NodeTunnels::new("a", every);
        let granted =
            ToNode::Granted { app_ref: 0, name: "x".into(), tunnel_id: tunnel, grant: g, send_from_ns: 0 };
        t.apply(&granted, 0);
        for i in 0..periods * windows {
            let now = i * period_ns(&g);
            let r = t.due(now).unwrap();
            t.offered(r.tunnel_id, offer(i % periods), now);
            let mut reports = t.reports(now + 1);
            if (i + 1) % periods == 0 {
                reports.extend(t.reports((i + 1) * period_ns(&g)));
            }
            if let Some(reason) = verdict_of(&mut c, tunnel, reports) {
                return Some(reason);
            }
        }
        None
    };
    let whole = offer(1);
    let twice = offer(2);
    let too_large = Offered { messages: 1, bytes: 65, packets: 0, max_message: 65 };
    assert_eq!(verdict(&|_| twice, 3, 1), Some(Reason::BwExceeded));
    assert_eq!(verdict(&|_| too_large, 3, 1), Some(Reason::BwExceeded));
    assert_eq!(verdict(&|_| whole, 50, 4), None);
    let rare = |i| if i == 0 { whole } else { Offered::default() };
    assert_eq!(verdict(&rare, 20, 2), None, "two quiet windows are not enough");
    assert_eq!(verdict(&rare, 20, 3), Some(Reason::BwUnused));
}
