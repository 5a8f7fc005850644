//! Changes of membership at a member: `KAIROS.MEMBER` proposes them (on the lane once the tunnel
//! reaches the newcomer's host), its client is answered when the change applies here or after
//! 5 s, a change lost on the way is proposed again, and the members' addresses are kept on disk.

use std::collections::BTreeMap;
use std::io;

use kairos_sys::clock::monotonic_ns;

use super::{Member, PeerAddr};
use crate::kv::Reply;
use kairos_services::lane_link;

/// A membership change proposed at this member, waiting to be applied here.
#[derive(Debug, Clone)]
pub(super) struct MembershipWait {
    change: raft::eraftpb::ConfChangeType,
    node: u64,
    context: Vec<u8>,
    client: u64,
    seq: u64,
    /// When the client hears it did not happen (monotonic ns).
    deadline_ns: u64,
    /// When it was last proposed (monotonic ns).
    proposed_ns: u64,
}

/// How long a proposed membership change may be missing from this member's log before it is
/// taken as lost (or emptied by a busy leader) and proposed again.
const MEMBERSHIP_RETRY_NS: u64 = 300_000_000;

/// The file of members' addresses as this member last knew them (`id=addr` lines).
pub(super) const PEERS_FILE: &str = "peers";
/// How long a membership change may take before its client hears it did not happen.
const MEMBERSHIP_TIMEOUT_NS: u64 = 5_000_000_000;

/// A membership change refused for now ([`crate::replica::Replica::membership_busy`]).
const BUSY: &str = "ERR membership change refused: proposal dropped (no leader now, or the leader has an earlier change, or its first entry of the term, unapplied): try again shortly";

pub(super) fn load_peers(path: &std::path::Path) -> Option<BTreeMap<u64, PeerAddr>> {
    let text = std::fs::read_to_string(path).ok()?;
    let peers: BTreeMap<u64, PeerAddr> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(id, addr)| Some((id.trim().parse().ok()?, addr.trim().parse().ok()?)))
        .collect();
    (!peers.is_empty()).then_some(peers)
}

fn save_peers(path: &std::path::Path, peers: &BTreeMap<u64, PeerAddr>) -> io::Result<()> {
    let text: String = peers.iter().map(|(id, addr)| format!("{id}={addr}\n")).collect();
    let fresh = path.with_extension("new");
    std::fs::write(&fresh, text)?;
    std::fs::rename(fresh, path)
}

impl Member {
    /// `KAIROS.MEMBER LIST | ADD id host:port [LEARNER] | REMOVE id`: the membership, and
    /// changes to it (answered once applied here, or with an error after 5 s). Returns the
    /// answer to give now, if any.
    pub(super) fn member_command(&mut self, client: u64, args: &[Vec<u8>]) -> Option<Reply> {
        use raft::eraftpb::ConfChangeType;
        let usage = || {
            Reply::Error(
                "ERR usage: KAIROS.MEMBER LIST | ADD id host:port|lane-host [LEARNER] | REMOVE id".into(),
            )
        };
        let word = |i: usize| args.get(i).map(|a| String::from_utf8_lossy(a).to_ascii_lowercase());
        let (change, node, context) = match (word(0).as_deref(), args.len()) {
            (Some("list"), 1) => {
                let voters = self.replica.voters();
                let learners = self.replica.learners();
                let mut ids: Vec<u64> = voters.iter().chain(&learners).copied().collect();
                ids.sort_unstable();
                ids.dedup();
                let rows = ids
                    .iter()
                    .map(|id| {
                        let addr = self.config.peers.get(id).map_or("?".to_string(), |a| a.to_string());
                        let role = if voters.contains(id) { "voter" } else { "learner" };
                        let leader = if *id == self.replica.leader() { " leader" } else { "" };
                        Reply::Bulk(format!("{id} {addr} {role}{leader}").into_bytes())
                    })
                    .collect();
                return Some(Reply::Array(rows));
            }
            (Some("add"), 3 | 4) => {
                let id = word(1).and_then(|w| w.parse::<u64>().ok()).filter(|&i| i > 0);
                // Not lower-cased: a lane host's name is the topology's, as written.
                let addr = std::str::from_utf8(&args[2]).ok().and_then(|w| w.parse::<PeerAddr>().ok());
                let learner = match word(3).as_deref() {
                    None => false,
                    Some("learner") => true,
                    Some(_) => return Some(usage()),
                };
                let (Some(id), Some(addr)) = (id, addr) else { return Some(usage()) };
                // Before `can_add`, which gives the lane's tunnel the new host: not for a
                // change that would be refused.
                if self.replica.membership_busy() {
                    return Some(Reply::Error(BUSY.to_string()));
                }
                if let Err(e) = self.can_add(id, &addr) {
                    return Some(Reply::Error(format!("ERR {e}")));
                }
                // As it parses back: `lane:h3` or HOST:PORT.
                let change = if learner { ConfChangeType::AddLearnerNode } else { ConfChangeType::AddNode };
                (change, id, addr.to_string().into_bytes())
            }
            (Some("remove"), 2) => {
                let Some(id) = word(1).and_then(|w| w.parse::<u64>().ok()).filter(|&i| i > 0) else {
                    return Some(usage());
                };
                (ConfChangeType::RemoveNode, id, Vec::new())
            }
            _ => return Some(usage()),
        };
        match self.replica.propose_membership(change, node, context.clone()) {
            Ok(()) => {
                let conn = self.conns.get_mut(&client)?;
                let seq = conn.await_answer();
                let now = monotonic_ns();
                self.membership_waiting.push(MembershipWait {
                    change,
                    node,
                    context,
                    client,
                    seq,
                    deadline_ns: now + MEMBERSHIP_TIMEOUT_NS,
                    proposed_ns: now,
                });
                None
            }
            Err(raft::Error::ProposalDropped) => Some(Reply::Error(BUSY.to_string())),
            Err(e) => Some(Reply::Error(format!("ERR membership change refused: {e}"))),
        }
    }

    /// Whether member `id` at `addr` can join: an address of the cluster's kind, and on the
    /// lane a host the lane has (this member's tunnel is given it now, which the node refuses
    /// for a host not in the lane's topology), no host shared, and room in a packet for the
    /// heartbeats.
    fn can_add(&mut self, id: u64, addr: &PeerAddr) -> Result<(), JoinRefusal> {
        let Some(lane) = self.lane.as_mut() else {
            return match addr {
                PeerAddr::Udp(_) => Ok(()),
                PeerAddr::Lane(h) => Err(JoinRefusal::LaneHostOffLane(h.to_string())),
            };
        };
        let PeerAddr::Lane(_) = addr else {
            return Err(JoinRefusal::NotLaneHost(addr.clone()));
        };
        let mut peers = self.config.peers.clone();
        peers.insert(id, addr.clone());
        let hosts = lane_link::other_hosts(self.config.id, &peers)?;
        if !lane.carries(peers.len()) {
            return Err(JoinRefusal::PacketTooSmall(peers.len()));
        }
        if lane.changing_receivers() {
            return Err(JoinRefusal::Changing);
        }
        lane.try_receivers(hosts)
            .map_err(|e| JoinRefusal::LaneRefused { addr: addr.clone(), reason: e.to_string() })
    }

    pub(super) fn membership_applied(&mut self) -> io::Result<()> {
        use raft::eraftpb::ConfChangeType;
        let events = self.replica.take_membership_events();
        for event in &events {
            match event.change {
                ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                    if let Some(addr) =
                        std::str::from_utf8(&event.context).ok().and_then(|a| a.parse::<PeerAddr>().ok())
                    {
                        self.config.peers.insert(event.node, addr);
                    }
                }
                ConfChangeType::RemoveNode if event.node != self.config.id => {
                    self.config.peers.remove(&event.node);
                }
                ConfChangeType::RemoveNode => {}
            }
            let (done, rest): (Vec<_>, Vec<_>) = self
                .membership_waiting
                .drain(..)
                .partition(|w| w.node == event.node && w.change == event.change);
            self.membership_waiting = rest;
            for w in done {
                if let Some(conn) = self.conns.get_mut(&w.client) {
                    conn.complete(w.seq, &Reply::Ok);
                }
            }
        }
        if !events.is_empty() {
            save_peers(&self.config.data_dir.join(PEERS_FILE), &self.config.peers)?;
            if let Some(watch) = self.watch.as_mut() {
                watch.set_peers(self.config.peers.keys().copied(), monotonic_ns());
            }
            // The tunnel to the members' hosts as they are now.
            if let Some(lane) = self.lane.as_mut()
                && let Ok(hosts) = lane_link::other_hosts(self.config.id, &self.config.peers)
            {
                // A refusal is counted and asked again; the old tunnel goes on meanwhile.
                lane.set_receivers(hosts);
            }
        }
        if self.membership_waiting.is_empty() {
            return Ok(());
        }
        let now = monotonic_ns();
        // A change missing from the log a while after it was proposed was lost or emptied on
        // the way: proposed again (when the leader would take it), so the client hears of it
        // when it is applied rather than never.
        for w in &mut self.membership_waiting {
            if now >= w.proposed_ns + MEMBERSHIP_RETRY_NS
                && !self.replica.membership_busy()
                && !self.replica.membership_change_in_log(w.node)
                && self.replica.propose_membership(w.change, w.node, w.context.clone()).is_ok()
            {
                w.proposed_ns = now;
            }
        }
        let (late, rest): (Vec<_>, Vec<_>) =
            self.membership_waiting.drain(..).partition(|w| w.deadline_ns <= now);
        self.membership_waiting = rest;
        for w in late {
            if let Some(conn) = self.conns.get_mut(&w.client) {
                let error = format!(
                    "ERR the change of member {} was not applied within 5 s (no leader all that time, or changes ahead of it that did not apply): check KAIROS.MEMBER LIST and try again",
                    w.node
                );
                conn.complete(w.seq, &Reply::Error(error));
            }
        }
        Ok(())
    }
}

/// Why a new member cannot join: the text after `ERR` in the reply to `KAIROS.MEMBER ADD`.
#[derive(Debug, thiserror::Error)]
enum JoinRefusal {
    /// A lane host named for a cluster on UDP.
    #[error("{0} is a lane host, but this cluster is not on the lane: give HOST:PORT")]
    LaneHostOffLane(String),
    /// A UDP address named for a cluster on the lane.
    #[error("this cluster is on the lane: give the new member's lane host (h3), not {0}")]
    NotLaneHost(PeerAddr),
    /// The members with the newcomer do not make a lane cluster (a host shared).
    #[error(transparent)]
    LaneCluster(#[from] lane_link::LaneClusterError),
    /// The tunnel's packet cannot carry a fragment beside the heartbeats of this many members.
    #[error(
        "the lane tunnel's packet holds no fragment beside heartbeats for {0} members: start the members with a larger --lane-packet-bytes"
    )]
    PacketTooSmall(usize),
    /// The tunnels are still following the last change.
    #[error(
        "the last change of membership is still being applied to the lane's tunnels: try again in a second"
    )]
    Changing,
    /// The lane's node refused the tunnel to the newcomer's host.
    #[error("the lane refused a tunnel to {addr}: {reason}")]
    LaneRefused {
        /// The newcomer's address.
        addr: PeerAddr,
        /// The node's answer.
        reason: String,
    },
}
