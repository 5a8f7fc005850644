//! The node's view of its host's tunnels, as a sans-I/O state machine: which tunnel may send
//! when and how much, what its application offered beyond that, and the usage reports the
//! controller needs to police and re-plan. The node's periodic loop asks [`NodeTunnels::due`]
//! for the next release and reports what the application offered; the control thread applies
//! the controller's notices and sends the reports. No clock reads or sockets inside: every
//! rule is tested on a virtual clock.
//!
//! Rules:
//! - A tunnel sends at most one packet of at most its granted size each period, from the
//!   grant's `send_from` on. Releases keep their phase: a loop that falls behind sends once
//!   for the releases it missed (counted), never a burst.
//! - What the application offers beyond one packet a period (a message larger than the
//!   packet, or more than the carried backlog holds) is excess: dropped at the node, counted,
//!   and reported as soon as the last [`RECENT`] releases show it, over those releases only (the
//!   controller answers `BW_EXCEEDED`, and terminates a repeat offender), then at most once per
//!   report interval, so that one burst is not three strikes.
//! - Every report interval the node reports each sending tunnel's use (periods with something
//!   to send, and the packets the offered bytes would need), so the controller can give back
//!   what a tunnel does not use (`BW_UNUSED`).
//! - A change of grant holds from its effective time: releases before it keep the old period
//!   and size (the controller's grace period protects the other tunnels' bounds until then).
//!
//! Periods and sizes come from the grant in picoseconds and bytes; the node's clock is the
//! wall clock in nanoseconds, so a period is rounded up to a whole nanosecond (never faster than
//! granted).

use std::collections::BTreeMap;

use crate::service::client::Welcome;
use crate::service::wire::{Grant, ToController, ToNode, TunnelInfo};
use crate::te::TunnelId;

/// A period in whole nanoseconds, rounded up, at least 1.
fn period_ns(grant: &Grant) -> u64 {
    grant.period_ps.div_ceil(1_000).max(1)
}

/// A release the periodic loop must serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The tunnel.
    pub tunnel_id: TunnelId,
    /// When it was due, ns.
    pub due_ns: u64,
    /// The packet's room, bytes (the grant's size).
    pub packet_bytes: u64,
    /// Releases that were missed since the last one (the loop was late).
    pub missed: u64,
}

/// What one tunnel's application offered in one period, as the loop saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offered {
    /// Messages taken from the application.
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Packets of the grant's size they need on the wire (0: count them as `bytes` over the
    /// packet size, for callers that know no packet format).
    pub packets: u64,
    /// The largest of them, as the bytes a packet carrying it alone takes on the wire (what
    /// the grant's packet size is compared with).
    pub max_message: u64,
    /// Messages dropped as excess (too large, or beyond the packet's room).
    pub excess_messages: u64,
}

/// Counters of one sending tunnel since it was granted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SendCounts {
    /// Releases served.
    pub releases: u64,
    /// Releases missed because the loop was late.
    pub missed: u64,
    /// Messages sent.
    pub messages: u64,
    /// Messages dropped as excess.
    pub excess_messages: u64,
    /// Excess reports sent to the controller.
    pub excess_reports: u64,
    /// When its first message was dropped as excess (the release's time, ns).
    pub first_excess_ns: Option<u64>,
}

/// A tunnel this node sent on and what it counted, kept after the tunnel ends.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TunnelCounts {
    /// The tunnel.
    pub tunnel_id: TunnelId,
    /// Its name.
    pub name: String,
    /// Its counts.
    pub counts: SendCounts,
}

#[derive(Debug, Clone)]
struct Window {
    start_ns: u64,
    packets: u64,
    max_bytes: u64,
    excess: bool,
}

impl Window {
    fn new(start_ns: u64) -> Self {
        Self { start_ns, packets: 0, max_bytes: 0, excess: false }
    }
}

#[derive(Debug, Clone)]
struct Sending {
    info: TunnelInfo,
    next_ns: u64,
    /// Changes not yet in effect, by effective time.
    pending: Vec<(u64, Grant)>,
    window: Window,
    /// When the last excess report went out (excess is reported at once, then at most once an
    /// interval).
    last_excess_report_ns: Option<u64>,
    /// Packets offered at each of the last [`RECENT`] releases, the newest at `recent_at`.
    recent: [u64; RECENT],
    recent_at: usize,
    counts: SendCounts,
}

/// Releases an excess report covers: the recent past, so that a tunnel idle for most of a
/// report interval and over its grant now is reported as what it is now. Two: a paced
/// application's two messages in one period and none in the next are within a grant (which
/// allows one packet more for the phase), an offender's three packets in two are not.
pub const RECENT: usize = 2;

/// The node's tunnels; see the module docs.
#[derive(Debug, Clone)]
pub struct NodeTunnels {
    host: String,
    report_every_ns: u64,
    sending: BTreeMap<TunnelId, Sending>,
    receiving: BTreeMap<TunnelId, TunnelInfo>,
    /// The counts of sending tunnels that ended.
    ended: Vec<TunnelCounts>,
}

impl NodeTunnels {
    /// No tunnels yet for the node of `host`, which reports use every `report_every_ns`.
    pub fn new(host: &str, report_every_ns: u64) -> Self {
        Self {
            host: host.to_string(),
            report_every_ns: report_every_ns.max(1),
            sending: BTreeMap::new(),
            receiving: BTreeMap::new(),
            ended: Vec::new(),
        }
    }

    /// Every tunnel this node sent on, ended ones first, with its counts.
    pub fn counts(&self) -> Vec<TunnelCounts> {
        let live = self.sending.values().map(|s| TunnelCounts {
            tunnel_id: s.info.tunnel_id,
            name: s.info.name.clone(),
            counts: s.counts,
        });
        self.ended.iter().cloned().chain(live).collect()
    }

    fn end(&mut self, tunnel: TunnelId) {
        if let Some(s) = self.sending.remove(&tunnel) {
            self.ended.push(TunnelCounts { tunnel_id: tunnel, name: s.info.name, counts: s.counts });
        }
    }

    /// The tunnels this host sends on, with their grant in effect.
    pub fn sending(&self) -> impl Iterator<Item = (&TunnelInfo, &SendCounts)> {
        self.sending.values().map(|s| (&s.info, &s.counts))
    }

    /// The tunnels this host receives on.
    pub fn receiving(&self) -> impl Iterator<Item = &TunnelInfo> {
        self.receiving.values()
    }

    /// The grant in effect for a sending tunnel.
    pub fn grant(&self, tunnel: TunnelId) -> Option<Grant> {
        self.sending.get(&tunnel).map(|s| s.info.grant)
    }

    fn add_sending(&mut self, info: TunnelInfo, send_from_ns: u64, now_ns: u64) {
        let s = Sending {
            info,
            next_ns: send_from_ns,
            pending: Vec::new(),
            window: Window::new(now_ns),
            last_excess_report_ns: None,
            recent: [0; RECENT],
            recent_at: 0,
            counts: SendCounts::default(),
        };
        self.sending.insert(s.info.tunnel_id, s);
    }

    /// Applies a notice of the controller at `now_ns`.
    pub fn apply(&mut self, message: &ToNode, now_ns: u64) {
        match message {
            ToNode::Granted { name, tunnel_id, grant, send_from_ns, .. } => {
                let info = TunnelInfo {
                    tunnel_id: *tunnel_id,
                    name: name.clone(),
                    sender: self.host.clone(),
                    receivers: Vec::new(),
                    grant: *grant,
                };
                self.add_sending(info, *send_from_ns, now_ns);
            }
            ToNode::Opened { tunnel, .. } => {
                self.receiving.insert(tunnel.tunnel_id, tunnel.clone());
            }
            ToNode::BandwidthChanged { tunnel_id, grant, effective_at_ns, .. } => {
                if let Some(s) = self.sending.get_mut(tunnel_id) {
                    if *effective_at_ns <= now_ns {
                        s.info.grant = *grant;
                    } else {
                        s.pending.push((*effective_at_ns, *grant));
                        s.pending.sort_by_key(|(at, _)| *at);
                    }
                }
                if let Some(r) = self.receiving.get_mut(tunnel_id) {
                    r.grant = *grant;
                }
            }
            ToNode::Released { tunnel_id } | ToNode::Terminated { tunnel_id } => {
                self.end(*tunnel_id);
                self.receiving.remove(tunnel_id);
            }
            ToNode::Challenge { .. }
            | ToNode::Welcome { .. }
            | ToNode::Refused { .. }
            | ToNode::Rejected { .. } => {}
        }
    }

    /// After a (re)connection: the controller's list is the truth. Tunnels it no longer holds
    /// end here; those it holds keep their phase and counters, with the grant it states; those
    /// new to this node (granted while the node was away) start sending now.
    pub fn reconcile(&mut self, welcome: &Welcome, now_ns: u64) {
        let known: BTreeMap<TunnelId, &TunnelInfo> =
            welcome.tunnels.iter().map(|t| (t.tunnel_id, t)).collect();
        let gone: Vec<TunnelId> = self
            .sending
            .keys()
            .copied()
            .filter(|id| known.get(id).is_none_or(|t| t.sender != welcome.host))
            .collect();
        for id in gone {
            self.end(id);
        }
        self.receiving.retain(|id, _| known.contains_key(id));
        for t in welcome.tunnels.iter() {
            if t.sender == self.host {
                match self.sending.get_mut(&t.tunnel_id) {
                    Some(s) => {
                        s.info.grant = t.grant;
                        s.pending.clear();
                    }
                    None => self.add_sending(t.clone(), now_ns, now_ns),
                }
            } else {
                self.receiving.insert(t.tunnel_id, t.clone());
            }
        }
    }

    /// When the next release is due, ns.
    pub fn next_release_ns(&self) -> Option<u64> {
        self.sending.values().map(|s| s.next_ns).min()
    }

    /// The earliest release due by `now_ns`, if any; its tunnel's next release is set one
    /// period on (or, when the loop is late, to the first release after `now_ns`, counting the
    /// ones missed). Changes whose time has come take effect first.
    pub fn due(&mut self, now_ns: u64) -> Option<Release> {
        let (&id, _) =
            self.sending.iter().filter(|(_, s)| s.next_ns <= now_ns).min_by_key(|(_, s)| s.next_ns)?;
        let s = self.sending.get_mut(&id).expect("found above");
        let due_ns = s.next_ns;
        while let Some(&(at, grant)) = s.pending.first() {
            if at > due_ns {
                break;
            }
            s.info.grant = grant;
            s.pending.remove(0);
        }
        let period = period_ns(&s.info.grant);
        let behind = (now_ns - due_ns) / period;
        s.next_ns = due_ns.saturating_add(period.saturating_mul(behind + 1));
        s.counts.releases += 1;
        s.counts.missed += behind;
        Some(Release { tunnel_id: id, due_ns, packet_bytes: s.info.grant.packet_bytes, missed: behind })
    }

    /// What the application of `tunnel` offered at its last release (the loop sent what fit
    /// and dropped the rest as excess).
    pub fn offered(&mut self, tunnel: TunnelId, offered: Offered) {
        let Some(s) = self.sending.get_mut(&tunnel) else { return };
        s.counts.messages += offered.messages - offered.excess_messages.min(offered.messages);
        s.counts.excess_messages += offered.excess_messages;
        if offered.excess_messages > 0 && s.counts.first_excess_ns.is_none() {
            s.counts.first_excess_ns = Some(s.next_ns.saturating_sub(period_ns(&s.info.grant)));
        }
        s.recent_at = (s.recent_at + 1) % RECENT;
        s.recent[s.recent_at] = 0;
        if offered.messages == 0 {
            return;
        }
        let room = s.info.grant.packet_bytes.max(1);
        let packets = if offered.packets > 0 { offered.packets } else { offered.bytes.div_ceil(room) }.max(1);
        s.window.packets += packets;
        s.recent[s.recent_at] = packets;
        s.window.max_bytes = s.window.max_bytes.max(offered.max_message);
        s.window.excess |= offered.excess_messages > 0;
    }

    /// The usage reports due at `now_ns`: a tunnel whose application offered excess is
    /// reported at once (at most once an interval), every other one each interval.
    pub fn reports(&mut self, now_ns: u64) -> Vec<ToController> {
        let every = self.report_every_ns;
        let mut out = Vec::new();
        for (id, s) in self.sending.iter_mut() {
            let interval_over = now_ns.saturating_sub(s.window.start_ns) >= every;
            // At once when the recent releases show it (the controller allows one packet a
            // period and one more), or a message larger than the grant's packet.
            let recent: u64 = s.recent.iter().sum();
            let conclusive = recent > RECENT as u64 + 1 || s.window.max_bytes > s.info.grant.packet_bytes;
            let excess_now = s.window.excess
                && conclusive
                && s.last_excess_report_ns.is_none_or(|at| now_ns.saturating_sub(at) >= every);
            if !(interval_over || excess_now) {
                continue;
            }
            let (window_ns, packets) = if excess_now && !interval_over {
                // At once: what the last releases carried, not the whole (perhaps idle) window.
                let period = period_ns(&s.info.grant);
                (period.saturating_mul(RECENT as u64), recent)
            } else {
                (now_ns.saturating_sub(s.window.start_ns).max(1), s.window.packets)
            };
            out.push(ToController::Usage {
                tunnel_id: *id,
                window_ps: window_ns.saturating_mul(1_000),
                packets,
                max_bytes: s.window.max_bytes,
            });
            if s.window.excess {
                s.last_excess_report_ns = Some(now_ns);
                s.counts.excess_reports += 1;
            }
            s.window = Window::new(now_ns);
        }
        out
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn excess_is_reported_at_once_then_once_an_interval() {
        let mut t = NodeTunnels::new("h", 1_000 * US);
        granted(&mut t, 1, 100, 0);
        assert!(t.reports(10 * US).is_empty(), "nothing due yet");
        // Three packets' worth in a period: within what two releases allow (one packet each
        // and one for the phase), so nothing yet; four are not, and are reported at once, over
        // the last two releases.
        t.offered(1, Offered { messages: 3, bytes: 192, packets: 0, max_message: 64, excess_messages: 1 });
        assert!(t.reports(15 * US).is_empty(), "not conclusive yet");
        t.offered(1, Offered { messages: 1, bytes: 64, packets: 0, max_message: 64, excess_messages: 0 });
        let r = t.reports(20 * US);
        assert_eq!(
            r,
            [ToController::Usage {
                tunnel_id: 1,
                window_ps: 2 * 100 * US * 1_000,
                packets: 4,
                max_bytes: 64
            }]
        );
        t.offered(1, Offered { messages: 2, bytes: 128, packets: 0, max_message: 64, excess_messages: 1 });
        assert!(t.reports(500 * US).is_empty(), "a second excess waits for the interval");
        let r = t.reports(1_020 * US);
        assert!(matches!(r[..], [ToController::Usage { packets: 2, .. }]), "{r:?}");
        let (_, c) = t.sending().next().unwrap();
        assert_eq!((c.excess_messages, c.excess_reports, c.messages), (2, 2, 4));
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

    /// The node's reports and the controller's rules agree: an application offering twice its
    /// grant is told `BW_EXCEEDED` on the node's first report; one offering a twentieth of it
    /// is re-planned (`BW_UNUSED`); one offering what it was granted is left alone.
    #[test]
    fn the_controller_reads_the_reports_as_the_node_means_them() {
        use crate::controller::{Controller, Input, Notice, Reason};
        use crate::te::{Allocation, LinkSpec, NodeKind, Request, Topology};

        let mut topo = Topology::new();
        let a = topo.add_node("a", NodeKind::Host).unwrap();
        let b = topo.add_node("b", NodeKind::Host).unwrap();
        let spec = LinkSpec {
            bandwidth_bps: 1_000_000_000,
            queue_bytes: 1 << 20,
            min_delay: 1_000,
            max_jitter: 1_000,
        };
        topo.add_duplex(a, b, spec).unwrap();
        // Runs `windows` report windows of `periods` periods each, the application offering
        // `offer(period)`, feeding every report to the controller; the first change it makes.
        let verdict = |offer: &dyn Fn(u64) -> Offered, periods: u64, windows: u64| {
            let mut c = Controller::new(Allocation::new(topo.clone()), 0);
            let request = Request {
                name: "x".into(),
                sender: a,
                receivers: vec![b],
                packet_bytes: 64,
                period: 100_000_000,
                sublane: 0,
            };
            let Notice::Granted { tunnel, resources, .. } = c.handle(Input::Request(request), 0).remove(0)
            else {
                panic!()
            };
            let g = Grant::from(resources);
            let every = periods * period_ns(&g);
            let mut t = NodeTunnels::new("a", every);
            t.apply(
                &ToNode::Granted {
                    app_ref: 0,
                    name: "x".into(),
                    tunnel_id: tunnel,
                    grant: g,
                    send_from_ns: 0,
                },
                0,
            );
            for i in 0..periods * windows {
                let r = t.due(i * period_ns(&g)).unwrap();
                t.offered(r.tunnel_id, offer(i % periods));
                let mut reports = t.reports(i * period_ns(&g) + 1);
                if (i + 1) % periods == 0 {
                    reports.extend(t.reports((i + 1) * period_ns(&g)));
                }
                for report in reports {
                    let ToController::Usage { window_ps, packets, max_bytes, .. } = report else { panic!() };
                    let notices = c.handle(Input::Usage { tunnel, window: window_ps, packets, max_bytes }, 1);
                    let reason = notices.iter().find_map(|n| match n {
                        Notice::BandwidthChanged { tunnel: t, reason, .. } if *t == tunnel => Some(*reason),
                        _ => None,
                    });
                    if reason.is_some() {
                        return reason;
                    }
                }
            }
            None
        };
        let whole = Offered { messages: 1, bytes: 64, packets: 0, max_message: 64, excess_messages: 0 };
        let twice = Offered { messages: 2, bytes: 128, packets: 0, max_message: 64, excess_messages: 1 };
        let too_large = Offered { messages: 1, bytes: 65, packets: 0, max_message: 65, excess_messages: 1 };
        assert_eq!(verdict(&|_| twice, 3, 1), Some(Reason::BwExceeded));
        assert_eq!(verdict(&|_| too_large, 3, 1), Some(Reason::BwExceeded));
        assert_eq!(verdict(&|_| whole, 50, 4), None);
        let rare = |i| if i == 0 { whole } else { Offered::default() };
        assert_eq!(verdict(&rare, 20, 2), None, "two quiet windows are not enough");
        assert_eq!(verdict(&rare, 20, 3), Some(Reason::BwUnused));
    }
}
