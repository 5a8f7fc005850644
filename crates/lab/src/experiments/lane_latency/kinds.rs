//! The names `kairos lane latency` takes and prints: its rows, its loads and the transports
//! of the lane rows' nodes, each with the slug the command line uses.

use serde::Serialize;

use crate::peers::udp::Peer;

/// A row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RowKind {
    /// The lane, host tuned, on the testbed's lane path.
    Lane,
    /// The lane, host tuned, on the hosts' shared devices.
    LaneShared,
    /// The lane without host tuning.
    LaneUntuned,
    /// A peer.
    Peer(#[serde(skip)] Peer),
}

impl RowKind {
    /// Every row, in the table's order.
    pub const ALL: [RowKind; 7] = [
        RowKind::Lane,
        RowKind::LaneShared,
        RowKind::LaneUntuned,
        RowKind::Peer(Peer::UdpBlocking),
        RowKind::Peer(Peer::UdpBusyPoll),
        RowKind::Peer(Peer::PriorityOnly),
        RowKind::Peer(Peer::Sockperf),
    ];

    /// The row's name in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            RowKind::Lane => "kairos lane",
            RowKind::LaneShared => "kairos lane, shared receive path",
            RowKind::LaneUntuned => "kairos lane, no host tuning",
            RowKind::Peer(p) => p.name(),
        }
    }

    /// The row's name on the command line and in file names.
    pub fn slug(self) -> &'static str {
        match self {
            RowKind::Lane => "lane",
            RowKind::LaneShared => "lane-shared",
            RowKind::LaneUntuned => "lane-untuned",
            RowKind::Peer(Peer::UdpBlocking) => "udp-blocking",
            RowKind::Peer(Peer::UdpBusyPoll) => "udp-busy-poll",
            RowKind::Peer(Peer::PriorityOnly) => "priority-only",
            RowKind::Peer(Peer::Sockperf) => "sockperf",
        }
    }

    /// The row named `slug`, or a one-line error listing the names.
    pub fn from_slug(slug: &str) -> Result<Self, UnknownName> {
        Self::ALL.into_iter().find(|r| r.slug() == slug).ok_or_else(|| UnknownName::Row(slug.to_string()))
    }

    pub(super) fn is_lane(self) -> bool {
        matches!(self, RowKind::Lane | RowKind::LaneShared | RowKind::LaneUntuned)
    }

    /// What the row's latency runs from and to.
    pub(super) fn stamps(self) -> &'static str {
        match self {
            RowKind::Lane | RowKind::LaneShared | RowKind::LaneUntuned => {
                "release stamp to the receiving node's kernel receive stamp"
            }
            RowKind::Peer(Peer::Sockperf) => "half the round trip",
            RowKind::Peer(_) => "before sendto to after the receiver's call returned",
        }
    }
}

/// The load a row runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadKind {
    /// Nothing else.
    Idle,
    /// iperf3 across the same bridge and stress-ng on the other core.
    Flood,
}

impl LoadKind {
    /// Both.
    pub const ALL: [LoadKind; 2] = [LoadKind::Idle, LoadKind::Flood];

    /// Its name in the JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LoadKind::Idle => "idle",
            LoadKind::Flood => "flood",
        }
    }

    /// The load named `name`, or a one-line error.
    pub fn from_name(name: &str) -> Result<Self, UnknownName> {
        Self::ALL.into_iter().find(|l| l.name() == name).ok_or_else(|| UnknownName::Load(name.to_string()))
    }
}

/// What the lane rows' nodes send and receive on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// The kernel's UDP socket.
    #[default]
    Udp,
    /// A packet ring on the testbed host's interface
    /// ([`kairos_io::lane_testbed::HOST_DEVICE`]).
    Packet,
}

impl Transport {
    /// Its name on the command line and in `summary.json`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Packet => "packet",
        }
    }

    /// The transport named `name`, or a one-line error.
    pub fn from_name(name: &str) -> Result<Self, UnknownName> {
        [Self::Udp, Self::Packet]
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| UnknownName::Transport(name.to_string()))
    }
}

/// A row, load or transport named on the command line that does not exist; the message lists
/// the names that do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownName {
    /// No row has this slug.
    #[error("no row {0:?}: the rows are {slugs}", slugs = RowKind::ALL.map(RowKind::slug).join(", "))]
    Row(String),
    /// No load has this name.
    #[error("no load {0:?}: idle or flood")]
    Load(String),
    /// No transport has this name.
    #[error("no transport {0:?}: udp or packet")]
    Transport(String),
}
