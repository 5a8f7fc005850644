//! The bridges' test messages, shared by the tests that move them between threads and between
//! processes: each is its own check, so a receiver finds a lost, repeated, reordered, cut or
//! corrupted message without being told what was sent.

/// Message `seq`: the sequence number, an FNV-1a checksum of the filler, then filler bytes
/// drawn from the sequence number; its length is drawn too, 16 bytes to `max`.
pub fn message(seq: u64, max: usize, out: &mut Vec<u8>) {
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = 16 + (next() % (max as u64 - 15)) as usize;
    out.clear();
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend((16..len).map(|_| next() as u8));
    let sum = fnv1a(&out[16..]);
    out[8..16].copy_from_slice(&sum.to_ne_bytes());
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Checks that `got` is message `expected_seq` of at most `max` bytes, whole: in sequence, its
/// checksum right, and exactly the bytes sent (`scratch` is rebuilt to compare).
pub fn check(expected_seq: u64, got: &[u8], max: usize, scratch: &mut Vec<u8>) {
    assert!(got.len() >= 16, "message {expected_seq}: {} bytes", got.len());
    let seq = u64::from_ne_bytes(got[..8].try_into().unwrap());
    assert_eq!(seq, expected_seq, "out of order, lost or twice");
    let sum = u64::from_ne_bytes(got[8..16].try_into().unwrap());
    assert_eq!(sum, fnv1a(&got[16..]), "message {seq}: checksum");
    message(seq, max, scratch);
    assert!(got == &scratch[..], "message {seq}: bytes differ");
}
