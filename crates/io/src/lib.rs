//! Packet I/O for Kairos: the [`Port`] trait and its backends, the packet buffer pool, and the
//! network-namespace testbed.
//!
//! - [`port`]: [`Port`]: `rx_burst` / `tx_burst` of messages with reception time stamps, each
//!   with a wire form of its own ([`Message`]; [`Datagram`] is bytes as they are), and
//!   [`Capabilities`] (max burst, where time stamps come from).
//! - [`memory`]: two ports joined by rings in memory: the embedded default (no network, no root).
//! - [`udp`]: UDP over `recvmmsg`/`sendmmsg` with kernel software RX time stamps.
//! - [`udp_frame`]: Ethernet, IPv4 and UDP framing, written and read back with every field
//!   checked.
//! - [`af_packet`]: UDP/IPv4 on a memory-mapped `AF_PACKET` ring: a port, and a datagram socket
//!   for other users.
//! - [`fault`]: a wrapper that drops, duplicates, reorders and corrupts, for tests.
//! - [`pool`]: fixed packet buffers passed between threads as indices.
//! - [`testbed`]: source and forwarder namespaces joined by a veth pair, removed on drop.
//! - [`bridge`]: message rings in shared-memory files, between an application and a node.
//! - [`lane_testbed`]: the express lane's network: hosts on a bridge, lane traffic (DSCP EF) in
//!   a strict-priority class at every egress, calibrated delays; removed on drop.

// Only the pool needs `unsafe` (its slots are shared between threads, ownership kept by `Buf`),
// and the bridge's one step that vouches a mapping outlives its reader.
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod af_packet;
#[allow(unsafe_code)]
pub mod bridge;
pub mod fault;
pub mod lane_testbed;
pub mod memory;
#[allow(unsafe_code)]
pub mod pool;
pub mod port;
pub mod testbed;
pub mod udp;
pub mod udp_frame;

pub use af_packet::{AfPacketError, AfPacketPort, AfPacketSocket};
pub use fault::{FaultCounts, FaultPort, Faults};
pub use lane_testbed::{LaneTestbed, LaneTestbedConfig, LaneTestbedError};
pub use port::{
    Capabilities, Datagram, MAX_WIRE_BYTES, Message, Port, PortBase, PortError, PortStats, RxTimestamps,
};
pub use testbed::{ForwarderSide, Testbed, TestbedError};
pub use udp::UdpPort;
