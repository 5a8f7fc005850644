//! A fixed pool of packet buffers whose ownership is a value: [`Buf`]. A buffer holds a value of
//! the pool's type (the forwarding experiment's packet, or any [`Default`] value).
//!
//! Rings between threads carry `u32` indices, not packets, as a NIC driver's rings carry
//! descriptors. Whoever holds a buffer's index owns the buffer, and this module makes that a
//! rule the compiler keeps instead of a convention callers must follow: an index leaves the
//! pool only inside a [`Buf`], which is neither `Copy` nor `Clone`; the packet is reached only
//! through a `Buf` (shared through `&Buf`, written through `&mut Buf`); freeing a buffer and
//! sending it to another thread both take the `Buf` by value. So no caller can use a buffer it
//! gave back, free one twice, or write one another thread reads. Raw indices exist only inside
//! the pool's own rings ([`BufProducer`], [`KeyedBufProducer`] and their consumers), which turn
//! them back into `Buf`s on the far side; every `Buf` names its pool, so a buffer of one pool
//! cannot reach another's slots.
//!
//! Only one thread allocates (the one receiving from the port); any thread frees (the free list
//! is an MPSC ring with the allocator as its consumer). A `Buf` that is dropped instead of freed
//! is a buffer lost to the pool (the pool runs dry sooner), never a buffer used twice.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use kairos_ring::{
    Consumer, KeyedConsumer, KeyedProducer, Overflow, Producer, RingError, RingStats, SharedProducer, keyed,
    mpsc, spsc,
};

/// The most buffers one pool holds: indices are `u32`, and the free list is a ring of them.
pub const MAX_POOL: usize = 1 << 32;

/// Why a pool or one of its rings could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Zero buffers, or more than [`MAX_POOL`].
    #[error("a pool holds 1 to 2^32 buffers (asked for {0})")]
    Size(usize),
    /// The ring asked for cannot be made.
    #[error("{0}")]
    Ring(#[from] RingError),
}

/// One buffer of a pool, owned: the only way to reach its packet, to free it or to pass it on.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a buffer that is dropped instead of freed is lost to its pool"]
pub struct Buf {
    index: u32,
    pool: u32,
}

impl Buf {
    /// The buffer's index in its pool (for logs and tests; it grants nothing).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The buffer's index, for use with pool `pool`.
    ///
    /// # Panics
    /// When the buffer belongs to another pool; the message names both pools and what was
    /// done (`done`: "used with", "freed to", "sent on a ring of").
    #[inline]
    #[track_caller]
    fn index_in(&self, pool: u32, done: &str) -> u32 {
        assert_eq!(self.pool, pool, "a buffer of pool {} {done} pool {pool}", self.pool);
        self.index
    }
}

/// The buffers of one pool, each a `T`.
#[derive(Debug)]
pub struct Pool<T> {
    slots: Box<[UnsafeCell<T>]>,
    id: u32,
}

// SAFETY: a slot is reached only through the `Buf` holding its index, and exactly one `Buf` per
// index exists at a time outside the pool's rings (the free list hands each index out once,
// `Buf` cannot be copied, and the pool's rings move indices only from a consumed `Buf` to a new
// one). The rings' hand-offs are release/acquire, so a slot's writes by one owner happen before
// the next owner's reads. A `&Buf` may be shared between threads, so a slot may be read from
// several at once (`T: Sync`), and owners on different threads take turns at it (`T: Send`).
unsafe impl<T: Send + Sync> Sync for Pool<T> {}
// SAFETY: the pool owns its slots' values; moving it moves them (`T: Send`).
unsafe impl<T: Send> Send for Pool<T> {}

impl<T> Pool<T> {
    /// The packet in `buf`.
    ///
    /// # Panics
    /// When `buf` belongs to another pool: a programming error, caught before any access.
    #[inline]
    pub fn packet<'a>(&'a self, buf: &'a Buf) -> &'a T {
        let cell = self.cell(buf);
        // SAFETY: `buf` is the one owner of this slot (type doc), borrowed shared for 'a, so no
        // `&mut Buf` for the slot, and so no writer, exists while the reference lives.
        unsafe { &*cell.get() }
    }

    /// The packet in `buf`, to write.
    ///
    /// # Panics
    /// As [`Pool::packet`].
    #[inline]
    pub fn packet_mut<'a>(&'a self, buf: &'a mut Buf) -> &'a mut T {
        let cell = self.cell(buf);
        // SAFETY: `buf` is the one owner of this slot, borrowed exclusively for 'a: no other
        // reference to the slot exists while this one lives.
        unsafe { &mut *cell.get() }
    }

    #[inline]
    fn cell(&self, buf: &Buf) -> &UnsafeCell<T> {
        &self.slots[buf.index_in(self.id, "used with") as usize]
    }

    /// Buffers in the pool.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always false: a pool holds at least one buffer.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// The buffer of pool `pool` at `index`, taken from one of the pool's own rings (whose indices
/// are owned, one `Buf` each).
fn adopt(pool: u32, index: u32) -> Buf {
    Buf { index, pool }
}

/// Takes free buffers (one per pool).
#[derive(Debug)]
pub struct Allocator {
    free: Consumer<u32>,
    pool: u32,
    scratch: Vec<u32>,
}

/// Returns buffers to the pool (clone one per thread).
#[derive(Debug, Clone)]
pub struct Freer {
    free: SharedProducer<u32>,
    pool: u32,
    scratch: Vec<u32>,
    spare: Vec<u32>,
}

/// A pool of `size` buffers, all free, each holding `T::default()`.
pub fn pool<T: Default>(size: usize) -> Result<(Arc<Pool<T>>, Allocator, Freer), PoolError> {
    if size == 0 || size > MAX_POOL {
        return Err(PoolError::Size(size));
    }
    static NEXT_ID: AtomicU32 = AtomicU32::new(0);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let slots = (0..size).map(|_| UnsafeCell::new(T::default())).collect();
    let pool = Arc::new(Pool { slots, id });
    let (producer, consumer) = mpsc(size, Overflow::DropNewest)?;
    let mut freer = Freer { free: producer, pool: id, scratch: Vec::new(), spare: Vec::new() };
    let all: Vec<u32> = (0..size).map(|i| i as u32).collect();
    freer.give_back(&all);
    Ok((pool, Allocator { free: consumer, pool: id, scratch: Vec::new() }, freer))
}

impl Allocator {
    /// Appends up to `n` free buffers to `out`; returns how many.
    #[inline]
    pub fn alloc_burst(&mut self, n: usize, out: &mut Vec<Buf>) -> usize {
        self.scratch.resize(n, 0);
        let got = self.free.dequeue_burst(&mut self.scratch);
        out.extend(self.scratch[..got].iter().map(|&i| adopt(self.pool, i)));
        got
    }

    /// Free buffers now.
    pub fn available(&self) -> usize {
        self.free.len()
    }
}

impl Freer {
    /// Returns `buf` to the pool.
    #[inline]
    pub fn free(&mut self, buf: Buf) {
        self.free_all(std::iter::once(buf));
    }

    /// Returns every buffer of `bufs` to the pool.
    ///
    /// # Panics
    /// When a buffer belongs to another pool.
    #[inline]
    pub fn free_all(&mut self, bufs: impl IntoIterator<Item = Buf>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        for buf in bufs {
            scratch.push(buf.index_in(self.pool, "freed to"));
        }
        self.give_back(&scratch);
        self.scratch = scratch;
    }

    fn give_back(&mut self, indices: &[u32]) {
        // The free list holds the whole pool, and only owned indices come here, once each.
        let taken = self.free.enqueue_burst(indices, &mut self.spare).taken;
        debug_assert_eq!(taken, indices.len());
    }
}

/// The sending end of a FIFO ring of one pool's buffers.
#[derive(Debug)]
pub struct BufProducer {
    ring: Producer<u32>,
    pool: u32,
    scratch: Vec<u32>,
    evicted: Vec<u32>,
}

/// The receiving end of a FIFO ring of one pool's buffers.
#[derive(Debug)]
pub struct BufConsumer {
    ring: Consumer<u32>,
    pool: u32,
    scratch: Vec<u32>,
}

/// A single-producer single-consumer ring of `capacity` buffers of `pool`, admitting as
/// `overflow` says.
pub fn buf_ring<T>(
    pool: &Pool<T>,
    capacity: usize,
    overflow: Overflow,
) -> Result<(BufProducer, BufConsumer), PoolError> {
    let (tx, rx) = spsc(capacity, overflow)?;
    Ok((
        BufProducer { ring: tx, pool: pool.id, scratch: Vec::new(), evicted: Vec::new() },
        BufConsumer { ring: rx, pool: pool.id, scratch: Vec::new() },
    ))
}

impl BufProducer {
    /// Offers every buffer of `bufs` (which it empties); those the ring did not keep (refused
    /// newest, or evicted oldest) are appended to `dropped`, for the caller to free. Returns how
    /// many of `bufs` the ring took.
    ///
    /// # Panics
    /// When a buffer belongs to another pool.
    #[inline]
    pub fn send(&mut self, bufs: &mut Vec<Buf>, dropped: &mut Vec<Buf>) -> usize {
        self.scratch.clear();
        for buf in bufs.iter() {
            self.scratch.push(buf.index_in(self.pool, "sent on a ring of"));
        }
        self.evicted.clear();
        let taken = self.ring.enqueue_burst(&self.scratch, &mut self.evicted).taken;
        // The ring now owns the first `taken` indices; the rest, and what it evicted, come back.
        dropped.extend(bufs.drain(..).skip(taken));
        dropped.extend(self.evicted.iter().map(|&i| adopt(self.pool, i)));
        taken
    }

    /// The ring's counters.
    pub fn stats(&self) -> RingStats {
        self.ring.stats()
    }
}

impl BufConsumer {
    /// Appends up to `n` queued buffers to `out`, oldest first; returns how many.
    #[inline]
    pub fn recv(&mut self, n: usize, out: &mut Vec<Buf>) -> usize {
        self.scratch.resize(n, 0);
        let got = self.ring.dequeue_burst(&mut self.scratch);
        out.extend(self.scratch[..got].iter().map(|&i| adopt(self.pool, i)));
        got
    }

    /// Whether nothing is queued (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

/// The sending end of a keyed ring of one pool's buffers: the latest buffer per key.
#[derive(Debug)]
pub struct KeyedBufProducer {
    ring: KeyedProducer,
    pool: u32,
    scratch: Vec<(u32, u32)>,
    evicted: Vec<u32>,
}

/// The receiving end of a keyed ring of one pool's buffers.
#[derive(Debug)]
pub struct KeyedBufConsumer {
    ring: KeyedConsumer,
    pool: u32,
    scratch: Vec<(u32, u32)>,
}

/// A keyed ring of `pool`'s buffers: at most `capacity` keys queued, keys `0..keys`, one (the
/// latest) buffer per key.
pub fn keyed_buf_ring<T>(
    pool: &Pool<T>,
    capacity: usize,
    keys: usize,
) -> Result<(KeyedBufProducer, KeyedBufConsumer), PoolError> {
    let (tx, rx) = keyed(capacity, keys)?;
    Ok((
        KeyedBufProducer { ring: tx, pool: pool.id, scratch: Vec::new(), evicted: Vec::new() },
        KeyedBufConsumer { ring: rx, pool: pool.id, scratch: Vec::new() },
    ))
}

impl KeyedBufProducer {
    /// Offers every `(key, buffer)` of `bufs` (which it empties); the buffers the ring did not
    /// keep (replaced by a newer one of the same key, or refused) are appended to `dropped`, for
    /// the caller to free.
    ///
    /// # Panics
    /// When a buffer belongs to another pool.
    #[inline]
    pub fn send(&mut self, bufs: &mut Vec<(u32, Buf)>, dropped: &mut Vec<Buf>) {
        self.scratch.clear();
        for (key, buf) in bufs.drain(..) {
            self.scratch.push((key, buf.index_in(self.pool, "sent on a ring of")));
        }
        self.evicted.clear();
        // Every index offered is either held by the ring now or handed back in `evicted`.
        self.ring.enqueue_burst(&self.scratch, &mut self.evicted);
        dropped.extend(self.evicted.iter().map(|&i| adopt(self.pool, i)));
    }

    /// The ring's counters.
    pub fn stats(&self) -> RingStats {
        self.ring.stats()
    }
}

impl KeyedBufConsumer {
    /// Appends up to `n` queued buffers to `out` (each key's latest), oldest key first; returns
    /// how many.
    #[inline]
    pub fn recv(&mut self, n: usize, out: &mut Vec<Buf>) -> usize {
        self.scratch.resize(n, (0, 0));
        let got = self.ring.dequeue_burst(&mut self.scratch);
        out.extend(self.scratch[..got].iter().map(|&(_, i)| adopt(self.pool, i)));
        got
    }

    /// Whether nothing is queued (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}
