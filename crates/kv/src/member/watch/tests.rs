use super::*;

const T: u64 = 100_000;

fn watch(id: u64) -> Watch {
    Watch::new(
        WatchConfig { period_ns: T, lambda_ns: 2 * T, fanout: Fanout::All, probe_ns: None },
        id,
        [1, 2, 3],
        1,
        0,
    )
}

fn heartbeat(member: u64, counter: u64) -> Heartbeat {
    Heartbeat { member, incarnation: 1, seq: counter, counter, sent_ns: 0 }
}

#[test]
fn heartbeats_go_to_every_other_member_once_a_period_with_the_commit_for_each() {
    let mut w = watch(1);
    let mut sent = Vec::new();
    let mut out = Vec::new();
    for now in [0, T / 2, T, T + 1] {
        w.send_due(now, [1, 2, 3], |p| Some((5, 10 * p)), &mut out, |p, b| sent.push((now, p, b.to_vec())));
    }
    assert_eq!(sent.iter().map(|(n, p, _)| (*n, *p)).collect::<Vec<_>>(), [(0, 2), (0, 3), (T, 2), (T, 3)]);
    match kairos_fd::wire::decode(&sent[1].2).unwrap() {
        kairos_fd::wire::Datagram::Replica { heartbeat, term, commit } => {
            assert_eq!((heartbeat.member, term, commit), (1, 5, 30));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.stats().heartbeats_out, 4);
}

#[test]
fn a_raft_message_is_a_heartbeat_both_ways() {
    // Sending: a peer that had a Raft message within half a period gets no heartbeat.
    let mut w = watch(1);
    let mut sent = Vec::new();
    let mut out = Vec::new();
    w.sent_to(2, T - T / 4);
    w.sent_to(3, T / 4);
    w.send_due(T, [1, 2, 3], |_| None, &mut out, |p, _| sent.push(p));
    assert_eq!(sent, [3], "member 2 heard from this member a quarter period ago");
    // Receiving: a Raft message moves the sender's deadline and ends its suspicion.
    let mut w = watch(2);
    w.heard_from(1, 2 * T, 2 * T);
    w.poll(4 * T, 0, || vec![1, 2, 3]);
    assert_eq!(w.suspected().collect::<Vec<_>>(), [3], "member 1 in time: T + Lambda after its message");
    w.poll(5 * T, 0, || vec![1, 2, 3]);
    assert_eq!(w.suspected().collect::<Vec<_>>(), [1, 3], "suspected past T + Lambda");
    w.heard_from(1, 5 * T, 5 * T);
    assert_eq!(w.suspected().collect::<Vec<_>>(), [3], "trusted again on its next message");
}

#[test]
fn the_first_in_line_campaigns_at_once_the_next_after_a_stagger_and_retries_until_a_leader() {
    // Member 2 and member 3 both lose leader 1 at 3T (T + Lambda after its last word).
    let (mut two, mut three) = (watch(2), watch(3));
    let voters = [1, 2, 3];
    for w in [&mut two, &mut three] {
        w.heard(&heartbeat(2, 1), 0, 0);
        w.heard(&heartbeat(3, 1), 0, 0);
        assert_eq!(w.poll(2 * T, 1, || voters.to_vec()), None, "in time");
    }
    for w in [&mut two, &mut three] {
        w.heard(&heartbeat(2, 2), 2 * T, 2 * T);
        w.heard(&heartbeat(3, 2), 2 * T, 2 * T);
    }
    let at = 3 * T;
    assert_eq!(two.poll(at, 1, || voters.to_vec()), Some(Act::Suspect { leader: 1, campaign: true }));
    assert_eq!(three.poll(at, 1, || voters.to_vec()), Some(Act::Suspect { leader: 1, campaign: false }));
    // The campaign made 2 a candidate with no leader; 3 waits its turn.
    assert_eq!(three.poll(at + T, 0, || voters.to_vec()), None);
    assert_eq!(two.poll(at + T, 0, || voters.to_vec()), None, "no retry before RETRY_PERIODS");
    assert_eq!(
        two.poll(at + RETRY_PERIODS * T, 0, || voters.to_vec()),
        Some(Act::Suspect { leader: 1, campaign: true }),
        "no leader yet: again"
    );
    assert_eq!(
        three.poll(at + STAGGER_PERIODS * T, 0, || voters.to_vec()),
        Some(Act::Suspect { leader: 1, campaign: true }),
        "its turn came with no leader"
    );
    // 2 won: the suspicion is over at both.
    assert_eq!(three.poll(at + 20 * T, 2, || voters.to_vec()), None);
    assert_eq!(three.poll(at + 40 * T, 2, || voters.to_vec()), None);
    assert_eq!(two.stats().campaigns, 2);
    assert_eq!(two.stats().leader_suspicions, 1);
}

#[test]
fn a_member_in_line_waits_for_an_election_another_began_before_standing() {
    // Leader 1 lost at 3T; 3 is second in line, due to stand STAGGER_PERIODS later.
    let mut three = watch(3);
    let voters = [1, 2, 3];
    three.observe_term(5);
    three.heard(&heartbeat(2, 1), 2 * T, 2 * T);
    let at = 3 * T;
    assert_eq!(three.poll(at, 1, || voters.to_vec()), Some(Act::Suspect { leader: 1, campaign: false }));
    // 2 asked for votes in term 6 meanwhile: 3 does not stand at its turn, but waits
    // (its rank + 1) staggers from when it saw the new term.
    let seen = at + T;
    three.observe_term(6);
    assert_eq!(three.poll(seen, 0, || voters.to_vec()), None);
    assert_eq!(three.poll(at + STAGGER_PERIODS * T, 0, || voters.to_vec()), None, "not at its old turn");
    assert_eq!(three.poll(seen + 2 * STAGGER_PERIODS * T - 1, 0, || voters.to_vec()), None);
    assert_eq!(
        three.poll(seen + 2 * STAGGER_PERIODS * T, 0, || voters.to_vec()),
        Some(Act::Suspect { leader: 1, campaign: true }),
        "that election produced no leader: now it stands"
    );
    // Had 2 won, its leadership would have ended the suspicion.
    assert_eq!(three.poll(seen + 3 * STAGGER_PERIODS * T, 2, || voters.to_vec()), None);
}

#[test]
fn a_heartbeat_of_the_suspected_leader_ends_the_suspicion() {
    let mut two = watch(2);
    let voters = [1, 2, 3];
    two.heard(&heartbeat(3, 1), 0, 0);
    two.heard(&heartbeat(3, 2), 2 * T, 2 * T);
    assert!(matches!(two.poll(3 * T, 1, || voters.to_vec()), Some(Act::Suspect { campaign: true, .. })));
    two.heard(&heartbeat(1, 1), 3 * T + 10, 3 * T + 10);
    two.heard(&heartbeat(3, 3), 3 * T + 10, 3 * T + 10);
    assert_eq!(two.poll(3 * T + 20, 0, || voters.to_vec()), None);
    assert_eq!(two.poll(3 * T + 20 + RETRY_PERIODS * T, 0, || voters.to_vec()), None, "no more tries");
}

#[test]
fn a_hung_member_is_suspected_though_its_heartbeats_still_come() {
    let mut two = watch(2);
    two.heard(&heartbeat(1, 7), 0, 0);
    for k in 1..=5 {
        two.heard(&heartbeat(1, 7), k * T, k * T);
    }
    two.heard(&heartbeat(3, 1), 0, 0);
    assert!(two.poll(5 * T, 1, || vec![1, 2, 3]).is_some(), "the same counter is no news");
    assert_eq!(two.suspected().collect::<Vec<_>>(), [1, 3]);
}

fn leader_watch(id: u64) -> Watch {
    let config = WatchConfig { period_ns: T, lambda_ns: 2 * T, fanout: Fanout::Leader, probe_ns: None };
    Watch::new(config, id, [1, 2, 3], 1, 0)
}

fn sent_at(w: &mut Watch, now: u64) -> Vec<u64> {
    let mut sent = Vec::new();
    w.send_due(now, [1, 2, 3], |_| None, &mut Vec::new(), |p, _| sent.push(p));
    sent
}

#[test]
fn only_the_first_in_line_wakes_for_the_leader_s_deadline_and_a_late_wake_gives_grace() {
    // Leader 1; member 2 is first in line, member 3 a backup that wakes three timeouts late.
    let (mut two, mut three) = (leader_watch(2), leader_watch(3));
    two.follow(1, 0, || vec![1, 2, 3]);
    three.follow(1, 0, || vec![1, 2, 3]);
    let timeout = 3 * T;
    assert_eq!(two.next_wake_ns(), timeout);
    assert_eq!(three.next_wake_ns(), timeout + BACKUP_TIMEOUTS * timeout);
    // Woken for something else past the deadline, the backup judges on time.
    assert!(three.deadline_passed(timeout));
    three.poll(timeout, 1, || vec![1, 2, 3]);
    assert_eq!(three.suspected().collect::<Vec<_>>(), [1]);
    // A member woken late gives its leader a period from then before suspecting it.
    two.woke_late(timeout - 1, LATE_WAKE_NS);
    assert_eq!(two.stats().late_wakes, 1);
    assert_eq!(two.next_wake_ns(), timeout - 1 + T, "the deadline moved to a period from the wake-up");
    two.poll(timeout, 1, || vec![1, 2, 3]);
    assert!(two.suspected().next().is_none(), "not suspected within its grace");
    // A second late wake-up within a timeout gives no second grace.
    two.woke_late(timeout + T / 2, LATE_WAKE_NS);
    assert_eq!(two.next_wake_ns(), timeout - 1 + T, "one grace a timeout");
    // A wake-up late by less than the threshold changes nothing.
    let mut four = leader_watch(2);
    four.follow(1, 0, || vec![1, 2, 3]);
    four.woke_late(timeout - 1, 1_000);
    assert_eq!(four.next_wake_ns(), timeout);
}

#[test]
fn under_leader_fanout_only_the_leader_sends_and_a_follower_watches_only_its_leader() {
    let mut w = leader_watch(2);
    // No leader known: nothing sent, no one watched, no wake-up for either.
    assert!(sent_at(&mut w, 0).is_empty());
    assert_eq!(w.next_wake_ns(), u64::MAX);
    w.heard(&heartbeat(1, 1), 0, 0);
    assert_eq!(w.stats().heartbeats_in, 0, "no one watched yet");
    // Following 1: still silent, and 1 alone is watched (3's silence is not news).
    w.follow(1, T, || vec![1, 2, 3]);
    assert!(sent_at(&mut w, T).is_empty());
    assert_eq!(w.next_wake_ns(), T + 3 * T, "the leader's deadline, a full timeout from now");
    w.heard(&heartbeat(1, 2), 2 * T, 2 * T);
    w.heard(&heartbeat(3, 1), 2 * T, 2 * T);
    assert_eq!(w.stats().heartbeats_in, 1);
    assert_eq!(w.poll(4 * T, 1, || vec![1, 2, 3]), None);
    assert_eq!(w.suspected().count(), 0);
    // Silent past T + Lambda: the leader, and only it, is suspected; 2 is first in line.
    assert_eq!(w.poll(5 * T, 1, || vec![1, 2, 3]), Some(Act::Suspect { leader: 1, campaign: true }));
    assert_eq!(w.suspected().collect::<Vec<_>>(), [1]);
    // A candidate (no leader) keeps watching 1, whose heartbeat ends a false suspicion.
    w.follow(0, 5 * T, || vec![1, 2, 3]);
    w.heard(&heartbeat(1, 3), 5 * T + 1, 5 * T + 1);
    assert_eq!(w.suspected().count(), 0);
    // Leading: heartbeats to both others every period, no one watched.
    w.follow(2, 6 * T, || vec![1, 2, 3]);
    assert_eq!(sent_at(&mut w, 6 * T), [1, 3]);
    assert_eq!(w.next_wake_ns(), 7 * T);
    assert_eq!(sent_at(&mut w, 7 * T), [1, 3]);
    assert_eq!(w.poll(100 * T, 2, || vec![1, 2, 3]), None);
    assert_eq!(w.suspected().count(), 0);
    // Stepped down with no successor: silent, so its followers suspect it.
    w.follow(0, 7 * T + 1, || vec![1, 2, 3]);
    assert!(sent_at(&mut w, 8 * T).is_empty());
    assert_eq!(w.next_wake_ns(), u64::MAX);
    // A follower again, of 3: watched from now, with its grace.
    w.follow(3, 8 * T, || vec![1, 2, 3]);
    assert!(sent_at(&mut w, 8 * T).is_empty());
    assert_eq!(w.poll(10 * T, 3, || vec![1, 2, 3]), None);
    assert!(w.poll(11 * T, 3, || vec![1, 2, 3]).is_some());
}

#[test]
fn rank_skips_the_leader_itself_and_the_suspected() {
    assert_eq!(campaign_rank(2, 1, &[1, 2, 3], |_| false), 0);
    assert_eq!(campaign_rank(3, 1, &[1, 2, 3], |_| false), 1);
    assert_eq!(campaign_rank(3, 1, &[1, 2, 3], |m| m == 2), 0);
    assert_eq!(campaign_rank(5, 3, &[1, 2, 3, 4, 5], |_| false), 3);
    assert_eq!(campaign_rank(1, 3, &[1, 2, 3], |_| false), 0);
}

#[test]
fn a_silent_leader_s_port_is_probed_and_a_refusal_is_a_suspicion_a_later_word_ends() {
    let config =
        WatchConfig { period_ns: T, lambda_ns: 100 * T, fanout: Fanout::Leader, probe_ns: Some(T / 2) };
    let voters = || vec![1, 2, 3];
    // Member 2 is first in line after leader 1; member 3 is a backup and never probes of
    // its own accord.
    let (mut two, mut three) =
        (Watch::new(config, 2, [1, 2, 3], 1, 0), Watch::new(config, 3, [1, 2, 3], 1, 0));
    two.follow(1, 0, voters);
    three.follow(1, 0, voters);
    two.heard_from(1, T, T);
    assert_eq!(two.next_wake_ns(), T + T + T / 2, "T + probe after the leader's last word");
    assert_eq!(two.probe_due(2 * T), None);
    assert_eq!(two.probe_due(2 * T + T / 2), Some(1));
    assert_eq!(two.probe_due(2 * T + T / 2 + 1), None, "one probe, then again a period later");
    assert_eq!(two.next_wake_ns(), 3 * T + T / 2);
    assert_eq!(three.probe_due(10 * T), None);
    // A word before the next probe: nothing refused, nothing suspected.
    two.heard_from(1, 3 * T, 3 * T);
    assert_eq!(two.poll(3 * T, 1, voters), None);
    // The port refuses: suspected at once, long before Lambda, and the first in line stands.
    assert_eq!(two.probe_due(4 * T + T / 2), Some(1));
    two.refused(1, 4 * T + T / 2 + 10);
    assert_eq!(two.poll(4 * T + T / 2 + 10, 1, voters), Some(Act::Suspect { leader: 1, campaign: true }));
    assert_eq!((two.stats().probes, two.stats().probes_refused), (2, 1));
    // A backup asked for its vote probes at once (not twice within a quarter period), and a
    // refusal lets it grant the vote.
    assert_eq!(three.probe_now(5 * T), Some(1));
    assert_eq!(three.probe_now(5 * T + T / 8), None);
    three.refused(1, 5 * T + 10);
    assert!(matches!(three.poll(5 * T + 10, 1, voters), Some(Act::Suspect { leader: 1, .. })));
    // Words the leader sent before the refusal change nothing; one after it (the leader
    // back on its port) ends the suspicion.
    three.heard_from(1, 5 * T, 6 * T);
    assert_eq!(three.suspected_leader(), Some(1));
    three.heard_from(1, 6 * T, 6 * T);
    assert_eq!(three.suspected_leader(), None);
    // Refusals from a member not followed are not its business.
    let mut fresh = Watch::new(config, 2, [1, 2, 3], 1, 0);
    fresh.follow(1, 0, voters);
    fresh.refused(3, T);
    assert_eq!((fresh.poll(T, 1, voters), fresh.suspected_leader()), (None, None));
}
