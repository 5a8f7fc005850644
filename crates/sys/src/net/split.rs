//! One UDP address served by two sockets: datagrams whose payload starts with a given two-byte
//! prefix go to the second, the rest to the first.
//!
//! Why: a loop that sleeps in `ppoll` on a socket is woken by every datagram on it. A periodic
//! loop that reads some traffic only at its own period (a failure detector's heartbeats, which
//! carry the kernel's receive stamp and so lose nothing by waiting) keeps that traffic on a
//! socket it does not poll, without a second address for its peers to know. Both sockets join
//! one `SO_REUSEPORT` group, and a classic BPF program attached to the group
//! (`SO_ATTACH_REUSEPORT_CBPF`) picks the socket by the payload's first two bytes: the kernel
//! runs it with the packet's data at the UDP payload and takes its return value as the index of
//! the socket in the group, in the order they were bound. A datagram too short for the load
//! ends the program with 0, the first socket.
//!
//! The group is open to any later socket of the same user on the same address, as every
//! `SO_REUSEPORT` group is; a process that joins it could take a share of the traffic.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::burst::write_socket_address;
use super::options::set_value;

/// The two sockets on one address: `main` takes every datagram but those starting with the
/// prefix, which `side` takes. Both are non-blocking.
#[derive(Debug)]
pub struct SplitSocket {
    /// The socket for everything else (bound first: index 0 of the group).
    pub main: UdpSocket,
    /// The socket for datagrams that start with the prefix (index 1).
    pub side: UdpSocket,
}

/// Binds `addr` (port 0: one the kernel picks, the same for both) with two sockets and steers
/// datagrams that start with `prefix` to the second. Fails where the kernel refuses any step
/// (`SO_REUSEPORT`, the address in use, or the BPF program); nothing stays bound then.
pub fn bind_split(addr: SocketAddr, prefix: [u8; 2]) -> io::Result<SplitSocket> {
    let main = reuse_port_socket(addr)?;
    let side = reuse_port_socket(main.local_addr()?)?;
    attach_prefix_program(&main, prefix)?;
    Ok(SplitSocket { main, side })
}

fn reuse_port_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket(2) takes no pointers; a non-negative result is a new descriptor that
    // nothing else owns, which `OwnedFd` takes (and closes on every path below).
    let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by no one else.
    let socket = UdpSocket::from(unsafe { OwnedFd::from_raw_fd(fd) });
    set_value(&socket, libc::SOL_SOCKET, libc::SO_REUSEPORT, &(1 as libc::c_int))?;
    // SAFETY: sockaddr_storage is a plain C struct for which all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = write_socket_address(addr, &mut storage);
    // SAFETY: `storage` holds a socket address of `len` bytes and outlives the call.
    let rc =
        unsafe { libc::bind(socket.as_raw_fd(), (&storage as *const libc::sockaddr_storage).cast(), len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// The group's program: 1 (the side socket) when the payload's first two bytes are `prefix`,
/// else 0.
fn attach_prefix_program(socket: &UdpSocket, prefix: [u8; 2]) -> io::Result<()> {
    const LD_H_ABS: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let mut program = [
        // A = the payload's first 16 bits, in network order.
        libc::sock_filter { code: LD_H_ABS, jt: 0, jf: 0, k: 0 },
        // A == prefix ? next : the one after.
        libc::sock_filter { code: JEQ_K, jt: 0, jf: 1, k: u32::from(u16::from_be_bytes(prefix)) },
        libc::sock_filter { code: RET_K, jt: 0, jf: 0, k: 1 },
        libc::sock_filter { code: RET_K, jt: 0, jf: 0, k: 0 },
    ];
    let fprog = libc::sock_fprog { len: program.len() as u16, filter: program.as_mut_ptr() };
    // The kernel copies the program during the call; `program` outlives it.
    set_value(socket, libc::SOL_SOCKET, libc::SO_ATTACH_REUSEPORT_CBPF, &fprog)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn receive(socket: &UdpSocket) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut buffer = [0u8; 64];
        while let Ok(n) = socket.recv(&mut buffer) {
            got.push(buffer[..n].to_vec());
        }
        got
    }

    #[test]
    fn datagrams_with_the_prefix_reach_the_side_socket_and_the_rest_the_main_one() {
        let split = bind_split("127.0.0.1:0".parse().unwrap(), *b"FD").unwrap();
        let addr = split.main.local_addr().unwrap();
        assert_eq!(split.side.local_addr().unwrap(), addr, "one address for both");
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent: [&[u8]; 6] = [b"FD heartbeat", b"raft message", b"F", b"", b"DF", b"FDx"];
        for bytes in sent {
            sender.send_to(bytes, addr).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        let side = receive(&split.side);
        let main = receive(&split.main);
        assert_eq!(side, vec![b"FD heartbeat".to_vec(), b"FDx".to_vec()]);
        assert_eq!(main, vec![b"raft message".to_vec(), b"F".to_vec(), b"".to_vec(), b"DF".to_vec()]);
    }

    #[test]
    fn a_taken_address_is_refused_and_nothing_stays_bound() {
        let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        assert!(bind_split(addr, *b"FD").is_err());
        let split = bind_split("127.0.0.1:0".parse().unwrap(), *b"FD").unwrap();
        let free = split.main.local_addr().unwrap();
        drop(split);
        UdpSocket::bind(free).expect("both sockets closed with the split");
    }
}
