//! `cargo fuzz run grpc_frames`: `kv bench`'s gRPC client for etcd over any bytes a server can
//! send, read in any splits (the input's first four bytes give the reads' lengths, in turn): each
//! read gives an outcome, asks for more or ends the connection with an error, never a panic;
//! every call it starts (a new one after each outcome, short or past the server's window) is
//! whole frames no longer than HTTP/2's default limit, on an odd stream, and what it sends while
//! waiting is too.
#![no_main]

use kairos_fuzz as _;
use libfuzzer_sys::fuzz_target;

use kairos_peers::grpc::{Call, FRAME_HEADER, MAX_FRAME, PREFACE, Session};

/// `bytes` (a preface first, if any) are whole frames within the size limit, HEADERS and DATA
/// on odd streams.
fn check_sent(bytes: &[u8]) {
    let mut rest = bytes.strip_prefix(PREFACE).unwrap_or(bytes);
    while !rest.is_empty() {
        assert!(rest.len() >= FRAME_HEADER, "a partial frame header: {rest:?}");
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        assert!(len <= MAX_FRAME, "a frame of {len} bytes");
        assert!(rest.len() >= FRAME_HEADER + len, "a partial frame");
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
        if rest[3] <= 1 {
            assert!(stream % 2 == 1, "HEADERS or DATA on stream {stream}");
        }
        rest = &rest[FRAME_HEADER + len..];
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((reads, mut rest)) = data.split_first_chunk::<4>() else { return };
    let reads = reads.map(|n| usize::from(n) + 1);
    let large = vec![b'v'; 70_000];
    let mut session = Session::new("127.0.0.1:2379".parse().unwrap());
    let mut out = Vec::new();
    let mut calls = 0usize;
    let call = |n: usize| match n % 3 {
        0 => Call::Put { key: b"k:0:0", value: b"v000000000000000" },
        1 => Call::Range { key: b"k:0:0" },
        _ => Call::Put { key: b"k:0:1", value: &large },
    };
    session.request(call(calls), &mut out);
    check_sent(&out);
    let mut buf = Vec::new();
    let mut read = 0;
    while !rest.is_empty() {
        let n = reads[read % reads.len()].min(rest.len());
        read += 1;
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            match session.answer(&mut buf) {
                Err(_) => return,
                Ok(None) => {
                    out.clear();
                    session.continue_request(&mut out);
                    check_sent(&out);
                    break;
                }
                Ok(Some(_)) => {
                    calls += 1;
                    out.clear();
                    session.request(call(calls), &mut out);
                    check_sent(&out);
                }
            }
        }
        assert!(buf.len() < FRAME_HEADER + MAX_FRAME, "a whole frame left untaken");
    }
});
