use super::*;

#[test]
fn send_calls_are_timed_to_every_peer_that_is_up() {
    let local: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let peers: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let addresses: Vec<SocketAddr> = peers.iter().map(|p| p.local_addr().unwrap()).collect();
    let none = PeerSends::measure(local, &[]);
    assert_eq!((none.longest_ns(), none.unheard()), (0, 0), "no peer, nothing to fan out to");
    let sends = PeerSends::measure(local, &addresses);
    assert!(sends.longest_ns() > 0);
    assert_eq!(sends.unheard(), 0);
    // Every peer got the ask, the warm-up and the timed datagrams, each empty.
    for p in &peers {
        p.set_nonblocking(true).unwrap();
        let mut got = 0;
        while let Ok(n) = p.recv(&mut [0u8; 16]) {
            assert_eq!(n, 0);
            got += 1;
        }
        assert!(got > 100, "{got} datagrams");
    }
}

#[test]
fn a_peer_not_up_is_not_timed_until_it_is() {
    let local: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    // A port nobody listens on: the kernel refuses it with ICMP.
    let address = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut sends = PeerSends::measure(local, &[address]);
    assert_eq!((sends.longest_ns(), sends.unheard()), (0, 1), "the refused path is not the fan-out's");
    let start = std::time::Instant::now();
    assert!(!sends.ask_again(start), "asked again only after ASK_EVERY");
    // Still refused at the next ask.
    assert!(!sends.ask_again(start + peer_sends::ASK_EVERY));
    assert_eq!(sends.unheard(), 1);
    // The peer's node starts: the ask after its first is not refused, and it is timed.
    let _peer = UdpSocket::bind(address).unwrap();
    let mut grew = false;
    for k in 2..6 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        grew |= sends.ask_again(start + peer_sends::ASK_EVERY * k);
    }
    assert!(grew && sends.longest_ns() > 0 && sends.unheard() == 0);
}
