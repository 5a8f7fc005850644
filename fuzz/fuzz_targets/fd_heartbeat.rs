//! The failure detector's network input: heartbeats (a replicated store member's too, with its
//! term and commit index) and SWIM packets on a member's socket.
//! Any bytes decode or fail without a panic; a decoded heartbeat encodes back to the same
//! heartbeat; a SWIM packet (header and members in the SWIM codec) that decodes encodes back
//! to one that decodes the same.
#![no_main]

use kairos_fd::swim::{decode_packet, encode_packet};
use kairos_fd::wire::{Datagram, decode, encode_heartbeat, encode_replica_heartbeat};
use kairos_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(Datagram::Heartbeat(hb)) => {
            let mut again = Vec::new();
            encode_heartbeat(&hb, &mut again);
            assert_eq!(decode(&again), Ok(Datagram::Heartbeat(hb)));
        }
        Ok(Datagram::Replica { heartbeat, term, commit }) => {
            let mut again = Vec::new();
            encode_replica_heartbeat(&heartbeat, term, commit, &mut again);
            assert_eq!(decode(&again), Ok(Datagram::Replica { heartbeat, term, commit }));
        }
        Ok(Datagram::Swim { payload, .. }) => swim(payload),
        Err(_) => swim(data),
    }
});

fn swim(bytes: &[u8]) {
    if let Ok((header, members)) = decode_packet(bytes) {
        let mut again = Vec::new();
        encode_packet(&header, &members, &mut again).expect("a decoded packet encodes");
        let (h, m) = decode_packet(&again).expect("an encoded packet decodes");
        assert_eq!((h, m), (header, members));
    }
}
