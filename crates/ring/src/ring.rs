//! FIFO burst rings: [`spsc`] and [`mpsc`] constructors and their handles.

use std::sync::Arc;

use crate::core::{Core, Counters};
use crate::policy::{Admitted, Overflow, RingError, RingStats, check_capacity};

/// Builds a single-producer single-consumer ring of `capacity` entries (any capacity from 1).
pub fn spsc<T: Copy + Send>(
    capacity: usize,
    overflow: Overflow,
) -> Result<(Producer<T>, Consumer<T>), RingError> {
    check_capacity(capacity)?;
    let core = Arc::new(Core::new(capacity, overflow == Overflow::DropOldest));
    Ok((Producer { core: Arc::clone(&core), tail: 0, overflow }, Consumer { core }))
}

/// Builds a multi-producer single-consumer ring; clone the [`SharedProducer`] per thread.
pub fn mpsc<T: Copy + Send>(
    capacity: usize,
    overflow: Overflow,
) -> Result<(SharedProducer<T>, Consumer<T>), RingError> {
    check_capacity(capacity)?;
    let core = Arc::new(Core::new(capacity, overflow == Overflow::DropOldest));
    Ok((SharedProducer { core: Arc::clone(&core), overflow }, Consumer { core }))
}

/// The only producer of an SPSC ring. It keeps its tail privately: no read-modify-write on the
/// data path.
#[derive(Debug)]
pub struct Producer<T> {
    core: Arc<Core<T>>,
    tail: u64,
    overflow: Overflow,
}

/// One of the producers of an MPSC ring: positions are reserved with a CAS on the tail.
#[derive(Debug)]
pub struct SharedProducer<T> {
    core: Arc<Core<T>>,
    overflow: Overflow,
}

impl<T> Clone for SharedProducer<T> {
    fn clone(&self) -> Self {
        Self { core: Arc::clone(&self.core), overflow: self.overflow }
    }
}

/// The only consumer of a ring.
#[derive(Debug)]
pub struct Consumer<T> {
    core: Arc<Core<T>>,
}

/// How a producer reserves positions; the admission policy is written once over it.
trait Reserve<T: Copy> {
    fn core(&self) -> &Core<T>;
    /// Reserves and writes up to `values.len()`; returns how many were written.
    fn put(&mut self, values: &[T]) -> usize;
}

impl<T: Copy> Reserve<T> for Producer<T> {
    fn core(&self) -> &Core<T> {
        &self.core
    }
    #[inline]
    fn put(&mut self, values: &[T]) -> usize {
        let n = self.core.reserve_single(self.tail, values.len());
        if n > 0 {
            self.core.write(self.tail, &values[..n]);
            self.tail += n as u64;
            self.core.publish_tail(self.tail);
        }
        n
    }
}

impl<T: Copy> Reserve<T> for SharedProducer<T> {
    fn core(&self) -> &Core<T> {
        &self.core
    }
    #[inline]
    fn put(&mut self, values: &[T]) -> usize {
        let (first, n) = self.core.reserve_shared(values.len());
        if n > 0 {
            self.core.write(first, &values[..n]);
        }
        n
    }
}

#[inline]
fn admit<T: Copy, P: Reserve<T>>(
    producer: &mut P,
    overflow: Overflow,
    offered: &[T],
    evicted: &mut Vec<T>,
) -> Admitted {
    Counters::add(&producer.core().counters.offered, offered.len());
    match overflow {
        Overflow::DropNewest => {
            let taken = producer.put(offered);
            Counters::add(&producer.core().counters.dropped_newest, offered.len() - taken);
            Admitted { taken, evicted: 0 }
        }
        Overflow::DropOldest => {
            let before = evicted.len();
            // Entries of the burst that a full ring would evict at once never enter it.
            let capacity = producer.core().capacity();
            let skip = offered.len().saturating_sub(capacity);
            evicted.extend_from_slice(&offered[..skip]);
            Counters::add(&producer.core().counters.dropped_oldest, skip);
            let mut rest = &offered[skip..];
            let mut rounds = 0;
            loop {
                let n = producer.put(rest);
                rest = &rest[n..];
                if rest.is_empty() {
                    break;
                }
                // Evict as many of the oldest as we still need. Twice at most: if the places
                // freed were taken by other producers, or the oldest slot is mid-read by a
                // descheduled consumer, refuse the rest rather than wait or evict everything.
                if rounds == 2 || producer.core().evict(rest.len(), evicted) == 0 {
                    Counters::add(&producer.core().counters.dropped_newest, rest.len());
                    break;
                }
                rounds += 1;
            }
            Admitted { taken: offered.len() - rest.len(), evicted: evicted.len() - before }
        }
    }
}

impl<T: Copy> Producer<T> {
    /// Offers a burst. See [`Admitted`] for who owns what afterwards.
    #[inline]
    pub fn enqueue_burst(&mut self, offered: &[T], evicted: &mut Vec<T>) -> Admitted {
        let overflow = self.overflow;
        admit(self, overflow, offered, evicted)
    }

    /// The ring's counters (shared by every handle).
    pub fn stats(&self) -> RingStats {
        self.core.stats()
    }

    /// What the ring does with a burst that does not fit.
    pub fn overflow(&self) -> Overflow {
        self.overflow
    }
}

impl<T: Copy> SharedProducer<T> {
    /// Offers a burst. See [`Admitted`] for who owns what afterwards. The burst's entries stay in
    /// order among themselves; bursts of different producers may interleave.
    #[inline]
    pub fn enqueue_burst(&mut self, offered: &[T], evicted: &mut Vec<T>) -> Admitted {
        let overflow = self.overflow;
        admit(self, overflow, offered, evicted)
    }

    /// The ring's counters (shared by every handle).
    pub fn stats(&self) -> RingStats {
        self.core.stats()
    }
}

impl<T: Copy> Consumer<T> {
    /// Moves up to `out.len()` entries, oldest first, into `out`; returns how many.
    #[inline]
    pub fn dequeue_burst(&mut self, out: &mut [T]) -> usize {
        self.core.dequeue(out)
    }

    /// Entries queued now (a snapshot).
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// Whether no entry is queued now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries the ring holds at most (all of them usable).
    pub fn capacity(&self) -> usize {
        self.core.capacity()
    }

    /// The ring's counters (shared by every handle).
    pub fn stats(&self) -> RingStats {
        self.core.stats()
    }
}
