//! UDP sockets beyond what std offers: bursts of datagrams in one system call each way, the
//! kernel's receive time stamps, socket options, waiting on several sockets, and the kernel's
//! count of datagrams it dropped; and memory-mapped `AF_PACKET` rings of Ethernet frames.
//!
//! - [`burst`]: [`MmsgBatch`], `recvmmsg`/`sendmmsg` of up to [`MAX_BURST`] datagrams into and
//!   from the caller's buffers, with `SO_TIMESTAMPING` receive stamps when asked.
//! - [`options`]: receive time stamps on, receive-buffer size, sending without UDP checksums,
//!   the type-of-service byte and the socket priority a queueing discipline classifies by.
//! - [`poll`]: waiting until one socket, or any of a set, is readable.
//! - [`split`]: one UDP address on two sockets, datagrams with a given prefix to the second
//!   (a `SO_REUSEPORT` group steered by a classic BPF program).
//! - [`stream_stamps`]: when a TCP stream's bytes arrived (the kernel's receive stamp of a
//!   read), so a server that reads several connections in a pass can serve them in that order.
//! - [`drops`]: the kernel's per-socket drop counter from `/proc/net/udp`.
//! - [`packet_ring`]: [`PacketRing`], an `AF_PACKET` socket on one interface with memory-mapped
//!   receive and transmit rings (frames with kernel receive stamps, one kick per burst).
//!
//! UDP sockets are std's [`std::net::UdpSocket`]; everything here borrows them and never closes
//! them (a [`PacketRing`] owns its socket). Every call reports the kernel's refusal as an `io::Error` and never panics.

pub mod burst;
pub mod drops;
pub mod options;
pub mod packet_ring;
pub mod poll;
pub mod split;
pub mod stream_stamps;

pub use burst::{MAX_BURST, MmsgBatch};
pub use packet_ring::{PacketRing, PacketRingError, RingConfig, RingStats, RxLayout};
