//! `kairos-lincheck`: a linearizability checker for the histories clients record against a
//! replicated store, with a model of Kairos's key-value store and any other [`Model`].
//!
//! Role: decide whether what the clients saw (each request's call and return instants, input and
//! output) could have come from one copy of the store applying each request atomically at some
//! instant between its call and its return. A test harness records a [`history`], saves it as
//! JSON lines if it wants to recheck it later, and asks [`check_kv`] (or [`check`] with any
//! [`Model`]) for a verdict: [`Verdict::Illegal`] fails the test, [`Verdict::Unknown`] is
//! reported.
//!
//! Mechanism:
//! - [`Model`] is a sequential specification: an initial state and a step function that
//!   accepts or rejects one operation (input with its output) from a state and gives the next
//!   state. An output of `None` means the outcome is unknown: the step accepts any output but
//!   still applies the write.
//! - [`search`] runs Wing and Gong's search with Lowe's memoization over a doubly linked list of
//!   call and return events, with a cache of (linearized-operations bitset, state) pairs and an
//!   explicit backtracking stack. Unknown-outcome operations return at +infinity and are
//!   optional: they may take effect at any point after their call, or never.
//! - [`kv_model`] is the Redis-like store's model for one key (`GET`, `SET`, `INCR`, `APPEND`,
//!   `DEL` on string values). A history over many keys is linearizable if and only if each key's
//!   sub-history is (linearizability is local), so [`check_kv`] splits the history by key and
//!   checks each key on its own, all within one shared budget.
//!
//! Contract: verdicts are exact: [`Verdict::Linearizable`] and [`Verdict::Illegal`] are proofs,
//! and when the time budget runs out the answer is [`Verdict::Unknown`], never a guess. Ties: a
//! call at the same nanosecond as another operation's return counts as concurrent with it. Work
//! and memory are stated in [`search`]: polynomial when few operations overlap (a history of
//! 10,000 operations over 20 keys and 10 clients checks in well under a second), exponential in
//! the worst case, hence the budget. Nothing here panics on a history, whatever it holds; a
//! return before its call is read as a return at the call.
//!
//! # How to read a verdict
//!
//! - `Linearizable`: some order of all known-outcome operations (and some of the unknown ones)
//!   respects real time and the model. This is a proof for this history only.
//! - `Illegal(counterexample)`: no such order exists. `counterexample.prefix` is the longest
//!   linearizable prefix the search found, in order, and `state` is the model's state after it.
//!   `stuck` is the known-outcome operation that returned first among the rest: something among
//!   `candidates` (everything called before `stuck` returned) had to come next, and none could:
//!   the model rejects those in `rejected` in that state outright (a read of a stale or never
//!   written value shows up here), and the others lead to dead ends further on. Start with the
//!   rejected candidates: their outputs are what the store got wrong, or what a neighbour in the
//!   prefix made impossible. The `detail` text (also the `Display` form) lists each candidate
//!   with its client, times, input and output. For [`check_kv`] the indices are positions in
//!   the whole history, and only the key in [`KeyReport::key`] is involved.
//! - `Unknown`: the budget ran out first. Raise the budget, or make the history cheaper: unique
//!   values per write, more keys, fewer concurrent clients, fewer unknown outcomes (each one
//!   stays concurrent with everything after its call).
//!
//! Source: Wing and Gong (1993) and Lowe (2017) for the search; Porcupine (A. Athalye, Go) for
//! the model interface, unknown outcomes and per-key partitioning; Knossos and Jepsen for the
//! treatment of indeterminate (`:info`) operations; Herlihy and Wing (1990) for locality.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt::Debug;
use std::hash::Hash;

pub mod history;
pub mod kv_model;
pub mod search;

#[cfg(test)]
mod sim;

pub use history::{HistoryError, Operation, read_jsonl, write_jsonl};
pub use kv_model::{KeyReport, KvCommand, KvInput, KvModel, KvOp, KvOutput, KvReport, KvState, check_kv};
pub use search::{Counterexample, Verdict, check};

/// A sequential specification: what one copy of the object does, one operation at a time.
///
/// `step` must be a function of its arguments (deterministic, no interior state), or the
/// verdicts mean nothing.
pub trait Model {
    /// The object's state. The checker clones it once per search step, hashes it and compares
    /// it, so small states check fastest.
    type State: Clone + Eq + Hash + Debug;
    /// What a client asks.
    type Input: Debug;
    /// What a client gets back.
    type Output: Debug;

    /// The state before any operation.
    fn init(&self) -> Self::State;

    /// Applies `input` in `state`: the next state if the object could have answered `output`,
    /// `None` if it could not. `output == None` means the outcome is unknown: accept, but still
    /// apply the operation's effect.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;

    /// A state for a counterexample; its `Debug` form unless the model knows better.
    fn describe_state(&self, state: &Self::State) -> String {
        format!("{state:?}")
    }

    /// An operation for a counterexample; `input -> output` by default (`?` when unknown).
    fn describe_operation(&self, input: &Self::Input, output: Option<&Self::Output>) -> String {
        match output {
            Some(output) => format!("{input:?} -> {output:?}"),
            None => format!("{input:?} -> ?"),
        }
    }
}
