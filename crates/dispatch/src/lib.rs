//! Flow-affinity dispatch: which worker core gets each packet, while workers come and go.
//!
//! A dispatcher core pulls packets from a port and hands each to one of several workers. Two
//! things pull against each other: packets of one flow should stay on one worker (its state is
//! warm there, and a flow split across workers can be reordered), and the set of workers changes
//! at run time (a core allocator such as Shenango's adds and parks workers every few
//! microseconds). This crate owns the *steering decision*: a [`Steer`] policy maps a flow's hash
//! to an active worker, and is told when workers join and leave.
//!
//! # Policies, each a pure function of (flow hash, worker set, its own state)
//!
//! - [`HashMod`] (Shenango's IOKernel): `active[hash % n]`, the active list compacted by
//!   swap-remove when a worker parks; stateless, and almost every flow moves on any change.
//! - [`Calisto`]: the source's flow table done as its paper describes (the public code only
//!   consults it when no worker is active): flow hash to worker, filled round-robin on first
//!   sight, bounded capacity, idle entries evicted, and `hash % n` for a flow the full table
//!   cannot take.
//! - [`Caladan`]: a small indirection table (16 slots) where each active worker keeps its own
//!   slot and the other slots are dealt round-robin over the active workers.
//! - [`Buckets`] (Kairos): a software indirection table of 4096 buckets; a join takes an even
//!   share of buckets from the workers that have the most, a leave deals the leaver's buckets to
//!   those that have the fewest, so a change moves only what it must; and it is load-aware as
//!   RSS++ is (per-bucket packet counts, greedy moves from the most loaded worker to the least,
//!   bounded per interval), reporting each move so a dispatcher can hand the bucket over
//!   without reordering.
//!
//! Every policy runs unchanged on real threads and on a virtual clock: time is passed in, and
//! nothing here reads a clock, allocates per packet or takes a lock.
//!
//! # Keeping order when flows move
//!
//! [`Dispatcher`] puts the policy's answer into effect: it holds a moved group's packets until
//! the old worker has finished the ones it already had (RFS's `last_qtail` rule, RSS++'s
//! hand-off), so no packet overtakes an earlier one of its flow.
//!
//! # On real threads
//!
//! [`WorkerPool`] is the workers behind a dispatcher on real cores: an SPSC ring each, and a
//! flow table whose rows move with their flows, so a move's cost and any reordering are seen
//! where they happen.
//!
//! # Measuring a change of workers
//!
//! [`remap`] counts the fraction of flows whose worker changes when a worker joins or leaves,
//! against the ideal (`1/(n+1)` on a join to `n+1`, `1/n` on a leave from `n`).

#![warn(missing_docs)]

pub mod buckets;
pub mod caladan;
pub mod calisto;
pub mod dispatcher;
pub mod elastic;
pub mod hash_mod;
pub mod latency;
pub mod policy;
pub mod pool;
pub mod remap;
pub mod skew;

pub use buckets::{BucketMove, Buckets};
pub use caladan::Caladan;
pub use calisto::Calisto;
pub use dispatcher::{DispatchStats, Dispatcher, Workers};
pub use hash_mod::HashMod;
pub use policy::{MAX_WORKERS, PolicyKind, Steer, WorkerId, mix};
pub use pool::{PoolConfig, PoolError, PoolReport, WorkerPool};
