//! The kernel's count of datagrams it dropped on a UDP socket for want of receive-buffer room:
//! the last column of `/proc/net/udp` (or `udp6`), found by the socket's local port.
//!
//! `SO_RXQ_OVFL` reports drops per received message; this counter is there whether or not
//! anything is received, which is what a throughput experiment needs before and after a run.

use std::net::UdpSocket;

/// Datagrams the kernel dropped on `socket` since it was made, if `/proc` says.
pub fn kernel_drops(socket: &UdpSocket) -> Option<u64> {
    let local = socket.local_addr().ok()?;
    let table = if local.is_ipv4() { "/proc/net/udp" } else { "/proc/net/udp6" };
    let text = std::fs::read_to_string(table).ok()?;
    parse_drops(&text, local.port())
}

/// The drop counter of the first socket bound to `port` in a `/proc/net/udp` table.
fn parse_drops(table: &str, port: u16) -> Option<u64> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local = fields.get(1)?;
        let p = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
        if p == port { fields.last()?.parse().ok() } else { None }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  891: 0100007F:A5E1 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 123 2 0000000000000000 17
  892: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 124 2 0000000000000000 0
";

    #[test]
    fn the_drop_column_of_the_socket_on_the_port_is_read() {
        assert_eq!(parse_drops(TABLE, 0xA5E1), Some(17));
        assert_eq!(parse_drops(TABLE, 53), Some(0));
        assert_eq!(parse_drops(TABLE, 1), None);
        assert_eq!(parse_drops("garbage\nno: fields", 1), None);
    }

    #[test]
    fn a_fresh_socket_has_dropped_nothing() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(kernel_drops(&socket), Some(0));
    }
}
