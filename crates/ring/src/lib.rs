//! Fixed-capacity burst rings of buffer indices, with the admission policies timely forwarding
//! needs.
//!
//! A packet path hands buffers between threads as small integers (indices into a buffer pool) in
//! bursts. This crate owns those hand-offs:
//!
//! - [`spsc`] and [`mpsc`]: FIFO rings with `enqueue_burst` / `dequeue_burst` returning how many
//!   entries moved. Any capacity from 1 up, all of it usable (a DPDK ring of size 64 holds 63,
//!   and has no size 1: the bufferless queue of the age-of-information literature).
//! - [`Overflow`]: what a full FIFO ring does. [`Overflow::DropNewest`] refuses the newest
//!   (tail drop, DPDK's behaviour); [`Overflow::DropOldest`] discards the oldest queued entries
//!   to admit the newest, so the queue holds the freshest entries offered.
//! - [`keyed`]: keep-latest-per-key: a newer entry for a queued key replaces it in place.
//!
//! - [`Doorbell`]: lets a consumer sleep on an empty ring and its producer wake it.
//! - [`bridge`]: SPSC message rings laid out in memory shared between two processes (an
//!   application and the express lane's node), where nothing the peer writes is trusted.
//!
//! Dropped entries are counted per reason ([`RingStats`]) and, where the ring discards entries it
//! had accepted, handed back to the producer so their buffers return to the pool.
//!
//! The protocol (position stamps per slot; see `core`) is modelled with `loom` in
//! `tests/loom.rs` and stressed with several producers in `tests/stress.rs`.

#![warn(missing_docs)]

pub mod bridge;
mod core;
mod doorbell;
mod keyed;
mod policy;
mod ring;
mod sync;

pub use doorbell::Doorbell;
pub use keyed::{KeyedConsumer, KeyedProducer, keyed};
pub use policy::{Admitted, Overflow, RingError, RingStats, UnknownOverflow};
pub use ring::{Consumer, Producer, SharedProducer, mpsc, spsc};
