//! Ports for the programs a test starts, and connecting to one while it comes up.
//!
//! A port is picked free now and bound later by the program the test starts, so between the
//! two another test of the same binary (they run at once, in one process) could be given the
//! same port. Every port picked here is recorded, and none is handed out twice in a process.
//! Programs given a single port get one the kernel picks (bound to port 0 and released);
//! programs that take a block at fixed offsets from one flag (`kv cluster --port`, `fd detect
//! --base-port`) get one below the kernel's ephemeral ports (32768 up), which any outgoing
//! connection may take meanwhile.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where blocks are looked for: above the well-known and registered services tests meet on
/// loopback, below the ephemeral ports.
const BLOCK_PORTS: std::ops::Range<u32> = 10_000..32_768;

/// Every port handed out to this process's tests.
static HANDED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn handed() -> MutexGuard<'static, BTreeSet<u16>> {
    HANDED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A loopback TCP port free now, handed to no other test of this process.
pub fn free_tcp_port() -> u16 {
    kernels_pick(|| TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr())
}

/// A loopback UDP port free now, handed to no other test of this process.
pub fn free_udp_port() -> u16 {
    kernels_pick(|| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr())
}

/// A port the kernel picks with `bind`, drawn again while it is one already handed out.
fn kernels_pick(bind: impl Fn() -> std::io::Result<SocketAddr>) -> u16 {
    let mut handed = handed();
    loop {
        let port = bind().expect("a loopback port").port();
        if handed.insert(port) {
            return port;
        }
    }
}

/// A base port B for a program that takes ports at fixed `offsets` from it: every B + offset
/// free now on loopback for both TCP and UDP, below the ephemeral ports, and handed to no other
/// test of this process. The search starts at a place drawn from the process id, so that test
/// binaries run side by side start apart.
pub fn free_block(offsets: &[u16]) -> u16 {
    let widest = u32::from(offsets.iter().copied().max().unwrap_or(0));
    let bases = BLOCK_PORTS.start..BLOCK_PORTS.end - widest;
    let span = bases.end - bases.start;
    let start = std::process::id() * 61 % span;
    let mut handed = handed();
    for step in 0..span {
        let base = bases.start + (start + step) % span;
        let ports: Vec<u16> = offsets.iter().map(|&o| (base + u32::from(o)) as u16).collect();
        if ports.iter().all(|p| !handed.contains(p) && free_now(*p)) {
            handed.extend(ports);
            return base as u16;
        }
    }
    panic!("no block of ports at offsets {offsets:?} is free below {}", BLOCK_PORTS.end);
}

/// Whether `port` can be bound on loopback for TCP and for UDP now.
fn free_now(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
        && UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// A connection to `addr`, tried every 20 ms while its program comes up, for up to `limit`;
/// panics past it. Each try gives up after a second (a namespace's address may not answer).
#[track_caller]
pub fn connect(addr: SocketAddr, limit: Duration) -> TcpStream {
    let deadline = Instant::now() + limit;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(stream) => return stream,
            Err(e) => assert!(Instant::now() < deadline, "nothing listens on {addr} within {limit:?}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_port_is_handed_out_twice() {
        let blocks: Vec<u16> = (0..3).map(|_| free_block(&[0, 1, 2, 1000])).collect();
        let singles: Vec<u16> = (0..20).flat_map(|_| [free_tcp_port(), free_udp_port()]).collect();
        let mut all: Vec<u16> =
            blocks.iter().flat_map(|&b| [b, b + 1, b + 2, b + 1000]).chain(singles).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a port handed out twice: {blocks:?}");
        assert!(blocks.iter().all(|&b| u32::from(b) + 1000 < BLOCK_PORTS.end), "{blocks:?}");
    }
}
