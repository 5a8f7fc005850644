//! Caladan's IOKernel steering: `flow_tbl[hash % T]`, a table of `T` slots (the most workers,
//! 16 here as in the research note's model), rebuilt on every change of the active set: each
//! active worker keeps its own slot (slot `w` for worker `w`), and the other slots are dealt
//! round-robin over the active list, restarting from its first every time
//! (`iokernel/sched.c`, `sched_steer_flows`). Flows in a kept slot never move; the rest are
//! reshuffled.

use crate::policy::{Steer, WorkerId};

/// Slots in the table [`crate::PolicyKind::build`] makes: 16, as in the research note's model,
/// or `workers + 1` (a slot for each worker and one joiner) when that is more.
pub const SLOTS: usize = 16;

/// The indirection-table baseline; see the module doc.
#[derive(Debug, Clone)]
pub struct Caladan {
    slots: Vec<WorkerId>,
    active: Vec<WorkerId>,
}

impl Caladan {
    /// A table of `slots` slots (at least 1), no worker active. `slots` must exceed the highest
    /// worker number that will be active, so each active worker has its own slot; a worker
    /// beyond the table has none and gets only dealt slots.
    pub fn new(slots: usize) -> Self {
        Self { slots: vec![0; slots.max(1)], active: Vec::new() }
    }

    fn rebuild(&mut self) {
        if self.active.is_empty() {
            return;
        }
        let mut next = 0;
        for (slot, entry) in self.slots.iter_mut().enumerate() {
            if self.active.contains(&(slot as WorkerId)) {
                *entry = slot as WorkerId;
            } else {
                *entry = self.active[next % self.active.len()];
                next += 1;
            }
        }
    }
}

impl Steer for Caladan {
    fn name(&self) -> &'static str {
        "caladan"
    }

    #[inline]
    fn pick(&mut self, hash: u64, _now_ns: u64) -> Option<WorkerId> {
        self.peek(hash)
    }

    fn peek(&self, hash: u64) -> Option<WorkerId> {
        (!self.active.is_empty()).then(|| self.slots[(hash % self.slots.len() as u64) as usize])
    }

    fn join(&mut self, worker: WorkerId) {
        if !self.active.contains(&worker) {
            self.active.push(worker);
            self.active.sort_unstable();
            self.rebuild();
        }
    }

    fn leave(&mut self, worker: WorkerId) {
        if let Some(i) = self.active.iter().position(|&w| w == worker) {
            self.active.remove(i);
            self.rebuild();
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
    fn active_workers_keep_their_slot_and_the_rest_are_dealt_round_robin() {
        let mut p = Caladan::new(6);
        p.join(1);
        p.join(4);
        assert_eq!(p.slots, [1, 1, 4, 1, 4, 4]);
        p.leave(4);
        assert_eq!(p.slots, [1, 1, 1, 1, 1, 1]);
        assert_eq!(p.pick(7, 0), Some(1));
    }
}
