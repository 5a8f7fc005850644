//! Socket options std does not set: kernel receive time stamps, the receive buffer's size
//! (forced past `net.core.rmem_max` when root), sending without UDP checksums, and the two marks
//! a queueing discipline can classify by: the IPv4 type-of-service byte (`IP_TOS`, carried in
//! every packet's header) and the socket's priority (`SO_PRIORITY`, `skb->priority`, which lives
//! only in the sending kernel and is cleared when a packet crosses into another namespace).

use std::io;
use std::mem::size_of;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

fn set_int(socket: &UdpSocket, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    set_int_at(socket, libc::SOL_SOCKET, name, value)
}

fn set_int_at(
    socket: &UdpSocket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    set_value(socket, level, name, &value)
}

/// `setsockopt` with `value` as the option's bytes: a C type the option takes (an `int`, a
/// `sock_fprog`), which the kernel copies during the call; any socket (UDP, or a TCP stream or
/// listener for [`super::stream_stamps`]).
pub(crate) fn set_value<T>(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a valid `T` that outlives the call and its size is passed; the socket
    // is open while borrowed. What `T` must be is the option's contract, the caller's.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

fn get_int_at(socket: &UdpSocket, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid and writable for the call, and `len` says the size of
    // `value`; the socket is open while borrowed.
    let rc = unsafe {
        libc::getsockopt(socket.as_raw_fd(), level, name, (&mut value as *mut libc::c_int).cast(), &mut len)
    };
    if rc == 0 { Ok(value) } else { Err(io::Error::last_os_error()) }
}

/// Turns on the kernel's software receive time stamp of everything `socket` receives
/// (`SO_TIMESTAMPING`): a UDP socket's datagrams, read by [`super::MmsgBatch::recv_into`] with
/// `timestamps`, or a TCP stream's segments, read by [`super::stream_stamps::recv_stamped`]
/// (on a listener, every connection it accepts inherits it).
pub fn enable_rx_timestamps(socket: &impl AsRawFd) -> io::Result<()> {
    let flags = (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
    set_value(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags)
}

/// Keeps the kernel's receive stamping on while it lives: a socket of its own (on loopback)
/// that asks for stamps and reads nothing.
///
/// The kernel stamps arriving packets only while some socket asks for stamps, and it turns
/// stamping on, and off again when the last such socket closes, in a work item it runs later:
/// on a loaded machine, seconds later (measured here: a flooded run of 300 datagrams, none
/// stamped, after a 2 s wait). A program that opens and closes stamped sockets one after
/// another (one per experiment row) makes each wait for that work item; holding one of these
/// for its whole run leaves stamping on, so only the first socket waits, and it can do so
/// before any load starts.
#[derive(Debug)]
pub struct RxTimestampsHeld {
    _socket: UdpSocket,
}

impl RxTimestampsHeld {
    /// Opens the socket and asks for stamps; the stamping work item may still be pending
    /// when this returns.
    pub fn new() -> io::Result<Self> {
        let socket = UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
        enable_rx_timestamps(&socket)?;
        Ok(Self { _socket: socket })
    }
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
    Ok(get_int_at(socket, libc::SOL_SOCKET, libc::SO_RCVBUF)?.max(0) as usize)
}

/// Makes the kernel drop every datagram that arrives for `socket` before it is queued: a
/// socket filter (`SO_ATTACH_FILTER`) of one instruction, `ret #0`. The socket stays bound, so
/// its port is not unreachable (no ICMP error goes back), while another path (a packet ring)
/// reads the datagrams. Cheaper than a minimal receive buffer, which still takes the socket's
/// lock, charges each datagram to the buffer and counts it as a receive error once full.
pub fn drop_all_received(socket: &UdpSocket) -> io::Result<()> {
    let mut program = [libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0 }]; // BPF_RET | BPF_K, 0
    let fprog = libc::sock_fprog { len: 1, filter: program.as_mut_ptr() };
    // SAFETY: `fprog` and the program it points to outlive the call (the kernel copies them)
    // and its size is passed; the socket is open while borrowed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Sends datagrams with no UDP checksum (`SO_NO_CHECK`; allowed over IPv4). Over a veth the
/// kernel leaves the checksum for an offload that never happens, which is harmless between two
/// kernels but wrong once a peer reading frames off the interface sends them back.
pub fn send_without_checksum(socket: &UdpSocket) -> io::Result<()> {
    set_int(socket, libc::SO_NO_CHECK, 1)
}

/// Sets the type-of-service byte of the IPv4 packets `socket` sends (`IP_TOS`: DSCP in the top
/// six bits, ECN in the low two, which the kernel keeps from the socket's ECN state). Any user
/// may set it. The kernel also sets the socket's priority from it (`rt_tos2priority`, 0 to 6),
/// so a [`set_priority`] that must hold is set after this.
pub fn set_type_of_service(socket: &UdpSocket, tos: u8) -> io::Result<()> {
    set_int_at(socket, libc::IPPROTO_IP, libc::IP_TOS, libc::c_int::from(tos))
}

/// The type-of-service byte `socket`'s IPv4 packets carry.
pub fn type_of_service(socket: &UdpSocket) -> io::Result<u8> {
    Ok(get_int_at(socket, libc::IPPROTO_IP, libc::IP_TOS)? as u8)
}

/// Sets the priority of the packets `socket` sends (`SO_PRIORITY`, `skb->priority`): an HTB
/// queueing discipline puts a packet whose priority equals one of its leaf class ids (major
/// in the top 16 bits, minor in the low 16) in that class without a filter. Values above 6 need
/// `CAP_NET_ADMIN`. The mark stays in the sending kernel's packet: a veth into another
/// namespace resets it to 0, so it classifies at the sender's own egress only.
pub fn set_priority(socket: &UdpSocket, priority: u32) -> io::Result<()> {
    set_int(socket, libc::SO_PRIORITY, priority as libc::c_int)
}

/// The priority of the packets `socket` sends (`SO_PRIORITY`).
pub fn priority(socket: &UdpSocket) -> io::Result<u32> {
    Ok(get_int_at(socket, libc::SOL_SOCKET, libc::SO_PRIORITY)? as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_that_drops_all_receives_nothing_and_stays_bound() {
        let quiet = UdpSocket::bind("127.0.0.1:0").unwrap();
        let loud = UdpSocket::bind("127.0.0.1:0").unwrap();
        drop_all_received(&quiet).unwrap();
        quiet.set_read_timeout(Some(std::time::Duration::from_millis(50))).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"dropped", quiet.local_addr().unwrap()).unwrap();
        sender.send_to(b"kept", loud.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(loud.recv(&mut buf).unwrap(), 4);
        assert!(quiet.recv(&mut buf).is_err(), "the filter dropped it");
        // Still bound: no port unreachable came back, so the sender's next send succeeds.
        sender.connect(quiet.local_addr().unwrap()).unwrap();
        sender.send(b"again").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
        assert!(sender.send(b"and again").is_ok(), "no ICMP error was queued");
    }

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

    #[test]
    fn type_of_service_and_priority_read_back_and_tos_sets_the_priority() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_type_of_service(&socket, 0xb8).unwrap();
        assert_eq!(type_of_service(&socket).unwrap(), 0xb8);
        // EF's TOS bits (0x18) map to TC_PRIO_INTERACTIVE_BULK.
        assert_eq!(priority(&socket).unwrap(), 4);
        set_priority(&socket, 6).unwrap();
        assert_eq!(priority(&socket).unwrap(), 6);
        // An HTB class id (1:10) needs CAP_NET_ADMIN.
        match set_priority(&socket, 0x1_0010) {
            Ok(()) => assert_eq!(priority(&socket).unwrap(), 0x1_0010),
            Err(e) => {
                assert!(!crate::user::is_root(), "root was refused: {e}");
                assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
            }
        }
    }
}
