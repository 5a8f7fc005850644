use super::*;
use crate::table::{TableHeader, bytes_for};
use kairos_ring::bridge::HeapMemory;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;

#[test]
fn the_recorder_counts_inside_the_window_and_closes_at_the_end() {
    let mut r = Recorder::new(KAIROS, Some(5), (1_000, 3_500));
    r.suspect(2, 0, 500, 600);
    r.trust(2, 1_500, None);
    r.suspect(2, 1_400, 2_000, 2_010);
    r.suspect(2, 1_400, 2_100, 2_110);
    r.trust(2, 2_500, None);
    r.suspect(3, 2_600, 3_000, 3_000);
    r.suspect(2, 3_400, 3_600, 3_600);
    let record = r.finish(4_000);
    assert_eq!(record.suspicions, 2, "the ones before and after the window are not counted");
    assert_eq!(record.suspected_ns, 500 + 500 + 500, "time suspected is cut at the window's ends");
    assert_eq!(record.stored.len(), 2);
    assert_eq!(record.stored[0].until_ns, Some(2_500));
    assert_eq!(record.stored[1].until_ns, None);
}

#[test]
fn three_members_on_loopback_see_each_other_and_then_a_silent_one() {
    let ports: Vec<u16> =
        (0..3).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
    let members: BTreeMap<u64, PeerAddr> = (1..=3)
        .map(|m| (m, PeerAddr::Udp(SocketAddr::from(([127, 0, 0, 1], ports[m as usize - 1])))))
        .collect();
    let config = |id: u64, run_ms: u64| MemberConfig {
        id,
        members: members.clone(),
        lane: None,
        period_ns: 200_000,
        // Lambda well above what a loaded test machine takes from a thread (17 ms of a
        // debug build's bump thread was seen), so only the stopped member is suspected.
        threshold_ns: 60_000_000,
        sweep_thresholds_ns: vec![],
        peers: true,
        type_of_service: None,
        core: None,
        fifo_priority: 0,
        app_bump_ns: Some(50_000),
        incarnation: 1,
        run_for_ns: Some(run_ms * 1_000_000),
        measure_from_ns: 0,
        measure_until_ns: None,
        time_interrupts: false,
        seed: 7,
    };
    let tables: Vec<Arc<AliveTable<HeapMemory>>> = (1..=3)
        .map(|id| {
            let header =
                TableHeader { period_ns: 200_000, threshold_ns: 60_000_000, member: id, incarnation: 1 };
            let others: Vec<u64> = (1..=3).filter(|&m| m != id).collect();
            Arc::new(AliveTable::init(HeapMemory::new(bytes_for(2)), &header, &others).unwrap())
        })
        .collect();
    let stop = AtomicBool::new(false);
    let reports: Vec<MemberReport> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=3u64)
            .map(|id| {
                let (config, table, stop) =
                    (config(id, if id == 3 { 300 } else { 600 }), &tables[id as usize - 1], &stop);
                s.spawn(move || run(&config, table, stop).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Member 3 stopped at 300 ms; 1 and 2 suspected it within T + Lambda (and the wake-up).
    for (i, r) in reports.iter().take(2).enumerate() {
        assert!(r.heartbeats_received > 100, "member {} heard {}", i + 1, r.heartbeats_received);
        let row = tables[i].find(3).unwrap();
        let since = row.suspected_since_ns.expect("member 3 suspected");
        assert!(row.noticed_ns.unwrap() >= since);
        assert!(row.noticed_ns.unwrap() - row.last_fresh_ns < 60_200_000 + 20_000_000, "{row:?}");
        let other = tables[i].find(if i == 0 { 2 } else { 1 }).unwrap();
        assert!(!other.is_suspected(), "a live member suspected: {other:?}");
        assert!(other.counter > 0, "the application's counter travelled");
        let kairos = &r.detectors[0];
        assert_eq!(kairos.detector, KAIROS);
        assert!(kairos.stored.iter().any(|s| s.subject == 3));
    }
}
