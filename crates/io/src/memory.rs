//! The in-memory port: two ports joined by a pair of SPSC rings (the embedded default: no
//! network, no root). Messages are copied by value, never encoded (the forwarding packet is a
//! 64-byte descriptor, as a NIC descriptor ring holds); the reception stamp is read from the
//! monotonic clock when the burst is taken.

use std::sync::Arc;
use std::time::Duration;

use kairos_ring::{Consumer, Doorbell, Overflow, Producer, spsc};
use kairos_sys::clock::monotonic_ns;

use crate::port::{Capabilities, Message, Port, PortBase, PortError, PortStats, RxTimestamps};

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemoryPort<M> {
    tx: Producer<M>,
    rx: Consumer<M>,
    stats: PortStats,
    max_burst: usize,
    spare: Vec<M>,
    /// Rung by the peer after it sends to us.
    rx_bell: Arc<Doorbell>,
    /// The peer's bell.
    tx_bell: Arc<Doorbell>,
}

/// Two ports joined back to back: what one sends the other receives. `capacity` is each
/// direction's ring (the NIC's descriptor ring; the source's TX ring is 64, its RX ring 4096).
pub fn pair<M: Message>(capacity: usize, max_burst: usize) -> (MemoryPort<M>, MemoryPort<M>) {
    let (a_tx, b_rx) = spsc(capacity.max(1), Overflow::DropNewest).expect("capacity is at least 1");
    let (b_tx, a_rx) = spsc(capacity.max(1), Overflow::DropNewest).expect("capacity is at least 1");
    let max_burst = max_burst.max(1);
    let (a_bell, b_bell) = (Arc::new(Doorbell::new()), Arc::new(Doorbell::new()));
    (
        MemoryPort {
            tx: a_tx,
            rx: a_rx,
            stats: PortStats::default(),
            max_burst,
            spare: Vec::new(),
            rx_bell: Arc::clone(&a_bell),
            tx_bell: Arc::clone(&b_bell),
        },
        MemoryPort {
            tx: b_tx,
            rx: b_rx,
            stats: PortStats::default(),
            max_burst,
            spare: Vec::new(),
            rx_bell: b_bell,
            tx_bell: a_bell,
        },
    )
}

impl<M: Message> Port<M> for MemoryPort<M> {
    fn rx_burst(&mut self, out: &mut [M]) -> Result<usize, PortError> {
        let want = out.len().min(self.max_burst);
        let n = self.rx.dequeue_burst(&mut out[..want]);
        if n > 0 {
            let now = monotonic_ns();
            for m in &mut out[..n] {
                m.set_rx_ns(now);
            }
            self.stats.rx_packets += n as u64;
        }
        Ok(n)
    }

    fn tx_burst(&mut self, messages: &[M]) -> Result<usize, PortError> {
        let offered = &messages[..messages.len().min(self.max_burst)];
        let taken = self.tx.enqueue_burst(offered, &mut self.spare).taken;
        if taken > 0 {
            self.tx_bell.ring();
        }
        self.stats.tx_packets += taken as u64;
        self.stats.tx_refused += (messages.len() - taken) as u64;
        Ok(taken)
    }
}

impl<M: Message> PortBase for MemoryPort<M> {
    fn capabilities(&self) -> Capabilities {
        Capabilities { max_burst: self.max_burst, rx_timestamps: RxTimestamps::Software }
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn wait(&mut self, timeout: Duration) {
        let rx = &self.rx;
        self.rx_bell.wait(timeout, || !rx.is_empty());
    }
}
