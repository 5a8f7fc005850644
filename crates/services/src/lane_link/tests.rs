use super::*;
use crate::frame;

#[test]
fn packing_follows_both_schemas() {
    let p = Packing { packet_bytes: 1_472 };
    // HD-6: 55 chunks of 22 bytes; HD-8: 40 chunks of 31.
    assert_eq!(p.max_message(), 1_210);
    assert!(p.fits([1_210].into_iter()));
    assert!(!p.fits([1_211].into_iter()));
    // 40 one-chunk messages fit HD-8 exactly; a 41st does not, though HD-6 takes 55.
    assert!(p.fits(std::iter::repeat_n(20, 40)));
    assert!(!p.fits(std::iter::repeat_n(20, 41)));
    // With no heartbeats beside it, a fragment fills the packet; with two, it fits beside
    // two of the largest heartbeats in both schemas.
    assert_eq!(p.fragment_bytes(0), 1_210 - LANE_HEADER_BYTES - frame::HEADER_BYTES);
    let beat = LANE_HEADER_BYTES + MAX_BEAT_BYTES;
    let fragment = LANE_HEADER_BYTES + frame::HEADER_BYTES + p.fragment_bytes(2);
    assert!(p.fits([beat, beat, fragment].into_iter()));
    assert!(!p.fits([beat, beat, fragment + 31].into_iter()));
    // The least packet holds the heartbeats and a fragment, and more members need more.
    let least = Packing::least_packet_bytes(3);
    let q = Packing { packet_bytes: least as usize };
    let beat = LANE_HEADER_BYTES + MAX_BEAT_BYTES;
    assert!(q.fits([beat, beat, LANE_HEADER_BYTES + frame::HEADER_BYTES + 64].into_iter()));
    assert!(Packing::least_packet_bytes(7) > least);
}

#[test]
fn releases_keep_the_phase_of_the_first() {
    assert_eq!(release_at_or_after(1_000, 100, 0), 1_000);
    assert_eq!(release_at_or_after(1_000, 100, 1_000), 1_000);
    assert_eq!(release_at_or_after(1_000, 100, 1_001), 1_100);
    assert_eq!(release_at_or_after(1_000, 100, 1_100), 1_100);
    assert_eq!(release_at_or_after(1_000, 100, 12_345), 12_400);
}

#[test]
fn a_framed_message_parses_back_and_short_ones_do_not() {
    let m = LaneLink::framed(KIND_BEAT, 7, 42, b"hello");
    let p = parse_lane_message(&m).unwrap();
    assert_eq!((p.kind, p.to, p.handed_ns, p.payload), (KIND_BEAT, 7, 42, &b"hello"[..]));
    assert!(parse_lane_message(&m[..LANE_HEADER_BYTES]).unwrap().payload.is_empty());
    assert!(parse_lane_message(&m[..LANE_HEADER_BYTES - 1]).is_none());
    assert!(parse_lane_message(&[]).is_none());
}

#[test]
fn the_peers_must_all_be_lane_hosts_one_a_host() {
    use crate::peer::PeerAddr;
    let lane = |h: &str| PeerAddr::Lane(h.into());
    let peers: BTreeMap<u64, PeerAddr> = [(1, lane("h0")), (2, lane("h1")), (3, lane("h2"))].into();
    assert_eq!(other_hosts(2, &peers).unwrap(), ["h0", "h2"]);
    let mixed: BTreeMap<u64, PeerAddr> =
        [(1, lane("h0")), (2, PeerAddr::Udp("127.0.0.1:1".parse().unwrap()))].into();
    assert!(other_hosts(1, &mixed).unwrap_err().to_string().contains("on the lane or off it"));
    let shared: BTreeMap<u64, PeerAddr> = [(1, lane("h0")), (2, lane("h0"))].into();
    // Every member of a cluster names its tunnels alike; another cluster, otherwise.
    let other: BTreeMap<u64, PeerAddr> = [(1, lane("h3")), (2, lane("h1")), (3, lane("h2"))].into();
    // Members built apart agree on it (FNV-1a of "1=lane:h0;2=lane:h1;3=lane:h2;").
    assert_eq!(tunnel_name(LANE_TUNNEL, &peers), "kv-lane-04ad0470");
    assert_ne!(tunnel_name(LANE_TUNNEL, &peers), tunnel_name(LANE_TUNNEL, &other));
    assert!(tunnel_name(LANE_TUNNEL, &peers).starts_with("kv-lane-"));
    assert!(other_hosts(1, &shared).unwrap_err().to_string().contains("both on lane host h0"));
}

#[test]
fn the_settings_are_checked() {
    let c = |packet_bytes, period_us| LaneLinkConfig {
        node_dir: PathBuf::from("/nonexistent"),
        period: Duration::from_micros(period_us),
        packet_bytes,
    };
    assert!(c(1_472, 100).check(3).is_ok());
    assert!(c(1_473, 100).check(3).is_err());
    assert!(
        c(Packing::least_packet_bytes(3) - 1, 100).check(3).unwrap_err().to_string().contains("out of range")
    );
    assert!(c(Packing::least_packet_bytes(3), 100).check(3).is_ok());
    assert!(c(736, 0).check(3).is_err());
}
