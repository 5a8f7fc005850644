//! The Redis protocol (RESP2) as a server speaks it: the request parser and the reply encoder.
//!
//! A client sends requests in one of two forms, and Redis tells them apart by the first byte:
//!
//! - **multibulk** (`*`): `*<count>\r\n` then, per argument, `$<len>\r\n<len bytes>\r\n`. Every
//!   client library sends this form; arguments are binary-safe.
//! - **inline** (anything else): one line of text ending in `\n` (a `\r` before it is dropped),
//!   split into arguments at blanks, with double-quoted strings that take escapes (`\n`, `\x41`,
//!   `\"`...) and single-quoted strings that take only `\'`. This is what a person types into
//!   `telnet`, and what `redis-cli` pipes send for `PING`.
//!
//! # Mechanism
//!
//! [`parse_request`] reads one request from the start of a buffer and fills a vector with its
//! arguments as slices of that buffer (zero-copy); only an inline argument whose quotes or escapes
//! make it differ from the bytes it was written as is copied
//! ([`Cow::Owned`](std::borrow::Cow::Owned)). It keeps no state between calls: a caller with a
//! partial request gets `Ok(None)`, reads more bytes onto the same buffer and calls again, which
//! parses the request again from its start (a bulk's payload is skipped by its length, not read,
//! but a request of many arguments that arrives in many reads costs work quadratic in its argument
//! count; Redis keeps the parse state instead). The caller drops the bytes a request consumed once
//! it is complete. The [`reply`] functions append replies to a `Vec<u8>`.
//!
//! # Contract
//!
//! - **Partial input is never an error that the whole input would not give**: every prefix of a
//!   buffer parses as `Ok(None)` or exactly as the buffer does (same arguments, same length, or the
//!   same error). So the answer does not depend on how the network cut the stream.
//! - **Bounded work**: one call reads each byte of the request at most a fixed number of times
//!   and never past the request; a line (inline request, count or length line) is searched for at
//!   most [`MAX_INLINE_LEN`] + 1 bytes. It allocates only the argument vector's growth and the
//!   copies of rewritten inline arguments, never in proportion to a count the client claims.
//! - **No panics** on any input (a fuzz target, `fuzz/fuzz_targets/resp_request.rs`, holds it to
//!   this, and compares it with the `redis-protocol` crate's decoder).
//! - An error is fatal for the connection, as in Redis: the server replies
//!   `-ERR Protocol error: <error>` ([`reply::protocol_error`]) and closes it, because the stream
//!   can no longer be framed.
//!
//! # Source
//!
//! Redis's `networking.c` (`processMultibulkBuffer`, `processInlineBuffer`), `sds.c`
//! (`sdssplitargs`) and `util.c` (`string2ll`), as of Redis 6: the same limits (1,048,576
//! arguments, 512 MiB a bulk, 64 KiB a line), the same error texts, `*0` and `*-1` (any count up
//! to 0) and blank inline lines consumed as no command, integers without `+`, leading zeros or
//! `-0`, and the two bytes after a bulk's payload skipped unchecked (as the `redis-protocol`
//! crate also does). Where this parser departs from Redis it is stricter or plainer:
//!
//! - the `\r` that ends a count or length line must be followed by `\n` (Redis skips the byte
//!   unchecked); otherwise the line's number is invalid;
//! - a NUL byte is an ordinary byte in an inline request (Redis reads the line as a C string:
//!   a NUL hides the newline after it, and ends the arguments).

pub mod client;
mod inline;
mod parse;
pub mod reply;

#[cfg(any(test, feature = "differential"))]
pub mod differential;

use std::fmt;

pub use parse::{Arg, Limits, parse_request, parse_request_with};

/// The most arguments a multibulk request may announce (Redis's limit: more is
/// [`ProtocolError::InvalidMultibulkLength`]).
pub const MAX_MULTIBULK_LEN: usize = 1024 * 1024;

/// The longest bulk argument, in bytes (Redis's default `proto-max-bulk-len`: longer is
/// [`ProtocolError::InvalidBulkLength`]).
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;

/// The longest line a request may hold before its end is seen, in bytes: an inline request, or a
/// multibulk count or length line (Redis's `PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE_LEN: usize = 64 * 1024;

/// Why a request cannot be parsed. It displays as the text Redis sends after
/// `-ERR Protocol error: `; the connection cannot be framed any further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// An inline request whose line is longer than [`Limits::max_inline_len`].
    #[error("too big inline request")]
    TooBigInlineRequest,
    /// An inline request with a quote not closed before the line ends, or a closing quote
    /// followed by something other than a blank.
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
    /// A multibulk count line longer than [`Limits::max_inline_len`].
    #[error("too big mbulk count string")]
    TooBigMultibulkCount,
    /// A multibulk count that is not a decimal integer ending in `\r\n`, or above
    /// [`Limits::max_multibulk_len`].
    #[error("invalid multibulk length")]
    InvalidMultibulkLength,
    /// A bulk length line longer than [`Limits::max_inline_len`].
    #[error("too big bulk count string")]
    TooBigBulkCount,
    /// An argument of a multibulk request that does not start with `$`.
    #[error("expected '$', got '{}'", Printable(*.got))]
    ExpectedDollar {
        /// The byte found instead (displayed as is when it is printable ASCII, else as `\xHH`).
        got: u8,
    },
    /// A bulk length that is not a decimal integer ending in `\r\n`, is negative, or is above
    /// [`Limits::max_bulk_len`].
    #[error("invalid bulk length")]
    InvalidBulkLength,
}

/// A byte as it appears in an error text: printable ASCII as is, anything else as `\xHH`, so the
/// text stays one line of UTF-8.
struct Printable(u8);

impl fmt::Display for Printable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() || self.0 == b' ' {
            write!(f, "{}", char::from(self.0))
        } else {
            write!(f, "\\x{:02x}", self.0)
        }
    }
}
