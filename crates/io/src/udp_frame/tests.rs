use super::*;

fn endpoints() -> (Endpoint, Endpoint) {
    let src =
        Endpoint { mac: [2, 0, 0, 0, 0, 1], addr: SocketAddrV4::new(Ipv4Addr::new(10, 211, 0, 1), 7001) };
    let dst =
        Endpoint { mac: [2, 0, 0, 0, 0, 2], addr: SocketAddrV4::new(Ipv4Addr::new(10, 211, 0, 2), 7002) };
    (src, dst)
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

/// Frames whose checksums were computed apart from this code (RFC 1071 over the header, and
/// over the pseudo-header and segment), with an even and an odd payload.
const KNOWN: [(&str, &[u8], u16); 2] = [
    (
        "02000000000202000000000108004500002200014000401125220ad300010ad300021b591b5a000e6f2f6b6169726f73",
        b"kairos",
        1,
    ),
    ("02000000000202000000000108004500001f00024000401125240ad300010ad300021b591b5a000be0176f6464", b"odd", 2),
];

#[test]
fn the_ipv4_checksum_of_a_textbook_header() {
    // The header of the usual worked example: checksum 0xb861.
    let mut header = hex("450000730000400040110000c0a80001c0a800c7");
    assert_eq!(ipv4_checksum(&header), 0xb861);
    header[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
    assert_eq!(ipv4_checksum(&header), 0, "a valid header sums to zero");
}

#[test]
fn built_frames_match_known_frames_byte_for_byte() {
    let (src, dst) = endpoints();
    for (known, payload, ip_id) in KNOWN {
        let mut out = [0u8; 128];
        let len = write_udp_frame(&src, &dst, 0, ip_id, payload, &mut out).unwrap();
        assert_eq!(&out[..len], &hex(known)[..], "payload {payload:?}");
        let ip = &out[ETHERNET_LEN..len];
        assert_eq!(ipv4_checksum(&ip[..IPV4_LEN]), 0);
        assert_eq!(udp_checksum(*src.addr.ip(), *dst.addr.ip(), &ip[IPV4_LEN..]), 0);
    }
}

#[test]
fn the_type_of_service_byte_is_written_and_summed() {
    let (src, dst) = endpoints();
    let mut out = [0u8; 128];
    let len = write_udp_frame(&src, &dst, 46 << 2, 7, b"lane", &mut out).unwrap();
    let ip = &out[ETHERNET_LEN..len];
    assert_eq!(ip[1], 0xb8, "DSCP EF");
    assert_eq!(ipv4_checksum(&ip[..IPV4_LEN]), 0, "the checksum covers it");
    assert_eq!(parse_udp_frame(&out[..len]).unwrap().payload, b"lane");
}

#[test]
fn build_and_parse_round_trip() {
    let (src, dst) = endpoints();
    for len in [0, 1, 59, 60, 61, 1000, 1472] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let mut out = vec![0u8; HEADERS_LEN + len];
        let total = write_udp_frame(&src, &dst, 0, len as u16, &payload, &mut out).unwrap();
        assert_eq!(total, HEADERS_LEN + len);
        let datagram = parse_udp_frame(&out).unwrap();
        assert_eq!(datagram, UdpDatagram { src, dst, payload: &payload });
        // Ethernet padding after the datagram is not payload.
        out.extend_from_slice(&[0xee; 20]);
        assert_eq!(parse_udp_frame(&out).unwrap().payload, &payload[..]);
    }
    let mut small = [0u8; HEADERS_LEN + 3];
    assert_eq!(write_udp_frame(&src, &dst, 0, 0, b"four", &mut small), None, "too small a buffer");
    let huge = vec![0u8; 70_000];
    assert_eq!(write_udp_frame(&src, &dst, 0, 0, &huge, &mut vec![0u8; 80_000]), None, "past an IPv4 packet");
}

#[test]
fn truncated_and_foreign_frames_are_refused_with_their_reason() {
    let (src, dst) = endpoints();
    let mut frame = [0u8; HEADERS_LEN + 6];
    write_udp_frame(&src, &dst, 0, 9, b"kairos", &mut frame).unwrap();
    for cut in 0..frame.len() {
        let err = parse_udp_frame(&frame[..cut]).unwrap_err();
        assert!(matches!(err, FrameError::Truncated { .. }), "{cut} bytes: {err}");
    }
    let with = |at: usize, byte: u8| {
        let mut f = frame;
        f[at] = byte;
        parse_udp_frame(&f).map(|_| ())
    };
    assert_eq!(with(12, 0x86), Err(FrameError::NotIpv4 { ethertype: 0x8600 }));
    assert_eq!(with(ETHERNET_LEN, 0x65), Err(FrameError::BadIpHeader), "version 6");
    assert_eq!(with(ETHERNET_LEN, 0x44), Err(FrameError::BadIpHeader), "a 16-byte header");
    assert_eq!(with(ETHERNET_LEN + 8, 63), Err(FrameError::IpChecksum), "TTL changed in flight");
    // Fields behind the checksum: re-sum the header after changing them.
    let resummed = |at: usize, byte: u8| {
        let mut f = frame;
        f[at] = byte;
        f[ETHERNET_LEN + 10..ETHERNET_LEN + 12].fill(0);
        let sum = ipv4_checksum(&f[ETHERNET_LEN..ETHERNET_LEN + IPV4_LEN]);
        f[ETHERNET_LEN + 10..ETHERNET_LEN + 12].copy_from_slice(&sum.to_be_bytes());
        parse_udp_frame(&f).map(|_| ())
    };
    assert_eq!(resummed(ETHERNET_LEN + 9, 6), Err(FrameError::NotUdp { protocol: 6 }));
    assert_eq!(resummed(ETHERNET_LEN + 6, 0x20), Err(FrameError::Fragment), "more fragments");
    assert_eq!(resummed(ETHERNET_LEN + 7, 0x01), Err(FrameError::Fragment), "an offset");
    assert!(
        matches!(resummed(ETHERNET_LEN + 3, 10), Err(FrameError::BadIpHeader)),
        "shorter than its header"
    );
    assert!(
        matches!(resummed(ETHERNET_LEN + 3, 0xff), Err(FrameError::Truncated { .. })),
        "longer than the frame"
    );
    let udp = ETHERNET_LEN + IPV4_LEN;
    assert_eq!(with(udp + 5, 7), Err(FrameError::BadUdpLength { len: 7 }));
    assert_eq!(with(udp + 5, 0xff), Err(FrameError::BadUdpLength { len: 0xff }));
    // The UDP checksum is not checked (a veth leaves it partial): a wrong one still parses.
    assert!(with(udp + 6, 0).is_ok());
}

#[test]
fn skipped_frames_are_counted_by_reason() {
    let mut counts = SkipCounts::default();
    for error in [
        FrameError::NotIpv4 { ethertype: 0x0806 },
        FrameError::NotUdp { protocol: 1 },
        FrameError::Fragment,
        FrameError::Truncated { len: 3 },
        FrameError::IpChecksum,
        FrameError::BadIpHeader,
        FrameError::BadUdpLength { len: 2 },
    ] {
        counts.count(error);
    }
    counts.other_flow += 1;
    assert_eq!(counts, SkipCounts { not_ipv4: 1, not_udp: 1, fragments: 1, malformed: 4, other_flow: 1 });
    assert_eq!(counts.total(), 8);
}

#[test]
fn garbage_never_panics_the_parser() {
    // A cheap deterministic sweep; the fuzz target `udp_frame` goes further.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 120) as usize;
        let mut frame: Vec<u8> = (0..len).map(|i| (state >> (i % 8 * 8)) as u8).collect();
        if len > 24 {
            frame[12..14].copy_from_slice(&[8, 0]);
            frame[14] = 0x45;
        }
        let _ = parse_udp_frame(&frame);
    }
}
