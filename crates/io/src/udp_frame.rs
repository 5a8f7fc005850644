//! Ethernet, IPv4 and UDP framing: a datagram written as the frame a link carries (both
//! checksums computed) and a frame read back as a datagram, every length and field checked
//! against the bytes before use, and any other frame refused with its reason.
//!
//! What the kernel's UDP layer does for a socket, for the paths that bypass it: the packet-ring
//! socket and port ([`crate::af_packet`]) and the lane's fast path over them. Frames received
//! have their IPv4 header checksum verified but not their UDP checksum: a kernel sending over a
//! veth leaves the UDP checksum to an offload that never runs, so a frame read off the interface
//! holds only the pseudo-header's partial sum (see [`parse_udp_frame`]).

use std::net::{Ipv4Addr, SocketAddrV4};

/// A hardware (MAC) address.
pub type MacAddr = [u8; 6];

/// Ethernet, IPv4 (no options) and UDP headers: the bytes before a datagram's payload.
pub const HEADERS_LEN: usize = ETHERNET_LEN + IPV4_LEN + UDP_LEN;
const ETHERNET_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const UDP_LEN: usize = 8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const PROTOCOL_UDP: u8 = 17;

/// One end of a UDP flow on an Ethernet link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The interface's hardware address.
    pub mac: MacAddr,
    /// The IPv4 address and UDP port.
    pub addr: SocketAddrV4,
}

/// Why a frame was not a UDP datagram for us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Shorter than the headers it claims (or than an Ethernet, IPv4 and UDP header).
    #[error("frame of {len} bytes is shorter than its headers")]
    Truncated {
        /// The frame's length.
        len: usize,
    },
    /// Not IPv4 (another ethertype, or a VLAN tag).
    #[error("not IPv4 (ethertype {ethertype:#06x})")]
    NotIpv4 {
        /// The frame's ethertype.
        ethertype: u16,
    },
    /// An IPv4 header that is not one (version, header length or total length wrong).
    #[error("malformed IPv4 header")]
    BadIpHeader,
    /// The IPv4 header checksum does not match.
    #[error("IPv4 header checksum mismatch")]
    IpChecksum,
    /// A fragment of a larger datagram (not reassembled here).
    #[error("IPv4 fragment")]
    Fragment,
    /// Another IP protocol.
    #[error("not UDP (IP protocol {protocol})")]
    NotUdp {
        /// The IP protocol number.
        protocol: u8,
    },
    /// A UDP length shorter than its header or longer than the IP packet.
    #[error("UDP length {len} does not fit the IP packet")]
    BadUdpLength {
        /// The UDP header's length field.
        len: u16,
    },
}

/// Frames received but not handed on, by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SkipCounts {
    /// Not IPv4.
    pub not_ipv4: u64,
    /// IPv4 but not UDP.
    pub not_udp: u64,
    /// IPv4 fragments.
    pub fragments: u64,
    /// Truncated frames, bad IPv4 headers or checksums, bad UDP lengths.
    pub malformed: u64,
    /// UDP datagrams to another address or port (or, on a port, from another than its peer).
    pub other_flow: u64,
}

impl SkipCounts {
    /// Counts one frame skipped for `error`.
    pub fn count(&mut self, error: FrameError) {
        match error {
            FrameError::NotIpv4 { .. } => self.not_ipv4 += 1,
            FrameError::NotUdp { .. } => self.not_udp += 1,
            FrameError::Fragment => self.fragments += 1,
            FrameError::Truncated { .. }
            | FrameError::BadIpHeader
            | FrameError::IpChecksum
            | FrameError::BadUdpLength { .. } => self.malformed += 1,
        }
    }

    /// Every frame skipped.
    pub fn total(&self) -> u64 {
        self.not_ipv4 + self.not_udp + self.fragments + self.malformed + self.other_flow
    }
}

/// A UDP datagram found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// The sender.
    pub src: Endpoint,
    /// The receiver the frame was addressed to.
    pub dst: Endpoint,
    /// The UDP payload (the UDP length's worth; Ethernet padding left out).
    pub payload: &'a [u8],
}

/// The Internet checksum's running sum (RFC 1071) of `bytes` added to `sum`, unfolded.
fn ones_sum(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut pairs = bytes.chunks_exact(2);
    for pair in &mut pairs {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a running sum into the one's-complement checksum.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IPv4 header checksum of `header` (its checksum field taken as it is: zero when
/// computing, the received value when verifying, where a valid header gives 0).
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    fold(ones_sum(0, header))
}

/// The UDP checksum of `segment` (header and payload, its checksum field taken as it is) from
/// `src` to `dst`: over the pseudo-header and the segment (RFC 768). A valid received segment
/// gives 0.
pub fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, segment: &[u8]) -> u16 {
    let mut sum = ones_sum(0, &src.octets());
    sum = ones_sum(sum, &dst.octets());
    sum += u32::from(PROTOCOL_UDP) + segment.len() as u32;
    fold(ones_sum(sum, segment))
}

/// Writes an Ethernet frame carrying `payload` in UDP/IPv4 from `src` to `dst` into `out`
/// (type-of-service byte `tos`, IPv4 identification `ip_id`, don't-fragment set, TTL 64, both
/// checksums computed); returns
/// its length, or `None` when `out` is shorter than [`HEADERS_LEN`] plus the payload or the
/// payload does not fit an IPv4 packet.
pub fn write_udp_frame(
    src: &Endpoint,
    dst: &Endpoint,
    tos: u8,
    ip_id: u16,
    payload: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    let total = HEADERS_LEN.checked_add(payload.len()).filter(|&t| t <= out.len())?;
    let (headers, rest) = out[..total].split_at_mut(HEADERS_LEN);
    rest.copy_from_slice(payload);
    write_headers(src, dst, tos, ip_id, headers, rest)?;
    Some(total)
}

/// Writes the [`HEADERS_LEN`] bytes of headers in front of `payload` into `headers`: the
/// checksums need the payload, which a sender on a ring has already written in place behind
/// them. `None` when the payload does not fit an IPv4 packet (or `headers` is not
/// [`HEADERS_LEN`] bytes).
pub(crate) fn write_headers(
    src: &Endpoint,
    dst: &Endpoint,
    tos: u8,
    ip_id: u16,
    headers: &mut [u8],
    payload: &[u8],
) -> Option<()> {
    if headers.len() != HEADERS_LEN {
        return None;
    }
    let ip_len = u16::try_from(IPV4_LEN + UDP_LEN + payload.len()).ok()?;
    let udp_len = ip_len - IPV4_LEN as u16;
    headers[0..6].copy_from_slice(&dst.mac);
    headers[6..12].copy_from_slice(&src.mac);
    headers[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let (ip, udp) = headers[ETHERNET_LEN..].split_at_mut(IPV4_LEN);
    ip[0] = 0x45; // version 4, 5 words of header
    // DSCP and ECN: a ring's frames skip this host's queueing discipline, but not the
    // classifiers further on (a bridge port's HTB, a switch's priority queue).
    ip[1] = tos;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
    ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
    ip[8] = 64;
    ip[9] = PROTOCOL_UDP;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&src.addr.ip().octets());
    ip[16..20].copy_from_slice(&dst.addr.ip().octets());
    let ip_sum = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    udp[0..2].copy_from_slice(&src.addr.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.addr.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].fill(0);
    let mut sum = ones_sum(0, &src.addr.ip().octets());
    sum = ones_sum(sum, &dst.addr.ip().octets());
    sum += u32::from(PROTOCOL_UDP) + u32::from(udp_len);
    // The header is 8 bytes, so summing it and the payload apart keeps the byte pairs.
    sum = ones_sum(ones_sum(sum, udp), payload);
    // A computed zero is sent as all ones: zero on the wire means "no checksum".
    let udp_sum = match fold(sum) {
        0 => 0xffff,
        sum => sum,
    };
    udp[6..8].copy_from_slice(&udp_sum.to_be_bytes());
    Some(())
}

/// Reads the UDP datagram in an Ethernet frame: IPv4 without fragments, header checksum
/// verified, lengths consistent (the UDP checksum is not verified: see the module doc).
/// Never panics, whatever the bytes.
pub fn parse_udp_frame(frame: &[u8]) -> Result<UdpDatagram<'_>, FrameError> {
    let truncated = FrameError::Truncated { len: frame.len() };
    if frame.len() < ETHERNET_LEN {
        return Err(truncated);
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if ethertype != ETHERTYPE_IPV4 {
        return Err(FrameError::NotIpv4 { ethertype });
    }
    let ip = &frame[ETHERNET_LEN..];
    if ip.len() < IPV4_LEN {
        return Err(truncated);
    }
    let header_len = usize::from(ip[0] & 0x0f) * 4;
    let total_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ip[0] >> 4 != 4 || header_len < IPV4_LEN || total_len < header_len {
        return Err(FrameError::BadIpHeader);
    }
    if ip.len() < total_len {
        return Err(truncated);
    }
    if ipv4_checksum(&ip[..header_len]) != 0 {
        return Err(FrameError::IpChecksum);
    }
    let fragment = u16::from_be_bytes([ip[6], ip[7]]);
    if fragment & 0x3fff != 0 {
        // More fragments (0x2000) or an offset: a piece of a datagram.
        return Err(FrameError::Fragment);
    }
    if ip[9] != PROTOCOL_UDP {
        return Err(FrameError::NotUdp { protocol: ip[9] });
    }
    let udp = &ip[header_len..total_len];
    if udp.len() < UDP_LEN {
        return Err(truncated);
    }
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]);
    if usize::from(udp_len) < UDP_LEN || usize::from(udp_len) > udp.len() {
        return Err(FrameError::BadUdpLength { len: udp_len });
    }
    let mac = |at: usize| -> MacAddr { std::array::from_fn(|i| frame[at + i]) };
    let ipv4 = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
    let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
    Ok(UdpDatagram {
        src: Endpoint { mac: mac(6), addr: SocketAddrV4::new(ipv4(12), port(0)) },
        dst: Endpoint { mac: mac(0), addr: SocketAddrV4::new(ipv4(16), port(2)) },
        payload: &udp[UDP_LEN..usize::from(udp_len)],
    })
}

#[cfg(test)]
mod tests;
