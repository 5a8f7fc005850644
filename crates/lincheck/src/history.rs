//! Client histories: one [`Operation`] per request a client made, and their JSON-lines form.
//!
//! Mechanism: an operation is its call and return instants on one clock (client-side
//! `CLOCK_MONOTONIC`, taken before the send and after the receive) and what went in and came
//! out. An operation whose return or output is missing has an unknown outcome (a timeout, a
//! crashed client): it is concurrent with everything after its call, and it may or may not have
//! taken effect. Operations known not to have taken effect (Jepsen's `:fail`) are left out of a
//! history altogether.
//!
//! Contract: [`write_jsonl`] writes one operation per line; [`read_jsonl`] reads them back and
//! reports the first line that does not parse (with its number) instead of panicking. Both
//! allocate in proportion to one line, plus the operations read.
//!
//! Source: the operation records of Porcupine (`Operation{ClientId, Input, Call, Output,
//! Return}`) and Jepsen's `:invoke`/`:ok`/`:info` ops.

use std::io::{BufRead, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// One request of one client: what it asked, what it got, and when.
///
/// Times are nanoseconds on one clock shared by all clients of the history. An operation whose
/// `return_ns` or `output` is `None` has an unknown outcome: the checker treats it as returning
/// at +infinity and lets it take effect at any point after its call, or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation<I, O> {
    /// The client that issued the request. The checker does not need it; it names operations
    /// in verdicts. A client whose request had an unknown outcome should continue under a new id.
    pub client: u64,
    /// What the client asked.
    pub input: I,
    /// What it got back; `None` when the outcome is unknown.
    pub output: Option<O>,
    /// When the request was sent.
    pub call_ns: u64,
    /// When the reply arrived; `None` when none did. A return before the call is read as a
    /// return at the call.
    pub return_ns: Option<u64>,
}

impl<I, O> Operation<I, O> {
    /// The output, when the outcome is known: both `output` and `return_ns` are present.
    pub fn known_output(&self) -> Option<&O> {
        match (&self.output, self.return_ns) {
            (Some(output), Some(_)) => Some(output),
            _ => None,
        }
    }

    /// The return instant the checker uses: `None` (+infinity) when the outcome is unknown,
    /// otherwise the return, but never before the call.
    pub fn effective_return_ns(&self) -> Option<u64> {
        match (&self.output, self.return_ns) {
            (Some(_), Some(return_ns)) => Some(return_ns.max(self.call_ns)),
            _ => None,
        }
    }
}

impl<I, O: Clone> Operation<I, O> {
    /// The same operation with its input mapped by `f`, for instance to drop a key once a
    /// history is split by key.
    pub fn map_input<J>(&self, f: impl FnOnce(&I) -> J) -> Operation<J, O> {
        Operation {
            client: self.client,
            input: f(&self.input),
            output: self.output.clone(),
            call_ns: self.call_ns,
            return_ns: self.return_ns,
        }
    }
}

/// Reading or writing a history as JSON lines failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The reader or writer failed.
    #[error("history i/o failed: {0}")]
    Io(#[from] std::io::Error),
    /// A line is not an operation.
    #[error("history line {line} is not an operation: {source}")]
    Parse {
        /// The line's number, from 1.
        line: usize,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// An operation could not be encoded.
    #[error("an operation could not be encoded: {0}")]
    Encode(serde_json::Error),
}

/// Writes `ops` to `writer`, one JSON object per line.
pub fn write_jsonl<I, O, W>(ops: &[Operation<I, O>], mut writer: W) -> Result<(), HistoryError>
where
    I: Serialize,
    O: Serialize,
    W: Write,
{
    for op in ops {
        serde_json::to_writer(&mut writer, op).map_err(HistoryError::Encode)?;
        writer.write_all(b"\n")?;
    }
    writer.flush()?;
    Ok(())
}

/// Reads a history written by [`write_jsonl`]. Blank lines are skipped.
pub fn read_jsonl<I, O, R>(reader: R) -> Result<Vec<Operation<I, O>>, HistoryError>
where
    I: DeserializeOwned,
    O: DeserializeOwned,
    R: BufRead,
{
    let mut ops = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let op =
            serde_json::from_str(&line).map_err(|source| HistoryError::Parse { line: index + 1, source })?;
        ops.push(op);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Op = Operation<String, i64>;

    fn op(client: u64, call_ns: u64, return_ns: Option<u64>, output: Option<i64>) -> Op {
        Operation { client, input: format!("request {client}"), output, call_ns, return_ns }
    }

    #[test]
    fn jsonl_round_trips() {
        let ops = vec![op(1, 10, Some(20), Some(5)), op(2, 15, None, None), op(3, 30, Some(25), Some(-1))];
        let mut bytes = Vec::new();
        write_jsonl(&ops, &mut bytes).unwrap();
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 3);
        let back: Vec<Op> = read_jsonl(&bytes[..]).unwrap();
        assert_eq!(back, ops);
    }

    #[test]
    fn a_bad_line_is_reported_by_number() {
        let text = "{\"client\":1,\"input\":\"a\",\"output\":2,\"call_ns\":1,\"return_ns\":2}\n\n\
                    not json\n";
        let err = read_jsonl::<String, i64, _>(text.as_bytes()).unwrap_err();
        assert!(matches!(err, HistoryError::Parse { line: 3, .. }), "{err}");
        assert!(err.to_string().starts_with("history line 3 "), "{err}");
    }

    #[test]
    fn unknown_outcomes_return_at_infinity() {
        assert_eq!(op(1, 10, None, Some(1)).effective_return_ns(), None);
        assert_eq!(op(1, 10, Some(20), None).effective_return_ns(), None);
        assert_eq!(op(1, 10, Some(20), None).known_output(), None);
        assert_eq!(op(1, 10, Some(20), Some(1)).effective_return_ns(), Some(20));
        // A return before the call is read as a return at the call.
        assert_eq!(op(1, 10, Some(5), Some(1)).effective_return_ns(), Some(10));
    }
}
