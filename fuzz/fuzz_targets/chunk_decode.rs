//! `cargo fuzz run chunk_decode`: any bytes a socket can deliver are either refused whole or
//! yield messages that each come from slices of the buffer, in chunks no other message used,
//! with every chunk counted once; a packet that loses no chunk encodes back to the same bytes.
//! Each input is also tried as the body of a packet whose header is made valid (magic, version,
//! a schema, the count its length gives, the CRC) and whose chunks mostly get their CRC fixed
//! up, so the fuzzer reaches the layout checks behind the CRCs instead of stopping at them.
#![no_main]

use kairos_fuzz as _;
use kairos_lane::node::chunk::{HEADER_BYTES, MAGIC, Packet, Schema, VERSION, encode, seal_header};
use libfuzzer_sys::fuzz_target;

fn within(whole: &[u8], part: &[u8]) -> bool {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

fn check(bytes: &[u8]) {
    let Ok(packet) = Packet::parse(bytes) else { return };
    let schema = packet.header().schema;
    assert_eq!(bytes.len(), schema.packet_bytes(packet.chunk_count()));
    let mut messages = packet.messages();
    let mut delivered = Vec::new();
    let mut next_chunk = 0;
    for message in messages.by_ref() {
        let chunks = message.chunk_range();
        assert!(chunks.start >= next_chunk && chunks.end > chunks.start, "chunk delivered twice");
        assert!(chunks.end <= packet.chunk_count());
        next_chunk = chunks.end;
        let mut len = 0;
        for fragment in message.fragments() {
            assert!(within(bytes, fragment), "a fragment outside the buffer");
            assert!(fragment.len() <= schema.message_bytes_per_chunk());
            len += fragment.len();
        }
        assert_eq!(len, message.len());
        assert!(len <= chunks.len() * schema.message_bytes_per_chunk());
        delivered.push(message.to_vec());
    }
    let counts = messages.counts();
    assert_eq!(counts.chunks(), packet.chunk_count(), "a chunk not counted once");
    assert_eq!(counts.messages, delivered.len());
    if counts.dropped() == 0 {
        let mut again = vec![0u8; bytes.len()];
        let len = encode(packet.header(), &delivered, &mut again).expect("what decoded fits again");
        assert_eq!(&again[..len], bytes, "an intact packet that does not encode back");
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() < HEADER_BYTES {
        return;
    }
    let schema = if data[3] & 1 == 0 { Schema::Hd6 } else { Schema::Hd8 };
    let count = schema.max_chunks(data.len());
    let mut fixed = data[..schema.packet_bytes(count)].to_vec();
    fixed[..2].copy_from_slice(&MAGIC);
    fixed[2] = VERSION;
    fixed[3] = schema.wire_id();
    fixed[24..26].copy_from_slice(&(count as u16).to_le_bytes());
    seal_header(&mut fixed).unwrap();
    for c in 0..count {
        let chunk = &mut fixed[schema.packet_bytes(c)..schema.packet_bytes(c + 1)];
        if chunk[0] % 8 != 0 {
            schema.seal_chunk(chunk).unwrap();
        }
    }
    check(&fixed);
});
