//! The Ready protocol as `raft` requires it: a Ready's ordinary messages released before its
//! entries are persisted, its persisted messages after; committed entries applied to the store
//! (membership changes included), the log compacted, and appends held by thrifty replication.

use std::collections::btree_map::Entry as Slot;
use std::io;

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfChangeV2, Entry, EntryType, Message};
use raft::{StateRole, Storage};

use super::detector::PIGGYBACK_CONTEXT;
use super::{MembershipEvent, Replica, Ticket};
use crate::kv::{Batch, Store};
use crate::replica::storage::Disk;
use crate::replica::thrift::{self, Thrift};

impl<D: Disk> Replica<D> {
    /// A leader that sent a snapshot waits for the follower to acknowledge it before sending
    /// that follower anything else; if the snapshot was lost, it would wait for ever. So a
    /// snapshot still unacknowledged after a few retry intervals is reported failed, and the
    /// leader probes the follower again (and sends a new snapshot if it still needs one).
    pub(super) fn check_snapshots_sent(&mut self) {
        let give_up_before = self.ticks.saturating_sub(4 * self.config.retry_ticks);
        let overdue: Vec<u64> = self
            .snapshots_sent
            .iter()
            .filter(|&(_, &tick)| tick <= give_up_before)
            .map(|(&to, _)| to)
            .collect();
        for to in overdue {
            self.snapshots_sent.remove(&to);
            let waiting =
                self.node.raft.prs().get(to).is_some_and(|pr| pr.state == raft::ProgressState::Snapshot);
            if waiting {
                self.node.report_snapshot(to, raft::SnapshotStatus::Failure);
            }
        }
    }

    fn send(&mut self, messages: Vec<Message>) {
        for msg in messages {
            match msg.get_msg_type() {
                raft::eraftpb::MessageType::MsgSnapshot => {
                    self.snapshots_sent.insert(msg.to, self.ticks);
                }
                // The answer to a heartbeat the failure detector carried: see `leader_commit`.
                raft::eraftpb::MessageType::MsgHeartbeatResponse if msg.context[..] == *PIGGYBACK_CONTEXT => {
                    continue;
                }
                _ => {}
            }
            if matches!(
                msg.get_msg_type(),
                raft::eraftpb::MessageType::MsgAppend | raft::eraftpb::MessageType::MsgSnapshot
            ) && let Some(thrift) = self.thrift.as_ref()
            {
                // An append of writes the quorum does not need is held; one that carries only
                // a commit index joins what is held for its follower (alone it would arrive
                // before the entries it follows, and be refused).
                let commit_only = msg.get_msg_type() == raft::eraftpb::MessageType::MsgAppend
                    && msg.entries.is_empty()
                    && thrift.holds_for(msg.to);
                let hold = !thrift.eager(msg.to, self.clock_ns)
                    && (commit_only || (Thrift::holdable(&msg) && !self.quorum_needs(msg.to)));
                let Some(thrift) = self.thrift.as_mut() else { continue };
                if hold {
                    thrift.hold(msg, self.clock_ns);
                    continue;
                }
                // After what is held for the same follower: appends arrive in the order made.
                thrift.release(msg.to, &mut self.outbox);
            }
            self.outbox.push(msg);
        }
    }

    /// Whether this leader's quorum needs follower `to` now ([`thrift::quorum_needs`]); every
    /// follower is needed by a member that does not lead, in a joint membership, or with
    /// fewer than three voters.
    fn quorum_needs(&self, to: u64) -> bool {
        let conf = self.node.store().conf_state();
        let raft = &self.node.raft;
        let voters = conf.get_voters();
        if raft.state != StateRole::Leader
            || !conf.get_voters_outgoing().is_empty()
            || voters.len() < 3
            || !voters.contains(&self.config.id)
        {
            return true;
        }
        let followers = voters
            .iter()
            .filter(|&&v| v != self.config.id)
            .map(|&v| (v, raft.prs().get(v).map_or(0, |p| p.matched)));
        thrift::quorum_needs(to, voters.len(), followers)
    }

    /// Whether Raft has a Ready to handle (or one is begun and not finished).
    pub fn has_ready(&self) -> bool {
        self.pending_ready.is_some() || self.node.has_ready()
    }

    /// Begins the pass's Ready, if Raft has one: its ordinary messages (a leader's appends, a
    /// candidate's votes asked for) are released to [`Replica::take_messages`] before this
    /// member's own entries are persisted. Returns whether one was begun; the shell sends what
    /// it released, then calls [`Replica::finish_ready`].
    pub fn begin_ready(&mut self) -> bool {
        if self.pending_ready.is_some() {
            return true;
        }
        if !self.node.has_ready() {
            return false;
        }
        let mut rd = self.node.ready();
        self.send(rd.take_messages());
        self.pending_ready = Some(rd);
        true
    }

    /// Persists the Ready [`Replica::begin_ready`] began (its snapshot, entries and hard state,
    /// in one group) and releases its persisted messages (votes, append acknowledgements) to
    /// [`Replica::take_messages`]: the shell sends them before it calls
    /// [`Replica::finish_ready`], so that an acknowledgement does not wait for the apply of
    /// what its append committed.
    pub fn persist_ready(&mut self) -> io::Result<()> {
        if self.ready_persisted {
            return Ok(());
        }
        let Some(rd) = self.pending_ready.as_mut() else { return Ok(()) };
        let snapshot = (!rd.snapshot().is_empty()).then(|| rd.snapshot().clone());
        let entries = rd.take_entries();
        let hard_state = rd.hs().cloned();
        if let Err(e) = self.node.mut_store().persist(snapshot.as_ref(), &entries, hard_state.as_ref()) {
            // As a Ready whose persist failed is dropped whole: nothing of it goes out.
            self.pending_ready = None;
            return Err(e);
        }
        if let Some(snap) = snapshot {
            // A leader's snapshot replaces the store; requests it answered are unknown here
            // (their entries were applied elsewhere): they are retried, and sessions answer.
            self.store = Store::decode(&snap.data).unwrap_or_default();
            self.applied = snap.get_metadata().index;
            self.stats.snapshots_installed += 1;
        }
        // Votes and append acknowledgements only once what they promise is on disk.
        let persisted = rd.take_persisted_messages();
        self.send(persisted);
        self.ready_persisted = true;
        Ok(())
    }

    /// Finishes the Ready [`Replica::begin_ready`] began (persisting it first, if
    /// [`Replica::persist_ready`] did not): applies, advances, and proposes the writes that
    /// waited for an entry in flight.
    pub fn finish_ready(&mut self) -> io::Result<()> {
        self.persist_ready()?;
        let Some(mut rd) = self.pending_ready.take() else { return Ok(()) };
        self.ready_persisted = false;
        for state in rd.take_read_states() {
            self.read_index_confirmed(&state.request_ctx, state.index);
        }
        self.apply(rd.take_committed_entries())?;
        let mut light = self.node.advance(rd);
        // The commit index is not persisted on its own: after a restart it is learnt again
        // from the leader, and entries up to it are applied again over the snapshot.
        self.send(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.node.advance_apply();
        self.renew_lease();
        self.notify_commits();
        self.follow_leader_change();
        self.serve_reads();
        self.compact()?;
        // Writes that waited for this member's entry in flight go now, as one entry.
        if !self.waiting_writes.is_empty() {
            self.propose_waiting();
        }
        Ok(())
    }

    /// Every Ready Raft has, begun and finished in turn, its messages left for
    /// [`Replica::take_messages`] (for a shell that has nothing to gain by sending a Ready's
    /// ordinary messages before it persists: the simulator, tests).
    pub fn ready(&mut self) -> io::Result<()> {
        while self.begin_ready() {
            self.finish_ready()?;
        }
        Ok(())
    }

    fn apply(&mut self, entries: Vec<Entry>) -> io::Result<()> {
        for entry in entries {
            if entry.index <= self.applied {
                continue;
            }
            match entry.get_entry_type() {
                EntryType::EntryNormal if entry.data.is_empty() => {}
                EntryType::EntryNormal => {
                    // An entry that does not decode is skipped alike by every member.
                    if let Ok(batch) = Batch::decode(&entry.data) {
                        for request in &batch.requests {
                            let applied = self.store.apply(request, batch.now_ms, entry.index);
                            if request.origin != self.config.id {
                                self.commit_notices.insert(request.origin, entry.index);
                            }
                            if request.origin == self.config.id {
                                let ticket = Ticket { client: request.client, seq: request.seq };
                                // A blocking pop's unblock has the pop's ticket: a late copy of
                                // the pop (a retry) must not take the unblock's place.
                                if let Slot::Occupied(f) = self.in_flight.entry(ticket)
                                    && std::mem::discriminant(&f.get().request.op)
                                        == std::mem::discriminant(&request.op)
                                {
                                    f.remove();
                                    if let Some(reply) = applied.reply() {
                                        self.completions.push((ticket, reply));
                                    }
                                }
                            }
                            // Blocked clients this request served: their members answer them.
                            for woken in self.store.take_woken() {
                                if woken.origin == self.config.id {
                                    let ticket = Ticket { client: woken.client, seq: woken.seq };
                                    self.completions.push((ticket, woken.reply));
                                } else {
                                    self.commit_notices.insert(woken.origin, entry.index);
                                }
                            }
                        }
                    }
                }
                // Configuration changes: their bytes were written by protobuf's encoder (see
                // `wire`), so parsing them here is parsing our own output.
                EntryType::EntryConfChange => {
                    if let Ok(cc) = ConfChange::parse_from_bytes(&entry.data)
                        && let Ok(cs) = self.node.apply_conf_change(&cc)
                    {
                        self.node.mut_store().persist_conf_state(cs)?;
                        if cc.get_change_type() == ConfChangeType::RemoveNode {
                            self.store.drop_waiters_of(cc.node_id);
                        }
                        // `raft` refuses a snapshot whose membership leaves the receiver out,
                        // so the snapshot a new member is sent must be taken after its
                        // addition: take one now.
                        self.snapshot_due = true;
                        self.membership_events.push(MembershipEvent {
                            change: cc.get_change_type(),
                            node: cc.node_id,
                            context: cc.context.to_vec(),
                            index: entry.index,
                        });
                    }
                }
                EntryType::EntryConfChangeV2 => {
                    if let Ok(cc) = ConfChangeV2::parse_from_bytes(&entry.data)
                        && let Ok(cs) = self.node.apply_conf_change(&cc)
                    {
                        self.node.mut_store().persist_conf_state(cs)?;
                    }
                }
            }
            self.applied = entry.index;
        }
        Ok(())
    }

    fn compact(&mut self) -> io::Result<()> {
        let first = self.node.store().first_index().unwrap_or(1);
        if self.applied + 1 < first + self.config.compact_after_entries && !self.snapshot_due {
            return Ok(());
        }
        self.snapshot_due = false;
        let mut bytes = Vec::new();
        self.store.encode(&mut bytes);
        self.node.mut_store().compact(self.applied, bytes)?;
        self.stats.compactions += 1;
        Ok(())
    }
}
