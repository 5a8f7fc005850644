//! `cargo fuzz run packet_decode`: any bytes a socket can deliver either decode to a packet that
//! encodes back to the same bytes, or are refused with an error; never a panic. Inputs of the
//! wire length are also tried with their checksum fixed up, so the fuzzer reaches the checks
//! behind the checksum (kind, padding) instead of stopping at it.
#![no_main]

use kairos_forward::packet::wire_checksum;
use kairos_forward::{Packet, WIRE_LEN};
use kairos_fuzz as _;
use libfuzzer_sys::fuzz_target;

fn round_trips(bytes: &[u8]) {
    if let Ok(packet) = Packet::decode(bytes) {
        let mut again = [0u8; WIRE_LEN];
        packet.encode(&mut again);
        assert_eq!(&again[..], bytes, "decode accepted bytes that do not round-trip");
    }
}

fuzz_target!(|data: &[u8]| {
    round_trips(data);
    if let Ok(mut fixed) = <[u8; WIRE_LEN]>::try_from(data) {
        let crc = wire_checksum(&fixed);
        fixed[56..60].copy_from_slice(&crc.to_le_bytes());
        round_trips(&fixed);
    }
});
