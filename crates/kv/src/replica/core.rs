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
//! pass was stepped, with [`Replica::begin_ready`] then [`Replica::finish_ready`] (or
//! [`Replica::ready`], both at once), taking [`Replica::take_messages`] to send after each and
//! [`Replica::take_completions`] (answers to give) at the end.
//!
//! The Ready protocol is followed as `raft` requires: a Ready's ordinary messages are released
//! by [`Replica::begin_ready`], before anything is persisted (a leader's appends go out while it
//! writes, and with `fsync` syncs, its own log: Raft thesis 10.2.1, so a write waits for the
//! leader's sync and the followers' in parallel, not in series); [`Replica::finish_ready`]
//! persists its snapshot, entries and hard state in one group before its *persisted* messages
//! (votes, append acknowledgements) are released, then applies committed entries, calls
//! `advance`, and handles the LightReady it returns in turn (its messages, its committed
//! entries). A leader that applies a write proposed through a follower tells that follower
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
use super::thrift::{self, Thrift};
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

    fn propose_waiting(&mut self) {
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
            stale.sort_unstable();
            self.stats.proposal_retries += stale.len() as u64;
            self.waiting_writes.extend(stale);
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
        let requests: Vec<Request> =
            tickets.iter().filter_map(|t| self.in_flight.get(t).map(|f| f.request.clone())).collect();
        if requests.is_empty() {
            return;
        }
        let data = Batch { now_ms: self.now_ms, requests }.encode();
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

    /// Finishes the Ready [`Replica::begin_ready`] began: persists, releases the persisted
    /// messages, applies, advances, and proposes the writes that waited for an entry in flight.
    pub fn finish_ready(&mut self) -> io::Result<()> {
        let Some(mut rd) = self.pending_ready.take() else { return Ok(()) };
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

    /// A leader whose proposal a quorum acknowledged (it is committed) was heard by that
    /// quorum at or after the proposal: its lease runs from then.
    fn renew_lease(&mut self) {
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
    /// after [`ReplicaConfig::retry_ticks`]; the store's sessions apply a write proposed twice
    /// once.
    fn follow_leader_change(&mut self) {
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
            again.append(&mut self.waiting_writes);
            again.sort_unstable();
            self.waiting_writes = again;
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

    /// Every Ready Raft has, begun and finished in turn, its messages left for
    /// [`Replica::take_messages`] (for a shell that has nothing to gain by sending a Ready's
    /// ordinary messages before it persists: the simulator, tests).
    pub fn ready(&mut self) -> io::Result<()> {
        while self.begin_ready() {
            self.finish_ready()?;
        }
        Ok(())
    }

    /// The leader's word to each follower whose write it applied: a heartbeat of Raft's
    /// carrying the commit index that follower may take (capped by what it holds, as Raft's
    /// own), marked as the detector's so its answer is not sent, once the follower is known to
    /// hold the write's entry (a quorum without it may have committed it: the word then waits
    /// for its acknowledgement, [`Replica::step`]). Without it a follower whose leader does not
    /// broadcast commits would answer its client only at the next append or heartbeat.
    fn notify_commits(&mut self) {
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

    fn read_index_confirmed(&mut self, ctx: &[u8], index: u64) {
        let Ok(bytes) = <[u8; 8]>::try_from(ctx) else { return };
        if let Some(round) = self.read_rounds.get_mut(&u64::from_le_bytes(bytes)) {
            round.index.get_or_insert(index);
            // A leader's round is confirmed by a quorum that heard it after it was asked.
            if self.node.raft.state == StateRole::Leader && round.asked_leading == Some(self.node.raft.term) {
                self.lease_from_ns = self.lease_from_ns.max(Some(round.asked_ns));
            }
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
                            if request.origin != self.config.id {
                                self.commit_notices.insert(request.origin, entry.index);
                            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::{MemDisk, Sync};
    use raft::eraftpb::ConfChangeType;

    /// Members in one process; every message delivered at once.
    struct Cluster(BTreeMap<u64, Replica<MemDisk>>);

    impl Cluster {
        fn new(voters: &[u64]) -> Self {
            Self::with(voters, |_| {})
        }

        /// Members whose settings `tweak` changes from [`member`]'s.
        fn with(voters: &[u64], tweak: impl Fn(&mut ReplicaConfig)) -> Self {
            Cluster(voters.iter().map(|&id| (id, member_with(id, voters, &tweak))).collect())
        }

        fn settle(&mut self, ticks: usize) {
            for _ in 0..ticks {
                let ids: Vec<u64> = self.0.keys().copied().collect();
                for id in &ids {
                    self.0.get_mut(id).unwrap().tick(0);
                }
                deliver_except(self, |_| false);
            }
        }

        fn leader(&self) -> u64 {
            self.0.values().find(|r| r.is_leader()).map(|r| r.id()).unwrap_or(0)
        }
    }

    fn member(id: u64, voters: &[u64]) -> Replica<MemDisk> {
        member_with(id, voters, |_| {})
    }

    fn member_with(id: u64, voters: &[u64], tweak: impl Fn(&mut ReplicaConfig)) -> Replica<MemDisk> {
        let log = LogStore::create(MemDisk::default(), Sync::Always, voters).unwrap();
        let mut config = ReplicaConfig::new(id);
        config.election_ticks = 10;
        config.fixed_election_ticks = Some(10 + id as usize);
        config.compact_after_entries = 20;
        tweak(&mut config);
        Replica::new(config, log).unwrap()
    }

    fn set(key: &str, value: &str) -> WriteOp {
        WriteOp::set(key, value)
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
        assert_eq!(
            c.0[&4].store().read(&ReadOp::words(&["DBSIZE"]), 0),
            Reply::Integer(50),
            "member 4 holds every key"
        );
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

    /// Delivers every message waiting, and those they cause, except those `keep_back` picks:
    /// returned undelivered.
    fn deliver_except(c: &mut Cluster, keep_back: impl Fn(&Message) -> bool) -> Vec<Message> {
        let mut kept = Vec::new();
        loop {
            let mut messages = Vec::new();
            for r in c.0.values_mut() {
                r.ready().unwrap();
                messages.extend(r.take_messages());
            }
            if messages.is_empty() {
                return kept;
            }
            for m in messages {
                if keep_back(&m) {
                    kept.push(m);
                } else if let Some(r) = c.0.get_mut(&m.to) {
                    r.step(m);
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
        c.0.get_mut(&leader).unwrap().flush(0);
        // The entry reaches the followers and the leader commits it, but the appends that
        // would carry the commit index on are lost.
        let first_appends = std::cell::Cell::new(0);
        deliver_except(&mut c, |m| {
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
        assert_eq!(c.0[&follower].store().read(&ReadOp::get("k"), 0), Reply::Nil);
        assert_eq!(c.0[&follower].commit_for(leader), None, "only the leader speaks for commits");

        // A wrong term, or an index the follower lacks, changes nothing and panics nowhere.
        let f = c.0.get_mut(&follower).unwrap();
        f.leader_commit(leader, term + 1, commit);
        f.leader_commit(leader, term, u64::MAX);
        f.ready().unwrap();
        assert!(f.applied() < commit);
        f.leader_commit(leader, term, commit);
        f.ready().unwrap();
        assert_eq!(f.applied(), commit, "applied from the heartbeat's commit index");
        assert_eq!(f.store().read(&ReadOp::get("k"), 0), Reply::Bulk(b"v".to_vec()));
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
        c.0.get_mut(&followers[0]).unwrap().leader_suspected(leader, true);
        c.settle(3);
        assert_eq!(c.leader(), leader);
        assert!(c.0.values().all(|r| r.term() == term && r.leader() == leader), "no term was spent");

        // The leader dies; both followers suspect it, the first in line campaigns at once.
        c.0.remove(&leader);
        c.0.get_mut(&followers[1]).unwrap().leader_suspected(leader, false);
        c.0.get_mut(&followers[0]).unwrap().leader_suspected(leader, true);
        c.settle(1);
        assert_eq!(c.leader(), followers[0], "elected within a tick, not the 10-tick timeout");
        assert_eq!(c.0[&followers[1]].leader(), followers[0]);
    }

    /// Every member's clock set to `now_ns`.
    fn clock(c: &mut Cluster, now_ns: u64) {
        for r in c.0.values_mut() {
            r.observe_clock(now_ns);
        }
    }

    #[test]
    fn a_leader_answers_reads_under_its_lease_at_once_and_asks_a_quorum_once_it_ran_out() {
        const LEASE: u64 = 5_000_000;
        let mut c = Cluster::with(&[1, 2, 3], |config| config.lease_ns = Some(LEASE));
        // No vote for anyone within a lease of the start: no leader until then.
        clock(&mut c, 1);
        c.settle(40);
        assert_eq!(c.leader(), 0, "votes refused within a lease of the start");
        clock(&mut c, 1 + LEASE);
        c.settle(40);
        let leader = c.leader();
        assert_ne!(leader, 0);
        // A write committed now starts the lease (a quorum acknowledged it).
        let t0 = 2 * LEASE;
        clock(&mut c, t0);
        let l = c.0.get_mut(&leader).unwrap();
        l.submit_write(Ticket { client: 1, seq: 1 }, 1, set("k", "v"));
        l.flush(0);
        c.settle(1);
        let answers = c.0.get_mut(&leader).unwrap().take_completions();
        assert!(answers.contains(&(Ticket { client: 1, seq: 1 }, Reply::Ok)), "{answers:?}");

        // Within the lease a read is answered by the flush itself, no message sent.
        clock(&mut c, t0 + LEASE / 2);
        let l = c.0.get_mut(&leader).unwrap();
        l.submit_read(Ticket { client: 1, seq: 2 }, ReadOp::get("k"));
        l.flush(0);
        l.ready().unwrap();
        assert!(l.take_messages().is_empty(), "no round to the followers under the lease");
        assert_eq!(l.take_completions(), vec![(Ticket { client: 1, seq: 2 }, Reply::Bulk(b"v".to_vec()))]);
        assert_eq!(l.stats().lease_reads, 1);

        // Past it, the read waits for a quorum's confirmation, which renews the lease.
        let t1 = t0 + LEASE + 1;
        clock(&mut c, t1);
        let l = c.0.get_mut(&leader).unwrap();
        l.submit_read(Ticket { client: 1, seq: 3 }, ReadOp::get("k"));
        l.flush(0);
        l.ready().unwrap();
        assert!(l.take_completions().is_empty(), "not answered before a quorum confirms");
        let sent = l.take_messages();
        assert!(!sent.is_empty(), "the read index round goes to the followers");
        for m in sent {
            c.0.get_mut(&m.to).unwrap().step(m);
        }
        deliver_except(&mut c, |_| false);
        let answers = c.0.get_mut(&leader).unwrap().take_completions();
        assert_eq!(answers, vec![(Ticket { client: 1, seq: 3 }, Reply::Bulk(b"v".to_vec()))]);
        clock(&mut c, t1 + LEASE / 2);
        let l = c.0.get_mut(&leader).unwrap();
        l.submit_read(Ticket { client: 1, seq: 4 }, ReadOp::get("k"));
        l.flush(0);
        assert_eq!(l.take_completions().len(), 1, "the confirmed round renewed the lease");
        assert_eq!(l.stats().lease_reads, 2);
    }

    #[test]
    fn writes_taken_while_an_entry_is_in_flight_go_as_one_entry_when_it_applies() {
        let mut c = Cluster::new(&[1, 2, 3]);
        c.settle(40);
        let leader = c.leader();
        let l = c.0.get_mut(&leader).unwrap();
        let proposals = l.stats().proposals;
        l.submit_write(Ticket { client: 1, seq: 1 }, 1, set("a", "1"));
        l.flush(0);
        // Three more while the first is in flight: they wait for it.
        for seq in 2..=4 {
            l.submit_write(Ticket { client: 1, seq }, seq, set("a", &seq.to_string()));
            l.flush(0);
        }
        assert_eq!(l.stats().proposals, proposals + 1, "one entry in flight, the rest held");
        deliver_except(&mut c, |_| false);
        let l = c.0.get_mut(&leader).unwrap();
        assert_eq!(l.stats().proposals, proposals + 2, "the held writes went as one entry");
        c.settle(2);
        let answers = c.0.get_mut(&leader).unwrap().take_completions();
        let seqs: Vec<u64> = answers.iter().map(|(t, _)| t.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4], "every write answered, in order");
        assert_eq!(c.0[&leader].store().read(&ReadOp::get("a"), 0), Reply::Bulk(b"4".to_vec()));
    }

    #[test]
    fn a_follower_hears_of_its_write_s_commit_at_once_when_commits_ride_on_heartbeats() {
        // Raft's commit broadcast skipped, as with the detector on.
        let mut c = Cluster::with(&[1, 2, 3], |config| config.commit_by_heartbeats = true);
        c.settle(40);
        let leader = c.leader();
        let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
        let f = c.0.get_mut(&follower).unwrap();
        f.submit_write(Ticket { client: 7, seq: 1 }, 1, set("f", "1"));
        f.flush(0);
        // Delivered until quiet, no tick: the leader's word of the commit is what answers.
        deliver_except(&mut c, |_| false);
        let answers = c.0.get_mut(&follower).unwrap().take_completions();
        assert_eq!(answers, vec![(Ticket { client: 7, seq: 1 }, Reply::Ok)]);

        // The other follower's acknowledgement commits the write first; the word goes once
        // the proposer's own acknowledgement comes.
        use raft::eraftpb::MessageType;
        let f = c.0.get_mut(&follower).unwrap();
        f.submit_write(Ticket { client: 7, seq: 2 }, 2, set("f", "2"));
        f.flush(0);
        let held = deliver_except(&mut c, |m| {
            m.from == follower && m.get_msg_type() == MessageType::MsgAppendResponse
        });
        assert!(
            c.0.get_mut(&follower).unwrap().take_completions().is_empty(),
            "not before its entry is committed"
        );
        assert!(!held.is_empty());
        for m in held {
            c.0.get_mut(&m.to).unwrap().step(m);
        }
        deliver_except(&mut c, |_| false);
        let answers = c.0.get_mut(&follower).unwrap().take_completions();
        assert_eq!(answers, vec![(Ticket { client: 7, seq: 2 }, Reply::Ok)]);
    }

    #[test]
    fn a_thrifty_leader_commits_with_the_follower_a_quorum_needs_and_sends_the_other_s_appends_later() {
        const HOLD: u64 = 1_000_000;
        // Commits ride on the detector's heartbeats, as in a member with the detector on.
        let mut c = Cluster::with(&[1, 2, 3], |config| {
            config.thrifty_ns = Some(HOLD);
            config.commit_by_heartbeats = true;
        });
        clock(&mut c, 1);
        c.settle(40);
        let leader = c.leader();
        let others: Vec<u64> = [1, 2, 3].into_iter().filter(|&id| id != leader).collect();
        let write = |c: &mut Cluster, seq: u64| {
            let l = c.0.get_mut(&leader).unwrap();
            l.submit_write(Ticket { client: 1, seq }, seq, set("k", &seq.to_string()));
            l.flush(0);
            deliver_except(c, |_| false);
            c.0.get_mut(&leader).unwrap().take_completions()
        };
        // Every follower holds the log so far: the lowest id is the one the quorum needs.
        let (needed, spared) = (others[0], others[1]);
        let spared_before = c.0[&spared].log().last_index().unwrap();
        for seq in 1..=3 {
            assert_eq!(write(&mut c, seq), vec![(Ticket { client: 1, seq }, Reply::Ok)], "committed at once");
        }
        assert_eq!(c.0[&spared].log().last_index().unwrap(), spared_before, "its appends held back");
        assert!(c.0[&needed].log().last_index().unwrap() > spared_before);
        assert_eq!(c.0[&leader].stats().appends_held, 3);
        assert_eq!(c.0[&leader].next_release_ns(), Some(1 + HOLD));
        // Due: the three appends go together, in order, and the follower catches up.
        clock(&mut c, 1 + HOLD);
        deliver_except(&mut c, |_| false);
        assert_eq!(c.0[&spared].log().last_index().unwrap(), c.0[&needed].log().last_index().unwrap());
        assert_eq!(c.0[&leader].next_release_ns(), None);

        // A follower that forwards a write gets its appends at once: answered with no clock moved.
        let l = c.0.get_mut(&leader).unwrap();
        let held = l.stats().appends_held;
        let f = c.0.get_mut(&spared).unwrap();
        f.submit_write(Ticket { client: 9, seq: 1 }, 1, set("f", "1"));
        f.flush(0);
        deliver_except(&mut c, |_| false);
        assert_eq!(
            c.0.get_mut(&spared).unwrap().take_completions(),
            vec![(Ticket { client: 9, seq: 1 }, Reply::Ok)]
        );
        assert_eq!(c.0[&leader].stats().appends_held, held);

        // The needed follower stops answering: the write waits for the hold, then commits with
        // the other, which is needed from then on (once no longer eager).
        let t = 1 + HOLD + thrift::EAGER_NS;
        clock(&mut c, t);
        let l = c.0.get_mut(&leader).unwrap();
        l.submit_write(Ticket { client: 1, seq: 4 }, 4, set("k", "4"));
        l.flush(0);
        let lost = |m: &Message| m.to == needed || m.from == needed;
        deliver_except(&mut c, lost);
        assert!(c.0.get_mut(&leader).unwrap().take_completions().is_empty(), "no quorum within the hold");
        clock(&mut c, t + HOLD);
        deliver_except(&mut c, lost);
        assert_eq!(
            c.0.get_mut(&leader).unwrap().take_completions(),
            vec![(Ticket { client: 1, seq: 4 }, Reply::Ok)]
        );
        let l = c.0.get_mut(&leader).unwrap();
        l.submit_write(Ticket { client: 1, seq: 5 }, 5, set("k", "5"));
        l.flush(0);
        deliver_except(&mut c, lost);
        assert_eq!(
            c.0.get_mut(&leader).unwrap().take_completions(),
            vec![(Ticket { client: 1, seq: 5 }, Reply::Ok)],
            "the other follower is now the one needed: at once"
        );
    }
}
