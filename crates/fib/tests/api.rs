//! The FIB contract for every implementation, the RW lock's write preference, and a concurrent
//! test: one writer, two readers, every tuple read must be whole and never older than one read
//! before it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

#[cfg(feature = "peers")]
use kairos_fib::PapayaFib;
use kairos_fib::{AddrTuple, Fib, FibError, FibKind, FibReader, RcuFib, RwLockFib, SeqlockFib};
use kairos_rcu::ReclaimPolicy;

const USERS: u32 = 64;

/// A tuple whose MAC is derived from its stamp, so a torn read shows.
fn tuple(stamp: u64) -> AddrTuple {
    let b = stamp.to_le_bytes();
    AddrTuple::new([b[0], b[1], b[2], b[3], b[4], b[0] ^ b[1]], stamp)
}

fn contract<F: Fib>(fib: &F) {
    assert_eq!(fib.len(), USERS as usize);
    let mut reader = fib.reader().unwrap();
    assert_eq!(reader.lookup(3), Some(tuple(0)));
    assert_eq!(reader.lookup(USERS), None);
    // An RCU writer under `Direct` waits for every online reader, so it refuses to write while
    // this thread's own reader is online (it would wait for itself); offline, it may.
    match fib.update(3, tuple(42)) {
        Ok(()) => {}
        Err(FibError::ReaderOnline(_)) => {
            assert_eq!(reader.lookup(3), Some(tuple(0)), "{}: a refused update changes nothing", fib.name());
            reader.offline_while(&mut || fib.update(3, tuple(42)).unwrap());
        }
        Err(other) => panic!("{}: {other}", fib.name()),
    }
    drop(reader);
    let mut reader = fib.reader().unwrap();
    assert_eq!(reader.lookup(3), Some(tuple(42)));
    assert_eq!(reader.lookup(4), Some(tuple(0)));
    assert_eq!(fib.update(USERS + 1, tuple(1)), Err(FibError::UnknownUser(USERS + 1)));
}

/// `UPDATES` writes while two readers look up every user in a loop.
/// Runs one at a time: each spins three threads, and on a 2-core machine two of them at once
/// starve an RCU writer that waits for grace periods.
fn concurrent<F: Fib, const UPDATES: u64>(fib: &F) {
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let stop = AtomicBool::new(false);
    let online = Barrier::new(3);
    // Readers that have looked up every user once. The writer waits for both halfway through
    // its updates, so every reader reads while writes are still to come, however late the
    // scheduler runs it (on a loaded machine a reader once ran only after the last update).
    let read_once = AtomicUsize::new(0);
    thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut reader = fib.reader().unwrap();
                    let mut last = vec![0u64; USERS as usize];
                    let mut lookups = 0u64;
                    online.wait();
                    while !stop.load(Ordering::Relaxed) {
                        for user in 0..USERS {
                            let t = reader.lookup(user).unwrap();
                            assert_eq!(t, tuple(t.stamp_ns), "torn tuple for user {user}");
                            assert!(t.stamp_ns >= last[user as usize], "user {user} went back in time");
                            last[user as usize] = t.stamp_ns;
                            lookups += 1;
                        }
                        reader.quiescent();
                        if lookups == u64::from(USERS) {
                            read_once.fetch_add(1, Ordering::Release);
                        }
                    }
                    lookups
                })
            })
            .collect();
        online.wait();
        for stamp in 1..=UPDATES {
            fib.update((stamp % u64::from(USERS)) as u32, tuple(stamp)).unwrap();
            if stamp == UPDATES / 2 {
                // A reader ends early only by panicking: then its join below reports it.
                while read_once.load(Ordering::Acquire) < 2 && !readers.iter().any(|r| r.is_finished()) {
                    thread::yield_now();
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
    // After the writer is done, every user holds the last stamp written for it.
    let mut reader = fib.reader().unwrap();
    for user in 0..u64::from(USERS) {
        let last = (1..=UPDATES).rev().find(|s| s % u64::from(USERS) == user).unwrap();
        assert_eq!(reader.lookup(user as u32).unwrap(), tuple(last));
    }
}

#[test]
fn every_fib_keeps_the_contract() {
    let users = 0..USERS;
    contract(&RcuFib::new(users.clone(), tuple(0), ReclaimPolicy::Direct).unwrap());
    contract(&RcuFib::new(users.clone(), tuple(0), ReclaimPolicy::Offload).unwrap());
    contract(&RwLockFib::new(users.clone(), tuple(0)));
    contract(&SeqlockFib::new(users.clone(), tuple(0)));
    #[cfg(feature = "peers")]
    contract(&PapayaFib::new(users, tuple(0)));
}

#[test]
fn rcu_direct_refuses_an_update_while_the_writers_own_reader_is_online() {
    let fib = RcuFib::new(0..USERS, tuple(0), ReclaimPolicy::Direct).unwrap();
    let reader = fib.reader().unwrap();
    let refused = fib.update(3, tuple(42)).unwrap_err();
    assert!(matches!(refused, FibError::ReaderOnline(_)), "{refused:?}");
    assert!(refused.to_string().contains("offline"), "{refused}");
    drop(reader);
    fib.update(3, tuple(42)).unwrap();
    // Under `Offload` the writer never waits, so its own reader may stay online.
    let fib = RcuFib::new(0..USERS, tuple(0), ReclaimPolicy::Offload).unwrap();
    let reader = fib.reader().unwrap();
    fib.update(3, tuple(42)).unwrap();
    drop(reader);
}

#[test]
fn concurrent_rcu_direct() {
    // Each write waits for a grace period; with three spinning threads on two cores that is
    // milliseconds (the woken writer waits for a reader's time slice), so fewer writes.
    concurrent::<_, 500>(&RcuFib::new(0..USERS, tuple(0), ReclaimPolicy::Direct).unwrap());
}

#[test]
fn concurrent_rcu_offload() {
    concurrent::<_, 200_000>(&RcuFib::new(0..USERS, tuple(0), ReclaimPolicy::Offload).unwrap());
}

#[test]
fn concurrent_rwlock() {
    concurrent::<_, 200_000>(&RwLockFib::new(0..USERS, tuple(0)));
}

#[test]
fn concurrent_seqlock() {
    concurrent::<_, 200_000>(&SeqlockFib::new(0..USERS, tuple(0)));
}

#[test]
#[cfg(feature = "peers")]
fn concurrent_papaya() {
    concurrent::<_, 200_000>(&PapayaFib::new(0..USERS, tuple(0)));
}

/// Once a writer waits for the lock, a new reader must wait too (write preference), even though
/// the lock is only read-held. A reader-preferring lock would let `try_read` succeed forever and
/// starve the control thread.
#[test]
fn rwlock_prefers_a_waiting_writer_over_new_readers() {
    let fib = RwLockFib::new(0..USERS, tuple(0));
    let lock = fib.lock();
    let held = lock.read().unwrap();
    let (started, writer_started) = mpsc::channel();
    thread::scope(|s| {
        s.spawn(|| {
            started.send(()).unwrap();
            fib.update(1, tuple(9)).unwrap();
        });
        writer_started.recv().unwrap();
        // Wait (at most 10 s) until the writer is queued: from then on new readers are refused.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut refused = false;
        while Instant::now() < deadline {
            match lock.try_read() {
                Ok(guard) => drop(guard),
                Err(_) => {
                    refused = true;
                    break;
                }
            }
            thread::sleep(Duration::from_micros(200));
        }
        assert!(refused, "a new reader got the lock while a writer waited: the lock is not write-preferring");
        drop(held);
    });
    assert_eq!(fib.reader().unwrap().lookup(1), Some(tuple(9)));
}

#[test]
fn kinds_parse() {
    for k in FibKind::ALL {
        assert_eq!(k.name().parse::<FibKind>().unwrap(), k);
    }
    assert!("btree".parse::<FibKind>().unwrap_err().to_string().contains("seqlock"));
}
