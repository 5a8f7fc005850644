//! The key-value store: Redis's commands over a deterministic state machine that Raft
//! replicates.
//!
//! - [`command`]: a request's words to the path it takes (write, read or local), with Redis's
//!   error texts.
//! - [`cmd`]: the command table and the handlers, one file per kind of value.
//! - [`value`], [`zset`]: what a key holds.
//! - [`db`]: one database's keys, their expiry index, and WATCH's bookkeeping.
//! - [`reply`]: a command's answer, written in RESP2.
//! - [`entry`]: what one log entry carries: a period's writes with their session fields.
//! - [`store`]: the state machine: sixteen databases, and sessions that apply a retry once.
//! - [`blocked`]: clients waiting in a blocking pop, served in the apply as Redis serves them.

pub mod blocked;
pub mod cmd;
pub mod command;
pub mod db;
pub mod entry;
pub mod reply;
pub mod store;
pub mod value;
pub mod zset;

pub use command::{Command, LocalOp, ReadOp, Watched, WriteOp, parse_command};
pub use entry::{Batch, Request};
pub use reply::Reply;
pub use store::{Applied, Store};
