//! SWIM as a peer: `foca` 2 (SWIM with infection-style dissemination and suspicion), driven by
//! the member's loop over the same UDP socket as the heartbeats, with time passed in.
//!
//! `foca` is sans-I/O too: it asks its [`Runtime`] to send packets, to deliver timer events
//! after a delay, and tells it of membership changes. [`SwimPeer`] is that runtime: packets go
//! to an outbox the loop sends (each wrapped as a [`super::wire`] SWIM datagram of its
//! instance), timers to a list the loop fires from [`SwimPeer::poll`] when due, and
//! `MemberDown`/`MemberUp` become the verdicts compared with the other detectors. A member's
//! identity is its id and a generation (its incarnation, so a restarted member wins the address
//! conflict and is renamed, not refused; declared down by mistake, it renews itself with the
//! next generation and rejoins). Packets are in a codec of this module (varints, as
//! [`kairos_services::codec`]), checked byte by byte: any input decodes or fails, never panics.
//!
//! SWIM probes the member's *process* (its loop answers pings): a hung application behind a
//! live loop is invisible to it, by design of the protocol. Detection is SWIM's own; the loop
//! only helps it back: when Kairos's detector sees a member return, the loop announces that
//! member to SWIM again (SWIM's own way back after a cut link is its periodic announce to
//! down members, 65 s in the LAN defaults). And as a static group's member does (its seed
//! list), a peer announces itself again, at that announce's period, to every member of the
//! group it was asked to join that `foca` holds no active identity of: `foca` announces only
//! to identities it holds, and after loss and stalls a member may hold every other down while
//! they, renewed since, hold it active under an identity it gave up, so that nothing reaches it
//! again (a group that never settled in `fd detect`).
//!
//! Settings: [`SwimSettings::lan`] is `foca`'s `Config::new_lan` (memberlist's LAN defaults:
//! a probe every second, 500 ms round trip, suspicion for about `4 log10(n)` periods);
//! [`SwimSettings::aggressive`] divides every duration of it by 1000 (a probe every
//! millisecond, 500 us round trip) at the members' default period of 100 us, and scales that
//! with a longer period, as SWIM's round trip through the member's loop (and the lane) grows
//! with it.
//!
//! Work per call: what `foca` does per packet or timer (linear in the members it piggybacks),
//! and O(timers pending) to find the due ones.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::time::Duration;

use bytes::{Buf, BufMut};
use foca::{
    Codec, Config, Foca, Header, Identity, Member, Message, NoCustomBroadcast, Notification, Runtime, State,
    Timer,
};

use kairos_services::codec::{DecodeError, Reader, put_u64};

/// A member as SWIM knows it: its id and its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SwimId {
    /// The member id.
    pub member: u64,
    /// Grows with each restart, and when the member renews itself after being declared down.
    pub generation: u64,
}

impl Identity for SwimId {
    type Addr = u64;

    fn renew(&self) -> Option<Self> {
        Some(Self { member: self.member, generation: self.generation.wrapping_add(1) })
    }

    fn addr(&self) -> u64 {
        self.member
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.generation > adversary.generation
    }
}

/// Why a SWIM packet could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwimCodecError {
    /// The bytes are not a packet.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The buffer has no room for the item.
    #[error("no room for the item in the packet")]
    NoRoom,
}

/// `foca`'s packets in Kairos's varints.
#[derive(Debug, Clone, Copy, Default)]
pub struct SwimCodec;

fn put_id(out: &mut Vec<u8>, id: &SwimId) {
    put_u64(out, id.member);
    put_u64(out, id.generation);
}

fn read_id(r: &mut Reader<'_>) -> Result<SwimId, DecodeError> {
    Ok(SwimId { member: r.u64("member")?, generation: r.u64("generation")? })
}

fn read_u16(r: &mut Reader<'_>, field: &'static str) -> Result<u16, DecodeError> {
    let v = r.u64(field)?;
    u16::try_from(v).map_err(|_| DecodeError::Invalid { field, value: v })
}

fn read_u8(r: &mut Reader<'_>, field: &'static str) -> Result<u8, DecodeError> {
    let v = r.u64(field)?;
    u8::try_from(v).map_err(|_| DecodeError::Invalid { field, value: v })
}

fn put_all(mut buf: impl BufMut, bytes: &[u8]) -> Result<(), SwimCodecError> {
    if buf.remaining_mut() < bytes.len() {
        return Err(SwimCodecError::NoRoom);
    }
    buf.put_slice(bytes);
    Ok(())
}

/// Decodes one item with `read` from the front of `buf`, advancing it past the item.
fn take<T>(
    mut buf: impl Buf,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, SwimCodecError> {
    let chunk = buf.chunk();
    let mut r = Reader::new(chunk);
    let item = read(&mut r)?;
    let used = chunk.len() - r.remaining();
    buf.advance(used);
    Ok(item)
}

impl Codec<SwimId> for SwimCodec {
    type Error = SwimCodecError;

    fn encode_header(&mut self, header: &Header<SwimId>, buf: impl BufMut) -> Result<(), Self::Error> {
        let mut out = Vec::with_capacity(48);
        put_id(&mut out, &header.src);
        put_u64(&mut out, u64::from(header.src_incarnation));
        put_id(&mut out, &header.dst);
        let (tag, id, probe) = match &header.message {
            Message::Ping(n) => (0, None, Some(*n)),
            Message::Ack(n) => (1, None, Some(*n)),
            Message::PingReq { target, probe_number } => (2, Some(target), Some(*probe_number)),
            Message::IndirectPing { origin, probe_number } => (3, Some(origin), Some(*probe_number)),
            Message::IndirectAck { target, probe_number } => (4, Some(target), Some(*probe_number)),
            Message::ForwardedAck { origin, probe_number } => (5, Some(origin), Some(*probe_number)),
            Message::Announce => (6, None, None),
            Message::Feed => (7, None, None),
            Message::Gossip => (8, None, None),
            Message::Broadcast => (9, None, None),
            Message::TurnUndead => (10, None, None),
        };
        out.push(tag);
        if let Some(id) = id {
            put_id(&mut out, id);
        }
        if let Some(n) = probe {
            put_u64(&mut out, u64::from(n));
        }
        put_all(buf, &out)
    }

    fn decode_header(&mut self, buf: impl Buf) -> Result<Header<SwimId>, Self::Error> {
        take(buf, |r| {
            let src = read_id(r)?;
            let src_incarnation = read_u16(r, "incarnation")?;
            let dst = read_id(r)?;
            let message = match r.u8("message")? {
                0 => Message::Ping(read_u8(r, "probe")?),
                1 => Message::Ack(read_u8(r, "probe")?),
                2 => Message::PingReq { target: read_id(r)?, probe_number: read_u8(r, "probe")? },
                3 => Message::IndirectPing { origin: read_id(r)?, probe_number: read_u8(r, "probe")? },
                4 => Message::IndirectAck { target: read_id(r)?, probe_number: read_u8(r, "probe")? },
                5 => Message::ForwardedAck { origin: read_id(r)?, probe_number: read_u8(r, "probe")? },
                6 => Message::Announce,
                7 => Message::Feed,
                8 => Message::Gossip,
                9 => Message::Broadcast,
                10 => Message::TurnUndead,
                other => return Err(DecodeError::Invalid { field: "message", value: u64::from(other) }),
            };
            Ok(Header { src, src_incarnation, dst, message })
        })
    }

    fn encode_member(&mut self, member: &Member<SwimId>, buf: impl BufMut) -> Result<(), Self::Error> {
        let mut out = Vec::with_capacity(24);
        put_id(&mut out, member.id());
        put_u64(&mut out, u64::from(member.incarnation()));
        out.push(match member.state() {
            State::Alive => 0,
            State::Suspect => 1,
            State::Down => 2,
        });
        put_all(buf, &out)
    }

    fn decode_member(&mut self, buf: impl Buf) -> Result<Member<SwimId>, Self::Error> {
        take(buf, |r| {
            let id = read_id(r)?;
            let incarnation = read_u16(r, "incarnation")?;
            let state = match r.u8("state")? {
                0 => State::Alive,
                1 => State::Suspect,
                2 => State::Down,
                other => return Err(DecodeError::Invalid { field: "state", value: u64::from(other) }),
            };
            Ok(Member::new(id, incarnation, state))
        })
    }
}

/// A SWIM packet as `foca` frames it: the header, then (when two or more bytes follow) a
/// big-endian `u16` count of members and the members. Decodes what `foca` would, for tests and
/// fuzzing; never panics, and allocates at most one member per five bytes of input.
pub fn decode_packet(mut bytes: &[u8]) -> Result<(Header<SwimId>, Vec<Member<SwimId>>), SwimCodecError> {
    let header = SwimCodec.decode_header(&mut bytes)?;
    let mut members = Vec::new();
    if bytes.len() >= 2 {
        let count = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
        bytes = &bytes[2..];
        members.reserve(count.min(bytes.len() / 5));
        for _ in 0..count {
            members.push(SwimCodec.decode_member(&mut bytes)?);
        }
    }
    if !bytes.is_empty() {
        return Err(DecodeError::Trailing(bytes.len()).into());
    }
    Ok((header, members))
}

/// Writes a packet [`decode_packet`] reads back.
pub fn encode_packet(
    header: &Header<SwimId>,
    members: &[Member<SwimId>],
    out: &mut Vec<u8>,
) -> Result<(), SwimCodecError> {
    SwimCodec.encode_header(header, &mut *out)?;
    if !members.is_empty() {
        let count = u16::try_from(members.len()).map_err(|_| SwimCodecError::NoRoom)?;
        out.extend_from_slice(&count.to_be_bytes());
        for m in members {
            SwimCodec.encode_member(m, &mut *out)?;
        }
    }
    Ok(())
}

/// SplitMix64: the random numbers `foca` picks members with (seeded, so runs are repeatable).
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl rand_core::TryRng for SplitMix {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        self.try_next_u64().map(|v| (v >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Ok(z ^ (z >> 31))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let v = self.try_next_u64()?.to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Ok(())
    }
}

/// Which SWIM configuration.
#[derive(Debug, Clone)]
pub struct SwimSettings {
    /// `foca`'s configuration.
    pub config: Config,
}

/// The heartbeat period at and below which [`SwimSettings::aggressive`] is a thousandth of the
/// LAN defaults, ns: the members' default period.
pub const AGGRESSIVE_BASE_PERIOD_NS: u64 = 100_000;

/// `d` times `num / den` (at least a microsecond).
fn scaled(d: Duration, num: u64, den: u64) -> Duration {
    let ns = d.as_nanos() * u128::from(num) / u128::from(den.max(1));
    Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64).max(Duration::from_micros(1))
}

impl SwimSettings {
    /// `foca`'s `Config::new_lan(members)`: memberlist's LAN defaults.
    pub fn lan(members: usize) -> Self {
        let n = NonZeroU32::new(members.max(1) as u32).unwrap_or(NonZeroU32::MIN);
        Self { config: Config::new_lan(n) }
    }

    /// [`Self::lan`] with every duration divided by 1000 for members whose heartbeat period is
    /// at most [`AGGRESSIVE_BASE_PERIOD_NS`] (a probe every millisecond, a 500 us round trip),
    /// and scaled with a longer period (`period_ns / 100 us` times that: a probe every 10 ms at
    /// a 1 ms period). A member's loop reads its datagrams at its wake-ups, one a period, and
    /// on the lane a datagram also waits for its sender's round and its node's release, so
    /// SWIM's round trip there grows with the period: up to two periods more than the
    /// network's on UDP, three or four on the lane. With its durations fixed, SWIM on the lane
    /// at a 1 ms period took live members for down a third of the time (`fd accuracy --network
    /// lane --period-us 1000`: `P_A` 0.64, mistakes of 0.6 s), which measures the settings, not
    /// SWIM.
    pub fn aggressive(members: usize, period_ns: u64) -> Self {
        let (num, den) = (period_ns.max(AGGRESSIVE_BASE_PERIOD_NS), AGGRESSIVE_BASE_PERIOD_NS * 1_000);
        let mut config = Self::lan(members).config;
        config.probe_period = scaled(config.probe_period, num, den);
        config.probe_rtt = scaled(config.probe_rtt, num, den);
        config.suspect_to_down_after = scaled(config.suspect_to_down_after, num, den);
        config.remove_down_after = config.remove_down_after.map(|d| scaled(d, num, den));
        for p in [
            &mut config.periodic_announce,
            &mut config.periodic_announce_to_down_members,
            &mut config.periodic_gossip,
        ]
        .into_iter()
        .flatten()
        {
            p.frequency = scaled(p.frequency, num, den);
        }
        Self { config }
    }
}

/// A change of SWIM's verdict on a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwimEvent {
    /// `member` was declared down (noticed at `at_ns`).
    Down {
        /// The member.
        member: u64,
        /// When, ns.
        at_ns: u64,
    },
    /// `member` is up again (or for the first time).
    Up {
        /// The member.
        member: u64,
        /// When, ns.
        at_ns: u64,
    },
}

/// What `foca` asked for during one call.
#[derive(Debug, Default)]
struct Asked {
    now_ns: u64,
    seq: u64,
    timers: Vec<(u64, u64, Timer<SwimId>)>,
    outbox: Vec<(u64, Vec<u8>)>,
    events: Vec<SwimEvent>,
    down: BTreeMap<u64, u64>,
    defunct: bool,
}

impl Runtime<SwimId> for Asked {
    fn notify(&mut self, notification: Notification<'_, SwimId>) {
        match notification {
            Notification::MemberDown(id) => {
                self.down.entry(id.member).or_insert(self.now_ns);
                self.events.push(SwimEvent::Down { member: id.member, at_ns: self.now_ns });
            }
            Notification::MemberUp(id) if self.down.remove(&id.member).is_some() => {
                self.events.push(SwimEvent::Up { member: id.member, at_ns: self.now_ns });
            }
            Notification::Defunct => self.defunct = true,
            _ => {}
        }
    }

    fn send_to(&mut self, to: SwimId, data: &[u8]) {
        self.outbox.push((to.member, data.to_vec()));
    }

    fn submit_after(&mut self, event: Timer<SwimId>, after: Duration) {
        let due = self.now_ns.saturating_add(after.as_nanos().min(u128::from(u64::MAX)) as u64);
        self.seq += 1;
        self.timers.push((due, self.seq, event));
    }
}

/// One SWIM instance of a member; see the module doc.
pub struct SwimPeer {
    foca: Foca<SwimId, SwimCodec, SplitMix, NoCustomBroadcast>,
    asked: Asked,
    errors: u64,
    /// The members this one was asked to join ([`Self::announce`]): the group as configured.
    group: std::collections::BTreeSet<u64>,
    /// How often members of the group `foca` holds no active identity of are announced to
    /// again, ns, and when next.
    rejoin_every_ns: u64,
    next_rejoin_ns: u64,
}

impl std::fmt::Debug for SwimPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwimPeer")
            .field("asked", &self.asked)
            .field("errors", &self.errors)
            .finish_non_exhaustive()
    }
}

impl SwimPeer {
    /// A SWIM instance for member `me` with `settings`, its randomness seeded with `seed`.
    pub fn new(me: SwimId, settings: &SwimSettings, seed: u64, now_ns: u64) -> Self {
        let foca = Foca::new(me, settings.config.clone(), SplitMix(seed), SwimCodec);
        // As often as `foca` announces to members it holds down, or every 100 probe periods.
        let rejoin = settings
            .config
            .periodic_announce_to_down_members
            .as_ref()
            .map_or(settings.config.probe_period * 100, |p| p.frequency);
        let rejoin_every_ns = rejoin.as_nanos().min(u128::from(u64::MAX)) as u64;
        Self {
            foca,
            asked: Asked { now_ns, ..Asked::default() },
            errors: 0,
            group: std::collections::BTreeSet::new(),
            rejoin_every_ns,
            next_rejoin_ns: now_ns.saturating_add(rejoin_every_ns),
        }
    }

    /// Asks each of `members` to let this member in (the start of a membership).
    pub fn announce(&mut self, members: &[u64], now_ns: u64) {
        self.asked.now_ns = now_ns;
        for &member in members {
            self.group.insert(member);
            let dst = SwimId { member, generation: 0 };
            if self.foca.announce(dst, &mut self.asked).is_err() {
                self.errors += 1;
            }
        }
        self.after_call();
    }

    /// A SWIM packet received; a packet `foca` refuses is counted in [`Self::errors`].
    pub fn handle_data(&mut self, payload: &[u8], now_ns: u64) {
        self.asked.now_ns = now_ns;
        if self.foca.handle_data(payload, &mut self.asked).is_err() {
            self.errors += 1;
        }
        self.after_call();
    }

    /// Fires every timer due at `now_ns`.
    pub fn poll(&mut self, now_ns: u64) {
        self.asked.now_ns = now_ns;
        // Fired in due order (then in the order asked); timers a fired one asks for wait for
        // the next call, so the work per call is bounded by what was pending.
        let mut due: Vec<(u64, u64, Timer<SwimId>)> = Vec::new();
        let mut i = 0;
        while i < self.asked.timers.len() {
            if self.asked.timers[i].0 <= now_ns {
                due.push(self.asked.timers.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|(at, seq, _)| (*at, *seq));
        // A member of the group with no active identity here is announced to again: `foca`
        // announces only to members it holds active or down, and a member that lost every
        // peer (each held it down while it held them down, their identities renewed since)
        // holds none of their current identities, so nothing would ever reach it again.
        if now_ns >= self.next_rejoin_ns {
            self.next_rejoin_ns = now_ns.saturating_add(self.rejoin_every_ns);
            let missing: Vec<u64> = self.group.iter().copied().filter(|&m| !self.is_active(m)).collect();
            for member in missing {
                if self.foca.announce(SwimId { member, generation: 0 }, &mut self.asked).is_err() {
                    self.errors += 1;
                }
            }
        }
        for (_, _, timer) in due {
            if self.foca.handle_timer(timer, &mut self.asked).is_err() {
                self.errors += 1;
            }
        }
        self.after_call();
    }

    fn after_call(&mut self) {
        // A verdict of down holds only while no identity of the member is active: `foca` says
        // when a member comes back with a new identity, but not in every order (a rename of
        // two active identities says nothing of liveness), and a verdict kept on a live
        // member is a suspicion that never ends.
        if !self.asked.down.is_empty() {
            let now = self.asked.now_ns;
            for id in self.foca.iter_members().map(|m| m.id().member) {
                if self.asked.down.remove(&id).is_some() {
                    self.asked.events.push(SwimEvent::Up { member: id, at_ns: now });
                }
            }
        }
        if std::mem::take(&mut self.asked.defunct) {
            // Declared down by mistake (renew() would have rejoined on its own): take the
            // next generation.
            if let Some(next) = self.foca.identity().renew()
                && self.foca.change_identity(next, &mut self.asked).is_err()
            {
                self.errors += 1;
            }
        }
    }

    /// When the next timer is due, ns.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.asked.timers.iter().map(|(at, _, _)| *at).min()
    }

    /// The packets to send: (member id, bytes), in order.
    pub fn take_outbox(&mut self) -> std::vec::Drain<'_, (u64, Vec<u8>)> {
        self.asked.outbox.drain(..)
    }

    /// The verdict changes since the last call.
    pub fn take_events(&mut self) -> std::vec::Drain<'_, SwimEvent> {
        self.asked.events.drain(..)
    }

    /// When `member` was declared down (`None`: up, or never known).
    pub fn down_since_ns(&self, member: u64) -> Option<u64> {
        self.asked.down.get(&member).copied()
    }

    /// Whether `member` is an active (alive or suspect) member.
    pub fn is_active(&self, member: u64) -> bool {
        self.foca.iter_members().any(|m| m.id().member == member)
    }

    /// Packets and timers `foca` refused (malformed, stale, from itself).
    pub fn errors(&self) -> u64 {
        self.errors
    }
}

#[cfg(test)]
mod tests;
