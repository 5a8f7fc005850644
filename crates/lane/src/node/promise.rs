//! What the node promises an application: the controller's bounds, widened by what this host
//! adds to them.
//!
//! The controller's bounds (X-ADJ over the topology) cover the network: each link's minimum
//! delay and jitter, the queues, the other tunnels. The sending host adds two delays the
//! topology does not hold, both measured by the node when it starts:
//!
//! - **its lane core's jitter**: time the lane loop's thread does not have (an interrupt, a
//!   preemption, the hypervisor) between a release and the packet's send. The command line
//!   measures it with the host doctor's probe (`kairos_metrics::core_probe`, as `kairos doctor`
//!   does; this crate does not depend on `kairos-metrics`), at the lane loop's own priority and
//!   on its core, for a few hundred milliseconds, and passes the figure in ([`HostJitter`]).
//! - **the fan-out**: the lane loop sends a tunnel's packet to each receiver's node as a
//!   datagram of its own, one send call after another, and on the testbed a send call carries
//!   its packet all the way into the receiving host (the veths hand packets on in software, in
//!   the sender's call), so the k-th receiver's packet leaves k send calls after the first. The
//!   node times send calls to its peers ([`HostJitter::send_ns`]) and charges a tunnel with `n`
//!   receivers `n - 1` of them. A peer whose node is not up answers with an ICMP error, a
//!   shorter path (on the testbed 13 us a call against 44-54 us to a running node), so such a
//!   peer is not timed at start but asked again until it is up, and then timed; a longer
//!   figure makes the node promise its tunnels again (the agent's `peer_sends`).
//!
//! Both only ever delay a packet, so the promised minimum latency is the controller's; both
//! add to its jitter. They are added, not the larger taken: a gap on the core can fall on a
//! packet that also meets the network's worst case, and the worst case of independent delays
//! is their sum (the larger alone would be right only if the controller's bound already held
//! the host's jitter, which an idle calibration of the links does not).
//!
//! The node tells the controller both figures after each welcome and whenever one grows
//! (`ToController::HostDelay`, journaled like every input). The controller re-analyses every
//! tunnel with the host's delay before its first link ([`crate::te::HostDelay`]), so its
//! bounds hold the host, for this host's tunnels and for every other tunnel they delay, and
//! the receivers' nodes learn the same bounds. It answers `HostDelayKnown` with what its bounds
//! now hold; the node widens a grant only by what the controller does not hold yet:
//! a figure measured since, or everything before the answer. That widening is the node's own
//! estimate, not the analysis's: until the answer (one round trip after a welcome or a grown
//! figure) the grant's period and the bounds of the tunnels this host's packets delay do not
//! hold the new figure.

use crate::service::wire::{Grant, ToController};
use crate::te::{HostDelay, Picos};

/// What the node measured of its own host when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostJitter {
    /// The lane core's jitter, ns: the longest time the probe's thread lost (see the module
    /// documentation).
    pub core_ns: u64,
    /// How it was measured, for the log (e.g. `kairos doctor --core 1`, a 300 ms probe).
    pub how: String,
    /// The longest send call of one lane datagram to a peer, ns (0: not measured).
    pub send_ns: u64,
}

impl HostJitter {
    /// The delay it adds before the first link, as the controller's model takes it.
    pub fn delay(&self) -> HostDelay {
        HostDelay {
            core_jitter: self.core_ns.saturating_mul(1_000),
            per_receiver: self.send_ns.saturating_mul(1_000),
        }
    }

    /// The report that lets the controller's bounds hold this host's delay.
    pub fn report(&self) -> ToController {
        let delay = self.delay();
        ToController::HostDelay { core_jitter_ps: delay.core_jitter, per_receiver_ps: delay.per_receiver }
    }
}

/// The grant the node promises an application for a tunnel to `receivers` hosts, given what
/// the controller granted, what this host adds, and how much of that the grant already holds
/// (`held`: what the controller's `HostDelayKnown` said, nothing before it answers).
pub fn promise(granted: &Grant, receivers: usize, host: &HostJitter, held: HostDelay) -> Grant {
    let added = added_ps(receivers, host).saturating_sub(jitter_ps(receivers, held));
    Grant { max_jitter_ps: granted.max_jitter_ps.saturating_add(added), ..*granted }
}

/// The jitter the host adds to a tunnel to `receivers` hosts, ps.
pub fn added_ps(receivers: usize, host: &HostJitter) -> Picos {
    jitter_ps(receivers, host.delay())
}

/// `delay`'s share of a tunnel to `receivers` hosts, ps, saturating.
fn jitter_ps(receivers: usize, delay: HostDelay) -> Picos {
    delay.for_receivers(receivers).unwrap_or(Picos::MAX)
}

fn us(ps: Picos) -> String {
    format!("{:.1} us", ps as f64 / 1e6)
}

/// The node's line about a promise wider than the grant, e.g. `tunnel sensor: the controller's
/// jitter bound 12.3 us does not hold this host's: its core lost up to 41.0 us (kairos doctor
/// --core 1) and the second receiver's datagram leaves 15.0 us after the first; promising
/// 68.3 us`.
pub fn describe(name: &str, granted: &Grant, receivers: usize, host: &HostJitter, held: HostDelay) -> String {
    let promised = promise(granted, receivers, host, held);
    let mut why = format!("its core lost up to {} ({})", us(host.core_ns * 1_000), host.how);
    if receivers > 1 {
        why.push_str(&format!(
            " and the last of {receivers} receivers' datagrams leaves {} after the first ({} a send call)",
            us(host.send_ns * 1_000 * (receivers as u64 - 1)),
            us(host.send_ns * 1_000)
        ));
    }
    if held != HostDelay::default() {
        why.push_str(&format!(", of which it holds {}", us(jitter_ps(receivers, held))));
    }
    format!(
        "tunnel {name}: the controller's jitter bound {} does not hold this host's: {why}; promising {} (latency {} to {})",
        us(granted.max_jitter_ps),
        us(promised.max_jitter_ps),
        us(promised.min_latency_ps),
        us(promised.min_latency_ps.saturating_add(promised.max_jitter_ps)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(min_us: u64, jitter_us: u64) -> Grant {
        Grant {
            packet_bytes: 128,
            period_ps: 1_000_000_000,
            min_latency_ps: min_us * 1_000_000,
            max_jitter_ps: jitter_us * 1_000_000,
            sublane: 0,
        }
    }

    #[test]
    fn the_host_widens_only_the_jitter_and_adds_to_it() {
        let host = HostJitter { core_ns: 41_000, how: "a probe".into(), send_ns: 15_000 };
        let granted = grant(4, 12);
        let one = promise(&granted, 1, &host, HostDelay::default());
        assert_eq!(one.min_latency_ps, granted.min_latency_ps, "host delays never make a packet earlier");
        assert_eq!(one.max_jitter_ps, (12 + 41) * 1_000_000, "one receiver: no fan-out");
        assert_eq!((one.period_ps, one.packet_bytes, one.sublane), (granted.period_ps, 128, 0));
        // Each receiver past the first waits one more send call.
        assert_eq!(
            promise(&granted, 3, &host, HostDelay::default()).max_jitter_ps,
            (12 + 41 + 2 * 15) * 1_000_000
        );
        // A larger controller bound is kept and still widened: the delays add.
        assert_eq!(promise(&grant(4, 100), 1, &host, HostDelay::default()).max_jitter_ps, 141_000_000);
    }

    #[test]
    fn a_grant_that_holds_the_host_is_widened_only_by_what_it_lacks() {
        let host = HostJitter { core_ns: 41_000, how: "a probe".into(), send_ns: 15_000 };
        let all = HostDelay { core_jitter: 41_000_000, per_receiver: 15_000_000 };
        assert_eq!(promise(&grant(4, 70), 3, &host, all), grant(4, 70), "the controller holds it all");
        // A send call timed longer since the controller's answer: only the difference, per
        // receiver past the first.
        let older = HostDelay { core_jitter: 41_000_000, per_receiver: 10_000_000 };
        assert_eq!(promise(&grant(4, 70), 3, &host, older).max_jitter_ps, (70 + 2 * 5) * 1_000_000);
        // A figure the controller holds that is larger than the host's now never narrows a grant.
        let larger = HostDelay { core_jitter: 90_000_000, per_receiver: 0 };
        assert_eq!(promise(&grant(4, 70), 3, &host, larger), grant(4, 70));
        match host.report() {
            ToController::HostDelay { core_jitter_ps, per_receiver_ps } => {
                assert_eq!((core_jitter_ps, per_receiver_ps), (41_000_000, 15_000_000));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_quiet_host_promises_what_the_controller_granted() {
        let host = HostJitter { core_ns: 0, how: "a probe".into(), send_ns: 0 };
        assert_eq!(promise(&grant(4, 12), 2, &host, HostDelay::default()), grant(4, 12));
    }

    #[test]
    fn the_widening_saturates_rather_than_wraps() {
        let host = HostJitter { core_ns: u64::MAX / 2, how: "x".into(), send_ns: u64::MAX };
        let promised = promise(&grant(4, 12), usize::MAX, &host, HostDelay::default());
        assert_eq!(promised.max_jitter_ps, Picos::MAX);
    }

    #[test]
    fn the_line_says_what_was_measured_and_what_is_promised() {
        let host = HostJitter { core_ns: 41_000, how: "kairos doctor --core 1".into(), send_ns: 15_000 };
        let line = describe("sensor", &grant(4, 3), 2, &host, HostDelay::default());
        assert_eq!(
            line,
            "tunnel sensor: the controller's jitter bound 3.0 us does not hold this host's: its core lost up to 41.0 us (kairos doctor --core 1) and the last of 2 receivers' datagrams leaves 15.0 us after the first (15.0 us a send call); promising 59.0 us (latency 4.0 us to 63.0 us)"
        );
        assert!(!describe("one", &grant(4, 3), 1, &host, HostDelay::default()).contains("receivers"));
        let part = describe(
            "sensor",
            &grant(4, 33),
            2,
            &host,
            HostDelay { core_jitter: 30_000_000, per_receiver: 0 },
        );
        assert!(
            part.ends_with("of which it holds 30.0 us; promising 59.0 us (latency 4.0 us to 63.0 us)"),
            "{part}"
        );
    }
}
