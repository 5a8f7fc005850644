//! UDP sockets beyond what std offers: bursts of datagrams in one system call each way, the
//! kernel's receive time stamps, socket options, waiting on several sockets, and the kernel's
//! count of datagrams it dropped.
//!
//! - [`burst`]: [`MmsgBatch`], `recvmmsg`/`sendmmsg` of up to [`MAX_BURST`] datagrams into and
//!   from the caller's buffers, with `SO_TIMESTAMPING` receive stamps when asked.
//! - [`options`]: receive time stamps on, receive-buffer size, sending without UDP checksums,
//!   the type-of-service byte and the socket priority a queueing discipline classifies by.
//! - [`poll`]: waiting until one socket, or any of a set, is readable.
//! - [`drops`]: the kernel's per-socket drop counter from `/proc/net/udp`.
//!
//! Sockets are std's [`std::net::UdpSocket`]; everything here borrows them and never closes
//! them. Every call reports the kernel's refusal as an `io::Error` and never panics.

pub mod burst;
pub mod drops;
pub mod options;
pub mod poll;

pub use burst::{MAX_BURST, MmsgBatch};
