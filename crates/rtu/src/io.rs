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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kairos_sys::clock::monotonic_ns;
use kairos_sys::net::MmsgBatch;
use kairos_sys::net::poll::PollSet;
use kairos_sys::stoppable_thread::{StoppableThread, ThreadDied};
use kairos_sys::thread::{pin_current_thread, set_fifo};

use crate::inbox::Ingress;

// The ingress hands the I/O thread at most this many buffers; one `recvmmsg` must take them all.
const _: () = assert!(Ingress::MAX_BURST <= kairos_sys::net::MAX_BURST);

/// The I/O thread's knobs.
#[derive(Debug, Clone, Copy)]
pub struct IoConfig {
    /// Core to pin the thread to (`None`: wherever the kernel puts it).
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
    /// `SCHED_FIFO` was granted.
    pub realtime: bool,
    /// Why not, when it was asked for and refused.
    pub realtime_error: Option<String>,
}

/// A running I/O thread; dropping it stops and joins the thread (its report is then lost).
#[derive(Debug)]
pub struct IoThread {
    thread: StoppableThread<IoReport>,
}

/// Starts an I/O thread reading each socket into its ingress. The sockets are made
/// non-blocking.
pub fn spawn_udp(sources: Vec<(UdpSocket, Ingress)>, config: IoConfig) -> io::Result<IoThread> {
    for (socket, _) in &sources {
        socket.set_nonblocking(true)?;
    }
    let thread =
        StoppableThread::spawn("kairos-rtu-io", move |stop: &AtomicBool| serve(sources, config, stop))?;
    Ok(IoThread { thread })
}

impl IoThread {
    /// Stops the thread and reports, or says that it died.
    pub fn stop(self) -> Result<IoReport, ThreadDied> {
        self.thread.stop()
    }
}

fn serve(sources: Vec<(UdpSocket, Ingress)>, config: IoConfig, stop: &AtomicBool) -> IoReport {
    if let Some(core) = config.core {
        let _ = pin_current_thread(core);
    }
    let rt = (config.fifo_priority > 0).then(|| set_fifo(config.fifo_priority));
    let mut counts = vec![SourceCounts::default(); sources.len()];
    let (sockets, mut ingresses): (Vec<UdpSocket>, Vec<Ingress>) = sources.into_iter().unzip();
    let mut readable = PollSet::readable(&sockets);
    let mut batch = MmsgBatch::new();
    let mut scratch = vec![0u8; 65_536];
    let burst = config.burst.max(1);
    // While datagrams keep coming, the thread polls without sleeping for up to `busy_poll_ns`
    // after the last one (as NAPI does): a sleep and wake-up per short burst cost more than the
    // datagrams here. Then it sleeps in `poll` again.
    let mut last_data = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let busy = monotonic_ns().saturating_sub(last_data) < config.busy_poll_ns;
        let timeout = if busy { Duration::ZERO } else { Duration::from_millis(10) };
        // An error (a signal) is a wake-up with nothing ready, as a timeout is.
        if !matches!(readable.wait(timeout), Ok(ready) if ready > 0) {
            continue;
        }
        last_data = monotonic_ns();
        for (i, (socket, ingress)) in sockets.iter().zip(&mut ingresses).enumerate() {
            if !readable.is_readable(i) {
                continue;
            }
            let mut read = 0;
            while read < burst {
                let filled = ingress.push_burst_with(burst - read, |bufs, lens| {
                    let n = batch.recv_into(socket, bufs, false)?;
                    lens[..n].copy_from_slice(batch.lengths());
                    Ok::<_, io::Error>(n)
                });
                match filled {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::inbox;

    #[test]
    fn dropping_the_io_thread_stops_it_and_closes_its_sockets() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = socket.local_addr().unwrap();
        let (ingress, _inbox) = inbox(8, 64).unwrap();
        let io =
            spawn_udp(vec![(socket, ingress)], IoConfig { fifo_priority: 0, ..IoConfig::default() }).unwrap();
        // While the thread runs it holds the socket, so the port is taken.
        assert!(UdpSocket::bind(address).is_err());
        drop(io);
        // Joined: the thread returned and dropped the socket before `drop` did.
        UdpSocket::bind(address).expect("the port is free once the I/O thread is gone");
    }

    #[test]
    fn a_thread_that_died_makes_stop_an_error() {
        let io = IoThread {
            thread: StoppableThread::spawn("kairos-rtu-io", |_: &AtomicBool| -> IoReport {
                panic!("socket table corrupt")
            })
            .unwrap(),
        };
        let err = io.stop().unwrap_err();
        assert_eq!(err.to_string(), "thread kairos-rtu-io died: socket table corrupt");
    }

    #[test]
    fn stop_reports_what_each_socket_delivered() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = socket.local_addr().unwrap();
        let (ingress, mut inbox) = inbox(64, 64).unwrap();
        let io =
            spawn_udp(vec![(socket, ingress)], IoConfig { fifo_priority: 0, ..IoConfig::default() }).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..10u8 {
            sender.send_to(&[i; 3], address).unwrap();
        }
        let mut read = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while read.len() < 10 && std::time::Instant::now() < deadline {
            inbox.drain(16, |d| read.push(d.to_vec()));
            std::thread::sleep(Duration::from_millis(1));
        }
        let report = io.stop().unwrap();
        assert_eq!(report.sources[0], SourceCounts { delivered: 10, dropped: 0 });
        assert_eq!(read, (0..10u8).map(|i| vec![i; 3]).collect::<Vec<_>>());
    }
}
