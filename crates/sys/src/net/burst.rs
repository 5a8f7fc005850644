//! Bursts of datagrams in one system call: `recvmmsg` into, and `sendmmsg` from, buffers the
//! caller owns.
//!
//! One `recv`/`send` per datagram tops out near 0.4 M datagrams per second on the virtual
//! machines Kairos runs on; one call per burst moves the cost of the system call off the
//! datagram. [`MmsgBatch`] owns the kernel's scatter arrays (`mmsghdr`, `iovec`) and the
//! control-message space for receive time stamps, allocated once, so a burst allocates
//! nothing. A call takes at most [`MAX_BURST`] datagrams: a larger request is an
//! `InvalidInput` error, never a silent truncation. Neither direction blocks (`MSG_DONTWAIT`):
//! with nothing queued a receive returns the `WouldBlock` error, with a full socket buffer a
//! send moves fewer datagrams (or `WouldBlock` for none). The one exception is
//! [`MmsgBatch::recv_waiting`], for a receiver that sleeps in the kernel until a datagram comes
//! (a plain blocking `recvmsg` with its stamp): it waits for the first datagram, up to the
//! socket's read timeout, and takes the rest without waiting.
//!
//! Receive time stamps are the kernel's software stamps (`SO_TIMESTAMPING`, turned on with
//! [`super::options::enable_rx_timestamps`]) on `CLOCK_REALTIME`; converting them to the
//! experiment's clock is the caller's business. Source addresses are not collected: the
//! sockets Kairos reads are connected or their peers known.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// The most datagrams one call moves.
pub const MAX_BURST: usize = 64;

/// Room for one `SCM_TIMESTAMPING` control message (three timespecs) and its header.
const CONTROL_SPACE: usize = 128;

/// The arrays one `recvmmsg`/`sendmmsg` of up to [`MAX_BURST`] datagrams needs, and what the
/// last receive found (lengths, time stamps).
pub struct MmsgBatch {
    headers: Box<[libc::mmsghdr; MAX_BURST]>,
    iovecs: Box<[libc::iovec; MAX_BURST]>,
    control: Box<[[u8; CONTROL_SPACE]; MAX_BURST]>,
    destination: Box<libc::sockaddr_storage>,
    /// Where each received datagram came from, as the kernel wrote it.
    sources: Box<[libc::sockaddr_storage; MAX_BURST]>,
    lengths: [usize; MAX_BURST],
    rx_stamps_ns: [Option<u64>; MAX_BURST],
    source_addrs: [Option<SocketAddr>; MAX_BURST],
    received: usize,
}

// SAFETY: the raw pointers inside `headers` and `iovecs` are written at the start of every
// call, point only at memory borrowed for that call (the caller's buffers) or owned by the
// batch (its boxes, which do not move), and are read only by the kernel during the call.
// Between calls they are never dereferenced, so moving the batch to another thread is sound.
unsafe impl Send for MmsgBatch {}

impl std::fmt::Debug for MmsgBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmsgBatch").field("received", &self.received).finish_non_exhaustive()
    }
}

impl Default for MmsgBatch {
    fn default() -> Self {
        Self::new()
    }
}

fn too_many(what: &str, asked: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("a burst of {asked} datagrams to {what}; one call takes at most {MAX_BURST}"),
    )
}

impl MmsgBatch {
    /// Allocates the arrays for bursts of up to [`MAX_BURST`] datagrams.
    pub fn new() -> Self {
        Self {
            // SAFETY: mmsghdr, iovec and sockaddr_storage are plain C structs for which
            // all-zero (null pointers, zero lengths) is a valid value.
            headers: Box::new(unsafe { zeroed() }),
            // SAFETY: as above.
            iovecs: Box::new(unsafe { zeroed() }),
            control: Box::new([[0; CONTROL_SPACE]; MAX_BURST]),
            // SAFETY: as above.
            destination: Box::new(unsafe { zeroed() }),
            // SAFETY: as above.
            sources: Box::new(unsafe { zeroed() }),
            lengths: [0; MAX_BURST],
            rx_stamps_ns: [None; MAX_BURST],
            source_addrs: [None; MAX_BURST],
            received: 0,
        }
    }

    /// Receives up to `buffers.len()` datagrams from `socket` in one `recvmmsg`, datagram `i`
    /// into `buffers[i]` (truncated to it), and returns how many arrived; [`Self::lengths`] and
    /// [`Self::rx_timestamps_ns`] then describe them. With `timestamps`, each datagram's kernel
    /// receive time stamp is collected (`None` for a datagram without one). Never blocks.
    pub fn recv_into(
        &mut self,
        socket: &UdpSocket,
        buffers: &mut [&mut [u8]],
        timestamps: bool,
    ) -> io::Result<usize> {
        self.receive(socket, buffers, timestamps, libc::MSG_DONTWAIT)
    }

    /// As [`Self::recv_into`], but sleeps in the kernel until the first datagram arrives
    /// (`MSG_WAITFORONE`; the rest are taken without waiting) or the socket's read timeout
    /// ([`UdpSocket::set_read_timeout`]) passes, which is the `WouldBlock` error. A socket set
    /// non-blocking never waits.
    pub fn recv_waiting(
        &mut self,
        socket: &UdpSocket,
        buffers: &mut [&mut [u8]],
        timestamps: bool,
    ) -> io::Result<usize> {
        self.receive(socket, buffers, timestamps, libc::MSG_WAITFORONE)
    }

    fn receive(
        &mut self,
        socket: &UdpSocket,
        buffers: &mut [&mut [u8]],
        timestamps: bool,
        flags: libc::c_int,
    ) -> io::Result<usize> {
        self.received = 0;
        let n = buffers.len();
        if n > MAX_BURST {
            return Err(too_many("receive", n));
        }
        if n == 0 {
            return Ok(0);
        }
        for (i, buffer) in buffers.iter_mut().enumerate() {
            self.iovecs[i] = libc::iovec { iov_base: buffer.as_mut_ptr().cast(), iov_len: buffer.len() };
            let control =
                if timestamps { (self.control[i].as_mut_ptr().cast(), CONTROL_SPACE) } else { NOWHERE };
            let source = (
                (&mut self.sources[i] as *mut libc::sockaddr_storage).cast(),
                size_of::<libc::sockaddr_storage>(),
            );
            point_header(&mut self.headers[i], &mut self.iovecs[i], source, control);
        }
        // SAFETY: `headers[..n]` each point at one iovec describing a distinct buffer the caller
        // lends mutably for this call, at control space and at a source address's storage
        // (`sources[i]`, whose length the header gives) owned by `self`; all outlive the
        // call (a waiting call too: it borrows them until it returns). MSG_DONTWAIT makes it
        // return at once when nothing is queued; MSG_WAITFORONE waits for one datagram at most
        // as long as the socket's read timeout.
        let got = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                n as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = got as usize;
        for (i, buffer) in buffers.iter().enumerate().take(got) {
            self.lengths[i] = (self.headers[i].msg_len as usize).min(buffer.len());
            self.rx_stamps_ns[i] = if timestamps { rx_timestamp_ns(&self.headers[i].msg_hdr) } else { None };
            self.source_addrs[i] = read_socket_address(&self.sources[i], self.headers[i].msg_hdr.msg_namelen);
        }
        self.received = got;
        Ok(got)
    }

    /// The lengths of the datagrams the last [`Self::recv_into`] received, in order.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths[..self.received]
    }

    /// The kernel's software receive time stamps (`CLOCK_REALTIME` ns) of the datagrams the
    /// last [`Self::recv_into`] received, if it asked for them.
    pub fn rx_timestamps_ns(&self) -> &[Option<u64>] {
        &self.rx_stamps_ns[..self.received]
    }

    /// Where each datagram the last receive took came from (`None` for an address family other
    /// than IPv4 and IPv6).
    pub fn sources(&self) -> &[Option<SocketAddr>] {
        &self.source_addrs[..self.received]
    }

    /// Sends `datagrams` in one `sendmmsg` to `destination`, or to the socket's connected peer
    /// when `None`, and returns how many the kernel took (the rest did not fit in the socket's
    /// buffer). Never blocks.
    pub fn send(
        &mut self,
        socket: &UdpSocket,
        datagrams: &[&[u8]],
        destination: Option<SocketAddr>,
    ) -> io::Result<usize> {
        let n = datagrams.len();
        if n > MAX_BURST {
            return Err(too_many("send", n));
        }
        if n == 0 {
            return Ok(0);
        }
        let name = match destination {
            None => NOWHERE,
            Some(addr) => {
                let len = write_socket_address(addr, &mut self.destination);
                ((&mut *self.destination as *mut libc::sockaddr_storage).cast(), len as usize)
            }
        };
        for (i, datagram) in datagrams.iter().enumerate() {
            // The kernel only reads from a send's buffers; iovec's pointer is mutable by type.
            self.iovecs[i] =
                libc::iovec { iov_base: datagram.as_ptr().cast_mut().cast(), iov_len: datagram.len() };
            point_header(&mut self.headers[i], &mut self.iovecs[i], name, NOWHERE);
        }
        // SAFETY: `headers[..n]` each point at one iovec describing a datagram the caller lends
        // for this call, and at the destination owned by `self` (or none); the kernel only reads
        // them. MSG_DONTWAIT never blocks.
        let sent = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 { Err(io::Error::last_os_error()) } else { Ok(sent as usize) }
    }
}

/// Memory a header points the kernel at for one call: its address and length in bytes.
type Region = (*mut libc::c_void, usize);

/// No memory: a header's address or control space left out.
const NOWHERE: Region = (std::ptr::null_mut(), 0);

/// Points `header` at the one buffer `iovec` describes, at the socket address `name` and at the
/// control space `control`, and clears what the kernel wrote into it on the previous call.
fn point_header(header: &mut libc::mmsghdr, iovec: &mut libc::iovec, name: Region, control: Region) {
    header.msg_len = 0;
    let msg = &mut header.msg_hdr;
    msg.msg_name = name.0;
    msg.msg_namelen = name.1 as libc::socklen_t;
    msg.msg_iov = iovec;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0;
    msg.msg_controllen = control.1 as _;
    msg.msg_flags = 0;
}

/// Writes `addr` as a C socket address into `storage`; returns its length.
pub(crate) fn write_socket_address(
    addr: SocketAddr,
    storage: &mut libc::sockaddr_storage,
) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned for every socket
            // address type, and `storage` is a valid exclusive reference.
            unsafe {
                std::ptr::write((storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>(), sin)
            };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe {
                std::ptr::write((storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>(), sin6)
            };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The socket address the kernel wrote into `storage` (`len` bytes of it), if IPv4 or IPv6.
fn read_socket_address(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the kernel wrote a sockaddr_in, `len` says all of it, and
            // sockaddr_storage is large enough and aligned for it.
            let sin = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The software receive time stamp in a received message's control data, realtime ns
/// (`recvmmsg`'s and [`super::stream_stamps::recv_stamped`]'s).
pub(crate) fn rx_timestamp_ns(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: `msg` was filled by recvmmsg or recvmsg: its control pointer and length describe
    // a buffer its caller owns (the batch's, or the stream read's), and the CMSG_* macros walk
    // only within `msg_controllen`; the time stamp is read unaligned because control data need
    // not be aligned for timespec.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::options::enable_rx_timestamps;
    use crate::net::poll::wait_readable;
    use std::time::Duration;

    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (tx, rx)
    }

    fn receive_all(
        batch: &mut MmsgBatch,
        rx: &UdpSocket,
        want: usize,
        stamps: bool,
    ) -> Vec<(Vec<u8>, Option<u64>)> {
        let mut got = Vec::new();
        let mut storage = vec![[0u8; 64]; MAX_BURST];
        while got.len() < want {
            assert!(wait_readable(rx, Duration::from_secs(2)).unwrap(), "datagrams arrive");
            let mut buffers: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
            let n = batch.recv_into(rx, &mut buffers, stamps).unwrap();
            let lengths = batch.lengths().to_vec();
            let stamps_ns = batch.rx_timestamps_ns().to_vec();
            for i in 0..n {
                got.push((storage[i][..lengths[i]].to_vec(), stamps_ns[i]));
            }
        }
        got
    }

    #[test]
    fn a_burst_goes_out_and_comes_back_in_order_with_lengths() {
        let (tx, rx) = pair();
        let mut batch = MmsgBatch::new();
        let datagrams: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 1 + i as usize]).collect();
        let slices: Vec<&[u8]> = datagrams.iter().map(Vec::as_slice).collect();
        assert_eq!(batch.send(&tx, &slices, None).unwrap(), 10);
        let got = receive_all(&mut batch, &rx, 10, false);
        assert_eq!(got.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>(), datagrams);
        assert!(got.iter().all(|(_, stamp)| stamp.is_none()));
    }

    #[test]
    fn receive_stamps_are_the_kernel_realtime_ones() {
        let (tx, rx) = pair();
        enable_rx_timestamps(&rx).unwrap();
        let mut batch = MmsgBatch::new();
        // The kernel turns stamping on for the whole stack a moment after the first socket asks
        // (a deferred static key), so the very first datagrams may arrive unstamped.
        for _ in 0..200 {
            let before = crate::clock::realtime_ns();
            assert_eq!(batch.send(&tx, &[b"a", b"b"], None).unwrap(), 2);
            let got = receive_all(&mut batch, &rx, 2, true);
            let after = crate::clock::realtime_ns();
            if got.iter().all(|(_, stamp)| stamp.is_some()) {
                for (_, stamp) in got {
                    let stamp = stamp.unwrap();
                    assert!(stamp >= before && stamp <= after, "{before} <= {stamp} <= {after}");
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("no datagram was stamped in a second");
    }

    #[test]
    fn each_received_datagram_names_its_sender() {
        let (tx, rx) = pair();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        other.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        tx.send(b"y").unwrap();
        let mut batch = MmsgBatch::new();
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        // On loopback a datagram is in the receiver's queue when its send returns.
        assert_eq!(batch.recv_into(&rx, &mut [&mut a[..], &mut b[..]], false).unwrap(), 2);
        let want = [Some(other.local_addr().unwrap()), Some(tx.local_addr().unwrap())];
        assert_eq!(batch.sources(), &want[..]);
    }

    #[test]
    fn a_waiting_receive_sleeps_until_a_datagram_or_the_read_timeout() {
        let (tx, rx) = pair();
        enable_rx_timestamps(&rx).unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
        let mut batch = MmsgBatch::new();
        let mut storage = [0u8; 64];
        let started = std::time::Instant::now();
        let error = batch.recv_waiting(&rx, &mut [&mut storage[..]], true).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::WouldBlock, "{error}");
        assert!(started.elapsed() >= Duration::from_millis(25), "it waited for the read timeout");
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(b"late").unwrap();
        });
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = batch.recv_waiting(&rx, &mut [&mut storage[..]], true).unwrap();
        sender.join().unwrap();
        assert_eq!((n, batch.lengths()), (1, &[4][..]));
        assert_eq!(&storage[..4], b"late");
        assert_eq!(batch.rx_timestamps_ns().len(), 1);
    }

    #[test]
    fn an_unconnected_socket_sends_to_the_destination_given() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = MmsgBatch::new();
        assert_eq!(batch.send(&tx, &[b"to", b"you"], Some(rx.local_addr().unwrap())).unwrap(), 2);
        let got = receive_all(&mut batch, &rx, 2, false);
        assert_eq!(got[1].0, b"you");
        // Without a destination or a connection the kernel refuses, as an error.
        assert!(batch.send(&tx, &[b"x"], None).is_err());
    }

    #[test]
    fn bursts_over_the_maximum_are_errors_not_truncations() {
        let (tx, rx) = pair();
        let mut batch = MmsgBatch::new();
        let one = [0u8; 1];
        let too_many = vec![&one[..]; MAX_BURST + 1];
        let err = batch.send(&tx, &too_many, None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let mut storage = vec![[0u8; 4]; MAX_BURST + 1];
        let mut buffers: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let err = batch.recv_into(&rx, &mut buffers, false).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(batch.send(&tx, &too_many[..MAX_BURST], None).unwrap(), MAX_BURST);
    }

    #[test]
    fn an_empty_socket_would_block_and_a_long_datagram_is_truncated_to_its_buffer() {
        let (tx, rx) = pair();
        let mut batch = MmsgBatch::new();
        let mut small = [0u8; 4];
        let err = batch.recv_into(&rx, &mut [&mut small[..]], false).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(batch.lengths().is_empty());
        batch.send(&tx, &[b"0123456789"], None).unwrap();
        assert!(wait_readable(&rx, Duration::from_secs(2)).unwrap());
        assert_eq!(batch.recv_into(&rx, &mut [&mut small[..]], false).unwrap(), 1);
        assert_eq!(batch.lengths(), &[4]);
        assert_eq!(&small, b"0123");
    }

    #[test]
    fn the_batch_moves_between_threads() {
        let (tx, rx) = pair();
        let mut batch = MmsgBatch::new();
        batch.send(&tx, &[b"here"], None).unwrap();
        let got = std::thread::spawn(move || receive_all(&mut batch, &rx, 1, false)).join().unwrap();
        assert_eq!(got[0].0, b"here");
    }
}
