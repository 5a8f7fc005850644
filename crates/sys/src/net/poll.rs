//! Waiting for sockets to become readable, with a timeout in nanoseconds: one socket or a set
//! of them made for one wait (`ppoll(2)`), or an [`Epoll`] set the sockets join once and stay
//! in, for a loop that waits on many sockets again and again (a member with fifty clients spent
//! a tenth of its core in `ppoll`'s per-socket poll calls).
//!
//! An idle receiver sleeps here instead of spinning on non-blocking reads. A wait allocates
//! nothing; a [`PollSet`] allocates its array once, when made. A signal ends a wait early with
//! the `Interrupted` error.

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

fn timespec(timeout: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    }
}

fn ppoll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ts = timespec(timeout);
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfd entries and `ts` a valid
    // timespec, both outliving the call; a null signal mask leaves the mask alone.
    let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc as usize) }
}

/// Waits up to `timeout` for `socket` to be readable; returns whether it is.
pub fn wait_readable(socket: &impl AsFd, timeout: Duration) -> io::Result<bool> {
    let mut fd = [libc::pollfd { fd: socket.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    Ok(ppoll(&mut fd, timeout)? > 0 && fd[0].revents & libc::POLLIN != 0)
}

/// Several sockets to wait on together; borrows them for as long as it lives.
#[derive(Debug)]
pub struct PollSet<'a> {
    fds: Vec<libc::pollfd>,
    _sockets: PhantomData<&'a ()>,
}

impl<'a> PollSet<'a> {
    /// A set waiting for any of `sockets` to be readable, in their order.
    pub fn readable<S: AsFd + 'a>(sockets: impl IntoIterator<Item = &'a S>) -> Self {
        let fds = sockets
            .into_iter()
            .map(|s| libc::pollfd { fd: s.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        Self { fds, _sockets: PhantomData }
    }

    /// Waits up to `timeout` (zero: just look) and returns how many sockets are ready.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        ppoll(&mut self.fds, timeout)
    }

    /// Whether socket `index` had anything at the last [`Self::wait`]: readable, or an error
    /// pending (a connected datagram socket's ICMP error), or hung up (false for an index out
    /// of the set).
    pub fn is_ready(&self, index: usize) -> bool {
        self.fds.get(index).is_some_and(|fd| fd.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
    }

    /// Whether socket `index` was readable at the last [`Self::wait`] (false for an index out
    /// of the set).
    pub fn is_readable(&self, index: usize) -> bool {
        self.fds.get(index).is_some_and(|fd| fd.revents & libc::POLLIN != 0)
    }
}

/// A level-triggered `epoll(7)` set: sockets join it once (by their descriptor, which is also
/// how a wait names them) and are reported at every wait while they are readable, as `ppoll`
/// would; the timeout keeps nanoseconds (`epoll_pwait2`, Linux 5.11; older kernels round it up
/// to a millisecond). A socket closed leaves the set by itself.
///
/// # Deadlines without a timer a wait
///
/// [`Epoll::wait`]'s timeout arms a kernel timer at every wait and cancels it at every early
/// wake-up. When the timeout ends before the next scheduler tick (4 ms at 250 Hz), each of the
/// two reprograms the CPU's timer device, which a virtual machine pays as an exit to its
/// hypervisor (on this project's 2-vCPU guest a store member's write, three waits, took about
/// 30 us longer at one client for it: `scripts/kv-write-cost`, before and after).
/// [`Epoll::wait_until`] takes an absolute deadline instead and keeps it on a `timerfd` in the
/// set that it re-arms only when a deadline comes earlier than the one armed: a later one is
/// left to fire early (a wake-up that finds nothing due and waits again, re-arming then), so a
/// loop whose deadlines move later as it works (a heartbeat put off by every message sent)
/// re-arms about once a deadline, not once a wait.
#[derive(Debug)]
pub struct Epoll {
    fd: std::os::fd::OwnedFd,
    events: Vec<libc::epoll_event>,
    ready: usize,
    /// Whether the kernel has `epoll_pwait2` (until it said otherwise).
    nanoseconds: bool,
    /// The deadline timer, made at the first [`Epoll::wait_until`], and what it is armed for
    /// (`CLOCK_MONOTONIC` ns; `None` when disarmed or fired).
    timer: Option<(std::os::fd::OwnedFd, Option<u64>)>,
    /// Times the deadline timer was armed.
    arms: u64,
}

/// The token the deadline timer is registered under: no descriptor has it.
const TIMER_TOKEN: u64 = u64::MAX;

/// What a wait reported of one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// The socket's descriptor.
    pub fd: std::os::fd::RawFd,
    /// Readable (or at its end).
    pub readable: bool,
    /// An error pending (a connected datagram socket's ICMP error) or hung up.
    pub error: bool,
    /// Writable (only for a socket waited on for output: [`Epoll::watch`]).
    pub writable: bool,
}

impl Epoll {
    /// An empty set reporting up to `batch` sockets a wait (at least one).
    pub fn new(batch: usize) -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new descriptor
        // that nothing else owns.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and is owned here alone.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let events = vec![libc::epoll_event { events: 0, u64: 0 }; batch.max(1)];
        Ok(Self { fd, events, ready: 0, nanoseconds: true, timer: None, arms: 0 })
    }

    fn control(&self, op: libc::c_int, socket: std::os::fd::BorrowedFd<'_>, events: u32) -> io::Result<()> {
        let raw = socket.as_raw_fd();
        let mut event = libc::epoll_event { events, u64: raw as u64 };
        // SAFETY: both descriptors are open for the call (`socket` is borrowed, `self.fd` owned)
        // and `event` is a valid epoll_event that outlives it.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, raw, &mut event) };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Adds `socket`, waited on for input (an error or hang-up is reported too).
    pub fn add(&self, socket: &impl AsFd) -> io::Result<()> {
        match self.control(libc::EPOLL_CTL_ADD, socket.as_fd(), libc::EPOLLIN as u32) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            done => done,
        }
    }

    /// Waits on `socket` for input when `readable`, for room to write when `writable` (an
    /// error or hang-up is reported either way): added, changed, or (neither) taken out.
    pub fn watch(&self, socket: &impl AsFd, readable: bool, writable: bool) -> io::Result<()> {
        if !readable && !writable {
            return self.remove(socket);
        }
        let events = if readable { libc::EPOLLIN as u32 } else { 0 }
            | if writable { libc::EPOLLOUT as u32 } else { 0 };
        match self.control(libc::EPOLL_CTL_MOD, socket.as_fd(), events) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.control(libc::EPOLL_CTL_ADD, socket.as_fd(), events)
            }
            done => done,
        }
    }

    /// Takes `socket` out of the set (it stays open; closing it would have done the same).
    pub fn remove(&self, socket: &impl AsFd) -> io::Result<()> {
        match self.control(libc::EPOLL_CTL_DEL, socket.as_fd(), 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            done => done,
        }
    }

    /// Waits up to `timeout` (zero: just look) and returns how many sockets are ready; they are
    /// in [`Self::ready`] until the next wait.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        self.wait_for(Some(timeout))
    }

    /// Waits until a socket is ready or `CLOCK_MONOTONIC` reaches `deadline_ns` (`None`: no
    /// deadline), and returns how many sockets are ready, as [`Self::wait`]; see the type's
    /// docs for how the deadline is kept. It may return with none ready before the deadline.
    pub fn wait_until(&mut self, deadline_ns: Option<u64>, now_ns: u64) -> io::Result<usize> {
        let Some(deadline) = deadline_ns else { return self.wait_for(None) };
        if deadline <= now_ns {
            return self.wait_for(Some(Duration::ZERO));
        }
        if self.timer.is_none() {
            // SAFETY: timerfd_create takes no pointers; a non-negative result is a new
            // descriptor that nothing else owns.
            let fd = unsafe {
                libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` was just returned by the kernel and is owned here alone.
            let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: TIMER_TOKEN };
            // SAFETY: both descriptors are open (owned here) and `event` is a valid epoll_event
            // that outlives the call.
            let rc = unsafe {
                libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut event)
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            self.timer = Some((fd, None));
        }
        let (timer, armed) = self.timer.as_mut().expect("made above");
        if armed.is_none_or(|at| deadline < at) {
            let spec = libc::itimerspec {
                it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
                it_value: libc::timespec {
                    tv_sec: (deadline / 1_000_000_000) as libc::time_t,
                    tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
                },
            };
            // SAFETY: `timer` is an open timerfd owned here, `spec` a valid itimerspec that
            // outlives the call, and a null old value is allowed.
            let rc = unsafe {
                libc::timerfd_settime(timer.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            *armed = Some(deadline);
            self.arms += 1;
        }
        self.wait_for(None)
    }

    /// Times [`Self::wait_until`] armed its deadline timer (a wait's own timeout arms one at
    /// every wait).
    pub fn timer_arms(&self) -> u64 {
        self.arms
    }

    fn wait_for(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        self.ready = 0;
        let (events, capacity) = (self.events.as_mut_ptr(), self.events.len() as libc::c_int);
        let mut rc = -1;
        if self.nanoseconds {
            let ts = timeout.map(timespec);
            let ts = ts.as_ref().map_or(std::ptr::null(), |ts| ts as *const libc::timespec);
            // SAFETY: `events` is a live, writable array of `capacity` epoll_events and `ts` a
            // valid timespec (or null: no timeout), both outliving the call; a null signal mask
            // leaves the mask alone.
            rc = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    events,
                    capacity,
                    ts,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            } as libc::c_int;
            if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                self.nanoseconds = false;
            }
        }
        if !self.nanoseconds {
            let ms = timeout.map_or(-1, |t| {
                t.as_nanos().div_ceil(1_000_000).min(libc::c_int::MAX as u128) as libc::c_int
            });
            // SAFETY: as above, with the timeout in milliseconds.
            rc = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events, capacity, ms) };
        }
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.ready = rc as usize;
        // The deadline timer fired: read (which disarms it) and left out of what is reported.
        if let Some(at) = self.events[..self.ready].iter().position(|e| e.u64 == TIMER_TOKEN) {
            self.events.swap(at, self.ready - 1);
            self.ready -= 1;
            if let Some((timer, armed)) = self.timer.as_mut() {
                let mut expirations = [0u8; 8];
                // SAFETY: `timer` is an open timerfd owned here and `expirations` a writable
                // buffer of the 8 bytes a timerfd read fills; it does not block (TFD_NONBLOCK).
                let _ = unsafe { libc::read(timer.as_raw_fd(), expirations.as_mut_ptr().cast(), 8) };
                *armed = None;
            }
        }
        Ok(self.ready)
    }

    /// The sockets the last wait reported.
    pub fn ready(&self) -> impl Iterator<Item = Readiness> + '_ {
        self.events[..self.ready].iter().map(|e| {
            let (events, fd) = (e.events, e.u64);
            Readiness {
                fd: fd as std::os::fd::RawFd,
                readable: events & libc::EPOLLIN as u32 != 0,
                error: events & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0,
                writable: events & libc::EPOLLOUT as u32 != 0,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_set_says_which_socket_is_readable() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut set = PollSet::readable([&a, &b]);
        assert_eq!(set.wait(Duration::ZERO).unwrap(), 0);
        a.send_to(b"x", b.local_addr().unwrap()).unwrap();
        assert_eq!(set.wait(Duration::from_secs(2)).unwrap(), 1);
        assert!(!set.is_readable(0));
        assert!(set.is_readable(1));
        assert!(!set.is_readable(2));
    }

    #[test]
    fn an_epoll_set_reports_readable_sockets_at_every_wait_until_read_or_removed() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_nonblocking(true).unwrap();
        let mut set = Epoll::new(2).unwrap();
        set.add(&a).unwrap();
        set.add(&b).unwrap();
        set.add(&b).unwrap();
        assert_eq!(set.wait(Duration::ZERO).unwrap(), 0);
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        b.send_to(b"y", b.local_addr().unwrap()).unwrap();
        assert_eq!(set.wait(Duration::from_secs(2)).unwrap(), 2);
        assert!(set.ready().all(|r| r.readable && !r.error));
        // Level-triggered: both again while unread; one read, the other alone.
        assert_eq!(set.wait(Duration::ZERO).unwrap(), 2);
        a.recv(&mut [0u8; 8]).unwrap();
        assert_eq!(set.wait(Duration::ZERO).unwrap(), 1);
        assert_eq!(set.ready().next().unwrap().fd, b.as_raw_fd());
        set.remove(&b).unwrap();
        set.remove(&b).unwrap();
        assert_eq!(set.wait(Duration::ZERO).unwrap(), 0, "removed while readable");
    }

    #[test]
    fn an_epoll_wait_keeps_its_timeout_below_a_millisecond() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut set = Epoll::new(4).unwrap();
        set.add(&a).unwrap();
        let start = std::time::Instant::now();
        assert_eq!(set.wait(Duration::from_micros(200)).unwrap(), 0);
        let took = start.elapsed();
        assert!(took >= Duration::from_micros(200), "woke early: {took:?}");
        // A millisecond's rounding would show as 1 ms or more every time; a busy machine
        // may make one wait long, so a few tries.
        let mut shortest = took;
        for _ in 0..20 {
            let start = std::time::Instant::now();
            set.wait(Duration::from_micros(200)).unwrap();
            shortest = shortest.min(start.elapsed());
        }
        assert!(shortest < Duration::from_micros(900), "every wait took {shortest:?} or more");
    }

    fn now() -> u64 {
        crate::clock::monotonic_ns()
    }

    #[test]
    fn a_deadline_ends_a_wait_and_is_armed_again_only_when_it_comes_earlier() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut set = Epoll::new(4).unwrap();
        set.add(&a).unwrap();
        // Woken at the deadline, not before, with nothing reported (the timer is not a socket).
        let start = now();
        let deadline = start + 2_000_000;
        while now() < deadline {
            assert_eq!(set.wait_until(Some(deadline), now()).unwrap(), 0);
        }
        assert_eq!(set.timer_arms(), 1, "one deadline, one arming");
        // Later deadlines while one is armed leave it: it fires early and the next wait arms.
        let first = now() + 3_000_000;
        set.wait_until(Some(first), now()).unwrap();
        assert!(now() >= first, "woke before the armed deadline with nothing ready");
        assert_eq!(set.timer_arms(), 2);
        // Far enough that no stall of a busy machine lets it fire during the steps below.
        let armed = now() + 10_000_000_000;
        a.send_to(b"x", a.local_addr().unwrap()).unwrap();
        assert_eq!(set.wait_until(Some(armed), now()).unwrap(), 1, "a socket ends the wait");
        assert_eq!(set.ready().next().unwrap().fd, a.as_raw_fd());
        a.recv(&mut [0u8; 8]).unwrap();
        for later in 1..5 {
            a.send_to(b"x", a.local_addr().unwrap()).unwrap();
            set.wait_until(Some(armed + later * 1_000_000), now()).unwrap();
            a.recv(&mut [0u8; 8]).unwrap();
        }
        assert_eq!(set.timer_arms(), 3, "later deadlines did not arm again");
        // An earlier one does, and ends the wait on time.
        let earlier = now() + 1_000_000;
        set.wait_until(Some(earlier), now()).unwrap();
        assert!(now() >= earlier);
        assert_eq!(set.timer_arms(), 4);
        // A deadline passed looks and returns at once; none waits for input alone.
        assert_eq!(set.wait_until(Some(now() - 1), now()).unwrap(), 0);
        a.send_to(b"x", a.local_addr().unwrap()).unwrap();
        assert_eq!(set.wait_until(None, now()).unwrap(), 1);
        assert_eq!(set.timer_arms(), 4);
        // A deadline past the kernel's range (a loop with nothing due) is armed, not refused:
        // the kernel holds it at its farthest time.
        assert_eq!(set.wait_until(Some(u64::MAX), now()).unwrap(), 1, "the unread datagram");
        assert_eq!(set.timer_arms(), 5);
    }

    #[test]
    fn waiting_on_a_silent_socket_times_out() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let start = std::time::Instant::now();
        assert!(!wait_readable(&a, Duration::from_millis(20)).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(19));
    }
}
