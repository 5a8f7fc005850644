use super::*;

#[test]
fn send_calls_are_timed_to_every_peer() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let peers: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    let addresses: Vec<SocketAddr> = peers.iter().map(|p| p.local_addr().unwrap()).collect();
    assert_eq!(longest_send_ns(&socket, &[]), 0, "no peer, nothing to fan out to");
    assert!(longest_send_ns(&socket, &addresses) > 0);
    // Every peer got the warm-up and the timed datagrams, each empty.
    for p in &peers {
        p.set_nonblocking(true).unwrap();
        let mut got = 0;
        while let Ok(n) = p.recv(&mut [0u8; 16]) {
            assert_eq!(n, 0);
            got += 1;
        }
        assert_eq!(got, SEND_WARMUP + SEND_SAMPLES);
    }
}
