//! A cluster of [`Replica`]s on the simulated [`Network`], with clients that record a history
//! and a fault schedule, all driven by one seed: the same seed gives the same run.
//!
//! Time is simulated microseconds and advances from event to event (a message due, a
//! member's tick, a client's next request or time-out, a fault), so a second of cluster time
//! costs only the work the members do in it. Members tick every [`SimConfig::tick_us`] at
//! their own phase. Faults, each drawn from the kinds asked for:
//! - **crash**: a member (the leader or a follower) stops like `kill -9`: what it had written
//!   stays in the page cache, the rest is gone; it restarts from its log after a while;
//! - **power loss** (only with `fsync` on): as a crash, but only what was synced survives;
//! - **partition**: a member is cut off from all others, then the links come back;
//! - **loss**: every message is dropped with some probability for a while;
//! - **pause**: a member stops (SIGSTOP) and resumes (SIGCONT): what was sent to it waits.
//!
//! Members run the failure detector of a real member ([`crate::member::watch`]) when
//! [`SimConfig::detector`] says so (three seeds in four by default): its heartbeats travel the
//! same network, suffer the same faults, carry the leader's commit index, and a suspicion of
//! the leader starts an election at once. With delays up to 200 us against a 200 us threshold,
//! false suspicions are common: the run checks that they cost nothing in correctness.
//!
//! Clients issue one request at a time to one member and time each from invocation to
//! answer; a request unanswered after [`SimConfig::request_timeout_us`], or whose member
//! crashed, has an unknown outcome and its client is replaced by a new one (as Jepsen
//! retires a process), so an unknown operation never overlaps a later one of the same client.
//!
//! The members and the loop from event to event are here; the clients and their history in
//! `clients`, the faults in `faults`.

mod clients;
mod faults;

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::network::Network;
use crate::kv::Reply;
use crate::member::watch::{Act, Fanout, Watch, WatchConfig};
use crate::replica::wire::{decode_message, encode_message};
use crate::replica::{Broken, LogStore, MemDisk, ReadMode, Replica, ReplicaConfig, Sync, Ticket};
use kairos_fd::wire::{Datagram, MAGIC, decode};

/// The kinds of fault a run may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The leader crashes and restarts.
    CrashLeader,
    /// A follower crashes and restarts.
    CrashFollower,
    /// A member loses power: only what it synced survives (with fsync on).
    PowerLoss,
    /// A member is cut off, then rejoins.
    Partition,
    /// Messages are lost at random.
    Loss,
    /// A member is paused, then resumed.
    Pause,
    /// A follower is cut off and removed from the membership while cut off; once the links
    /// come back it is added again (the case where Jepsen found RedisRaft losing updates).
    MembershipChange,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::CrashLeader,
        FaultKind::CrashFollower,
        FaultKind::PowerLoss,
        FaultKind::Partition,
        FaultKind::Loss,
        FaultKind::Pause,
    ];
}

/// One simulated run's settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed: everything random in the run comes from it.
    pub seed: u64,
    /// Members (voters) of the cluster.
    pub members: usize,
    /// Clients at once.
    pub clients: usize,
    /// Keys the clients use.
    pub keys: usize,
    /// Cluster time the clients run for, microseconds.
    pub duration_us: u64,
    /// The members' period, microseconds.
    pub tick_us: u64,
    /// One-way message delay range, microseconds.
    pub delay_us: (u64, u64),
    /// A request with no answer after this long has an unknown outcome.
    pub request_timeout_us: u64,
    /// Faults to inject (none: a quiet run).
    pub faults: Vec<FaultKind>,
    /// Mean time between faults, microseconds.
    pub fault_every_us: u64,
    /// Whether the log is synced.
    pub sync: Sync,
    /// How reads are answered.
    pub read_mode: ReadMode,
    /// A deliberate fault (the checker's self-test).
    pub broken: Option<Broken>,
    /// Log entries kept before compaction (small, to exercise snapshots).
    pub compact_after_entries: u64,
    /// The members' failure detector (`None`: elections by Raft's timeout alone).
    pub detector: Option<WatchConfig>,
    /// What the clients do.
    pub workload: Workload,
    /// A deliberate fault of the list-append workload's transactions: each is proposed as two
    /// transactions in two entries (the checker's self-test for atomicity).
    pub split_transactions: bool,
}

/// What the simulated clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// GET, SET, INCR, APPEND on single keys, judged by the linearizability checker.
    Register,
    /// MULTI/EXEC of RPUSH and LRANGE on a few keys (Jepsen's list-append), judged for strict
    /// serializability by [`super::list_append`].
    ListAppend,
}

impl SimConfig {
    /// A list-append run: three keys, every fault kind and membership changes.
    pub fn list_append(seed: u64) -> Self {
        let mut config = Self::new(seed);
        config.workload = Workload::ListAppend;
        config.keys = 3;
        config.faults.push(FaultKind::MembershipChange);
        config
    }

    /// Three members, six clients on eight keys, half a second, every fault kind.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            members: 3,
            clients: 6,
            keys: 8,
            duration_us: 500_000,
            tick_us: 100,
            delay_us: (20, 200),
            request_timeout_us: 50_000,
            faults: FaultKind::ALL.to_vec(),
            fault_every_us: 60_000,
            sync: Sync::Always,
            read_mode: ReadMode::ReadIndex,
            broken: None,
            compact_after_entries: 200,
            // Three seeds in four run the detector (one of them with every member watching
            // every other, two with the leader's heartbeats alone, the default); the rest keep
            // Raft's timeout alone in the volume too.
            workload: Workload::Register,
            split_transactions: false,
            detector: (!seed.is_multiple_of(4)).then_some(WatchConfig {
                period_ns: 100_000,
                lambda_ns: 200_000,
                fanout: if seed % 4 == 1 { Fanout::All } else { Fanout::Leader },
                // The simulated network answers no probe (a crashed member's port does not
                // refuse): a crash is found by silence alone, the slower path.
                probe_ns: None,
            }),
        }
    }
}

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// GET.
    Get,
    /// SET to a value no other write uses.
    Set(Vec<u8>),
    /// INCR.
    Incr,
    /// APPEND of a token no other write uses.
    Append(Vec<u8>),
    /// MULTI, then RPUSHes (of values no other write uses) and LRANGEs, then EXEC.
    Txn(Vec<Micro>),
}

/// One command of a list-append transaction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Micro {
    /// RPUSH key value.
    Append(Vec<u8>, u64),
    /// LRANGE key 0 -1.
    Read(Vec<u8>),
}

impl Micro {
    fn words(&self) -> Vec<Vec<u8>> {
        match self {
            Micro::Append(key, value) => vec![b"RPUSH".to_vec(), key.clone(), value.to_string().into_bytes()],
            Micro::Read(key) => vec![b"LRANGE".to_vec(), key.clone(), b"0".to_vec(), b"-1".to_vec()],
        }
    }
}

/// One request in the history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SimOp {
    /// The client (unique over the run).
    pub client: u64,
    /// The key.
    pub key: Vec<u8>,
    /// The request.
    pub kind: OpKind,
    /// The answer, or `None` when the outcome is unknown.
    pub output: Option<Reply>,
    /// When it was sent, microseconds.
    pub call_us: u64,
    /// When its answer came (`None`: never).
    pub return_us: Option<u64>,
}

/// A fault injected, for the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FaultEvent {
    /// When it started, microseconds.
    pub at_us: u64,
    /// What it was.
    pub kind: FaultKind,
    /// The member it hit (0: all).
    pub member: u64,
    /// How long it lasted, microseconds.
    pub lasted_us: u64,
}

/// What a run produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimOutcome {
    /// The seed.
    pub seed: u64,
    /// Every request, in invocation order.
    pub history: Vec<SimOp>,
    /// Faults injected.
    pub faults: Vec<FaultEvent>,
    /// Acknowledged APPENDs missing from the final value of their key (and not possibly
    /// replaced by a later SET); `None` when the final reads failed.
    pub lost_acknowledged_writes: Option<u64>,
    /// Messages sent and lost.
    pub messages: (u64, u64),
    /// Leader elections seen (distinct terms with a leader).
    pub terms: u64,
    /// Simulated time, while clients ran, that no running member was leader, microseconds.
    pub leaderless_us: u64,
    /// The list-append check (that workload only; `None` also when the final reads failed).
    pub list_append: Option<super::list_append::ListAppendReport>,
    /// Membership changes applied (removals and additions, as member 1 applied them).
    pub membership_changes: u64,
}

enum MemberState {
    Up(Box<Replica<MemDisk>>),
    Paused { replica: Box<Replica<MemDisk>>, until_us: u64, held: Vec<Vec<u8>> },
    Down { disk: MemDisk, until_us: u64 },
}

struct Client {
    id: u64,
    member: u64,
    seq: u64,
    waiting: Option<(usize, u64)>,
    next_at_us: u64,
    /// In the split-transactions fault: the first half's sequence number and its answer.
    first_half: Option<(u64, Option<Reply>)>,
}

struct Sim {
    config: SimConfig,
    rng: StdRng,
    now_us: u64,
    network: Network,
    members: Vec<MemberState>,
    /// Each member's failure detector (when on), replaced at its restart.
    watches: Vec<Option<Watch>>,
    phase_us: Vec<u64>,
    clients: Vec<Client>,
    client_slots: BTreeMap<u64, usize>,
    next_client_id: u64,
    history: Vec<SimOp>,
    faults: Vec<FaultEvent>,
    heal_at_us: Option<u64>,
    leader_terms: std::collections::BTreeSet<u64>,
    leaderless_us: u64,
    /// The list-append workload's next value.
    next_value: u64,
    /// A member removed while cut off, to add again once the links are back.
    readd: Option<u64>,
    /// Membership changes applied (removals and additions).
    membership_changes: u64,
    /// Answers to the list-append run's final reads (clients above [`FINAL_READERS`]).
    final_answers: Vec<(Ticket, Reply)>,
}

/// Client ids above this are the final reads of a list-append run.
const FINAL_READERS: u64 = u64::MAX - 1_000;

fn replica_config(config: &SimConfig, id: u64, rng: &mut StdRng) -> ReplicaConfig {
    let mut rc = ReplicaConfig::new(id);
    rc.read_mode = config.read_mode;
    rc.broken = config.broken;
    rc.compact_after_entries = config.compact_after_entries;
    rc.fixed_election_ticks = Some(rng.random_range(rc.election_ticks..2 * rc.election_ticks));
    rc.commit_by_heartbeats = config.detector.is_some();
    // Thrifty replication, as a member process on UDP holds appends.
    rc.thrifty_ns = Some(crate::member::default_thrifty_us(false) * 1_000);
    // The leader's lease, as a member process sets it: the shorter of the detector's timeout
    // and Raft's, less a tenth.
    if let Some(d) = config.detector {
        let election_ns = rc.election_ticks as u64 * config.tick_us * 1_000;
        let follower_waits = (d.period_ns + d.lambda_ns).min(election_ns);
        rc.lease_ns = Some(follower_waits - follower_waits / 10);
    }
    rc
}

impl Sim {
    fn new(config: SimConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(config.seed);
        let voters: Vec<u64> = (1..=config.members as u64).collect();
        let mut members = Vec::new();
        let mut phase_us = Vec::new();
        for &id in &voters {
            let log =
                LogStore::create(MemDisk::default(), config.sync, &voters).expect("memory disk cannot fail");
            let rc = replica_config(&config, id, &mut rng);
            members.push(MemberState::Up(Box::new(Replica::new(rc, log).expect("a fresh replica starts"))));
            phase_us.push(rng.random_range(0..config.tick_us));
        }
        let network = Network::new(config.delay_us.0, config.delay_us.1);
        let watches = voters.iter().map(|&id| Self::watch(&config, id, 0)).collect();
        let mut sim = Sim {
            rng,
            now_us: 0,
            network,
            members,
            watches,
            phase_us,
            clients: Vec::new(),
            client_slots: BTreeMap::new(),
            next_client_id: 1,
            history: Vec::new(),
            faults: Vec::new(),
            heal_at_us: None,
            leader_terms: Default::default(),
            leaderless_us: 0,
            next_value: 0,
            readd: None,
            membership_changes: 0,
            final_answers: Vec::new(),
            config,
        };
        for slot in 0..sim.config.clients {
            let member = sim.rng.random_range(1..=sim.config.members as u64);
            let id = sim.new_client_id(slot);
            sim.clients.push(Client {
                id,
                member,
                seq: 0,
                waiting: None,
                next_at_us: 10_000,
                first_half: None,
            });
        }
        sim
    }

    /// Member `id`'s detector, started at `now_us` (its start time is its incarnation).
    fn watch(config: &SimConfig, id: u64, now_us: u64) -> Option<Watch> {
        let peers = 1..=config.members as u64;
        config.detector.map(|wc| Watch::new(wc, id, peers, now_us * 1_000 + 1, now_us * 1_000))
    }

    fn new_client_id(&mut self, slot: usize) -> u64 {
        let id = self.next_client_id;
        self.next_client_id += 1;
        self.client_slots.insert(id, slot);
        id
    }

    fn replica(&mut self, id: u64) -> Option<&mut Replica<MemDisk>> {
        match &mut self.members[(id - 1) as usize] {
            MemberState::Up(r) => Some(r),
            _ => None,
        }
    }

    fn leader(&self) -> Option<u64> {
        self.members.iter().find_map(|m| match m {
            MemberState::Up(r) if r.is_leader() => Some(r.id()),
            _ => None,
        })
    }

    /// Sends what member `id` produced and records its answers.
    fn drain(&mut self, id: u64) {
        let Some(replica) = self.replica(id) else { return };
        // The member's pass ends with its one Ready, as a member process's does.
        replica.ready().expect("memory disk cannot fail");
        let messages = replica.take_messages();
        let completions = replica.take_completions();
        let changes = replica.take_membership_events().len() as u64;
        if replica.is_leader() {
            let term = replica.term();
            self.leader_terms.insert(term);
        }
        if id == 1 {
            self.membership_changes += changes;
        }
        for msg in messages {
            if let Some(watch) = self.watches[(id - 1) as usize].as_mut() {
                watch.sent_to(msg.to, self.now_us * 1_000);
            }
            let mut bytes = Vec::new();
            encode_message(&msg, &mut bytes);
            let to = msg.to;
            self.network.send(&mut self.rng, self.now_us, id, to, bytes);
        }
        for (ticket, reply) in completions {
            self.complete(id, ticket, reply);
        }
    }

    fn next_event_us(&self, clients_active: bool) -> u64 {
        let mut next = u64::MAX;
        for (i, m) in self.members.iter().enumerate() {
            let t = match m {
                MemberState::Up(_) => {
                    let phase = self.phase_us[i];
                    let k = (self.now_us.saturating_sub(phase)) / self.config.tick_us + 1;
                    phase + k * self.config.tick_us
                }
                MemberState::Paused { until_us, .. } | MemberState::Down { until_us, .. } => *until_us,
            };
            next = next.min(t);
        }
        for c in &self.clients {
            match c.waiting {
                Some((op, _)) => next = next.min(self.history[op].call_us + self.config.request_timeout_us),
                None if clients_active => next = next.min(c.next_at_us),
                None => {}
            }
        }
        if let Some(h) = self.heal_at_us {
            next = next.min(h);
        }
        // Time always moves: an event already due is handled at the next microsecond.
        next.max(self.now_us + 1)
    }

    fn run_until(&mut self, end_us: u64, clients_active: bool, faults_active: bool) {
        let mut next_fault_us = self.now_us + self.config.fault_every_us;
        while self.now_us < end_us {
            let mut next = self.next_event_us(clients_active).min(end_us);
            if faults_active && !self.config.faults.is_empty() {
                next = next.min(next_fault_us);
            }
            // Messages due before then are delivered first, each at its own time.
            while let Some(msg) = self.network.deliver(next) {
                self.now_us = self.now_us.max(msg.deliver_at_us);
                self.deliver(msg.to, msg.bytes);
            }
            if clients_active && self.leader().is_none() {
                self.leaderless_us += next - self.now_us;
            }
            self.now_us = next;
            if faults_active && !self.config.faults.is_empty() && self.now_us >= next_fault_us {
                self.inject_fault();
                let mean = self.config.fault_every_us;
                next_fault_us = self.now_us + self.rng.random_range(mean / 2..=mean * 3 / 2);
            }
            if self.heal_at_us.is_some_and(|t| t <= self.now_us) {
                self.network.heal();
                self.network.loss = 0.0;
                self.heal_at_us = None;
            }
            self.wake_members();
            self.tick_members();
            self.readd_member();
            self.serve_clients(clients_active);
        }
    }

    fn deliver(&mut self, to: u64, bytes: Vec<u8>) {
        let now_ns = self.now_us * 1_000;
        if let MemberState::Up(replica) = &mut self.members[(to - 1) as usize] {
            replica.observe_clock(now_ns);
        }
        match &mut self.members[(to - 1) as usize] {
            MemberState::Up(replica) if bytes.starts_with(&MAGIC) => {
                let Ok(Datagram::Replica { heartbeat, term, commit }) = decode(&bytes) else {
                    unreachable!("the simulator's own heartbeat decodes")
                };
                if let Some(watch) = self.watches[(to - 1) as usize].as_mut() {
                    watch.heard(&heartbeat, self.now_us * 1_000, self.now_us * 1_000);
                }
                if term != 0 {
                    replica.leader_commit(heartbeat.member, term, commit);
                    self.drain(to);
                }
            }
            MemberState::Up(replica) => {
                let msg = decode_message(&bytes).expect("the simulator's own encoding decodes");
                if let Some(watch) = self.watches[(to - 1) as usize].as_mut() {
                    watch.heard_from(msg.from, self.now_us * 1_000, self.now_us * 1_000);
                }
                replica.step(msg);
                self.drain(to);
            }
            MemberState::Paused { held, .. } => held.push(bytes),
            MemberState::Down { .. } => {}
        }
    }

    fn wake_members(&mut self) {
        for i in 0..self.members.len() {
            let id = i as u64 + 1;
            let now = self.now_us;
            let state = std::mem::replace(
                &mut self.members[i],
                MemberState::Down { disk: MemDisk::default(), until_us: 0 },
            );
            self.members[i] = match state {
                MemberState::Paused { replica, until_us, held } if until_us <= now => {
                    self.members[i] = MemberState::Up(replica);
                    for bytes in held {
                        self.deliver(id, bytes);
                    }
                    continue;
                }
                MemberState::Down { disk, until_us } if until_us <= now => {
                    let (log, _) = LogStore::load(disk, self.config.sync).expect("memory disk cannot fail");
                    let rc = replica_config(&self.config, id, &mut self.rng);
                    self.watches[i] = Self::watch(&self.config, id, now);
                    MemberState::Up(Box::new(Replica::new(rc, log).expect("a logged replica restarts")))
                }
                other => other,
            };
        }
    }

    fn tick_members(&mut self) {
        for i in 0..self.members.len() {
            let id = i as u64 + 1;
            let phase = self.phase_us[i];
            if self.now_us < phase || !(self.now_us - phase).is_multiple_of(self.config.tick_us) {
                continue;
            }
            let (now_ms, now_ns) = (self.now_us / 1000, self.now_us * 1_000);
            if let Some(replica) = self.replica(id) {
                replica.observe_clock(now_ns);
                replica.tick(now_ms);
                self.drain(id);
                self.watch_pass(id);
            }
        }
    }

    /// Member `id`'s detector at its tick: the counter, the heartbeats, and a suspicion's act.
    fn watch_pass(&mut self, id: u64) {
        let i = (id - 1) as usize;
        let now_ns = self.now_us * 1_000;
        let (MemberState::Up(replica), Some(watch)) = (&mut self.members[i], self.watches[i].as_mut()) else {
            return;
        };
        watch.bump();
        watch.follow(replica.leader(), now_ns, || replica.voters());
        let (network, rng, now_us) = (&mut self.network, &mut self.rng, self.now_us);
        let mut out = Vec::new();
        let peers = 1..=self.config.members as u64;
        watch.send_due(
            now_ns,
            peers,
            |peer| replica.commit_for(peer),
            &mut out,
            |peer, bytes| network.send(rng, now_us, id, peer, bytes.to_vec()),
        );
        let leader = replica.leader();
        watch.observe_term(replica.term());
        if let Some(Act::Suspect { leader, campaign }) = watch.poll(now_ns, leader, || replica.voters()) {
            replica.leader_suspected(leader, campaign);
            self.drain(id);
        }
    }
}

/// Acknowledged appends missing from their key's final value, unless a SET that may be
/// ordered after them replaced them.
pub fn lost_writes(history: &[SimOp], finals: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> u64 {
    let mut lost = 0;
    for op in history {
        let Some(output) = &op.output else { continue };
        let final_value = finals.get(&op.key).cloned().flatten().unwrap_or_default();
        if let (OpKind::Append(token), Reply::Integer(_)) = (&op.kind, output) {
            // A SET that may come after the append in some linearization replaced it
            // legitimately: one that returned after the append was called, or one whose
            // outcome is unknown (it may take effect at any time after its call).
            let overwritten = history.iter().any(|o| {
                o.key == op.key
                    && matches!(o.kind, OpKind::Set(_))
                    && match (&o.output, o.return_us) {
                        (Some(_), Some(returned)) => returned > op.call_us,
                        _ => true,
                    }
            });
            if !overwritten && !final_value.windows(token.len()).any(|w| w == &token[..]) {
                lost += 1;
            }
        }
    }
    lost
}

/// Runs one seeded simulation.
pub fn run(config: SimConfig) -> SimOutcome {
    let seed = config.seed;
    let duration = config.duration_us;
    let list_workload = config.workload == Workload::ListAppend;
    let mut sim = Sim::new(config);
    sim.run_until(duration, true, true);
    let (lost, list_append) = if list_workload {
        let report = sim.final_lists().map(|f| super::list_append::check(&sim.history, &f));
        (report.as_ref().map(|r| r.lost), report)
    } else {
        let finals = sim.final_reads();
        (finals.map(|f| lost_writes(&sim.history, &f)), None)
    };
    SimOutcome {
        seed,
        history: sim.history,
        faults: sim.faults,
        lost_acknowledged_writes: lost,
        messages: (sim.network.sent, sim.network.dropped),
        terms: sim.leader_terms.len() as u64,
        leaderless_us: sim.leaderless_us,
        list_append,
        membership_changes: sim.membership_changes,
    }
}

#[cfg(test)]
mod tests;
