//! The replicated store's network input: datagrams (fragments of Raft messages), Raft messages
//! in Kairos's wire codec, the log entries (write batches) they carry, and the lane's framing
//! around fragments and heartbeats (`lane_link`). Any bytes decode or
//! fail without a panic or an allocation past their length; what decodes encodes back to the
//! same meaning (a second decode gives the same message).
#![no_main]

use kairos_fuzz as _;
use kairos_kv::kv::Batch;
use kairos_kv::replica::wire::{decode_message, encode_message};
use kairos_services::frame::{Reassembler, fragments};
use kairos_services::lane_link::parse_lane_message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(m) = parse_lane_message(data) {
        assert_eq!(m.payload.len() + 17, data.len());
    }
    if let Ok(msg) = decode_message(data) {
        let mut again = Vec::new();
        encode_message(&msg, &mut again);
        let back = decode_message(&again).expect("an encoded message decodes");
        assert_eq!(back, msg);
        for entry in msg.get_entries() {
            if let Ok(batch) = Batch::decode(&entry.data) {
                assert_eq!(Batch::decode(&batch.encode()).as_ref(), Ok(&batch));
            }
        }
    }
    // As datagrams: the input cut at every 7th byte into a stream of fragments, then framed
    // whole and put back together.
    let mut reassembler = Reassembler::new();
    for datagram in data.chunks(7 + data.first().map_or(0, |&b| usize::from(b))) {
        let _ = reassembler.push(datagram);
    }
    if let Some(framed) = fragments(1, 1, data) {
        let mut reassembler = Reassembler::new();
        let mut whole = None;
        for datagram in &framed {
            whole = reassembler.push(datagram).expect("our own fragments parse");
        }
        assert_eq!(whole, Some((1, data.to_vec())));
    }
    if let Ok(batch) = Batch::decode(data) {
        assert_eq!(Batch::decode(&batch.encode()).as_ref(), Ok(&batch));
    }
});
