use super::classes::parse_class_counters;
use super::*;

#[test]
fn the_configuration_is_checked_field_by_field() {
    assert_eq!(LaneTestbedConfig::default().check(), Ok(()));
    let with = |change: fn(&mut LaneTestbedConfig)| {
        let mut config = LaneTestbedConfig::default();
        change(&mut config);
        config.check().unwrap_err().to_string()
    };
    assert!(with(|c| c.hosts = 1).contains("hosts must be from 2 to 16, got 1"));
    assert!(with(|c| c.hosts = 17).contains("got 17"));
    assert!(with(|c| c.rate_bps = 999_999).contains("from 1 to 100000 Mbit/s"));
    assert!(with(|c| c.lane_limit = 0).contains("lane queue limit"));
    assert!(with(|c| c.bulk_limit = MAX_QUEUE_LIMIT + 1).contains("bulk queue limit"));
    for prefix in ["other", "kairos-", "kairos/x", "Kairos", "kairos-a-very-long-prefix-x"] {
        let config = LaneTestbedConfig { prefix: prefix.into(), ..LaneTestbedConfig::default() };
        assert!(config.check().unwrap_err().to_string().contains("name prefix"), "{prefix}");
    }
    let config = LaneTestbedConfig { prefix: "kairos-prio2".into(), ..LaneTestbedConfig::default() };
    assert_eq!(config.check(), Ok(()));
    assert_eq!(config.lane_queue_bytes(), 64 * 1500);
}

#[test]
fn stale_names_are_this_testbeds_only() {
    assert_eq!(owner_of("kairos-1234-sw"), Some(1234));
    assert_eq!(owner_of("kairos-1234-h15"), Some(1234));
    assert_eq!(owner_of("kairos-prio-77-h0"), Some(77));
    // The two-namespace testbed's, another tool's, and near misses.
    assert_eq!(owner_of("kairos-src-3-1234"), None);
    assert_eq!(owner_of("kairos-fwd-0-99"), None);
    assert_eq!(owner_of("other-1234-sw"), None);
    assert_eq!(owner_of("kairos-1234-h"), None);
    assert_eq!(owner_of("kairos-1234-hx"), None);
    assert_eq!(owner_of("kairos-x-sw"), None);
}

#[test]
fn a_prefix_is_claimed_once_at_a_time() {
    let first = PrefixClaim::take("kairos-claim-test").unwrap();
    assert!(matches!(PrefixClaim::take("kairos-claim-test"), Err(LaneTestbedError::PrefixInUse(_))));
    drop(first);
    PrefixClaim::take("kairos-claim-test").unwrap();
}

#[test]
fn the_lane_mark_is_dscp_ef() {
    assert_eq!(LANE_TOS, 0xb8);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    mark_lane_socket(&socket).unwrap();
    assert_eq!(options::type_of_service(&socket).unwrap(), 0xb8);
}

#[test]
fn counters_are_read_from_tc_output() {
    let text = "class htb 1:10 parent 1:1 leaf 10: prio 0 rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b \n Sent 7400 bytes 100 pkt (dropped 0, overlimits 14 requeues 0) \n backlog 0b 0p requeues 0\n\nclass htb 1:1 root rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b \n Sent 75792604 bytes 50666 pkt (dropped 0, overlimits 0 requeues 0) \n\nclass htb 1:20 parent 1:1 leaf 20: prio 1 rate 8Kbit ceil 100Mbit burst 1600b cburst 1600b \n Sent 75785204 bytes 50566 pkt (dropped 49094, overlimits 50052 requeues 0) \n";
    let counters = parse_class_counters(text).unwrap();
    assert_eq!(counters.lane, ClassCount { packets: 100, bytes: 7400, dropped: 0 });
    assert_eq!(counters.bulk, ClassCount { packets: 50566, bytes: 75785204, dropped: 49094 });
    assert!(parse_class_counters("class htb 1:1 root\n").unwrap_err().to_string().contains("no counters"));
}

#[test]
fn calibration_figures_and_their_split_over_two_hops() {
    let mut latencies: Vec<u64> = (1..=1000).map(|i| 10_000 + i).collect();
    latencies.reverse();
    let c = Calibration::from_latencies(0, 1, &mut latencies, 2).unwrap();
    assert_eq!((c.samples, c.lost, c.min_ns, c.max_ns), (1000, 2, 10_001, 11_000));
    assert_eq!((c.p50_ns, c.p99_ns, c.p999_ns), (10_500, 10_990, 10_999));
    // A frame takes 1.2 us at 10 Gbit/s: off the minimum, onto the jitter.
    assert_eq!(transmission_ns(MTU_BYTES, 10_000_000_000), 1_200);
    assert_eq!(c.min_delay_per_link_ns(10_000_000_000), 5_000 - 1_200);
    assert_eq!(c.max_jitter_per_link_ns(10_000_000_000), 5_500 - 3_800);
    // At 1 Gbit/s a frame (12 us) takes longer than the hop: no minimum delay is left.
    assert_eq!(c.min_delay_per_link_ns(1_000_000_000), 0);
    assert_eq!(c.max_jitter_per_link_ns(1_000_000_000), 5_500);
    for rate in [1_000_000_000, 10_000_000_000, 100_000_000_000] {
        let (min, jitter) = (c.min_delay_per_link_ns(rate), c.max_jitter_per_link_ns(rate));
        // The model's minimum for any lane packet (at most a frame) is below the wire's...
        assert!(
            2 * (min + transmission_ns(MTU_BYTES, rate))
                <= c.min_ns.max(2 * transmission_ns(MTU_BYTES, rate))
        );
        // ...and two hops' minimum and jitter add up to at least the percentile.
        assert!(2 * (min + jitter) >= c.p999_ns);
    }
    assert_eq!(transmission_ns(1, 3), 2_666_666_667, "rounded up");
    assert!(Calibration::from_latencies(0, 1, &mut [], 5).is_none());
}
