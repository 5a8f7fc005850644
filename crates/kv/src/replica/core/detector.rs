//! The failure detector's side of a replica: a suspicion of the leader that ends its lease and
//! may start an election, the leader's commit index carried on the detector's heartbeats (and
//! on a word of its own to a follower whose write it applied), their answers never sent.

use raft::eraftpb::Message;

use super::Replica;
use crate::replica::storage::Disk;

/// The context of a heartbeat made from the failure detector's (see
/// [`Replica::leader_commit`]), so that its answer is known and not sent.
pub(super) const PIGGYBACK_CONTEXT: &[u8] = b"fd";

impl<D: Disk> Replica<D> {
    /// The failure detector suspects `leader`. This member stops honouring its lease at once
    /// (with check-quorum, a follower ignores votes while it believes a leader alive, so
    /// without this a candidate would wait for every follower's own timeout), and, when
    /// `campaign`, stands for election now rather than after Raft's timeout (which stays as
    /// the backstop). With pre-vote, a false suspicion disrupts nothing: the members still
    /// hearing the leader refuse the pre-vote, and the leader's next message makes this member
    /// its follower again. Does nothing unless `leader` is the leader this member follows, or
    /// it has none (a campaign that has not won yet).
    pub fn leader_suspected(&mut self, leader: u64, campaign: bool) {
        let known = self.leader();
        if leader == 0 || leader == self.config.id || self.is_leader() || (known != 0 && known != leader) {
            return;
        }
        let raft = &mut self.node.raft;
        raft.election_elapsed = raft.election_elapsed.max(raft.election_timeout());
        if campaign {
            let _ = self.node.campaign();
        }
    }

    /// What the leader puts on its failure-detector heartbeat to `peer`: its term and the
    /// commit index `peer` may take, the leader's capped by what `peer` is known to hold (as
    /// Raft's own heartbeat does, so the follower never commits an index it lacks). `None` on
    /// a member that is not the leader, or for a peer it does not replicate to.
    pub fn commit_for(&self, peer: u64) -> Option<(u64, u64)> {
        if !self.is_leader() || peer == self.config.id {
            return None;
        }
        let raft = &self.node.raft;
        let matched = raft.prs().get(peer)?.matched;
        Some((raft.term, matched.min(raft.raft_log.committed)))
    }

    /// The term and commit index a failure-detector heartbeat from `from` carried (see
    /// [`Replica::commit_for`]): taken as Raft's own heartbeat from the leader of that term
    /// (the commit index advances, the election clock restarts), and its answer not sent:
    /// the detector's heartbeats already say the follower is alive, and the leader learns what
    /// the follower holds from its append answers. Ignored unless it is of this member's term
    /// and names an index this member holds (bytes from the network never reach `raft`'s
    /// out-of-range check).
    pub fn leader_commit(&mut self, from: u64, term: u64, commit: u64) {
        let raft = &self.node.raft;
        if from == self.config.id
            || term != raft.term
            || raft.state == raft::StateRole::Leader
            || commit > raft.raft_log.last_index()
        {
            return;
        }
        let mut msg = Message::default();
        msg.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
        msg.from = from;
        msg.to = self.config.id;
        msg.term = term;
        msg.commit = commit;
        msg.context = PIGGYBACK_CONTEXT.to_vec().into();
        let _ = self.node.step(msg);
    }

    /// The leader's word to each follower whose write it applied: a heartbeat of Raft's
    /// carrying the commit index that follower may take (capped by what it holds, as Raft's
    /// own), marked as the detector's so its answer is not sent, once the follower is known to
    /// hold the write's entry (a quorum without it may have committed it: the word then waits
    /// for its acknowledgement, [`Replica::step`]). Without it a follower whose leader does not
    /// broadcast commits would answer its client only at the next append or heartbeat.
    pub(super) fn notify_commits(&mut self) {
        if self.commit_notices.is_empty() {
            return;
        }
        if !self.config.commit_by_heartbeats || !self.is_leader() {
            self.commit_notices.clear();
            return;
        }
        let ready: Vec<(u64, u64, u64)> = self
            .commit_notices
            .iter()
            .filter_map(|(&to, &index)| {
                let (term, commit) = self.commit_for(to)?;
                (commit >= index).then_some((to, term, commit))
            })
            .collect();
        for (to, term, commit) in ready {
            self.commit_notices.remove(&to);
            let mut msg = Message::default();
            msg.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
            msg.from = self.config.id;
            msg.to = to;
            msg.term = term;
            msg.commit = commit;
            msg.context = PIGGYBACK_CONTEXT.to_vec().into();
            self.outbox.push(msg);
        }
    }
}
