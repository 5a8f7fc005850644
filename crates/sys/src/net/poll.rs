//! Waiting for sockets to become readable (`ppoll(2)`), one socket or a set of them, with a
//! timeout in nanoseconds.
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
    fn waiting_on_a_silent_socket_times_out() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let start = std::time::Instant::now();
        assert!(!wait_readable(&a, Duration::from_millis(20)).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(19));
    }
}
