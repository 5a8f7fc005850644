//! The time a thread's core spent in interrupt handlers run in the thread's context, between
//! any two instants.
//!
//! Without the kernel's interrupt time accounting (`CONFIG_IRQ_TIME_ACCOUNTING`, off in many
//! distribution and cloud kernels), a hard interrupt, and the softirq work run on its way out,
//! are charged to whatever thread they interrupted: its CPU clock moves as if it had been
//! working. A thread that times its own passes then cannot tell a pass long in its own code
//! from one long in other people's interrupts. This module asks the kernel instead: the
//! `irq` and `irq_vectors` tracepoints (a handler's entry and exit) are opened as perf events
//! on one core, and each hit writes the task it interrupted and its time stamp
//! (`CLOCK_MONOTONIC`) into a ring buffer mapped here. A thread pinned to that core asks, after
//! a pass, how much of the pass the handlers that interrupted *it* took: time it was on the CPU
//! and yet not working, never time it was preempted (handlers then interrupt another task, or
//! run in `ksoftirqd`). Reading the ring is a load of its head when nothing happened, so a
//! loop can ask every pass.
//!
//! Events on the core rather than on the thread: a thread's events are switched in and out
//! with it at every context switch, which a loop that sleeps every 100 us pays thousands of
//! times a second (measured: it tripled the failure detector's passes longer than 50 us),
//! while a core's stay put. Each handler traced still costs about half a microsecond.
//!
//! Handlers of one kind do not nest on a core (a hard interrupt runs with interrupts off, and
//! softirqs do not run inside softirqs), so each kind is open or not, and the time counted is
//! the union of the open ones: a hard interrupt inside a softirq counts once. An exit never
//! seen (dropped with a full ring, or enabled after its entry) is forgotten at its kind's next
//! entry rather than holding the clock open. The kernel's own entry and exit code around the
//! handlers is not seen (a microsecond or less an interrupt); neither is a page fault, which is
//! the thread's own doing. On a kernel whose softirqs are preemptible (`PREEMPT_RT`) a softirq
//! can be open while the thread runs, and its time would be over-counted.
//!
//! Needs `tracefs` mounted (for the tracepoints' numbers) and the right to trace the kernel
//! (root, or `CAP_PERFMON`): the errors say which is missing.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys as perf;

use crate::memory::page_size;

/// Where `tracefs` is found mounted.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The places `tracefs` may be: its usual mount points, then the same as the parent process
/// sees them. A process started by `ip netns exec` has a mount namespace of its own with a
/// fresh `/sys` (so that it shows the namespace's interfaces), without the host's `tracefs`;
/// its parent's root, through `/proc`, still has it while the parent lives, and the numbers
/// read there are the kernel's, the same in every namespace.
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
/// wake-ups are delivered through it, and the kernel refuses to sample it.)
const HANDLERS: [(&str, &str, &str); 6] = [
    ("irq", "irq_handler_entry", "irq_handler_exit"),
    ("irq", "softirq_entry", "softirq_exit"),
    ("irq_vectors", "local_timer_entry", "local_timer_exit"),
    ("irq_vectors", "call_function_entry", "call_function_exit"),
    ("irq_vectors", "call_function_single_entry", "call_function_single_exit"),
    ("irq_vectors", "reschedule_entry", "reschedule_exit"),
];
const REQUIRED: usize = 2;

/// Data pages of the ring (a power of two). A record is 32 bytes, so 16 pages hold about
/// 2,000 handler entries or exits between two reads: a loop reading every pass never fills
/// it unless a pass lasts through a thousand interrupts.
const RING_PAGES: usize = 16;

/// A sample's bytes after its header: the event's id, the interrupted task's pid and tid, and
/// the time (`PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME`, in that order).
const SAMPLE_BODY: usize = 24;

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

/// A core's interrupt clock for one thread on it; see the module doc.
#[derive(Debug)]
pub struct IrqClock {
    /// Every event's file; the first owns the ring the others write into.
    fds: Vec<OwnedFd>,
    ring: NonNull<u8>,
    ring_len: usize,
    data_offset: usize,
    /// The data area's size, a power of two.
    data_size: usize,
    handlers: Handlers,
    /// The thread whose handlers count.
    tid: u32,
    lost_records: u64,
}

// SAFETY: the mapping is owned by the clock alone and reached only through `&mut self` (and
// the header's atomics); the events are on a core, not on the thread that opened them, so the
// clock may be moved to another thread.
unsafe impl Send for IrqClock {}

impl IrqClock {
    /// Starts timing the interrupt handlers that run on core `cpu` in the context of thread
    /// `tid` (a kernel thread id: [`crate::thread::thread_id`]).
    pub fn on_cpu(cpu: usize, tid: u32) -> Result<IrqClock, IrqClockError> {
        let candidates = tracefs_candidates();
        let tracefs = candidates
            .iter()
            .find(|root| std::path::Path::new(root).join("events/irq").is_dir())
            .ok_or(IrqClockError::NoTracefs)?;
        let mut entries = Vec::new();
        let mut exits = Vec::new();
        for (i, (subsystem, entry, exit)) in HANDLERS.iter().enumerate() {
            match open_pair(tracefs, subsystem, (entry, exit), cpu) {
                Ok([entry, exit]) => {
                    entries.push(entry);
                    exits.push(exit);
                }
                Err(e) if i < REQUIRED => return Err(e),
                Err(_) => {}
            }
        }
        let kinds = entries.len();
        let mut ids = Vec::with_capacity(2 * kinds);
        for (kind, ((_, entry_id), (_, exit_id))) in entries.iter().zip(&exits).enumerate() {
            ids.push((*entry_id, kind, true));
            ids.push((*exit_id, kind, false));
        }
        // The exits first, then the entries: each one enabled after the other so that no
        // handler's entry is recorded without its exit (the ring is the exits' first event's).
        let fds: Vec<OwnedFd> = exits.into_iter().chain(entries).map(|(fd, _)| fd).collect();
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
            handlers: Handlers::new(ids, kinds),
            tid,
            lost_records: 0,
        };
        // The header page says where the data are (kernels before 4.1 leave these 0).
        let header = clock.ring.as_ptr().cast::<perf::bindings::perf_event_mmap_page>();
        // SAFETY: the header page is mapped (above) and the kernel wrote these fields before
        // mmap returned; they do not change afterwards.
        let (offset, size) = unsafe { ((*header).data_offset as usize, (*header).data_size as usize) };
        if size.is_power_of_two() && offset + size <= ring_len {
            clock.data_offset = offset;
            clock.data_size = size;
        }
        let first = clock.fds[0].as_raw_fd();
        for fd in &clock.fds[1..] {
            // SAFETY: SET_OUTPUT redirects this event's records into the first event's ring;
            // both files are ours and open, and on the same core.
            if unsafe { perf::ioctls::SET_OUTPUT(fd.as_raw_fd(), first) } != 0 {
                return Err(IrqClockError::Ring(io::Error::last_os_error()));
            }
        }
        for fd in &clock.fds {
            // SAFETY: ENABLE starts a disabled event of ours; flags 0: this event alone.
            if unsafe { perf::ioctls::ENABLE(fd.as_raw_fd(), 0) } != 0 {
                return Err(IrqClockError::Ring(io::Error::last_os_error()));
            }
        }
        Ok(clock)
    }

    /// The time, ns, handlers took on the core in the thread's context between `from_ns` and
    /// `to_ns` (`CLOCK_MONOTONIC`), counting those that ended by now; what the ring held from
    /// before is read and forgotten. The thread asks this after a pass of its own: no handler
    /// that interrupted it can still be running. A load of the ring's head when it holds
    /// nothing.
    pub fn handler_ns_between(&mut self, from_ns: u64, to_ns: u64) -> u64 {
        self.handlers.window = (from_ns, to_ns);
        self.handlers.in_window_ns = 0;
        self.drain();
        self.handlers.in_window_ns
    }

    /// Records the ring dropped because it was full, or that could not be read: the handlers
    /// open then were forgotten.
    pub fn lost_records(&self) -> u64 {
        self.lost_records
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
        while tail < head {
            let [header, body_0, body_1, body_2] = self.read_words::<4>(tail);
            // perf_event_header: u32 type, u16 misc, u16 size.
            let header = header.to_ne_bytes();
            let kind = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
            let size = u16::from_ne_bytes([header[6], header[7]]) as u64;
            if size < 8 || size > (self.data_size as u64) || tail + size > head {
                // Not a record: what is left cannot be read, so it is skipped whole.
                self.lost_records += 1;
                self.handlers.forget_open();
                tail = head;
                break;
            }
            if kind == perf::bindings::PERF_RECORD_SAMPLE && size as usize >= 8 + SAMPLE_BODY {
                // u32 pid, u32 tid.
                let task = body_1.to_ne_bytes();
                let tid = u32::from_ne_bytes([task[4], task[5], task[6], task[7]]);
                if tid == self.tid {
                    self.handlers.event(body_0, body_2);
                }
            } else if kind == perf::bindings::PERF_RECORD_LOST && size >= 24 {
                self.lost_records += body_1;
                self.handlers.forget_open();
            }
            tail += size;
        }
        // Release: the kernel may overwrite what was read only after it was read.
        self.position(tail_at).store(tail, Ordering::Release);
    }

    /// `N` native-endian u64s of the data area from ring position `at` (8-aligned, as every
    /// record is), across its wrap.
    fn read_words<const N: usize>(&self, at: u64) -> [u64; N] {
        let mut out = [0u64; N];
        let mask = self.data_size - 1;
        for (i, word) in out.iter_mut().enumerate() {
            let offset = self.data_offset + ((at as usize + 8 * i) & mask);
            // SAFETY: `offset` is 8-aligned and lies in the data area with 8 bytes after it
            // (the area's size is a power of two of pages), inside the mapping of `ring_len`
            // bytes; the kernel writes only past the head read before, so nothing races.
            *word = unsafe { self.ring.as_ptr().add(offset).cast::<u64>().read_volatile() };
        }
        out
    }
}

impl Drop for IrqClock {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `on_cpu`, of `ring_len` bytes, unmapped once; nothing
        // borrows it past `self`. The files close after, with `fds`.
        unsafe {
            libc::munmap(self.ring.as_ptr().cast(), self.ring_len);
        }
    }
}

/// Handler entries and exits folded into time: the union of the open handlers, counted only
/// for its part inside the window asked about.
#[derive(Debug, Default)]
struct Handlers {
    /// Each event's id, the kind of handler it belongs to, and whether it is the entry.
    ids: Vec<(u64, usize, bool)>,
    /// When each kind's open handler began.
    open: Vec<Option<u64>>,
    /// Kinds open now, and when the first of them opened.
    open_count: usize,
    open_since_ns: u64,
    /// The window asked about, and the handlers' time inside it.
    window: (u64, u64),
    in_window_ns: u64,
}

impl Handlers {
    fn new(ids: Vec<(u64, usize, bool)>, kinds: usize) -> Self {
        Self { ids, open: vec![None; kinds], ..Self::default() }
    }

    /// Event `id` fired at `time_ns`. An exit whose entry was not seen is ignored; an entry of
    /// a kind still open (its exit lost) starts that kind again.
    fn event(&mut self, id: u64, time_ns: u64) {
        let Some(&(_, kind, entry)) = self.ids.iter().find(|(i, _, _)| *i == id) else { return };
        match (entry, self.open[kind]) {
            (true, Some(_)) => {
                // Its exit was lost: the open time starts again from the handlers still open.
                self.open[kind] = Some(time_ns);
                self.open_since_ns = self.open.iter().flatten().copied().min().unwrap_or(time_ns);
            }
            (true, None) => {
                if self.open_count == 0 {
                    self.open_since_ns = time_ns;
                }
                self.open_count += 1;
                self.open[kind] = Some(time_ns);
            }
            (false, Some(_)) => {
                self.open[kind] = None;
                self.open_count -= 1;
                if self.open_count == 0 {
                    let (from, to) = self.window;
                    self.in_window_ns += time_ns.min(to).saturating_sub(self.open_since_ns.max(from));
                }
            }
            (false, None) => {}
        }
    }

    /// Records were lost: whatever was open is forgotten.
    fn forget_open(&mut self) {
        self.open.iter_mut().for_each(|o| *o = None);
        self.open_count = 0;
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

/// A tracepoint event on core `cpu`, whatever runs there, every hit sampled with its id, the
/// task it interrupted and a `CLOCK_MONOTONIC` time stamp; opened disabled.
fn open_tracepoint(config: u64, cpu: usize) -> io::Result<OwnedFd> {
    let mut attr = perf::bindings::perf_event_attr {
        type_: perf::bindings::PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<perf::bindings::perf_event_attr>() as u32,
        config,
        sample_type: (perf::bindings::PERF_SAMPLE_IDENTIFIER
            | perf::bindings::PERF_SAMPLE_TID
            | perf::bindings::PERF_SAMPLE_TIME) as u64,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.set_disabled(1);
    attr.set_use_clockid(1);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::monotonic_ns;

    /// Two kinds: a hard interrupt (ids 1 in, 2 out) and a softirq (3 in, 4 out).
    fn handlers(window: (u64, u64)) -> Handlers {
        let mut h = Handlers::new(vec![(1, 0, true), (2, 0, false), (3, 1, true), (4, 1, false)], 2);
        h.window = window;
        h
    }

    #[test]
    fn nested_handlers_count_once_inside_the_window_and_an_unmatched_exit_is_ignored() {
        let mut h = handlers((0, 50));
        h.event(2, 5); // an exit whose entry came before the clock started
        h.event(3, 10); // softirq in
        h.event(1, 12); // a hard interrupt inside it
        h.event(2, 15);
        h.event(4, 40); // softirq out: 30 ns in all
        h.event(1, 45); // a handler that began in the window and ended after it: 5 ns inside
        h.event(2, 60);
        h.event(1, 100); // after the window
        h.event(2, 107);
        h.event(9, 200); // not a handler's event
        assert_eq!((h.in_window_ns, h.open_count), (35, 0));
    }

    #[test]
    fn a_lost_exit_is_forgotten_at_its_kinds_next_entry() {
        let mut h = handlers((0, 1_000));
        h.event(3, 10); // softirq in, its exit lost
        h.event(3, 500); // the next softirq: the first is forgotten, not counted to here
        h.event(4, 520);
        assert_eq!((h.in_window_ns, h.open_count), (20, 0));
        h.event(1, 600);
        h.forget_open(); // records lost
        h.event(2, 650);
        assert_eq!((h.in_window_ns, h.open_count), (20, 0));
    }

    /// Needs tracefs and the right to trace the kernel (root): `scripts/test` runs it.
    #[test]
    #[ignore = "needs root and tracefs"]
    fn a_thread_sending_over_loopback_on_its_core_is_charged_softirq_time_and_another_is_not() {
        std::thread::spawn(|| {
            crate::thread::pin_current_thread(0).expect("pin to core 0");
            let me = crate::thread::thread_id() as u32;
            let mut mine = IrqClock::on_cpu(0, me).expect("irq clock");
            // The same core's handlers, for a thread that is not running.
            let mut others = IrqClock::on_cpu(0, me + 1_000_000).expect("irq clock");
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let (mut irq, mut wall, mut other) = (0, 0, 0);
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
                irq += mine.handler_ns_between(start, end);
                other += others.handler_ns_between(start, end);
                wall += end - start;
            }
            assert!(irq > 0, "no softirq time seen in 2,000 loopback sends");
            assert!(irq < wall, "interrupt time {irq} ns exceeds the wall time {wall} ns");
            assert_eq!(other, 0, "handlers counted for a thread they did not interrupt");
            assert_eq!((mine.lost_records(), others.lost_records()), (0, 0));
        })
        .join()
        .unwrap();
    }
}
