use super::*;

/// A layout whose slots hold exactly `max_message` bytes (a multiple of 8).
fn exact(slots: usize, max_message: usize) -> BridgeLayout {
    BridgeLayout::new(slots, SLOT_HEADER_BYTES + max_message).unwrap()
}

fn bridge(slots: usize, max_message: usize) -> (Producer<HeapMemory>, Consumer<HeapMemory>) {
    let layout = exact(slots, max_message);
    Bridge::init(HeapMemory::for_layout(layout), layout).unwrap().split()
}

#[test]
fn layouts_are_checked() {
    assert_eq!(BridgeLayout::new(0, 64), Err(LayoutError::Slots { slots: 0 }));
    assert_eq!(BridgeLayout::new(MAX_SLOTS + 1, 64), Err(LayoutError::Slots { slots: MAX_SLOTS as u64 + 1 }));
    assert_eq!(BridgeLayout::new(1, 16), Err(LayoutError::SlotBytes { slot_bytes: 16 }));
    assert_eq!(BridgeLayout::new(1, 30), Err(LayoutError::SlotBytes { slot_bytes: 30 }));
    assert!(BridgeLayout::new(1, MAX_SLOT_BYTES + 8).is_err());
    let l = BridgeLayout::new(3, 80).unwrap();
    assert_eq!((l.slots(), l.slot_bytes(), l.max_message()), (3, 80, 64));
    assert_eq!(l.region_bytes(), HEADER_BYTES + 3 * 80);
    let l = BridgeLayout::for_messages(3, 61).unwrap();
    assert_eq!((l.slot_bytes(), l.max_message()), (128, 112));
    assert_eq!(BridgeLayout::for_messages(1, 48).unwrap().slot_bytes(), 64);
    assert_eq!(BridgeLayout::for_messages(1, 0).unwrap().slot_bytes(), 64);
    assert!(BridgeLayout::for_messages(1, usize::MAX).is_err());
    assert!(BridgeLayout::for_messages(1, usize::MAX - 70).is_err());
}

#[test]
fn messages_arrive_whole_and_in_order_with_their_stamps() {
    let (mut tx, mut rx) = bridge(3, 40);
    let mut buf = [0u8; 40];
    assert_eq!(rx.try_recv(&mut buf), Ok(None));
    for round in 0..10u8 {
        for len in [0usize, 1, 7, 8, 9, 40] {
            let msg: Vec<u8> = (0..len as u8).map(|i| i ^ round).collect();
            tx.try_send(&msg, u64::from(round) << 32 | len as u64).unwrap();
            let r = rx.try_recv(&mut buf).unwrap().unwrap();
            assert_eq!(r, Received { len, stamp_ns: u64::from(round) << 32 | len as u64 });
            assert_eq!(&buf[..len], &msg[..]);
        }
    }
    assert_eq!(rx.try_recv(&mut buf), Ok(None));
    let s = rx.stats();
    assert_eq!((s.sent, s.received, s.queued(), s.dropped_full), (60, 60, 0, 0));
}

#[test]
fn a_full_bridge_refuses_and_counts() {
    for slots in [1, 2, 5] {
        let (mut tx, mut rx) = bridge(slots, 8);
        for i in 0..slots as u64 {
            tx.try_send(&i.to_ne_bytes(), i).unwrap();
        }
        assert_eq!(tx.try_send(b"x", 0), Err(SendError::Full));
        assert_eq!(tx.try_send(b"y", 0), Err(SendError::Full));
        let s = tx.stats();
        assert_eq!((s.sent, s.dropped_full, s.queued()), (slots as u64, 2, slots as u64));
        let mut buf = [0u8; 8];
        assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, 0);
        tx.try_send(b"z", 99).unwrap();
        for i in 1..slots as u64 {
            assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, i);
        }
        assert_eq!(rx.try_recv(&mut buf).unwrap(), Some(Received { len: 1, stamp_ns: 99 }));
        assert_eq!(&buf[..1], b"z");
        assert_eq!(rx.try_recv(&mut buf), Ok(None));
    }
}

#[test]
fn too_large_messages_and_small_buffers() {
    let (mut tx, mut rx) = bridge(2, 8);
    assert_eq!(tx.try_send(&[0; 9], 0), Err(SendError::TooLarge { len: 9, max: 8 }));
    assert_eq!(tx.stats().dropped_too_large, 1);
    tx.try_send(&[7; 8], 1).unwrap();
    let mut small = [0u8; 4];
    assert_eq!(rx.try_recv(&mut small), Err(RecvError::BufferTooSmall { len: 8, capacity: 4 }));
    let mut buf = [0u8; 8];
    assert_eq!(rx.try_recv(&mut buf), Ok(Some(Received { len: 8, stamp_ns: 1 })));
    assert_eq!(buf, [7; 8]);
}

#[test]
fn bursts_take_what_fits() {
    let (mut tx, mut rx) = bridge(3, 8);
    let msgs: Vec<&[u8]> = vec![b"a", b"bb", b"ccc", b"dddd"];
    assert_eq!(tx.try_send_burst(&msgs, 5), Ok(3));
    assert_eq!(tx.stats().dropped_full, 1);
    assert_eq!(tx.try_send_burst(&[b"123456789"], 5), Err(SendError::TooLarge { len: 9, max: 8 }));
    let mut got = Vec::new();
    let mut buf = [0u8; 8];
    assert_eq!(rx.try_recv_burst(&mut buf, 2, |m, t| got.push((m.to_vec(), t))), Ok(2));
    assert_eq!(tx.try_send_burst(&msgs[3..], 6), Ok(1));
    assert_eq!(rx.try_recv_burst(&mut buf, 10, |m, t| got.push((m.to_vec(), t))), Ok(2));
    assert_eq!(rx.try_recv_burst(&mut buf, 10, |_, _| panic!("empty")), Ok(0));
    let expected: Vec<(Vec<u8>, u64)> =
        vec![(b"a".to_vec(), 5), (b"bb".to_vec(), 5), (b"ccc".to_vec(), 5), (b"dddd".to_vec(), 6)];
    assert_eq!(got, expected);
}

#[test]
fn attach_reads_what_init_wrote_and_resumes_positions() {
    let layout = exact(4, 16);
    let memory = Arc::new(HeapMemory::for_layout(layout));
    let (mut tx, _) = Bridge::init(Arc::clone(&memory), layout).unwrap().split();
    tx.try_send(b"one", 1).unwrap();
    tx.try_send(b"two", 2).unwrap();
    tx.beat(1234);
    tx.close();
    let other = Bridge::attach(Arc::clone(&memory)).unwrap();
    assert_eq!(other.layout(), layout);
    let mut rx = other.into_consumer();
    assert!(rx.producer_closed());
    let mut buf = [0u8; 16];
    assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, 1);
    drop(rx);
    // A consumer attached later resumes after the message already consumed.
    let mut rx = Bridge::attach(Arc::clone(&memory)).unwrap().into_consumer();
    assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, 2);
    assert_eq!(rx.try_recv(&mut buf), Ok(None));
    let s = rx.stats();
    assert_eq!((s.sent, s.received, s.producer_beat_ns, s.closed), (2, 2, 1234, true));
}

#[test]
fn garbage_headers_are_errors() {
    let layout = exact(4, 16);
    let memory = Arc::new(HeapMemory::for_layout(layout));
    assert_eq!(Bridge::attach(Arc::clone(&memory)).unwrap_err(), BridgeError::NotABridge { found: 0 });
    assert!(matches!(Bridge::attach(HeapMemory::new(100)), Err(BridgeError::TooSmall { have: 128, .. })));
    assert!(matches!(
        Bridge::init(HeapMemory::new(HEADER_BYTES), layout),
        Err(BridgeError::TooSmall { have: HEADER_BYTES, .. })
    ));
    Bridge::init(Arc::clone(&memory), layout).unwrap();
    let words = memory.words();
    words[VERSION_AT].store(2, Ordering::Relaxed);
    assert_eq!(Bridge::attach(Arc::clone(&memory)).unwrap_err(), BridgeError::Version { found: 2 });
    words[VERSION_AT].store(VERSION, Ordering::Relaxed);
    words[SLOTS_AT].store(0, Ordering::Relaxed);
    assert_eq!(
        Bridge::attach(Arc::clone(&memory)).unwrap_err(),
        BridgeError::Layout(LayoutError::Slots { slots: 0 })
    );
    words[SLOTS_AT].store(u64::MAX, Ordering::Relaxed);
    assert!(matches!(Bridge::attach(Arc::clone(&memory)), Err(BridgeError::Layout(_))));
    words[SLOTS_AT].store(5, Ordering::Relaxed);
    assert!(matches!(Bridge::attach(Arc::clone(&memory)), Err(BridgeError::TooSmall { .. })));
    words[SLOTS_AT].store(4, Ordering::Relaxed);
    words[SLOT_BYTES_AT].store(33, Ordering::Relaxed);
    assert!(matches!(Bridge::attach(Arc::clone(&memory)), Err(BridgeError::Layout(_))));
    words[SLOT_BYTES_AT].store(layout.slot_bytes() as u64, Ordering::Relaxed);
    assert!(Bridge::attach(Arc::clone(&memory)).is_ok());
    for (i, word) in words.iter().enumerate() {
        word.store(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1), Ordering::Relaxed);
    }
    assert!(Bridge::attach(memory).is_err());
}

#[test]
fn a_hostile_producer_is_reported_not_followed() {
    let layout = exact(4, 16);
    let memory = Arc::new(HeapMemory::for_layout(layout));
    let mut rx = Bridge::init(Arc::clone(&memory), layout).unwrap().into_consumer();
    let words = memory.words();
    let mut buf = [0u8; 16];
    // A position beyond one ring ahead.
    words[SENT_AT].store(5, Ordering::Release);
    assert_eq!(rx.try_recv(&mut buf), Err(Corrupt::Positions { sent: 5, received: 0, slots: 4 }.into()));
    assert!(rx.try_recv_burst(&mut buf, 4, |_, _| ()).is_err());
    // A position behind ours.
    words[SENT_AT].store(u64::MAX, Ordering::Release);
    assert!(matches!(rx.try_recv(&mut buf), Err(RecvError::Corrupt(Corrupt::Positions { .. }))));
    // A length beyond the slot, then a sane one: the bad message is not consumed.
    words[SENT_AT].store(1, Ordering::Release);
    words[HEADER_WORDS].store(u64::MAX, Ordering::Relaxed);
    let bad = Corrupt::Length { position: 0, len: u64::MAX, max: 16 };
    assert_eq!(rx.try_recv(&mut buf), Err(bad.into()));
    assert_eq!(rx.try_recv_burst(&mut buf, 1, |_, _| ()), Err(bad.into()));
    words[HEADER_WORDS].store(17, Ordering::Relaxed);
    assert!(rx.try_recv(&mut buf).is_err());
    words[HEADER_WORDS].store(3, Ordering::Relaxed);
    assert_eq!(rx.try_recv(&mut buf), Ok(Some(Received { len: 3, stamp_ns: 0 })));
    assert_eq!(rx.stats().received, 1);
}

#[test]
fn a_hostile_consumer_is_reported_not_followed() {
    let layout = exact(2, 8);
    let memory = Arc::new(HeapMemory::for_layout(layout));
    let mut tx = Bridge::init(Arc::clone(&memory), layout).unwrap().into_producer();
    let words = memory.words();
    words[RECEIVED_AT].store(7, Ordering::Release);
    assert_eq!(tx.try_send(b"a", 0), Err(Corrupt::Positions { sent: 0, received: 7, slots: 2 }.into()));
    words[RECEIVED_AT].store(0, Ordering::Release);
    tx.try_send(b"a", 0).unwrap();
    tx.try_send(b"b", 0).unwrap();
    assert_eq!(tx.try_send(b"c", 0), Err(SendError::Full));
    // A consumer claiming to have read what was never sent does not earn extra room.
    words[RECEIVED_AT].store(3, Ordering::Release);
    assert!(matches!(tx.try_send(b"c", 0), Err(SendError::Corrupt(_))));
    // Nor does rewriting the producer's own fields: it keeps its counts privately.
    words[RECEIVED_AT].store(2, Ordering::Release);
    words[SENT_AT].store(1000, Ordering::Relaxed);
    words[DROPPED_FULL_AT].store(1000, Ordering::Relaxed);
    tx.try_send(b"c", 0).unwrap();
    let s = tx.stats();
    assert_eq!((s.sent, s.dropped_full), (3, 1000));
    assert_eq!(tx.try_send(b"d", 0), Ok(()));
    assert_eq!(tx.try_send(b"e", 0), Err(SendError::Full));
    assert_eq!(tx.stats().dropped_full, 2);
}
