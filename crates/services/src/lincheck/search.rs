//! The search: is there a total order of a history's operations that respects real time and
//! that the model accepts?
//!
//! Mechanism: Wing and Gong's algorithm with Lowe's memoization. Every operation becomes a call
//! entry and a return entry in a doubly linked list sorted by time (calls before returns at the
//! same instant, unknown returns last). The search walks the list from its head: at a call entry
//! it tries to linearize that operation next (the model must accept it from the current state,
//! and the pair (set of linearized operations, new state) must be new to the cache); if so it
//! lifts both entries out of the list, pushes a frame and starts again from the head. Reaching a
//! return entry means the operation it belongs to had to be linearized already, so the search
//! backtracks: it pops the last frame, relinks its entries and tries the next call after it.
//! Operations with an unknown outcome are optional: the search succeeds as soon as every
//! operation with a known outcome is linearized. The backtracking stack is a `Vec`, not the call
//! stack, so histories of any length cannot overflow it.
//!
//! Contract: [`check`] returns [`Verdict::Unknown`] when its budget runs out (the clock is read
//! every [`STEPS_PER_CLOCK_READ`] steps, so the overrun is that many steps) and never guesses.
//! Work: each step costs one model step and one cache probe of `O(n/64)` words plus the state's
//! hash; the number of steps is at most about `2n` times the number of distinct configurations
//! (linearized set, state), which is exponential in the worst case (`2^n` sets) and small when
//! few operations overlap. Memory: the cache holds at most one entry per step, each of
//! `8 * ceil(n/64)` bytes plus one state; the stack at most `n` states; the list `O(n)` words.
//! The search panics only if the model's own `step` or `Hash` does.
//!
//! Source: J. M. Wing and C. Gong, "Testing and verifying concurrent objects" (JPDC 17, 1993);
//! G. Lowe, "Testing for linearizability" (CCPE 29(4), 2017); A. Athalye's Porcupine
//! (`checker.go`), whose list and cache layout this follows.

use std::fmt;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use hashbrown::{DefaultHashBuilder, HashTable};
use serde::{Deserialize, Serialize};

use super::Model;
use super::history::Operation;

/// How many search steps pass between two readings of the clock.
pub const STEPS_PER_CLOCK_READ: u64 = 4096;

/// What the checker concluded about a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Some order of the operations respects real time and the model: the history is
    /// linearizable.
    Linearizable,
    /// No such order exists: the history shows a linearizability violation.
    Illegal(Counterexample),
    /// The budget ran out before the search finished; nothing is known.
    Unknown,
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Linearizable`].
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }

    /// Whether the verdict is [`Verdict::Illegal`].
    pub fn is_illegal(&self) -> bool {
        matches!(self, Verdict::Illegal(_))
    }

    /// Whether the verdict is [`Verdict::Unknown`].
    pub fn is_unknown(&self) -> bool {
        matches!(self, Verdict::Unknown)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => f.write_str("linearizable"),
            Verdict::Illegal(counterexample) => write!(f, "illegal: {counterexample}"),
            Verdict::Unknown => f.write_str("unknown: the budget ran out before the search ended"),
        }
    }
}

/// Why a history is not linearizable, as far as the search got.
///
/// Operations are named by their index in the history given to the checker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counterexample {
    /// The longest linearizable prefix the search found: operations in linearization order.
    /// Unknown-outcome operations appear here only where the search let them take effect.
    pub prefix: Vec<usize>,
    /// The model's state after the prefix, as the model describes it.
    pub state: String,
    /// Of the known-outcome operations outside the prefix, the one that returned first: it had
    /// to come next or after one of the `candidates`, and no order of them continues.
    pub stuck: usize,
    /// Every operation that could have come next after the prefix (called before `stuck`
    /// returned and not in the prefix), `stuck` included, in call order.
    pub candidates: Vec<usize>,
    /// The candidates the model rejects in `state` outright; the others are accepted but lead to
    /// dead ends further on.
    pub rejected: Vec<usize>,
    /// The same, written out with each candidate's client, times, input and output.
    pub detail: String,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

/// Checks that `ops` is linearizable with respect to `model`, spending at most about `budget`
/// of wall-clock time (then the verdict is [`Verdict::Unknown`]).
///
/// A budget too large to add to the current instant means no limit.
pub fn check<M: Model>(model: &M, ops: &[Operation<M::Input, M::Output>], budget: Duration) -> Verdict {
    let deadline = Instant::now().checked_add(budget);
    check_until(model, ops, deadline, None)
}

/// The search itself, with an absolute deadline (`None`: none), shared by [`check`] and the
/// per-key checks. `ids` renames the operations in a counterexample (operation `i` becomes
/// `ids[i]`); `None` keeps their indices.
pub(crate) fn check_until<M: Model>(
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
    deadline: Option<Instant>,
    ids: Option<&[usize]>,
) -> Verdict {
    let outputs: Vec<Option<&M::Output>> = ops.iter().map(Operation::known_output).collect();
    let mut remaining = outputs.iter().filter(|output| output.is_some()).count();
    if remaining == 0 {
        return Verdict::Linearizable;
    }
    let mut list = EventList::new(ops);
    let hasher = DefaultHashBuilder::default();
    let mut cache: HashTable<(Box<[u64]>, M::State)> = HashTable::new();
    let mut linearized = vec![0u64; ops.len().div_ceil(64)];
    let mut stack: Vec<Frame<M::State>> = Vec::new();
    let mut state = model.init();
    // The longest prefix so far, in operations; `stack[..stable]` has not changed since it was
    // recorded, so a longer one only copies the frames above.
    let mut best: Vec<usize> = Vec::new();
    let mut best_state = state.clone();
    let mut stable = 0;

    let mut entry = list.next[HEAD];
    let mut steps: u64 = 0;
    loop {
        if steps.is_multiple_of(STEPS_PER_CLOCK_READ)
            && deadline.is_some_and(|deadline| Instant::now() >= deadline)
        {
            return Verdict::Unknown;
        }
        steps += 1;

        if entry == HEAD || !list.is_call[entry] {
            // The operation of this return entry had to be linearized already: backtrack.
            let Some(frame) = stack.pop() else {
                let counterexample = counterexample(model, ops, &outputs, &list, &best, &best_state, ids);
                return Verdict::Illegal(counterexample);
            };
            let op = list.op[frame.entry];
            clear_bit(&mut linearized, op);
            if outputs[op].is_some() {
                remaining += 1;
            }
            state = frame.state;
            list.unlift(frame.entry);
            stable = stable.min(stack.len());
            entry = list.next[frame.entry];
            continue;
        }

        let op = list.op[entry];
        if let Some(next_state) = model.step(&state, &ops[op].input, outputs[op]) {
            set_bit(&mut linearized, op);
            let hash = hasher.hash_one((&linearized[..], &next_state));
            let seen = cache
                .find(hash, |(bits, cached)| bits[..] == linearized[..] && *cached == next_state)
                .is_some();
            if !seen {
                cache.insert_unique(
                    hash,
                    (Box::from(&linearized[..]), next_state.clone()),
                    |(bits, cached)| hasher.hash_one((&bits[..], cached)),
                );
                let previous = std::mem::replace(&mut state, next_state);
                stack.push(Frame { entry, state: previous });
                list.lift(entry);
                if outputs[op].is_some() {
                    remaining -= 1;
                    if remaining == 0 {
                        return Verdict::Linearizable;
                    }
                }
                if stack.len() > best.len() {
                    best.truncate(stable);
                    best.extend(stack[stable..].iter().map(|frame| list.op[frame.entry]));
                    stable = stack.len();
                    best_state = state.clone();
                }
                entry = list.next[HEAD];
                continue;
            }
            clear_bit(&mut linearized, op);
        }
        entry = list.next[entry];
    }
}

/// One linearized operation on the backtracking stack: its call entry and the state before it.
struct Frame<S> {
    entry: usize,
    state: S,
}

/// The list head's index; entries are `1..=2n`, in event order.
const HEAD: usize = 0;

/// The call and return events of a history in a circular doubly linked list with a head
/// sentinel, stored as parallel arrays.
struct EventList {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// The operation of each entry (unused for the head).
    op: Vec<usize>,
    /// Whether each entry is a call (false for the head).
    is_call: Vec<bool>,
    /// Each operation's call entry.
    call_entry: Vec<usize>,
    /// Each operation's return entry.
    return_entry: Vec<usize>,
}

impl EventList {
    fn new<I, O>(ops: &[Operation<I, O>]) -> Self {
        // (time, rank, op): calls (0) before known returns (1) at one instant, and unknown
        // returns (2) after everything.
        let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * ops.len());
        for (index, op) in ops.iter().enumerate() {
            events.push((op.call_ns, 0, index));
            match op.effective_return_ns() {
                Some(return_ns) => events.push((return_ns, 1, index)),
                None => events.push((u64::MAX, 2, index)),
            }
        }
        events.sort_unstable();

        let len = events.len() + 1;
        let mut list = EventList {
            next: (1..=len).map(|next| next % len).collect(),
            prev: (0..len).map(|entry| (entry + len - 1) % len).collect(),
            op: vec![0; len],
            is_call: vec![false; len],
            call_entry: vec![0; ops.len()],
            return_entry: vec![0; ops.len()],
        };
        for (position, &(_, rank, op)) in events.iter().enumerate() {
            let entry = position + 1;
            list.op[entry] = op;
            if rank == 0 {
                list.is_call[entry] = true;
                list.call_entry[op] = entry;
            } else {
                list.return_entry[op] = entry;
            }
        }
        list
    }

    /// Takes an operation's call entry and its return entry out of the list.
    fn lift(&mut self, call: usize) {
        let ret = self.return_entry[self.op[call]];
        self.unlink(call);
        self.unlink(ret);
    }

    /// Puts back what [`EventList::lift`] took out; lifts must be undone in reverse order.
    fn unlift(&mut self, call: usize) {
        let ret = self.return_entry[self.op[call]];
        self.relink(ret);
        self.relink(call);
    }

    fn unlink(&mut self, entry: usize) {
        let (prev, next) = (self.prev[entry], self.next[entry]);
        self.next[prev] = next;
        self.prev[next] = prev;
    }

    fn relink(&mut self, entry: usize) {
        let (prev, next) = (self.prev[entry], self.next[entry]);
        self.next[prev] = entry;
        self.prev[next] = entry;
    }
}

fn set_bit(bits: &mut [u64], index: usize) {
    bits[index / 64] |= 1 << (index % 64);
}

fn clear_bit(bits: &mut [u64], index: usize) {
    bits[index / 64] &= !(1 << (index % 64));
}

/// Describes where the search got stuck: after the longest prefix `best`, which operations
/// could have come next and which of them the model rejects.
fn counterexample<M: Model>(
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
    outputs: &[Option<&M::Output>],
    list: &EventList,
    best: &[usize],
    best_state: &M::State,
    ids: Option<&[usize]>,
) -> Counterexample {
    let id = |op: usize| ids.and_then(|ids| ids.get(op).copied()).unwrap_or(op);
    let mut in_prefix = vec![false; ops.len()];
    for &op in best {
        in_prefix[op] = true;
    }
    // The search only fails when every configuration it reached, the longest included, left a
    // known-outcome operation unlinearized, so this finds one whenever it is called; the
    // fallback to the first operation only keeps the function total.
    let stuck = (0..ops.len())
        .filter(|&op| !in_prefix[op] && outputs[op].is_some())
        .min_by_key(|&op| list.return_entry[op])
        .unwrap_or(0);
    let mut candidates: Vec<usize> = (0..ops.len())
        .filter(|&op| !in_prefix[op] && list.call_entry[op] < list.return_entry[stuck])
        .collect();
    candidates.sort_unstable_by_key(|&op| list.call_entry[op]);
    let rejected: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&op| model.step(best_state, &ops[op].input, outputs[op]).is_none())
        .collect();

    let state = model.describe_state(best_state);
    let mut detail = format!(
        "the longest linearizable prefix found has {} of {} operations and ends in state {state}; \
         no operation can come next:",
        best.len(),
        ops.len()
    );
    for &op in &candidates {
        let operation = &ops[op];
        let returned = match operation.effective_return_ns() {
            Some(return_ns) => format!("returned at {return_ns} ns"),
            None => "outcome unknown".to_string(),
        };
        let verdict = if rejected.contains(&op) {
            "rejected in this state"
        } else {
            "accepted, but nothing continues after it"
        };
        let first = if op == stuck { " (returned first)" } else { "" };
        detail.push_str(&format!(
            "\n  op {} of client {}, called at {} ns, {returned}: {}: {verdict}{first}",
            id(op),
            operation.client,
            operation.call_ns,
            model.describe_operation(&operation.input, outputs[op]),
        ));
    }
    Counterexample {
        prefix: best.iter().map(|&op| id(op)).collect(),
        state,
        stuck: id(stuck),
        candidates: candidates.into_iter().map(id).collect(),
        rejected: rejected.into_iter().map(id).collect(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lincheck::{KvCommand, KvModel, KvOutput};

    type Op = Operation<KvCommand, KvOutput>;

    fn op(command: KvCommand, output: Option<KvOutput>, call_ns: u64, return_ns: u64) -> Op {
        Operation { client: call_ns, input: command, output, call_ns, return_ns: Some(return_ns) }
    }

    fn set(n: usize) -> KvCommand {
        KvCommand::Set(n.to_string().into_bytes())
    }

    fn read(n: usize) -> Option<KvOutput> {
        Some(KvOutput::Value(Some(n.to_string().into_bytes())))
    }

    /// `writers` overlapping writes of distinct values, then a read of a value none wrote: the
    /// search must try every order of the writes before it can say Illegal.
    fn pathological(writers: usize) -> Vec<Op> {
        let mut ops: Vec<Op> = (0..writers).map(|n| op(set(n), Some(KvOutput::Ok), n as u64, 1000)).collect();
        ops.push(op(KvCommand::Get, read(writers), 2000, 2001));
        ops
    }

    #[test]
    fn lifting_and_unlifting_restores_the_list() {
        let nil = || Some(KvOutput::Value(None));
        let ops = [
            op(KvCommand::Get, nil(), 0, 10),
            op(KvCommand::Get, nil(), 5, 20),
            op(KvCommand::Get, nil(), 15, 30),
            // Unknown: returns after everything.
            op(KvCommand::Get, None, 1, 2),
        ];
        let mut list = EventList::new(&ops);
        let order = |list: &EventList| {
            let mut entries = Vec::new();
            let mut entry = list.next[HEAD];
            while entry != HEAD {
                entries.push((list.op[entry], list.is_call[entry]));
                entry = list.next[entry];
            }
            entries
        };
        let full = order(&list);
        let expected =
            [(0, true), (3, true), (1, true), (0, false), (2, true), (1, false), (2, false), (3, false)];
        assert_eq!(full, expected);
        list.lift(list.call_entry[1]);
        list.lift(list.call_entry[0]);
        assert_eq!(order(&list), [(3, true), (2, true), (2, false), (3, false)]);
        list.unlift(list.call_entry[0]);
        list.unlift(list.call_entry[1]);
        assert_eq!(order(&list), full);
    }

    #[test]
    fn calls_and_returns_at_one_instant_are_concurrent() {
        let ops =
            [op(set(1), Some(KvOutput::Ok), 0, 10), op(KvCommand::Get, Some(KvOutput::Value(None)), 10, 20)];
        assert_eq!(check(&KvModel, &ops, Duration::MAX), Verdict::Linearizable);
    }

    #[test]
    fn no_budget_gives_unknown() {
        let verdict = check(&KvModel, &pathological(20), Duration::ZERO);
        assert_eq!(verdict, Verdict::Unknown);
        assert_eq!(verdict.to_string(), "unknown: the budget ran out before the search ended");
    }

    #[test]
    fn a_small_budget_stops_an_exponential_search() {
        // Small enough to finish: the search really is Illegal.
        assert!(check(&KvModel, &pathological(6), Duration::MAX).is_illegal());
        let start = Instant::now();
        let verdict = check(&KvModel, &pathological(40), Duration::from_millis(100));
        assert_eq!(verdict, Verdict::Unknown);
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    }

    #[test]
    fn a_long_sequential_history_does_not_recurse() {
        let n = 10_000;
        let mut ops: Vec<Op> = Vec::with_capacity(n);
        for k in 0..n / 2 {
            let t = 4 * k as u64;
            ops.push(op(set(k), Some(KvOutput::Ok), t, t + 1));
            ops.push(op(KvCommand::Get, read(k), t + 2, t + 3));
        }
        let start = Instant::now();
        assert_eq!(check(&KvModel, &ops, Duration::MAX), Verdict::Linearizable);
        eprintln!("{n} sequential operations on one key: {:?}", start.elapsed());
        // The last read stale: every operation before it is in the prefix.
        ops[n - 1].output = read(n / 2 - 2);
        let Verdict::Illegal(counterexample) = check(&KvModel, &ops, Duration::MAX) else {
            panic!("a stale read passed");
        };
        assert_eq!(counterexample.prefix, (0..n - 1).collect::<Vec<_>>());
        assert_eq!(counterexample.stuck, n - 1);
    }

    #[test]
    fn the_verdict_round_trips_through_json() {
        let ops = [op(set(1), Some(KvOutput::Ok), 0, 10), op(KvCommand::Get, read(2), 20, 30)];
        let verdict = check(&KvModel, &ops, Duration::MAX);
        assert!(verdict.is_illegal());
        let json = serde_json::to_string(&verdict).unwrap();
        assert_eq!(serde_json::from_str::<Verdict>(&json).unwrap(), verdict);
    }
}
