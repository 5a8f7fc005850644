//! The UDP port: bursts over `sendmmsg` / `recvmmsg` (one syscall per burst, not per packet:
//! one `send` per packet tops out near 0.4 Mpps on this kind of machine), with the kernel's
//! software receive time stamp of every datagram (`SO_TIMESTAMPING`).
//!
//! Kernel time stamps are `CLOCK_REALTIME`; the experiment's clock is `CLOCK_MONOTONIC`. Each
//! burst converts with the offset between the two read just after the `recvmmsg` (read again
//! when a preemption fell between the reads), so a clock step between bursts costs at most one
//! burst's accuracy.
//!
//! The system calls (bursts, time stamps, socket options, `ppoll`, the drop counter) are
//! `kairos_sys::net`'s; this module turns datagrams into messages and stamps into monotonic
//! time.

use std::net::{SocketAddr, UdpSocket};

use kairos_sys::clock::{realtime_offset, stamp_to_monotonic};
use kairos_sys::net::{MmsgBatch, drops, options, poll};

use crate::port::{
    Capabilities, MAX_WIRE_BYTES, Message, Port, PortBase, PortError, PortStats, RxTimestamps,
};

/// Most datagrams one call moves.
pub const MAX_BURST: usize = kairos_sys::net::MAX_BURST;

/// A [`Port`] over a connected, non-blocking UDP socket: one datagram a message, bursts of up
/// to [`MAX_BURST`] per system call, kernel receive stamps.
#[derive(Debug)]
pub struct UdpPort {
    socket: UdpSocket,
    stats: PortStats,
    batch: MmsgBatch,
    rx_bufs: Box<[[u8; MAX_WIRE_BYTES]; MAX_BURST]>,
    tx_bufs: Box<[[u8; MAX_WIRE_BYTES]; MAX_BURST]>,
    tx_lens: [usize; MAX_BURST],
}

impl UdpPort {
    /// Wraps a bound socket, connects it to `peer`, makes it non-blocking, turns on kernel
    /// receive time stamps and asks for a receive buffer of `rcvbuf` bytes.
    pub fn new(socket: UdpSocket, peer: SocketAddr, rcvbuf: usize) -> Result<Self, PortError> {
        socket.connect(peer).map_err(|source| PortError::Io { what: "connect", source })?;
        socket.set_nonblocking(true).map_err(|source| PortError::Io { what: "set_nonblocking", source })?;
        options::enable_rx_timestamps(&socket)
            .map_err(|source| PortError::Io { what: "SO_TIMESTAMPING", source })?;
        // Best effort: the kernel caps it at net.core.rmem_max unless root uses the FORCE form.
        let _ = options::set_receive_buffer(&socket, rcvbuf);
        Ok(Self::on(socket))
    }

    fn on(socket: UdpSocket) -> Self {
        Self {
            socket,
            stats: PortStats::default(),
            batch: MmsgBatch::new(),
            rx_bufs: Box::new([[0; MAX_WIRE_BYTES]; MAX_BURST]),
            tx_bufs: Box::new([[0; MAX_WIRE_BYTES]; MAX_BURST]),
            tx_lens: [0; MAX_BURST],
        }
    }

    /// Sends datagrams with no UDP checksum (`SO_NO_CHECK`; allowed over IPv4). Over a veth the
    /// kernel leaves the checksum for an offload that never happens, which is harmless between
    /// two kernels but wrong once a peer reading frames off the interface sends them back.
    pub fn send_without_checksum(&self) -> Result<(), PortError> {
        options::send_without_checksum(&self.socket)
            .map_err(|source| PortError::Io { what: "SO_NO_CHECK", source })
    }

    /// A second port on the same socket (for a peer that answers to the sending port).
    pub fn try_clone(&self) -> Result<Self, PortError> {
        let socket = self.socket.try_clone().map_err(|source| PortError::Io { what: "dup", source })?;
        Ok(Self::on(socket))
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Datagrams the kernel dropped for want of receive-buffer room, if it says
    /// (`SO_RXQ_OVFL` is per message; this reads the socket's drop counter from `/proc`).
    pub fn kernel_drops(&self) -> Option<u64> {
        drops::kernel_drops(&self.socket)
    }
}

/// Whether a burst call's error only means "nothing moved this time".
fn nothing_moved(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    // A connected UDP socket reports an earlier ICMP "port unreachable" as ConnectionRefused.
    matches!(err.kind(), WouldBlock | Interrupted | ConnectionRefused)
}

impl<M: Message> Port<M> for UdpPort {
    fn rx_burst(&mut self, out: &mut [M]) -> Result<usize, PortError> {
        let want = out.len().min(MAX_BURST);
        if want == 0 {
            return Ok(0);
        }
        let mut bufs = self.rx_bufs.each_mut().map(|b| &mut b[..]);
        let n = match self.batch.recv_into(&self.socket, &mut bufs[..want], true) {
            Ok(n) => n,
            Err(err) if nothing_moved(&err) => return Ok(0),
            Err(source) => return Err(PortError::Io { what: "recvmmsg", source }),
        };
        let (mono, offset) = realtime_offset();
        let mut got = 0;
        for (i, (&len, stamp)) in
            self.batch.lengths().iter().zip(self.batch.rx_timestamps_ns()).enumerate().take(n)
        {
            match M::decode(&self.rx_bufs[i][..len.min(MAX_WIRE_BYTES)]) {
                Some(mut m) => {
                    m.set_rx_ns(stamp.map_or(mono, |rt| stamp_to_monotonic(rt, offset, mono)));
                    out[got] = m;
                    got += 1;
                }
                None => self.stats.rx_invalid += 1,
            }
        }
        self.stats.rx_packets += got as u64;
        Ok(got)
    }

    fn tx_burst(&mut self, messages: &[M]) -> Result<usize, PortError> {
        let want = messages.len().min(MAX_BURST);
        if want == 0 {
            return Ok(0);
        }
        for ((message, buf), len) in
            messages.iter().zip(self.tx_bufs.iter_mut()).zip(&mut self.tx_lens).take(want)
        {
            *len = message.encode(buf).min(MAX_WIRE_BYTES);
        }
        let lens = self.tx_lens;
        let datagrams: [&[u8]; MAX_BURST] = std::array::from_fn(|i| &self.tx_bufs[i][..lens[i]]);
        // The socket is connected: no destination.
        let sent = match self.batch.send(&self.socket, &datagrams[..want], None) {
            Ok(n) => n,
            Err(err) if nothing_moved(&err) => 0,
            Err(source) => return Err(PortError::Io { what: "sendmmsg", source }),
        };
        self.stats.tx_packets += sent as u64;
        self.stats.tx_refused += (messages.len() - sent) as u64;
        Ok(sent)
    }
}

impl PortBase for UdpPort {
    fn capabilities(&self) -> Capabilities {
        Capabilities { max_burst: MAX_BURST, rx_timestamps: RxTimestamps::Kernel }
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn name(&self) -> &'static str {
        "udp"
    }

    fn wait(&mut self, timeout: std::time::Duration) {
        // An error (a signal) only ends the wait early, as a timeout would.
        let _ = poll::wait_readable(&self.socket, timeout);
    }
}
