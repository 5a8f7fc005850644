//! Who may speak on the members' transport: members that know the cluster's secret.
//!
//! A datagram between members (a Raft fragment, a heartbeat) was trusted for what it said of
//! itself, so anyone who reached a member's port was a member, and a stranger could make a
//! member hold a message in assembly for every sender id it cared to invent. Now every
//! datagram ends in a seal of [`SEAL_BYTES`]: the sender's member id, a counter, and a 16-byte
//! tag, `HMAC-SHA256(secret, "kairos-kv seal" | body | id | counter)` cut to 128 bits. A
//! receiver opens the seal before it reads a byte of the body ([`Opener::open`]):
//! - a sender id it does not count among the members is refused before any work
//!   ([`Refusal::Stranger`]) and leaves no state behind;
//! - a tag that does not match (a forged or altered datagram, or another cluster's) is
//!   refused ([`Refusal::Forged`]);
//! - a counter it has taken already, or one older than its window of the sender's last
//!   [`REPLAY_WINDOW`] datagrams, is refused ([`Refusal::Replayed`]).
//!
//! The body is not encrypted: members carry the store's data to each other in the clear, as
//! Redis's replication does; confidentiality between hosts is the network's (or a VPN's). A
//! sender's counter starts at the wall clock in nanoseconds, so a member started again
//! continues above every counter it used before (it sends far fewer than one datagram a
//! nanosecond) with nothing kept on disk; a wall clock set back by more than the member's
//! downtime makes its peers refuse it until the clock passes the old counters again.
//!
//! The MAC is the `hmac` and `sha2` crates' (constant-time verification), as the lane
//! controller's frames use.

use std::collections::BTreeMap;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the tag in a seal.
pub const TAG_BYTES: usize = 16;
/// Bytes a seal adds to a datagram: the sender's id, the counter, the tag.
pub const SEAL_BYTES: usize = 8 + 8 + TAG_BYTES;
/// The shortest secret accepted: 128 bits.
pub const MIN_SECRET_BYTES: usize = 16;
/// How far behind a sender's newest counter a datagram may arrive and still be taken (once):
/// reordering on the way is rare between members, and a message lost to it Raft resends.
pub const REPLAY_WINDOW: u64 = 64;

const DOMAIN: &[u8] = b"kairos-kv seal";

/// The cluster's shared secret, keyed once (its bytes are never printed).
#[derive(Clone)]
pub struct ClusterSecret {
    mac: HmacSha256,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

/// A secret too short to be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the cluster's secret has {0} bytes; at least {MIN_SECRET_BYTES} are needed (e.g. `head -c 32 /dev/urandom > FILE`)"
)]
pub struct ShortSecret(pub usize);

impl ClusterSecret {
    /// The secret of these bytes, at least [`MIN_SECRET_BYTES`] of them.
    pub fn new(bytes: &[u8]) -> Result<Self, ShortSecret> {
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(ShortSecret(bytes.len()));
        }
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(bytes).expect("HMAC takes keys of any length");
        mac.update(DOMAIN);
        Ok(Self { mac })
    }

    fn tag(&self, body: &[u8], id: u64, counter: u64) -> HmacSha256 {
        let mut m = self.mac.clone();
        m.update(body);
        m.update(&id.to_le_bytes());
        m.update(&counter.to_le_bytes());
        m
    }
}

/// Writes a new secret to `path`: 32 bytes from the operating system's generator, in a file
/// made for it (an existing file is an error) that only its owner may read.
pub fn write_new_secret(path: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(format!("no random bytes: {e}")))?;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?.write_all(&bytes)
}

/// Which of a member's two streams a datagram is on. Each has its own counters, and a
/// receiver its own window for each: heartbeats may reach a socket of their own, read at other
/// times than Raft's, so the two arrive interleaved in any order, but each in its own order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Raft's messages (their fragments).
    Messages = 0,
    /// The failure detector's heartbeats.
    Heartbeats = 1,
}

/// The counter's top bit names the stream (a wall clock in ns needs 61 bits until 2043 and
/// 63 until 2262).
const STREAM_BIT: u32 = 63;

/// Seals what one member sends on one stream.
#[derive(Debug)]
pub struct Sealer {
    secret: ClusterSecret,
    id: u64,
    stream: Stream,
    counter: u64,
}

impl Sealer {
    /// A sealer for member `id`'s `stream`, its counter starting at the wall clock (ns since
    /// the epoch).
    pub fn new(secret: ClusterSecret, id: u64, stream: Stream) -> Self {
        Self::starting_at(secret, id, stream, kairos_sys::clock::realtime_ns())
    }

    /// A sealer whose first counter is `counter` + 1 (tests).
    pub fn starting_at(secret: ClusterSecret, id: u64, stream: Stream, counter: u64) -> Self {
        Self { secret, id, stream, counter: counter & !(1 << STREAM_BIT) }
    }

    /// Appends the seal to `datagram`, whose bytes so far are the body.
    pub fn seal(&mut self, datagram: &mut Vec<u8>) {
        self.counter = (self.counter + 1) & !(1 << STREAM_BIT);
        let counter = self.counter | (self.stream as u64) << STREAM_BIT;
        let tag = self.secret.tag(datagram, self.id, counter).finalize().into_bytes();
        datagram.extend_from_slice(&self.id.to_le_bytes());
        datagram.extend_from_slice(&counter.to_le_bytes());
        datagram.extend_from_slice(&tag[..TAG_BYTES]);
    }
}

/// Why a datagram was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Shorter than a seal.
    Short,
    /// From an id that is not a member's.
    Stranger(u64),
    /// Its tag does not match: forged, altered, or sealed under another secret.
    Forged,
    /// A counter taken already, or older than the window.
    Replayed,
}

/// The counters taken from one sender: the newest, and which of the [`REPLAY_WINDOW`] below
/// it were (bit `k`: `newest - 1 - k`).
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    newest: u64,
    below: u64,
}

impl Window {
    /// Takes `counter` if it is new; false if it was taken or is too old.
    fn take(&mut self, counter: u64) -> bool {
        if counter > self.newest {
            let shift = counter - self.newest;
            self.below = if shift > REPLAY_WINDOW {
                0
            } else {
                // The old newest becomes bit shift - 1; shifting by 64 would overflow.
                (self.below.checked_shl(shift as u32).unwrap_or(0)) | (1 << (shift - 1))
            };
            self.newest = counter;
            return true;
        }
        let behind = self.newest - counter;
        if behind == 0 || behind > REPLAY_WINDOW {
            return false;
        }
        let bit = 1u64 << (behind - 1);
        let fresh = self.below & bit == 0;
        self.below |= bit;
        fresh
    }
}

/// Opens what members send to this one; state only for senders that are members (a window
/// per member and stream).
#[derive(Debug)]
pub struct Opener {
    secret: ClusterSecret,
    windows: BTreeMap<(u64, u64), Window>,
}

impl Opener {
    /// An opener under the cluster's secret.
    pub fn new(secret: ClusterSecret) -> Self {
        Self { secret, windows: BTreeMap::new() }
    }

    /// The body of a sealed datagram and its sender, if the sender is a member (`member(id)`),
    /// the tag matches and the counter is new.
    pub fn open<'a>(
        &mut self,
        datagram: &'a [u8],
        member: impl Fn(u64) -> bool,
    ) -> Result<(u64, &'a [u8]), Refusal> {
        let Some(split) = datagram.len().checked_sub(SEAL_BYTES) else { return Err(Refusal::Short) };
        let (body, seal) = datagram.split_at(split);
        let id = u64::from_le_bytes(seal[..8].try_into().expect("8 bytes"));
        let counter = u64::from_le_bytes(seal[8..16].try_into().expect("8 bytes"));
        if !member(id) {
            return Err(Refusal::Stranger(id));
        }
        self.secret.tag(body, id, counter).verify_truncated_left(&seal[16..]).map_err(|_| Refusal::Forged)?;
        let stream = counter >> STREAM_BIT;
        if !self.windows.entry((id, stream)).or_default().take(counter & !(1 << STREAM_BIT)) {
            return Err(Refusal::Replayed);
        }
        Ok((id, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(fill: u8) -> ClusterSecret {
        ClusterSecret::new(&[fill; 32]).unwrap()
    }

    fn sealed(sealer: &mut Sealer, body: &[u8]) -> Vec<u8> {
        let mut d = body.to_vec();
        sealer.seal(&mut d);
        d
    }

    #[test]
    fn a_new_secret_file_is_the_owners_alone_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt as _;
        let path = std::env::temp_dir().join(format!("kairos-seal-secret-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        write_new_secret(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(ClusterSecret::new(&bytes).is_ok());
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(write_new_secret(&path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_members_datagram_opens_to_its_body_once() {
        let mut sealer = Sealer::new(secret(1), 3, Stream::Messages);
        let mut opener = Opener::new(secret(1));
        let d = sealed(&mut sealer, b"append");
        assert_eq!(d.len(), 6 + SEAL_BYTES);
        assert_eq!(opener.open(&d, |id| id <= 3), Ok((3, &b"append"[..])));
        assert_eq!(opener.open(&d, |id| id <= 3), Err(Refusal::Replayed), "a replay");
        let empty = sealed(&mut sealer, b"");
        assert_eq!(opener.open(&empty, |_| true), Ok((3, &b""[..])));
    }

    #[test]
    fn strangers_forgeries_alterations_and_other_clusters_are_refused() {
        let mut sealer = Sealer::new(secret(1), 9, Stream::Messages);
        let mut opener = Opener::new(secret(1));
        let d = sealed(&mut sealer, b"vote for me");
        assert_eq!(opener.open(&d, |id| id <= 3), Err(Refusal::Stranger(9)));
        assert!(opener.windows.is_empty(), "a stranger leaves no state");
        let mut sealer = Sealer::new(secret(1), 2, Stream::Messages);
        for at in 0..d.len() {
            let mut altered = sealed(&mut sealer, b"vote for me");
            altered[at] ^= 0x40;
            let got = opener.open(&altered, |id| id <= 3);
            assert!(matches!(got, Err(Refusal::Forged | Refusal::Stranger(_))), "byte {at}: {got:?}");
        }
        let other = sealed(&mut Sealer::new(secret(2), 2, Stream::Messages), b"x");
        assert_eq!(opener.open(&other, |_| true), Err(Refusal::Forged));
        assert_eq!(opener.open(&[0; SEAL_BYTES - 1], |_| true), Err(Refusal::Short));
        // A forgery that names a member and a counter far ahead moves nothing: the window is
        // moved only by a datagram whose tag matched.
        let mut forged = sealed(&mut Sealer::starting_at(secret(7), 2, Stream::Messages, u64::MAX - 5), b"x");
        forged[0] = b'y';
        assert_eq!(opener.open(&forged, |_| true), Err(Refusal::Forged));
        assert_eq!(opener.open(&sealed(&mut sealer, b"ok"), |_| true), Ok((2, &b"ok"[..])));
    }

    #[test]
    fn late_datagrams_within_the_window_are_taken_once_and_older_ones_refused() {
        let mut sealer = Sealer::starting_at(secret(1), 1, Stream::Messages, 1_000);
        let mut opener = Opener::new(secret(1));
        let ds: Vec<Vec<u8>> = (0..200).map(|i| sealed(&mut sealer, &[i as u8])).collect();
        assert!(opener.open(&ds[150], |_| true).is_ok());
        for (i, d) in ds.iter().enumerate().take(150).rev() {
            let got = opener.open(d, |_| true);
            if 150 - i <= REPLAY_WINDOW as usize {
                assert_eq!(got, Ok((1, &[i as u8][..])), "datagram {i}, {} behind", 150 - i);
                assert_eq!(opener.open(d, |_| true), Err(Refusal::Replayed));
            } else {
                assert_eq!(got, Err(Refusal::Replayed), "datagram {i}, past the window");
            }
        }
        for d in &ds[151..] {
            assert!(opener.open(d, |_| true).is_ok());
        }
    }

    #[test]
    fn a_member_started_again_continues_above_its_old_counters() {
        let mut opener = Opener::new(secret(1));
        let mut first = Sealer::new(secret(1), 1, Stream::Messages);
        for _ in 0..1_000 {
            assert!(opener.open(&sealed(&mut first, b"x"), |_| true).is_ok());
        }
        let mut again = Sealer::new(secret(1), 1, Stream::Messages);
        assert!(opener.open(&sealed(&mut again, b"x"), |_| true).is_ok());
    }

    #[test]
    fn the_two_streams_arrive_interleaved_in_any_order() {
        let mut messages = Sealer::new(secret(1), 1, Stream::Messages);
        let mut beats = Sealer::new(secret(1), 1, Stream::Heartbeats);
        let mut opener = Opener::new(secret(1));
        let beat = sealed(&mut beats, b"beat");
        // Far more messages than the window, all sent after the heartbeat, arrive before it.
        for _ in 0..500 {
            assert!(opener.open(&sealed(&mut messages, b"m"), |_| true).is_ok());
        }
        assert_eq!(opener.open(&beat, |_| true), Ok((1, &b"beat"[..])));
        assert_eq!(opener.open(&beat, |_| true), Err(Refusal::Replayed));
    }

    #[test]
    fn the_window_agrees_with_a_set_of_every_counter_taken() {
        // Arrival orders with jumps of every size, against the plain definition: a counter is
        // taken once, and only while within the window of the newest taken.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            let (mut w, mut taken, mut newest) = (Window::default(), std::collections::BTreeSet::new(), 0u64);
            for _ in 0..300 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let c = match seed % 4 {
                    0 => newest + 1 + seed % 100,
                    _ => newest.saturating_sub(seed % 80).max(1),
                };
                let expect = !taken.contains(&c) && (c > newest || newest - c <= REPLAY_WINDOW);
                assert_eq!(w.take(c), expect, "counter {c}, newest {newest}");
                if expect {
                    taken.insert(c);
                    newest = newest.max(c);
                }
            }
        }
    }
}
