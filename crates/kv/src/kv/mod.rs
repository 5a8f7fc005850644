//! The key-value store: Redis's string commands over a deterministic state machine that Raft
//! replicates.
//!
//! - [`command`]: a request's arguments to a typed command (write, read or local), with
//!   Redis's error texts.
//! - [`reply`]: a command's answer, written in RESP2.
//! - [`entry`]: what one log entry carries: a period's writes with their session fields.
//! - [`store`]: the state machine: data, expiry, and sessions that apply a retry once.

pub mod command;
pub mod entry;
pub mod reply;
pub mod store;

pub use command::{Command, LocalOp, ReadOp, SetCondition, WriteOp, parse_command};
pub use entry::{Batch, Request};
pub use reply::Reply;
pub use store::{Applied, Store};
