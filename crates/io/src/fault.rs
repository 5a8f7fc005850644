//! A port wrapper that misbehaves on purpose, for tests: it drops, duplicates, reorders and
//! corrupts received messages with seeded probabilities. Corruption flips a bit of the encoded
//! message and decodes it again, as a damaged datagram would arrive: a message with a checksum
//! (the forwarding packet's) catches it, and the message is dropped and counted as invalid,
//! never delivered altered.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::port::{Capabilities, MAX_WIRE_BYTES, Message, Port, PortBase, PortError, PortStats};

/// Probabilities per received packet.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Probability that a received packet is discarded (0 to 1; values outside are clamped).
    pub drop: f64,
    /// Probability that a received packet is delivered twice (0 to 1).
    pub duplicate: f64,
    /// Swap with the next packet of the burst.
    pub reorder: f64,
    /// Probability that a received packet has one bit flipped in its encoding (0 to 1): it
    /// then fails its checksum and is counted as invalid.
    pub corrupt: f64,
    /// Seed of the random draws: the same seed and input give the same faults.
    pub seed: u64,
}

/// What the injector did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultCounts {
    /// Packets discarded.
    pub dropped: u64,
    /// Packets delivered a second time.
    pub duplicated: u64,
    /// Swaps of two neighbouring packets of a burst.
    pub reordered: u64,
    /// Packets with a bit flipped (each then dropped as invalid by the decoder, or, should the
    /// flip leave a valid packet, delivered as decoded).
    pub corrupted: u64,
}

/// A [`Port`] that receives through `P` and injects [`Faults`] into what it receives;
/// transmission passes through untouched.
#[derive(Debug)]
pub struct FaultPort<P, M> {
    inner: P,
    faults: Faults,
    rng: StdRng,
    counts: FaultCounts,
    /// Messages held over to the next burst (a duplicate that did not fit).
    held: Vec<M>,
    scratch: Vec<M>,
    invalid: u64,
}

impl<P: Port<M>, M: Message> FaultPort<P, M> {
    /// Wraps `inner`, injecting `faults` into every received burst.
    pub fn new(inner: P, faults: Faults) -> Self {
        Self {
            inner,
            rng: StdRng::seed_from_u64(faults.seed),
            faults,
            counts: FaultCounts::default(),
            held: Vec::new(),
            scratch: Vec::new(),
            invalid: 0,
        }
    }

    /// What the injector has done so far.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }

    /// The wrapped port (packets held over for the next burst are lost).
    pub fn into_inner(self) -> P {
        self.inner
    }
}

impl<P: Port<M>, M: Message> Port<M> for FaultPort<P, M> {
    fn rx_burst(&mut self, out: &mut [M]) -> Result<usize, PortError> {
        self.scratch.clear();
        self.scratch.append(&mut self.held);
        let room = out.len().saturating_sub(self.scratch.len());
        let mut fresh = vec![M::default(); room];
        let n = self.inner.rx_burst(&mut fresh)?;
        for p in fresh.into_iter().take(n) {
            let f = self.faults;
            if self.rng.random_bool(f.drop.clamp(0.0, 1.0)) {
                self.counts.dropped += 1;
                continue;
            }
            if self.rng.random_bool(f.corrupt.clamp(0.0, 1.0)) {
                self.counts.corrupted += 1;
                let mut bytes = [0u8; MAX_WIRE_BYTES];
                let len = p.encode(&mut bytes).clamp(1, MAX_WIRE_BYTES);
                let bit = self.rng.random_range(0..len * 8);
                bytes[bit / 8] ^= 1 << (bit % 8);
                match M::decode(&bytes[..len]) {
                    // The reception stamp is not on the wire: the damaged copy gets the
                    // original's, as the port stamped it.
                    Some(mut q) => {
                        q.set_rx_ns(p.rx_ns());
                        self.scratch.push(q);
                    }
                    None => self.invalid += 1,
                }
                continue;
            }
            self.scratch.push(p);
            if self.rng.random_bool(f.duplicate.clamp(0.0, 1.0)) {
                self.counts.duplicated += 1;
                self.scratch.push(p);
            }
        }
        for i in 0..self.scratch.len().saturating_sub(1) {
            if self.rng.random_bool(self.faults.reorder.clamp(0.0, 1.0)) {
                self.scratch.swap(i, i + 1);
                self.counts.reordered += 1;
            }
        }
        let k = self.scratch.len().min(out.len());
        out[..k].copy_from_slice(&self.scratch[..k]);
        self.held.extend_from_slice(&self.scratch[k..]);
        Ok(k)
    }

    fn tx_burst(&mut self, messages: &[M]) -> Result<usize, PortError> {
        self.inner.tx_burst(messages)
    }
}

impl<P: Port<M>, M: Message> PortBase for FaultPort<P, M> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn stats(&self) -> PortStats {
        let mut s = self.inner.stats();
        s.rx_invalid += self.invalid;
        s
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}
