//! A member's failure detector: heartbeats to and from the other members every period, the
//! leader's commit index riding on them, and what a suspicion of the leader makes this member
//! do.
//!
//! # Mechanism
//!
//! Every `period` (the loop's, 100 us by default) the member sends each other member a
//! heartbeat ([`kairos_fd::wire`]'s replica kind) on its Raft socket: its incarnation (the start
//! time, so a restarted member is told from its previous life), a sequence number, its liveness
//! counter (bumped by every pass of the member's loop, so a member whose loop hangs, stopped by
//! SIGSTOP or stuck in a write, is suspected like a dead one) and, from the leader, its term and
//! the commit index the receiver may take ([`Replica::commit_for`](crate::replica::core::Replica::commit_for)). The receiver feeds the
//! heartbeat to the detector ([`kairos_fd::Detector`]: suspected after `period + lambda`
//! without a fresh one) and the commit index to its replica ([`Replica::leader_commit`](crate::replica::core::Replica::leader_commit)), so
//! followers learn commits without Raft messages of their own.
//!
//! # Policy: who sends heartbeats to whom ([`Fanout`])
//!
//! A store needs its detector for one verdict: whether the leader is gone. So by default only
//! the leader sends (to each follower), and a follower watches only the leader it follows
//! ([`Fanout::Leader`]): with three members, two datagrams a period instead of six, and no
//! follower wakes to send. On a loopback each datagram costs its sender the receiver's packet
//! work as well, so all-to-all heartbeats cost three idle members 65-68% of a core against
//! 51-52% (`scripts/kv-idle-cost`, with and without `-- --fd-fanout all`). [`Fanout::All`]
//! keeps every member watching every other (what `kairos fd` measures), for INFO's view of the
//! whole group; on the lane, where a member's heartbeats to all are one packet, it is the
//! command line's default.
//!
//! # Policy: who campaigns when the leader is suspected
//!
//! Every member that suspects the leader stops honouring its lease at once, so that it grants
//! the votes of whoever campaigns. Then the voters this member still trusts (the leader left
//! out) are ranked by id; the first campaigns at once, the k-th after k times
//! [`STAGGER_PERIODS`]: one candidate at a time rarely splits the vote, and if the first is
//! behind (its log cannot win) or dead, the next one stands soon after. A member keeps trying
//! every [`RETRY_PERIODS`] while it has no leader other than the suspected one; a heartbeat of
//! the suspected leader ends it (a false suspicion: pre-vote kept the term). Raft's own
//! election timeout stays the backstop.
//!
//! Work per call: O(members); nothing allocates after [`Watch::new`] but the events pushed to
//! a reused vector.

use kairos_fd::wire::{Heartbeat, encode_replica_heartbeat};
use kairos_fd::{Detector, DetectorConfig, Event};

/// Periods between the campaigns of two members next in line (at most [`STAGGER_MAX_NS`]).
pub const STAGGER_PERIODS: u64 = 10;
/// Periods between a member's tries while no new leader has appeared (at most
/// [`RETRY_MAX_NS`]).
pub const RETRY_PERIODS: u64 = 10;
/// How many timeouts (`T + Lambda`) after its deadline a backup watcher wakes to judge its
/// leader when nothing else woke it (see `Watch::backup`).
pub const BACKUP_TIMEOUTS: u64 = 3;

/// A wake-up later than this (or a quarter of Lambda, if less) is the machine's doing, not the
/// timer's: see [`Watch::woke_late`].
pub const LATE_WAKE_NS: u64 = 500_000;

/// The longest time between a member's tries: a try that failed was most often refused by a
/// member that had not suspected the leader yet, and does within its scheduling jitter; a
/// pre-vote that fails costs no term.
pub const RETRY_MAX_NS: u64 = 250_000;
/// The longest stagger or retry, unless a period is longer: members suspect a dead leader
/// within their scheduling jitter of each other, so a candidate refused by one that had not
/// suspected yet stands again soon, whatever the period.
pub const STAGGER_MAX_NS: u64 = 1_000_000;

/// The threshold Lambda a member uses unless told otherwise, us: on UDP 100,000, longer than a
/// shared machine's stalls of a live leader's process (on this project's 2-vCPU virtual
/// machine, INFO `fd_leader_gap_max_us` of three idle members reached 34 ms in ten minutes
/// while other work ran, and 49 ms in another cluster beside it; at 3,000 that was an election
/// every 20-40 s, at 20,000 one in ten minutes, at 100,000 none), while a leader whose process
/// died is found in a few milliseconds all the same: its port is probed `T` plus
/// [`DEFAULT_PROBE_US`] after its last word, and a closed port answers at once
/// ([`WatchConfig::probe_ns`]); only a leader that falls silent alive (stopped, or its host
/// cut off or gone) waits for Lambda. On the lane, where no such answer comes, 2,000 (a
/// heartbeat waits up to a period for its tunnel's release and is read at the receiver's next
/// look at its inbox; with nodes that sleep on shared cores, 200 us made a thousand or more
/// false suspicions a second at each member, 2,000 about three). The log's sync does not change
/// it: the leader's sync no longer stands between its heartbeats.
pub fn default_lambda_us(_synced: bool, on_lane: bool) -> u64 {
    if on_lane { 2_000 } else { 100_000 }
}

/// How long after the period a silent leader's port is probed unless told otherwise, us
/// ([`WatchConfig::probe_ns`]).
pub const DEFAULT_PROBE_US: u64 = 2_000;

/// Who sends heartbeats to whom; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fanout {
    /// Every member to every other; each watches all.
    All,
    /// The leader to its followers; a follower watches its leader, the leader no one.
    #[default]
    Leader,
}

impl std::fmt::Display for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fanout::All => "all",
            Fanout::Leader => "leader",
        })
    }
}

/// The detector's settings in a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    /// The heartbeat period `T`, ns.
    pub period_ns: u64,
    /// The threshold Lambda, ns: a member is suspected after `T + Lambda` without a fresh
    /// heartbeat.
    pub lambda_ns: u64,
    /// Who sends heartbeats to whom.
    pub fanout: Fanout,
    /// After `T` plus this long without a word from the leader it follows, a follower asks
    /// the leader's port (see [`Watch::probe_due`]): a closed port answers at once (ICMP port
    /// unreachable), so a leader whose process died is suspected then, not after Lambda.
    /// `None`: silence alone (where no such answer comes, as on the lane).
    pub probe_ns: Option<u64>,
}

/// Whom a member watches under [`Fanout::Leader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// No leader known yet: no one watched, nothing sent.
    Unknown,
    /// Following this leader: watching it alone.
    Following(u64),
    /// Leading: sending to every follower, watching no one.
    Leading,
}

/// Counters for INFO.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Heartbeats sent.
    pub heartbeats_out: u64,
    /// Heartbeats received from members of the table.
    pub heartbeats_in: u64,
    /// Times a member was suspected.
    pub suspicions: u64,
    /// Times the leader was suspected.
    pub leader_suspicions: u64,
    /// Campaigns started on a suspicion.
    pub campaigns: u64,
    /// Times the member's loop woke late enough to give the members it watches a grace
    /// ([`Watch::woke_late`]).
    pub late_wakes: u64,
    /// The longest silence of the leader this member follows, between two words from it
    /// (heartbeats at their kernel stamps, Raft's messages when read), ns: how long the
    /// machine stopped that leader, or lost its words, at worst. Kept by the follower first in
    /// line only (a backup reads its heartbeats late).
    pub leader_gap_max_ns: u64,
    /// Silences of the followed leader longer than the detector's timeout (`T + Lambda`):
    /// each made this member suspect a leader that was alive.
    pub leader_gaps_over_timeout: u64,
    /// Probes of a silent leader's port sent ([`Watch::probe_due`]).
    pub probes: u64,
    /// Probes the leader's host refused (its port closed: the leader's process is gone).
    pub probes_refused: u64,
}

/// What the replica is asked to do about a suspected leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Stop honouring `leader`'s lease; campaign when `campaign`.
    Suspect {
        /// The suspected leader.
        leader: u64,
        /// Whether to stand for election now.
        campaign: bool,
    },
}

#[derive(Debug, Clone, Copy)]
struct Suspicion {
    leader: u64,
    /// When to campaign (again); `None` until the first poll after the suspicion.
    next_campaign_ns: Option<u64>,
    /// The newest Raft term this member had seen when it last planned a campaign.
    term: u64,
}

/// One member's detector, its heartbeats and its election policy; see the module doc.
#[derive(Debug)]
pub struct Watch {
    config: WatchConfig,
    id: u64,
    detector: Detector,
    incarnation: u64,
    seq: u64,
    counter: u64,
    next_send_ns: u64,
    suspicion: Option<Suspicion>,
    events: Vec<Event>,
    stats: WatchStats,
    /// Under [`Fanout::Leader`], whom this member watches now.
    role: Role,
    /// The replica's term, as last told ([`Watch::observe_term`]).
    term: u64,
    /// Under [`Fanout::Leader`], whether this member watches its leader as a backup: only the
    /// follower first in line to succeed it keeps its detector's deadlines; the others wake
    /// for theirs [`BACKUP_TIMEOUTS`] timeouts late (so a backup that must act stands within
    /// that), and judge the leader on time whenever they are woken anyway, a vote asked of
    /// them included. An idle follower then costs a wake-up every few timeouts, not one each.
    backup: bool,
    /// When this member last gave the members it watches a grace ([`Watch::woke_late`]).
    last_grace_ns: Option<u64>,
    /// When this member last sent each peer anything of Raft's ([`Watch::sent_to`]): such a
    /// message is a heartbeat, so a round skips a peer that had one within half a period.
    sent: Vec<(u64, u64)>,
    /// When the leader this member follows was last heard (any word), for its silences.
    leader_heard_ns: Option<u64>,
    /// When this member began to follow its leader.
    followed_ns: u64,
    /// When this member last probed its leader's port.
    probed_ns: Option<u64>,
    /// When the leader's port refused a probe, while that suspicion stands.
    refused_ns: Option<u64>,
}

/// The first multiple of `period_ns` after `now_ns`.
pub fn next_multiple(now_ns: u64, period_ns: u64) -> u64 {
    let period_ns = period_ns.max(1);
    (now_ns / period_ns + 1).saturating_mul(period_ns)
}

impl Watch {
    /// A detector for member `id` watching `peers` (its own id is left out), started at
    /// `now_ns`; `incarnation` must grow with each start of the member (its start time does).
    pub fn new(
        config: WatchConfig,
        id: u64,
        peers: impl IntoIterator<Item = u64>,
        incarnation: u64,
        now_ns: u64,
    ) -> Self {
        // Under `Fanout::Leader` no one is watched until a leader is known (`follow`).
        let all = config.fanout == Fanout::All;
        let watched = peers.into_iter().filter(move |_| all);
        Self {
            config,
            id,
            detector: Self::detector(config, id, watched, now_ns),
            incarnation,
            seq: 0,
            counter: 0,
            next_send_ns: now_ns,
            suspicion: None,
            events: Vec::new(),
            stats: WatchStats::default(),
            role: Role::Unknown,
            term: 0,
            backup: false,
            last_grace_ns: None,
            sent: Vec::new(),
            leader_heard_ns: None,
            followed_ns: now_ns,
            probed_ns: None,
            refused_ns: None,
        }
    }

    fn detector(config: WatchConfig, id: u64, peers: impl IntoIterator<Item = u64>, now_ns: u64) -> Detector {
        let members = peers.into_iter().filter(move |&p| p != id);
        Detector::new(
            DetectorConfig { period_ns: config.period_ns, threshold_ns: config.lambda_ns },
            members,
            now_ns,
        )
    }

    /// The members changed: watch these from now on, each given a full timeout's grace
    /// (under [`Fanout::Leader`], the leader again from the next [`Watch::follow`]).
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = u64>, now_ns: u64) {
        match self.config.fanout {
            Fanout::All => self.detector = Self::detector(self.config, self.id, peers, now_ns),
            Fanout::Leader => {
                self.role = Role::Unknown;
                self.detector = Self::detector(self.config, self.id, [], now_ns);
            }
        }
    }

    /// The replica follows `leader` (0: none known, this member's id: it leads). Under
    /// [`Fanout::Leader`] a new leader is watched from `now_ns` with a full timeout's grace, a
    /// member that leads starts sending (and stops when it no longer leads), and a member
    /// without a leader (a candidate) keeps watching the one it had, so that leader's
    /// heartbeat still ends a false suspicion.
    pub fn follow(&mut self, leader: u64, now_ns: u64, voters: impl FnOnce() -> Vec<u64>) {
        if self.config.fanout != Fanout::Leader {
            return;
        }
        let role = match leader {
            // A leader that stepped down with no successor (check-quorum) stops sending, so
            // its followers suspect it and elect one now rather than at Raft's timeout.
            0 if self.role == Role::Leading => Role::Unknown,
            0 => return,
            _ if leader == self.id => Role::Leading,
            _ => Role::Following(leader),
        };
        if role == self.role {
            return;
        }
        self.role = role;
        // First in line after the leader: the voter with the lowest id other than it.
        self.backup = match role {
            Role::Following(leader) => {
                voters().into_iter().any(|v| v != leader && v != self.id && v < self.id)
            }
            Role::Leading | Role::Unknown => false,
        };
        let watched = match role {
            Role::Following(leader) => Some(leader),
            Role::Leading | Role::Unknown => None,
        };
        self.detector = Self::detector(self.config, self.id, watched, now_ns);
        self.leader_heard_ns = None;
        self.followed_ns = now_ns;
        self.probed_ns = None;
        self.refused_ns = None;
    }

    /// The leader this member suspects now (by silence or a refused probe), if any.
    pub fn suspected_leader(&self) -> Option<u64> {
        self.suspicion.map(|s| s.leader)
    }

    /// The leader this member follows and watches, if any.
    fn followed(&self) -> Option<u64> {
        match self.role {
            Role::Following(leader) => Some(leader),
            Role::Leading | Role::Unknown => None,
        }
    }

    /// When the follower first in line next probes its leader's port: `T` plus `probe_ns`
    /// after the leader's last word, and again every period while it stays silent.
    fn next_probe_ns(&self) -> Option<u64> {
        let probe_ns = self.config.probe_ns?;
        if self.backup || self.suspicion.is_some() {
            return None;
        }
        self.followed()?;
        let heard = self.leader_heard_ns.unwrap_or(self.followed_ns).max(self.followed_ns);
        Some(match self.probed_ns {
            Some(at) if at >= heard => at + self.config.period_ns,
            _ => heard + self.config.period_ns + probe_ns,
        })
    }

    /// The leader to probe now, if a probe is due at `now_ns` (the loop has read the
    /// heartbeats that came): the caller sends one datagram to the leader's Raft address on a
    /// socket connected to it and reports a refusal with [`Watch::refused`].
    pub fn probe_due(&mut self, now_ns: u64) -> Option<u64> {
        if self.next_probe_ns().is_none_or(|at| now_ns < at) {
            return None;
        }
        self.probe_now(now_ns)
    }

    /// The leader to probe at once, unless it is suspected or was probed within a quarter
    /// period: a member asked for its vote while it still trusts its leader probes it, so a
    /// dead leader's port refuses before the candidate asks again.
    pub fn probe_now(&mut self, now_ns: u64) -> Option<u64> {
        self.config.probe_ns?;
        let leader = self.followed()?;
        if self.suspicion.is_some()
            || self.probed_ns.is_some_and(|at| now_ns < at + self.config.period_ns / 4)
        {
            return None;
        }
        self.probed_ns = Some(now_ns);
        self.stats.probes += 1;
        Some(leader)
    }

    /// `member`'s port refused a probe at `now_ns`: no process holds it, so if it is the
    /// leader this member follows, it is suspected now (the election follows as for any
    /// suspicion, [`Watch::poll`]). Its lease is safe: a process that is gone answers no read.
    pub fn refused(&mut self, member: u64, now_ns: u64) {
        if self.followed() != Some(member) || self.suspicion.is_some() {
            return;
        }
        self.stats.probes_refused += 1;
        self.stats.suspicions += 1;
        self.stats.leader_suspicions += 1;
        self.refused_ns = Some(now_ns);
        self.suspicion = Some(Suspicion { leader: member, next_campaign_ns: None, term: self.term });
    }

    /// A word from `member` received at `at_ns`: if it is the leader this member follows, the
    /// silence it ends is counted.
    fn note_word(&mut self, member: u64, at_ns: u64) {
        if self.role != Role::Following(member) {
            return;
        }
        // A word sent after its port refused: the leader is back (restarted on its port).
        if self.refused_ns.is_some_and(|at| at_ns > at) {
            self.refused_ns = None;
            if self.suspicion.is_some_and(|s| s.leader == member) {
                self.suspicion = None;
            }
        }
        // A backup reads its heartbeats only when it wakes, every few timeouts, so the words it
        // sees in order (Raft's, when they come) leave out the heartbeats between them: its
        // gaps are its own sleep, not the leader's silence.
        if self.backup {
            return;
        }
        if let Some(before) = self.leader_heard_ns {
            let gap = at_ns.saturating_sub(before);
            self.stats.leader_gap_max_ns = self.stats.leader_gap_max_ns.max(gap);
            if gap > self.config.period_ns + self.config.lambda_ns {
                self.stats.leader_gaps_over_timeout += 1;
            }
        }
        self.leader_heard_ns = self.leader_heard_ns.max(Some(at_ns));
    }

    /// The replica's current Raft term: a term newer than the one a planned campaign was
    /// planned in means an election began (this member's or another's), and the campaign
    /// waits for it (see [`Watch::poll`]).
    pub fn observe_term(&mut self, term: u64) {
        self.term = self.term.max(term);
    }

    /// Whether a watched member's deadline has passed at `now_ns` (its heartbeats are to be
    /// read before it is judged), whenever the loop wakes for it.
    pub fn deadline_passed(&self, now_ns: u64) -> bool {
        self.detector.next_deadline_ns().is_some_and(|d| d <= now_ns)
    }

    /// Whether this member watches anyone now (a leader under [`Fanout::Leader`] does not, so
    /// it has no heartbeats to read).
    pub fn watches_anyone(&self) -> bool {
        !self.detector.entries().is_empty()
    }

    /// Whether this member sends heartbeats now.
    fn sends(&self) -> bool {
        self.config.fanout == Fanout::All || self.role == Role::Leading
    }

    /// The settings.
    pub fn config(&self) -> WatchConfig {
        self.config
    }

    /// The counters.
    pub fn stats(&self) -> WatchStats {
        self.stats
    }

    /// The members suspected now.
    pub fn suspected(&self) -> impl Iterator<Item = u64> + '_ {
        self.detector.entries().iter().filter(|e| e.is_suspected()).map(|e| e.member)
    }

    /// One pass of the member's loop: the liveness counter moves.
    pub fn bump(&mut self) {
        self.counter += 1;
    }

    /// When the loop must next wake for the detector: a heartbeat due, a deadline, a campaign.
    pub fn next_wake_ns(&self) -> u64 {
        let mut at = if self.sends() { self.next_send_ns } else { u64::MAX };
        if let Some(d) = self.detector.next_deadline_ns() {
            let late = if self.backup { BACKUP_TIMEOUTS * self.detector.config().timeout_ns() } else { 0 };
            at = at.min(d + late);
        }
        if let Some(at_campaign) = self.suspicion.and_then(|s| s.next_campaign_ns) {
            at = at.min(at_campaign);
        }
        if let Some(at_probe) = self.next_probe_ns() {
            at = at.min(at_probe);
        }
        at
    }

    /// If a heartbeat round is due at `now_ns`, writes the heartbeat for each peer into `out`
    /// (cleared first) and calls `send(peer, bytes)`; `commit_for(peer)` gives the term and
    /// commit index to piggyback (the leader's; `None` elsewhere).
    pub fn send_due(
        &mut self,
        now_ns: u64,
        peers: impl IntoIterator<Item = u64>,
        commit_for: impl Fn(u64) -> Option<(u64, u64)>,
        out: &mut Vec<u8>,
        mut send: impl FnMut(u64, &[u8]),
    ) {
        if now_ns < self.next_send_ns || !self.sends() {
            return;
        }
        // The next round at the next multiple of the period: every member's rounds, and its
        // loop's ticks, fall on the same instants, so one timer wakes them all (a wake-up, not
        // the work after it, is most of an idle member's cost on a virtual machine); after a
        // stall, the missed rounds are skipped.
        self.next_send_ns = next_multiple(now_ns, self.config.period_ns);
        let heartbeat = self.next_heartbeat(now_ns);
        let recent = now_ns.saturating_sub(self.config.period_ns / 2);
        for peer in peers {
            if peer == self.id || self.sent.iter().any(|&(p, at)| p == peer && at > recent) {
                continue;
            }
            let (term, commit) = commit_for(peer).unwrap_or((0, 0));
            out.clear();
            encode_replica_heartbeat(&heartbeat, term, commit, out);
            send(peer, out);
            self.stats.heartbeats_out += 1;
        }
    }

    /// This member's next heartbeat, sent at `now_ns` (its sequence number taken).
    fn next_heartbeat(&mut self, now_ns: u64) -> Heartbeat {
        let heartbeat = Heartbeat {
            member: self.id,
            incarnation: self.incarnation,
            seq: self.seq,
            counter: self.counter,
            sent_ns: now_ns,
        };
        self.seq += 1;
        heartbeat
    }

    /// The member's loop woke `late_ns` after the time it asked for, at `now_ns`: the machine
    /// stopped it (on a virtual machine, its core taken for milliseconds), and may have
    /// stopped the members it watches with it (on one core, it does). A member stopped with
    /// this one could not speak, so past a small lateness each watched member is given a
    /// period from now to be heard before it is suspected. The lease this leaves intact: it
    /// only ever delays a suspicion. A member that really died is suspected at most a period
    /// later.
    pub fn woke_late(&mut self, now_ns: u64, late_ns: u64) {
        if late_ns < (self.config.lambda_ns / 4).min(LATE_WAKE_NS) {
            return;
        }
        self.stats.late_wakes += 1;
        // One grace a timeout at most: a machine that keeps waking this member late must not
        // put off a real failure's suspicion by a period each time.
        let timeout = self.config.period_ns + self.config.lambda_ns;
        if self.last_grace_ns.is_some_and(|at| now_ns < at + timeout) {
            return;
        }
        self.last_grace_ns = Some(now_ns);
        self.detector.grant_grace(now_ns, self.config.period_ns);
    }

    /// This member sent `peer` a message of Raft's at `now_ns`: a heartbeat as good as the
    /// detector's (see [`Watch::heard_from`]), so the next round leaves `peer` out if it comes
    /// within half a period. Under load the detector then sends nothing.
    pub fn sent_to(&mut self, peer: u64, now_ns: u64) {
        match self.sent.iter_mut().find(|(p, _)| *p == peer) {
            Some(entry) => entry.1 = now_ns,
            None => self.sent.push((peer, now_ns)),
        }
    }

    /// A message of Raft's from `member`, received at `at_ns` and handled at `now_ns`: the
    /// member's loop ran to send it, so it counts as a fresh heartbeat.
    pub fn heard_from(&mut self, member: u64, at_ns: u64, now_ns: u64) {
        self.note_word(member, at_ns);
        self.detector.handle_alive(member, at_ns, now_ns, &mut self.events);
    }

    /// A heartbeat received at `at_ns` (its kernel stamp), handled at `now_ns`.
    pub fn heard(&mut self, heartbeat: &Heartbeat, at_ns: u64, now_ns: u64) {
        self.note_word(heartbeat.member, at_ns);
        let heard = self.detector.handle_heartbeat(heartbeat, at_ns, now_ns, &mut self.events);
        if !matches!(heard, kairos_fd::Heard::Unknown) {
            self.stats.heartbeats_in += 1;
        }
    }

    /// The detector's verdicts at `now_ns` and what they ask of this member, whose replica
    /// follows `leader` (0: none known) among the voters `voters` gives; it is asked only while
    /// the leader is suspected, so a pass with nothing to decide builds no list.
    pub fn poll(&mut self, now_ns: u64, leader: u64, voters: impl FnOnce() -> Vec<u64>) -> Option<Act> {
        self.detector.poll(now_ns, &mut self.events);
        for event in self.events.drain(..) {
            match event {
                Event::Suspected { member, .. } => {
                    self.stats.suspicions += 1;
                    if member == leader
                        && member != self.id
                        && self.suspicion.is_none_or(|s| s.leader != member)
                    {
                        self.stats.leader_suspicions += 1;
                        self.suspicion =
                            Some(Suspicion { leader: member, next_campaign_ns: None, term: self.term });
                    }
                }
                Event::Trusted { member, .. } => {
                    if self.suspicion.is_some_and(|s| s.leader == member) {
                        self.suspicion = None;
                    }
                }
            }
        }
        let s = self.suspicion.as_mut()?;
        let voters = voters();
        // A new leader (or this member) took over: the suspicion has done its work.
        if (leader != 0 && leader != s.leader) || !voters.contains(&self.id) {
            self.suspicion = None;
            return None;
        }
        let rank = campaign_rank(self.id, s.leader, &voters, |m| {
            self.detector.entry(m).is_some_and(|e| e.is_suspected())
        });
        let period = self.config.period_ns;
        let spaced = |periods: u64| (periods * period).min(STAGGER_MAX_NS.max(period));
        match s.next_campaign_ns {
            // First notice: the lease goes now, the campaign after those ahead in line.
            None if rank > 0 => {
                s.next_campaign_ns = Some(now_ns + rank * spaced(STAGGER_PERIODS));
                return Some(Act::Suspect { leader: s.leader, campaign: false });
            }
            // An election began since the campaign was planned (a vote asked in a newer term,
            // or this member's own): it is given the time a campaign in line gets before this
            // member stands again. Standing at once would start a newer term that deposes a
            // leader just elected whose first word has not reached this member yet, and the
            // members left without a leader then wait for Raft's own timeout (seen with five
            // members syncing every write on one core: 10-20 ms instead of 4).
            Some(_) if self.term > s.term => {
                s.term = self.term;
                s.next_campaign_ns = Some(now_ns + (rank + 1) * spaced(STAGGER_PERIODS));
                return None;
            }
            Some(at) if now_ns < at => return None,
            _ => {}
        }
        s.next_campaign_ns = Some(now_ns + (RETRY_PERIODS * period).min(RETRY_MAX_NS));
        self.stats.campaigns += 1;
        Some(Act::Suspect { leader: s.leader, campaign: true })
    }
}

/// This member's place in line to campaign after `leader` is suspected: among the voters it
/// trusts, the leader left out, by id (0 first).
pub fn campaign_rank(id: u64, leader: u64, voters: &[u64], suspected: impl Fn(u64) -> bool) -> u64 {
    voters.iter().filter(|&&v| v != leader && v != id && v < id && !suspected(v)).count() as u64
}

#[cfg(test)]
mod tests;
