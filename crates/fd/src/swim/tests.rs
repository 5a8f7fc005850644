use super::*;
use rand_core::TryRng;

fn round_trip_header(header: Header<SwimId>) {
    let mut out = Vec::new();
    SwimCodec.encode_header(&header, &mut out).unwrap();
    let mut slice = &out[..];
    assert_eq!(SwimCodec.decode_header(&mut slice).unwrap(), header);
    assert!(slice.is_empty());
}

#[test]
fn headers_and_members_round_trip_and_garbage_fails() {
    let a = SwimId { member: 1, generation: 7 };
    let b = SwimId { member: 300, generation: u64::MAX };
    for message in [
        Message::Ping(3),
        Message::Ack(255),
        Message::PingReq { target: b, probe_number: 1 },
        Message::IndirectPing { origin: a, probe_number: 2 },
        Message::IndirectAck { target: b, probe_number: 3 },
        Message::ForwardedAck { origin: a, probe_number: 4 },
        Message::Announce,
        Message::Feed,
        Message::Gossip,
        Message::Broadcast,
        Message::TurnUndead,
    ] {
        round_trip_header(Header { src: a, src_incarnation: 9, dst: b, message });
    }
    let member = Member::new(b, 65_535, State::Suspect);
    let mut out = Vec::new();
    SwimCodec.encode_member(&member, &mut out).unwrap();
    assert_eq!(SwimCodec.decode_member(&mut &out[..]).unwrap(), member);
    for cut in 0..out.len() {
        assert!(SwimCodec.decode_member(&mut &out[..cut]).is_err());
    }
    assert!(SwimCodec.decode_header(&mut &[0xffu8; 40][..]).is_err());
    let header = Header { src: a, src_incarnation: 1, dst: b, message: Message::Gossip };
    let mut packet = Vec::new();
    encode_packet(&header, &[member.clone(), Member::new(a, 0, State::Down)], &mut packet).unwrap();
    let (h, ms) = decode_packet(&packet).unwrap();
    assert_eq!((h, ms.len()), (header, 2));
    packet.push(0);
    assert!(decode_packet(&packet).is_err());
    let mut tiny = [0u8; 3];
    assert_eq!(SwimCodec.encode_member(&member, &mut tiny[..]), Err(SwimCodecError::NoRoom));
}

/// Three SWIM instances exchanging packets in memory, time passed in.
struct Cluster {
    peers: Vec<SwimPeer>,
    alive: Vec<bool>,
    /// Running, but cut off: every packet from or to it lost.
    cut: Vec<bool>,
    now_ns: u64,
}

impl Cluster {
    fn new(settings: &SwimSettings) -> Self {
        let mut peers: Vec<SwimPeer> =
            (1..=3).map(|m| SwimPeer::new(SwimId { member: m, generation: 1 }, settings, m, 0)).collect();
        for (i, p) in peers.iter_mut().enumerate() {
            let others: Vec<u64> = (1..=3).filter(|&m| m != i as u64 + 1).collect();
            p.announce(&others, 0);
        }
        Self { peers, alive: vec![true; 3], cut: vec![false; 3], now_ns: 0 }
    }

    /// Runs to `until_ns` in steps of `step_ns`, delivering packets at once.
    fn run(&mut self, until_ns: u64, step_ns: u64) {
        while self.now_ns < until_ns {
            self.now_ns += step_ns;
            let now = self.now_ns;
            for i in 0..3 {
                if self.alive[i] {
                    self.peers[i].poll(now);
                }
            }
            loop {
                let mut sent: Vec<(usize, Vec<u8>)> = Vec::new();
                for i in 0..3 {
                    let out: Vec<_> = self.peers[i].take_outbox().collect();
                    if self.alive[i] && !self.cut[i] {
                        sent.extend(out.into_iter().map(|(m, b)| (m as usize - 1, b)));
                    }
                }
                if sent.is_empty() {
                    break;
                }
                for (to, bytes) in sent {
                    if self.alive[to] && !self.cut[to] {
                        self.peers[to].handle_data(&bytes, now);
                    }
                }
            }
        }
    }
}

/// How a member goes away for a while in [`a_member_that_comes_back_is_up_again_everywhere`].
#[derive(Debug, Clone, Copy)]
enum Away {
    /// Stopped (SIGSTOP, a host that took its core): no timers, nothing in or out.
    Frozen,
    /// Running but cut off (link down): its timers fire, every packet lost.
    Cut,
    /// Killed, then started again with the next generation (`fd detect`'s restart).
    Restarted,
}

#[test]
fn a_member_that_comes_back_is_up_again_everywhere() {
    // Away for every length around the time to be declared down, at the 1 ms period the
    // tests run `fd detect` at: afterwards no member may keep a verdict of down on a live
    // member (a trial would never find the group calm).
    let mut stuck = Vec::new();
    for away in [Away::Frozen, Away::Cut, Away::Restarted] {
        for away_ms in (2..60).step_by(3) {
            for member in 0..3 {
                let settings = SwimSettings::aggressive(3, 1_000_000);
                let mut c = Cluster::new(&settings);
                c.run(100_000_000, 50_000);
                let from = c.now_ns;
                match away {
                    Away::Cut => c.cut[member] = true,
                    Away::Frozen | Away::Restarted => c.alive[member] = false,
                }
                c.run(from + away_ms * 1_000_000, 50_000);
                c.cut[member] = false;
                c.alive[member] = true;
                if let Away::Restarted = away {
                    let id = SwimId { member: member as u64 + 1, generation: 2 };
                    let others: Vec<u64> = (1..=3).filter(|&m| m != id.member).collect();
                    c.peers[member] = SwimPeer::new(id, &settings, away_ms, c.now_ns);
                    c.peers[member].announce(&others, c.now_ns);
                }
                c.run(c.now_ns + 1_000_000_000, 50_000);
                for (i, p) in c.peers.iter().enumerate() {
                    for m in (1..=3).filter(|&m| m != i as u64 + 1) {
                        if p.down_since_ns(m).is_some() || !p.is_active(m) {
                            stuck.push((away, away_ms, member + 1, i + 1, m, p.is_active(m)));
                        }
                    }
                }
            }
        }
    }
    assert!(stuck.is_empty(), "(how, ms away, member away, observer, member, active) still down: {stuck:?}");
}

#[test]
fn a_verdict_of_down_on_a_member_foca_holds_active_is_withdrawn_at_the_next_call() {
    // The order `foca` may tell things in (a member down, then renamed while both of its
    // identities were active, which says nothing of liveness) left the verdict standing:
    // made here directly.
    let settings = SwimSettings::aggressive(3, 1_000_000);
    let mut c = Cluster::new(&settings);
    c.run(100_000_000, 50_000);
    assert!(c.peers[0].is_active(2));
    c.peers[0].take_events().for_each(drop);
    c.peers[0].asked.down.insert(2, 1);
    c.peers[0].poll(c.now_ns);
    assert_eq!(c.peers[0].down_since_ns(2), None);
    let events: Vec<SwimEvent> = c.peers[0].take_events().collect();
    assert_eq!(events, [SwimEvent::Up { member: 2, at_ns: c.now_ns }]);
}

#[test]
fn aggressive_swim_declares_a_silent_member_down_within_milliseconds() {
    let settings = SwimSettings::aggressive(3, AGGRESSIVE_BASE_PERIOD_NS);
    let mut c = Cluster::new(&settings);
    c.run(50_000_000, 50_000);
    assert!(c.peers[0].is_active(2) && c.peers[0].is_active(3), "the cluster did not form");
    let down_events: usize = c.peers.iter_mut().map(|p| p.take_events().count()).sum();
    assert_eq!(down_events, 0, "a member was declared down in a quiet cluster");
    let killed_at = c.now_ns;
    c.alive[2] = false;
    c.run(killed_at + 100_000_000, 50_000);
    for i in 0..2 {
        let at = c.peers[i].down_since_ns(3).expect("member 3 declared down");
        assert!(at > killed_at && at < killed_at + 50_000_000, "down {} us after", (at - killed_at) / 1_000);
    }
    assert_eq!(c.peers[0].errors(), 0);
}

#[test]
fn a_group_that_lost_packets_and_members_for_a_while_comes_back_whole() {
    // Random starts, freezes and packet loss (up to a quarter) in the first second, packets
    // late by up to 2 ms: a member could end up holding every other down while they, renewed
    // since, held it active under an identity it no longer has, and nothing reached it again
    // (2,968 verdicts stuck in 3,000 such groups before the group's members were announced to
    // again; `fd detect` once waited 30 s for one). 1.5 s after the faults, every member
    // holds every other active.
    let settings = SwimSettings::aggressive(3, 1_000_000);
    let mut stuck = Vec::new();
    for seed in 0..150u64 {
        let mut rng = SplitMix(seed * 7919 + 1);
        let mut r = |n: u64| rng.try_next_u64().unwrap_or(0) % n.max(1);
        let mut peers: Vec<SwimPeer> = (1..=3)
            .map(|m| SwimPeer::new(SwimId { member: m, generation: 1 }, &settings, m + seed, 0))
            .collect();
        let start: Vec<u64> = (0..3).map(|_| r(50) * 1_000_000).collect();
        let mut started = [false; 3];
        // (member, from, to), ns.
        let freezes: Vec<(usize, u64, u64)> = (0..r(6))
            .map(|_| {
                let (m, from) = (r(3) as usize, r(600) * 1_000_000);
                (m, from, from + r(200) * 1_000_000)
            })
            .collect();
        let frozen = |m: usize, t: u64| freezes.iter().any(|&(f, a, b)| f == m && t >= a && t < b);
        let drop_percent = r(25);
        let mut in_flight: Vec<(u64, usize, Vec<u8>)> = Vec::new();
        let (step, faults_end, end) = (100_000, 1_000_000_000, 2_500_000_000);
        let mut now = 0;
        while now < end {
            now += step;
            for (i, s) in started.iter_mut().enumerate() {
                if !*s && now >= start[i] {
                    *s = true;
                    let others: Vec<u64> = (1..=3).filter(|&m| m != i as u64 + 1).collect();
                    peers[i].announce(&others, now);
                }
            }
            let mut k = 0;
            while k < in_flight.len() {
                let (at, to, _) = &in_flight[k];
                if *at <= now && started[*to] && !frozen(*to, now) {
                    let (_, to, bytes) = in_flight.swap_remove(k);
                    peers[to].handle_data(&bytes, now);
                } else {
                    k += 1;
                }
            }
            for i in (0..3).filter(|&i| started[i] && !frozen(i, now)) {
                peers[i].poll(now);
                let out: Vec<_> = peers[i].take_outbox().collect();
                for (m, bytes) in out {
                    if now < faults_end && r(100) < drop_percent {
                        continue;
                    }
                    in_flight.push((now + r(2_000_000), m as usize - 1, bytes));
                }
            }
        }
        for (i, p) in peers.iter().enumerate() {
            for m in (1..=3).filter(|&m| m != i as u64 + 1) {
                if p.down_since_ns(m).is_some() || !p.is_active(m) {
                    stuck.push((seed, i + 1, m));
                }
            }
        }
    }
    assert!(stuck.is_empty(), "(seed, observer, member) still down: {stuck:?}");
}
