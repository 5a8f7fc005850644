//! The key-value store's model, one key at a time, and the per-key check of a whole history.
//!
//! Mechanism: [`KvModel`] is one key of a Redis-like store holding string values: its state is
//! the key's value (`None` when the key does not exist) and each command has exactly one
//! possible reply in a given state, so a step computes that reply and compares it with the one
//! the client got. [`check_kv`] splits a history by key (linearizability is local: a history is
//! linearizable if and only if every key's sub-history is) and checks each key with
//! [`super::search`]. The budget is shared: a first pass gives each key an equal share of what
//! is left, a second pass gives the keys that ran out everything that is still left.
//!
//! Contract: the model follows Redis 7 on string values: `INCR` reads the value as a decimal
//! `i64` exactly as Redis does (no sign `+`, no leading zeros or spaces), treats a missing key
//! as 0, and fails with an error (the value unchanged) on a non-integer or on overflow;
//! `APPEND` creates a missing key and replies with the new length; `DEL` replies 1 if the key
//! existed and 0 otherwise. An error reply is legal only where the model fails the command; a
//! client that got any other server error should record the outcome as unknown (or drop the
//! operation when it knows it had no effect). [`check_kv`] copies each key's operations once
//! and then works as [`super::search`] states, per key.
//!
//! Source: the Redis command reference (`INCR`, `APPEND`, `DEL`, `GET`, `SET`) and `string2ll`
//! in Redis's `util.c`; Porcupine's per-key partitioning and Jepsen's `independent` checker.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Model;
use super::history::Operation;
use super::search::{Verdict, check_until};

/// A command on one key.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KvCommand {
    /// `GET key`: replies [`KvOutput::Value`].
    Get,
    /// `SET key value`: replies [`KvOutput::Ok`].
    Set(Vec<u8>),
    /// `INCR key`: replies [`KvOutput::Integer`] with the new value, or [`KvOutput::Error`] when
    /// the value is not an integer or would overflow.
    Incr,
    /// `APPEND key value`: replies [`KvOutput::Integer`] with the new length.
    Append(Vec<u8>),
    /// `DEL key`: replies [`KvOutput::Integer`], 1 if the key existed, else 0.
    Del,
}

/// A reply the store gave.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KvOutput {
    /// A bulk string, or nil (`None`) for a missing key.
    Value(Option<Vec<u8>>),
    /// `+OK`.
    Ok,
    /// An integer reply.
    Integer(i64),
    /// An error reply.
    Error,
}

/// A command and the key it names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KvInput {
    /// The key.
    pub key: Vec<u8>,
    /// The command.
    pub command: KvCommand,
}

/// One operation of a key-value history.
pub type KvOp = Operation<KvInput, KvOutput>;

/// A key's value; `None` when the key does not exist.
pub type KvState = Option<Vec<u8>>;

/// One key of the store, as a sequential specification.
#[derive(Debug, Clone, Copy, Default)]
pub struct KvModel;

impl KvModel {
    /// What `command` does in `state`: the next state and the reply.
    pub fn apply(state: &KvState, command: &KvCommand) -> (KvState, KvOutput) {
        match command {
            KvCommand::Get => (state.clone(), KvOutput::Value(state.clone())),
            KvCommand::Set(value) => (Some(value.clone()), KvOutput::Ok),
            KvCommand::Incr => {
                let current = match state {
                    None => Some(0),
                    Some(value) => parse_integer(value),
                };
                match current.and_then(|current| current.checked_add(1)) {
                    Some(next) => (Some(next.to_string().into_bytes()), KvOutput::Integer(next)),
                    None => (state.clone(), KvOutput::Error),
                }
            }
            KvCommand::Append(suffix) => {
                let mut value = state.clone().unwrap_or_default();
                value.extend_from_slice(suffix);
                // A length beyond i64 cannot be stored; saturate rather than panic.
                let length = i64::try_from(value.len()).unwrap_or(i64::MAX);
                (Some(value), KvOutput::Integer(length))
            }
            KvCommand::Del => (None, KvOutput::Integer(i64::from(state.is_some()))),
        }
    }
}

impl Model for KvModel {
    type State = KvState;
    type Input = KvCommand;
    type Output = KvOutput;

    fn init(&self) -> KvState {
        None
    }

    fn step(&self, state: &KvState, command: &KvCommand, output: Option<&KvOutput>) -> Option<KvState> {
        let (next, reply) = Self::apply(state, command);
        match output {
            Some(output) if *output != reply => None,
            _ => Some(next),
        }
    }

    fn describe_state(&self, state: &KvState) -> String {
        match state {
            Some(value) => format!("{:?}", Text(value)),
            None => "(nil)".to_string(),
        }
    }
}

/// Parses a value as `INCR` does (Redis's `string2ll`): an optional `-`, then a decimal number
/// without leading zeros (or `0` alone), fitting in an `i64`.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    if bytes == b"0" {
        return Some(0);
    }
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        // Accumulate negative numbers downwards so that i64::MIN parses.
        value = if negative { value.checked_sub(digit)? } else { value.checked_add(digit)? };
    }
    Some(value)
}

/// Bytes shown as a quoted, escaped string.
struct Text<'a>(&'a [u8]);

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

impl fmt::Debug for KvCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvCommand::Get => f.write_str("GET"),
            KvCommand::Set(value) => write!(f, "SET {:?}", Text(value)),
            KvCommand::Incr => f.write_str("INCR"),
            KvCommand::Append(value) => write!(f, "APPEND {:?}", Text(value)),
            KvCommand::Del => f.write_str("DEL"),
        }
    }
}

impl fmt::Debug for KvOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvOutput::Value(Some(value)) => write!(f, "{:?}", Text(value)),
            KvOutput::Value(None) => f.write_str("(nil)"),
            KvOutput::Ok => f.write_str("OK"),
            KvOutput::Integer(value) => write!(f, "(integer) {value}"),
            KvOutput::Error => f.write_str("(error)"),
        }
    }
}

/// The verdict on one key's sub-history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyReport {
    /// The key.
    pub key: Vec<u8>,
    /// How many operations named it.
    pub operations: usize,
    /// How many of those had an unknown outcome.
    pub unknown_outcomes: usize,
    /// The verdict; a counterexample's indices are positions in the whole history.
    pub verdict: Verdict,
}

/// The verdicts on every key of a history, and their totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvReport {
    /// One report per key, in key order.
    pub per_key: Vec<KeyReport>,
    /// How many keys (sub-histories) were checked.
    pub keys: usize,
    /// How many operations the history has.
    pub operations: usize,
    /// How many keys are linearizable.
    pub linearizable: usize,
    /// How many keys are not.
    pub illegal: usize,
    /// How many keys ran out of budget.
    pub unknown: usize,
    /// How long the check took.
    pub elapsed: Duration,
}

impl KvReport {
    /// Whether every key is linearizable (so the whole history is).
    pub fn is_linearizable(&self) -> bool {
        self.linearizable == self.keys
    }

    /// The keys found not linearizable.
    pub fn illegal_keys(&self) -> impl Iterator<Item = &KeyReport> {
        self.per_key.iter().filter(|key| key.verdict.is_illegal())
    }
}

impl fmt::Display for KvReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} keys, {} operations: {} linearizable, {} illegal, {} unknown ({} ms)",
            self.keys,
            self.operations,
            self.linearizable,
            self.illegal,
            self.unknown,
            self.elapsed.as_millis()
        )?;
        for key in self.illegal_keys() {
            write!(f, "\nkey {:?}: {}", Text(&key.key), key.verdict)?;
        }
        Ok(())
    }
}

/// One key's sub-history.
struct Partition<'a> {
    key: &'a [u8],
    /// Each operation's position in the whole history.
    ids: Vec<usize>,
    ops: Vec<Operation<KvCommand, KvOutput>>,
}

/// Checks a key-value history key by key within `budget` in all.
pub fn check_kv(history: &[KvOp], budget: Duration) -> KvReport {
    let start = Instant::now();
    let deadline = start.checked_add(budget);

    let mut by_key: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
    for (index, op) in history.iter().enumerate() {
        by_key.entry(&op.input.key).or_default().push(index);
    }
    let partitions: Vec<Partition<'_>> = by_key
        .into_iter()
        .map(|(key, ids)| {
            let ops =
                ids.iter().map(|&index| history[index].map_input(|input| input.command.clone())).collect();
            Partition { key, ids, ops }
        })
        .collect();

    // First pass: each key gets an equal share of the time left.
    let mut verdicts: Vec<Verdict> = Vec::with_capacity(partitions.len());
    for (position, partition) in partitions.iter().enumerate() {
        let keys_left = u32::try_from(partitions.len() - position).unwrap_or(u32::MAX);
        let share = deadline.map(|deadline| {
            let now = Instant::now();
            now + deadline.saturating_duration_since(now) / keys_left
        });
        verdicts.push(check_until(&KvModel, &partition.ops, share, Some(&partition.ids)));
    }
    // Second pass: the keys that ran out get everything still left.
    for (partition, verdict) in partitions.iter().zip(verdicts.iter_mut()) {
        if verdict.is_unknown() && deadline.is_none_or(|deadline| Instant::now() < deadline) {
            *verdict = check_until(&KvModel, &partition.ops, deadline, Some(&partition.ids));
        }
    }

    let per_key: Vec<KeyReport> = partitions
        .iter()
        .zip(verdicts)
        .map(|(partition, verdict)| KeyReport {
            key: partition.key.to_vec(),
            operations: partition.ops.len(),
            unknown_outcomes: partition.ops.iter().filter(|op| op.known_output().is_none()).count(),
            verdict,
        })
        .collect();
    let count = |pick: fn(&Verdict) -> bool| per_key.iter().filter(|key| pick(&key.verdict)).count();
    KvReport {
        keys: per_key.len(),
        operations: history.len(),
        linearizable: count(Verdict::is_linearizable),
        illegal: count(Verdict::is_illegal),
        unknown: count(Verdict::is_unknown),
        elapsed: start.elapsed(),
        per_key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check, read_jsonl, write_jsonl};

    type Op = Operation<KvCommand, KvOutput>;

    const BUDGET: Duration = Duration::from_secs(10);

    /// An operation that returned `output` at `return_ns`.
    fn done(client: u64, command: KvCommand, output: KvOutput, call_ns: u64, return_ns: u64) -> Op {
        Operation { client, input: command, output: Some(output), call_ns, return_ns: Some(return_ns) }
    }

    /// An operation whose outcome the client never learned.
    fn lost(client: u64, command: KvCommand, call_ns: u64) -> Op {
        Operation { client, input: command, output: None, call_ns, return_ns: None }
    }

    fn set(value: &str) -> KvCommand {
        KvCommand::Set(value.as_bytes().to_vec())
    }

    fn value(value: &str) -> KvOutput {
        KvOutput::Value(Some(value.as_bytes().to_vec()))
    }

    fn verdict(ops: &[Op]) -> Verdict {
        check(&KvModel, ops, BUDGET)
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_illegal() {
        let mut ops = vec![
            done(1, set("a"), KvOutput::Ok, 0, 10),
            done(2, set("b"), KvOutput::Ok, 20, 30),
            done(3, KvCommand::Get, value("b"), 40, 50),
        ];
        assert_eq!(verdict(&ops), Verdict::Linearizable);
        ops[2].output = Some(value("a"));
        let Verdict::Illegal(counterexample) = verdict(&ops) else {
            panic!("a stale read passed");
        };
        assert_eq!(counterexample.prefix, vec![0, 1]);
        assert_eq!(counterexample.state, "\"b\"");
        assert_eq!(counterexample.stuck, 2);
        assert_eq!(counterexample.candidates, vec![2]);
        assert_eq!(counterexample.rejected, vec![2]);
        assert!(
            counterexample.detail.contains(
                "op 2 of client 3, called at 40 ns, returned at 50 ns: \
                 GET -> \"a\": rejected in this state (returned first)"
            ),
            "{counterexample}"
        );
    }

    #[test]
    fn overlapping_writes_may_be_read_in_either_order() {
        let writes = [done(1, set("a"), KvOutput::Ok, 0, 10), done(2, set("b"), KvOutput::Ok, 5, 15)];
        // One read after both: either value.
        for last in ["a", "b"] {
            let mut ops = writes.to_vec();
            ops.push(done(3, KvCommand::Get, value(last), 20, 30));
            assert_eq!(verdict(&ops), Verdict::Linearizable, "read {last}");
        }
        // Two reads while both are in flight: either order.
        for (first, second) in [("a", "b"), ("b", "a")] {
            let mut ops = writes.to_vec();
            ops.push(done(3, KvCommand::Get, value(first), 6, 7));
            ops.push(done(3, KvCommand::Get, value(second), 8, 9));
            assert_eq!(verdict(&ops), Verdict::Linearizable, "{first} then {second}");
        }
        // Two reads after both writes must agree.
        let mut ops = writes.to_vec();
        ops.push(done(3, KvCommand::Get, value("a"), 20, 30));
        ops.push(done(3, KvCommand::Get, value("b"), 31, 40));
        assert!(verdict(&ops).is_illegal());
    }

    #[test]
    fn a_read_of_a_value_never_written_is_illegal() {
        let ops = [done(1, set("a"), KvOutput::Ok, 0, 10), done(2, KvCommand::Get, value("z"), 0, 30)];
        assert!(verdict(&ops).is_illegal());
        // A missing key reads as nil, but not once a write has completed.
        let nil = KvOutput::Value(None);
        let ops = [done(2, KvCommand::Get, nil.clone(), 0, 30)];
        assert_eq!(verdict(&ops), Verdict::Linearizable);
        let ops = [done(1, set("a"), KvOutput::Ok, 0, 10), done(2, KvCommand::Get, nil, 20, 30)];
        assert!(verdict(&ops).is_illegal());
    }

    #[test]
    fn an_unknown_outcome_write_may_or_may_not_have_happened() {
        let before = [done(1, set("a"), KvOutput::Ok, 0, 10), lost(2, set("b"), 15)];
        let with_reads = |reads: &[&str]| {
            let mut ops = before.to_vec();
            for (n, read) in reads.iter().enumerate() {
                let call_ns = 100 + 10 * n as u64;
                ops.push(done(3, KvCommand::Get, value(read), call_ns, call_ns + 5));
            }
            verdict(&ops)
        };
        assert_eq!(with_reads(&["b"]), Verdict::Linearizable, "read later");
        assert_eq!(with_reads(&["a"]), Verdict::Linearizable, "never read");
        assert_eq!(with_reads(&["a", "b"]), Verdict::Linearizable, "read late");
        assert!(with_reads(&["b", "a"]).is_illegal(), "undone");
        // A return without an output is unknown too.
        let mut ops = before.to_vec();
        ops[1].return_ns = Some(20);
        ops.push(done(3, KvCommand::Get, value("a"), 100, 105));
        assert_eq!(verdict(&ops), Verdict::Linearizable);
        // Unknown outcomes alone are trivially linearizable.
        assert_eq!(verdict(&[lost(1, KvCommand::Incr, 0)]), Verdict::Linearizable);
    }

    #[test]
    fn an_incr_applied_twice_is_illegal() {
        let ops = |read: &str| {
            [
                done(1, set("0"), KvOutput::Ok, 0, 10),
                done(2, KvCommand::Incr, KvOutput::Integer(1), 20, 30),
                done(3, KvCommand::Get, value(read), 40, 50),
            ]
        };
        assert_eq!(verdict(&ops("1")), Verdict::Linearizable);
        assert!(verdict(&ops("2")).is_illegal());
        // Unless a second INCR may have happened.
        let mut twice = ops("2").to_vec();
        twice.push(lost(4, KvCommand::Incr, 5));
        assert_eq!(verdict(&twice), Verdict::Linearizable);
    }

    #[test]
    fn unknown_outcomes_can_all_have_happened() {
        // Both lost INCRs must have happened, one right after the other.
        let ops = |read: &str| {
            [
                done(1, set("0"), KvOutput::Ok, 0, 1),
                lost(2, KvCommand::Incr, 2),
                lost(3, KvCommand::Incr, 3),
                done(4, KvCommand::Get, value(read), 10, 11),
            ]
        };
        for read in ["0", "1", "2"] {
            assert_eq!(verdict(&ops(read)), Verdict::Linearizable, "read {read}");
        }
        assert!(verdict(&ops("3")).is_illegal());
        // A lost write read, then overwritten by another lost write that is read.
        let ops = [
            done(1, set("a"), KvOutput::Ok, 0, 1),
            lost(2, set("b"), 2),
            lost(3, set("c"), 3),
            done(4, KvCommand::Get, value("b"), 10, 11),
            done(4, KvCommand::Get, value("c"), 12, 13),
        ];
        assert_eq!(verdict(&ops), Verdict::Linearizable);
        let mut ops = ops.to_vec();
        ops.push(done(4, KvCommand::Get, value("b"), 14, 15));
        assert!(verdict(&ops).is_illegal());
    }

    #[test]
    fn incr_fails_on_values_that_are_not_integers() {
        let history = |output: KvOutput| {
            [
                done(1, set("abc"), KvOutput::Ok, 0, 10),
                done(2, KvCommand::Incr, output, 20, 30),
                done(3, KvCommand::Get, value("abc"), 40, 50),
            ]
        };
        assert_eq!(verdict(&history(KvOutput::Error)), Verdict::Linearizable);
        assert!(verdict(&history(KvOutput::Integer(1))).is_illegal());
        // A missing key counts as 0; an error there is wrong.
        assert_eq!(verdict(&[done(1, KvCommand::Incr, KvOutput::Integer(1), 0, 1)]), Verdict::Linearizable);
        assert!(verdict(&[done(1, KvCommand::Incr, KvOutput::Error, 0, 1)]).is_illegal());
    }

    #[test]
    fn append_replies_the_length_and_del_whether_the_key_existed() {
        let append = |suffix: &str| KvCommand::Append(suffix.as_bytes().to_vec());
        let ops = [
            done(1, append("ab"), KvOutput::Integer(2), 0, 1),
            done(1, append("c"), KvOutput::Integer(3), 2, 3),
            done(1, KvCommand::Get, value("abc"), 4, 5),
            done(1, KvCommand::Del, KvOutput::Integer(1), 6, 7),
            done(1, KvCommand::Del, KvOutput::Integer(0), 8, 9),
            done(1, KvCommand::Get, KvOutput::Value(None), 10, 11),
        ];
        assert_eq!(verdict(&ops), Verdict::Linearizable);
        let mut wrong = ops.to_vec();
        wrong[4].output = Some(KvOutput::Integer(1));
        assert!(verdict(&wrong).is_illegal());
        // A reply of the wrong kind is never legal.
        let mut wrong = ops.to_vec();
        wrong[0].output = Some(KvOutput::Ok);
        assert!(verdict(&wrong).is_illegal());
    }

    #[test]
    fn integers_parse_as_redis_parses_them() {
        for (text, expected) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-12", Some(-12)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("", None),
            ("-", None),
            ("-0", None),
            ("01", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("1.5", None),
        ] {
            assert_eq!(parse_integer(text.as_bytes()), expected, "{text:?}");
        }
        let (state, reply) = KvModel::apply(&Some(b"9223372036854775807".to_vec()), &KvCommand::Incr);
        assert_eq!(reply, KvOutput::Error, "overflow");
        assert_eq!(state, Some(b"9223372036854775807".to_vec()));
    }

    #[test]
    fn a_return_before_its_call_does_not_panic() {
        let ops = [done(1, set("a"), KvOutput::Ok, 50, 10), done(2, KvCommand::Get, value("a"), 60, 70)];
        assert_eq!(verdict(&ops), Verdict::Linearizable);
    }

    fn on_key(key: &str, op: Op) -> KvOp {
        Operation {
            client: op.client,
            input: KvInput { key: key.as_bytes().to_vec(), command: op.input },
            output: op.output,
            call_ns: op.call_ns,
            return_ns: op.return_ns,
        }
    }

    fn two_keys() -> Vec<KvOp> {
        vec![
            on_key("x", done(1, set("a"), KvOutput::Ok, 0, 10)),
            on_key("y", done(2, set("a"), KvOutput::Ok, 0, 10)),
            on_key("x", done(1, set("b"), KvOutput::Ok, 20, 30)),
            on_key("y", done(2, KvCommand::Get, value("a"), 20, 30)),
            // Stale on x: "b" overwrote "a" before this call.
            on_key("x", done(3, KvCommand::Get, value("a"), 40, 50)),
            on_key("y", lost(4, KvCommand::Del, 40)),
        ]
    }

    #[test]
    fn check_kv_checks_each_key_and_counts() {
        let history = two_keys();
        let report = check_kv(&history, BUDGET);
        assert_eq!(report.keys, 2);
        assert_eq!(report.operations, 6);
        assert_eq!((report.linearizable, report.illegal, report.unknown), (1, 1, 0));
        assert!(!report.is_linearizable());
        let x = &report.per_key[0];
        assert_eq!((x.key.as_slice(), x.operations, x.unknown_outcomes), (&b"x"[..], 3, 0));
        let y = &report.per_key[1];
        assert_eq!((y.key.as_slice(), y.operations, y.unknown_outcomes), (&b"y"[..], 3, 1));
        assert_eq!(y.verdict, Verdict::Linearizable);
        // Indices are positions in the whole history.
        let Verdict::Illegal(counterexample) = &x.verdict else {
            panic!("key x passed: {report}");
        };
        assert_eq!(counterexample.prefix, vec![0, 2]);
        assert_eq!(counterexample.stuck, 4);
        let text = report.to_string();
        assert!(text.starts_with("2 keys, 6 operations: 1 linearizable, 1 illegal, 0 unknown"));
        assert!(text.contains("key \"x\": illegal: "), "{text}");
        assert!(text.contains("op 4 of client 3"), "{text}");
    }

    #[test]
    fn check_kv_with_no_budget_knows_nothing() {
        let report = check_kv(&two_keys(), Duration::ZERO);
        assert_eq!((report.linearizable, report.illegal, report.unknown), (0, 0, 2));
        assert!(!report.is_linearizable());
        let report = check_kv(&[], Duration::ZERO);
        assert_eq!((report.keys, report.operations), (0, 0));
        assert!(report.is_linearizable());
    }

    #[test]
    fn one_hopeless_key_does_not_starve_the_others() {
        // Key "hard": 40 overlapping writes, then a read of a value none wrote; proving that
        // illegal takes about 2^40 steps. The easy keys come after it in key order.
        let mut history: Vec<KvOp> =
            (0..40).map(|n| on_key("hard", done(n, set(&n.to_string()), KvOutput::Ok, n, 1000))).collect();
        history.push(on_key("hard", done(40, KvCommand::Get, value("none"), 2000, 2001)));
        for key in ["x1", "x2", "x3"] {
            history.push(on_key(key, done(50, set("a"), KvOutput::Ok, 0, 10)));
            history.push(on_key(key, done(51, KvCommand::Get, value("a"), 20, 30)));
        }
        let start = Instant::now();
        let report = check_kv(&history, Duration::from_millis(300));
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        assert_eq!((report.linearizable, report.illegal, report.unknown), (3, 0, 1), "{report}");
        assert!(report.per_key[0].verdict.is_unknown());
    }

    #[test]
    fn a_saved_history_checks_the_same() {
        let history = two_keys();
        let mut bytes = Vec::new();
        write_jsonl(&history, &mut bytes).unwrap();
        let back: Vec<KvOp> = read_jsonl(&bytes[..]).unwrap();
        assert_eq!(back, history);
        let (saved, again) = (check_kv(&history, BUDGET), check_kv(&back, BUDGET));
        assert_eq!(saved.per_key, again.per_key);
        // The report itself round-trips too.
        let json = serde_json::to_string(&saved).unwrap();
        let report: KvReport = serde_json::from_str(&json).unwrap();
        assert_eq!(report, saved);
    }
}
