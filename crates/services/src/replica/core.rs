//! One member of the replicated store, sans I/O: Raft (`raft::RawNode`) over a [`LogStore`],
//! the [`Store`] it applies, and the client requests waiting on both.
//!
//! The shell (a real node with sockets, or the simulator) calls, in any order:
//! - [`Replica::submit_write`] and [`Replica::submit_read`] for each client request taken at
//!   this member;
//! - [`Replica::step`] for each Raft message that arrived;
//! - [`Replica::tick`] once per period, which also proposes the period's writes as **one**
//!   entry and asks **one** read index for the period's reads.
//!
//! After any of them it takes [`Replica::take_messages`] (to send) and
//! [`Replica::take_completions`] (answers to give). Every call handles Ready to completion, so
//! there is no separate "poll" step and no state left half done between calls.
//!
//! The Ready protocol is followed as `raft` requires: a Ready's ordinary messages are sent at
//! once (a leader's appends go out while it writes its own log), its snapshot, entries and
//! hard state are persisted in one group before its *persisted* messages (votes, append
//! acknowledgements) are released, then committed entries are applied, `advance` is called,
//! and the LightReady it returns is handled in turn (its messages, its committed entries).
//!
//! Requests: a write is answered when its entry has been committed and applied *here* (the
//! member the client talks to), whichever member leads; a follower's proposal is forwarded to
//! the leader by `raft`. A read is answered once a read index confirmed by a quorum of the
//! leader is applied here (`ReadOnlyOption::Safe`), or at once from local state in
//! [`ReadMode::Stale`]. Proposals dropped (no leader, a lost forward) and read indexes
//! dropped (a new leader that has not committed in its term yet) are retried after
//! [`ReplicaConfig::retry_ticks`]; the store's sessions make a retried write apply once.
//!
//! Work per call: bounded by the messages and entries it handles; memory: the log since the
//! last compaction ([`ReplicaConfig::compact_after_entries`]) plus requests in flight.

use std::io;

// Ordered maps: requests are answered in the same order on every run of a seed (a hash map's
// order changes from one instance to the next), which the simulator's replays rely on.
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message};
use raft::{RawNode, ReadOnlyOption, StateRole, Storage};
use std::collections::BTreeMap;

use super::storage::{Disk, LogStore};
use crate::kv::{Batch, ReadOp, Reply, Request, Store, WriteOp};

/// How reads are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Linearizable: after a read index confirmed by a quorum is applied here.
    ReadIndex,
    /// From local state at once: fast, possibly stale (`--stale-reads`).
    Stale,
}

/// Deliberate faults, for the linearizability checker's self-test only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Answer a SET "OK" as soon as it is proposed, before it is committed.
    AckBeforeCommit,
}

/// The context of a heartbeat made from the failure detector's (see
/// [`Replica::leader_commit`]), so that its answer is known and not sent.
const PIGGYBACK_CONTEXT: &[u8] = b"fd";

/// A replica's settings.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// This member's id (non-zero).
    pub id: u64,
    /// Ticks between the leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// Ticks without a leader's word before a follower campaigns (randomised in [n, 2n)).
    pub election_ticks: usize,
    /// Ticks before a dropped proposal or read index is tried again.
    pub retry_ticks: u64,
    /// Applied entries kept in the log before they are replaced by a snapshot.
    pub compact_after_entries: u64,
    /// How reads are answered.
    pub read_mode: ReadMode,
    /// A deliberate fault (self-test only).
    pub broken: Option<Broken>,
    /// An election timeout fixed at this many ticks instead of drawn at random in
    /// [election_ticks, 2 election_ticks): `raft` draws from the thread's generator, which a
    /// deterministic simulation cannot seed, so the simulator draws per member instead.
    pub fixed_election_ticks: Option<usize>,
    /// Followers learn a new commit index from the failure detector's heartbeats
    /// ([`Replica::leader_commit`], every period) rather than from an empty append the leader
    /// sends the moment it commits: each write then costs two datagrams a follower fewer (the
    /// append and its answer), and a follower applies up to a period later. Only with the
    /// detector on; Raft's safety does not depend on how the commit index travels.
    pub commit_by_heartbeats: bool,
    /// The most entry bytes one append carries, and the most appends in flight to a follower:
    /// Raft's own flow control, sized to the transport (a lane tunnel carries far less than a
    /// socket takes; an append it cannot carry in time only waits in a queue and returns as a
    /// retry).
    pub max_append_bytes: u64,
    /// See `max_append_bytes`.
    pub max_inflight_appends: usize,
}

impl ReplicaConfig {
    /// Settings for a lane period: heartbeats every 2 periods, elections after 50.
    pub fn new(id: u64) -> Self {
        Self {
            id,
            heartbeat_ticks: 2,
            election_ticks: 50,
            retry_ticks: 20,
            compact_after_entries: 10_000,
            read_mode: ReadMode::ReadIndex,
            broken: None,
            fixed_election_ticks: None,
            commit_by_heartbeats: false,
            max_append_bytes: 1 << 20,
            max_inflight_appends: 256,
        }
    }
}

/// Which client request an answer is for: the client connection at this member and the
/// request's sequence number on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket {
    /// The client connection.
    pub client: u64,
    /// The request's sequence number.
    pub seq: u64,
}

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// Raft refused the configuration or storage.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// The disk failed.
    #[error("log storage: {0}")]
    Disk(#[from] io::Error),
    /// The snapshot on disk does not decode.
    #[error("snapshot on disk: {0}")]
    Snapshot(#[from] crate::codec::DecodeError),
}

#[derive(Debug)]
struct InFlight {
    request: Request,
    proposed_tick: Option<u64>,
}

#[derive(Debug)]
struct ReadRound {
    reads: Vec<(Ticket, ReadOp)>,
    asked_tick: u64,
    index: Option<u64>,
}

/// A membership change, applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipEvent {
    /// Added as a voter, as a learner, or removed.
    pub change: raft::eraftpb::ConfChangeType,
    /// The member.
    pub node: u64,
    /// What the proposer attached (its address, for a member added).
    pub context: Vec<u8>,
    /// The log index of the change.
    pub index: u64,
}

/// Counters a shell reports (INFO, the bench).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaStats {
    /// Entries proposed by this member.
    pub proposals: u64,
    /// Proposals tried again.
    pub proposal_retries: u64,
    /// Read index rounds asked.
    pub read_rounds: u64,
    /// Read rounds tried again.
    pub read_retries: u64,
    /// Snapshots taken (compactions).
    pub compactions: u64,
    /// Snapshots installed from a leader.
    pub snapshots_installed: u64,
}

/// One member: Raft, its log, the store and the requests in flight.
pub struct Replica<D: Disk> {
    node: RawNode<LogStore<D>>,
    config: ReplicaConfig,
    store: Store,
    applied: u64,
    ticks: u64,
    now_ms: u64,
    waiting_writes: Vec<Ticket>,
    in_flight: BTreeMap<Ticket, InFlight>,
    waiting_reads: Vec<(Ticket, ReadOp)>,
    read_rounds: BTreeMap<u64, ReadRound>,
    next_read_round: u64,
    outbox: Vec<Message>,
    snapshots_sent: BTreeMap<u64, u64>,
    membership_events: Vec<MembershipEvent>,
    snapshot_due: bool,
    completions: Vec<(Ticket, Reply)>,
    stats: ReplicaStats,
}

impl<D: Disk> std::fmt::Debug for Replica<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.config.id)
            .field("role", &self.node.raft.state)
            .field("term", &self.node.raft.term)
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

fn raft_config(config: &ReplicaConfig, applied: u64) -> raft::Config {
    raft::Config {
        id: config.id,
        election_tick: config.election_ticks,
        heartbeat_tick: config.heartbeat_ticks,
        applied,
        max_size_per_msg: config.max_append_bytes,
        max_inflight_msgs: config.max_inflight_appends,
        check_quorum: true,
        pre_vote: true,
        read_only_option: ReadOnlyOption::Safe,
        min_election_tick: config.fixed_election_ticks.unwrap_or(0),
        max_election_tick: config.fixed_election_ticks.map_or(0, |t| t + 1),
        skip_bcast_commit: config.commit_by_heartbeats,
        ..raft::Config::default()
    }
}

impl<D: Disk> Replica<D> {
    /// A member over `log` (new or loaded): the store comes from the log's snapshot, and
    /// entries after it are applied again as they are committed.
    pub fn new(config: ReplicaConfig, log: LogStore<D>) -> Result<Self, ReplicaError> {
        let snapshot = log.latest_snapshot();
        let applied = snapshot.get_metadata().index;
        let store = if snapshot.data.is_empty() { Store::new() } else { Store::decode(&snapshot.data)? };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&raft_config(&config, applied), log, &logger)?;
        Ok(Self {
            node,
            config,
            store,
            applied,
            ticks: 0,
            now_ms: 0,
            waiting_writes: Vec::new(),
            in_flight: BTreeMap::new(),
            waiting_reads: Vec::new(),
            read_rounds: BTreeMap::new(),
            next_read_round: 0,
            outbox: Vec::new(),
            snapshots_sent: BTreeMap::new(),
            membership_events: Vec::new(),
            snapshot_due: false,
            completions: Vec::new(),
            stats: ReplicaStats::default(),
        })
    }

    /// This member's id.
    pub fn id(&self) -> u64 {
        self.config.id
    }

    /// The leader this member knows of (0: none).
    pub fn leader(&self) -> u64 {
        self.node.raft.leader_id
    }

    /// True while this member leads.
    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The highest log index applied to the store.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The voters of the current membership, in id order.
    pub fn voters(&self) -> Vec<u64> {
        let mut voters = self.node.store().conf_state().get_voters().to_vec();
        voters.sort_unstable();
        voters
    }

    /// The learners (members that receive the log but do not vote), in id order.
    pub fn learners(&self) -> Vec<u64> {
        let mut learners = self.node.store().conf_state().get_learners().to_vec();
        learners.sort_unstable();
        learners
    }

    /// The store (read-only; for INFO and the simulator's final check).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Counters.
    pub fn stats(&self) -> ReplicaStats {
        self.stats
    }

    /// The log store (the simulator's crashes take its disk).
    pub fn log(&self) -> &LogStore<D> {
        self.node.store()
    }

    /// Requests (writes and reads) waiting for an answer here.
    pub fn pending(&self) -> usize {
        self.waiting_writes.len()
            + self.in_flight.len()
            + self.read_rounds.values().map(|r| r.reads.len()).sum::<usize>()
            + self.waiting_reads.len()
    }

    /// Takes a client write: it is proposed at the next tick, with the period's others.
    /// `completed_below` is the client's lowest sequence number still unanswered.
    pub fn submit_write(&mut self, ticket: Ticket, completed_below: u64, op: WriteOp) {
        let request =
            Request { origin: self.config.id, client: ticket.client, seq: ticket.seq, completed_below, op };
        self.in_flight.insert(ticket, InFlight { request, proposed_tick: None });
        self.waiting_writes.push(ticket);
    }

    /// Takes a client read: answered at once in [`ReadMode::Stale`], otherwise after the
    /// next tick's read index is applied here.
    pub fn submit_read(&mut self, ticket: Ticket, op: ReadOp) {
        match self.config.read_mode {
            ReadMode::Stale => {
                let reply = self.store.read(&op, self.now_ms);
                self.completions.push((ticket, reply));
            }
            ReadMode::ReadIndex => self.waiting_reads.push((ticket, op)),
        }
    }

    /// Forgets a client's requests (its connection closed): nothing is answered for them.
    /// Writes already proposed still apply.
    pub fn forget_client(&mut self, client: u64) {
        self.in_flight.retain(|t, _| t.client != client);
        self.waiting_writes.retain(|t| t.client != client);
        self.waiting_reads.retain(|(t, _)| t.client != client);
        for round in self.read_rounds.values_mut() {
            round.reads.retain(|(t, _)| t.client != client);
        }
    }

    /// A Raft message from another member.
    pub fn step(&mut self, msg: Message) -> io::Result<()> {
        // A message for another member, or from one we never heard of, is the sender's
        // problem; `raft` reports it as an error, which we drop.
        if msg.to != self.config.id {
            return Ok(());
        }
        let _ = self.node.step(msg);
        self.handle_ready()
    }

    /// One period: Raft's clock, then this period's writes as one entry and reads as one
    /// read index, then retries of what was dropped. `now_ms` is the member's real time,
    /// written into the entry for the writes' expiry.
    pub fn tick(&mut self, now_ms: u64) -> io::Result<()> {
        self.ticks += 1;
        self.now_ms = now_ms;
        self.node.tick();
        self.check_snapshots_sent();
        self.propose_waiting();
        self.ask_read_index();
        self.handle_ready()
    }

    /// Proposes the writes and asks the read index of the requests taken since the last tick
    /// or flush, now rather than at the next tick: a shell that reads every ready client in
    /// one pass calls this after the pass, so a lone request does not wait for the period
    /// while the requests of a busy pass still share one entry and one read index.
    pub fn flush(&mut self) -> io::Result<()> {
        self.propose_waiting();
        self.ask_read_index();
        self.handle_ready()
    }

    /// The failure detector suspects `leader`. This member stops honouring its lease at once
    /// (with check-quorum, a follower ignores votes while it believes a leader alive, so
    /// without this a candidate would wait for every follower's own timeout), and, when
    /// `campaign`, stands for election now rather than after Raft's timeout (which stays as
    /// the backstop). With pre-vote, a false suspicion disrupts nothing: the members still
    /// hearing the leader refuse the pre-vote, and the leader's next message makes this member
    /// its follower again. Does nothing unless `leader` is the leader this member follows, or
    /// it has none (a campaign that has not won yet).
    pub fn leader_suspected(&mut self, leader: u64, campaign: bool) -> io::Result<()> {
        let known = self.leader();
        if leader == 0 || leader == self.config.id || self.is_leader() || (known != 0 && known != leader) {
            return Ok(());
        }
        let raft = &mut self.node.raft;
        raft.election_elapsed = raft.election_elapsed.max(raft.election_timeout());
        if campaign {
            let _ = self.node.campaign();
        }
        self.handle_ready()
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
    pub fn leader_commit(&mut self, from: u64, term: u64, commit: u64) -> io::Result<()> {
        let raft = &self.node.raft;
        if from == self.config.id
            || term != raft.term
            || raft.state == raft::StateRole::Leader
            || commit > raft.raft_log.last_index()
        {
            return Ok(());
        }
        let mut msg = Message::default();
        msg.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
        msg.from = from;
        msg.to = self.config.id;
        msg.term = term;
        msg.commit = commit;
        msg.context = PIGGYBACK_CONTEXT.to_vec().into();
        let _ = self.node.step(msg);
        self.handle_ready()
    }

    /// Messages to send, each with its destination in `to`.
    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// Answers to give to clients.
    pub fn take_completions(&mut self) -> Vec<(Ticket, Reply)> {
        std::mem::take(&mut self.completions)
    }

    /// A leader that sent a snapshot waits for the follower to acknowledge it before sending
    /// that follower anything else; if the snapshot was lost, it would wait for ever. So a
    /// snapshot still unacknowledged after a few retry intervals is reported failed, and the
    /// leader probes the follower again (and sends a new snapshot if it still needs one).
    fn check_snapshots_sent(&mut self) {
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
            self.outbox.push(msg);
        }
    }

    fn propose_waiting(&mut self) {
        let retry_before = self.ticks.saturating_sub(self.config.retry_ticks);
        let mut stale: Vec<Ticket> = Vec::new();
        for (ticket, f) in &mut self.in_flight {
            if f.proposed_tick.is_some_and(|t| t <= retry_before) {
                f.proposed_tick = None;
                stale.push(*ticket);
            }
        }
        if !stale.is_empty() {
            stale.sort_unstable();
            self.stats.proposal_retries += stale.len() as u64;
            self.waiting_writes.extend(stale);
        }
        if self.waiting_writes.is_empty() || self.leader() == 0 {
            return;
        }
        let tickets = std::mem::take(&mut self.waiting_writes);
        let requests: Vec<Request> =
            tickets.iter().filter_map(|t| self.in_flight.get(t).map(|f| f.request.clone())).collect();
        if requests.is_empty() {
            return;
        }
        let data = Batch { now_ms: self.now_ms, requests }.encode();
        match self.node.propose(Vec::new(), data) {
            Ok(()) => {
                self.stats.proposals += 1;
                for t in &tickets {
                    if let Some(f) = self.in_flight.get_mut(t) {
                        f.proposed_tick = Some(self.ticks);
                        if self.config.broken == Some(Broken::AckBeforeCommit)
                            && matches!(f.request.op, WriteOp::Set { .. })
                        {
                            self.completions.push((*t, Reply::Ok));
                        }
                    }
                }
                if self.config.broken == Some(Broken::AckBeforeCommit) {
                    self.in_flight.retain(|_, f| {
                        !matches!(f.request.op, WriteOp::Set { .. }) || f.proposed_tick.is_none()
                    });
                }
            }
            // No leader after all, or too much uncommitted: try again next tick.
            Err(_) => self.waiting_writes = tickets,
        }
    }

    fn ask_read_index(&mut self) {
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
        self.read_rounds.insert(id, ReadRound { reads, asked_tick: self.ticks, index: None });
        self.stats.read_rounds += 1;
        self.node.read_index(id.to_le_bytes().to_vec());
    }

    fn handle_ready(&mut self) -> io::Result<()> {
        if !self.node.has_ready() {
            return Ok(());
        }
        let mut rd = self.node.ready();
        // Ordinary messages may leave before this member's own write is durable.
        self.send(rd.take_messages());
        let snapshot = (!rd.snapshot().is_empty()).then(|| rd.snapshot().clone());
        let entries = rd.take_entries();
        let hard_state = rd.hs().cloned();
        self.node.mut_store().persist(snapshot.as_ref(), &entries, hard_state.as_ref())?;
        if let Some(snap) = snapshot {
            // A leader's snapshot replaces the store; requests it answered are unknown here
            // (their entries were applied elsewhere): they are retried, and sessions answer.
            self.store = Store::decode(&snap.data).unwrap_or_default();
            self.applied = snap.get_metadata().index;
            self.stats.snapshots_installed += 1;
        }
        for state in rd.take_read_states() {
            self.read_index_confirmed(&state.request_ctx, state.index);
        }
        self.apply(rd.take_committed_entries())?;
        // Votes and append acknowledgements only once what they promise is on disk.
        self.send(rd.take_persisted_messages());
        let mut light = self.node.advance(rd);
        // The commit index is not persisted on its own: after a restart it is learnt again
        // from the leader, and entries up to it are applied again over the snapshot.
        self.send(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.node.advance_apply();
        self.serve_reads();
        self.compact()?;
        Ok(())
    }

    fn read_index_confirmed(&mut self, ctx: &[u8], index: u64) {
        let Ok(bytes) = <[u8; 8]>::try_from(ctx) else { return };
        if let Some(round) = self.read_rounds.get_mut(&u64::from_le_bytes(bytes)) {
            round.index.get_or_insert(index);
        }
    }

    fn serve_reads(&mut self) {
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
                            if request.origin == self.config.id {
                                let ticket = Ticket { client: request.client, seq: request.seq };
                                if self.in_flight.remove(&ticket).is_some()
                                    && let Some(reply) = applied.reply()
                                {
                                    self.completions.push((ticket, reply));
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
        self.node.propose_conf_change(Vec::new(), cc)?;
        self.handle_ready().map_err(raft::Error::Io)
    }

    /// Membership changes applied since the last call, in log order.
    pub fn take_membership_events(&mut self) -> Vec<MembershipEvent> {
        std::mem::take(&mut self.membership_events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::SetCondition;
    use crate::replica::{MemDisk, Sync};
    use raft::eraftpb::ConfChangeType;

    /// Members in one process; every message delivered at once.
    struct Cluster(BTreeMap<u64, Replica<MemDisk>>);

    impl Cluster {
        fn new(voters: &[u64]) -> Self {
            Cluster(voters.iter().map(|&id| (id, member(id, voters))).collect())
        }

        fn settle(&mut self, ticks: usize) {
            for _ in 0..ticks {
                let ids: Vec<u64> = self.0.keys().copied().collect();
                for id in &ids {
                    self.0.get_mut(id).unwrap().tick(0).unwrap();
                }
                loop {
                    let mut messages = Vec::new();
                    for r in self.0.values_mut() {
                        messages.extend(r.take_messages());
                    }
                    if messages.is_empty() {
                        break;
                    }
                    for m in messages {
                        if let Some(r) = self.0.get_mut(&m.to) {
                            r.step(m).unwrap();
                        }
                    }
                }
            }
        }

        fn leader(&self) -> u64 {
            self.0.values().find(|r| r.is_leader()).map(|r| r.id()).unwrap_or(0)
        }
    }

    fn member(id: u64, voters: &[u64]) -> Replica<MemDisk> {
        let log = LogStore::create(MemDisk::default(), Sync::Always, voters).unwrap();
        let mut config = ReplicaConfig::new(id);
        config.election_ticks = 10;
        config.fixed_election_ticks = Some(10 + id as usize);
        config.compact_after_entries = 20;
        Replica::new(config, log).unwrap()
    }

    fn set(key: &str, value: &str) -> WriteOp {
        WriteOp::Set { key: key.into(), value: value.into(), ttl_ms: None, condition: SetCondition::Always }
    }

    #[test]
    fn a_member_added_catches_up_from_a_snapshot_and_a_removed_one_stops_counting() {
        let mut c = Cluster::new(&[1, 2, 3]);
        c.settle(40);
        let leader = c.leader();
        assert_ne!(leader, 0, "a leader within 40 ticks");
        for i in 0..50u64 {
            c.0.get_mut(&2).unwrap().submit_write(
                Ticket { client: 1, seq: i + 1 },
                i + 1,
                set(&format!("k{i}"), "v"),
            );
            c.settle(1);
        }
        c.settle(5);
        assert!(
            c.0[&leader].stats().compactions > 0,
            "the log was compacted, so the new member needs a snapshot"
        );

        // Member 4 starts knowing no membership, and is added through a follower.
        c.0.insert(4, member(4, &[]));
        let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
        c.0.get_mut(&follower)
            .unwrap()
            .propose_membership(ConfChangeType::AddNode, 4, b"addr-4".to_vec())
            .unwrap();
        c.settle(30);
        let events = c.0.get_mut(&4).unwrap().take_membership_events();
        assert!(c.0[&4].voters().contains(&4), "member 4 votes: {:?}", c.0[&4].voters());
        assert_eq!(c.0[&4].store().read(&ReadOp::DbSize, 0), Reply::Integer(50), "member 4 holds every key");
        assert!(c.0[&4].stats().snapshots_installed > 0);
        let seen: Vec<u64> =
            c.0.get_mut(&follower).unwrap().take_membership_events().iter().map(|e| e.node).collect();
        assert_eq!(seen, vec![4]);
        assert!(events.is_empty() || events.iter().all(|e| e.node == 4));

        // Member 1 removed; then stopped: three of four... now three voters, two needed. A
        // second change before the first applies is refused at once by the leader.
        let proposer = c.leader();
        c.0.get_mut(&proposer)
            .unwrap()
            .propose_membership(ConfChangeType::RemoveNode, 1, Vec::new())
            .unwrap();
        let second =
            c.0.get_mut(&proposer).unwrap().propose_membership(ConfChangeType::AddNode, 5, Vec::new());
        assert!(matches!(second, Err(raft::Error::ProposalDropped)), "{second:?}");
        c.settle(10);
        c.0.remove(&1);
        c.settle(60);
        let leader = c.leader();
        assert!(leader != 0 && leader != 1, "a leader among the rest");
        assert_eq!(c.0[&leader].voters(), vec![2, 3, 4]);
        c.0.get_mut(&4).unwrap().submit_write(Ticket { client: 9, seq: 1 }, 1, set("after", "removal"));
        c.settle(5);
        let answers = c.0.get_mut(&4).unwrap().take_completions();
        assert!(answers.contains(&(Ticket { client: 9, seq: 1 }, Reply::Ok)), "{answers:?}");
    }

    /// Delivers every message waiting, and those they cause, except those `drop` rejects.
    fn deliver_unless(c: &mut Cluster, drop: impl Fn(&Message) -> bool) {
        loop {
            let mut messages = Vec::new();
            for r in c.0.values_mut() {
                messages.extend(r.take_messages());
            }
            if messages.is_empty() {
                return;
            }
            for m in messages.into_iter().filter(|m| !drop(m)) {
                if let Some(r) = c.0.get_mut(&m.to) {
                    r.step(m).unwrap();
                }
            }
        }
    }

    #[test]
    fn the_commit_index_on_a_heartbeat_commits_at_a_follower_capped_and_checked() {
        use raft::eraftpb::MessageType;
        let mut c = Cluster::new(&[1, 2, 3]);
        c.settle(40);
        let leader = c.leader();
        let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
        c.0.get_mut(&leader).unwrap().submit_write(Ticket { client: 1, seq: 1 }, 1, set("k", "v"));
        c.0.get_mut(&leader).unwrap().flush().unwrap();
        // The entry reaches the followers and the leader commits it, but the appends that
        // would carry the commit index on are lost.
        let first_appends = std::cell::Cell::new(0);
        deliver_unless(&mut c, |m| {
            if m.get_msg_type() == MessageType::MsgAppend && m.from == leader {
                first_appends.set(first_appends.get() + 1);
                first_appends.get() > 2
            } else {
                false
            }
        });
        let (term, commit) = c.0[&leader].commit_for(follower).expect("the leader's word for the follower");
        assert_eq!(term, c.0[&leader].term());
        assert!(commit > c.0[&follower].applied(), "the follower has not applied it yet");
        assert_eq!(c.0[&follower].store().read(&ReadOp::Get { key: "k".into() }, 0), Reply::Nil);
        assert_eq!(c.0[&follower].commit_for(leader), None, "only the leader speaks for commits");

        // A wrong term, or an index the follower lacks, changes nothing and panics nowhere.
        let f = c.0.get_mut(&follower).unwrap();
        f.leader_commit(leader, term + 1, commit).unwrap();
        f.leader_commit(leader, term, u64::MAX).unwrap();
        assert!(f.applied() < commit);
        f.leader_commit(leader, term, commit).unwrap();
        assert_eq!(f.applied(), commit, "applied from the heartbeat's commit index");
        assert_eq!(f.store().read(&ReadOp::Get { key: "k".into() }, 0), Reply::Bulk(b"v".to_vec()));
        assert!(
            f.take_messages().iter().all(|m| m.get_msg_type() != MessageType::MsgHeartbeatResponse),
            "the detector's heartbeat is not answered"
        );
    }

    #[test]
    fn a_suspected_leader_is_replaced_within_ticks_and_a_false_suspicion_changes_nothing() {
        let mut c = Cluster::new(&[1, 2, 3]);
        c.settle(40);
        let leader = c.leader();
        let term = c.0[&leader].term();
        let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != leader).collect();

        // A false suspicion at one follower: pre-vote asks, the other follower still hears
        // the leader and refuses, and the leader's next heartbeat brings the asker back.
        c.0.get_mut(&followers[0]).unwrap().leader_suspected(leader, true).unwrap();
        c.settle(3);
        assert_eq!(c.leader(), leader);
        assert!(c.0.values().all(|r| r.term() == term && r.leader() == leader), "no term was spent");

        // The leader dies; both followers suspect it, the first in line campaigns at once.
        c.0.remove(&leader);
        c.0.get_mut(&followers[1]).unwrap().leader_suspected(leader, false).unwrap();
        c.0.get_mut(&followers[0]).unwrap().leader_suspected(leader, true).unwrap();
        c.settle(1);
        assert_eq!(c.leader(), followers[0], "elected within a tick, not the 10-tick timeout");
        assert_eq!(c.0[&followers[1]].leader(), followers[0]);
    }
}
