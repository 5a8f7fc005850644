//! The failure detector's part of the loop: heartbeat rounds, the verdict on the leader and what
//! a suspicion asks of the replica, and probes of the leader's port, whose refusal gets it
//! suspected before its silence would.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use kairos_sys::clock::realtime_ns;

use super::watch::Act;
use super::{Member, PeerAddr, Seals};

impl Member {
    /// Sends a probe to `leader`'s Raft address on a socket connected to it (made when the
    /// leader changes): an empty datagram, which a live member drops unread (only the answer
    /// matters). If no process holds the port, the host answers
    /// with ICMP port unreachable, which the connected socket reports as an error
    /// ([`Member::take_probe_answer`]). Not on the lane, where no such answer comes.
    pub(super) fn send_probe(&mut self, leader: u64, now: u64) {
        if self.lane.is_some() || self.faults.drops(leader, now) {
            return;
        }
        let Some(addr) = self.config.peers.get(&leader).and_then(PeerAddr::udp) else { return };
        if self.probe.as_ref().is_none_or(|(to, _)| *to != leader) {
            self.probe = None;
            // This member's address from its settings: its Raft socket is out of `self` while
            // a datagram (a vote asked) is handled.
            let Some(own) = self.config.peers.get(&self.config.id).and_then(PeerAddr::udp) else { return };
            let made = UdpSocket::bind(SocketAddr::new(own.ip(), 0)).and_then(|socket| {
                socket.set_nonblocking(true)?;
                socket.connect(addr)?;
                Ok(socket)
            });
            let Ok(socket) = made else { return };
            // Closed, the last probe's socket left the poller by itself.
            if self.poller.add(&socket).is_err() {
                return;
            }
            self.probe = Some((leader, socket));
        }
        // Empty: only the answer matters (an ICMP error when the port is closed), and a member
        // takes nothing from an unsealed datagram anyway.
        let Some((_, socket)) = self.probe.as_ref() else { return };
        let _ = socket.send(&[]);
    }

    /// What the probe socket holds: an error of a refused probe makes its member suspected.
    pub(super) fn take_probe_answer(&mut self, now: u64) {
        let Some((peer, socket)) = self.probe.as_ref() else { return };
        let mut refused = false;
        let mut buf = [0u8; 64];
        loop {
            match socket.recv(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => refused = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Nothing answers a probe with a datagram; anything else ends the look.
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if refused && let Some(watch) = self.watch.as_mut() {
            watch.refused(*peer, now);
        }
    }

    /// The detector's part of a pass: the liveness counter, heartbeats when due, and what a
    /// suspicion of the leader asks of the replica.
    pub(super) fn watch_pass(&mut self, now: u64) -> io::Result<()> {
        let Some(watch) = self.watch.as_mut() else { return Ok(()) };
        watch.bump();
        let replica = &self.replica;
        watch.follow(replica.leader(), now, || replica.voters());
        let (udp, lane, peers, faults) = (&self.udp, &mut self.lane, &self.config.peers, &mut self.faults);
        let (seal, sealed) = (&mut self.seal, &mut self.raft_out);
        // One wall-clock read a round that sends, for the lane's hand-over stamps.
        let mut wall = None;
        watch.send_due(
            now,
            peers.keys().copied(),
            |peer| replica.commit_for(peer),
            &mut self.heartbeat,
            |peer, bytes| {
                if faults.drops(peer, now) {
                    return;
                }
                // A full buffer or a peer that is down loses one heartbeat; the next follows.
                match (udp, lane.as_mut(), peers[&peer].udp()) {
                    (Some(udp), _, Some(addr)) => match seal.as_mut() {
                        Some(Seals { heartbeats: sealer, .. }) => {
                            sealed.clear();
                            sealed.extend_from_slice(bytes);
                            sealer.seal(sealed);
                            let _ = udp.send_to(sealed, addr);
                        }
                        None => {
                            let _ = udp.send_to(bytes, addr);
                        }
                    },
                    (_, Some(lane), _) => lane.send_beat(peer, bytes, *wall.get_or_insert_with(realtime_ns)),
                    _ => {}
                }
            },
        );
        if let Some(leader) = self.watch.as_mut().and_then(|w| w.probe_due(now)) {
            self.send_probe(leader, now);
        }
        self.judge(now);
        Ok(())
    }

    /// The detector's verdict at `now` on the leader, and what a suspicion asks of the replica.
    pub(super) fn judge(&mut self, now: u64) {
        let Some(watch) = self.watch.as_mut() else { return };
        watch.observe_term(self.replica.term());
        let replica = &self.replica;
        if let Some(Act::Suspect { leader, campaign }) =
            watch.poll(now, replica.leader(), || replica.voters())
        {
            self.replica.leader_suspected(leader, campaign);
        }
    }
}
