//! What travels between members: Raft's messages cut into datagrams (sealed under the cluster's
//! secret when there is one) or queued on the lane's tunnel, and the detector's heartbeats,
//! taken at their kernel receive stamps with the leader's commit index on them.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use kairos_sys::clock::{monotonic_ns, realtime_ns, realtime_offset, stamp_to_monotonic};

use super::{BEAT_BURST, Member, MemberStats, RAFT_BURST, RaftReceive, Seals};
use crate::replica::wire::{decode_message, encode_message};
use kairos_services::frame::{fragments, fragments_of};
use kairos_services::lane_link::Incoming;
use kairos_services::seal::Refusal;
use raft::eraftpb::MessageType;

/// A member's heartbeat as a replica sends it: the leader's term and the commit index the
/// receiver may take (0, 0 from a follower).
#[derive(Debug, Clone, Copy)]
struct ReplicaBeat {
    heartbeat: kairos_fd::wire::Heartbeat,
    term: u64,
    commit: u64,
}

/// The replica heartbeat in a detector datagram; other kinds are none of a member's business,
/// and bytes that do not decode are counted.
fn replica_beat(bytes: &[u8], stats: &mut MemberStats) -> Option<ReplicaBeat> {
    use kairos_fd::wire::{Datagram, decode};
    match decode(bytes) {
        Ok(Datagram::Replica { heartbeat, term, commit }) => Some(ReplicaBeat { heartbeat, term, commit }),
        Ok(_) => None,
        Err(_) => {
            stats.malformed += 1;
            None
        }
    }
}

impl Member {
    pub(super) fn receive_raft(&mut self) -> io::Result<()> {
        if self.lane.is_some() {
            return self.receive_lane();
        }
        // Out of `self` while its datagrams are handled, which borrows `self` whole.
        let Some(udp) = self.udp.take() else { return Ok(()) };
        let received = self.receive_udp(&udp);
        self.udp = Some(udp);
        received
    }

    fn receive_udp(&mut self, udp: &UdpSocket) -> io::Result<()> {
        // Out of `self` while its datagrams are handled, which borrows `self` whole.
        let Some(mut rx) = self.raft_rx.take() else { return Ok(()) };
        let taken = self.take_datagrams(udp, &mut rx);
        self.raft_rx = Some(rx);
        taken
    }

    fn take_datagrams(&mut self, udp: &UdpSocket, rx: &mut RaftReceive) -> io::Result<()> {
        loop {
            let mut refs = rx.buffers.each_mut().map(|b| &mut b[..]);
            let got = match rx.batch.recv_into(udp, &mut refs, false) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Nothing waiting, or an ICMP error from a peer that is down: not ours to act on.
                Err(_) => return Ok(()),
            };
            for i in 0..got {
                let n = rx.batch.lengths()[i];
                // A probe of this port (see `send_probe`): nothing to take.
                if n == 0 {
                    continue;
                }
                // UDP always names the sender; without its address no member's can be checked.
                let Some(source) = rx.batch.sources()[i] else {
                    self.stats.refused_address += 1;
                    continue;
                };
                self.datagram(&rx.buffers[i][..n], source)?;
            }
            if got < RAFT_BURST {
                return Ok(());
            }
        }
    }

    /// One datagram on Raft's socket: a heartbeat, or a fragment of a Raft message.
    fn datagram(&mut self, datagram: &[u8], source: SocketAddr) -> io::Result<()> {
        match self.unseal(datagram, Some(source)) {
            Some((sender, body)) if body.starts_with(&kairos_fd::wire::MAGIC) => {
                match replica_beat(body, &mut self.stats) {
                    Some(beat) if sender.is_none_or(|s| s == beat.heartbeat.member) => {
                        let now = monotonic_ns();
                        self.heard(beat, now, now)
                    }
                    Some(_) => {
                        self.stats.refused_address += 1;
                        Ok(())
                    }
                    None => Ok(()),
                }
            }
            Some((sender, body)) => {
                self.stats.datagrams_in += 1;
                self.fragment(body, sender)
            }
            None => Ok(()),
        }
    }

    /// The body of a datagram from another member and, when sealed, the member its seal
    /// names; `None` (counted) when the seal does not open or the datagram came from an
    /// address that is not that member's. Without a secret, every datagram as it came.
    fn unseal<'a>(
        &mut self,
        datagram: &'a [u8],
        source: Option<SocketAddr>,
    ) -> Option<(Option<u64>, &'a [u8])> {
        let Some(Seals { opener, .. }) = self.seal.as_mut() else { return Some((None, datagram)) };
        let peers = &self.config.peers;
        // The sender's address is checked with its id, before the seal's counter is taken: a
        // copy sent from elsewhere must not use up the counter of the real one.
        let member = |id: u64| {
            id != self.config.id && peers.get(&id).is_some_and(|p| source.is_none() || p.udp() == source)
        };
        match opener.open(datagram, member) {
            Ok((id, body)) => Some((Some(id), body)),
            Err(refusal) => {
                let count = match refusal {
                    Refusal::Stranger(_) => &mut self.stats.refused_strangers,
                    Refusal::Forged | Refusal::Short => &mut self.stats.refused_forged,
                    Refusal::Replayed => &mut self.stats.refused_replayed,
                };
                *count += 1;
                None
            }
        }
    }

    /// One fragment of a Raft message, from the member `sealed_by` when its seal named one; a
    /// message it completes is stepped.
    fn fragment(&mut self, bytes: &[u8], sealed_by: Option<u64>) -> io::Result<()> {
        // Sealed by one member, a fragment that says it is another's is kept by no one: the
        // reassembler holds messages only of the members that sealed them.
        if sealed_by.is_some_and(|s| kairos_services::frame::sender(bytes) != Some(s)) {
            self.stats.refused_address += 1;
            return Ok(());
        }
        let now = monotonic_ns();
        match self.reassembler.push(bytes) {
            Ok(Some((from, _))) if self.faults.drops(from, now) => {}
            Ok(Some((_, bytes))) => match decode_message(&bytes) {
                Ok(msg) => {
                    // Any word from a member is a heartbeat: its loop ran to send it.
                    if let Some(watch) = self.watch.as_mut() {
                        watch.heard_from(msg.from, now, now);
                    }
                    // A vote asked: the leader is judged first, on the heartbeats as they are now
                    // (a backup watcher has not looked since its last wake-up), so a member that
                    // no longer hears it grants the vote at once.
                    if matches!(
                        msg.get_msg_type(),
                        MessageType::MsgRequestPreVote | MessageType::MsgRequestVote
                    ) && self.watch.as_ref().is_some_and(|w| w.watches_anyone() && w.deadline_passed(now))
                    {
                        self.receive_beats(now)?;
                        self.judge(now);
                    }
                    // Still trusted: its port is asked, so that a leader whose process is gone
                    // is suspected before the candidate asks again.
                    if matches!(
                        msg.get_msg_type(),
                        MessageType::MsgRequestPreVote | MessageType::MsgRequestVote
                    ) && let Some(leader) = self.watch.as_mut().and_then(|w| w.probe_now(now))
                    {
                        self.send_probe(leader, now);
                    }
                    self.replica.step(msg);
                }
                Err(_) => self.stats.malformed += 1,
            },
            Ok(None) => {}
            Err(_) => self.stats.malformed += 1,
        }
        Ok(())
    }

    /// Everything the lane node delivered: fragments stepped, heartbeats at their packets'
    /// kernel receive stamps.
    fn receive_lane(&mut self) -> io::Result<()> {
        let Some(mut lane) = self.lane.take() else { return Ok(()) };
        let (_, offset) = realtime_offset();
        let mut result = Ok(());
        let me = self.config.id;
        let received = lane.receive(me, |incoming| {
            if result.is_err() {
                return;
            }
            result = match incoming {
                Incoming::Message(bytes) => {
                    self.stats.datagrams_in += 1;
                    self.fragment(bytes, None)
                }
                Incoming::Beat(bytes, stamp) => match replica_beat(bytes, &mut self.stats) {
                    // Read now: the node delivers while the inbox is read (and fragments are
                    // stepped between beats), so a time read before could precede the stamp.
                    Some(beat) => {
                        let now = monotonic_ns();
                        self.heard(beat, stamp_to_monotonic(stamp, offset, now), now)
                    }
                    None => Ok(()),
                },
            };
        });
        self.lane = Some(lane);
        received.map_err(io::Error::other)?;
        result
    }

    /// Every heartbeat waiting on the detector's own socket, each at its kernel receive stamp,
    /// handled at `now` (or at the stamp, for one that arrived after `now`).
    pub(super) fn receive_beats(&mut self, now: u64) -> io::Result<()> {
        // Out of `self` while its heartbeats are handled, which borrows `self` whole.
        let Some(beats) = self.beats.take() else { return Ok(()) };
        let taken = self.take_beats(&beats, now);
        self.beats = Some(beats);
        taken
    }

    fn take_beats(&mut self, beats: &UdpSocket, now: u64) -> io::Result<()> {
        // The stamps are CLOCK_REALTIME.
        let (_, offset) = realtime_offset();
        loop {
            let mut refs = self.beat_buffers.each_mut().map(|b| &mut b[..]);
            let got = match self.beat_batch.recv_into(beats, &mut refs, true) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Nothing waiting, or an ICMP error from a peer that is down: not ours to act on.
                Err(_) => return Ok(()),
            };
            // A heartbeat that arrived after `now` (during this read) keeps its own time: set
            // back to `now`, its sender's silence would seem longer by the difference.
            let read = monotonic_ns();
            for i in 0..got {
                let len = self.beat_batch.lengths()[i];
                let at = self.beat_batch.rx_timestamps_ns()[i]
                    .map_or(read, |s| stamp_to_monotonic(s, offset, read));
                let buffer = self.beat_buffers[i];
                let source = self.beat_batch.sources()[i];
                let Some((sender, body)) = self.unseal(&buffer[..len], source) else { continue };
                match replica_beat(body, &mut self.stats) {
                    Some(beat) if sender.is_none_or(|s| s == beat.heartbeat.member) => {
                        self.heard(beat, at, now.max(at))?
                    }
                    Some(_) => self.stats.refused_address += 1,
                    None => {}
                }
            }
            if got < BEAT_BURST {
                return Ok(());
            }
        }
    }

    /// A member's heartbeat, received at `at` and handled at `now` (monotonic ns).
    fn heard(&mut self, beat: ReplicaBeat, at: u64, now: u64) -> io::Result<()> {
        let Some(watch) = self.watch.as_mut() else { return Ok(()) };
        let ReplicaBeat { heartbeat, term, commit } = beat;
        if self.faults.drops(heartbeat.member, now) {
            return Ok(());
        }
        watch.heard(&heartbeat, at, now);
        if term != 0 {
            self.replica.leader_commit(heartbeat.member, term, commit);
        }
        Ok(())
    }

    /// Sends the replica's messages: datagrams on UDP, fragments queued on the lane.
    pub(super) fn send_raft(&mut self) {
        let messages = self.replica.take_messages();
        if messages.is_empty() {
            return;
        }
        let now = monotonic_ns();
        // One wall-clock read for the lane's hand-over stamps.
        let wall = if self.lane.is_some() { realtime_ns() } else { 0 };
        for msg in messages {
            let Some(addr) = self.config.peers.get(&msg.to) else { continue };
            if self.faults.drops(msg.to, now) {
                continue;
            }
            if let Some(watch) = self.watch.as_mut() {
                watch.sent_to(msg.to, now);
            }
            self.raft_out.clear();
            encode_message(&msg, &mut self.raft_out);
            self.message_number += 1;
            if let Some(lane) = self.lane.as_mut() {
                let Some(parts) =
                    fragments_of(self.config.id, self.message_number, &self.raft_out, lane.fragment_bytes())
                else {
                    lane.note_too_large();
                    continue;
                };
                for fragment in parts {
                    lane.queue_message(self.message_number, msg.to, &fragment, wall);
                    self.stats.datagrams_out += 1;
                }
                continue;
            }
            let (Some(udp), Some(addr)) = (self.udp.as_ref(), addr.udp()) else { continue };
            for mut datagram in
                fragments(self.config.id, self.message_number, &self.raft_out).unwrap_or_default()
            {
                if let Some(seals) = self.seal.as_mut() {
                    seals.messages.seal(&mut datagram);
                }
                // A full socket buffer or a peer that is down loses the message; Raft resends.
                if udp.send_to(&datagram, addr).is_ok() {
                    self.stats.datagrams_out += 1;
                }
            }
        }
    }
}
