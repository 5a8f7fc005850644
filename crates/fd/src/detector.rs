//! The failure detector's core: the alive table and the rule that suspects a member, with no
//! clock and no socket (time is passed in).
//!
//! # Mechanism
//!
//! Every member sends a [`Heartbeat`] to every other every period `T`, carrying its
//! application's liveness counter (the application bumps it at least every `T/3`). For each
//! other member the detector keeps an [`Entry`]: the receive time of its last heartbeat, the
//! last counter, when a heartbeat with a *new* counter last came (`last_fresh_ns`), and the
//! verdict. A heartbeat is fresh when it comes from a newer incarnation (a restart), or from
//! the same incarnation with a larger counter; a repeated or older counter (a hung
//! application behind a live node) or an older incarnation (a delayed packet of a previous
//! life) refreshes nothing. A member is suspected once `now_ns >= last_fresh_ns + T + Lambda`
//! (the [`Entry::deadline_ns`]): no fresh heartbeat within a period and the threshold Lambda.
//! The first fresh heartbeat after that makes it alive again.
//!
//! A member never heard of is given the same grace from the detector's start: it is suspected
//! at `start + T + Lambda` unless it speaks.
//!
//! # Contract
//!
//! - Inputs are [`Detector::handle_heartbeat`] (with the heartbeat's receive time, which may be
//!   the kernel's stamp, earlier than `now_ns`) and [`Detector::poll`] (at any time, at least
//!   at [`Detector::next_deadline_ns`]); outputs are [`Event`]s, appended to the caller's
//!   vector, and the entries themselves.
//! - Time never goes backwards for a member: a heartbeat stamped before the last fresh one does
//!   not move `last_fresh_ns` back.
//! - A heartbeat received after its sender's deadline, but handled before a `poll` saw the
//!   deadline pass (the caller woke late), yields the suspicion the caller missed and its end,
//!   both stamped: the detector's output is a function of time, not of when it was asked.
//! - Work per call: `handle_heartbeat` is O(members) to find the entry (members are few),
//!   `poll` and `next_deadline_ns` O(members); nothing allocates after `new` except the events
//!   pushed to the caller's vector. Nothing panics, whatever the heartbeat holds.
//!
//! # Source
//!
//! The heartbeat-with-threshold detector of X-FD (the express lane's failure detector: a
//! member is dead when its heartbeat has not changed for a number of heartbeat intervals,
//! ASGARD's `update_aliveness_states`), with the liveness counter so that a hung application
//! is detected and not only a dead host. Its quality is measured with Chen, Toueg and
//! Aguilera's metrics (detection time, mistake rate, mistake duration, query accuracy).

use super::wire::Heartbeat;

/// The detector's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetectorConfig {
    /// The heartbeat period `T`, ns.
    pub period_ns: u64,
    /// The threshold Lambda: how much later than a period a fresh heartbeat may come, ns.
    pub threshold_ns: u64,
}

impl DetectorConfig {
    /// `T + Lambda`: the longest gap between fresh heartbeats of a member taken for alive.
    pub fn timeout_ns(&self) -> u64 {
        self.period_ns.saturating_add(self.threshold_ns)
    }
}

/// What the detector thinks of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Fresh heartbeats come in time.
    Alive,
    /// No fresh heartbeat within `T + Lambda`.
    Suspected {
        /// When the rule made it suspected: its deadline, ns.
        since_ns: u64,
        /// When the detector was first asked after that (the time an application could act), ns.
        noticed_ns: u64,
    },
}

/// One member's row in the alive table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The member's id.
    pub member: u64,
    /// Its incarnation, as last heard (0 before any heartbeat).
    pub incarnation: u64,
    /// When its last heartbeat was received, fresh or not, ns (0: never).
    pub last_heartbeat_ns: u64,
    /// Its liveness counter, as last heard fresh.
    pub counter: u64,
    /// When its last fresh heartbeat was received (the detector's start before any), ns.
    pub last_fresh_ns: u64,
    /// Whether any heartbeat has come from it.
    pub heard: bool,
    /// The verdict.
    pub verdict: Verdict,
    /// How many times it was suspected.
    pub suspicions: u64,
}

impl Entry {
    /// When the member is suspected unless a fresh heartbeat comes first, ns.
    pub fn deadline_ns(&self, config: &DetectorConfig) -> u64 {
        self.last_fresh_ns.saturating_add(config.timeout_ns())
    }

    /// Whether it is suspected.
    pub fn is_suspected(&self) -> bool {
        matches!(self.verdict, Verdict::Suspected { .. })
    }
}

/// A change of verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `member` became suspected.
    Suspected {
        /// The member.
        member: u64,
        /// Its deadline, ns.
        since_ns: u64,
        /// When the detector noticed, ns.
        noticed_ns: u64,
        /// When its last fresh heartbeat came, ns (the start of the window without one).
        last_fresh_ns: u64,
    },
    /// `member` is alive again.
    Trusted {
        /// The member.
        member: u64,
        /// The receive time of the fresh heartbeat that cleared it, ns.
        at_ns: u64,
        /// When its suspicion began, ns.
        suspected_since_ns: u64,
    },
}

/// What a heartbeat told the detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// From no member of the table (or from this member itself).
    Unknown,
    /// From an older incarnation, or with a counter not newer than the last: refreshes nothing.
    Stale,
    /// A fresh heartbeat.
    Fresh {
        /// From a newer incarnation than the last heard (a restarted member).
        restarted: bool,
    },
}

/// The alive table and its rule; see the module doc.
#[derive(Debug, Clone)]
pub struct Detector {
    config: DetectorConfig,
    entries: Vec<Entry>,
}

impl Detector {
    /// A detector watching `members` (this member's own id left out by the caller), started at
    /// `now_ns`.
    pub fn new(config: DetectorConfig, members: impl IntoIterator<Item = u64>, now_ns: u64) -> Self {
        let mut entries: Vec<Entry> = members
            .into_iter()
            .map(|member| Entry {
                member,
                incarnation: 0,
                last_heartbeat_ns: 0,
                counter: 0,
                last_fresh_ns: now_ns,
                heard: false,
                verdict: Verdict::Alive,
                suspicions: 0,
            })
            .collect();
        entries.sort_by_key(|e| e.member);
        entries.dedup_by_key(|e| e.member);
        Self { config, entries }
    }

    /// The parameters.
    pub fn config(&self) -> &DetectorConfig {
        &self.config
    }

    /// The alive table, by member id.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The row of `member`.
    pub fn entry(&self, member: u64) -> Option<&Entry> {
        self.entries.iter().find(|e| e.member == member)
    }

    /// Takes a heartbeat received at `received_ns` (at or before `now_ns`, the time it is
    /// handled) and appends the changes it makes to `events`.
    pub fn handle_heartbeat(
        &mut self,
        heartbeat: &Heartbeat,
        received_ns: u64,
        now_ns: u64,
        events: &mut Vec<Event>,
    ) -> Heard {
        let config = self.config;
        let Some(entry) = self.entries.iter_mut().find(|e| e.member == heartbeat.member) else {
            return Heard::Unknown;
        };
        let received_ns = received_ns.min(now_ns);
        let restarted = entry.heard && heartbeat.incarnation > entry.incarnation;
        let fresh = match heartbeat.incarnation.cmp(&entry.incarnation) {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => !entry.heard || heartbeat.counter > entry.counter,
        };
        if heartbeat.incarnation < entry.incarnation {
            return Heard::Stale;
        }
        entry.last_heartbeat_ns = entry.last_heartbeat_ns.max(received_ns);
        if !fresh {
            return Heard::Stale;
        }
        // Late, and no poll saw it: the suspicion the caller missed, then its end.
        if entry.verdict == Verdict::Alive && received_ns >= entry.deadline_ns(&config) {
            suspect(entry, &config, now_ns, events);
        }
        entry.heard = true;
        entry.incarnation = heartbeat.incarnation;
        entry.counter = heartbeat.counter;
        entry.last_fresh_ns = entry.last_fresh_ns.max(received_ns);
        if let Verdict::Suspected { since_ns, .. } = entry.verdict {
            entry.verdict = Verdict::Alive;
            events.push(Event::Trusted {
                member: entry.member,
                at_ns: received_ns,
                suspected_since_ns: since_ns,
            });
        }
        Heard::Fresh { restarted }
    }

    /// Takes any other word from `member` received at `received_ns` (a Raft message: its
    /// sender's loop ran to send it) as a fresh heartbeat, without a counter or an
    /// incarnation to compare: it moves the member's last fresh time and ends a suspicion,
    /// as [`Detector::handle_heartbeat`] does, but never makes one (see the body). Returns
    /// whether the member is in the table.
    pub fn handle_alive(
        &mut self,
        member: u64,
        received_ns: u64,
        now_ns: u64,
        events: &mut Vec<Event>,
    ) -> bool {
        let Some(entry) = self.entries.iter_mut().find(|e| e.member == member) else {
            return false;
        };
        let received_ns = received_ns.min(now_ns);
        entry.last_heartbeat_ns = entry.last_heartbeat_ns.max(received_ns);
        // Unlike a heartbeat's, a late message suspects no one after the fact: heartbeats
        // the caller has not read yet may show the member was never silent that long.
        entry.last_fresh_ns = entry.last_fresh_ns.max(received_ns);
        if let Verdict::Suspected { since_ns, .. } = entry.verdict {
            entry.verdict = Verdict::Alive;
            events.push(Event::Trusted { member, at_ns: received_ns, suspected_since_ns: since_ns });
        }
        true
    }

    /// Gives every member not suspected until at least `now_ns + grace_ns` to be heard: its
    /// deadline moves there if it was sooner (the caller was stopped, and the members with it).
    pub fn grant_grace(&mut self, now_ns: u64, grace_ns: u64) {
        let timeout = self.config.timeout_ns();
        let from = (now_ns + grace_ns).saturating_sub(timeout);
        for entry in self.entries.iter_mut().filter(|e| e.verdict == Verdict::Alive) {
            entry.last_fresh_ns = entry.last_fresh_ns.max(from);
        }
    }

    /// Suspects every member whose deadline is at or before `now_ns`; appends the changes.
    pub fn poll(&mut self, now_ns: u64, events: &mut Vec<Event>) {
        let config = self.config;
        for entry in &mut self.entries {
            if entry.verdict == Verdict::Alive && now_ns >= entry.deadline_ns(&config) {
                suspect(entry, &config, now_ns, events);
            }
        }
    }

    /// The earliest deadline of a member not yet suspected: when [`Self::poll`] next has
    /// something to do (`None`: every member is suspected).
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.entries.iter().filter(|e| !e.is_suspected()).map(|e| e.deadline_ns(&self.config)).min()
    }
}

fn suspect(entry: &mut Entry, config: &DetectorConfig, now_ns: u64, events: &mut Vec<Event>) {
    let since_ns = entry.deadline_ns(config);
    let noticed_ns = now_ns.max(since_ns);
    entry.verdict = Verdict::Suspected { since_ns, noticed_ns };
    entry.suspicions += 1;
    events.push(Event::Suspected {
        member: entry.member,
        since_ns,
        noticed_ns,
        last_fresh_ns: entry.last_fresh_ns,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 100_000;
    const LAMBDA: u64 = 150_000;

    fn detector() -> Detector {
        Detector::new(DetectorConfig { period_ns: T, threshold_ns: LAMBDA }, [2, 3], 0)
    }

    fn hb(member: u64, incarnation: u64, counter: u64) -> Heartbeat {
        Heartbeat { member, incarnation, seq: counter, counter, sent_ns: 0 }
    }

    #[test]
    fn suspicion_comes_exactly_at_t_plus_lambda_after_the_last_fresh_heartbeat() {
        let mut d = detector();
        let mut events = Vec::new();
        assert_eq!(
            d.handle_heartbeat(&hb(2, 1, 1), 1_000, 1_000, &mut events),
            Heard::Fresh { restarted: false }
        );
        d.handle_heartbeat(&hb(3, 1, 1), 1_000, 1_000, &mut events);
        assert!(events.is_empty());
        let deadline = 1_000 + T + LAMBDA;
        assert_eq!(d.next_deadline_ns(), Some(deadline));
        d.poll(deadline - 1, &mut events);
        assert!(events.is_empty(), "suspected before T + Lambda: {events:?}");
        d.poll(deadline, &mut events);
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0],
            Event::Suspected { member: 2, since_ns: deadline, noticed_ns: deadline, last_fresh_ns: 1_000 }
        );
        assert!(d.entry(2).unwrap().is_suspected());
        assert_eq!(d.next_deadline_ns(), None);
        // Asked again: nothing new.
        events.clear();
        d.poll(deadline + 10 * T, &mut events);
        assert!(events.is_empty());
        assert_eq!(d.entry(2).unwrap().suspicions, 1);
    }

    #[test]
    fn a_stale_counter_does_not_refresh() {
        let mut d = detector();
        let mut events = Vec::new();
        d.handle_heartbeat(&hb(2, 1, 7), 1_000, 1_000, &mut events);
        // The node lives, its application is hung: the same counter every period.
        for k in 1..=5 {
            let at = 1_000 + k * T;
            assert_eq!(d.handle_heartbeat(&hb(2, 1, 7), at, at, &mut events), Heard::Stale);
            // An older counter (a reordered packet) is stale too.
            assert_eq!(d.handle_heartbeat(&hb(2, 1, 6), at, at, &mut events), Heard::Stale);
        }
        let e = d.entry(2).unwrap();
        assert_eq!((e.last_fresh_ns, e.last_heartbeat_ns, e.counter), (1_000, 1_000 + 5 * T, 7));
        d.poll(1_000 + T + LAMBDA, &mut events);
        assert!(matches!(
            events[..],
            [Event::Suspected { member: 2, .. }, Event::Suspected { member: 3, .. }]
        ));
    }

    #[test]
    fn a_recovered_member_becomes_alive_again_and_a_restart_is_fresh() {
        let mut d = detector();
        let mut events = Vec::new();
        d.handle_heartbeat(&hb(2, 1, 10), 0, 0, &mut events);
        d.poll(T + LAMBDA, &mut events);
        assert!(d.entry(2).unwrap().is_suspected());
        events.clear();
        // The application bumps again.
        let at = 5 * T;
        assert_eq!(
            d.handle_heartbeat(&hb(2, 1, 11), at, at + 10, &mut events),
            Heard::Fresh { restarted: false }
        );
        assert_eq!(events, vec![Event::Trusted { member: 2, at_ns: at, suspected_since_ns: T + LAMBDA }]);
        assert_eq!(d.entry(2).unwrap().verdict, Verdict::Alive);
        // Killed and restarted: a new incarnation whose counter starts again from zero.
        d.poll(at + T + LAMBDA, &mut events);
        events.clear();
        let at = 20 * T;
        assert_eq!(d.handle_heartbeat(&hb(2, 2, 0), at, at, &mut events), Heard::Fresh { restarted: true });
        assert!(matches!(events[..], [Event::Trusted { member: 2, .. }]));
        // A delayed packet of the old life changes nothing.
        events.clear();
        assert_eq!(d.handle_heartbeat(&hb(2, 1, 99), at + 1, at + 1, &mut events), Heard::Stale);
        assert_eq!(d.entry(2).unwrap().counter, 0);
        assert!(events.is_empty());
    }

    #[test]
    fn a_late_heartbeat_handled_after_a_missed_poll_reports_the_suspicion_it_ended() {
        let mut d = detector();
        let mut events = Vec::new();
        d.handle_heartbeat(&hb(2, 1, 1), 0, 0, &mut events);
        // Received 20 us after the deadline, handled later still; no poll in between.
        let received = T + LAMBDA + 20_000;
        d.handle_heartbeat(&hb(2, 1, 2), received, received + 5_000, &mut events);
        assert_eq!(
            events,
            vec![
                Event::Suspected {
                    member: 2,
                    since_ns: T + LAMBDA,
                    noticed_ns: received + 5_000,
                    last_fresh_ns: 0
                },
                Event::Trusted { member: 2, at_ns: received, suspected_since_ns: T + LAMBDA },
            ]
        );
        assert_eq!(d.entry(2).unwrap().verdict, Verdict::Alive);
    }

    #[test]
    fn a_silent_member_is_suspected_after_the_grace_and_strangers_are_ignored() {
        let mut d = detector();
        let mut events = Vec::new();
        assert_eq!(d.handle_heartbeat(&hb(9, 1, 1), 10, 10, &mut events), Heard::Unknown);
        d.poll(T + LAMBDA, &mut events);
        assert_eq!(events.len(), 2);
        assert!(d.entries().iter().all(|e| !e.heard && e.is_suspected()));
        // A stamp earlier than the last fresh one does not move time back.
        events.clear();
        d.handle_heartbeat(&hb(3, 1, 1), 5 * T, 5 * T, &mut events);
        d.handle_heartbeat(&hb(3, 1, 2), 4 * T, 5 * T, &mut events);
        assert_eq!(d.entry(3).unwrap().last_fresh_ns, 5 * T);
    }
}
