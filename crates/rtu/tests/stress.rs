//! The inbox under two threads at full speed: an I/O thread pushes sequence-numbered datagrams
//! of varying length into a small pool while a handler drains them in bursts of varying size.
//! Every datagram is either refused (the pool was dry) or read exactly once, in order, with
//! exactly the bytes and length it was written with. A second test pushes bursts (as the I/O
//! thread's `recvmmsg` does) and checks that none is lost.
//!
//! `KAIROS_STRESS_SCALE` (default 1) scales the number of datagrams.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use kairos_rtu::inbox;

fn datagrams() -> u64 {
    let scale: f64 = std::env::var("KAIROS_STRESS_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    ((1_000_000.0 * scale) as u64).max(1_000)
}

/// Datagram `seq`: 8 to 71 bytes, the sequence number then a pattern derived from it.
fn write(seq: u64, buf: &mut [u8]) -> usize {
    let len = 8 + (seq % 64) as usize;
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in buf[8..len].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    len
}

fn check(datagram: &[u8]) -> u64 {
    let seq = u64::from_le_bytes(datagram[..8].try_into().unwrap());
    assert_eq!(datagram.len(), 8 + (seq % 64) as usize, "length of datagram {seq}");
    for (i, &b) in datagram[8..].iter().enumerate() {
        assert_eq!(b, (seq as u8).wrapping_mul(31).wrapping_add(i as u8), "byte {i} of datagram {seq}");
    }
    seq
}

#[test]
fn every_datagram_is_read_once_in_order_or_refused() {
    let n = datagrams();
    let (mut ingress, mut inbox) = inbox(8, 128).unwrap();
    let done = AtomicBool::new(false);
    let (refused, read) = thread::scope(|s| {
        let io = s.spawn(|| {
            let mut refused = 0u64;
            for seq in 0..n {
                // Three datagrams in four wait for a buffer (so the pool turns over all the
                // time); the fourth is offered once, and refused when the pool is dry.
                let must = seq % 4 != 3;
                while !ingress.push_with(|b| Ok::<_, ()>(write(seq, b))).unwrap() {
                    if !must {
                        refused += 1;
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
            done.store(true, Ordering::Release);
            (refused, ingress)
        });
        let handler = s.spawn(|| {
            let (mut read, mut last, mut burst) = (0u64, None::<u64>, 1u64);
            loop {
                let finished = done.load(Ordering::Acquire);
                let got = inbox.drain(burst, |d| {
                    let seq = check(d);
                    assert!(last.is_none_or(|l| seq > l), "datagram {seq} after {last:?}");
                    last = Some(seq);
                    read += 1;
                });
                burst = burst % 13 + 1;
                if finished && got == 0 && inbox.is_empty() {
                    return read;
                }
            }
        });
        let (refused, ingress) = io.join().unwrap();
        let read = handler.join().unwrap();
        assert_eq!(ingress.pushed(), read, "pushed but never read");
        (refused, read)
    });
    assert_eq!(read + refused, n, "lost or duplicated");
    assert!(read > 0);
    eprintln!("{n} datagrams: {read} read, {refused} refused for a dry pool");
}

#[test]
fn bursts_arrive_whole_in_order_and_none_is_lost() {
    let n = datagrams();
    let (mut ingress, mut inbox) = inbox(16, 128).unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            let mut seq = 0u64;
            while seq < n {
                // Bursts of 1 to 7; whatever the pool could not take is offered again.
                let want = (1 + seq % 7).min(n - seq) as usize;
                let queued = ingress
                    .push_burst_with(want, |bufs, lens| {
                        for (i, b) in bufs.iter_mut().enumerate() {
                            lens[i] = write(seq + i as u64, b);
                        }
                        Ok::<_, ()>(bufs.len())
                    })
                    .unwrap();
                seq += queued as u64;
                if queued == 0 {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u64;
        while next < n {
            inbox.drain(1 + next % 11, |d| {
                assert_eq!(check(d), next, "datagram out of order or lost");
                next += 1;
            });
        }
        assert!(inbox.is_empty());
    });
}
