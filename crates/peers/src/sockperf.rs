//! sockperf's full log (`sockperf ping-pong --full-log FILE`, version 3.7), read into the
//! experiment's samples: the one parser here of a file another program wrote, so it takes any
//! text and either returns samples or says which line it refused, never panics (the fuzz target
//! `sockperf_log` holds it to that).
//!
//! # The file
//!
//! sockperf writes its summary (lines starting `sockperf: `, some with colour escapes), then,
//! for each server, a table between two rules of dashes:
//!
//! ```text
//! sockperf: [Valid Duration] RunTime=0.540 sec; SentMessages=109; ReceivedMessages=109
//! ...
//! ------------------------------
//! packet, txTime(sec), rxTime(sec), latency(usec)
//! 0, 2.405809000, 2.405919759, 55.380
//! ...
//! ------------------------------
//! ```
//!
//! One row per reply received in the valid window (sockperf leaves out its first 400 ms and
//! last 50 ms, and lost, duplicated and out-of-order replies): `packet` counts rows from 0,
//! `txTime` is when the request went and `rxTime` when its reply came, seconds with nine
//! decimals on sockperf's own clock (its TSC, not `CLOCK_REALTIME`), and the last column half
//! the round trip (`latency`) or all of it (`rtt`, with `--full-rtt`), microseconds. The summary's
//! `[Valid Duration]` line counts the requests sent in that window and the replies kept, which
//! are the rows.
//!
//! # The samples
//!
//! A ping-pong measures round trips; the one-way latency is taken as half of one, so each
//! sample's `received_ns` is its `sent_ns` plus half of `rxTime - txTime` (computed from the
//! two stamps in integer nanoseconds; the printed last column is only checked against it), and
//! `kernel_ns` is `None`. sockperf's clock has no known offset to `CLOCK_REALTIME`, so `sent_ns`
//! is placed on it by the caller's `origin_ns` (the realtime when the client started): the first
//! row's request at `origin_ns`, the rest at their distance from it. Spacing and latency are
//! sockperf's exact figures; the absolute time is good to the client's start-up. `seq` is the
//! row number (dropped replies have no row, so the numbers are dense), and `sent` is the valid
//! window's requests, so lost replies are `sent` minus the rows, as for the other peers.

use crate::samples::{PeerRun, Sample};

/// The rule of dashes around the table.
const RULE: &str = "------------------------------";
/// The table's heading up to the last column's name.
const HEADING: &str = "packet, txTime(sec), rxTime(sec), ";
/// The summary line with the valid window's counts.
const VALID: &str = "[Valid Duration]";
/// How far the printed last column may be from the stamps' difference: it is rounded to
/// 1 ns and computed in floating point from the same stamps, so a microsecond apart is a
/// misread column, not rounding.
const COLUMN_TOLERANCE_NS: u64 = 1_000;

/// Why a full log was refused: the line (1-based) where it went wrong, when one did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sockperf full log{}: {what}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
pub struct LogError {
    /// The line, from 1; `None` for what is missing from the whole file.
    pub line: Option<usize>,
    /// What was wrong.
    pub what: LogProblem,
}

/// What was wrong with a full log, or with one of its lines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogProblem {
    /// A second `[Valid Duration]` line: the log of more than one server.
    #[error("a second [Valid Duration] line (one server only)")]
    SecondValidLine,
    /// A second table: the log of more than one server.
    #[error("a second table (one server only)")]
    SecondTable,
    /// The table's last column is neither `latency(usec)` nor `rtt(usec)`.
    #[error("the last column is `{0}`, not latency(usec) or rtt(usec)")]
    UnknownColumn(String),
    /// A row's request was sent no later than the row before's.
    #[error("the request was sent no later than the row before's")]
    RequestOutOfOrder,
    /// A row's reply arrived before the row before's (sockperf leaves those out).
    #[error("the reply arrived before the row before's")]
    ReplyOutOfOrder,
    /// The file ends inside the table.
    #[error("the table has no closing rule (the file was cut short)")]
    Unclosed,
    /// There is no `[Valid Duration]` line; `no_observations` when sockperf said it found no
    /// valid observations (a run too short for its warm-up).
    #[error(
        "no [Valid Duration] line{}",
        if *.no_observations {
            ": sockperf found no valid observations (its run was too short for its warm-up)"
        } else {
            ""
        }
    )]
    NoValidLine {
        /// sockperf said it found no valid observations.
        no_observations: bool,
    },
    /// The summary's count of replies is not the table's count of rows.
    #[error("the summary counts {received} replies but the table has {rows} rows")]
    CountMismatch {
        /// Replies, as the summary counts them.
        received: u64,
        /// Rows in the table.
        rows: usize,
    },
    /// The table has no rows.
    #[error("the table has no rows")]
    NoRows,
    /// The summary counts more replies than requests.
    #[error("ReceivedMessages={received} is more than SentMessages={sent}")]
    MoreReceivedThanSent {
        /// `SentMessages`.
        sent: u64,
        /// `ReceivedMessages`.
        received: u64,
    },
    /// The `[Valid Duration]` line lacks one of its counts.
    #[error("[Valid Duration] without SentMessages= and ReceivedMessages=")]
    NoCounts,
    /// A count is not a run of digits.
    #[error("{name}=`{text}` is not a count")]
    NotACount {
        /// The count's name.
        name: &'static str,
        /// What stood there.
        text: String,
    },
    /// A count does not fit 64 bits.
    #[error("{name}={text} is too large")]
    CountTooLarge {
        /// The count's name.
        name: &'static str,
        /// What stood there.
        text: String,
    },
    /// A row without its four fields.
    #[error("a row has 4 comma-separated fields, this has {fields}: `{line}`")]
    FieldCount {
        /// Fields found.
        fields: usize,
        /// The row.
        line: String,
    },
    /// A row's number is not the next (rows count from 0 without gaps).
    #[error("row {found} where row {expected} was due (rows count from 0 without gaps)")]
    RowOutOfSequence {
        /// The row's number.
        found: u64,
        /// The number due.
        expected: u64,
    },
    /// A row's stamp or last column is not a number this reader takes.
    #[error("{column}: {error}")]
    BadNumber {
        /// `txTime`, `rxTime` or `the last column`.
        column: &'static str,
        /// What is wrong with it.
        error: DecimalError,
    },
    /// A row's reply came before its request.
    #[error("the reply ({rx}) came before the request ({tx})")]
    ReplyBeforeRequest {
        /// The request's stamp, as printed.
        tx: String,
        /// The reply's stamp, as printed.
        rx: String,
    },
    /// A row's last column disagrees with its stamps by more than rounding.
    #[error("the last column says {column} us where the stamps give {:.3}", *.stamps_ns as f64 / 1e3)]
    ColumnMismatch {
        /// The last column, as printed (us).
        column: String,
        /// What the stamps give, ns.
        stamps_ns: u64,
    },
}

/// Why a decimal number was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    /// Not digits with at most one point between them.
    #[error("`{0}` is not a non-negative decimal number")]
    NotDecimal(String),
    /// More decimals than the column has.
    #[error("`{text}` has more than {places} decimals")]
    TooManyDecimals {
        /// The number as printed.
        text: String,
        /// The most decimals taken.
        places: u32,
    },
    /// Past 64 bits in the column's unit.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

fn at(line: usize, what: LogProblem) -> LogError {
    LogError { line: Some(line), what }
}

fn whole(what: LogProblem) -> LogError {
    LogError { line: None, what }
}

/// Where the reader is in the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The summary, before the table.
    Summary,
    /// Inside the table; the last column is the whole round trip (`rtt`) or half.
    Table { full_rtt: bool },
    /// After the table's closing rule.
    After,
}

/// One table row: the request's and reply's stamps, ns on sockperf's clock.
struct Row {
    tx_ns: u64,
    rx_ns: u64,
}

/// The samples of a full log, their requests placed from `origin_ns` on (see the module
/// documentation), and the valid window's requests sent.
pub fn parse(text: &str, origin_ns: u64) -> Result<PeerRun, LogError> {
    let mut part = Part::Summary;
    let mut counts: Option<(usize, u64, u64)> = None;
    let mut rows: Vec<Row> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim_end_matches('\r');
        match part {
            Part::Summary | Part::After => {
                if let Some(at_valid) = line.find(VALID) {
                    if counts.is_some() {
                        return Err(at(n, LogProblem::SecondValidLine));
                    }
                    let (sent, received) =
                        valid_counts(&line[at_valid + VALID.len()..]).map_err(|w| at(n, w))?;
                    counts = Some((n, sent, received));
                } else if let Some(last) = line.strip_prefix(HEADING) {
                    if part == Part::After {
                        return Err(at(n, LogProblem::SecondTable));
                    }
                    part = match last.trim() {
                        "latency(usec)" => Part::Table { full_rtt: false },
                        "rtt(usec)" => Part::Table { full_rtt: true },
                        other => return Err(at(n, LogProblem::UnknownColumn(other.to_string()))),
                    };
                }
            }
            Part::Table { .. } if line == RULE => part = Part::After,
            Part::Table { full_rtt } => {
                let row = table_row(line, rows.len() as u64, full_rtt).map_err(|w| at(n, w))?;
                if let Some(previous) = rows.last() {
                    if row.tx_ns <= previous.tx_ns {
                        return Err(at(n, LogProblem::RequestOutOfOrder));
                    }
                    if row.rx_ns < previous.rx_ns {
                        // sockperf leaves out-of-order replies out of the table.
                        return Err(at(n, LogProblem::ReplyOutOfOrder));
                    }
                }
                rows.push(row);
            }
        }
    }
    if matches!(part, Part::Table { .. }) {
        return Err(whole(LogProblem::Unclosed));
    }
    let Some((line, sent, received)) = counts else {
        let no_observations = text.contains("No valid observations");
        return Err(whole(LogProblem::NoValidLine { no_observations }));
    };
    if rows.len() as u64 != received {
        return Err(at(line, LogProblem::CountMismatch { received, rows: rows.len() }));
    }
    let Some(first_tx_ns) = rows.first().map(|r| r.tx_ns) else {
        return Err(whole(LogProblem::NoRows));
    };
    let samples = rows
        .iter()
        .enumerate()
        .map(|(seq, row)| {
            let sent_ns = origin_ns.saturating_add(row.tx_ns - first_tx_ns);
            Sample {
                seq: seq as u64,
                sent_ns,
                received_ns: sent_ns.saturating_add((row.rx_ns - row.tx_ns) / 2),
                kernel_ns: None,
            }
        })
        .collect();
    Ok(PeerRun { samples, sent })
}

/// `RunTime=0.540 sec; SentMessages=109; ReceivedMessages=109` after `[Valid Duration]`:
/// (sent, received), received no more than sent.
fn valid_counts(rest: &str) -> Result<(u64, u64), LogProblem> {
    let mut sent = None;
    let mut received = None;
    for field in rest.split(';') {
        let field = field.trim();
        if let Some(v) = field.strip_prefix("SentMessages=") {
            sent = Some(count(v, "SentMessages")?);
        } else if let Some(v) = field.strip_prefix("ReceivedMessages=") {
            received = Some(count(v, "ReceivedMessages")?);
        }
    }
    match (sent, received) {
        (Some(s), Some(r)) if r <= s => Ok((s, r)),
        (Some(sent), Some(received)) => Err(LogProblem::MoreReceivedThanSent { sent, received }),
        _ => Err(LogProblem::NoCounts),
    }
}

fn count(text: &str, name: &'static str) -> Result<u64, LogProblem> {
    let digits = text.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(LogProblem::NotACount { name, text: digits.to_string() });
    }
    digits.parse().map_err(|_| LogProblem::CountTooLarge { name, text: digits.to_string() })
}

/// `0, 2.405809000, 2.405919759, 55.380`: row `expected` of the table.
fn table_row(line: &str, expected: u64, full_rtt: bool) -> Result<Row, LogProblem> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let [packet, tx, rx, column] = fields.as_slice() else {
        return Err(LogProblem::FieldCount { fields: fields.len(), line: line.to_string() });
    };
    let packet = count(packet, "packet")?;
    if packet != expected {
        return Err(LogProblem::RowOutOfSequence { found: packet, expected });
    }
    let number = |text: &str, places: u32, column: &'static str| {
        decimal(text, places).map_err(|error| LogProblem::BadNumber { column, error })
    };
    let tx_ns = number(tx, 9, "txTime")?;
    let rx_ns = number(rx, 9, "rxTime")?;
    // In nanoseconds: three decimals of microseconds.
    let column_ns = number(column, 3, "the last column")?;
    if rx_ns < tx_ns {
        return Err(LogProblem::ReplyBeforeRequest { tx: tx.to_string(), rx: rx.to_string() });
    }
    let round_trip = rx_ns - tx_ns;
    let expected_column = if full_rtt { round_trip } else { round_trip / 2 };
    if column_ns.abs_diff(expected_column) > COLUMN_TOLERANCE_NS {
        return Err(LogProblem::ColumnMismatch { column: column.to_string(), stamps_ns: expected_column });
    }
    Ok(Row { tx_ns, rx_ns })
}

/// A non-negative decimal with at most `places` decimals, in units of 10^-`places`.
fn decimal(text: &str, places: u32) -> Result<u64, DecimalError> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || (text.contains('.') && fraction.is_empty())
    {
        return Err(DecimalError::NotDecimal(text.to_string()));
    }
    if fraction.len() > places as usize {
        return Err(DecimalError::TooManyDecimals { text: text.to_string(), places });
    }
    let too_large = || DecimalError::TooLarge(text.to_string());
    let whole: u64 = whole.parse().map_err(|_| too_large())?;
    let fraction: u64 = if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| too_large())? };
    let fraction = fraction * 10u64.pow(places - fraction_len(text));
    whole.checked_mul(10u64.pow(places)).and_then(|w| w.checked_add(fraction)).ok_or_else(too_large)
}

fn fraction_len(text: &str) -> u32 {
    text.split_once('.').map_or(0, |(_, f)| f.len() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full log sockperf 3.7 wrote here: `sockperf ping-pong -m 64 --mps 200 -t 1 --full-log`
    /// against a `sockperf server` on loopback in a network namespace.
    const CAPTURED: &str = include_str!("testdata/sockperf-full-log.csv");

    #[test]
    fn a_captured_log_gives_its_rows_as_samples() {
        let run = parse(CAPTURED, 1_000_000_000).unwrap();
        assert_eq!((run.sent, run.samples.len()), (109, 109));
        // Row 0: 2.405809000 -> 2.405919759, half the round trip 55.3795 us.
        assert_eq!(
            run.samples[0],
            Sample { seq: 0, sent_ns: 1_000_000_000, received_ns: 1_000_055_379, kernel_ns: None }
        );
        // Row 1 went 5,000,001 ns after row 0 (200 a second); half its round trip is 55.3975 us.
        assert_eq!(run.samples[1].sent_ns, 1_005_000_001);
        assert_eq!(run.samples[1].received_ns - run.samples[1].sent_ns, 55_397);
        // The last row: 108, 2.945808997, 2.945902326, 46.664.
        let last = run.samples[108];
        assert_eq!((last.seq, last.sent_ns, last.received_ns - last.sent_ns), (108, 1_539_999_997, 46_664));
        assert!(run.samples.windows(2).all(|w| w[0].seq + 1 == w[1].seq && w[0].sent_ns < w[1].sent_ns));
    }

    /// The captured log with `change` made to its text.
    fn changed(from: &str, to: &str) -> String {
        assert!(CAPTURED.contains(from), "{from}");
        CAPTURED.replacen(from, to, 1)
    }

    fn refusal(text: &str) -> String {
        parse(text, 0).unwrap_err().to_string()
    }

    #[test]
    fn a_lost_reply_is_sent_less_rows_and_the_full_rtt_table_reads_alike() {
        // sockperf counts the window's requests; a lost reply has no row.
        let lossy =
            changed("SentMessages=109; ReceivedMessages=109", "SentMessages=112; ReceivedMessages=109");
        let run = parse(&lossy, 0).unwrap();
        assert_eq!((run.sent, run.samples.len()), (112, 109));
        let rtt = changed("latency(usec)", "rtt(usec)").replacen("55.380", "110.759", 1);
        let rtt = rtt.replace(", 55.397", ", 110.795");
        assert!(refusal(&rtt).contains("line 24: the last column says 48.124"), "the rest are halves");
        let one_row = format!(
            "sockperf: [Valid Duration] RunTime=0.000 sec; SentMessages=1; ReceivedMessages=1\n{RULE}\n{HEADING}rtt(usec)\n0, 1.000000000, 1.000010000, 10.000\n{RULE}\n"
        );
        let run = parse(&one_row, 7).unwrap();
        assert_eq!(run.samples, [Sample { seq: 0, sent_ns: 7, received_ns: 5_007, kernel_ns: None }]);
    }

    #[test]
    fn refusals_name_the_line() {
        assert!(refusal(&changed("\n2, ", "\n3, ")).contains("line 24: row 3 where row 2 was due"));
        assert!(
            refusal(&changed("0, 2.405809000", "0, 2.40580900x")).contains("line 22: txTime: `2.40580900x`")
        );
        assert!(
            refusal(&changed("0, 2.405809000, 2.405919759", "0, 2.405919759, 2.405809000"))
                .contains("line 22: the reply")
        );
        assert!(refusal(&changed("0, 2.405809000", "0, 2.4058090001")).contains("more than 9 decimals"));
        assert!(refusal(&changed(", 55.380", ", 75.380")).contains("line 22: the last column says 75.380"));
        assert!(
            refusal(&changed(", 55.380", ""))
                .contains("line 22: a row has 4 comma-separated fields, this has 3")
        );
        assert!(
            refusal(&changed("latency(usec)", "jitter(usec)"))
                .contains("line 21: the last column is `jitter(usec)`")
        );
        assert!(
            refusal(&changed("1, 2.410809001, 2.410919796, 55.397", "1, 2.405809000, 2.405919759, 55.380"))
                .contains("line 23: the request was sent no later")
        );
        assert!(
            refusal(&changed("1, 2.410809001, 2.410919796, 55.397", "1, 2.410809001, 2.405919758, 0.000"))
                .contains("line 23")
        );
        assert!(
            refusal(&changed("ReceivedMessages=109\n", "ReceivedMessages=108\n"))
                .contains("line 6: the summary counts 108 replies but the table has 109 rows")
        );
        assert!(
            refusal(&changed("SentMessages=109;", "SentMessages=99;"))
                .contains("line 6: ReceivedMessages=109 is more than")
        );
        assert!(refusal(&changed("SentMessages=109;", "SentMessages=1e9;")).contains("`1e9` is not a count"));
        assert!(
            refusal(&changed("SentMessages=109;", "SentMessages=99999999999999999999999;"))
                .contains("too large")
        );
    }

    #[test]
    fn what_the_whole_file_lacks_is_said_without_a_line() {
        assert_eq!(refusal(""), "sockperf full log: no [Valid Duration] line");
        let cut: String = CAPTURED.lines().take(40).collect::<Vec<_>>().join("\n");
        assert!(refusal(&cut).contains("no closing rule"));
        let no_rows = format!(
            "sockperf: [Valid Duration] RunTime=0.000 sec; SentMessages=0; ReceivedMessages=0\n{RULE}\n{HEADING}latency(usec)\n{RULE}\n"
        );
        assert_eq!(refusal(&no_rows), "sockperf full log: the table has no rows");
        let short = "sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=2; ReceivedMessages=2\nsockperf: No valid observations found. Try tune parameters: --time/--mps/--reply-every\n";
        assert!(refusal(short).contains("no valid observations"));
        let twice = format!("{CAPTURED}{RULE}\n{HEADING}latency(usec)\n{RULE}\n");
        assert!(refusal(&twice).contains("a second table"));
    }

    #[test]
    fn decimals_are_read_exactly_in_integers() {
        assert_eq!(decimal("2.405809000", 9), Ok(2_405_809_000));
        assert_eq!(decimal("2.5", 9), Ok(2_500_000_000));
        assert_eq!(decimal("7", 3), Ok(7_000));
        assert_eq!(decimal("18446744073.709551615", 9), Ok(u64::MAX));
        for bad in ["", ".5", "5.", "-1.0", "1.2.3", "+1", "1e3", " 1", "18446744073.709551616"] {
            assert!(decimal(bad, 9).is_err(), "{bad}");
        }
    }
}
