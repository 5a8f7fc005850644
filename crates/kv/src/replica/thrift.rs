//! Thrifty replication: a leader sends an append of writes at once only to the followers its
//! quorum needs, and holds the others' appends back for a short while, so that they go several
//! at a time.
//!
//! Why: a write commits once a quorum holds it, with three members the leader and one
//! follower. The other follower's append, sent at once, costs that follower's process a run
//! for every write, and where members share a core (the bench puts every server on one) that
//! run falls between the acknowledging follower's and the leader's, on the write's path (the
//! README gives the commands that measure it, with and without `--thrifty-us 0`). Held for up to
//! [`ReplicaConfig::thrifty_ns`](super::ReplicaConfig::thrifty_ns), the other follower's
//! appends go out together: one run of its process for several writes, off their path.
//! (EPaxos names the same idea "thrifty": messages to a quorum only.)
//!
//! Policy (here, apart from the mechanism in `Replica::send`):
//! - Which followers a quorum needs: the voters furthest along by what they acknowledged
//!   (`matched`), ties to the lowest id, as many as a majority needs beside the leader. The
//!   follower that acknowledged the last write stays first; one that stops answering falls
//!   behind the first held append released to another, which is then the one needed, so a
//!   dead follower costs a write at most one hold.
//! - What is held: appends that carry writes, and an append that carries only a commit index
//!   while others are held for its follower (alone it would arrive before the entries it
//!   follows, and be refused). A new term's first entry, membership changes and snapshots go
//!   at once, after what is held for their follower (a follower sees a leader's appends in the
//!   order they were made); nothing is held during a joint membership.
//! - A follower that forwarded a write or asked a read index within [`EAGER_NS`] gets its
//!   appends at once: its own client waits for them.
//!
//! Safety: a held message is a message the network delayed, which Raft tolerates; a commit
//! still needs a quorum's acknowledgements, and a follower held back only lags.

use std::collections::BTreeMap;

use raft::eraftpb::{EntryType, Message, MessageType};

/// How long after a follower forwarded a write or asked a read index it gets appends at once.
pub const EAGER_NS: u64 = 20_000_000;

/// Appends held back from one follower, in the order made.
#[derive(Debug)]
struct Held {
    /// The clock when the first of them was held, ns.
    since_ns: u64,
    messages: Vec<Message>,
    /// The entry bytes of the last of them, so a join need not count them again.
    last_bytes: u64,
}

/// The leader's appends held back from followers its quorum does not need now.
#[derive(Debug)]
pub struct Thrift {
    hold_ns: u64,
    /// The most entry bytes one joined append carries (Raft's own cap on an append).
    max_joined_bytes: u64,
    held: BTreeMap<u64, Held>,
    eager_until: BTreeMap<u64, u64>,
    /// Appends held back so far (INFO).
    pub appends_held: u64,
}

impl Thrift {
    /// Holding appends for at most `hold_ns`, joining them up to `max_joined_bytes` of entries.
    pub fn new(hold_ns: u64, max_joined_bytes: u64) -> Self {
        Self {
            hold_ns,
            max_joined_bytes,
            held: BTreeMap::new(),
            eager_until: BTreeMap::new(),
            appends_held: 0,
        }
    }

    /// Whether `msg` is of the kind that may be held: an append whose every entry is a write
    /// (a normal entry with data).
    pub fn holdable(msg: &Message) -> bool {
        msg.get_msg_type() == MessageType::MsgAppend
            && !msg.entries.is_empty()
            && msg.entries.iter().all(|e| e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty())
    }

    /// Follower `from` asked this leader for something its client waits on (a forwarded write,
    /// a read index) at `now_ns`: its appends go at once for [`EAGER_NS`].
    pub fn asked(&mut self, from: u64, now_ns: u64) {
        self.eager_until.insert(from, now_ns + EAGER_NS);
    }

    /// Whether `follower` gets its appends at once at `now_ns` because it asked lately.
    pub fn eager(&self, follower: u64, now_ns: u64) -> bool {
        self.eager_until.get(&follower).is_some_and(|&until| until > now_ns)
    }

    /// Whether appends are held for `follower` now.
    pub fn holds_for(&self, follower: u64) -> bool {
        self.held.contains_key(&follower)
    }

    /// Holds `msg` back from its follower, made at `now_ns`. An append that continues the last
    /// one held (same term, its entries right after) joins it: the follower then takes the
    /// hold's writes in one message and answers once, not once a write.
    pub fn hold(&mut self, msg: Message, now_ns: u64) {
        self.appends_held += 1;
        let held = self.held.entry(msg.to).or_insert_with(|| Held {
            since_ns: now_ns,
            messages: Vec::new(),
            last_bytes: 0,
        });
        let bytes: u64 = msg.entries.iter().map(|e| e.data.len() as u64).sum();
        match held.messages.last_mut() {
            Some(last) if continues(last, &msg) && held.last_bytes + bytes <= self.max_joined_bytes => {
                join(last, msg);
                held.last_bytes += bytes;
            }
            _ => {
                held.messages.push(msg);
                held.last_bytes = bytes;
            }
        }
    }

    /// Moves what is held for `follower` to `out`, in order.
    pub fn release(&mut self, follower: u64, out: &mut Vec<Message>) {
        if let Some(held) = self.held.remove(&follower) {
            out.extend(held.messages);
        }
    }

    /// Moves to `out` what has been held for `hold_ns` by `now_ns`.
    pub fn release_due(&mut self, now_ns: u64, out: &mut Vec<Message>) {
        let hold_ns = self.hold_ns;
        let due: Vec<u64> =
            self.held.iter().filter(|(_, h)| h.since_ns + hold_ns <= now_ns).map(|(&f, _)| f).collect();
        for follower in due {
            self.release(follower, out);
        }
    }

    /// Moves everything held to `out` (this member no longer leads, or stopped holding).
    pub fn release_all(&mut self, out: &mut Vec<Message>) {
        for (_, held) in std::mem::take(&mut self.held) {
            out.extend(held.messages);
        }
    }

    /// When the next held append is due, ns.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.held.values().map(|h| h.since_ns + self.hold_ns).min()
    }
}

/// Whether append `next` can join append `last` to the same follower: both appends (not a
/// snapshot), of the same term, `next`'s entries starting right after `last`'s (its previous
/// index and term are `last`'s last entry, or `last`'s own previous ones when `last` carries
/// only a commit index).
fn continues(last: &Message, next: &Message) -> bool {
    let append = MessageType::MsgAppend;
    if last.get_msg_type() != append || next.get_msg_type() != append || last.term != next.term {
        return false;
    }
    let (end_index, end_term) =
        last.entries.last().map_or((last.index, last.log_term), |e| (e.index, e.term));
    next.index == end_index && next.log_term == end_term
}

/// Appends `next`'s entries to `last` and takes its commit index (the later one), so `last`
/// says what both said.
fn join(last: &mut Message, next: Message) {
    let Message { entries, commit, .. } = next;
    last.entries.extend(entries);
    last.commit = last.commit.max(commit);
}

/// Whether a quorum of the voters needs follower `to` now: `followers` are the voters other
/// than the leader, each with the index it acknowledged (`matched`); a majority of `voters`
/// needs the leader and `voters / 2` of them, the furthest along first, ties to the lowest id,
/// so `to` is needed when fewer than that are ahead of it. A member that is not among them (a
/// learner) is never needed. Counts, allocates nothing: it runs for every append a leader makes.
pub fn quorum_needs(to: u64, voters: usize, followers: impl Iterator<Item = (u64, u64)> + Clone) -> bool {
    let Some(mine) = followers.clone().find(|&(id, _)| id == to).map(|(_, matched)| matched) else {
        return false;
    };
    let ahead = followers.filter(|&(id, matched)| matched > mine || (matched == mine && id < to)).count();
    ahead < voters / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::Entry;

    /// An append of one entry at `index` (term 1) to follower `to`.
    fn append(to: u64, index: u64, data: &[u8]) -> Message {
        let mut msg = Message::default();
        msg.set_msg_type(MessageType::MsgAppend);
        msg.to = to;
        msg.term = 1;
        msg.index = index - 1;
        msg.log_term = 1;
        msg.commit = index - 1;
        msg.entries = vec![Entry { index, term: 1, data: data.to_vec().into(), ..Default::default() }].into();
        msg
    }

    fn indexes(msg: &Message) -> Vec<u64> {
        msg.entries.iter().map(|e| e.index).collect()
    }

    #[test]
    fn held_appends_that_follow_one_another_go_as_one_and_others_apart() {
        let mut t = Thrift::new(1_000, 10);
        t.hold(append(3, 5, b"a"), 100);
        t.hold(append(3, 6, b"b"), 200);
        let mut commit_only = append(3, 7, b"");
        commit_only.entries.clear();
        commit_only.index = 6;
        commit_only.commit = 6;
        t.hold(commit_only, 250);
        t.hold(append(3, 7, b"c"), 300);
        // Not right after the last: apart.
        t.hold(append(3, 9, b"e"), 400);
        // A new term: apart.
        let mut next_term = append(3, 10, b"f");
        next_term.term = 2;
        next_term.log_term = 1;
        next_term.entries[0].term = 2;
        t.hold(next_term, 500);
        // Past the joined bytes (10): apart.
        t.hold(append(3, 11, b"0123456789"), 600);
        let mut out = Vec::new();
        t.release(3, &mut out);
        assert_eq!(out.iter().map(indexes).collect::<Vec<_>>(), [vec![5, 6, 7], vec![9], vec![10], vec![11]]);
        assert_eq!(
            (out[0].index, out[0].log_term, out[0].commit),
            (4, 1, 6),
            "the first's previous entry, the last commit"
        );
        assert_eq!(t.appends_held, 7);
    }

    #[test]
    fn a_quorum_needs_the_followers_furthest_along_ties_to_the_lowest_id() {
        // Three voters: the leader and one follower.
        assert!(quorum_needs(2, 3, [(2, 10), (3, 9)].iter().copied()));
        assert!(!quorum_needs(3, 3, [(2, 10), (3, 9)].iter().copied()));
        assert!(quorum_needs(3, 3, [(2, 8), (3, 9)].iter().copied()), "the one that acknowledged more");
        assert!(quorum_needs(2, 3, [(3, 9), (2, 9)].iter().copied()), "a tie goes to the lowest id");
        // Five voters: two followers.
        let five = [(2, 5), (3, 7), (4, 7), (5, 1)];
        assert!(quorum_needs(3, 5, five.iter().copied()) && quorum_needs(4, 5, five.iter().copied()));
        assert!(!quorum_needs(2, 5, five.iter().copied()) && !quorum_needs(5, 5, five.iter().copied()));
        // A learner is not among the voters' followers.
        assert!(!quorum_needs(9, 3, [(2, 10), (3, 9)].iter().copied()));
    }

    #[test]
    fn only_appends_of_writes_are_held() {
        assert!(Thrift::holdable(&append(2, 5, b"w")));
        assert!(!Thrift::holdable(&append(2, 5, b"")), "a new term's empty entry goes at once");
        let mut commit_only = append(2, 5, b"w");
        commit_only.entries.clear();
        assert!(!Thrift::holdable(&commit_only));
        let mut change = append(2, 5, b"w");
        change.entries[0].set_entry_type(EntryType::EntryConfChange);
        assert!(!Thrift::holdable(&change));
        let mut heartbeat = append(2, 5, b"w");
        heartbeat.set_msg_type(MessageType::MsgHeartbeat);
        assert!(!Thrift::holdable(&heartbeat));
    }

    #[test]
    fn held_appends_go_in_order_once_due_or_asked_for() {
        let mut t = Thrift::new(1_000, 1 << 20);
        t.hold(append(3, 5, b"a"), 100);
        t.hold(append(3, 6, b"b"), 600);
        t.hold(append(2, 6, b"b"), 700);
        assert_eq!(t.next_due_ns(), Some(1_100), "from the first held");
        let mut out = Vec::new();
        t.release_due(1_099, &mut out);
        assert!(out.is_empty());
        t.release_due(1_100, &mut out);
        assert_eq!(out.iter().map(|m| (m.to, indexes(m))).collect::<Vec<_>>(), [(3, vec![5, 6])]);
        assert_eq!(t.next_due_ns(), Some(1_700));
        out.clear();
        t.release(2, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(t.next_due_ns(), None);
        assert_eq!(t.appends_held, 3);
        // A follower that asked gets its appends at once for a while.
        t.asked(3, 2_000);
        assert!(t.eager(3, 2_000 + EAGER_NS - 1) && !t.eager(3, 2_000 + EAGER_NS) && !t.eager(2, 2_000));
    }
}
