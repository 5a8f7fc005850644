use super::*;
use crate::replica::thrift;
use crate::replica::{MemDisk, Sync};
use raft::Storage;
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
    c.0.get_mut(&proposer).unwrap().propose_membership(ConfChangeType::RemoveNode, 1, Vec::new()).unwrap();
    let second = c.0.get_mut(&proposer).unwrap().propose_membership(ConfChangeType::AddNode, 5, Vec::new());
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
    let held =
        deliver_except(&mut c, |m| m.from == follower && m.get_msg_type() == MessageType::MsgAppendResponse);
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

#[test]
fn a_follower_acknowledges_an_append_before_it_applies_what_the_append_commits() {
    use raft::eraftpb::MessageType;
    // Commits travel on the next append (or a heartbeat), not on an append of their own.
    let mut c = Cluster::with(&[1, 2, 3], |config| config.commit_by_heartbeats = true);
    c.settle(40);
    let leader = c.leader();
    let l = c.0.get_mut(&leader).unwrap();
    l.submit_write(Ticket { client: 1, seq: 1 }, 1, set("k1", "v1"));
    l.flush(0);
    deliver_except(&mut c, |_| false);
    let committed = c.0[&leader].applied();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    assert!(c.0[&follower].applied() < committed, "the follower holds k1 but was not told of its commit");

    // The second write's append carries the first's commit.
    let l = c.0.get_mut(&leader).unwrap();
    l.submit_write(Ticket { client: 1, seq: 2 }, 2, set("k2", "v2"));
    l.flush(0);
    l.ready().unwrap();
    let append = l
        .take_messages()
        .into_iter()
        .find(|m| m.to == follower && m.get_msg_type() == MessageType::MsgAppend && !m.entries.is_empty())
        .expect("the second write's append to the follower");
    assert!(append.commit >= committed);
    let f = c.0.get_mut(&follower).unwrap();
    f.step(append);
    assert!(f.begin_ready());
    f.take_messages();
    f.persist_ready().unwrap();
    let acks: Vec<Message> = f.take_messages();
    assert!(
        acks.iter()
            .any(|m| m.to == leader && m.get_msg_type() == MessageType::MsgAppendResponse && !m.reject),
        "the acknowledgement is released once the entry is persisted: {acks:?}"
    );
    assert_eq!(f.store().read(&ReadOp::get("k1"), 0), Reply::Nil, "and before the commit is applied");
    f.finish_ready().unwrap();
    assert!(f.applied() >= committed);
    assert_eq!(f.store().read(&ReadOp::get("k1"), 0), Reply::Bulk(b"v1".to_vec()));
    assert!(
        f.take_messages().iter().all(|m| m.get_msg_type() != MessageType::MsgAppendResponse),
        "acknowledged once"
    );
}

#[test]
fn a_late_copy_of_a_blocking_pop_does_not_take_the_place_of_its_unblock() {
    use raft::eraftpb::MessageType;
    let mut c = Cluster::new(&[1, 2, 3]);
    c.settle(40);
    let leader = c.leader();
    let f = *c.0.keys().find(|&&id| id != leader).unwrap();
    let pop = Ticket { client: 7, seq: 1 };
    let r = c.0.get_mut(&f).unwrap();
    r.submit_write(pop, 1, WriteOp::words(&["BLPOP", "q", "1"]));
    r.flush(0);
    // The first proposal is held back, so the follower proposes the pop again.
    let held = deliver_except(&mut c, |m| m.get_msg_type() == MessageType::MsgPropose);
    assert_eq!(held.len(), 1);
    let retry_ticks = c.0[&f].config.retry_ticks as usize;
    c.settle(retry_ticks + 2);
    let answers = c.0.get_mut(&f).unwrap().take_completions();
    assert_eq!(answers, vec![(pop, Reply::WouldBlock)], "the retry applied: the pop waits");
    // Its timeout passes: the member proposes the unblock, with the pop's ticket. The held
    // copy of the pop reaches the leader first.
    let r = c.0.get_mut(&f).unwrap();
    r.submit_write(
        pop,
        1,
        WriteOp::Unblock { args: vec![b"BLPOP".to_vec(), b"q".to_vec(), b"1".to_vec()], error: false },
    );
    for m in held {
        c.0.get_mut(&m.to).unwrap().step(m);
    }
    c.settle(4);
    let answers = c.0.get_mut(&f).unwrap().take_completions();
    assert_eq!(answers, vec![(pop, Reply::NilArray)], "the unblock is answered");
    assert_eq!(c.0[&leader].store().waiters(), 0);
}

#[test]
fn a_removed_members_blocked_clients_stop_waiting_and_take_nothing() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.settle(40);
    let leader = c.leader();
    let gone = *c.0.keys().find(|&&id| id != leader).unwrap();
    let r = c.0.get_mut(&gone).unwrap();
    r.submit_write(Ticket { client: 7, seq: 1 }, 1, WriteOp::words(&["BLPOP", "q", "0"]));
    r.flush(0);
    c.settle(4);
    assert_eq!(
        c.0.get_mut(&gone).unwrap().take_completions(),
        vec![(Ticket { client: 7, seq: 1 }, Reply::WouldBlock)]
    );
    assert!(c.0.values().all(|r| r.store().waiters() == 1), "the pop waits in every member's store");

    c.0.get_mut(&leader).unwrap().propose_membership(ConfChangeType::RemoveNode, gone, Vec::new()).unwrap();
    c.settle(10);
    c.0.remove(&gone);
    c.settle(10);
    let leader = c.leader();
    for r in c.0.values() {
        assert_eq!(r.voters().len(), 2, "member {gone} removed at member {}", r.id());
        assert_eq!(r.store().waiters(), 0, "member {}'s store still holds the removed member's pop", r.id());
    }
    c.0.get_mut(&leader).unwrap().submit_write(
        Ticket { client: 9, seq: 1 },
        1,
        WriteOp::words(&["RPUSH", "q", "x"]),
    );
    c.settle(5);
    for r in c.0.values() {
        assert_eq!(
            r.store().read(&ReadOp::words(&["LLEN", "q"]), 0),
            Reply::Integer(1),
            "at member {}",
            r.id()
        );
    }
}
