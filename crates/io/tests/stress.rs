//! The pool under three threads, as the forwarder uses it: one allocates and writes packets and
//! sends them over a drop-oldest ring and a keep-latest ring, two receive, check every byte the
//! sender wrote and free; what the rings evict comes back to the sender, who frees it. At the end
//! every buffer is back in the pool, and every packet received was whole and in order.
//!
//! `KAIROS_STRESS_SCALE` (default 1) scales the number of packets.

mod common;
use common::Packet;
use std::sync::atomic::{AtomicBool, Ordering};

use kairos_io::pool::{Buf, buf_ring, keyed_buf_ring, pool};
use kairos_ring::Overflow;

/// A receiving end: appends what it took to the vector, returns how many.
type Recv = Box<dyn FnMut(&mut Vec<Buf>) -> usize + Send>;

const POOL: usize = 256;
const KEYS: u32 = 16;

fn scale() -> f64 {
    std::env::var("KAIROS_STRESS_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

/// A packet whose every field is derived from `seq`, so a torn or stale read shows.
fn packet(seq: u64) -> Packet {
    Packet {
        user: (seq % u64::from(KEYS)) as u32,
        seq,
        sent_ns: seq.wrapping_mul(3),
        tag: !seq,
        ..Packet::default()
    }
}

fn whole(p: &Packet) -> bool {
    *p == packet(p.seq)
}

#[test]
fn buffers_cross_threads_whole_in_order_and_all_come_back() {
    let total = (2_000_000.0 * scale()).max(1_000.0) as u64;
    let (slots, mut alloc, freer) = pool(POOL).unwrap();
    let (mut fifo_tx, mut fifo_rx) = buf_ring(&slots, 32, Overflow::DropOldest).unwrap();
    let (mut keyed_tx, mut keyed_rx) = keyed_buf_ring(&slots, 32, KEYS as usize).unwrap();
    let done = AtomicBool::new(false);
    let slots = &*slots;
    let (received_fifo, received_keyed) = std::thread::scope(|s| {
        let receiver = |mut recv: Recv, keyed: bool| {
            let mut freer = freer.clone();
            let done = &done;
            s.spawn(move || {
                let (mut got, mut last) = (Vec::new(), [None::<u64>; KEYS as usize]);
                let mut count = 0u64;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    if recv(&mut got) == 0 && finished {
                        break count;
                    }
                    for buf in &got {
                        let p = slots.packet(buf);
                        assert!(whole(p), "a torn packet: {p:?}");
                        // In order per key (keyed) or overall (FIFO): never an older one after.
                        let key = if keyed { p.user as usize } else { 0 };
                        assert!(last[key].is_none_or(|l| l < p.seq), "seq {} after {:?}", p.seq, last[key]);
                        last[key] = Some(p.seq);
                        count += 1;
                    }
                    freer.free_all(got.drain(..));
                }
            })
        };
        let fifo = receiver(Box::new(move |out| fifo_rx.recv(32, out)), false);
        let keyed = receiver(Box::new(move |out| keyed_rx.recv(32, out)), true);
        let mut freer = freer.clone();
        let (mut bufs, mut dropped, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut seq, mut bursts) = (0u64, 0u64);
        while seq < total {
            let want = (total - seq).min(16) as usize;
            if alloc.alloc_burst(want, &mut bufs) == 0 {
                std::thread::yield_now();
                continue;
            }
            for buf in bufs.iter_mut() {
                *slots.packet_mut(buf) = packet(seq);
                seq += 1;
            }
            bursts += 1;
            if bursts % 2 == 0 {
                fifo_tx.send(&mut bufs, &mut dropped);
            } else {
                pairs.extend(bufs.drain(..).map(|b| (slots.packet(&b).user, b)));
                keyed_tx.send(&mut pairs, &mut dropped);
            }
            freer.free_all(dropped.drain(..));
        }
        done.store(true, Ordering::Release);
        (fifo.join().unwrap(), keyed.join().unwrap())
    });
    assert!(received_fifo > 0 && received_keyed > 0, "{received_fifo} {received_keyed}");
    assert!(received_fifo + received_keyed <= total);
    assert_eq!(alloc.available(), POOL, "a buffer was lost or freed twice");
}
