//! Shenango's IOKernel steering: `active[hash % n]`.
//!
//! The active list is compacted by swap-remove when a worker parks (the last one takes the
//! leaver's place, `iokernel/cores.c`), and a joining worker is appended. Any change of `n`
//! re-maps almost every flow: about `n/(n+1)` of them on a join.

use crate::policy::{Steer, WorkerId};

/// The stateless baseline; see the module doc.
#[derive(Debug, Clone, Default)]
pub struct HashMod {
    active: Vec<WorkerId>,
}

impl HashMod {
    /// The policy with no worker active: [`Steer::pick`] gives `None` until a worker joins.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Steer for HashMod {
    fn name(&self) -> &'static str {
        "hash-mod"
    }

    #[inline]
    fn pick(&mut self, hash: u64, _now_ns: u64) -> Option<WorkerId> {
        self.peek(hash)
    }

    fn peek(&self, hash: u64) -> Option<WorkerId> {
        let n = self.active.len() as u64;
        (n > 0).then(|| self.active[(hash % n) as usize])
    }

    fn join(&mut self, worker: WorkerId) {
        if !self.active.contains(&worker) {
            self.active.push(worker);
        }
    }

    fn leave(&mut self, worker: WorkerId) {
        if let Some(i) = self.active.iter().position(|&w| w == worker) {
            self.active.swap_remove(i);
        }
    }

    fn active(&self) -> &[WorkerId] {
        &self.active
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_worker_gives_its_place_to_the_last() {
        let mut p = HashMod::new();
        for w in 0..4 {
            p.join(w);
        }
        p.leave(1);
        assert_eq!(p.active(), &[0, 3, 2]);
        assert_eq!(p.pick(4, 0), Some(3), "4 % 3 = 1: the place worker 3 took");
        p.leave(9);
        p.join(0);
        assert_eq!(p.active().len(), 3);
        let mut none = HashMod::new();
        assert_eq!(none.pick(1, 0), None);
    }
}
