//! The `Port` trait: bursts of messages in and out, with reception time stamps.
//!
//! A port moves bytes: a backend on a network (UDP, a packet ring) sends each message as one
//! datagram of at most [`MAX_WIRE_BYTES`] and hands back what it receives decoded, with the
//! time it arrived. What the bytes mean is the user's, through [`Message`]: the forwarding
//! experiment's packet (`kairos_forward::Packet`), or [`Datagram`], the bytes as they are. The
//! in-memory backend passes messages by value and never encodes them, as a NIC descriptor ring
//! passes descriptors, so the embedded default pays no codec.

/// The longest wire form a port carries, bytes: [`Message::encode`] gets a buffer this long,
/// and a longer received datagram is cut to it (and so, for a message with a checked length,
/// refused as invalid).
pub const MAX_WIRE_BYTES: usize = 128;

/// What a port carries: a value with a wire form of at most [`MAX_WIRE_BYTES`] and a slot for
/// its reception time stamp.
pub trait Message: Copy + Default + Send + 'static {
    /// Writes the wire form into the start of `buf` and returns its length.
    fn encode(&self, buf: &mut [u8; MAX_WIRE_BYTES]) -> usize;
    /// Reads a received wire form; `None` when the bytes are not one (the port drops it and
    /// counts it in [`PortStats::rx_invalid`]).
    fn decode(bytes: &[u8]) -> Option<Self>;
    /// Records when the port received it, ns on the monotonic clock.
    fn set_rx_ns(&mut self, rx_ns: u64);
    /// When the port received it (what [`Message::set_rx_ns`] recorded).
    fn rx_ns(&self) -> u64;
}

/// A datagram's bytes as they are, at most [`MAX_WIRE_BYTES`], and when it was received: the
/// [`Message`] of a user whose format is its own.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    len: u8,
    bytes: [u8; MAX_WIRE_BYTES],
    rx_ns: u64,
}

const _: () = assert!(MAX_WIRE_BYTES <= u8::MAX as usize, "a datagram's length is a u8");

impl Datagram {
    /// A datagram carrying `payload`; `None` when it is longer than [`MAX_WIRE_BYTES`].
    pub fn new(payload: &[u8]) -> Option<Self> {
        let mut d = Self::default();
        d.bytes.get_mut(..payload.len())?.copy_from_slice(payload);
        d.len = payload.len() as u8;
        Some(d)
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Default for Datagram {
    fn default() -> Self {
        Self { len: 0, bytes: [0; MAX_WIRE_BYTES], rx_ns: 0 }
    }
}

impl std::fmt::Debug for Datagram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datagram").field("bytes", &self.bytes()).field("rx_ns", &self.rx_ns).finish()
    }
}

impl Message for Datagram {
    fn encode(&self, buf: &mut [u8; MAX_WIRE_BYTES]) -> usize {
        let bytes = self.bytes();
        buf[..bytes.len()].copy_from_slice(bytes);
        bytes.len()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        Self::new(bytes)
    }

    fn set_rx_ns(&mut self, rx_ns: u64) {
        self.rx_ns = rx_ns;
    }

    /// When the port received it, ns on the monotonic clock (0 before it was received).
    fn rx_ns(&self) -> u64 {
        self.rx_ns
    }
}

/// What a port can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Most packets one `rx_burst` or `tx_burst` moves.
    pub max_burst: usize,
    /// Where `rx_ns` comes from.
    pub rx_timestamps: RxTimestamps,
}

/// The source of a received message's reception stamp.
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
    /// A backend's own error (it names what failed, the interface or the step).
    #[error("{backend}: {source}")]
    Backend {
        /// The backend, as [`PortBase::name`] says it.
        backend: &'static str,
        /// Its error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Counters every port keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Messages received and handed to the caller.
    pub rx_packets: u64,
    /// Messages `tx_burst` took.
    pub tx_packets: u64,
    /// Messages `tx_burst` could not hand over (the caller still owns them).
    pub tx_refused: u64,
    /// Datagrams received that did not decode as a message (dropped and counted).
    pub rx_invalid: u64,
}

/// What every port does, whatever it carries: say what it can do, count, name itself, and wait.
/// (Apart from [`Port`], so that a backend carrying any message answers these without the
/// caller naming one.)
pub trait PortBase: Send {
    /// What the port can do: its largest burst and where its reception stamps come from.
    fn capabilities(&self) -> Capabilities;
    /// The port's counters since it was made.
    fn stats(&self) -> PortStats;
    /// The backend's name as experiments print it (`memory`, `udp`).
    fn name(&self) -> &'static str;
    /// Blocks until a message may be waiting or `timeout` passed (for idle receivers that
    /// should give their core away). The default sleeps briefly.
    fn wait(&mut self, timeout: std::time::Duration) {
        std::thread::sleep(timeout.min(std::time::Duration::from_micros(50)));
    }
}

/// A place messages of type `M` come in and go out, in bursts.
pub trait Port<M: Message>: PortBase {
    /// Receives up to `out.len()` messages without blocking; each gets its reception stamp.
    fn rx_burst(&mut self, out: &mut [M]) -> Result<usize, PortError>;
    /// Offers `messages`; returns how many were taken (the first ones), without blocking.
    fn tx_burst(&mut self, messages: &[M]) -> Result<usize, PortError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_carries_its_bytes_through_its_wire_form_and_refuses_more_than_fit() {
        let d = Datagram::new(b"lane").unwrap();
        let mut buf = [0u8; MAX_WIRE_BYTES];
        assert_eq!(d.encode(&mut buf), 4);
        let mut back = Datagram::decode(&buf[..4]).unwrap();
        assert_eq!(back.bytes(), b"lane");
        back.set_rx_ns(7);
        assert_eq!((back.rx_ns(), d.rx_ns()), (7, 0));
        assert!(Datagram::new(&[0; MAX_WIRE_BYTES]).is_some());
        assert!(Datagram::new(&[0; MAX_WIRE_BYTES + 1]).is_none());
        assert!(Datagram::decode(&[0; MAX_WIRE_BYTES + 1]).is_none());
    }
}
