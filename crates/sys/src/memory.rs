//! Keeping a real-time loop's memory in place: locked pages, an allocator that never unmaps,
//! and cores that never sleep deeply.
//!
//! A page fault, a TLB shootdown or a wake-up from a deep idle state each costs a real-time
//! thread tens to hundreds of microseconds; realtime guides (and cyclictest) switch all three
//! off before measuring. Each switch here may be refused (it needs root or glibc) and says so.

use std::io;

/// The size of a memory page, bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as usize } else { 4096 }
}

/// Locks current and future pages in memory so a real-time loop takes no page faults.
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Stops the C allocator from returning memory to the kernel and from serving large blocks with
/// `mmap`, so freeing never unmaps pages. Unmapping sends TLB-shootdown interrupts to every core
/// running the process, realtime cores included; realtime guides advise this with `mlockall`.
/// Returns whether the allocator accepted it (glibc only).
pub fn disable_heap_trimming() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt takes two integers and changes allocator tunables only.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1 && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
        }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

/// Turns transparent huge pages off for this process and its children
/// (`prctl(PR_SET_THP_DISABLE)`), as Redis does for itself (`disable-thp`). With them on, the
/// first touch of memory an allocator took fresh from the kernel (or gave back and took again)
/// zeroes a whole 2 MB page in the fault: a store member's log growing after a compaction cost
/// it 2 ms at once on a 2-vCPU virtual machine (`perf record`: `clear_page_erms` under
/// `do_huge_pmd_anonymous_page`, under a `memmove`), every client of that member waiting.
pub fn disable_transparent_huge_pages() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integers only.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Holds `/dev/cpu_dma_latency` at 0 us while alive: cores stop entering idle states (on a guest
/// with the haltpoll driver, an idle vCPU polls instead of halting), so a realtime thread's
/// wake-up does not wait for a halted core to be rescheduled. The kernel restores the previous
/// target when the file is closed. cyclictest does the same by default. Needs root.
#[derive(Debug)]
pub struct NoIdleStates {
    _file: std::fs::File,
}

impl NoIdleStates {
    /// Asks for a 0 us wake-up latency target; fails without root or without the device.
    pub fn request() -> io::Result<Self> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency")?;
        file.write_all(&0i32.to_ne_bytes())?;
        Ok(Self { _file: file })
    }
}
