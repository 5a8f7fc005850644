//! Faults made on request at this member's Raft transport (`KAIROS.FAULT`, only with
//! `allow_faults`): partitions from chosen peers and random loss, each for a while, for checks.

use std::collections::BTreeMap;

use kairos_sys::clock::monotonic_ns;

use super::Member;
use crate::kv::Reply;

/// Faults made at this member's Raft transport on request (`KAIROS.FAULT`).
#[derive(Debug, Default)]
pub(super) struct Faults {
    /// Peers whose datagrams are dropped both ways, until when (monotonic ns).
    cut: BTreeMap<u64, u64>,
    /// Probability of dropping any datagram, and until when.
    loss: (f64, u64),
    /// A xorshift state for the loss draws.
    rng: u64,
}

impl Faults {
    /// No faults; the loss draws start from `seed` (not zero, where xorshift would stay).
    pub(super) fn new(seed: u64) -> Self {
        Faults { rng: seed, ..Faults::default() }
    }

    pub(super) fn drops(&mut self, peer: u64, now: u64) -> bool {
        if self.cut.get(&peer).is_some_and(|&until| until > now) {
            return true;
        }
        if self.loss.1 > now && self.loss.0 > 0.0 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            return (self.rng >> 11) as f64 / (1u64 << 53) as f64 <= self.loss.0;
        }
        false
    }
}

impl Member {
    /// `KAIROS.FAULT PARTITION ms [peer ...] | LOSS percent ms | HEAL`: drops this member's
    /// Raft datagrams to and from the peers named (all others when none) for `ms`
    /// milliseconds, or any of them with a probability; only with `allow_faults`.
    pub(super) fn fault_command(&mut self, args: &[Vec<u8>]) -> Reply {
        if !self.config.allow_faults {
            return Reply::Error(
                "ERR faults are not allowed on this member (start it with --allow-faults)".into(),
            );
        }
        let usage = || {
            Reply::Error("ERR usage: KAIROS.FAULT PARTITION ms [peer ...] | LOSS percent ms | HEAL".into())
        };
        let number = |i: usize| {
            args.get(i).and_then(|a| std::str::from_utf8(a).ok()).and_then(|s| s.parse::<u64>().ok())
        };
        let word = args.first().map(|a| a.to_ascii_lowercase());
        let now = monotonic_ns();
        match word.as_deref() {
            Some(b"partition") => {
                let Some(ms) = number(1).filter(|&ms| ms <= 3_600_000) else { return usage() };
                let mut peers: Vec<u64> = (2..args.len()).filter_map(number).collect();
                if peers.len() != args.len().saturating_sub(2) {
                    return usage();
                }
                if peers.is_empty() {
                    peers = self.config.peers.keys().copied().filter(|&p| p != self.config.id).collect();
                }
                for p in peers {
                    self.faults.cut.insert(p, now + ms * 1_000_000);
                }
                Reply::Ok
            }
            Some(b"loss") if args.len() == 3 => {
                let (Some(percent), Some(ms)) =
                    (number(1).filter(|&p| p <= 100), number(2).filter(|&ms| ms <= 3_600_000))
                else {
                    return usage();
                };
                self.faults.loss = (percent as f64 / 100.0, now + ms * 1_000_000);
                Reply::Ok
            }
            Some(b"heal") if args.len() == 1 => {
                self.faults.cut.clear();
                self.faults.loss = (0.0, 0);
                Reply::Ok
            }
            _ => usage(),
        }
    }
}
