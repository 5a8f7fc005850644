//! The rows of `kairos lane latency` that are not the lane: what a host gets from the testbed
//! without Kairos, measured the way the lane's row is (64-byte messages every period from host
//! `from` to host `to` across the bridge, one-way latency per message), so each row says what
//! the lane adds over it. The experiment names the rows and runs each through [`run`].
//!
//! - [`Peer::UdpBlocking`]: a plain UDP sender and a receiver blocked in `recvmsg`, unmarked, so
//!   the messages take the bulk class at every egress (behind a flood when there is one).
//! - [`Peer::UdpBusyPoll`]: the same with the receiver spinning on a non-blocking socket: the
//!   receiving host's wake-up taken out, the network left as it is.
//! - [`Peer::PriorityOnly`]: the sender marks its socket as lane traffic (QJump's idea on this
//!   kernel: DSCP EF, which the testbed's filters put in the lane class at every egress, and
//!   `SO_PRIORITY` naming the lane class, which counts at the sender's own egress only; see
//!   [`kairos_io::lane_testbed`]); the receiver is the plain blocking one. No host does anything
//!   else: priority in the network without a schedule or admission.
//! - [`Peer::Sockperf`]: `sockperf ping-pong` against `sockperf server` at the same size and
//!   rate, a tool others know; its one-way latency is half a round trip ([`sockperf`]).
//!
//! The first three are no other program but what a user's own program does with plain sockets,
//! done by threads of this process ([`baseline`]); sockperf is started, driven and stopped as a
//! program of its own ([`sockperf`]). This module holds what both kinds share: the rows' names,
//! what a run sends ([`PeerSettings`], with its limits), the servers started before any load
//! ([`Servers`]) and what a run measured ([`PeerRun`]).

pub mod baseline;
pub mod sockperf;

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use kairos_io::lane_testbed::LaneTestbed;

use self::baseline::{Mark, Receive};
use crate::harness::InvalidConfig;

pub use kairos_peers::samples::{PeerRun, Sample};

/// A row of the experiment that is not the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Plain UDP, unmarked; the receiver blocks in `recvmsg`.
    UdpBlocking,
    /// Plain UDP, unmarked; the receiver spins on a non-blocking socket.
    UdpBusyPoll,
    /// The sender's socket marked as lane traffic; the receiver blocks.
    PriorityOnly,
    /// `sockperf ping-pong` against `sockperf server`; half the round trip.
    Sockperf,
}

impl Peer {
    /// Every peer, in the order the experiment shows them.
    pub const ALL: [Peer; 4] = [Peer::UdpBlocking, Peer::UdpBusyPoll, Peer::PriorityOnly, Peer::Sockperf];

    /// The row's name.
    pub fn name(self) -> &'static str {
        match self {
            Peer::UdpBlocking => "udp blocking",
            Peer::UdpBusyPoll => "udp busy-poll",
            Peer::PriorityOnly => "priority only",
            Peer::Sockperf => "sockperf",
        }
    }
}

/// What a peer's run sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSettings {
    /// The sending host.
    pub from: usize,
    /// The receiving host.
    pub to: usize,
    /// Between two messages, [`MIN_PERIOD`] to [`MAX_PERIOD`].
    pub period: Duration,
    /// Messages, 1 to [`MAX_PACKETS`].
    pub packets: u64,
    /// Each message's UDP payload, [`MIN_MESSAGE_BYTES`] to [`MAX_MESSAGE_BYTES`].
    pub message_bytes: usize,
}

/// The shortest period: below it the sender's wake-ups, not the network, set the spacing.
pub const MIN_PERIOD: Duration = Duration::from_micros(10);
/// The longest period.
pub const MAX_PERIOD: Duration = Duration::from_secs(1);
/// The most messages a run sends (the samples are kept in memory).
pub const MAX_PACKETS: u64 = 10_000_000;
/// The smallest message: the sequence number and the send stamp.
pub const MIN_MESSAGE_BYTES: usize = 16;
/// The largest message: one datagram in one Ethernet frame of the veths' MTU.
pub const MAX_MESSAGE_BYTES: usize = 1400;

impl PeerSettings {
    /// Checks every field against its limit; the error is one line naming the field.
    pub fn check(&self) -> Result<(), InvalidConfig> {
        if self.from == self.to {
            return Err(InvalidConfig::new(format!(
                "the sending and receiving hosts must differ, both are h{}",
                self.from
            )));
        }
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&self.period) {
            return Err(InvalidConfig::new(format!(
                "the period must be from 10 us to 1 s, got {:?}",
                self.period
            )));
        }
        if !(1..=MAX_PACKETS).contains(&self.packets) {
            return Err(InvalidConfig::new(format!(
                "packets must be from 1 to {MAX_PACKETS}, got {}",
                self.packets
            )));
        }
        if !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(&self.message_bytes) {
            return Err(InvalidConfig::new(format!(
                "the message size must be from {MIN_MESSAGE_BYTES} to {MAX_MESSAGE_BYTES} bytes, got {}",
                self.message_bytes
            )));
        }
        Ok(())
    }

    fn period_ns(&self) -> u64 {
        self.period.as_nanos() as u64
    }
}

/// The servers the peers' rows run against, started before any load and ended on drop: the
/// rows then measure the path under the load, not a server starting under it.
#[derive(Debug)]
pub struct Servers {
    sockperf: Option<sockperf::Server>,
}

impl Servers {
    /// Starts in host `to` the servers that `peers` need (`sockperf server` for
    /// [`Peer::Sockperf`]; the others are threads of each run).
    pub fn start(testbed: &LaneTestbed, peers: &[Peer], to: usize) -> Result<Self> {
        let sockperf =
            peers.contains(&Peer::Sockperf).then(|| sockperf::Server::start(testbed, to)).transpose()?;
        Ok(Self { sockperf })
    }
}

/// Runs `peer` once on `testbed` with `settings`, against `servers` (started for it): every
/// thread and client it started has ended when it returns, whatever it returns.
pub fn run(
    testbed: &LaneTestbed,
    peer: Peer,
    settings: &PeerSettings,
    servers: &mut Servers,
) -> Result<PeerRun> {
    settings.check().map_err(|e| anyhow!("{}: {e}", peer.name()))?;
    for host in [settings.from, settings.to] {
        testbed.host(host)?;
    }
    let result = match peer {
        Peer::UdpBlocking => baseline::run(testbed, settings, Mark::None, Receive::Blocking),
        Peer::UdpBusyPoll => baseline::run(testbed, settings, Mark::None, Receive::BusyPoll),
        Peer::PriorityOnly => baseline::run(testbed, settings, Mark::Lane, Receive::Blocking),
        Peer::Sockperf => match servers.sockperf.as_mut() {
            Some(server) => sockperf::run(testbed, settings, server),
            None => Err(anyhow!(
                "the sockperf row needs its server: start the servers with Peer::Sockperf among them"
            )),
        },
    };
    result.with_context(|| format!("the {} row, h{} to h{}", peer.name(), settings.from, settings.to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> PeerSettings {
        PeerSettings { from: 0, to: 1, period: Duration::from_micros(100), packets: 300, message_bytes: 64 }
    }

    #[test]
    fn the_names_are_the_rows_names() {
        let names: Vec<&str> = Peer::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names, ["udp blocking", "udp busy-poll", "priority only", "sockperf"]);
    }

    #[test]
    fn settings_are_checked_field_by_field_in_one_line() {
        assert_eq!(settings().check(), Ok(()));
        let with = |change: fn(&mut PeerSettings)| {
            let mut s = settings();
            change(&mut s);
            let error = s.check().unwrap_err().to_string();
            assert!(!error.contains('\n'), "{error}");
            error
        };
        assert!(with(|s| s.to = 0).contains("must differ, both are h0"));
        assert!(with(|s| s.period = Duration::from_micros(9)).contains("from 10 us to 1 s, got 9"));
        assert!(with(|s| s.period = Duration::from_millis(1001)).contains("from 10 us to 1 s"));
        assert!(with(|s| s.packets = 0).contains("packets must be from 1 to 10000000, got 0"));
        assert!(with(|s| s.packets = MAX_PACKETS + 1).contains("packets"));
        assert!(with(|s| s.message_bytes = 15).contains("from 16 to 1400 bytes, got 15"));
        assert!(with(|s| s.message_bytes = 1401).contains("got 1401"));
        for ok in [
            PeerSettings { period: MIN_PERIOD, packets: 1, message_bytes: 16, ..settings() },
            PeerSettings { period: MAX_PERIOD, packets: MAX_PACKETS, message_bytes: 1400, ..settings() },
        ] {
            assert_eq!(ok.check(), Ok(()), "{ok:?}");
        }
    }
}
