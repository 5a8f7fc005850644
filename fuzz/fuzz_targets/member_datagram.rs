//! `cargo fuzz run member_datagram`: any bytes that reach a member's Raft port. Opened as they
//! came, they are refused (the fuzzer does not know the secret), never a panic. Sealed by a
//! member, they open to the same bytes once, a replay is refused, and any one byte changed is
//! refused; the body then goes to the reassembler, which errs or waits or gives a message,
//! never a panic.
#![no_main]

use kairos_fuzz as _;
use kairos_services::frame::Reassembler;
use kairos_services::seal::{ClusterSecret, Opener, Refusal, Sealer, Stream};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = ClusterSecret::new(&[7u8; 32]).unwrap();
    let mut opener = Opener::new(secret.clone());
    let member = |id: u64| (1..=3).contains(&id);
    assert!(opener.open(data, member).is_err(), "bytes no member sealed were taken");

    let mut sealer = Sealer::starting_at(secret, 2, Stream::Messages, 1_000);
    let mut sealed = data.to_vec();
    sealer.seal(&mut sealed);
    let mut reassembler = Reassembler::new();
    let (from, body) = opener.open(&sealed, member).expect("a member's datagram opens");
    assert_eq!((from, body), (2, data));
    let _ = reassembler.push(body);
    assert_eq!(opener.open(&sealed, member), Err(Refusal::Replayed));

    let mut next = Sealer::starting_at(ClusterSecret::new(&[7u8; 32]).unwrap(), 2, Stream::Messages, 2_000);
    let mut altered = data.to_vec();
    next.seal(&mut altered);
    let at = data.first().map_or(0, |&b| usize::from(b)) % altered.len();
    altered[at] ^= 1 << (data.len() % 8);
    assert!(opener.open(&altered, member).is_err(), "a datagram changed at byte {at} was taken");
});
