//! The controller on a virtual clock: every operation's notices, deadlines and log.

use kairos_lane::controller::{Controller, HOST_DELAY_REFUSED, Input, LogEvent, Notice, Reason};
use kairos_lane::te::{Allocation, HostDelay, LinkSpec, Request, generate};

const US: u64 = 1_000_000; // picoseconds
const GRACE: u64 = 100 * US;

fn controller(queue_bytes: u64) -> Controller {
    let spec = LinkSpec { bandwidth_bps: 1_000_000_000, queue_bytes, min_delay: US, max_jitter: US / 10 };
    Controller::new(Allocation::new(generate::rack(4, spec).unwrap()), GRACE)
}

fn req(c: &Controller, name: &str, from: &str, to: &str, bytes: u64, period: u64) -> Request {
    let t = c.allocation().topology();
    Request {
        name: name.into(),
        sender: t.find(from).unwrap(),
        receivers: vec![t.find(to).unwrap()],
        packet_bytes: bytes,
        period,
        sublane: 0,
    }
}

fn granted(n: &[Notice]) -> (u64, u64) {
    n.iter()
        .find_map(|n| match n {
            Notice::Granted { tunnel, send_from, .. } => Some((*tunnel, *send_from)),
            _ => None,
        })
        .expect("a grant")
}

#[test]
fn a_request_that_worsens_others_waits_for_the_grace_period() {
    let mut c = controller(64 * 1024);
    let r = req(&c, "a", "h0", "h2", 125, 10 * US);
    let first = c.handle(Input::Request(r), 0);
    let (a, from) = granted(&first);
    assert_eq!(from, 0, "nothing else changed, so it may send at once");
    // b shares s0 -> h2 with a: a's jitter grows, so b may only send after the grace period.
    let r = req(&c, "b", "h1", "h2", 250, 10 * US);
    let second = c.handle(Input::Request(r), 5 * US);
    let (_, from) = granted(&second);
    assert_eq!(from, 5 * US + GRACE);
    assert!(second.iter().any(|n| matches!(n,
        Notice::BandwidthChanged { tunnel, reason: Reason::Te, effective_at, .. }
            if *tunnel == a && *effective_at == 5 * US + GRACE)));
    // The log holds both inputs and every notice, in order, with their times.
    let log = c.log();
    assert!(matches!(log[0].event, LogEvent::Input(Input::Request(_))));
    assert_eq!(
        log.iter().filter(|e| matches!(e.event, LogEvent::Notice(_))).count(),
        first.len() + second.len()
    );
    assert_eq!(log.last().unwrap().at, 5 * US);
}

#[test]
fn a_change_keeps_the_old_tunnel_through_the_grace_period() {
    let mut c = controller(64 * 1024);
    let (old, _) = granted(&c.handle(Input::Request(req(&c, "a", "h0", "h1", 125, 10 * US)), 0));
    let n = c.handle(Input::Change { tunnel: old, request: req(&c, "a2", "h0", "h1", 500, 20 * US) }, 1_000);
    let (new, from) = granted(&n);
    assert_eq!(from, 1_000 + GRACE);
    assert!(c.allocation().tunnel(old).is_some() && c.allocation().tunnel(new).is_some(), "both reserved");
    assert_eq!(c.next_deadline(), Some(1_000 + GRACE));
    assert!(c.tick(1_000 + GRACE - 1).is_empty());
    let n = c.tick(1_000 + GRACE);
    assert!(n.contains(&Notice::Released { tunnel: old }));
    assert!(c.allocation().tunnel(old).is_none());
    assert_eq!(c.next_deadline(), None);
    // A change that cannot fit leaves the old tunnel alone.
    let n =
        c.handle(Input::Change { tunnel: new, request: req(&c, "huge", "h0", "h1", 1 << 20, US) }, 2 * GRACE);
    assert!(matches!(&n[..], [Notice::Refused { .. }]), "{n:?}");
    assert!(c.allocation().tunnel(new).is_some());
}

#[test]
fn a_request_that_cannot_fit_names_the_full_link() {
    let mut c = controller(1_000);
    granted(&c.handle(Input::Request(req(&c, "a", "h0", "h2", 800, 10 * US)), 0));
    let n = c.handle(Input::Request(req(&c, "b", "h1", "h2", 300, 10 * US)), 0);
    match &n[..] {
        [Notice::Refused { name, reason }] => {
            assert_eq!(name, "b");
            assert!(reason.contains("s0 -> h2") && reason.contains("full"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn release_tells_the_others_after_the_grace_period() {
    let mut c = controller(64 * 1024);
    let (a, _) = granted(&c.handle(Input::Request(req(&c, "a", "h0", "h2", 125, 10 * US)), 0));
    let (b, _) = granted(&c.handle(Input::Request(req(&c, "b", "h1", "h2", 250, 10 * US)), 0));
    let n = c.handle(Input::Release { tunnel: b }, 7);
    assert_eq!(n[0], Notice::Released { tunnel: b });
    assert!(n.iter().any(|x| matches!(x, Notice::BandwidthChanged { tunnel, effective_at, .. } if *tunnel == a && *effective_at == 7 + GRACE)));
    let n = c.handle(Input::Release { tunnel: b }, 8);
    assert!(matches!(&n[..], [Notice::Refused { .. }]));
}

#[test]
fn policing_reports_warn_then_terminate_and_give_unused_room_back() {
    let mut c = controller(64 * 1024);
    let (a, _) = granted(&c.handle(Input::Request(req(&c, "a", "h0", "h1", 125, 10 * US)), 0));
    let period = c.allocation().tunnel(a).unwrap().resources.period;
    // 100 periods' worth of window: up to 101 packets are within the grant.
    let window = 100 * period;
    assert!(c.handle(Input::Usage { tunnel: a, window, packets: 101, max_bytes: 125 }, 1).is_empty());
    for strike in 1..=3u64 {
        let n = c.handle(Input::Usage { tunnel: a, window, packets: 150, max_bytes: 125 }, strike);
        if strike < 3 {
            assert!(matches!(&n[..], [Notice::BandwidthChanged { reason: Reason::BwExceeded, .. }]), "{n:?}");
        } else {
            assert_eq!(n, vec![Notice::Terminated { tunnel: a }]);
        }
    }
    assert!(c.allocation().tunnel(a).is_none());
    // A tunnel using a tenth of its grant in three reports in a row is re-planned at the period
    // it uses; a report of full use in between starts the count again.
    let (b, _) = granted(&c.handle(Input::Request(req(&c, "b", "h0", "h1", 125, 10 * US)), 10));
    let quiet = Input::Usage { tunnel: b, window: 1_000 * US, packets: 10, max_bytes: 100 };
    let busy = Input::Usage { tunnel: b, window: 1_000 * US, packets: 100, max_bytes: 100 };
    for (i, input) in
        [quiet.clone(), quiet.clone(), busy, quiet.clone(), quiet.clone()].into_iter().enumerate()
    {
        assert!(c.handle(input, 11 + i as u64).is_empty(), "report {i} changes nothing");
    }
    let n = c.handle(quiet, 20);
    match &n[..] {
        [Notice::BandwidthChanged { reason: Reason::BwUnused, resources, .. }, ..] => {
            assert_eq!(resources.period, 100 * US)
        }
        other => panic!("expected BW_UNUSED, got {other:?}"),
    }
}

#[test]
fn termination_ends_every_tunnel_and_refuses_what_follows() {
    let mut c = controller(64 * 1024);
    granted(&c.handle(Input::Request(req(&c, "a", "h0", "h1", 125, 10 * US)), 0));
    granted(&c.handle(Input::Request(req(&c, "b", "h2", "h3", 125, 10 * US)), 0));
    let n = c.handle(Input::Terminate, 1);
    assert_eq!(n.iter().filter(|x| matches!(x, Notice::Terminated { .. })).count(), 2);
    assert!(c.allocation().is_empty());
    let n = c.handle(Input::Request(req(&c, "late", "h0", "h1", 125, 10 * US)), 2);
    assert!(matches!(&n[..], [Notice::Refused { reason, .. }] if reason.contains("terminated")));
}

#[test]
fn a_bounded_log_keeps_the_latest_entries_and_no_more_than_twice_its_limit() {
    let mut c = controller(64 * 1024).with_log_limit(4);
    let (a, _) = granted(&c.handle(Input::Request(req(&c, "a", "h0", "h1", 125, 10 * US)), 0));
    for i in 1..=100u64 {
        c.handle(Input::Release { tunnel: a + i * 1_000 }, i * US);
        assert!(c.log().len() <= 8, "{} entries after {i} inputs", c.log().len());
    }
    assert!(c.log().len() >= 4);
    assert_eq!(c.log().last().unwrap().at, 100 * US, "the latest entry is kept");
    assert!(c.allocation().tunnel(a).is_some(), "the log's bound changes nothing else");
}

#[test]
fn a_host_delay_widens_its_tunnels_at_once_narrows_them_after_the_grace_and_ends_them_if_unbounded() {
    let mut c = controller(64 * 1024);
    let (a, _) = granted(&c.handle(Input::Request(req(&c, "a", "h0", "h2", 125, 10 * US)), 0));
    let (b, _) = granted(&c.handle(Input::Request(req(&c, "b", "h1", "h3", 125, 10 * US)), 0));
    let before = c.allocation().tunnel(a).unwrap().resources;
    let h0 = c.allocation().topology().find("h0").unwrap();
    let delay = HostDelay { core_jitter: 30 * US, per_receiver: 5 * US };
    let notices = c.handle(Input::HostDelay { host: h0, delay }, 7 * US);
    // Each tunnel h0 sends (not h1's), wider at once: the delay is there. Then the host.
    assert_eq!(notices.len(), 2, "{notices:?}");
    let Notice::BandwidthChanged { tunnel, resources, reason: Reason::Host, effective_at } = notices[0]
    else {
        panic!("{notices:?}")
    };
    assert_eq!((tunnel, effective_at), (a, 7 * US));
    assert_eq!(resources.min_latency, before.min_latency);
    assert_eq!(resources.max_jitter, before.max_jitter + 30 * US, "one receiver: no send call added");
    assert_ne!(tunnel, b);
    assert_eq!(notices[1], Notice::HostDelayKnown { host: h0, delay });
    // A smaller figure narrows the bound only after the grace period: packets delayed under
    // the old one may still be in flight.
    let smaller = HostDelay { core_jitter: 10 * US, per_receiver: 5 * US };
    let n = c.handle(Input::HostDelay { host: h0, delay: smaller }, 8 * US);
    assert!(
        matches!(n[0], Notice::BandwidthChanged { tunnel, effective_at, .. } if tunnel == a && effective_at == 8 * US + GRACE),
        "{n:?}"
    );
    c.handle(Input::HostDelay { host: h0, delay }, 9 * US);
    // A request after the report is granted with the delay in its bounds.
    let n = c.handle(Input::Request(req(&c, "late", "h0", "h3", 125, 100 * US)), 10 * US);
    let (late, _) = granted(&n);
    assert!(c.allocation().tunnel(late).unwrap().resources.max_jitter >= 30 * US);
    // A delay no 64-bit bound can hold: refused, and the host's tunnels end, since bounds that
    // leave it out would be false; h1's tunnel stays. The delay is held: h0's next request is
    // analysed with it, and refused.
    let huge = HostDelay { core_jitter: u64::MAX, per_receiver: 0 };
    let n = c.handle(Input::HostDelay { host: h0, delay: huge }, 11 * US);
    assert!(
        matches!(&n[0], Notice::Refused { reason, .. } if reason.starts_with(HOST_DELAY_REFUSED)),
        "{n:?}"
    );
    let mut ended: Vec<u64> = n
        .iter()
        .filter_map(|n| match n {
            Notice::Terminated { tunnel } => Some(*tunnel),
            _ => None,
        })
        .collect();
    ended.sort();
    assert_eq!(ended, [a, late]);
    assert_eq!(n.last(), Some(&Notice::HostDelayKnown { host: h0, delay: huge }));
    assert!(c.allocation().tunnel(b).is_some() && c.allocation().tunnel(a).is_none());
    assert_eq!(c.allocation().host_delay(h0), huge);
    let n = c.handle(Input::Request(req(&c, "again", "h0", "h2", 125, 10 * US)), 12 * US);
    assert!(matches!(&n[..], [Notice::Refused { .. }]), "{n:?}");
    // A switch has no delay to report.
    let s0 = c.allocation().topology().find("s0").unwrap();
    let n = c.handle(Input::HostDelay { host: s0, delay }, 13 * US);
    assert!(matches!(&n[..], [Notice::Refused { reason, .. }] if reason.contains("not a host")), "{n:?}");
}
