//! One member of the replicated store, sans I/O: Raft (`raft::RawNode`) over a [`LogStore`],
//! the [`Store`] it applies, and the client requests waiting on both.
//!
//! The shell (a real node with sockets, or the simulator) calls, in any order, during one pass
//! of its loop:
//! - [`Replica::submit_write`] and [`Replica::submit_read`] for each client request taken at
//!   this member;
//! - [`Replica::step`] for each Raft message that arrived;
//! - [`Replica::tick`] for each tick of Raft's logical clock that passed
//!   ([`Replica::ticks_until_due`] says when the next one matters, so an idle member sleeps);
//! - [`Replica::flush`] after the pass's requests, which proposes the writes waiting as
//!   **one** entry (unless one of this member's entries is still in flight: then they wait for
//!   it and go as one batch, adaptive batching) and asks **one** read index for the reads.
//!
//! None of these handles Raft's Ready: the shell does it once a pass, after everything of the
//! pass was stepped, with [`Replica::begin_ready`], [`Replica::persist_ready`] and
//! [`Replica::finish_ready`] (or [`Replica::ready`], all at once), taking
//! [`Replica::take_messages`] to send after each and [`Replica::take_completions`] (answers to
//! give) at the end.
//!
//! The Ready protocol is followed as `raft` requires: a Ready's ordinary messages are released
//! by [`Replica::begin_ready`], before anything is persisted (a leader's appends go out while it
//! writes, and with `fsync` syncs, its own log: Raft thesis 10.2.1, so a write waits for the
//! leader's sync and the followers' in parallel, not in series); [`Replica::persist_ready`]
//! persists its snapshot, entries and hard state in one group before its *persisted* messages
//! (votes, append acknowledgements) are released; [`Replica::finish_ready`] then applies
//! committed entries, calls `advance`, and handles the LightReady it returns in turn (its
//! messages, its committed entries). A follower's acknowledgement so leaves before it applies
//! what the append's commit index released: that apply is off the write's path. A leader that applies a write proposed through a follower tells that follower
//! of the commit at once ([`ReplicaConfig::commit_by_heartbeats`]), so the follower's client
//! is not answered a detector period late.
//!
//! Requests: a write is answered when its entry has been committed and applied *here* (the
//! member the client talks to), whichever member leads; a follower's proposal is forwarded to
//! the leader by `raft`. A read is answered once a read index confirmed by a quorum of the
//! leader is applied here (`ReadOnlyOption::Safe`), or at once from local state in
//! [`ReadMode::Stale`]. Proposals dropped (no leader, a lost forward) and read indexes
//! dropped (a new leader that has not committed in its term yet) are retried after
//! [`ReplicaConfig::retry_ticks`]; the store's sessions make a retried write apply once.
//!
//! Here are the settings, the replica's state and its inputs; in their own files, the Ready
//! protocol and the apply (`ready`), the requests in flight (`requests`), the failure
//! detector's side (`detector`) and changes of membership (`membership`).
//!
//! Work per call: bounded by the messages and entries it handles; memory: the log since the
//! last compaction ([`ReplicaConfig::compact_after_entries`]) plus requests in flight.

mod detector;
mod membership;
mod ready;
mod requests;

use std::io;

use raft::eraftpb::Message;
use raft::{RawNode, ReadOnlyOption, StateRole};
// Ordered maps: requests are answered in the same order on every run of a seed (a hash map's
// order changes from one instance to the next), which the simulator's replays rely on.
use std::collections::BTreeMap;

use super::storage::{Disk, LogStore};
use super::thrift::Thrift;
use crate::kv::{ReadOp, Reply, Request, Store, WriteOp};

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
    /// Adaptive batching: while one of this member's entries of writes is proposed and not
    /// yet applied here, new writes wait and go as one entry when it is (as etcd and TiKV
    /// batch). `false` proposes at every [`Replica::flush`].
    pub hold_while_in_flight: bool,
    /// The leader's lease, ns, or `None` for none: how long after a quorum of voters last
    /// heard it (the clock when the entry they acknowledged was proposed, or the read index
    /// round they confirmed was asked) no other member can be elected, so the leader answers
    /// a linearizable read from its own state at once. It must be at most the time a follower
    /// waits for its leader before it votes for another: the failure detector's `T + Lambda`
    /// (and Raft's election timeout), less a margin for clock rates; a member also refuses
    /// every vote for this long after its start (it may have acknowledged a leader before a
    /// restart and forgotten it). Needs [`Replica::observe_clock`] every pass.
    pub lease_ns: Option<u64>,
    /// Thrifty replication ([`super::thrift`]): a leader holds an append of writes back from
    /// the followers its quorum does not need for at most this long, ns, so they go several
    /// at a time; `None` sends every append at once. Needs [`Replica::observe_clock`] every
    /// pass, and a shell that wakes by [`Replica::next_release_ns`].
    pub thrifty_ns: Option<u64>,
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
            hold_while_in_flight: true,
            lease_ns: None,
            thrifty_ns: None,
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
    Snapshot(#[from] kairos_services::codec::DecodeError),
}

#[derive(Debug)]
struct InFlight {
    request: Request,
    proposed_tick: Option<u64>,
    /// Its place in the order writes were submitted: one proposed again goes back to it.
    submitted: u64,
}

#[derive(Debug)]
struct ReadRound {
    reads: Vec<(Ticket, ReadOp)>,
    asked_tick: u64,
    /// The member's clock when the round was first asked: a quorum that confirms it heard
    /// this leader at or after then (the leader's lease, [`ReplicaConfig::lease_ns`]).
    asked_ns: u64,
    /// The term this member led in when it asked, if it led.
    asked_leading: Option<u64>,
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
    /// Reads the leader answered under its lease, without a round to the followers.
    pub lease_reads: u64,
    /// Appends held back from a follower the quorum did not need ([`super::thrift`]).
    pub appends_held: u64,
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
    /// Writes submitted so far (each in flight holds its number).
    submissions: u64,
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
    /// The Ready begun ([`Replica::begin_ready`]) and not yet finished.
    pending_ready: Option<raft::Ready>,
    /// Whether the pending Ready is persisted already ([`Replica::persist_ready`]).
    ready_persisted: bool,
    /// Followers whose proposals the leader applied in this Ready: told of the commit at once.
    /// (follower, log index of its latest write applied here) until the follower is known to
    /// hold that entry and is told of its commit.
    commit_notices: BTreeMap<u64, u64>,
    /// The leader and term as last seen after a Ready: a new one gets what is in flight again
    /// at once.
    leader_seen: (u64, u64),
    /// The member's monotonic clock as last observed, ns.
    clock_ns: u64,
    /// The clock at the first observation: votes wait until the lease has passed since.
    started_ns: Option<u64>,
    /// The latest time a quorum is known to have heard this leader (its lease runs from it).
    lease_from_ns: Option<u64>,
    /// This leader's proposals not yet committed: (last log index after it, clock then).
    proposed_at: std::collections::VecDeque<(u64, u64)>,
    /// The appends held back from followers the quorum does not need, when thrifty.
    thrift: Option<Thrift>,
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
        let thrift = config.thrifty_ns.map(|hold_ns| Thrift::new(hold_ns, config.max_append_bytes));
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
            submissions: 0,
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
            pending_ready: None,
            ready_persisted: false,
            commit_notices: BTreeMap::new(),
            leader_seen: (0, 0),
            clock_ns: 0,
            started_ns: None,
            lease_from_ns: None,
            proposed_at: std::collections::VecDeque::new(),
            thrift,
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

    /// The highest log index this member knows committed.
    pub fn commit_index(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    /// On the leader, each other member's entries behind the leader's last (none elsewhere).
    pub fn follower_lag(&self) -> Vec<(u64, u64)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let last = self.node.raft.raft_log.last_index();
        let mut lag: Vec<(u64, u64)> = self
            .node
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != self.config.id)
            .map(|(id, pr)| (*id, last.saturating_sub(pr.matched)))
            .collect();
        lag.sort_unstable();
        lag
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
        ReplicaStats { appends_held: self.thrift.as_ref().map_or(0, |t| t.appends_held), ..self.stats }
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
        self.submissions += 1;
        self.in_flight.insert(ticket, InFlight { request, proposed_tick: None, submitted: self.submissions });
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

    /// A Raft message from another member (its Ready is the pass's, see the module doc).
    pub fn step(&mut self, msg: Message) {
        // A message for another member, or from one we never heard of, is the sender's
        // problem; `raft` reports it as an error, which we drop.
        if msg.to != self.config.id {
            return;
        }
        // No vote for anyone until a lease has passed since this member started: before a
        // restart it may have acknowledged a leader whose lease still runs.
        if let (Some(lease), Some(started)) = (self.config.lease_ns, self.started_ns)
            && self.clock_ns < started + lease
            && matches!(
                msg.get_msg_type(),
                raft::eraftpb::MessageType::MsgRequestVote | raft::eraftpb::MessageType::MsgRequestPreVote
            )
        {
            return;
        }
        let acknowledged = msg.get_msg_type() == raft::eraftpb::MessageType::MsgAppendResponse
            && self.commit_notices.contains_key(&msg.from);
        // A follower whose client waits on this leader gets its appends at once.
        if matches!(
            msg.get_msg_type(),
            raft::eraftpb::MessageType::MsgPropose | raft::eraftpb::MessageType::MsgReadIndex
        ) && let Some(thrift) = self.thrift.as_mut()
        {
            thrift.asked(msg.from, self.clock_ns);
        }
        let _ = self.node.step(msg);
        // A follower owed word of its write's commit acknowledged more of the log.
        if acknowledged {
            self.notify_commits();
        }
    }

    /// The member's monotonic clock now, ns: for the leader's lease. A shell calls it every
    /// pass, after it took the pass's requests and before [`Replica::flush`].
    pub fn observe_clock(&mut self, now_ns: u64) {
        self.clock_ns = self.clock_ns.max(now_ns);
        self.started_ns.get_or_insert(now_ns);
        if let Some(thrift) = self.thrift.as_mut() {
            thrift.release_due(self.clock_ns, &mut self.outbox);
        }
    }

    /// When appends held back from a follower ([`ReplicaConfig::thrifty_ns`]) are due to go,
    /// on this member's clock: the shell observes the clock by then, and sends what that
    /// released.
    pub fn next_release_ns(&self) -> Option<u64> {
        self.thrift.as_ref().and_then(Thrift::next_due_ns)
    }

    /// One tick of Raft's logical clock, then the waiting writes as one entry and reads as one
    /// read index, then retries of what was dropped. `now_ms` is the member's real time,
    /// written into the entry for the writes' expiry.
    pub fn tick(&mut self, now_ms: u64) {
        self.ticks += 1;
        self.now_ms = now_ms;
        self.node.tick();
        self.check_snapshots_sent();
        self.propose_waiting();
        self.ask_read_index();
    }

    /// Ticks from now until one that has work: the leader's heartbeat or quorum check, a
    /// follower's election timeout, or (1) a retry to watch over, a request waiting or a
    /// snapshot unacknowledged. A shell sleeps that long when nothing else wakes it and then
    /// calls [`Replica::tick`] once for every tick that passed, so an idle member costs no
    /// wake-up a tick and Raft's clock still runs as if it had ticked each one.
    pub fn ticks_until_due(&self) -> u64 {
        let raft = &self.node.raft;
        let busy = !self.in_flight.is_empty()
            || !self.waiting_reads.is_empty()
            || !self.read_rounds.is_empty()
            || !self.snapshots_sent.is_empty();
        if busy {
            return 1;
        }
        let due = match raft.state {
            StateRole::Leader => (raft.heartbeat_timeout().saturating_sub(raft.heartbeat_elapsed()))
                .min(raft.election_timeout().saturating_sub(raft.election_elapsed)),
            _ => raft.randomized_election_timeout().saturating_sub(raft.election_elapsed),
        };
        due.max(1) as u64
    }

    /// Proposes the writes and asks the read index of the requests taken since the last tick
    /// or flush, now rather than at the next tick: a shell that reads every ready client in
    /// one pass calls this after the pass, so a lone request waits for nothing while the
    /// requests of a busy pass (or of every pass while an entry is in flight) share one entry
    /// and one read index. `now_ms` is the member's real time, for the writes' expiry.
    pub fn flush(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        self.propose_waiting();
        self.ask_read_index();
    }

    /// Messages to send, each with its destination in `to`.
    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// Answers to give to clients.
    pub fn take_completions(&mut self) -> Vec<(Ticket, Reply)> {
        std::mem::take(&mut self.completions)
    }
}

#[cfg(test)]
mod tests;
