//! `cargo fuzz run udp_frame`: any bytes a packet ring can deliver are either refused with a
//! reason or read as a UDP datagram whose payload lies inside the frame, within the lengths
//! its headers give, and which, framed again, reads back the same; never a panic. Each input
//! is also tried as an IPv4 frame with its header checksum made valid, so the fuzzer reaches
//! the checks behind the checksum (fragments, protocol, UDP lengths).
#![no_main]

use kairos_fuzz as _;
use kairos_io::udp_frame::{HEADERS_LEN, ipv4_checksum, parse_udp_frame, write_udp_frame};
use libfuzzer_sys::fuzz_target;

fn check(frame: &[u8]) {
    let Ok(datagram) = parse_udp_frame(frame) else { return };
    let (start, end) = (frame.as_ptr() as usize, frame.as_ptr() as usize + frame.len());
    let payload = datagram.payload.as_ptr() as usize;
    assert!(
        payload >= start + HEADERS_LEN && payload + datagram.payload.len() <= end,
        "payload outside the frame"
    );
    let mut again = vec![0u8; HEADERS_LEN + datagram.payload.len()];
    let len = write_udp_frame(&datagram.src, &datagram.dst, frame[15], 7, datagram.payload, &mut again)
        .expect("a payload that arrived in an IPv4 packet fits one");
    assert_eq!(parse_udp_frame(&again[..len]), Ok(datagram), "framed again, it reads differently");
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= 34 {
        let mut fixed = data.to_vec();
        fixed[12..14].copy_from_slice(&[0x08, 0x00]);
        fixed[14] = 0x40 | (fixed[14] & 0x0f).max(5);
        let header_len = usize::from(fixed[14] & 0x0f) * 4;
        if fixed.len() >= 14 + header_len {
            fixed[24..26].fill(0);
            let sum = ipv4_checksum(&fixed[14..14 + header_len]);
            fixed[24..26].copy_from_slice(&sum.to_be_bytes());
            check(&fixed);
        }
    }
});
