//! `cargo fuzz run packet_decode`: any bytes a socket can deliver either decode to a packet that
//! encodes back to the same bytes, or are refused with an error; never a panic.
#![no_main]

use kairos_io::{Packet, WIRE_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(packet) = Packet::decode(data) {
        let mut again = [0u8; WIRE_LEN];
        packet.encode(&mut again);
        assert_eq!(&again[..], data, "decode accepted bytes that do not round-trip");
    }
});
