//! The client requests in flight at a replica: the waiting writes proposed as one entry (held
//! while one of this member's is in flight: adaptive batching), the reads as one read index
//! round or under the leader's lease, and both tried again when dropped or the leader changes.

use raft::StateRole;

use super::{Broken, ReadRound, Replica, Ticket};
use crate::kv::{Batch, Reply, Request};
use crate::replica::storage::Disk;

impl<D: Disk> Replica<D> {
    /// Whether this member leads under a lease that runs now: a quorum heard it recently
    /// enough that no other member can have been elected, and it committed an entry of its
    /// term (so its commit index holds every write acknowledged by any leader before it).
    fn lease_holds(&self) -> bool {
        let Some(lease) = self.config.lease_ns else { return false };
        let raft = &self.node.raft;
        raft.state == StateRole::Leader
            && self.lease_from_ns.is_some_and(|from| self.clock_ns < from + lease)
            && raft.raft_log.term(raft.raft_log.committed).is_ok_and(|t| t == raft.term)
    }

    pub(super) fn propose_waiting(&mut self) {
        let retry_before = self.ticks.saturating_sub(self.config.retry_ticks);
        let mut stale: Vec<Ticket> = Vec::new();
        for (ticket, f) in &mut self.in_flight {
            if f.proposed_tick.is_some_and(|t| t <= retry_before) {
                f.proposed_tick = None;
                stale.push(*ticket);
            }
        }
        let retrying = !stale.is_empty();
        if retrying {
            self.stats.proposal_retries += stale.len() as u64;
            self.waiting_writes.extend(stale);
            self.order_waiting_writes();
        }
        if self.waiting_writes.is_empty() || self.leader() == 0 {
            return;
        }
        // Adaptive batching: while an entry of this member's is in flight, the writes since
        // wait for it (a retry above goes at once: what it waits for was lost).
        if self.config.hold_while_in_flight
            && !retrying
            && self.in_flight.values().any(|f| f.proposed_tick.is_some())
        {
            return;
        }
        let tickets = std::mem::take(&mut self.waiting_writes);
        let requests: Vec<&Request> =
            tickets.iter().filter_map(|t| self.in_flight.get(t).map(|f| &f.request)).collect();
        if requests.is_empty() {
            return;
        }
        let data = Batch::encode_requests(self.now_ms, requests.into_iter());
        match self.node.propose(Vec::new(), data) {
            Ok(()) => {
                self.stats.proposals += 1;
                if self.config.lease_ns.is_some() && self.is_leader() {
                    self.proposed_at.push_back((self.node.raft.raft_log.last_index(), self.clock_ns));
                }
                for t in &tickets {
                    if let Some(f) = self.in_flight.get_mut(t) {
                        f.proposed_tick = Some(self.ticks);
                        if self.config.broken == Some(Broken::AckBeforeCommit) && f.request.op.is_set() {
                            self.completions.push((*t, Reply::Ok));
                        }
                    }
                }
                if self.config.broken == Some(Broken::AckBeforeCommit) {
                    self.in_flight.retain(|_, f| !f.request.op.is_set() || f.proposed_tick.is_none());
                }
            }
            // No leader after all, or too much uncommitted: try again next tick.
            Err(_) => self.waiting_writes = tickets,
        }
    }

    /// Puts the waiting writes in the order they were submitted: a write proposed again
    /// keeps its place before those that came after it, as on a server that reads its
    /// clients in turn (Redis's tests count on a client that blocked first being served
    /// first).
    fn order_waiting_writes(&mut self) {
        let in_flight = &self.in_flight;
        self.waiting_writes.sort_by_key(|t| in_flight.get(t).map_or(0, |f| f.submitted));
    }

    pub(super) fn ask_read_index(&mut self) {
        let retry_before = self.ticks.saturating_sub(self.config.retry_ticks);
        let mut again = Vec::new();
        for (id, round) in &mut self.read_rounds {
            if round.index.is_none() && round.asked_tick <= retry_before {
                round.asked_tick = self.ticks;
                again.push(*id);
            }
        }
        again.sort_unstable();
        for id in again {
            self.stats.read_retries += 1;
            self.node.read_index(id.to_le_bytes().to_vec());
        }
        if self.waiting_reads.is_empty() || self.leader() == 0 {
            return;
        }
        let id = self.next_read_round;
        self.next_read_round += 1;
        let reads = std::mem::take(&mut self.waiting_reads);
        if self.lease_holds() {
            // The commit index is the read index: answered once applied (it usually is).
            self.stats.lease_reads += reads.len() as u64;
            let index = Some(self.node.raft.raft_log.committed);
            let round = ReadRound {
                reads,
                asked_tick: self.ticks,
                asked_ns: self.clock_ns,
                asked_leading: None,
                index,
            };
            self.read_rounds.insert(id, round);
            self.serve_reads();
            return;
        }
        let asked_leading = self.is_leader().then_some(self.term());
        let round =
            ReadRound { reads, asked_tick: self.ticks, asked_ns: self.clock_ns, asked_leading, index: None };
        self.read_rounds.insert(id, round);
        self.stats.read_rounds += 1;
        self.node.read_index(id.to_le_bytes().to_vec());
    }

    /// A leader whose proposal a quorum acknowledged (it is committed) was heard by that
    /// quorum at or after the proposal: its lease runs from then.
    pub(super) fn renew_lease(&mut self) {
        let committed = self.node.raft.raft_log.committed;
        while let Some(&(index, at)) = self.proposed_at.front() {
            if index > committed {
                break;
            }
            self.proposed_at.pop_front();
            if self.node.raft.state == StateRole::Leader {
                self.lease_from_ns = self.lease_from_ns.max(Some(at));
            }
        }
    }

    /// A new leader (after one lost, or a first one): the proposals and read indexes in flight
    /// went to a leader that may have dropped them, so they go to the new one now rather than
    /// after [`ReplicaConfig::retry_ticks`](super::ReplicaConfig::retry_ticks); the store's
    /// sessions apply a write proposed twice once.
    pub(super) fn follow_leader_change(&mut self) {
        let leader = self.leader();
        let term = self.term();
        if (leader, term) == self.leader_seen {
            return;
        }
        self.leader_seen = (leader, term);
        // Appends held back go now: a new term's leader holds none of the old one's.
        if let Some(thrift) = self.thrift.as_mut() {
            thrift.release_all(&mut self.outbox);
        }
        // A lease is this term's leader's alone.
        self.lease_from_ns = None;
        self.proposed_at.clear();
        if leader == 0 {
            return;
        }
        let mut again: Vec<Ticket> = Vec::new();
        for (ticket, f) in &mut self.in_flight {
            if f.proposed_tick.take().is_some() {
                again.push(*ticket);
            }
        }
        if !again.is_empty() {
            self.stats.proposal_retries += again.len() as u64;
            self.waiting_writes.append(&mut again);
            self.order_waiting_writes();
        }
        let rounds: Vec<u64> =
            self.read_rounds.iter().filter(|(_, r)| r.index.is_none()).map(|(id, _)| *id).collect();
        for id in rounds {
            self.stats.read_retries += 1;
            if let Some(round) = self.read_rounds.get_mut(&id) {
                round.asked_tick = self.ticks;
            }
            self.node.read_index(id.to_le_bytes().to_vec());
        }
    }

    pub(super) fn read_index_confirmed(&mut self, ctx: &[u8], index: u64) {
        let Ok(bytes) = <[u8; 8]>::try_from(ctx) else { return };
        if let Some(round) = self.read_rounds.get_mut(&u64::from_le_bytes(bytes)) {
            round.index.get_or_insert(index);
            // A leader's round is confirmed by a quorum that heard it after it was asked.
            if self.node.raft.state == StateRole::Leader && round.asked_leading == Some(self.node.raft.term) {
                self.lease_from_ns = self.lease_from_ns.max(Some(round.asked_ns));
            }
        }
    }

    pub(super) fn serve_reads(&mut self) {
        let applied = self.applied;
        let ready: Vec<u64> = self
            .read_rounds
            .iter()
            .filter(|(_, r)| r.index.is_some_and(|i| i <= applied))
            .map(|(id, _)| *id)
            .collect();
        for id in ready {
            if let Some(round) = self.read_rounds.remove(&id) {
                for (ticket, op) in round.reads {
                    let reply = self.store.read(&op, self.now_ms);
                    self.completions.push((ticket, reply));
                }
            }
        }
    }
}
