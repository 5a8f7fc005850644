//! A FIFO of callbacks whose grace period has ended, moved around in whole batches.
//!
//! Batches are kept as vector iterators, so taking a batch out of the shared queue, handing a
//! reader's leftovers to the reclaimer, or running the next callback are all O(1) moves: nothing
//! is copied per callback while a lock is held.

use crate::callback::Callback;
use std::collections::VecDeque;

#[derive(Default)]
pub(crate) struct Ready {
    batches: VecDeque<std::vec::IntoIter<Callback>>,
    len: usize,
}

impl Ready {
    pub(crate) fn push(&mut self, callbacks: Vec<Callback>) {
        if !callbacks.is_empty() {
            self.len += callbacks.len();
            self.batches.push_back(callbacks.into_iter());
        }
    }

    /// Moves every batch of `other` to the back of `self`.
    pub(crate) fn append(&mut self, other: &mut Ready) {
        self.len += other.len;
        other.len = 0;
        self.batches.append(&mut other.batches);
    }

    pub(crate) fn pop(&mut self) -> Option<Callback> {
        loop {
            let front = self.batches.front_mut()?;
            if let Some(callback) = front.next() {
                self.len -= 1;
                return Some(callback);
            }
            self.batches.pop_front();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}
