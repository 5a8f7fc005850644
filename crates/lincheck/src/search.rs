//! The search: is there a total order of a history's operations that respects real time and
//! that the model accepts?
//!
//! Mechanism: Wing and Gong's algorithm with Lowe's memoization. Every known-outcome operation
//! becomes a call entry and a return entry in a doubly linked list sorted by time (calls before
//! returns at the same instant). The search walks the list from its head: at a call entry it
//! tries to linearize that operation next (the model must accept it from the current state, and
//! the configuration (set of linearized operations, new state) must be new to the cache); if so
//! it lifts both entries out of the list, pushes a frame and starts again from the head.
//! Reaching a return entry means the operation it belongs to had to be linearized already, so
//! no later call can come next. The backtracking stack is a `Vec`, not the call stack, so
//! histories of any length cannot overflow it.
//!
//! Unknown-outcome operations return at +infinity and are optional: the search succeeds as soon
//! as every known-outcome operation is linearized. Their calls sit in a second list, tried only
//! after the known-outcome candidates (those called before the first return), and two rules keep
//! them from multiplying the work by two each: the cache keeps, per (known-outcome set, state),
//! the minimal sets of unknown-outcome operations seen, and skips a configuration when one with
//! a subset of its unknown-outcome operations was reached (fewer optional operations used can
//! only do more); and an unknown-outcome operation is not tried right after another one that it
//! cancels (a write over a write), since it alone reaches the same state with one fewer used.
//! Once the unknown-outcome candidates are exhausted too, the search backtracks: it pops the
//! last frame, relinks its entries and tries the next candidate after it.
//!
//! Contract: [`check`] returns [`Verdict::Unknown`] when its budget runs out (the clock is read
//! every [`STEPS_PER_CLOCK_READ`] steps, so the overrun is that many steps) and never guesses.
//! Work: each step costs one model step (two for an unknown-outcome operation after another),
//! and a cache probe of `O(n/64)` words plus the state's hash and, with `k` unknown outcomes,
//! `O(k/64)` words per unknown-outcome set kept for that configuration. The number of steps is
//! at most about `2n` times the number of configurations reached, which is exponential in the
//! worst case (all operations concurrent: `2^n` sets) and small when few operations overlap;
//! unknown-outcome writes that are overwritten cost little, unknown-outcome operations whose
//! effects add up (`INCR`, `APPEND`) still cost up to `2^k`. Memory: the cache holds at most one
//! entry and one unknown-outcome set per step, each entry `8 * ceil(n/64)` bytes plus one state;
//! the stack at most `n` states; the lists `O(n)` words. The search panics only if the model's
//! own `step` or `Hash` does.
//!
//! Source: J. M. Wing and C. Gong, "Testing and verifying concurrent objects" (JPDC 17, 1993);
//! G. Lowe, "Testing for linearizability" (CCPE 29(4), 2017); A. Athalye's Porcupine
//! (`checker.go`), whose list and cache layout this follows. The treatment of unknown outcomes
//! (a separate list, dominance in the cache, cancelled writes) is this module's own; the
//! argument that it loses no linearization: a configuration dominated by a visited one can only
//! succeed if the visited one can, by a path no longer than its own.

use std::fmt;
use std::hash::{BuildHasher, Hash};
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
    /// The longest linearizable prefix the search found (the most known-outcome operations):
    /// operations in linearization order. Unknown-outcome operations appear here only where the
    /// search let them take effect.
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
    let mut list = EventList::new(ops);
    if list.required_count == 0 {
        return Verdict::Linearizable;
    }
    let mut linearized = Linearized::new(&list);
    let mut cache = Cache::new(list.unknown_count.div_ceil(64));
    let mut stack: Vec<Frame<M::State>> = Vec::new();
    let mut state = model.init();
    let mut remaining = list.required_count;
    // The prefix that linearized the most known-outcome operations so far; `stack[..stable]`
    // has not changed since it was recorded, so a better one only copies the frames above.
    let mut best: Vec<usize> = Vec::new();
    let mut best_required = 0;
    let mut best_state = state.clone();
    let mut stable = 0;

    // The scan position: in the main list first, then in the unknown list up to `bound`, the
    // position of the main list's first return.
    let mut entry = list.next[MAIN];
    let mut bound = 0;
    let mut steps: u64 = 0;
    loop {
        if steps.is_multiple_of(STEPS_PER_CLOCK_READ)
            && deadline.is_some_and(|deadline| Instant::now() >= deadline)
        {
            return Verdict::Unknown;
        }
        steps += 1;

        if list.in_unknown_list[entry] {
            if entry == UNKNOWN || list.position[entry] > bound {
                // Nothing more can come next here: backtrack.
                let Some(frame) = stack.pop() else {
                    let counterexample = counterexample(model, ops, &outputs, &list, &best, &best_state, ids);
                    return Verdict::Illegal(counterexample);
                };
                let op = list.op[frame.entry];
                linearized.clear(&list, op);
                if list.required[op] {
                    remaining += 1;
                }
                state = frame.state;
                list.unlift(frame.entry);
                stable = stable.min(stack.len());
                entry = list.next[frame.entry];
                bound = frame.bound;
                continue;
            }
        } else if entry == MAIN || !list.is_call[entry] {
            // The operation of this return had to be linearized already, so no known-outcome
            // operation called later can come next; unknown-outcome ones called before it can.
            bound = if entry == MAIN { usize::MAX } else { list.position[entry] };
            entry = list.next[UNKNOWN];
            continue;
        }

        let op = list.op[entry];
        if let Some(next_state) = model.step(&state, &ops[op].input, outputs[op]) {
            // An unknown-outcome operation right after another that it cancels (a write over a
            // write) is no better than it alone, which the search tries from the state below.
            let redundant = !list.required[op]
                && stack.last().is_some_and(|top| {
                    !list.required[list.op[top.entry]]
                        && model.step(&top.state, &ops[op].input, None).as_ref() == Some(&next_state)
                });
            if !redundant {
                linearized.set(&list, op);
                if cache.visit(&linearized, &next_state) {
                    let previous = std::mem::replace(&mut state, next_state);
                    stack.push(Frame { entry, state: previous, bound });
                    list.lift(entry);
                    if list.required[op] {
                        remaining -= 1;
                        if remaining == 0 {
                            return Verdict::Linearizable;
                        }
                        let done = list.required_count - remaining;
                        if done > best_required {
                            best_required = done;
                            best.truncate(stable);
                            best.extend(stack[stable..].iter().map(|frame| list.op[frame.entry]));
                            stable = stack.len();
                            best_state = state.clone();
                        }
                    }
                    entry = list.next[MAIN];
                    continue;
                }
                linearized.clear(&list, op);
            }
        }
        entry = list.next[entry];
    }
}

/// One linearized operation on the backtracking stack: its call entry, the state before it,
/// and the scan's bound in the unknown list when it was linearized.
struct Frame<S> {
    entry: usize,
    state: S,
    bound: usize,
}

/// The main list's head: calls and returns of the known-outcome operations.
const MAIN: usize = 0;
/// The unknown list's head: calls of the unknown-outcome operations.
const UNKNOWN: usize = 1;

/// A history's events in two circular doubly linked lists with head sentinels, stored as
/// parallel arrays: entries `2..` are the events in time order.
struct EventList {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Each entry's rank in time order (calls before returns at one instant).
    position: Vec<usize>,
    /// The operation of each entry (unused for the heads).
    op: Vec<usize>,
    /// Whether each entry is a call (false for the heads).
    is_call: Vec<bool>,
    /// Whether each entry belongs to the unknown list (true for its head).
    in_unknown_list: Vec<bool>,
    /// Each operation's call entry.
    call_entry: Vec<usize>,
    /// Each known-outcome operation's return entry (0 for the others).
    return_entry: Vec<usize>,
    /// Whether each operation's outcome is known.
    required: Vec<bool>,
    /// Each operation's index among the known-outcome or among the unknown-outcome ones.
    slot: Vec<usize>,
    required_count: usize,
    unknown_count: usize,
}

impl EventList {
    fn new<I, O>(ops: &[Operation<I, O>]) -> Self {
        // (time, rank, op): calls (0) before returns (1) at one instant; unknown outcomes have
        // no return.
        let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * ops.len());
        let mut required = Vec::with_capacity(ops.len());
        let mut slot = Vec::with_capacity(ops.len());
        let (mut required_count, mut unknown_count) = (0, 0);
        for (index, op) in ops.iter().enumerate() {
            events.push((op.call_ns, 0, index));
            match op.effective_return_ns() {
                Some(return_ns) => {
                    events.push((return_ns, 1, index));
                    required.push(true);
                    slot.push(required_count);
                    required_count += 1;
                }
                None => {
                    required.push(false);
                    slot.push(unknown_count);
                    unknown_count += 1;
                }
            }
        }
        events.sort_unstable();

        let len = events.len() + 2;
        let mut list = EventList {
            next: vec![0; len],
            prev: vec![0; len],
            position: vec![0; len],
            op: vec![0; len],
            is_call: vec![false; len],
            in_unknown_list: vec![false; len],
            call_entry: vec![0; ops.len()],
            return_entry: vec![0; ops.len()],
            required,
            slot,
            required_count,
            unknown_count,
        };
        list.in_unknown_list[UNKNOWN] = true;
        let mut tails = [MAIN, UNKNOWN];
        for (position, &(_, rank, op)) in events.iter().enumerate() {
            let entry = position + 2;
            list.position[entry] = position;
            list.op[entry] = op;
            if rank == 0 {
                list.is_call[entry] = true;
                list.call_entry[op] = entry;
            } else {
                list.return_entry[op] = entry;
            }
            let in_unknown = !list.required[op];
            list.in_unknown_list[entry] = in_unknown;
            let tail = &mut tails[usize::from(in_unknown)];
            list.prev[entry] = *tail;
            list.next[*tail] = entry;
            *tail = entry;
        }
        for (head, tail) in [MAIN, UNKNOWN].into_iter().zip(tails) {
            list.next[tail] = head;
            list.prev[head] = tail;
        }
        list
    }

    /// Takes an operation's entries (its call, and its return if it has one) out of the lists.
    fn lift(&mut self, call: usize) {
        let op = self.op[call];
        self.unlink(call);
        if self.required[op] {
            self.unlink(self.return_entry[op]);
        }
    }

    /// Puts back what [`EventList::lift`] took out; lifts must be undone in reverse order.
    fn unlift(&mut self, call: usize) {
        let op = self.op[call];
        if self.required[op] {
            self.relink(self.return_entry[op]);
        }
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

/// The set of linearized operations: a bitset of the known-outcome ones and one of the others.
struct Linearized {
    required: Vec<u64>,
    unknown: Vec<u64>,
}

impl Linearized {
    fn new(list: &EventList) -> Self {
        Linearized {
            required: vec![0; list.required_count.div_ceil(64)],
            unknown: vec![0; list.unknown_count.div_ceil(64)],
        }
    }

    fn words(&mut self, list: &EventList, op: usize) -> (&mut [u64], usize) {
        let bits = if list.required[op] { &mut self.required } else { &mut self.unknown };
        (bits, list.slot[op])
    }

    fn set(&mut self, list: &EventList, op: usize) {
        let (bits, index) = self.words(list, op);
        bits[index / 64] |= 1 << (index % 64);
    }

    fn clear(&mut self, list: &EventList, op: usize) {
        let (bits, index) = self.words(list, op);
        bits[index / 64] &= !(1 << (index % 64));
    }
}

/// Lowe's cache of configurations already reached, with dominance: a configuration is kept by
/// its known-outcome set and state, with the antichain of unknown-outcome sets seen with them.
/// A configuration is not worth visiting when one with the same known-outcome set and state
/// and a subset of its unknown-outcome operations was visited: the latter can do everything
/// the former can, since unknown-outcome operations are optional.
struct Cache<S> {
    table: HashTable<CacheEntry<S>>,
    hasher: DefaultHashBuilder,
    /// Words in an unknown-outcome set.
    unknown_words: usize,
}

struct CacheEntry<S> {
    required: Box<[u64]>,
    state: S,
    /// Unknown-outcome sets, `unknown_words` words each, none a subset of another.
    unknown: Vec<u64>,
}

impl<S: Hash + Eq + Clone> Cache<S> {
    fn new(unknown_words: usize) -> Self {
        Cache { table: HashTable::new(), hasher: DefaultHashBuilder::default(), unknown_words }
    }

    /// Records the configuration; false if it (or one that dominates it) was there already.
    fn visit(&mut self, linearized: &Linearized, state: &S) -> bool {
        let required = &linearized.required[..];
        let unknown = &linearized.unknown[..];
        let hash = self.hasher.hash_one((required, state));
        let found = self.table.find_mut(hash, |entry| *entry.required == *required && entry.state == *state);
        if let Some(entry) = found {
            let words = self.unknown_words;
            if words == 0 || entry.unknown.chunks(words).any(|seen| is_subset(seen, unknown)) {
                return false;
            }
            let mut kept = Vec::with_capacity(entry.unknown.len() + words);
            for seen in entry.unknown.chunks(words) {
                if !is_subset(unknown, seen) {
                    kept.extend_from_slice(seen);
                }
            }
            kept.extend_from_slice(unknown);
            entry.unknown = kept;
            return true;
        }
        let entry =
            CacheEntry { required: Box::from(required), state: state.clone(), unknown: unknown.to_vec() };
        let hasher = &self.hasher;
        self.table.insert_unique(hash, entry, |entry| hasher.hash_one((&entry.required[..], &entry.state)));
        true
    }
}

fn is_subset(small: &[u64], large: &[u64]) -> bool {
    small.iter().zip(large).all(|(small, large)| small & !large == 0)
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
        .filter(|&op| !in_prefix[op] && list.required[op])
        .min_by_key(|&op| list.position[list.return_entry[op]])
        .unwrap_or(0);
    let stuck_return = list.position[list.return_entry[stuck]];
    let mut candidates: Vec<usize> = (0..ops.len())
        .filter(|&op| !in_prefix[op] && list.position[list.call_entry[op]] < stuck_return)
        .collect();
    candidates.sort_unstable_by_key(|&op| list.position[list.call_entry[op]]);
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
    use crate::{KvCommand, KvModel, KvOutput};

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
    fn lifting_and_unlifting_restores_the_lists() {
        let nil = || Some(KvOutput::Value(None));
        let ops = [
            op(KvCommand::Get, nil(), 0, 10),
            op(KvCommand::Get, nil(), 5, 20),
            op(KvCommand::Get, nil(), 15, 30),
            // Unknown outcomes: only their calls, in a list of their own.
            op(KvCommand::Get, None, 12, 13),
            op(KvCommand::Get, None, 1, 2),
        ];
        let mut list = EventList::new(&ops);
        let order = |list: &EventList, head: usize| {
            let mut entries = Vec::new();
            let mut entry = list.next[head];
            while entry != head {
                entries.push((list.op[entry], list.is_call[entry], list.position[entry]));
                entry = list.next[entry];
            }
            entries
        };
        let (main, unknown) = (order(&list, MAIN), order(&list, UNKNOWN));
        let expected =
            [(0, true, 0), (1, true, 2), (0, false, 3), (2, true, 5), (1, false, 6), (2, false, 7)];
        assert_eq!(main, expected);
        assert_eq!(unknown, [(4, true, 1), (3, true, 4)]);
        assert_eq!((list.required_count, list.unknown_count), (3, 2));
        list.lift(list.call_entry[1]);
        list.lift(list.call_entry[3]);
        list.lift(list.call_entry[0]);
        assert_eq!(order(&list, MAIN), [(2, true, 5), (2, false, 7)]);
        assert_eq!(order(&list, UNKNOWN), [(4, true, 1)]);
        list.unlift(list.call_entry[0]);
        list.unlift(list.call_entry[3]);
        list.unlift(list.call_entry[1]);
        assert_eq!((order(&list, MAIN), order(&list, UNKNOWN)), (main, unknown));
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
