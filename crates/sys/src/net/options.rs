//! Socket options std does not set: kernel receive time stamps, the receive buffer's size
//! (forced past `net.core.rmem_max` when root), and sending without UDP checksums.

use std::io;
use std::mem::size_of;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

fn set_int(socket: &UdpSocket, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` outlives the call and its size is passed; the socket is open while
    // borrowed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Turns on the kernel's software receive time stamp of every datagram (`SO_TIMESTAMPING`,
/// read by [`super::MmsgBatch::recv_into`] with `timestamps`).
pub fn enable_rx_timestamps(socket: &UdpSocket) -> io::Result<()> {
    let flags = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
    set_int(socket, libc::SO_TIMESTAMPING, flags as libc::c_int)
}

/// Asks for a receive buffer of `bytes` (capped at `i32::MAX`): first the forcing form
/// (`SO_RCVBUFFORCE`, root only, past `net.core.rmem_max`), then the plain one, which the
/// kernel caps at `net.core.rmem_max`. The error is the plain form's, when both fail.
pub fn set_receive_buffer(socket: &UdpSocket, bytes: usize) -> io::Result<()> {
    let size = bytes.min(i32::MAX as usize) as libc::c_int;
    set_int(socket, libc::SO_RCVBUFFORCE, size).or_else(|_| set_int(socket, libc::SO_RCVBUF, size))
}

/// The receive buffer the kernel gave the socket, bytes (it doubles what was asked, for its
/// bookkeeping).
pub fn receive_buffer(socket: &UdpSocket) -> io::Result<usize> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid and writable for the call, and `len` says the size of
    // `value`; the socket is open while borrowed.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 { Ok(value.max(0) as usize) } else { Err(io::Error::last_os_error()) }
}

/// Sends datagrams with no UDP checksum (`SO_NO_CHECK`; allowed over IPv4). Over a veth the
/// kernel leaves the checksum for an offload that never happens, which is harmless between two
/// kernels but wrong once a peer reading frames off the interface sends them back.
pub fn send_without_checksum(socket: &UdpSocket) -> io::Result<()> {
    set_int(socket, libc::SO_NO_CHECK, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_buffer_grows_when_asked() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = receive_buffer(&socket).unwrap();
        set_receive_buffer(&socket, before * 2).unwrap();
        let after = receive_buffer(&socket).unwrap();
        // Unprivileged, the kernel caps it at rmem_max; as root the forcing form gets it all.
        if crate::user::is_root() {
            assert!(after >= before * 2, "{before} -> {after}");
        } else {
            assert!(after >= before, "{before} -> {after}");
        }
    }

    #[test]
    fn timestamps_and_no_checksum_are_accepted_on_udp() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_rx_timestamps(&socket).unwrap();
        send_without_checksum(&socket).unwrap();
    }
}
