//! The `Port` trait: bursts of packets in and out, with reception time stamps.

use crate::packet::Packet;

/// What a port can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Most packets one `rx_burst` or `tx_burst` moves.
    pub max_burst: usize,
    /// Where `rx_ns` comes from.
    pub rx_timestamps: RxTimestamps,
}

/// The source of a received packet's `rx_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxTimestamps {
    /// Read by the receiving thread when the burst was taken (in-memory ports).
    Software,
    /// The kernel's software receive time stamp (`SO_TIMESTAMPING`), taken when the datagram
    /// entered the socket layer, converted to the experiment's monotonic clock.
    Kernel,
}

/// Errors of a port (the I/O ones carry the OS error).
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// The call or step that failed (`sendmmsg`, `recvmmsg`, ...).
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The other end of an in-memory port was dropped.
    #[error("the peer port is gone")]
    Disconnected,
    /// A packet ring's error (it names the interface and the step).
    #[error(transparent)]
    AfPacket(#[from] crate::af_packet::AfPacketError),
}

/// Counters every port keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Packets received and handed to the caller.
    pub rx_packets: u64,
    /// Packets `tx_burst` took.
    pub tx_packets: u64,
    /// Packets `tx_burst` could not hand over (the caller still owns them).
    pub tx_refused: u64,
    /// Datagrams received that were not valid packets (dropped and counted).
    pub rx_invalid: u64,
}

/// A place packets come in and go out, in bursts.
pub trait Port: Send {
    /// Receives up to `out.len()` packets without blocking; each gets its `rx_ns`.
    fn rx_burst(&mut self, out: &mut [Packet]) -> Result<usize, PortError>;
    /// Offers `packets`; returns how many were taken (the first ones), without blocking.
    fn tx_burst(&mut self, packets: &[Packet]) -> Result<usize, PortError>;
    /// What the port can do: its largest burst and where its reception stamps come from.
    fn capabilities(&self) -> Capabilities;
    /// The port's counters since it was made.
    fn stats(&self) -> PortStats;
    /// The backend's name as experiments print it (`memory`, `udp`).
    fn name(&self) -> &'static str;
    /// Blocks until a packet may be waiting or `timeout` passed (for idle receivers that
    /// should give their core away). The default sleeps briefly.
    fn wait(&mut self, timeout: std::time::Duration) {
        std::thread::sleep(timeout.min(std::time::Duration::from_micros(50)));
    }
}
