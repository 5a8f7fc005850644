//! What the allocation keeps and what the algorithms read: a tunnel with its tree and per-hop
//! analysis, the load of each link, and why a request is refused.
//!
//! This module sits below [`crate::adj`], [`crate::opt`] and [`crate::alloc`]: all three use
//! these types and none of them is imported here, so the modules form no cycle.

use crate::request::{Request, Resources, SUBLANES};
use crate::topology::{LinkId, NodeId, Topology};
use crate::units::Picos;

/// A tunnel's identity within an [`crate::Allocation`], given in admission order from 1.
pub type TunnelId = u64;

/// One link of a tunnel's tree, as the analysis saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// The link.
    pub link: LinkId,
    /// The tunnel's transmission time on the link.
    pub tx: Picos,
    /// Longest wait in the link's queue before transmission starts.
    pub wait: Picos,
    /// Earliest arrival at the link's queue after the packet's release.
    pub arrive_min: Picos,
    /// Latest arrival at the link's queue after the packet's release.
    pub arrive_max: Picos,
}

/// An admitted tunnel: the request, the tree it runs along and what it was granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunnel {
    /// Its identity in the allocation.
    pub id: TunnelId,
    /// What was asked.
    pub request: Request,
    /// The tree's links in preorder from the sender (a link before the links below it).
    pub links: Vec<LinkId>,
    /// What is granted now (other tunnels' admissions and releases change it).
    pub resources: Resources,
    /// The analysis per link, in the order of `links`.
    pub hops: Vec<Hop>,
    /// The latest its sending host lets a packet enter the first link after its release (the
    /// host's [`crate::request::HostDelay`] for this tunnel's receivers; 0 when none is known).
    pub host_jitter: Picos,
}

impl Tunnel {
    /// The tree's links as (from, to) node pairs.
    pub fn edges(&self, topo: &Topology) -> Vec<(NodeId, NodeId)> {
        self.links.iter().map(|&l| (topo.link(l).from, topo.link(l).to)).collect()
    }
}

/// One tunnel on a link, with what lower sub-lanes need to count its packets there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The tunnel.
    pub id: TunnelId,
    /// Its packet size.
    pub bytes: u64,
    /// Transmission time on the link.
    pub tx: Picos,
    /// Longest stay in the link's queue: wait plus transmission.
    pub residence: Picos,
    /// Spread of its packets' arrival times at the link.
    pub spread: Picos,
    /// Its approved period.
    pub period: Picos,
}

/// What one link carries, kept up to date on admission and release.
#[derive(Debug, Clone, Default)]
pub struct LinkLoad {
    /// The tunnels on the link, by sub-lane.
    pub by_sublane: [Vec<Entry>; SUBLANES as usize],
    /// Sum of the packet sizes (approximate validity: at most the queue).
    pub bytes: u64,
    /// Per sub-lane: the sum of the tunnels' transmission times.
    pub tx_sum: [Picos; SUBLANES as usize],
    /// Per sub-lane: the largest packet.
    pub max_bytes: [u64; SUBLANES as usize],
}

impl LinkLoad {
    /// Every tunnel on the link.
    pub fn tunnels(&self) -> impl Iterator<Item = TunnelId> + '_ {
        self.by_sublane.iter().flatten().map(|e| e.id)
    }

    /// The largest packet of the sub-lanes below `sublane` (0 when none).
    pub fn max_bytes_below(&self, sublane: u8) -> u64 {
        let below = (usize::from(sublane) + 1).min(self.max_bytes.len());
        self.max_bytes[below..].iter().copied().max().unwrap_or(0)
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request itself is wrong (unknown hosts, a zero period, a tree that is not one).
    #[error("{0}")]
    Invalid(String),
    /// Every path toward a receiver crosses a link whose queue cannot hold one more packet.
    #[error("no room for {bytes} B toward '{receiver}': link {link} is full ({held} of {queue} B held)")]
    Full {
        /// The receiver not reached.
        receiver: String,
        /// The full link, `from -> to`.
        link: String,
        /// The request's packet size.
        bytes: u64,
        /// Bytes the link's admitted tunnels already hold.
        held: u64,
        /// The link's queue.
        queue: u64,
    },
    /// No path of switches leads from the sender to a receiver.
    #[error("no path toward '{receiver}'")]
    Unreachable {
        /// The receiver not reached.
        receiver: String,
    },
    /// Higher sub-lanes leave no room on a link: the waiting time does not converge.
    #[error("sub-lane {sublane} is saturated on link {link}: higher sub-lanes leave no room")]
    Saturated {
        /// The link, `from -> to`.
        link: String,
        /// The sub-lane.
        sublane: u8,
    },
    /// A bound (or a per-link sum) would not fit in 64 bits: refused rather than admitted with
    /// a wrapped bound.
    #[error(
        "{what} at link {link} overflows 64-bit picoseconds (about 5,124 hours): the tree's delays and waits add up past it"
    )]
    Overflow {
        /// The link where the sum overflowed, `from -> to`.
        link: String,
        /// Which quantity overflowed (`the maximum latency`, `the period bound`, ...).
        what: String,
    },
}
