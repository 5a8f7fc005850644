//! The UDP port: bursts over `sendmmsg` / `recvmmsg` (one syscall per burst, not per packet:
//! one `send` per packet tops out near 0.4 Mpps on this kind of machine), with the kernel's
//! software receive time stamp of every datagram (`SO_TIMESTAMPING`).
//!
//! Kernel time stamps are `CLOCK_REALTIME`; the experiment's clock is `CLOCK_MONOTONIC`. Each
//! burst converts with the offset between the two read just after the `recvmmsg`, so a clock
//! step between bursts costs at most one burst's accuracy.
//!
//! All of the crate's `unsafe` for sockets lives here.

use std::mem::{MaybeUninit, size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use kairos_sys::clock::monotonic_ns;

use crate::packet::{Packet, WIRE_LEN};
use crate::port::{Capabilities, Port, PortError, PortStats, RxTimestamps};

/// Most datagrams one call moves.
pub const MAX_BURST: usize = 64;
/// Room for one `SCM_TIMESTAMPING` control message (three timespecs) and its header.
const CMSG_SPACE: usize = 128;

#[derive(Debug)]
pub struct UdpPort {
    socket: UdpSocket,
    stats: PortStats,
    rx_bufs: Box<[[u8; 128]; MAX_BURST]>,
    cmsg_bufs: Box<[[u8; CMSG_SPACE]; MAX_BURST]>,
    tx_bufs: Box<[[u8; WIRE_LEN]; MAX_BURST]>,
}

fn realtime_ns() -> u64 {
    let mut ts = MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: `ts` is a valid out-pointer for one timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, ts.as_mut_ptr()) };
    // SAFETY: clock_gettime filled it.
    let ts = unsafe { ts.assume_init() };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl UdpPort {
    /// Wraps a bound socket, connects it to `peer`, makes it non-blocking, turns on kernel
    /// receive time stamps and asks for a receive buffer of `rcvbuf` bytes.
    pub fn new(socket: UdpSocket, peer: SocketAddr, rcvbuf: usize) -> Result<Self, PortError> {
        socket.connect(peer).map_err(|source| PortError::Io { what: "connect", source })?;
        socket.set_nonblocking(true).map_err(|source| PortError::Io { what: "set_nonblocking", source })?;
        let fd = socket.as_raw_fd();
        let flags: libc::c_uint = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
        set_option(fd, libc::SO_TIMESTAMPING, flags as libc::c_int, "SO_TIMESTAMPING")?;
        // Best effort: the kernel caps it at net.core.rmem_max unless root uses the FORCE form.
        let size = rcvbuf.min(i32::MAX as usize) as libc::c_int;
        if set_option(fd, libc::SO_RCVBUFFORCE, size, "SO_RCVBUFFORCE").is_err() {
            let _ = set_option(fd, libc::SO_RCVBUF, size, "SO_RCVBUF");
        }
        Ok(Self {
            socket,
            stats: PortStats::default(),
            rx_bufs: Box::new([[0; 128]; MAX_BURST]),
            cmsg_bufs: Box::new([[0; CMSG_SPACE]; MAX_BURST]),
            tx_bufs: Box::new([[0; WIRE_LEN]; MAX_BURST]),
        })
    }

    /// Sends datagrams with no UDP checksum (`SO_NO_CHECK`; allowed over IPv4). Over a veth the
    /// kernel leaves the checksum for an offload that never happens, which is harmless between
    /// two kernels but wrong once a peer reading frames off the interface sends them back.
    pub fn send_without_checksum(&self) -> Result<(), PortError> {
        set_option(self.socket.as_raw_fd(), libc::SO_NO_CHECK, 1, "SO_NO_CHECK")
    }

    /// A second port on the same socket (for a peer that answers to the sending port).
    pub fn try_clone(&self) -> Result<Self, PortError> {
        let socket = self.socket.try_clone().map_err(|source| PortError::Io { what: "dup", source })?;
        Ok(Self {
            socket,
            stats: PortStats::default(),
            rx_bufs: Box::new([[0; 128]; MAX_BURST]),
            cmsg_bufs: Box::new([[0; CMSG_SPACE]; MAX_BURST]),
            tx_bufs: Box::new([[0; WIRE_LEN]; MAX_BURST]),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Datagrams the kernel dropped for want of receive-buffer room, if it says
    /// (`SO_RXQ_OVFL` is per message; this reads the socket's drop counter from `/proc`).
    pub fn kernel_drops(&self) -> Option<u64> {
        let port = self.socket.local_addr().ok()?.port();
        let text = std::fs::read_to_string("/proc/net/udp").ok()?;
        text.lines().skip(1).find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let p = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            if p == port { fields.last()?.parse().ok() } else { None }
        })
    }
}

fn set_option(fd: i32, name: libc::c_int, value: libc::c_int, what: &'static str) -> Result<(), PortError> {
    // SAFETY: `value` outlives the call and its size is passed; `fd` is an open socket.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(PortError::last_os(what)) }
}

/// The software receive time stamp in a message's control data, realtime ns.
fn rx_timestamp(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: `msg` was filled by recvmmsg: its control pointer and length describe our buffer,
    // and the CMSG_* macros walk only within `msg_controllen`.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPING {
                // struct scm_timestamping { struct timespec ts[3]; }: ts[0] is the software one.
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                if ts.tv_sec == 0 && ts.tv_nsec == 0 {
                    return None;
                }
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

impl Port for UdpPort {
    fn rx_burst(&mut self, out: &mut [Packet]) -> Result<usize, PortError> {
        let want = out.len().min(MAX_BURST);
        if want == 0 {
            return Ok(0);
        }
        // SAFETY: plain C structs for which all-zero is a valid value.
        let mut iovs: [libc::iovec; MAX_BURST] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BURST] = unsafe { zeroed() };
        for i in 0..want {
            iovs[i] =
                libc::iovec { iov_base: self.rx_bufs[i].as_mut_ptr().cast(), iov_len: self.rx_bufs[i].len() };
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = self.cmsg_bufs[i].as_mut_ptr().cast();
            msgs[i].msg_hdr.msg_controllen = CMSG_SPACE as _;
        }
        // SAFETY: `msgs[..want]` point at buffers owned by `self` that live through the call;
        // MSG_DONTWAIT makes it return at once when nothing is queued.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                want as _,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            return match err.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
                // A connected UDP socket reports an earlier ICMP "port unreachable" here.
                std::io::ErrorKind::ConnectionRefused => Ok(0),
                _ => Err(PortError::Io { what: "recvmmsg", source: err }),
            };
        }
        let mono = monotonic_ns();
        let offset = realtime_ns().saturating_sub(mono);
        let mut got = 0;
        for (i, msg) in msgs.iter().enumerate().take(n as usize) {
            let len = msg.msg_len as usize;
            match Packet::decode(&self.rx_bufs[i][..len.min(128)]) {
                Ok(mut p) => {
                    p.rx_ns =
                        rx_timestamp(&msg.msg_hdr).map_or(mono, |rt| rt.saturating_sub(offset).min(mono));
                    out[got] = p;
                    got += 1;
                }
                Err(_) => self.stats.rx_invalid += 1,
            }
        }
        self.stats.rx_packets += got as u64;
        Ok(got)
    }

    fn tx_burst(&mut self, packets: &[Packet]) -> Result<usize, PortError> {
        let want = packets.len().min(MAX_BURST);
        if want == 0 {
            return Ok(0);
        }
        // SAFETY: plain C structs for which all-zero is a valid value.
        let mut iovs: [libc::iovec; MAX_BURST] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BURST] = unsafe { zeroed() };
        for i in 0..want {
            packets[i].encode(&mut self.tx_bufs[i]);
            iovs[i] = libc::iovec { iov_base: self.tx_bufs[i].as_mut_ptr().cast(), iov_len: WIRE_LEN };
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..want]` point at encoded buffers owned by `self`; the socket is
        // connected, so no address is needed; MSG_DONTWAIT never blocks.
        let n = unsafe {
            libc::sendmmsg(self.socket.as_raw_fd(), msgs.as_mut_ptr(), want as _, libc::MSG_DONTWAIT)
        };
        let sent = if n < 0 {
            let err = std::io::Error::last_os_error();
            match err.kind() {
                std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::Interrupted
                | std::io::ErrorKind::ConnectionRefused => 0,
                _ => return Err(PortError::Io { what: "sendmmsg", source: err }),
            }
        } else {
            n as usize
        };
        self.stats.tx_packets += sent as u64;
        self.stats.tx_refused += (packets.len() - sent) as u64;
        Ok(sent)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { max_burst: MAX_BURST, rx_timestamps: RxTimestamps::Kernel }
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn name(&self) -> &'static str {
        "udp"
    }

    fn wait(&mut self, timeout: std::time::Duration) {
        let mut fds = libc::pollfd { fd: self.socket.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ts = libc::timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
        // SAFETY: one valid pollfd and a valid timespec, both outliving the call.
        unsafe { libc::ppoll(&mut fds, 1, &ts, std::ptr::null()) };
    }
}
