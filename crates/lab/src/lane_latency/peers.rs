//! Placeholder until the peer rows land: the interface only.
use kairos_io::lane_testbed::LaneTestbed;

/// One message's journey; CLOCK_REALTIME ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub seq: u64,
    pub sent_ns: u64,
    pub received_ns: u64,
    pub kernel_ns: Option<u64>,
}
#[derive(Debug)]
pub struct PeerRun {
    pub samples: Vec<Sample>,
    pub sent: u64,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    UdpBlocking,
    UdpBusyPoll,
    PriorityOnly,
    Sockperf,
}
impl Peer {
    pub const ALL: [Peer; 4] = [Peer::UdpBlocking, Peer::UdpBusyPoll, Peer::PriorityOnly, Peer::Sockperf];
    pub fn name(self) -> &'static str {
        match self {
            Peer::UdpBlocking => "udp blocking",
            Peer::UdpBusyPoll => "udp busy-poll",
            Peer::PriorityOnly => "priority only",
            Peer::Sockperf => "sockperf",
        }
    }
}
#[derive(Debug)]
pub struct PeerSettings {
    pub from: usize,
    pub to: usize,
    pub period: std::time::Duration,
    pub packets: u64,
    pub message_bytes: usize,
}
pub fn run(_testbed: &LaneTestbed, _peer: Peer, _settings: &PeerSettings) -> anyhow::Result<PeerRun> {
    Err(anyhow::anyhow!("not yet"))
}
