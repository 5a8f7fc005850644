//! The memory a bridge lives in: [`HeapMemory`] between threads of one process, [`Mapped`]
//! around a mapping shared with another. Seeing either as a slice of atomic words is the
//! bridge's only `unsafe`, argued here.

#[cfg(not(loom))]
use super::{BridgeError, LINE_BYTES, LINE_WORDS};
use super::{BridgeLayout, BridgeMemory, WORD};
use crate::sync::AtomicU64;

/// Zeroed memory of this process for a bridge between its threads, its words aligned to 128
/// bytes (so the header's lines are cache lines).
#[derive(Debug)]
pub struct HeapMemory {
    #[cfg(not(loom))]
    lines: Box<[Line]>,
    #[cfg(loom)]
    words: Box<[AtomicU64]>,
}

/// One 128-byte line of words.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(C, align(128))]
struct Line([AtomicU64; LINE_WORDS]);

impl HeapMemory {
    /// At least `bytes` bytes (rounded up to 128), zeroed.
    pub fn new(bytes: usize) -> Self {
        #[cfg(not(loom))]
        {
            let lines = bytes.div_ceil(LINE_BYTES);
            Self { lines: (0..lines).map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))).collect() }
        }
        #[cfg(loom)]
        {
            Self { words: (0..bytes.div_ceil(WORD)).map(|_| AtomicU64::new(0)).collect() }
        }
    }

    /// Enough memory for `layout`.
    pub fn for_layout(layout: BridgeLayout) -> Self {
        Self::new(layout.region_bytes())
    }
}

impl BridgeMemory for HeapMemory {
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        #[cfg(not(loom))]
        // SAFETY: `Line` is `repr(C)` around an array of `LINE_WORDS` atomics, 128 bytes with an
        // alignment of 128, so it has no padding and a boxed slice of lines is one contiguous
        // run of `lines.len() * LINE_WORDS` initialised atomics; the slice borrows `self`.
        return unsafe {
            std::slice::from_raw_parts(self.lines.as_ptr().cast::<AtomicU64>(), self.lines.len() * LINE_WORDS)
        };
        #[cfg(loom)]
        return &self.words;
    }
}

/// Memory mapped from elsewhere (a region shared with another process), owned by `R` (the
/// mapping's handle, such as `kairos_sys::shm::SharedRegion`) and seen as words.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct Mapped<R> {
    words: std::ptr::NonNull<AtomicU64>,
    len: usize,
    owner: R,
}

#[cfg(not(loom))]
impl<R> Mapped<R> {
    /// Sees the `len` bytes at `ptr` (rounded down to whole words) as a bridge's memory, for as
    /// long as `owner`, which moves in, lives. Refuses a null or misaligned `ptr`.
    ///
    /// # Safety
    ///
    /// For as long as `owner` lives, `ptr` is valid for reads and writes of `len` bytes (the
    /// mapping `owner` holds: moving `owner` must not move the memory), and nothing in this
    /// process reaches those bytes other than through atomic operations. Other processes may
    /// write them in any way: their writes are outside this process's memory model, and every
    /// access this process makes is an atomic load or store of an aligned word, which the
    /// hardware performs whole whatever runs beside it.
    pub unsafe fn new(owner: R, ptr: *mut u8, len: usize) -> Result<Self, BridgeError> {
        let words = std::ptr::NonNull::new(ptr.cast::<AtomicU64>()).ok_or(BridgeError::Misaligned)?;
        if !(ptr as usize).is_multiple_of(std::mem::align_of::<AtomicU64>()) {
            return Err(BridgeError::Misaligned);
        }
        Ok(Self { words, len: len / WORD, owner })
    }

    /// The mapping's owner.
    pub fn owner(&self) -> &R {
        &self.owner
    }
}

// SAFETY: the words are atomics, which any thread may access, and they stay valid for as long
// as `owner` lives (the contract of `new`); moving the `Mapped` to another thread moves the
// owner with it, hence `R: Send`.
#[cfg(not(loom))]
unsafe impl<R: Send> Send for Mapped<R> {}
// SAFETY: shared access only ever reaches the words through atomic operations, so any number
// of threads may hold `&Mapped`; `owner()` lends `&R` across threads, hence `R: Sync`.
#[cfg(not(loom))]
unsafe impl<R: Sync> Sync for Mapped<R> {}

#[cfg(not(loom))]
impl<R> BridgeMemory for Mapped<R> {
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `new`'s contract: the pointer is non-null, aligned for `AtomicU64` (checked
        // there) and valid for `len` words for as long as `owner`, a field of `self`, lives, so
        // for the borrow of `self`; this process reaches the memory only through these atomics.
        // The bytes may hold anything (another process writes them): every bit pattern is a
        // valid `AtomicU64`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr(), self.len) }
    }
}
