//! What every fuzz target links: an allocator that ends the run on any one allocation larger
//! than [`ALLOCATION_LIMIT`], so that a parser a stranger can make reserve gigabytes for a
//! length field is a crash with its input saved, even when the reservation is never touched
//! (the RSS limit, `-rss_limit_mb`, sees only memory touched).
//!
//! libFuzzer's own `-malloc_limit_mb` does this only through a sanitizer's allocator hooks.
//! The targets are built without one (`cargo fuzz build -s none`): the code they reach has no
//! `unsafe` of its own, so Rust's bounds checks, with the debug assertions and overflow checks
//! cargo-fuzz turns on, find what AddressSanitizer would, and the build takes a third less time.
//! Each target names this crate (`use kairos_fuzz as _;`) so that the allocator is linked in.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write as _;

/// The largest single allocation a target may make, bytes: the RSS limit `scripts/test` gives
/// (`-rss_limit_mb=2048`), which is also libFuzzer's default `-malloc_limit_mb`.
pub const ALLOCATION_LIMIT: usize = 2048 << 20;

/// The system allocator, refusing sizes past [`ALLOCATION_LIMIT`].
pub struct Limited;

#[global_allocator]
static ALLOCATOR: Limited = Limited;

/// Ends the run if `size` is past [`ALLOCATION_LIMIT`], saying what was asked: libFuzzer takes
/// the abort for a crash and saves the input.
fn within_limit(size: usize) {
    if size > ALLOCATION_LIMIT {
        too_large(size);
    }
}

#[cold]
fn too_large(size: usize) -> ! {
    // A fixed buffer, not `format!`: this runs inside the allocator.
    let mut line = [0u8; 128];
    let mut cursor = std::io::Cursor::new(&mut line[..]);
    let _ =
        writeln!(cursor, "kairos-fuzz: an allocation of {size} bytes, past the limit of {ALLOCATION_LIMIT}");
    let len = cursor.position() as usize;
    let _ = std::io::stderr().write_all(&line[..len]);
    std::process::abort();
}

// SAFETY: every method hands its arguments unchanged to `System`, whose contract is the one
// `GlobalAlloc` states; the only addition is a size check that aborts before any call, so each
// pointer returned is `System`'s own, for the layout it was asked with.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        within_limit(layout.size());
        // SAFETY: the caller's guarantees for `alloc` (a non-zero size) are passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        within_limit(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        within_limit(new_size);
        // SAFETY: `ptr` came from `System` with `layout`; the caller's guarantees for
        // `new_size` are passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
