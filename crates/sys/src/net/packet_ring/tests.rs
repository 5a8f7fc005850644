use super::*;

#[test]
fn an_unknown_interface_is_named_in_the_error() {
    let err = PacketRing::open("kairos-none0", RingConfig::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("kairos-none0: if_nametoindex"), "{text}");
}

#[test]
fn bad_shapes_are_refused_before_any_socket() {
    let odd = RingConfig { frame_size: 3000, ..RingConfig::default() };
    let text = PacketRing::open("lo", odd).unwrap_err().to_string();
    assert!(text.contains("power of two"), "{text}");
    let long = "x".repeat(16);
    assert!(
        PacketRing::open(&long, RingConfig::default()).unwrap_err().to_string().contains("interface name")
    );
    let blocks = RingConfig {
        rx: RxLayout::Blocks { count: 4, block_size: 4096, timeout_ms: 0 },
        ..RingConfig::default()
    };
    assert!(PacketRing::open("lo", blocks).unwrap_err().to_string().contains("timer"));
}

#[test]
fn header_offsets_match_the_kernel_structs() {
    assert_eq!(TX_V2.data, libc::TPACKET2_HDRLEN - size_of::<libc::sockaddr_ll>());
    assert_eq!(TX_V3.data, libc::TPACKET3_HDRLEN - size_of::<libc::sockaddr_ll>());
    assert_eq!(std::mem::offset_of!(libc::tpacket3_hdr, tp_status), TX_V3.status);
    assert_eq!(std::mem::offset_of!(libc::tpacket3_hdr, tp_len), TX_V3.len);
    assert_eq!(std::mem::offset_of!(libc::tpacket3_hdr, tp_snaplen), TX_V3.snaplen);
    assert_eq!(std::mem::offset_of!(libc::tpacket3_hdr, tp_mac), 24);
    assert_eq!(std::mem::offset_of!(libc::tpacket2_hdr, tp_mac), 12);
    assert_eq!(std::mem::offset_of!(libc::tpacket2_hdr, tp_sec), 16);
    assert_eq!(std::mem::offset_of!(libc::tpacket_block_desc, hdr), 8);
}

/// Runs `f` on a thread of its own in a network namespace of its own (unshared, `lo` up),
/// so a test's frames stay there; the namespace goes away with the thread and the sockets.
fn in_private_namespace<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only this thread.
                let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "unshare: {}", io::Error::last_os_error());
                let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
                let mut req = ifreq_for("lo");
                // SAFETY: `req` names `lo` and is writable for both calls; the flags are the
                // union member SIOCGIFFLAGS fills and SIOCSIFFLAGS reads.
                unsafe {
                    assert_eq!(libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req), 0);
                    req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
                    assert_eq!(libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req), 0);
                }
                f()
            })
            .join()
            .unwrap()
    })
}

/// Loopback in a private namespace: a frame sent on the transmit ring comes back on the
/// receive ring of a second ring on `lo`, stamped, with either receive layout.
#[test]
fn a_frame_goes_round_loopback_as_root() {
    if !crate::user::is_root() {
        eprintln!("skipped: AF_PACKET and namespaces need root");
        return;
    }
    in_private_namespace(|| {
        for rx in [
            RxLayout::Frames { count: 64 },
            RxLayout::Blocks { count: 4, block_size: 1 << 16, timeout_ms: 1 },
        ] {
            let config = RingConfig { rx, tx_frames: 16, ..RingConfig::default() };
            let mut receiver = PacketRing::open("lo", config).unwrap();
            let mut sender = PacketRing::open("lo", config).unwrap();
            assert_eq!(sender.hardware_address().unwrap(), [0; 6], "lo has no hardware address");
            // An Ethernet frame of the experimental ethertype 0x88b5, with a marker.
            let mut frame = [0u8; 64];
            frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            frame[14..30].copy_from_slice(b"kairos-ring-test");
            let before = crate::clock::realtime_ns();
            assert_eq!(sender.tx_burst(&[&frame]).unwrap(), 1);
            let mut got = None;
            for _ in 0..2000 {
                receiver.rx_burst(64, |bytes, stamp| {
                    if bytes.len() >= 30 && &bytes[14..30] == b"kairos-ring-test" {
                        got = Some((bytes.to_vec(), stamp));
                    }
                });
                if got.is_some() {
                    break;
                }
                receiver.wait_readable(Duration::from_millis(5)).unwrap();
            }
            let (bytes, stamp) = got.expect("the frame came back on loopback");
            assert_eq!(&bytes[..], &frame[..]);
            assert!(stamp >= before && stamp <= crate::clock::realtime_ns(), "{rx:?}: stamp {stamp}");
            let stats = receiver.statistics().unwrap();
            assert!(stats.rx_frames >= 1 && stats.kernel_received >= 1, "{stats:?}");
            assert_eq!(sender.statistics().unwrap().tx_frames, 1);
        }
    });
}

/// Many frames through both layouts: every one arrives, in order, and a panicking closure
/// neither loses the ring's place nor keeps its slot.
#[test]
fn bursts_arrive_in_order_and_a_panic_keeps_the_ring_in_step_as_root() {
    if !crate::user::is_root() {
        eprintln!("skipped: AF_PACKET and namespaces need root");
        return;
    }
    in_private_namespace(|| {
        for rx in [
            RxLayout::Frames { count: 32 },
            RxLayout::Blocks { count: 4, block_size: 1 << 12, timeout_ms: 1 },
        ] {
            let config = RingConfig { rx, tx_frames: 32, ..RingConfig::default() };
            let mut receiver = PacketRing::open("lo", config).unwrap();
            let mut sender = PacketRing::open("lo", config).unwrap();
            let frame = |i: u32| {
                let mut f = [0u8; 60];
                f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
                f[14..18].copy_from_slice(&i.to_be_bytes());
                f
            };
            let mut seen = Vec::new();
            let mut panicked = false;
            let total = 200u32;
            let mut sent = 0u32;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while seen.len() < total as usize && std::time::Instant::now() < deadline {
                if sent < total {
                    let burst: Vec<[u8; 60]> = (sent..total.min(sent + 8)).map(frame).collect();
                    let slices: Vec<&[u8]> = burst.iter().map(|f| &f[..]).collect();
                    sent += sender.tx_burst(&slices).unwrap() as u32;
                }
                let take = |bytes: &[u8], seen: &mut Vec<u32>| {
                    if bytes.len() >= 18 && bytes[12..14] == 0x88b5u16.to_be_bytes() {
                        seen.push(u32::from_be_bytes(bytes[14..18].try_into().unwrap()));
                    }
                };
                if !panicked && seen.len() >= 50 {
                    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        receiver.rx_burst(1, |bytes, _| {
                            take(bytes, &mut seen);
                            panic!("a closure that fails");
                        })
                    }));
                    // Err once a frame was there for the closure to fail on.
                    panicked = caught.is_err();
                }
                receiver.rx_burst(16, |bytes, _| take(bytes, &mut seen));
                if sent == total && seen.len() < total as usize {
                    receiver.wait_readable(Duration::from_millis(5)).unwrap();
                }
            }
            assert!(panicked, "{rx:?}: the failing closure never ran");
            assert_eq!(seen, (0..total).collect::<Vec<_>>(), "{rx:?}");
            assert_eq!(receiver.statistics().unwrap().kernel_drops, 0);
        }
    });
}

#[test]
fn frames_of_bad_length_are_refused_whole_as_root() {
    if !crate::user::is_root() {
        eprintln!("skipped: AF_PACKET and namespaces need root");
        return;
    }
    in_private_namespace(|| {
        let mut ring = PacketRing::open("lo", RingConfig { tx_frames: 4, ..RingConfig::default() }).unwrap();
        let ok = [0u8; 60];
        let short = [0u8; 10];
        let err = ring.tx_burst(&[&ok, &short]).unwrap_err();
        assert!(matches!(err, PacketRingError::FrameLength { len: 10, .. }), "{err}");
        let long = vec![0u8; ring.max_tx_frame() + 1];
        assert!(ring.tx_burst(&[&long]).is_err());
        assert_eq!(ring.statistics().unwrap().tx_frames, 0);
        // A full ring: more frames than slots in one burst queue only as many as there are
        // free slots (loopback frees them quickly, so allow for some reuse within the burst).
        let (_, tx_slots) = ring.slots();
        let burst = vec![&ok[..]; tx_slots * 4];
        let queued = ring.tx_burst(&burst).unwrap();
        assert!(queued >= 1 && queued <= burst.len());
    });
}
