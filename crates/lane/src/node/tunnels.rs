//! The node's view of its host's tunnels, as a sans-I/O state machine: which tunnel may send
//! when and how much, whether what its application offered is within its grant, and the usage
//! reports the controller needs to police and re-plan. The node's periodic loop asks
//! [`NodeTunnels::due`] for the next release, has [`NodeTunnels::offered`] judge what the
//! application offered and tells [`NodeTunnels::settled`] what became of it; the control thread
//! applies the controller's notices and sends the reports. No clock reads or sockets inside:
//! every rule is tested on a virtual clock.
//!
//! Rules:
//! - A tunnel sends at most one packet of at most its granted size each period, from the
//!   grant's `send_from` on. Releases keep their phase: a loop that falls behind sends once
//!   for the releases it missed (counted), never a burst.
//! - What the application offers beyond one packet a period (a message larger than the
//!   packet, or more than the carried backlog holds) is excess: dropped at the node, counted,
//!   and reported as soon as it is found, over the stretch that shows it only (the controller
//!   answers `BW_EXCEEDED`, and terminates a repeat offender), then at most once per report
//!   interval, so that one burst is not three strikes. The judge is a token bucket
//!   (`Policer`) of one packet a period and [`DEPTH`] deep, charged when the loop reads the
//!   outbox with the time since its last read on the node's own clock. Counting packets per
//!   release instead charged the application for the node's timing: a release read late holds
//!   the messages of every period it was late for, and an application at any phase to the
//!   releases lands two messages in one period now and then, so a sensor sending exactly at its
//!   grant heard `BW_EXCEEDED` and had its tunnel terminated within seconds on a busy host.
//! - What the node itself could not send in time (its loop missed releases, and it carries
//!   one period's backlog, no more) is dropped too, the oldest first, but counted as late, never
//!   as the application's excess, and never reported.
//! - Every report interval the node reports each sending tunnel's use (periods with something
//!   to send, and the packets the offered bytes would need), so the controller can give back
//!   what a tunnel does not use (`BW_UNUSED`). A report's window is whole periods, rounded up
//!   from the time its counts cover (from the last read of the outbox before the window): the
//!   controller allows the window's periods and one more, and a window cut at the loop's
//!   instant can hold a period fewer than the reads it counts.
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

/// What one tunnel's application offered since the loop last read its outbox.
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
}

/// What became of the messages of one release, once the loop sent its packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Messages sent in the packet.
    pub sent: u64,
    /// Messages dropped as the application's excess.
    pub excess: u64,
    /// Messages dropped because the node could not send them in time (see the module docs).
    pub late: u64,
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
    /// Messages dropped because the node could not send them in time (not the application's
    /// doing: not excess, not reported).
    pub late_messages: u64,
    /// Excess reports sent to the controller.
    pub excess_reports: u64,
    /// When its first message was dropped as excess (the read of the outbox that found it, ns).
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

/// Packets the policer's bucket holds: one a period, and one more for the phase (the
/// controller's allowance in a report's window, as [`crate::controller`] says). An application
/// sending one packet a period, each less than a period after its time, offers in any stretch
/// fewer than the stretch's length in periods and two; two is also what the node holds at a
/// release (its packet and one period's backlog).
pub const DEPTH: u64 = 2;

/// One tunnel's judge of what its application offers: a token bucket of one packet a period,
/// [`DEPTH`] packets deep, whose credit is time (a packet costs a period). It is charged at
/// each read of the outbox with the time since the previous read, so the node's own lateness
/// is credited as the time it was: a read late by three periods finds three periods' messages
/// and three periods' credit. The credit is capped after the charge, not before it, so that
/// the application's messages spread over a read's interval may use the credit that interval
/// brought. Excess found is dropped, so it is not charged again.
#[derive(Debug, Clone)]
struct Policer {
    /// Credit, ns of the tunnel's period: at most [`DEPTH`] periods.
    credit_ns: i128,
    /// When the outbox was last read.
    read_ns: u64,
    /// When the credit was last full: excess is the application's over the stretch since.
    full_ns: u64,
    /// Packets offered since then.
    packets_since_full: u64,
}

impl Policer {
    fn new(now_ns: u64, period: u64) -> Self {
        Self { credit_ns: Self::depth(period), read_ns: now_ns, full_ns: now_ns, packets_since_full: 0 }
    }

    fn depth(period: u64) -> i128 {
        i128::from(DEPTH) * i128::from(period)
    }

    /// Charges `packets` offered since the last read, read at `now_ns`; returns how many of
    /// them are beyond the grant.
    fn charge(&mut self, now_ns: u64, packets: u64, period: u64) -> u64 {
        let elapsed = i128::from(now_ns.saturating_sub(self.read_ns));
        self.read_ns = self.read_ns.max(now_ns);
        let left = self.credit_ns + elapsed - i128::from(packets) * i128::from(period);
        if left >= Self::depth(period) {
            self.credit_ns = Self::depth(period);
            (self.full_ns, self.packets_since_full) = (now_ns, 0);
            return 0;
        }
        self.packets_since_full += packets;
        if left >= 0 {
            self.credit_ns = left;
            return 0;
        }
        let owed = u128::try_from(-left).unwrap_or(u128::MAX);
        let beyond = owed.div_ceil(u128::from(period));
        self.credit_ns = left + i128::try_from(beyond).unwrap_or(i128::MAX) * i128::from(period);
        u64::try_from(beyond).unwrap_or(u64::MAX)
    }

    /// The stretch that shows the excess just found: its length, ns, and the packets offered
    /// in it (more than its length in periods and two, so more than the controller's
    /// allowance of its periods and one: `BW_EXCEEDED`).
    fn excess_stretch(&self) -> (u64, u64) {
        (self.read_ns.saturating_sub(self.full_ns).max(1), self.packets_since_full)
    }
}

#[derive(Debug, Clone)]
struct Window {
    /// The last read of the outbox before the window: its counts cover what was offered since.
    start_ns: u64,
    packets: u64,
    max_bytes: u64,
    /// The latest excess found in the window: the stretch that shows it, ns, and its packets.
    excess: Option<(u64, u64)>,
}

impl Window {
    fn new(start_ns: u64) -> Self {
        Self { start_ns, packets: 0, max_bytes: 0, excess: None }
    }
}

#[derive(Debug, Clone)]
struct Sending {
    info: TunnelInfo,
    next_ns: u64,
    /// Changes not yet in effect, by effective time.
    pending: Vec<(u64, Grant)>,
    window: Window,
    policer: Policer,
    /// When the last excess report went out (excess is reported at once, then at most once an
    /// interval).
    last_excess_report_ns: Option<u64>,
    counts: SendCounts,
}

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
            next_ns: send_from_ns,
            pending: Vec::new(),
            window: Window::new(now_ns),
            policer: Policer::new(now_ns, period_ns(&info.grant)),
            last_excess_report_ns: None,
            counts: SendCounts::default(),
            info,
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
            | ToNode::HostDelayKnown { .. }
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

    /// Judges what the application of `tunnel` offered since the loop last read its outbox,
    /// read at `now_ns` (at a release; the time taken just after the read, when every message
    /// it took was there): returns how many packets of it are beyond the grant, which the loop
    /// drops (the oldest first) and reports as excess. A message larger than the grant's packet
    /// is excess whatever the count; the loop drops it itself.
    pub fn offered(&mut self, tunnel: TunnelId, offered: Offered, now_ns: u64) -> u64 {
        let Some(s) = self.sending.get_mut(&tunnel) else { return 0 };
        let period = period_ns(&s.info.grant);
        let packets = if offered.messages == 0 {
            0
        } else if offered.packets > 0 {
            offered.packets
        } else {
            offered.bytes.div_ceil(s.info.grant.packet_bytes.max(1)).max(1)
        };
        let beyond = s.policer.charge(now_ns, packets, period);
        s.window.packets += packets;
        s.window.max_bytes = s.window.max_bytes.max(offered.max_message);
        if beyond > 0 {
            s.window.excess = Some(s.policer.excess_stretch());
        } else if offered.max_message > s.info.grant.packet_bytes {
            // Conclusive by its size alone, in any window.
            s.window.excess = Some((period, packets));
        }
        beyond
    }

    /// What became of the messages of the release [`NodeTunnels::offered`] last judged.
    pub fn settled(&mut self, tunnel: TunnelId, settled: Settled) {
        let Some(s) = self.sending.get_mut(&tunnel) else { return };
        s.counts.messages += settled.sent;
        s.counts.excess_messages += settled.excess;
        s.counts.late_messages += settled.late;
        if settled.excess > 0 && s.counts.first_excess_ns.is_none() {
            s.counts.first_excess_ns = Some(s.policer.read_ns);
        }
    }

    /// The usage reports due at `now_ns`: a tunnel whose application offered excess is
    /// reported at once (at most once an interval), every other one each interval.
    pub fn reports(&mut self, now_ns: u64) -> Vec<ToController> {
        let every = self.report_every_ns;
        let mut out = Vec::new();
        for (id, s) in self.sending.iter_mut() {
            let interval_over = now_ns.saturating_sub(s.window.start_ns) >= every;
            let excess_now = s
                .window
                .excess
                .filter(|_| s.last_excess_report_ns.is_none_or(|at| now_ns.saturating_sub(at) >= every));
            if !(interval_over || excess_now.is_some()) {
                continue;
            }
            let period = period_ns(&s.info.grant);
            let (window_ns, packets) = match excess_now {
                // The stretch that shows it, not the whole (perhaps idle) window.
                Some(stretch) => stretch,
                None => {
                    let covered = now_ns.saturating_sub(s.window.start_ns).max(1);
                    (covered.div_ceil(period).saturating_mul(period), s.window.packets)
                }
            };
            out.push(ToController::Usage {
                tunnel_id: *id,
                window_ps: window_ns.saturating_mul(1_000),
                packets,
                max_bytes: s.window.max_bytes,
            });
            if s.window.excess.is_some() {
                s.last_excess_report_ns = Some(now_ns);
                s.counts.excess_reports += 1;
            }
            // The next window counts the reads after this one, which hold what was offered
            // since the last read; with no read in this window (no outbox yet), from now.
            let start = if s.policer.read_ns > s.window.start_ns { s.policer.read_ns } else { now_ns };
            s.window = Window::new(start.min(now_ns));
        }
        out
    }
}

#[cfg(test)]
mod tests;
