//! The I/O thread: reads datagrams from UDP sockets straight into the buffers of each
//! socket's handler [`Inbox`](crate::inbox::Inbox), so handlers never make a system call to
//! receive and never block.
//!
//! One thread serves every socket: it waits in `poll(2)` (at most 10 ms, to see the stop flag),
//! then reads each readable socket until it would block or `burst` datagrams were read, so one
//! busy socket cannot starve the others. When a handler's pool is dry (it is behind its
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

use kairos_metrics::sys;

use crate::inbox::Ingress;

/// The I/O thread's knobs.
#[derive(Debug, Clone, Copy)]
pub struct IoConfig {
    pub core: Option<usize>,
    /// `SCHED_FIFO` priority to ask for (0: do not ask). Below the shell's 80 by default.
    pub fifo_priority: i32,
    /// Datagrams read from one socket before the next socket's turn.
    pub burst: usize,
}

impl Default for IoConfig {
    fn default() -> Self {
        Self { core: None, fifo_priority: 70, burst: 32 }
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

fn serve(mut sources: Vec<(UdpSocket, Ingress)>, config: IoConfig, stop: &AtomicBool) -> IoReport {
    if let Some(core) = config.core {
        let _ = sys::pin_current_thread(core);
    }
    let rt = (config.fifo_priority > 0).then(|| sys::set_fifo(config.fifo_priority));
    let mut counts = vec![SourceCounts::default(); sources.len()];
    let mut fds: Vec<libc::pollfd> = sources
        .iter()
        .map(|(s, _)| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    let mut scratch = vec![0u8; 65_536];
    let burst = config.burst.max(1);
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `fds` is a live array of `fds.len()` pollfd entries for the call's duration.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 10) };
        if ready <= 0 {
            continue;
        }
        for (i, (socket, ingress)) in sources.iter_mut().enumerate() {
            if fds[i].revents & libc::POLLIN == 0 {
                continue;
            }
            for _ in 0..burst {
                match ingress.push_with(|buf| socket.recv(buf)) {
                    Ok(true) => counts[i].delivered += 1,
                    Ok(false) => match socket.recv(&mut scratch) {
                        Ok(_) => counts[i].dropped += 1,
                        Err(_) => break,
                    },
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
