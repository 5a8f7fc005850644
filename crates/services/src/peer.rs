//! Where a member's Raft messages and heartbeats reach another member: a UDP address, or a host
//! of the express lane (the member then sends through its own host's lane node, on tunnels, see
//! [`crate::lane_link`]). A cluster uses one kind throughout.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// A member's Raft address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAddr {
    /// A UDP socket address (`HOST:PORT`, numeric host).
    Udp(SocketAddr),
    /// A host of the lane's topology (`h1`): the member runs as an application of that host's
    /// lane node.
    Lane(String),
}

impl PeerAddr {
    /// The UDP address, if it is one.
    pub fn udp(&self) -> Option<SocketAddr> {
        match self {
            Self::Udp(a) => Some(*a),
            Self::Lane(_) => None,
        }
    }

    /// The lane host, if it is one.
    pub fn lane_host(&self) -> Option<&str> {
        match self {
            Self::Udp(_) => None,
            Self::Lane(h) => Some(h),
        }
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Udp(a) => write!(f, "{a}"),
            Self::Lane(h) => write!(f, "lane:{h}"),
        }
    }
}

/// A lane host among the peers of a member with a UDP address ([`udp_others`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "member {member}'s address {addr} is a lane host, member {me}'s a UDP address: a group is on the lane or off it"
)]
pub struct NotUdp {
    /// The member whose address is a lane host.
    pub member: u64,
    /// Its address.
    pub addr: PeerAddr,
    /// The member asking (whose address is a UDP address).
    pub me: u64,
}

/// The UDP addresses of the members of `peers` other than `me`, or why they are not all UDP
/// addresses (a cluster is on the lane or off it).
pub fn udp_others(
    me: u64,
    peers: &std::collections::BTreeMap<u64, PeerAddr>,
) -> Result<Vec<(u64, SocketAddr)>, NotUdp> {
    peers
        .iter()
        .filter(|(m, _)| **m != me)
        .map(|(&m, a)| a.udp().map(|u| (m, u)).ok_or_else(|| NotUdp { member: m, addr: a.clone(), me }))
        .collect()
}

/// What a lane host name may be: the lane topology's names (letters, digits, `-`, `_`, `.`),
/// 1 to 64 of them, not starting with a digit (so a mistyped IP address is not taken for one).
fn valid_host(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Text that is neither a UDP address nor a lane host name (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is neither HOST:PORT with a numeric host nor a lane host name such as h1")]
pub struct InvalidPeerAddr(pub String);

impl FromStr for PeerAddr {
    type Err = InvalidPeerAddr;

    /// `HOST:PORT` (a numeric host) is UDP; `lane:NAME` or a bare `NAME` is a lane host.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Self::Udp(addr));
        }
        let name = s.strip_prefix("lane:").unwrap_or(s);
        if valid_host(name) {
            return Ok(Self::Lane(name.to_string()));
        }
        Err(InvalidPeerAddr(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_lane_hosts_parse_and_print_back() {
        for text in ["127.0.0.1:7380", "[::1]:9", "lane:h2"] {
            assert_eq!(text.parse::<PeerAddr>().unwrap().to_string(), text);
        }
        assert_eq!("h0".parse::<PeerAddr>().unwrap(), PeerAddr::Lane("h0".into()));
        assert_eq!("h0".parse::<PeerAddr>().unwrap().lane_host(), Some("h0"));
        assert_eq!("1.2.3.4:5".parse::<PeerAddr>().unwrap().udp(), Some("1.2.3.4:5".parse().unwrap()));
        for bad in ["", "1.2.3.4", "10.0.0.1:99999", "h 1", "lane:", "x".repeat(65).as_str()] {
            assert!(bad.parse::<PeerAddr>().is_err(), "{bad:?}");
        }
    }
}
