//! A handler's inbox: the queue between an I/O thread and one handler, as two single-producer
//! single-consumer rings of buffer indices (`kairos-ring`) over a fixed pool of buffers.
//!
//! The I/O thread holds the [`Ingress`]: it fills a free buffer (a datagram read straight into
//! it) and passes the buffer's index to the handler over the *full* ring. The handler holds the
//! [`Inbox`]: it takes indices off the full ring, reads the buffers, and passes the indices back
//! over the *free* ring. Nothing is copied and nothing is locked; when the handler falls behind,
//! the pool runs dry and the I/O thread learns it before reading (it drops that handler's
//! newest data, and no one else's).
//!
//! Ownership of a buffer follows its index. Every index is in exactly one place at any time:
//! the ingress's stash of free indices, the full ring, a drain in progress, or the free ring.
//! Neither handle lets an index out, so the unsafe accesses in this module are sound by
//! construction: the ingress writes only buffers whose indices it holds, the inbox reads only
//! buffers whose indices it dequeued, and each ring's hand-off (a release store of the slot's
//! stamp, an acquire load by the other side) orders the writer's bytes before the reader's.
//! `tests/loom.rs` models this hand-off.

use std::sync::Arc;

use kairos_ring::{Consumer, Overflow, Producer, RingError, spsc};

use crate::sync::BufferCell;

/// One buffer: its bytes and how many of them hold data.
#[derive(Debug)]
pub(crate) struct Buffer {
    len: usize,
    bytes: Box<[u8]>,
}

#[derive(Debug)]
struct Buffers {
    cells: Box<[BufferCell<Buffer>]>,
}

// SAFETY: a buffer is touched only by the holder of its index, and indices move between
// threads only through the two SPSC rings, whose hand-offs are release/acquire (module doc).
unsafe impl Sync for Buffers {}
// SAFETY: as above; the buffers are plain bytes.
unsafe impl Send for Buffers {}

/// Why an inbox could not be made.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum InboxError {
    /// No buffers, or buffers of no bytes.
    #[error("an inbox needs at least one buffer of at least one byte (asked for {buffers} of {bytes} B)")]
    Empty {
        /// Buffers asked for.
        buffers: usize,
        /// Bytes a buffer asked for.
        bytes: usize,
    },
    /// More buffers than a `u32` index can name.
    #[error("an inbox holds at most {max} buffers (asked for {asked})", max = u32::MAX)]
    TooMany {
        /// Buffers asked for.
        asked: usize,
    },
    /// The rings between the two sides could not be made.
    #[error("{0}")]
    Ring(#[from] RingError),
}

/// Makes an inbox of `buffers` buffers of `buffer_bytes` bytes each.
pub fn inbox(buffers: usize, buffer_bytes: usize) -> Result<(Ingress, Inbox), InboxError> {
    if buffers == 0 || buffer_bytes == 0 {
        return Err(InboxError::Empty { buffers, bytes: buffer_bytes });
    }
    if buffers > u32::MAX as usize {
        return Err(InboxError::TooMany { asked: buffers });
    }
    let cells = (0..buffers)
        .map(|_| BufferCell::new(Buffer { len: 0, bytes: vec![0u8; buffer_bytes].into_boxed_slice() }))
        .collect();
    let shared = Arc::new(Buffers { cells });
    // Only `buffers` indices exist, so neither ring can be full when one is offered.
    let (full_tx, full_rx) = spsc(buffers, Overflow::DropNewest)?;
    let (free_tx, free_rx) = spsc(buffers, Overflow::DropNewest)?;
    let ingress = Ingress {
        buffers: Arc::clone(&shared),
        full: full_tx,
        free: free_rx,
        stash: (0..buffers as u32).rev().collect(),
        spare: Vec::new(),
        pushed: 0,
    };
    let inbox =
        Inbox { buffers: shared, full: full_rx, free: free_tx, taken: vec![0; 32], spare: Vec::new() };
    Ok((ingress, inbox))
}

/// The I/O thread's end: fills free buffers and queues them for the handler.
#[derive(Debug)]
pub struct Ingress {
    buffers: Arc<Buffers>,
    full: Producer<u32>,
    free: Consumer<u32>,
    /// Free indices this end holds (taken off the free ring in bursts).
    stash: Vec<u32>,
    spare: Vec<u32>,
    pushed: u64,
}

impl Ingress {
    /// Whether a free buffer is at hand (takes back what the handler returned).
    pub fn has_buffer(&mut self) -> bool {
        self.refill(1);
        !self.stash.is_empty()
    }

    /// Takes back what the handler returned until the stash holds `want` (or the free ring is
    /// empty).
    fn refill(&mut self, want: usize) {
        while self.stash.len() < want {
            let mut burst = [0u32; 32];
            let got = self.free.dequeue_burst(&mut burst);
            self.stash.extend_from_slice(&burst[..got]);
            if got == 0 {
                return;
            }
        }
    }

    /// Fills a free buffer with `fill` (which returns how many bytes it wrote) and queues it
    /// for the handler. `Ok(false)`: no free buffer (the handler is behind), `fill` was not
    /// called. An error from `fill` is returned and the buffer stays free.
    pub fn push_with<E>(&mut self, fill: impl FnOnce(&mut [u8]) -> Result<usize, E>) -> Result<bool, E> {
        if !self.has_buffer() {
            return Ok(false);
        }
        let index = *self.stash.last().expect("has_buffer said so");
        // SAFETY: `index` is in this end's stash, so no other thread holds it (module doc).
        let written = unsafe {
            self.buffers.cells[index as usize].with_mut(|b| {
                let n = fill(&mut b.bytes)?;
                b.len = n.min(b.bytes.len());
                Ok(())
            })
        };
        written?;
        self.stash.pop();
        let taken = self.full.enqueue_burst(&[index], &mut self.spare).taken;
        debug_assert_eq!(taken, 1, "the full ring holds every buffer");
        self.pushed += 1;
        Ok(true)
    }

    /// Fills up to `max` free buffers at once (at most [`Ingress::MAX_BURST`]) and queues those
    /// filled: `fill` gets the buffers and a length per buffer to set, and returns how many it
    /// filled, from the first (e.g. a `recvmmsg` into them). Returns how many were queued: 0
    /// when no buffer was free (the handler is behind) or `fill` filled none. An error from
    /// `fill` is returned and the buffers stay free.
    #[cfg(not(loom))]
    pub fn push_burst_with<E>(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [&mut [u8]], &mut [usize]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let want = max.min(Self::MAX_BURST);
        self.refill(want);
        let n = want.min(self.stash.len());
        if n == 0 {
            return Ok(0);
        }
        let mut indices = [0u32; Self::MAX_BURST];
        // No allocation on the I/O thread's path: the slices live in an array.
        let mut bufs: [&mut [u8]; Self::MAX_BURST] = std::array::from_fn(|_| &mut [][..]);
        for (slot, buf) in indices.iter_mut().zip(bufs.iter_mut()).take(n) {
            *slot = self.stash.pop().expect("n is at most the stash's length");
            // SAFETY: the index came out of this end's stash, so no other thread holds it, and
            // the indices in the stash are distinct, so the slices do not alias (module doc).
            let buffer = unsafe { &mut *self.buffers.cells[*slot as usize].as_mut_ptr() };
            *buf = &mut buffer.bytes[..];
        }
        let mut lens = [0usize; Self::MAX_BURST];
        let filled = match fill(&mut bufs[..n], &mut lens[..n]) {
            Ok(k) => k.min(n),
            Err(e) => {
                self.stash.extend(indices[..n].iter().rev());
                return Err(e);
            }
        };
        for (i, &index) in indices[..filled].iter().enumerate() {
            // SAFETY: still held by this end (not yet queued).
            unsafe { self.buffers.cells[index as usize].with_mut(|b| b.len = lens[i].min(b.bytes.len())) };
        }
        // The buffers not filled go back to the stash, in the order they came out.
        self.stash.extend(indices[filled..n].iter().rev());
        let taken = self.full.enqueue_burst(&indices[..filled], &mut self.spare).taken;
        debug_assert_eq!(taken, filled, "the full ring holds every buffer");
        self.pushed += filled as u64;
        Ok(filled)
    }

    /// The most buffers [`Ingress::push_burst_with`] fills at once.
    pub const MAX_BURST: usize = 64;

    /// Buffers queued so far.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Buffers queued and not yet taken by the handler.
    pub fn queued(&self) -> usize {
        self.full.stats().len
    }
}

/// The handler's end: reads queued buffers in arrival order and returns them.
#[derive(Debug)]
pub struct Inbox {
    buffers: Arc<Buffers>,
    full: Consumer<u32>,
    free: Producer<u32>,
    taken: Vec<u32>,
    spare: Vec<u32>,
}

impl Inbox {
    /// Hands up to `max` queued buffers to `read`, oldest first, and returns them to the
    /// I/O thread; returns how many were read (fewer than `max`: the inbox is now empty).
    pub fn drain(&mut self, max: u64, mut read: impl FnMut(&[u8])) -> u64 {
        let mut done = 0u64;
        while done < max {
            let want = (max - done).min(self.taken.len() as u64) as usize;
            let n = self.full.dequeue_burst(&mut self.taken[..want]);
            for &index in &self.taken[..n] {
                // SAFETY: `index` came off the full ring, so this end holds it until it goes
                // back on the free ring below (module doc).
                unsafe { self.buffers.cells[index as usize].with(|b| read(&b.bytes[..b.len])) };
            }
            let back = self.free.enqueue_burst(&self.taken[..n], &mut self.spare).taken;
            debug_assert_eq!(back, n, "the free ring holds every buffer");
            done += n as u64;
            if n < want {
                break;
            }
        }
        done
    }

    /// Buffers waiting.
    pub fn len(&self) -> usize {
        self.full.len()
    }

    /// No buffer is waiting to be drained.
    pub fn is_empty(&self) -> bool {
        self.full.is_empty()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buffers_arrive_in_order_and_come_back() {
        let (mut ingress, mut inbox) = inbox(3, 8).unwrap();
        for i in 0..3u8 {
            let ok = ingress.push_with(|b| {
                b[..2].copy_from_slice(&[i, i]);
                Ok::<_, ()>(2)
            });
            assert_eq!(ok, Ok(true));
        }
        // The pool is dry: the fourth is refused without calling `fill`.
        assert_eq!(ingress.push_with(|_| -> Result<usize, ()> { panic!("no buffer to fill") }), Ok(false));
        let mut seen = Vec::new();
        assert_eq!(inbox.drain(2, |d| seen.push(d.to_vec())), 2);
        assert_eq!(seen, vec![vec![0, 0], vec![1, 1]]);
        assert!(ingress.has_buffer(), "drained buffers are free again");
        assert_eq!(ingress.push_with(|b| Ok::<_, ()>(b.len() + 10)), Ok(true), "lengths are clamped");
        seen.clear();
        assert_eq!(inbox.drain(10, |d| seen.push(d.to_vec())), 2, "fewer than asked: empty now");
        // Buffers are reused as they are (not cleared): the clamped length is the whole buffer.
        assert_eq!(seen[0], vec![2, 2]);
        assert_eq!(seen[1].len(), 8);
        assert!(inbox.is_empty());
        assert_eq!(ingress.pushed(), 4);
    }

    #[test]
    fn a_failed_fill_keeps_the_buffer_free() {
        let (mut ingress, mut inbox) = inbox(1, 4).unwrap();
        assert_eq!(ingress.push_with(|_| Err::<usize, _>("would block")), Err("would block"));
        assert_eq!(inbox.drain(1, |_| {}), 0);
        assert_eq!(ingress.push_with(|_| Ok::<_, ()>(1)), Ok(true));
        assert_eq!(inbox.drain(1, |d| assert_eq!(d.len(), 1)), 1);
    }

    #[test]
    fn a_burst_fills_several_buffers_and_returns_the_rest() {
        let (mut ingress, mut inbox) = inbox(4, 8).unwrap();
        // Three of up to four buffers filled, each with its own length and bytes.
        let queued = ingress.push_burst_with(8, |bufs, lens| {
            assert_eq!(bufs.len(), 4, "no more than the pool");
            for (i, b) in bufs.iter_mut().enumerate().take(3) {
                b[..i + 1].fill(i as u8 + 1);
                lens[i] = i + 1;
            }
            Ok::<_, ()>(3)
        });
        assert_eq!(queued, Ok(3));
        let mut seen = Vec::new();
        assert_eq!(inbox.drain(10, |d| seen.push(d.to_vec())), 3);
        assert_eq!(seen, vec![vec![1], vec![2, 2], vec![3, 3, 3]]);
        // The unfilled buffer and the drained ones are all free again; an error keeps them so.
        assert_eq!(ingress.push_burst_with(8, |_, _| Err::<usize, _>("would block")), Err("would block"));
        assert_eq!(ingress.push_burst_with(8, |bufs, _| Ok::<_, ()>(bufs.len())), Ok(4));
        assert_eq!(
            ingress.push_burst_with(8, |_, _| -> Result<usize, ()> { panic!("the pool is dry") }),
            Ok(0)
        );
        assert_eq!(inbox.drain(10, |d| assert_eq!(d.len(), 0)), 4);
    }

    #[test]
    fn empty_inboxes_are_refused() {
        assert!(matches!(inbox(0, 8), Err(InboxError::Empty { .. })));
        assert!(matches!(inbox(8, 0), Err(InboxError::Empty { .. })));
    }
}
