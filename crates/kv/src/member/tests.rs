//! The member's loop as a process would run it, in this process: a one-member cluster on
//! loopback and a client speaking RESP to it.

use super::open::tests::config;
use super::*;
use crate::resp::client::{Connection, Reply, info_field};
use std::sync::Arc;

/// Runs a one-member cluster with `busy_poll`, sends `requests` PINGs one after another (each
/// after the answer to the one before), and returns the member's INFO `busy_poll_hits`.
fn busy_poll_hits(busy_poll: Option<Duration>, requests: usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), Sync::Never);
    c.busy_poll = busy_poll;
    let stop = Arc::new(AtomicBool::new(false));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let loop_stop = Arc::clone(&stop);
    let member = std::thread::spawn(move || {
        let mut member = Member::open(c).unwrap();
        addr_tx.send(member.client_addr().unwrap()).unwrap();
        member.run(&loop_stop)
    });
    // The member's thread is stopped and joined on every way out of the exchange below.
    let exchange = || -> io::Result<u64> {
        let addr = addr_rx.recv_timeout(Duration::from_secs(10)).map_err(io::Error::other)?;
        let mut client = Connection::connect(addr, Duration::from_secs(10))?;
        for _ in 0..requests {
            match client.call(&[b"PING"])? {
                Reply::Status(s) if s == "PONG" => {}
                other => return Err(io::Error::other(format!("PING answered {other:?}"))),
            }
        }
        let info = client.info("stats")?;
        let hits = info_field(&info, "busy_poll_hits")
            .ok_or_else(|| io::Error::other(format!("no busy_poll_hits in INFO: {info}")))?;
        hits.parse().map_err(io::Error::other)
    };
    let hits = exchange();
    stop.store(true, Ordering::Relaxed);
    member.join().unwrap().unwrap();
    hits.unwrap()
}

#[test]
fn a_member_that_took_a_request_finds_the_next_one_awake_and_one_told_not_to_poll_never_does() {
    // Each PING after the first comes within the window (a generous one: a stalled test
    // thread on a busy host must not make the count), so most are found by polling.
    let hits = busy_poll_hits(Some(Duration::from_millis(200)), 20);
    assert!(hits >= 10, "{hits} of 19 requests after the first found the member polling");
    assert_eq!(busy_poll_hits(None, 20), 0, "a member without busy polling never polls");
}
