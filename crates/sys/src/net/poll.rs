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
#[derive(Debug)]
pub struct Epoll {
    fd: std::os::fd::OwnedFd,
    events: Vec<libc::epoll_event>,
    ready: usize,
    /// Whether the kernel has `epoll_pwait2` (until it said otherwise).
    nanoseconds: bool,
}

/// What a wait reported of one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// The socket's descriptor.
    pub fd: std::os::fd::RawFd,
    /// Readable (or at its end).
    pub readable: bool,
    /// An error pending (a connected datagram socket's ICMP error) or hung up.
    pub error: bool,
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
        Ok(Self { fd, events, ready: 0, nanoseconds: true })
    }

    fn control(&self, op: libc::c_int, socket: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        let raw = socket.as_raw_fd();
        let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: raw as u64 };
        // SAFETY: both descriptors are open for the call (`socket` is borrowed, `self.fd` owned)
        // and `event` is a valid epoll_event that outlives it.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, raw, &mut event) };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Adds `socket`, waited on for input (an error or hang-up is reported too).
    pub fn add(&self, socket: &impl AsFd) -> io::Result<()> {
        match self.control(libc::EPOLL_CTL_ADD, socket.as_fd()) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            done => done,
        }
    }

    /// Takes `socket` out of the set (it stays open; closing it would have done the same).
    pub fn remove(&self, socket: &impl AsFd) -> io::Result<()> {
        match self.control(libc::EPOLL_CTL_DEL, socket.as_fd()) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            done => done,
        }
    }

    /// Waits up to `timeout` (zero: just look) and returns how many sockets are ready; they are
    /// in [`Self::ready`] until the next wait.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        self.ready = 0;
        let (events, capacity) = (self.events.as_mut_ptr(), self.events.len() as libc::c_int);
        let mut rc = -1;
        if self.nanoseconds {
            let ts = timespec(timeout);
            // SAFETY: `events` is a live, writable array of `capacity` epoll_events and `ts` a
            // valid timespec, both outliving the call; a null signal mask leaves the mask alone.
            rc = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    events,
                    capacity,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            } as libc::c_int;
            if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                self.nanoseconds = false;
            }
        }
        if !self.nanoseconds {
            let ms = timeout.as_nanos().div_ceil(1_000_000).min(libc::c_int::MAX as u128) as libc::c_int;
            // SAFETY: as above, with the timeout in milliseconds.
            rc = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events, capacity, ms) };
        }
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.ready = rc as usize;
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

    #[test]
    fn waiting_on_a_silent_socket_times_out() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let start = std::time::Instant::now();
        assert!(!wait_readable(&a, Duration::from_millis(20)).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(19));
    }
}
