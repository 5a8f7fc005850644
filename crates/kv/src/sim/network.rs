//! The simulated network: messages between members, each delivered after a seeded delay,
//! dropped by a seeded loss rate or by a partition, in an order fixed by the seed alone.
//!
//! Messages travel as bytes in the Raft wire codec ([`crate::replica::wire`]), so every
//! simulated run also exercises the codec both ways.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use rand::Rng;
use rand::rngs::StdRng;

/// One message on its way.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InFlight {
    /// When it arrives, in simulated microseconds.
    pub deliver_at_us: u64,
    /// Tie-breaker: the order it was sent in.
    pub serial: u64,
    /// Sender.
    pub from: u64,
    /// Receiver.
    pub to: u64,
    /// The encoded message.
    pub bytes: Vec<u8>,
}

/// The network's state: what is on the way, which links are cut, how lossy it is.
#[derive(Debug, Default)]
pub struct Network {
    queue: BinaryHeap<Reverse<InFlight>>,
    serial: u64,
    cut: BTreeSet<(u64, u64)>,
    /// Probability that a message is lost.
    pub loss: f64,
    /// Least one-way delay, microseconds.
    pub min_delay_us: u64,
    /// Greatest one-way delay, microseconds.
    pub max_delay_us: u64,
    /// Messages sent.
    pub sent: u64,
    /// Messages lost (loss or a cut link).
    pub dropped: u64,
}

impl Network {
    /// A network with one-way delays drawn uniformly in `[min_delay_us, max_delay_us]`.
    pub fn new(min_delay_us: u64, max_delay_us: u64) -> Self {
        Self { min_delay_us, max_delay_us, ..Self::default() }
    }

    /// Sends `bytes` from `from` to `to` at `now_us`.
    pub fn send(&mut self, rng: &mut StdRng, now_us: u64, from: u64, to: u64, bytes: Vec<u8>) {
        self.sent += 1;
        if self.cut.contains(&(from, to)) || (self.loss > 0.0 && rng.random_bool(self.loss)) {
            self.dropped += 1;
            return;
        }
        let delay = rng.random_range(self.min_delay_us..=self.max_delay_us.max(self.min_delay_us));
        self.serial += 1;
        self.queue.push(Reverse(InFlight {
            deliver_at_us: now_us + delay,
            serial: self.serial,
            from,
            to,
            bytes,
        }));
    }

    /// The next message due at or before `now_us`, if any. A message whose link was cut
    /// while it travelled is lost.
    pub fn deliver(&mut self, now_us: u64) -> Option<InFlight> {
        loop {
            if self.queue.peek().is_none_or(|Reverse(m)| m.deliver_at_us > now_us) {
                return None;
            }
            let Reverse(msg) = self.queue.pop()?;
            if self.cut.contains(&(msg.from, msg.to)) {
                self.dropped += 1;
                continue;
            }
            return Some(msg);
        }
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut(&mut self, a: u64, b: u64) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// Messages on the way.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}
