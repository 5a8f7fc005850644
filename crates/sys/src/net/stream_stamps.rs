//! When a TCP stream's bytes arrived: the kernel's software receive stamp (`SO_TIMESTAMPING`)
//! of the newest segment a read took.
//!
//! A server that reads several connections in one pass knows from its readiness events which
//! connections have bytes, not in which order they came: two clients that sent one after the
//! other may be listed the other way round. The stamps say which came first, on the clock the
//! kernel stamped them with (`CLOCK_REALTIME`, taken as each segment entered the receiving
//! stack: on loopback, in the sender's own call).
//!
//! Stamps are asked for on a socket with [`super::options::enable_rx_timestamps`]; on a
//! listener, every connection it accepts inherits them. The kernel stamps packets only once
//! some socket asks, and turns that on in a work item it runs later, so the first reads after
//! the first such socket may come without a stamp (`None`), as do reads of a socket that never
//! asked.

use std::io;
use std::mem::zeroed;
use std::os::fd::AsRawFd;

use super::burst::rx_timestamp_ns;

/// Control-message space for one `SCM_TIMESTAMPING` (three timespecs) and its header, aligned
/// as the kernel's `cmsghdr` is.
#[repr(C, align(8))]
struct Control([u8; 128]);

/// One read of `stream` into `buf` (`recvmsg`, blocking or not as the socket is): the bytes
/// read (0 at the end of the stream) and the receive stamp of the newest segment among them,
/// realtime ns, when the kernel stamped it.
pub fn recv_stamped(stream: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut control = Control([0; 128]);
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths); the fields that point
    // anywhere are set just below.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: `msg` points at `iov` (which describes `buf`, writable for its length) and at
    // `control` (writable for its length); all three outlive the call, and the descriptor is
    // open while `stream` is borrowed.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let stamp = if n > 0 { rx_timestamp_ns(&msg) } else { None };
    Ok((n as usize, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    /// A connection accepted from a stamping listener, and its client.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        crate::net::options::enable_rx_timestamps(&listener).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (server, client)
    }

    /// Reads until a stamped read comes, sending a byte before each: the kernel may turn its
    /// stamping on some time after the first socket asked for it.
    fn stamped_read(server: &TcpStream, client: &mut TcpStream) -> (u64, u64) {
        let started = Instant::now();
        let mut buf = [0u8; 16];
        loop {
            let before = crate::clock::realtime_ns();
            client.write_all(b"x").unwrap();
            let (n, stamp) = recv_stamped(server, &mut buf).unwrap();
            assert_eq!(n, 1);
            if let Some(stamp) = stamp {
                return (before, stamp);
            }
            assert!(started.elapsed() < Duration::from_secs(30), "no stamped read in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn an_accepted_connection_inherits_its_listeners_stamps_and_they_follow_the_send() {
        let (server, mut client) = pair();
        let (sent_after, stamp) = stamped_read(&server, &mut client);
        assert!(stamp >= sent_after, "stamped {stamp}, before the send at {sent_after}");
        assert!(
            stamp - sent_after < 5_000_000_000,
            "stamped {stamp}, {} ns after the send",
            stamp - sent_after
        );
    }

    #[test]
    fn of_two_connections_the_one_that_sent_first_has_the_older_stamp() {
        let (first, mut first_client) = pair();
        let (second, mut second_client) = pair();
        stamped_read(&first, &mut first_client);
        stamped_read(&second, &mut second_client);
        for _ in 0..20 {
            first_client.write_all(b"a").unwrap();
            second_client.write_all(b"b").unwrap();
            // Read the second first: the order of reads does not change what the stamps say.
            let mut buf = [0u8; 4];
            let (_, later) = recv_stamped(&second, &mut buf).unwrap();
            let (_, earlier) = recv_stamped(&first, &mut buf).unwrap();
            assert!(earlier.unwrap() <= later.unwrap(), "first {earlier:?}, second {later:?}");
        }
    }

    #[test]
    fn the_end_of_the_stream_reads_zero_bytes_and_no_stamp() {
        let (server, client) = pair();
        drop(client);
        let mut buf = [0u8; 4];
        assert_eq!(recv_stamped(&server, &mut buf).unwrap(), (0, None));
    }

    #[test]
    fn a_socket_that_did_not_ask_reads_without_a_stamp() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        client.write_all(b"hi").unwrap();
        let mut buf = [0u8; 4];
        let (n, stamp) = recv_stamped(&server, &mut buf).unwrap();
        assert_eq!((n, stamp), (2, None));
    }
}
