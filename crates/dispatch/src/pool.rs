//! Worker threads on real cores behind a [`Dispatcher`](crate::Dispatcher): each fed by an SPSC
//! ring (`kairos-ring`), each keeping the state of the flows it serves, so flow affinity has
//! the cache effect it has in a real server and the hand-off is tested where a race would show.
//!
//! # The flow table
//!
//! One row per flow, a 64-byte line: the sequence number the flow's next packet must carry, the
//! worker that touched the row last, a packet count, and counters every packet reads and writes
//! (its work on its flow's state). The table is partitioned by ownership, not by address: a row
//! belongs to the worker its flow is steered to, so a worker's flow table is the rows of the
//! flows it serves, warm in its core's cache. When a flow moves, its row moves with its packets:
//! the new worker's first packet pulls the line from the old core, and counts a state move.
//!
//! Rows are atomic words used with relaxed loads and stores, not read-modify-writes. When two
//! workers serve one flow at once (a move without the hand-off), updates to its row are lost
//! and packets are seen out of sequence; both are counted, and nothing is undefined.
//!
//! # Contract
//!
//! - [`WorkerPool::send`] never drops: a full ring makes the dispatcher wait, yielding, for room,
//!   so every sequence number reaches a worker and the checks see every packet.
//! - A worker publishes its `done` count with release ordering after the rows of the packets it
//!   counts are written; [`Workers::done`] reads it with acquire, so a dispatcher that hands a
//!   flow over after the old worker's `done` passed its tail makes the new worker's first access
//!   to the row happen after the old worker's last.
//! - Workers that leave the policy's active set keep running and find their ring empty: the
//!   pool is the mechanism, the policy decides who gets packets.
//! - [`WorkerPool::finish`] waits for every ring to drain, stops and joins every worker, and
//!   adds up their counts; dropping the pool stops and joins them too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use kairos_ring::{Consumer, Overflow, Producer, spsc};
use kairos_sys::stoppable_thread::{StoppableThread, ThreadDied};
use serde::Serialize;

use crate::dispatcher::Workers;
use crate::policy::WorkerId;

/// A packet as the pool's workers see it: its flow's row and its place in the flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Packet {
    /// The flow's row in the table, `0..flows`.
    pub flow: u32,
    /// The flow's sequence number, from 0.
    pub seq: u32,
}

/// Packets a worker takes off its ring at once.
const BURST: usize = 32;
/// Empty polls a worker spins through before it yields its core.
const SPINS_BEFORE_YIELD: u32 = 64;

/// One flow's state, a cache line.
#[repr(align(64))]
#[derive(Default)]
struct FlowRow {
    /// The sequence number the flow's next packet must carry.
    next_seq: AtomicU64,
    /// The worker that touched the row last, plus one (0: none yet).
    owner: AtomicU64,
    /// Packets applied to the row.
    packets: AtomicU64,
    /// The rest of the line: a packet's work on its flow's state.
    work: [AtomicU64; 5],
}

/// A `done` counter on a line of its own, so workers do not share one.
#[repr(align(64))]
#[derive(Default)]
struct Done(AtomicU64);

struct Shared {
    table: Box<[FlowRow]>,
    done: Box<[Done]>,
}

/// The pool's shape.
#[derive(Debug, Clone, Serialize)]
pub struct PoolConfig {
    /// Worker threads, 1 to [`crate::MAX_WORKERS`].
    pub workers: usize,
    /// Rows in the flow table; every packet's `flow` must be below it.
    pub flows: usize,
    /// Each worker's ring, in packets (a power of two at least 2).
    pub ring: usize,
    /// Cores to pin the workers to, dealt round-robin; empty: not pinned.
    pub cores: Vec<usize>,
}

impl PoolConfig {
    /// Refuses a shape the pool cannot run, saying what is wrong: the first of `workers`,
    /// `flows` and `ring` out of range ([`PoolError::Workers`], [`PoolError::Flows`],
    /// [`PoolError::Ring`]). `cores` is not checked: a core that cannot be had leaves its worker
    /// unpinned.
    pub fn check(&self) -> Result<(), PoolError> {
        if !(1..=crate::MAX_WORKERS).contains(&self.workers) {
            return Err(PoolError::Workers { workers: self.workers });
        }
        if !(1..=u32::MAX as usize).contains(&self.flows) {
            return Err(PoolError::Flows { flows: self.flows });
        }
        if self.ring < 2 || !self.ring.is_power_of_two() || self.ring > MAX_RING {
            return Err(PoolError::Ring { ring: self.ring });
        }
        Ok(())
    }
}

/// The largest ring a worker may have, packets (2^24).
const MAX_RING: usize = 1 << 24;

/// Why a pool was refused ([`PoolConfig::check`]) or did not start ([`WorkerPool::start`]).
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// [`PoolConfig::workers`] is not 1 to [`crate::MAX_WORKERS`].
    #[error("{workers} workers: the pool takes 1 to {max}", max = crate::MAX_WORKERS)]
    Workers {
        /// The number of workers asked for.
        workers: usize,
    },
    /// [`PoolConfig::flows`] is not 1 to `u32::MAX` (a packet names its row with a `u32`).
    #[error("{flows} flows: the table takes 1 to {max}", max = u32::MAX)]
    Flows {
        /// The number of rows asked for.
        flows: usize,
    },
    /// [`PoolConfig::ring`] is not a power of two from 2 to 2^24.
    #[error("a ring of {ring} packets: it must be a power of two from 2 to 2^24")]
    Ring {
        /// The ring size asked for, packets.
        ring: usize,
    },
    /// A worker's ring could not be built (not expected for a shape [`PoolConfig::check`]
    /// passed, whose rings are far below the ring crate's limit).
    #[error(transparent)]
    RingBuild(#[from] kairos_ring::RingError),
    /// The system did not start a worker's thread; the workers started before it were stopped
    /// and joined.
    #[error("starting worker {worker}: {source}")]
    Spawn {
        /// The worker whose thread did not start, `0..workers`.
        worker: usize,
        /// The system's error.
        source: std::io::Error,
    },
}

/// What one worker counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkerCounts {
    /// Packets processed.
    pub processed: u64,
    /// Packets whose sequence number was not the one their flow's row expected: overtaken, or
    /// served by two workers at once.
    pub out_of_sequence: u64,
    /// Rows this worker found last touched by another worker: flow state that moved here.
    pub state_moves: u64,
    /// Time spent on bursts (from taking one off the ring to publishing `done`), ns.
    pub busy_ns: u64,
}

/// What the pool counted, once its workers stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolReport {
    /// Each worker's counts, by worker number.
    pub workers: Vec<WorkerCounts>,
    /// Packets processed, all workers.
    pub processed: u64,
    /// Packets seen out of sequence, all workers.
    pub out_of_sequence: u64,
    /// State moves, all workers.
    pub state_moves: u64,
    /// Packets processed whose update of their row was lost to another worker's (the packet
    /// counts of the rows fall short of the packets processed by this many).
    pub lost_updates: u64,
    /// Busy time over packets processed, ns (one clock read per burst included).
    pub busy_ns_per_packet: f64,
}

/// The workers, their rings and the flow table; the dispatcher's [`Workers`].
pub struct WorkerPool {
    producers: Vec<Producer<Packet>>,
    shared: Arc<Shared>,
    threads: Vec<StoppableThread<WorkerCounts>>,
    sent: Vec<u64>,
    evicted: Vec<Packet>,
}

impl WorkerPool {
    /// Starts the workers. Fails on a shape [`PoolConfig::check`] refuses, or when the system
    /// cannot start a thread ([`PoolError::Spawn`]; those started are stopped).
    pub fn start(config: &PoolConfig) -> Result<Self, PoolError> {
        config.check()?;
        let shared = Arc::new(Shared {
            table: (0..config.flows).map(|_| FlowRow::default()).collect(),
            done: (0..config.workers).map(|_| Done::default()).collect(),
        });
        let mut producers = Vec::with_capacity(config.workers);
        let mut threads = Vec::with_capacity(config.workers);
        for id in 0..config.workers {
            let (tx, rx) = spsc::<Packet>(config.ring, Overflow::DropNewest)?;
            producers.push(tx);
            let core = (!config.cores.is_empty()).then(|| config.cores[id % config.cores.len()]);
            let shared = Arc::clone(&shared);
            let thread = StoppableThread::spawn(format!("dispatch-worker-{id}"), move |stop| {
                if let Some(core) = core {
                    // Unpinned when refused: the counts stay right, only the placement differs.
                    let _ = kairos_sys::thread::pin_current_thread(core);
                }
                work(rx, id, &shared, stop)
            })
            .map_err(|source| PoolError::Spawn { worker: id, source })?;
            threads.push(thread);
        }
        Ok(Self { producers, shared, threads, sent: vec![0; config.workers], evicted: Vec::new() })
    }

    /// Worker threads in the pool ([`PoolConfig::workers`]).
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Waits until every packet sent is processed, stops and joins the workers, and adds up
    /// their counts. A worker that panicked is the error.
    pub fn finish(mut self) -> Result<PoolReport, ThreadDied> {
        for (w, &sent) in self.sent.iter().enumerate() {
            while self.shared.done[w].0.load(Ordering::Acquire) < sent && !self.threads[w].is_finished() {
                std::thread::yield_now();
            }
        }
        self.threads.iter().for_each(StoppableThread::request_stop);
        let mut workers = Vec::with_capacity(self.threads.len());
        for t in self.threads.drain(..) {
            workers.push(t.stop()?);
        }
        let processed: u64 = workers.iter().map(|w| w.processed).sum();
        let applied: u64 = self.shared.table.iter().map(|r| r.packets.load(Ordering::Acquire)).sum();
        let busy: u64 = workers.iter().map(|w| w.busy_ns).sum();
        Ok(PoolReport {
            processed,
            out_of_sequence: workers.iter().map(|w| w.out_of_sequence).sum(),
            state_moves: workers.iter().map(|w| w.state_moves).sum(),
            lost_updates: processed.saturating_sub(applied),
            busy_ns_per_packet: if processed == 0 { 0.0 } else { busy as f64 / processed as f64 },
            workers,
        })
    }
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool").field("workers", &self.threads.len()).field("sent", &self.sent).finish()
    }
}

impl Workers<Packet> for WorkerPool {
    fn send(&mut self, worker: WorkerId, packet: Packet) -> Result<(), Packet> {
        let w = worker as usize;
        loop {
            if self.producers[w].enqueue_burst(&[packet], &mut self.evicted).taken == 1 {
                self.sent[w] += 1;
                return Ok(());
            }
            if self.threads[w].is_finished() {
                // A dead worker never makes room; `finish` reports why it died.
                return Err(packet);
            }
            std::thread::yield_now();
        }
    }

    fn done(&self, worker: WorkerId) -> u64 {
        self.shared.done[worker as usize].0.load(Ordering::Acquire)
    }
}

/// A worker's loop: bursts off its ring, each packet applied to its flow's row, `done`
/// published per burst; spins while packets come, yields when none did for a while.
fn work(mut ring: Consumer<Packet>, id: usize, shared: &Shared, stop: &AtomicBool) -> WorkerCounts {
    let me = id as u64 + 1;
    let mut counts = WorkerCounts::default();
    let mut burst = [Packet::default(); BURST];
    let mut empty_polls = 0u32;
    loop {
        let n = ring.dequeue_burst(&mut burst);
        if n == 0 {
            if stop.load(Ordering::Relaxed) && ring.is_empty() {
                return counts;
            }
            empty_polls += 1;
            if empty_polls > SPINS_BEFORE_YIELD {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        empty_polls = 0;
        let started = Instant::now();
        for p in &burst[..n] {
            let row = &shared.table[p.flow as usize];
            let owner = row.owner.load(Ordering::Relaxed);
            if owner != me {
                counts.state_moves += u64::from(owner != 0);
                row.owner.store(me, Ordering::Relaxed);
            }
            let seq = u64::from(p.seq);
            counts.out_of_sequence += u64::from(row.next_seq.load(Ordering::Relaxed) != seq);
            row.next_seq.store(seq + 1, Ordering::Relaxed);
            row.packets.store(row.packets.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            for c in &row.work {
                c.store(c.load(Ordering::Relaxed).wrapping_add(seq), Ordering::Relaxed);
            }
        }
        counts.processed += n as u64;
        // Release: the rows written above happen before anyone who reads this count.
        shared.done[id].0.fetch_add(n as u64, Ordering::Release);
        counts.busy_ns += started.elapsed().as_nanos() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dispatcher, PolicyKind, Steer};

    fn pool(workers: usize, flows: usize) -> WorkerPool {
        WorkerPool::start(&PoolConfig { workers, flows, ring: 256, cores: Vec::new() }).unwrap()
    }

    #[test]
    fn bad_shapes_are_refused_with_what_is_wrong() {
        let ok = PoolConfig { workers: 2, flows: 10, ring: 64, cores: Vec::new() };
        assert!(ok.check().is_ok());
        let e = PoolConfig { workers: 0, ..ok.clone() }.check().unwrap_err();
        assert!(matches!(e, PoolError::Workers { workers: 0 }), "{e:?}");
        assert_eq!(e.to_string(), format!("0 workers: the pool takes 1 to {}", crate::MAX_WORKERS));
        let e = PoolConfig { ring: 100, ..ok.clone() }.check().unwrap_err();
        assert_eq!(e.to_string(), "a ring of 100 packets: it must be a power of two from 2 to 2^24");
        let e = PoolConfig { flows: 0, ..ok.clone() }.check().unwrap_err();
        assert_eq!(e.to_string(), format!("0 flows: the table takes 1 to {}", u32::MAX));
        let e = WorkerPool::start(&PoolConfig { ring: 1 << 25, ..ok }).unwrap_err();
        assert!(matches!(e, PoolError::Ring { ring } if ring == 1 << 25), "{e:?}");
    }

    #[test]
    fn one_worker_sees_every_flow_in_sequence() {
        let mut p = pool(1, 8);
        for seq in 0..1_000 {
            for flow in 0..8 {
                p.send(0, Packet { flow, seq }).unwrap();
            }
        }
        let r = p.finish().unwrap();
        assert_eq!(r.processed, 8_000);
        assert_eq!((r.out_of_sequence, r.lost_updates, r.state_moves), (0, 0, 0), "{r:?}");
    }

    #[test]
    fn a_flow_sent_to_another_worker_after_its_packets_are_done_moves_its_state_in_order() {
        let mut p = pool(2, 1);
        for seq in 0..100 {
            p.send(0, Packet { flow: 0, seq }).unwrap();
        }
        while p.done(0) < 100 {
            std::thread::yield_now();
        }
        for seq in 100..200 {
            p.send(1, Packet { flow: 0, seq }).unwrap();
        }
        let r = p.finish().unwrap();
        assert_eq!((r.processed, r.out_of_sequence, r.lost_updates), (200, 0, 0), "{r:?}");
        assert_eq!(r.state_moves, 1, "the row moved once: {r:?}");
        assert_eq!(r.workers[1].state_moves, 1);
    }

    #[test]
    fn the_dispatcher_with_the_hand_off_keeps_every_flow_in_sequence_through_moves() {
        let mut policy = PolicyKind::Kairos.build(3);
        let mut d = Dispatcher::new(&mut *policy, true, 64);
        let mut p = pool(3, 64);
        let mut seq = [0u32; 64];
        for i in 0..200_000u64 {
            let flow = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as u32;
            d.dispatch(u64::from(flow), Packet { flow, seq: seq[flow as usize] }, i, &mut p);
            seq[flow as usize] += 1;
            if i % 5_000 == 0 {
                if d.policy().active().len() == 3 {
                    d.policy_mut().leave(1);
                } else {
                    d.policy_mut().join(1);
                }
            }
            d.poll(i, &mut p);
        }
        while d.held_now() > 0 {
            d.poll(0, &mut p);
            std::thread::yield_now();
        }
        let stats = d.stats();
        let r = p.finish().unwrap();
        assert_eq!(r.processed, 200_000);
        assert!(stats.handoffs > 0 && r.state_moves > 0, "{stats:?} {r:?}");
        assert_eq!((r.out_of_sequence, r.lost_updates), (0, 0), "{stats:?} {r:?}");
    }

    #[test]
    fn dropping_a_pool_stops_its_workers() {
        let mut p = pool(2, 4);
        p.send(1, Packet { flow: 3, seq: 0 }).unwrap();
        drop(p);
    }
}
