//! The packet-ring transport across the two-namespace veth testbed, as root: frames sent on
//! one side's transmit ring arrive on the other side's receive ring and on a plain UDP socket
//! there, with kernel receive stamps; and the lab's port on a ring forwards packets back to a
//! UDP port, as the `dpdk-testpmd` peer does.
//!
//! They create network namespaces: ignored by the debug test run; `scripts/test` runs them in
//! release as root (`cargo test --release -p kairos-io --test af_packet -- --ignored`).

mod common;
use common::Packet;
use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use kairos_io::af_packet::{AfPacketError, AfPacketPort, AfPacketSocket};
use kairos_io::testbed::{FORWARDER_IP, SOURCE_IP};
use kairos_io::{ForwarderSide, Port, PortBase, RxTimestamps, Testbed, TestbedError, UdpPort};
use kairos_sys::clock::realtime_ns;
use kairos_sys::net::packet_ring::{ETH_P_ALL, ETH_P_IP, RingConfig};
use kairos_sys::net::{MmsgBatch, options, poll};

fn testbed(side: ForwarderSide) -> Option<Testbed> {
    match Testbed::create_with(side) {
        Ok(bed) => Some(bed),
        Err(TestbedError::NotRoot) => {
            eprintln!("skipped: not root (the testbed needs network namespaces, the rings CAP_NET_RAW)");
            None
        }
        Err(e) => panic!("testbed: {e}"),
    }
}

fn small_ring() -> RingConfig {
    RingConfig { tx_frames: 64, ethertype: ETH_P_IP, ..RingConfig::default() }
}

/// Datagrams a plain UDP socket received: payloads and kernel stamps.
fn receive_udp(socket: &UdpSocket, want: usize) -> Vec<(Vec<u8>, u64)> {
    let mut batch = MmsgBatch::new();
    let mut storage = vec![[0u8; 256]; 64];
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < deadline {
        if !poll::wait_readable(socket, Duration::from_millis(50)).unwrap() {
            continue;
        }
        let mut buffers: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let n = batch.recv_into(socket, &mut buffers, true).unwrap();
        let lengths = batch.lengths().to_vec();
        let stamps = batch.rx_timestamps_ns().to_vec();
        for i in 0..n {
            got.push((storage[i][..lengths[i]].to_vec(), stamps[i].expect("a kernel receive stamp")));
        }
    }
    got
}

/// Checks that `got` are the `expected` payloads in order, naming the first difference.
fn same_datagrams<'a>(place: &str, got: impl Iterator<Item = &'a Vec<u8>>, expected: &[Vec<u8>]) {
    let got: Vec<&Vec<u8>> = got.collect();
    let first_wrong = got.iter().zip(expected).position(|(g, e)| *g != e);
    assert!(
        got.len() == expected.len() && first_wrong.is_none(),
        "{place}: {} of {} datagrams, first wrong at {first_wrong:?}",
        got.len(),
        expected.len()
    );
}

#[test]
#[ignore = "creates network namespaces as root: scripts/test runs it in release"]
fn frames_from_a_transmit_ring_reach_the_peer_ring_and_a_udp_socket_with_kernel_stamps() {
    let Some(bed) = testbed(ForwarderSide::Kernel) else { return };
    let (src_addr, dst_addr) = (SocketAddrV4::new(SOURCE_IP, 7001), SocketAddrV4::new(FORWARDER_IP, 7002));
    let (mut receiver, socket) = bed
        .in_forwarder(|| {
            let ring = AfPacketSocket::open(&bed.forwarder_dev, dst_addr, small_ring()).unwrap();
            let socket = UdpSocket::bind(dst_addr).unwrap();
            options::enable_rx_timestamps(&socket).unwrap();
            // Room for the whole run: the socket is read after the ring.
            options::set_receive_buffer(&socket, 4 << 20).unwrap();
            (ring, socket)
        })
        .unwrap();
    let (mut sender, kernel_sender) = bed
        .in_source(|| {
            let ring = AfPacketSocket::open(&bed.source_dev, src_addr, small_ring()).unwrap();
            (ring, UdpSocket::bind(SocketAddrV4::new(SOURCE_IP, 7009)).unwrap())
        })
        .unwrap();
    assert_eq!(sender.local().mac, bed.source_mac().unwrap());
    assert_eq!(receiver.local().mac, bed.forwarder_mac().unwrap());

    // Nothing has resolved the peer yet: the error says so, and how to fix it.
    let err = sender.send_to(dst_addr, b"too early").unwrap_err();
    assert!(matches!(err, AfPacketError::NeighbourUnknown { .. }), "{err}");
    assert!(err.to_string().contains(&bed.source_dev), "{err}");
    // One datagram through a kernel socket makes the kernel resolve it (read, from this
    // thread, through the table opened in the source namespace).
    kernel_sender.send_to(b"resolve", dst_addr).unwrap();
    assert_eq!(receive_udp(&socket, 1).len(), 1);
    assert_eq!(sender.neighbour(FORWARDER_IP).unwrap(), bed.forwarder_mac().unwrap());
    // The receive ring saw that datagram too; start counting afresh.
    let _ = receiver.recv(|_, _, _| {});

    let total = 300usize;
    let before = realtime_ns();
    let mut queued = 0;
    while queued < total {
        queued += sender
            .send_burst_with(dst_addr, (total - queued).min(32), |i, room| {
                let text = format!("datagram {}", queued + i);
                room[..text.len()].copy_from_slice(text.as_bytes());
                text.len()
            })
            .unwrap();
    }
    let mut on_ring = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while on_ring.len() < total && Instant::now() < deadline {
        receiver.recv(|src, payload, rx_ns| on_ring.push((src, payload.to_vec(), rx_ns)));
        receiver.wait_readable(Duration::from_millis(20)).unwrap();
    }
    let on_socket = receive_udp(&socket, total);
    let after = realtime_ns();

    let expected: Vec<Vec<u8>> = (0..total).map(|i| format!("datagram {i}").into_bytes()).collect();
    same_datagrams("the receive ring", on_ring.iter().map(|(_, p, _)| p), &expected);
    same_datagrams("the UDP socket", on_socket.iter().map(|(p, _)| p), &expected);
    assert!(on_ring.iter().all(|(src, _, _)| *src == src_addr));
    for ((_, _, ring_ns), (_, socket_ns)) in on_ring.iter().zip(&on_socket) {
        assert!((before..=after).contains(ring_ns), "{before} <= {ring_ns} <= {after}");
        assert!((before..=after).contains(socket_ns), "{before} <= {socket_ns} <= {after}");
    }
    // Once stamping is on, ring and socket see the same stamp: the frame's arrival.
    let same = on_ring.iter().zip(&on_socket).filter(|((_, _, r), (_, s))| r == s).count();
    eprintln!("{same} of {total} datagrams carried the same stamp on the ring and on the socket");
    assert!(same > 0, "ring and socket stamps never agreed");

    let stats = receiver.stats().unwrap();
    assert_eq!(stats.received as usize, total + 1);
    assert_eq!(stats.ring.kernel_drops, 0);
    assert_eq!(sender.stats().unwrap().sent as usize, total);
}

#[test]
#[ignore = "creates network namespaces as root: scripts/test runs it in release"]
fn a_ring_port_on_a_bare_interface_answers_a_udp_port() {
    let Some(bed) = testbed(ForwarderSide::Bare) else { return };
    let (src_addr, fwd_addr) = (SocketAddrV4::new(SOURCE_IP, 7001), SocketAddrV4::new(FORWARDER_IP, 7002));
    let mut source = UdpPort::new(bed.source_socket(7001).unwrap(), fwd_addr.into(), 1 << 20).unwrap();
    let mut socket = bed
        .in_forwarder(|| AfPacketSocket::open(&bed.forwarder_dev, fwd_addr, small_ring()))
        .unwrap()
        .unwrap();
    // The bare end has no address, so no ARP: its peer is pinned by hand.
    let err = AfPacketPort::new(
        bed.in_forwarder(|| AfPacketSocket::open(&bed.forwarder_dev, fwd_addr, small_ring()))
            .unwrap()
            .unwrap(),
        src_addr,
    )
    .unwrap_err();
    assert!(matches!(err, AfPacketError::NeighbourUnknown { .. }), "{err}");
    socket.set_neighbour(SOURCE_IP, bed.source_mac().unwrap());
    let mut forwarder = AfPacketPort::new(socket, src_addr).unwrap();
    assert_eq!(forwarder.capabilities().rx_timestamps, RxTimestamps::Kernel);
    assert_eq!(forwarder.name(), "af_packet");

    let packets: Vec<Packet> = (0..200u64)
        .map(|i| Packet { user: i as u32 % 5, seq: i, sent_ns: 1000 + i, ..Packet::default() })
        .collect();
    let mut sent = 0;
    let mut back = Vec::new();
    let mut buf = [Packet::default(); 64];
    let deadline = Instant::now() + Duration::from_secs(5);
    while back.len() < packets.len() && Instant::now() < deadline {
        if sent < packets.len() {
            sent += source.tx_burst(&packets[sent..(sent + 32).min(packets.len())]).unwrap();
        }
        let n = forwarder.rx_burst(&mut buf).unwrap();
        for p in &buf[..n] {
            assert!(p.rx_ns > 0, "a kernel stamp on the lab's clock");
        }
        let mut offered = 0;
        while offered < n {
            offered += forwarder.tx_burst(&buf[offered..n]).unwrap();
        }
        let m = source.rx_burst(&mut buf).unwrap();
        back.extend(buf[..m].iter().map(|p| Packet { rx_ns: 0, ..*p }));
        if n == 0 && m == 0 {
            forwarder.wait(Duration::from_millis(1));
        }
    }
    assert_eq!(back, packets, "every packet came back, in order");
    let stats = forwarder.stats();
    assert_eq!((stats.rx_packets, stats.tx_packets, stats.rx_invalid), (200, 200, 0));
    assert_eq!(forwarder.socket_mut().stats().unwrap().ring.kernel_drops, 0);
}

/// A ring port on the forwarder's end of `bed` bound to `ethertype`, answering the source's
/// port 7001 from port 7002 (the source's hardware address pinned: the end has no ARP).
fn forwarder_port(bed: &Testbed, ethertype: u16) -> AfPacketPort {
    let fwd_addr = SocketAddrV4::new(FORWARDER_IP, 7002);
    let config = RingConfig { ethertype, ..small_ring() };
    let mut socket =
        bed.in_forwarder(|| AfPacketSocket::open(&bed.forwarder_dev, fwd_addr, config)).unwrap().unwrap();
    socket.set_neighbour(SOURCE_IP, bed.source_mac().unwrap());
    AfPacketPort::new(socket, SocketAddrV4::new(SOURCE_IP, 7001)).unwrap()
}

/// The source's port 7001 on `bed`, and 100 data packets sent from it to the forwarder.
fn source_sending_100(bed: &Testbed) -> (UdpPort, Vec<Packet>) {
    let mut source =
        UdpPort::new(bed.source_socket(7001).unwrap(), SocketAddrV4::new(FORWARDER_IP, 7002).into(), 1 << 20)
            .unwrap();
    let packets: Vec<Packet> = (0..100u64).map(|i| Packet { user: 1, seq: i, ..Packet::default() }).collect();
    assert_eq!(source.tx_burst(&packets[..50]).unwrap(), 50);
    assert_eq!(source.tx_burst(&packets[50..]).unwrap(), 50);
    (source, packets)
}

#[test]
#[ignore = "creates network namespaces as root: scripts/test runs it in release"]
fn a_ring_takes_only_its_own_ethertype_so_a_send_only_ring_copies_nothing_in() {
    // The lab's forwarder: one ring on every ethertype (a tap, ahead of the kernel's stack) to
    // receive, one bound to an ethertype no frame carries to send.
    let Some(bed) = testbed(ForwarderSide::Bare) else { return };
    let (mut rx, mut tx) = (forwarder_port(&bed, ETH_P_ALL), forwarder_port(&bed, 0x88b5));
    let (mut source, packets) = source_sending_100(&bed);
    let mut got = Vec::new();
    let mut buf = [Packet::default(); 64];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < packets.len() && Instant::now() < deadline {
        let n = rx.rx_burst(&mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
        if n == 0 {
            rx.wait(Duration::from_millis(1));
        }
    }
    assert_eq!(got.len(), packets.len(), "the ring on every ethertype took every datagram");
    assert_eq!(tx.rx_burst(&mut buf).unwrap(), 0, "nothing for the send-only ring");
    assert_eq!(tx.socket_mut().stats().unwrap().ring.kernel_received, 0, "the kernel copied nothing into it");
    // It sends all the same.
    let mut sent = 0;
    while sent < got.len() {
        sent += tx.tx_burst(&got[sent..(sent + 64).min(got.len())]).unwrap();
    }
    let mut back = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while back < packets.len() && Instant::now() < deadline {
        back += source.rx_burst(&mut buf).unwrap();
    }
    assert_eq!(back, packets.len());
}

/// Sends 100 datagrams from the source to a ring on every ethertype at the forwarder's end set
/// up as `side`; returns how many the ring took and how many IPv4 packets the forwarder
/// namespace's stack took in (`Ip: InReceives`).
fn ring_and_stack_receives(side: ForwarderSide) -> Option<(usize, u64)> {
    let bed = testbed(side)?;
    let mut rx = forwarder_port(&bed, ETH_P_ALL);
    let stack_receives = || {
        let snmp =
            bed.in_forwarder(|| std::fs::read_to_string("/proc/thread-self/net/snmp")).unwrap().unwrap();
        // Two "Ip:" lines: the names, then the values.
        let mut ip = snmp.lines().filter(|l| l.starts_with("Ip:")).map(|l| l.split_whitespace());
        let (names, values) = (ip.next().unwrap(), ip.next().unwrap());
        names.zip(values).find(|(n, _)| *n == "InReceives").unwrap().1.parse::<u64>().unwrap()
    };
    let before = stack_receives();
    let (_source, packets) = source_sending_100(&bed);
    let (mut got, mut buf) = (0, [Packet::default(); 64]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while got < packets.len() && Instant::now() < deadline {
        got += rx.rx_burst(&mut buf).unwrap();
    }
    Some((got, stack_receives() - before))
}

#[test]
#[ignore = "creates network namespaces as root: scripts/test runs it in release"]
fn an_unclaimed_end_gives_every_frame_to_the_ring_and_none_to_the_stack() {
    let Some((ring, stack)) = ring_and_stack_receives(ForwarderSide::Unclaimed) else { return };
    assert_eq!((ring, stack), (100, 0), "the ring took every frame, the namespace's stack none");
    // Addressed to the end's own hardware address, the stack takes in every frame as well.
    let Some((ring, stack)) = ring_and_stack_receives(ForwarderSide::Bare) else { return };
    assert_eq!(ring, 100);
    assert!(stack >= 100, "the stack took in {stack} of 100 frames on a bare end");
}
