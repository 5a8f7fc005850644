//! Changes of a replica's membership: proposed one at a time (refused at once when `raft` would
//! empty one silently), looked for in the log to tell a lost proposal from a pending one, and
//! reported once applied.

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, EntryType};

use super::{MembershipEvent, Replica};
use crate::replica::storage::Disk;

impl<D: Disk> Replica<D> {
    /// Whether a membership change proposed now would be refused: no leader, or this member
    /// leads with an earlier change (or its first entry of the term) unapplied, which `raft`
    /// would turn into an empty entry silently. (A follower cannot know the leader's: its
    /// proposal goes there.)
    pub fn membership_busy(&self) -> bool {
        self.leader() == 0 || (self.is_leader() && self.node.raft.has_pending_conf())
    }

    /// Proposes a membership change (add a voter, a learner, or remove a member), with
    /// `context` for every member when it applies (the node's address). It takes effect when
    /// committed; a follower's proposal goes to the leader; one change at a time: refused
    /// while [`Self::membership_busy`].
    pub fn propose_membership(
        &mut self,
        change: raft::eraftpb::ConfChangeType,
        node: u64,
        context: Vec<u8>,
    ) -> Result<(), raft::Error> {
        // Refused here rather than emptied by `raft`, so the client hears it at once instead of
        // waiting for a change that will not come.
        if self.membership_busy() {
            return Err(raft::Error::ProposalDropped);
        }
        let mut cc = ConfChange::default();
        cc.set_change_type(change);
        cc.node_id = node;
        cc.context = context.into();
        self.node.propose_conf_change(Vec::new(), cc)
    }

    /// Whether this member's log holds, not yet applied, a change of member `node`'s
    /// membership: a change proposed and not in it was lost or emptied on the way (a leader
    /// busy with an earlier change turns a forwarded one into an empty entry, silently), and
    /// may be proposed again without landing twice.
    pub fn membership_change_in_log(&self, node: u64) -> bool {
        let log = &self.node.raft.raft_log;
        let Ok(entries) = log.entries(self.applied + 1, None, raft::GetEntriesContext::empty(false)) else {
            return false;
        };
        entries.iter().any(|e| {
            e.get_entry_type() == EntryType::EntryConfChange
                && ConfChange::parse_from_bytes(&e.data).is_ok_and(|cc| cc.node_id == node)
        })
    }

    /// Membership changes applied since the last call, in log order.
    pub fn take_membership_events(&mut self) -> Vec<MembershipEvent> {
        std::mem::take(&mut self.membership_events)
    }
}
