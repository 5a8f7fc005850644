//! Loom model of the inbox's hand-off: the I/O thread fills a buffer and passes its index on;
//! the handler reads it and passes the index back; the I/O thread refills the same buffer. With
//! one buffer, every interleaving (and reordering the memory model allows) is explored; buffers
//! live in loom cells, so a read not ordered after its write, or a refill racing a read, is
//! reported. The assertions check that no datagram is torn, lost, duplicated or reordered.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p kairos-rtu --test loom --release`
#![cfg(loom)]

use kairos_rtu::inbox;
use loom::thread;

/// Runs `f` under loom over every schedule ([`kairos_sync::explore`]).
fn model(f: impl Fn() + Sync + Send + 'static) {
    kairos_sync::explore(None, f);
}

fn check(datagram: &[u8], got: &mut Vec<u8>) {
    assert_eq!(datagram.len(), 3, "a datagram's length travels with it");
    assert!(datagram.iter().all(|&b| b == datagram[0]), "torn datagram {datagram:?}");
    got.push(datagram[0]);
}

fn hand_off(buffers: usize, drains: usize) {
    model(move || {
        let (mut ingress, mut inbox) = inbox(buffers, 4).unwrap();
        let io = thread::spawn(move || {
            let mut refused = Vec::new();
            for v in [1u8, 2, 3] {
                let pushed = ingress.push_with(|b| {
                    b[..3].fill(v);
                    Ok::<_, ()>(3)
                });
                if pushed != Ok(true) {
                    refused.push(v);
                }
            }
            refused
        });
        let handler = thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..drains {
                inbox.drain(1, |d| check(d, &mut got));
            }
            (inbox, got)
        });
        let refused = io.join().unwrap();
        let (mut inbox, mut got) = handler.join().unwrap();
        while inbox.drain(4, |d| check(d, &mut got)) > 0 {}
        assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
        let mut all = got.clone();
        all.extend(refused);
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3], "lost or duplicated");
    });
}

#[test]
fn one_buffer_reused_across_the_hand_off() {
    hand_off(1, 2);
}

#[test]
fn two_buffers() {
    hand_off(2, 1);
}
