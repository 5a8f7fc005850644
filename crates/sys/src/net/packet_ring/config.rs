//! What a caller of [`PacketRing`](super::PacketRing) chooses and reads back: the ring's shape ([`RingConfig`],
//! [`RxLayout`]), its counts ([`RingStats`]) and its errors.

use std::io;

use super::{ETH_HEADER_LEN, ETH_P_ALL};

/// Why a ring could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum PacketRingError {
    /// The kernel refused a step.
    #[error("{interface}: {step}: {source}")]
    Os {
        /// The interface's name.
        interface: String,
        /// The step that failed (`socket`, `PACKET_RX_RING`, `mmap`, `send`, ...).
        step: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The configuration cannot be laid out as a ring.
    #[error("{interface}: {reason}")]
    Config {
        /// The interface's name.
        interface: String,
        /// What is wrong and the limit.
        reason: String,
    },
    /// A frame handed to [`PacketRing::tx_burst`](super::PacketRing::tx_burst) is shorter than an Ethernet header or longer
    /// than a transmit slot or the interface's MTU allows; nothing of the burst was queued.
    #[error("{interface}: a frame of {len} bytes cannot be sent (from {ETH_HEADER_LEN} to {max} bytes)")]
    FrameLength {
        /// The interface's name.
        interface: String,
        /// The frame's length.
        len: usize,
        /// The longest frame this ring sends.
        max: usize,
    },
}

/// How received frames are laid out in the receive ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxLayout {
    /// `TPACKET_V2`: `count` slots of one frame each, each visible as soon as written. The
    /// latency choice, and the default.
    Frames {
        /// Slots, rounded up to a whole number of pages.
        count: u32,
    },
    /// `TPACKET_V3`: `count` blocks of `block_size` bytes, each handed over when full or
    /// `timeout_ms` after its first frame.
    Blocks {
        /// Blocks in the ring.
        count: u32,
        /// Bytes per block: a power of two, at least a page.
        block_size: u32,
        /// The block timer, ms (at least 1).
        timeout_ms: u32,
    },
}

/// The shape of a [`PacketRing`](super::PacketRing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// The receive ring.
    pub rx: RxLayout,
    /// Transmit slots, rounded up to a whole number of pages.
    pub tx_frames: u32,
    /// Bytes per slot, header included (a power of two from 256 to 65536); with
    /// [`RxLayout::Blocks`] it bounds transmit frames only.
    pub frame_size: u32,
    /// The ethertype received (`ETH_P_ALL`: every frame).
    pub ethertype: u16,
    /// Transmitted frames skip the queueing discipline (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
}

impl Default for RingConfig {
    /// 4096 receive frames (as the lab's `dpdk-testpmd` peer), 1024 transmit frames, 2 KiB
    /// slots (an MTU-sized frame and its header), every ethertype, qdisc bypassed.
    fn default() -> Self {
        Self {
            rx: RxLayout::Frames { count: 4096 },
            tx_frames: 1024,
            frame_size: 2048,
            ethertype: ETH_P_ALL,
            qdisc_bypass: true,
        }
    }
}

/// What a ring counted: its own counts, and the kernel's (`PACKET_STATISTICS`) up to the last
/// [`PacketRing::statistics`](super::PacketRing::statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingStats {
    /// Frames handed to `rx_burst` closures.
    pub rx_frames: u64,
    /// Of those, frames longer than their slot, handed over cut to it.
    pub rx_truncated: u64,
    /// Of those, frames the kernel stamped when it copied them into the ring, having no
    /// stamp from their arrival (stamping was still being turned on).
    pub rx_stamped_at_copy: u64,
    /// Slots whose header pointed outside the slot: returned unread.
    pub rx_malformed: u64,
    /// Frames the kernel saw for this socket, dropped ones included.
    pub kernel_received: u64,
    /// Frames the kernel dropped because the receive ring was full.
    pub kernel_drops: u64,
    /// Times a full block ring froze (`TPACKET_V3` only).
    pub kernel_queue_freezes: u64,
    /// Frames queued on the transmit ring.
    pub tx_frames: u64,
    /// Frames refused because every transmit slot was still in the kernel's hands.
    pub tx_ring_full: u64,
}
