//! The time a core spent in interrupt handlers, between any two instants.
//!
//! Without the kernel's interrupt time accounting (`CONFIG_IRQ_TIME_ACCOUNTING`, off in many
//! distribution and cloud kernels), a hard interrupt, and the softirq work run on its way out,
//! are charged to whatever thread they interrupted: its CPU clock moves as if it had been
//! working. A thread that times its own passes then cannot tell a pass long in its own code
//! from one long in other people's interrupts. This module asks the kernel instead: the
//! `irq` and `irq_vectors` tracepoints (a handler's entry and exit) are opened as perf events
//! on one core, and each writes its time stamp (`CLOCK_MONOTONIC`) into a ring buffer mapped
//! here. A thread pinned to that core asks, after a pass, how much of the pass the handlers
//! took: every handler that ran on its core while it was running ran inside it. Reading the
//! ring is a load of its head when nothing happened, so a loop can ask every pass.
//!
//! Events on the core rather than on the thread: a thread's events are switched in and out
//! with it at every context switch, which a loop that sleeps every 100 us pays for thousands
//! of times a second (measured: it tripled the failure detector's passes longer than 50 us),
//! while a core's stay put. Each handler traced still costs about half a microsecond.
//!
//! The time between an entry and its exit is counted once however the handlers nest (a hard
//! interrupt inside a softirq). The kernel's own entry and exit code around the handlers is
//! not seen (a microsecond or less an interrupt); neither is a page fault, which is the
//! thread's own doing. A ring that overflowed drops records and says how many: the handler
//! open then is forgotten, never guessed.
//!
//! Needs `tracefs` mounted (for the tracepoints' numbers) and the right to trace the kernel
//! (root, or `CAP_PERFMON`): the errors say which is missing.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys as perf;

/// Where `tracefs` is found mounted.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The places `tracefs` may be: its usual mount points, then the same as the parent process
/// sees them. A process started by `ip netns exec` has a mount namespace of its own with a
/// fresh `/sys` (so that it shows the namespace's interfaces), without the host's `tracefs`;
/// its parent's root, through `/proc`, still has it, and the numbers read there are the
/// kernel's, the same in every namespace.
fn tracefs_candidates() -> Vec<String> {
    // SAFETY: getppid has no arguments and cannot fail.
    let parent = unsafe { libc::getppid() };
    let mut all: Vec<String> = TRACEFS.iter().map(|p| p.to_string()).collect();
    all.extend(TRACEFS.iter().map(|p| format!("/proc/{parent}/root{p}")));
    all
}

/// The handlers timed: (subsystem, entry, exit). The first two are on every architecture and
/// required; the `irq_vectors` ones (the local timer, inter-processor calls) are x86's and
/// taken where they exist and the kernel lets them be sampled. (Not `irq_work`: perf's own
/// records are delivered through it, and the kernel refuses to sample it.)
const HANDLERS: [(&str, &str, &str); 6] = [
    ("irq", "irq_handler_entry", "irq_handler_exit"),
    ("irq", "softirq_entry", "softirq_exit"),
    ("irq_vectors", "local_timer_entry", "local_timer_exit"),
    ("irq_vectors", "call_function_entry", "call_function_exit"),
    ("irq_vectors", "call_function_single_entry", "call_function_single_exit"),
    ("irq_vectors", "reschedule_entry", "reschedule_exit"),
];
const REQUIRED: usize = 2;

/// Data pages of the ring (a power of two). A record is 24 bytes, so 16 pages hold about
/// 2,700 handler entries or exits between two reads: a loop reading every pass never fills
/// it unless a pass lasts through thousands of interrupts.
const RING_PAGES: usize = 16;

/// Why the interrupt clock could not be started.
#[derive(Debug, thiserror::Error)]
pub enum IrqClockError {
    /// No `tracefs` to read the tracepoints' numbers from.
    #[error("tracefs is not mounted (mount it with `mount -t tracefs nodev /sys/kernel/tracing`)")]
    NoTracefs,
    /// A required tracepoint is missing from this kernel.
    #[error("the kernel has no tracepoint {0} (built without CONFIG_TRACEPOINTS?)")]
    NoTracepoint(String),
    /// The kernel refused the perf event.
    #[error(
        "perf_event_open on tracepoint {0} failed: {1} (tracing the kernel needs root or CAP_PERFMON; \
         see /proc/sys/kernel/perf_event_paranoid)"
    )]
    Open(String, io::Error),
    /// The ring buffer could not be mapped or wired.
    #[error("the perf ring buffer could not be set up: {0}")]
    Ring(io::Error),
}

/// A core's interrupt clock; see the module doc.
#[derive(Debug)]
pub struct IrqClock {
    /// Every event's file; the first owns the ring the others write into.
    fds: Vec<OwnedFd>,
    ring: NonNull<u8>,
    ring_len: usize,
    data_offset: usize,
    data_size: usize,
    handlers: Nesting,
    lost_records: u64,
}

impl IrqClock {
    /// Starts timing the interrupt handlers that run on core `cpu`.
    pub fn on_cpu(cpu: usize) -> Result<IrqClock, IrqClockError> {
        let candidates = tracefs_candidates();
        let tracefs = candidates
            .iter()
            .find(|root| std::path::Path::new(root).join("events/irq").is_dir())
            .ok_or(IrqClockError::NoTracefs)?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        let (mut entries, mut exits) = (Vec::new(), Vec::new());
        for (i, (subsystem, entry, exit)) in HANDLERS.iter().enumerate() {
            match open_pair(tracefs, subsystem, (entry, exit), cpu) {
                Ok([(entry_fd, entry_id), (exit_fd, exit_id)]) => {
                    fds.extend([entry_fd, exit_fd]);
                    entries.push(entry_id);
                    exits.push(exit_id);
                }
                Err(e) if i < REQUIRED => return Err(e),
                Err(_) => {}
            }
        }
        let page = page_size();
        let ring_len = page * (1 + RING_PAGES);
        // SAFETY: a shared read-write mapping of the first event's file, of the length the
        // kernel asks for (one header page and a power of two of data pages); no memory of
        // ours is touched, and the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fds[0].as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(IrqClockError::Ring(io::Error::last_os_error()));
        }
        let ring = NonNull::new(ptr.cast::<u8>()).ok_or(IrqClockError::Ring(io::Error::other("null map")))?;
        let mut clock = IrqClock {
            fds,
            ring,
            ring_len,
            data_offset: page,
            data_size: page * RING_PAGES,
            handlers: Nesting { entries, exits, ..Nesting::default() },
            lost_records: 0,
        };
        // The header page says where the data are (kernels before 4.1 leave these 0).
        let header = clock.header();
        // SAFETY: the header page is mapped (above) and the kernel wrote these fields before
        // mmap returned; they do not change afterwards.
        let (offset, size) = unsafe { ((*header).data_offset as usize, (*header).data_size as usize) };
        if size != 0 {
            clock.data_offset = offset;
            clock.data_size = size;
        }
        let leader = clock.fds[0].as_raw_fd();
        for fd in &clock.fds[1..] {
            // SAFETY: SET_OUTPUT redirects this event's records into the leader's ring; both
            // files are ours and open.
            if unsafe { perf::ioctls::SET_OUTPUT(fd.as_raw_fd(), leader) } != 0 {
                return Err(IrqClockError::Ring(io::Error::last_os_error()));
            }
        }
        for fd in &clock.fds {
            // SAFETY: ENABLE starts a disabled event of ours; the argument is unused.
            if unsafe { perf::ioctls::ENABLE(fd.as_raw_fd(), 0) } != 0 {
                return Err(IrqClockError::Ring(io::Error::last_os_error()));
            }
        }
        Ok(clock)
    }

    /// The time, ns, the core spent in handlers between `from_ns` and `to_ns`
    /// (`CLOCK_MONOTONIC`), counting the handlers that ended by now; what the ring held from
    /// before is read and forgotten. A thread pinned to the core asks this after a pass of
    /// its own: no handler of the pass can still be running. A load of the ring's head when it
    /// holds nothing.
    pub fn handler_ns_between(&mut self, from_ns: u64, to_ns: u64) -> u64 {
        self.handlers.window = (from_ns, to_ns);
        self.handlers.in_window_ns = 0;
        self.drain();
        self.handlers.in_window_ns
    }

    /// Records the ring dropped because it was full (the handler open then was forgotten).
    pub fn lost_records(&self) -> u64 {
        self.lost_records
    }

    fn header(&self) -> *mut perf::bindings::perf_event_mmap_page {
        self.ring.as_ptr().cast()
    }

    fn position(&self, field: usize) -> &AtomicU64 {
        // SAFETY: `field` is the offset of `data_head` or `data_tail`, 8-aligned u64s in the
        // mapped header page, which lives as long as `self`; the kernel writes the head and
        // reads the tail concurrently, which is why they are read and written atomically.
        unsafe { &*self.ring.as_ptr().add(field).cast::<AtomicU64>() }
    }

    fn drain(&mut self) {
        let head_at = std::mem::offset_of!(perf::bindings::perf_event_mmap_page, data_head);
        let tail_at = std::mem::offset_of!(perf::bindings::perf_event_mmap_page, data_tail);
        // Acquire: the records up to the head are written before the head moved past them.
        let head = self.position(head_at).load(Ordering::Acquire);
        let mut tail = self.position(tail_at).load(Ordering::Relaxed);
        while tail + 8 <= head {
            let header = self.read_bytes::<8>(tail);
            let kind = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes"));
            let size = u16::from_ne_bytes(header[6..8].try_into().expect("2 bytes")) as u64;
            if size < 8 || tail + size > head {
                break;
            }
            if kind == perf::bindings::PERF_RECORD_SAMPLE && size >= 24 {
                let body = self.read_bytes::<16>(tail + 8);
                let id = u64::from_ne_bytes(body[0..8].try_into().expect("8 bytes"));
                let time = u64::from_ne_bytes(body[8..16].try_into().expect("8 bytes"));
                self.handlers.event(id, time);
            } else if kind == perf::bindings::PERF_RECORD_LOST && size >= 24 {
                let body = self.read_bytes::<16>(tail + 8);
                self.lost_records += u64::from_ne_bytes(body[8..16].try_into().expect("8 bytes"));
                self.handlers.depth = 0;
            }
            tail += size;
        }
        // Release: the kernel may overwrite what was read only after it was read.
        self.position(tail_at).store(tail, Ordering::Release);
    }

    /// `N` bytes of the data area from ring position `at`, across its wrap.
    fn read_bytes<const N: usize>(&self, at: u64) -> [u8; N] {
        let mut out = [0u8; N];
        for (i, byte) in out.iter_mut().enumerate() {
            let offset = self.data_offset + ((at as usize + i) % self.data_size);
            // SAFETY: `offset` lies in the data area, inside the mapping of `ring_len` bytes
            // (data_offset + data_size <= ring_len, as the kernel laid it out); a byte read
            // races with nothing, since the kernel writes only past the head read before.
            *byte = unsafe { self.ring.as_ptr().add(offset).read_volatile() };
        }
        out
    }
}

impl Drop for IrqClock {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `on_cpu`, of `ring_len` bytes, unmapped once;
        // nothing borrows it past `self`. The files close after, with `fds`.
        unsafe {
            libc::munmap(self.ring.as_ptr().cast(), self.ring_len);
        }
    }
}

/// Handler entries and exits folded into time: nested handlers count once, from the
/// outermost entry to its exit, and only for their part inside the window asked about.
#[derive(Debug, Default)]
struct Nesting {
    /// Event ids of the entries and of the exits (the ring's records carry them).
    entries: Vec<u64>,
    exits: Vec<u64>,
    /// Handlers open now, and when the outermost began.
    depth: u32,
    open_since_ns: u64,
    /// The window asked about, and the handlers' time inside it.
    window: (u64, u64),
    in_window_ns: u64,
}

impl Nesting {
    /// One handler entered or left at `time_ns`. An exit with no entry seen (its entry came
    /// before the clock started, or was lost) is ignored.
    fn event(&mut self, id: u64, time_ns: u64) {
        if self.entries.contains(&id) {
            if self.depth == 0 {
                self.open_since_ns = time_ns;
            }
            self.depth += 1;
        } else if self.exits.contains(&id) && self.depth > 0 {
            self.depth -= 1;
            if self.depth == 0 {
                let (from, to) = self.window;
                self.in_window_ns += time_ns.min(to).saturating_sub(self.open_since_ns.max(from));
            }
        }
    }
}

/// A handler's entry and exit events on core `cpu`, each with its id.
fn open_pair(
    tracefs: &str,
    subsystem: &str,
    events: (&str, &str),
    cpu: usize,
) -> Result<[(OwnedFd, u64); 2], IrqClockError> {
    let open = |event: &str| {
        let name = format!("{subsystem}:{event}");
        let config = tracepoint_id(tracefs, subsystem, event)
            .ok_or_else(|| IrqClockError::NoTracepoint(name.clone()))?;
        let fd = open_tracepoint(config, cpu).map_err(|e| IrqClockError::Open(name, e))?;
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes the event's id into `id`, a valid u64.
        if unsafe { perf::ioctls::ID(fd.as_raw_fd(), &mut id) } != 0 {
            return Err(IrqClockError::Ring(io::Error::last_os_error()));
        }
        Ok((fd, id))
    };
    Ok([open(events.0)?, open(events.1)?])
}

/// A tracepoint's number, from `tracefs`.
fn tracepoint_id(tracefs: &str, subsystem: &str, event: &str) -> Option<u64> {
    std::fs::read_to_string(format!("{tracefs}/events/{subsystem}/{event}/id")).ok()?.trim().parse().ok()
}

/// A tracepoint event on core `cpu`, whatever runs there, every hit sampled with its id and a
/// `CLOCK_MONOTONIC` time stamp; opened disabled.
fn open_tracepoint(config: u64, cpu: usize) -> io::Result<OwnedFd> {
    let mut attr = perf::bindings::perf_event_attr {
        type_: perf::bindings::PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<perf::bindings::perf_event_attr>() as u32,
        config,
        sample_type: (perf::bindings::PERF_SAMPLE_IDENTIFIER | perf::bindings::PERF_SAMPLE_TIME) as u64,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.set_disabled(1);
    attr.set_use_clockid(1);
    // Nobody waits on the ring: a wake-up per record would be work for nothing.
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = (RING_PAGES * page_size() / 2) as u32;
    let cpu = libc::c_int::try_from(cpu).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `attr` is a fully initialised perf_event_attr of the size it states; pid -1 and
    // a core ask for everything on that core; no group; the flag closes it on exec.
    let fd =
        unsafe { perf::perf_event_open(&mut attr, -1, cpu, -1, perf::bindings::PERF_FLAG_FD_CLOEXEC as _) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a file descriptor the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 { page as usize } else { 4096 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::monotonic_ns;

    #[test]
    fn nested_handlers_count_once_inside_the_window_and_an_unmatched_exit_is_ignored() {
        let mut n = Nesting { entries: vec![1, 3], exits: vec![2, 4], window: (0, 50), ..Nesting::default() };
        n.event(2, 5); // an exit whose entry came before the clock started
        n.event(3, 10); // softirq in
        n.event(1, 12); // a hard interrupt inside it
        n.event(2, 15);
        n.event(4, 40); // softirq out: 30 ns in all
        n.event(1, 45); // a handler that began in the window and ended after it: 5 ns inside
        n.event(2, 60);
        n.event(1, 100); // after the window
        n.event(2, 107);
        n.event(9, 200); // not a handler's event
        assert_eq!((n.in_window_ns, n.depth), (35, 0));
    }

    /// Needs tracefs and the right to trace the kernel (root): `scripts/test` runs it.
    #[test]
    #[ignore = "needs root and tracefs"]
    fn a_thread_sending_over_loopback_on_its_core_is_charged_softirq_time() {
        std::thread::spawn(|| {
            crate::thread::pin_current_thread(0).expect("pin to core 0");
            let mut clock = IrqClock::on_cpu(0).expect("irq clock");
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let (mut irq, mut wall) = (0, 0);
            // Loopback's receive work runs as a softirq in the sender's own system call; the
            // ring is read every 100 sends, as a loop reads it every pass.
            for _ in 0..20 {
                let start = monotonic_ns();
                for _ in 0..100 {
                    socket.send_to(&[0u8; 64], peer.local_addr().unwrap()).unwrap();
                    let mut buf = [0u8; 64];
                    let _ = peer.recv(&mut buf);
                }
                let end = monotonic_ns();
                irq += clock.handler_ns_between(start, end);
                wall += end - start;
            }
            assert!(irq > 0, "no softirq time seen in 2,000 loopback sends");
            assert!(irq < wall, "interrupt time {irq} ns exceeds the wall time {wall} ns");
            assert_eq!(clock.lost_records(), 0);
            // Nothing ran in a window before the clock started.
            assert_eq!(clock.handler_ns_between(0, 1_000), 0);
        })
        .join()
        .unwrap();
    }
}
