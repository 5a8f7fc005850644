//! Who may talk to the controller: nodes that know the lane's shared secret.
//!
//! The handshake is a challenge and response. The controller sends a fresh nonce; the node
//! answers with its host, a nonce of its own and `HMAC-SHA256(secret, "hello" | controller
//! nonce | node nonce | host)`. Both then derive a session key from the secret and both nonces,
//! and every later frame carries a 16-byte tag, `HMAC-SHA256(session key, direction |
//! sequence number | payload)` cut to 128 bits. So a stranger without the secret cannot join,
//! a frame changed on the way or replayed (in the same session or another) fails its tag, and
//! the controller's first sealed frame proves to the node that it, too, knows the secret. The
//! payload is not encrypted: the lane's control plane carries no secrets, only who may change
//! the network.
//!
//! The MAC is the `hmac` and `sha2` crates' (well-kept, constant-time verification); nonces come
//! from the operating system's generator.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a frame's tag.
pub const TAG_BYTES: usize = 16;
/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 32;
/// The shortest secret accepted: 128 bits.
pub const MIN_SECRET_BYTES: usize = 16;

/// Why a peer was not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The secret is too short to be one.
    #[error(
        "the shared secret has {0} bytes; at least {MIN_SECRET_BYTES} are needed (e.g. `head -c 32 /dev/urandom > FILE`)"
    )]
    ShortSecret(usize),
    /// The handshake's proof did not match: the peer does not know the secret.
    #[error("the handshake's proof does not match: wrong secret")]
    BadProof,
    /// A frame's tag did not match: changed, replayed, or from someone else.
    #[error("a frame's tag does not match (changed, replayed or forged)")]
    BadTag,
    /// A frame too short to hold a tag.
    #[error("a sealed frame of {0} bytes is shorter than its {TAG_BYTES}-byte tag")]
    Short(usize),
    /// A nonce that is not 64 hex digits.
    #[error("a nonce must be {} hex digits", 2 * NONCE_BYTES)]
    BadNonce,
    /// The system's random generator failed.
    #[error("no random nonce: {0}")]
    Random(String),
}

/// The lane's shared secret (its bytes are never printed).
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// A secret of these bytes, at least [`MIN_SECRET_BYTES`] of them.
    pub fn new(bytes: Vec<u8>) -> Result<Self, AuthError> {
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(AuthError::ShortSecret(bytes.len()));
        }
        Ok(Self(bytes))
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as KeyInit>::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }
}

/// A fresh nonce from the operating system.
pub fn nonce() -> Result<[u8; NONCE_BYTES], AuthError> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(n)
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A nonce from its hex.
pub fn parse_nonce(text: &str) -> Result<[u8; NONCE_BYTES], AuthError> {
    let digits = text.as_bytes();
    if digits.len() != 2 * NONCE_BYTES {
        return Err(AuthError::BadNonce);
    }
    let mut out = [0u8; NONCE_BYTES];
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let s = std::str::from_utf8(pair).map_err(|_| AuthError::BadNonce)?;
        *o = u8::from_str_radix(s, 16).map_err(|_| AuthError::BadNonce)?;
    }
    Ok(out)
}

fn proof_mac(
    secret: &Secret,
    controller: &[u8; NONCE_BYTES],
    node: &[u8; NONCE_BYTES],
    host: &str,
) -> HmacSha256 {
    let mut m = secret.mac();
    m.update(b"kairos-lane hello");
    m.update(controller);
    m.update(node);
    m.update(host.as_bytes());
    m
}

/// The node's proof in the handshake, hex.
pub fn hello_proof(
    secret: &Secret,
    controller: &[u8; NONCE_BYTES],
    node: &[u8; NONCE_BYTES],
    host: &str,
) -> String {
    hex(&proof_mac(secret, controller, node, host).finalize().into_bytes())
}

/// Checks a node's proof in constant time.
pub fn check_proof(
    secret: &Secret,
    controller: &[u8; NONCE_BYTES],
    node: &[u8; NONCE_BYTES],
    host: &str,
    proof_hex: &str,
) -> Result<(), AuthError> {
    let proof = parse_hex(proof_hex).ok_or(AuthError::BadProof)?;
    proof_mac(secret, controller, node, host).verify_slice(&proof).map_err(|_| AuthError::BadProof)
}

fn parse_hex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) || digits.len() > 128 {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|p| std::str::from_utf8(p).ok().and_then(|s| u8::from_str_radix(s, 16).ok()))
        .collect()
}

/// Which end of the session this is; each direction has its own sequence of tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The controller.
    Controller,
    /// A node.
    Node,
}

/// One connection's keys and sequence numbers after the handshake.
pub struct Session {
    key: HmacSha256,
    role: Role,
    sent: u64,
    received: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("role", &self.role)
            .field("sent", &self.sent)
            .field("received", &self.received)
            .finish()
    }
}

impl Session {
    /// The session both ends derive from the secret and the two nonces.
    pub fn new(
        secret: &Secret,
        controller: &[u8; NONCE_BYTES],
        node: &[u8; NONCE_BYTES],
        role: Role,
    ) -> Self {
        let mut m = secret.mac();
        m.update(b"kairos-lane session");
        m.update(controller);
        m.update(node);
        let key = m.finalize().into_bytes();
        let key = <HmacSha256 as KeyInit>::new_from_slice(&key).expect("HMAC takes keys of any length");
        Self { key, role, sent: 0, received: 0 }
    }

    fn tag(&self, from: Role, seq: u64, payload: &[u8]) -> HmacSha256 {
        let mut m = self.key.clone();
        m.update(&[from as u8]);
        m.update(&seq.to_be_bytes());
        m.update(payload);
        m
    }

    /// Appends the sealed body of `payload` (tag, then payload) to `out`.
    pub fn seal(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        let tag = self.tag(self.role, self.sent, payload).finalize().into_bytes();
        self.sent += 1;
        out.extend_from_slice(&tag[..TAG_BYTES]);
        out.extend_from_slice(payload);
    }

    /// The payload of a sealed body from the other end, if its tag is the next one expected.
    pub fn open<'a>(&mut self, body: &'a [u8]) -> Result<&'a [u8], AuthError> {
        if body.len() < TAG_BYTES {
            return Err(AuthError::Short(body.len()));
        }
        let (tag, payload) = body.split_at(TAG_BYTES);
        let from = match self.role {
            Role::Controller => Role::Node,
            Role::Node => Role::Controller,
        };
        self.tag(from, self.received, payload).verify_truncated_left(tag).map_err(|_| AuthError::BadTag)?;
        self.received += 1;
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(fill: u8) -> Secret {
        Secret::new(vec![fill; 32]).unwrap()
    }

    fn pair(a: &Secret, b: &Secret) -> (Session, Session) {
        let (c, n) = (nonce().unwrap(), nonce().unwrap());
        (Session::new(a, &c, &n, Role::Controller), Session::new(b, &c, &n, Role::Node))
    }

    #[test]
    fn sealed_frames_open_in_order_on_the_other_end() {
        let (mut ctl, mut node) = pair(&secret(1), &secret(1));
        for msg in [&b"first"[..], b"second"] {
            let mut body = Vec::new();
            node.seal(msg, &mut body);
            assert_eq!(ctl.open(&body).unwrap(), msg);
        }
        let mut back = Vec::new();
        ctl.seal(b"answer", &mut back);
        assert_eq!(node.open(&back).unwrap(), b"answer");
    }

    #[test]
    fn changed_replayed_reflected_and_foreign_frames_fail() {
        let (mut ctl, mut node) = pair(&secret(1), &secret(1));
        let mut body = Vec::new();
        node.seal(b"release 7", &mut body);
        let mut changed = body.clone();
        *changed.last_mut().unwrap() ^= 1;
        assert_eq!(ctl.open(&changed), Err(AuthError::BadTag));
        assert!(ctl.open(&body).is_ok());
        assert_eq!(ctl.open(&body), Err(AuthError::BadTag), "a replay");
        let mut own = Vec::new();
        ctl.seal(b"x", &mut own);
        assert_eq!(ctl.open(&own), Err(AuthError::BadTag), "a frame reflected back to its sender");
        let (mut ctl2, mut stranger) = pair(&secret(1), &secret(2));
        let mut forged = Vec::new();
        stranger.seal(b"release 7", &mut forged);
        assert_eq!(ctl2.open(&forged), Err(AuthError::BadTag));
        assert_eq!(ctl2.open(&[1, 2, 3]), Err(AuthError::Short(3)));
    }

    #[test]
    fn the_proof_binds_the_secret_the_nonces_and_the_host() {
        let (c, n) = (nonce().unwrap(), nonce().unwrap());
        let s = secret(1);
        let p = hello_proof(&s, &c, &n, "h1");
        assert_eq!(check_proof(&s, &c, &n, "h1", &p), Ok(()));
        assert_eq!(check_proof(&s, &c, &n, "h2", &p), Err(AuthError::BadProof));
        assert_eq!(check_proof(&secret(2), &c, &n, "h1", &p), Err(AuthError::BadProof));
        assert_eq!(check_proof(&s, &n, &c, "h1", &p), Err(AuthError::BadProof));
        assert_eq!(check_proof(&s, &c, &n, "h1", "zz"), Err(AuthError::BadProof));
        assert_eq!(parse_nonce(&hex(&c)), Ok(c));
        assert_eq!(parse_nonce("00"), Err(AuthError::BadNonce));
        assert!(matches!(Secret::new(vec![0; 8]), Err(AuthError::ShortSecret(8))));
    }
}
