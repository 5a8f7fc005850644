//! The I/O thread: reads datagrams from UDP sockets straight into the buffers of each
//! socket's handler [`Inbox`](crate::inbox::Inbox), so handlers never make a system call to
//! receive and never block.
//!
//! One thread serves every socket: it waits in `poll(2)` (at most 10 ms, to see the stop flag),
//! then reads each readable socket with `recvmmsg` straight into up to 32 of its handler's free
//! buffers at once, until it would block or `burst` datagrams were read, so one busy socket
//! cannot starve the others. When a handler's pool is dry (it is behind its
//! promise), the datagram is still read, so the socket does not fill, and dropped: the
//! handler loses its own newest data and no one else's; the drop is counted per socket.
//!
//! Policy is the caller's: the thread is pinned and made `SCHED_FIFO` as configured. Run it at
//! a priority *below* the shell's on the shell's core, and it takes only time the handlers leave
//! (their admission is unaffected) while still being ahead of every normal-priority thread.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::inbox::Ingress;
use kairos_sys::clock::monotonic_ns;
use kairos_sys::thread::{pin_current_thread, set_fifo};

/// The I/O thread's knobs.
#[derive(Debug, Clone, Copy)]
pub struct IoConfig {
    pub core: Option<usize>,
    /// `SCHED_FIFO` priority to ask for (0: do not ask). Below the shell's 80 by default.
    pub fifo_priority: i32,
    /// Datagrams read from one socket before the next socket's turn.
    pub burst: usize,
    /// Keep polling without sleeping this long after the last datagram (0: always sleep).
    pub busy_poll_ns: u64,
}

impl Default for IoConfig {
    fn default() -> Self {
        Self { core: None, fifo_priority: 70, burst: 32, busy_poll_ns: 50_000 }
    }
}

/// Per socket: what the I/O thread did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceCounts {
    /// Datagrams queued to the handler.
    pub delivered: u64,
    /// Datagrams read and dropped because the handler's pool was dry.
    pub dropped: u64,
}

/// What the I/O thread did.
#[derive(Debug, Clone)]
pub struct IoReport {
    /// In the order the sockets were given.
    pub sources: Vec<SourceCounts>,
    pub realtime: bool,
    pub realtime_error: Option<String>,
}

/// A running I/O thread.
#[derive(Debug)]
pub struct IoThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<IoReport>>,
}

/// Starts an I/O thread reading each socket into its ingress. The sockets are made
/// non-blocking.
pub fn spawn_udp(sources: Vec<(UdpSocket, Ingress)>, config: IoConfig) -> io::Result<IoThread> {
    for (socket, _) in &sources {
        socket.set_nonblocking(true)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("kairos-rtu-io".into())
        .spawn(move || serve(sources, config, &flag))?;
    Ok(IoThread { stop, thread: Some(thread) })
}

impl IoThread {
    /// Stops the thread and reports.
    pub fn stop(mut self) -> IoReport {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("stopped once");
        match thread.join() {
            Ok(report) => report,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Reads up to `bufs.len()` datagrams in one `recvmmsg`, each into its buffer; sets their
/// lengths. Never blocks.
fn recv_burst(socket: &UdpSocket, bufs: &mut [&mut [u8]], lens: &mut [usize]) -> io::Result<usize> {
    const MAX: usize = Ingress::MAX_BURST;
    let n = bufs.len().min(MAX);
    // SAFETY: iovec and mmsghdr are plain C structs for which all-zero is a valid value.
    let mut iovs: [libc::iovec; MAX] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        iovs[i] = libc::iovec { iov_base: bufs[i].as_mut_ptr().cast(), iov_len: bufs[i].len() };
        msgs[i].msg_hdr.msg_iov = &mut iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` each point at one live iovec describing a distinct buffer borrowed
    // mutably for this call; no address or control buffers are asked for; the socket is open.
    let got = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = got as usize;
    for i in 0..got {
        lens[i] = msgs[i].msg_len as usize;
    }
    Ok(got)
}

fn serve(mut sources: Vec<(UdpSocket, Ingress)>, config: IoConfig, stop: &AtomicBool) -> IoReport {
    if let Some(core) = config.core {
        let _ = pin_current_thread(core);
    }
    let rt = (config.fifo_priority > 0).then(|| set_fifo(config.fifo_priority));
    let mut counts = vec![SourceCounts::default(); sources.len()];
    let mut fds: Vec<libc::pollfd> = sources
        .iter()
        .map(|(s, _)| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    let mut scratch = vec![0u8; 65_536];
    let burst = config.burst.max(1);
    // While datagrams keep coming, the thread polls without sleeping for up to `busy_poll_ns`
    // after the last one (as NAPI does): a sleep and wake-up per short burst cost more than the
    // datagrams here. Then it sleeps in `poll` again.
    let mut last_data = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let busy = monotonic_ns().saturating_sub(last_data) < config.busy_poll_ns;
        // SAFETY: `fds` is a live array of `fds.len()` pollfd entries for the call's duration.
        let ready =
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, if busy { 0 } else { 10 }) };
        if ready <= 0 {
            continue;
        }
        last_data = monotonic_ns();
        for (i, (socket, ingress)) in sources.iter_mut().enumerate() {
            if fds[i].revents & libc::POLLIN == 0 {
                continue;
            }
            let mut read = 0;
            while read < burst {
                match ingress.push_burst_with(burst - read, |bufs, lens| recv_burst(socket, bufs, lens)) {
                    Ok(0) => match socket.recv(&mut scratch) {
                        // No free buffer: the handler is behind. Read and drop its newest.
                        Ok(_) => {
                            counts[i].dropped += 1;
                            read += 1;
                        }
                        Err(_) => break,
                    },
                    Ok(n) => {
                        counts[i].delivered += n as u64;
                        read += n;
                    }
                    // Would block (the socket is empty), or an error to leave to the next poll.
                    Err(_) => break,
                }
            }
        }
    }
    IoReport {
        sources: counts,
        realtime: matches!(rt, Some(Ok(()))),
        realtime_error: match rt {
            Some(Err(e)) => Some(e.to_string()),
            _ => None,
        },
    }
}
