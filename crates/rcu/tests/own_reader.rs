//! A thread that waits for a grace period while its own reader is online would wait forever: the
//! reader cannot pass a quiescent state while its thread waits. Every blocking wait (`replace`
//! and `defer` under `Direct` or at the watermark under `OnFull::Synchronize`, `synchronize`)
//! refuses instead, handing the value back. Each case runs under a watchdog: before the refusal
//! existed these calls hung, and a hang must fail the test rather than the test run.
#![cfg(not(loom))]

use kairos_rcu::{DeferError, Domain, DomainConfig, OnFull, RcuCell, ReclaimPolicy};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// Runs `f` on a thread of its own and fails if it has not returned within 10 s. Every call here
/// returns within a scheduling delay (a refusal at once, a real grace period as soon as the other
/// thread's reader runs); only a wait that can never end reaches the limit.
fn returns<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let limit = Duration::from_secs(10);
    let (done, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    outcome.recv_timeout(limit).unwrap_or_else(|_| {
        panic!("the call did not return within {limit:?}: it waits for its own thread's reader")
    })
}

#[test]
fn replace_under_direct_with_this_threads_reader_online_is_refused_instead_of_hanging() {
    returns(|| {
        let domain = Domain::with_policy(ReclaimPolicy::Direct).unwrap();
        let cell = RcuCell::new(&domain, 1u64);
        let mut reader = domain.register("packet-loop").unwrap();
        let refused = cell.replace(2).unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("'packet-loop'") && message.contains("offline"), "{message}");
        let DeferError::ReaderOnline { value, error } = refused else { panic!("{refused:?}") };
        assert_eq!((value, error.reader.as_str()), (2, "packet-loop"), "the value comes back");
        assert_eq!(*cell.read(&reader), 1, "nothing was published");
        // Offline, the same thread may wait: no reader of its own holds the grace period up.
        reader.offline_while(|| cell.replace(3).unwrap());
        assert_eq!(*cell.read(&reader), 3);
        assert_eq!(domain.stats().callbacks_run, 1, "the retired value was freed once");
    });
}

#[test]
fn synchronize_with_this_threads_reader_online_is_refused_instead_of_hanging() {
    returns(|| {
        let domain = Domain::with_policy(ReclaimPolicy::Offload).unwrap();
        let mut reader = domain.register("r").unwrap();
        assert_eq!(domain.synchronize().unwrap_err().reader, "r");
        let offline = reader.offline();
        domain.synchronize().unwrap();
        offline.online();
        assert!(domain.synchronize().is_err(), "back online, it is this thread's again");
        drop(reader);
        domain.synchronize().unwrap();
    });
}

#[test]
fn defer_under_direct_hands_the_callback_back_unrun() {
    returns(|| {
        let domain = Domain::with_policy(ReclaimPolicy::Direct).unwrap();
        let _reader = domain.register("r").unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let refused = domain.defer(move || flag.store(true, Ordering::SeqCst)).unwrap_err();
        assert!(!ran.load(Ordering::SeqCst));
        refused.into_value()();
        assert!(ran.load(Ordering::SeqCst), "the caller got the callback back and may run it");
        let refused = domain.defer_drop_all(vec![Box::new(1u8), Box::new(2u8)]).unwrap_err();
        assert_eq!(refused.into_value().len(), 2);
        let stats = domain.stats();
        assert_eq!((stats.callbacks_deferred, stats.pending), (0, 0), "nothing was taken");
    });
}

#[test]
fn a_full_backlog_that_would_synchronize_is_refused_too() {
    returns(|| {
        let config = DomainConfig {
            policy: ReclaimPolicy::Inline,
            high_watermark: 2,
            on_full: OnFull::Synchronize,
            ..DomainConfig::default()
        };
        let domain = Domain::new(config).unwrap();
        let _reader = domain.register("r").unwrap();
        domain.defer_drop(Box::new(1u32)).unwrap();
        domain.defer_drop(Box::new(2u32)).unwrap();
        let refused = domain.defer_drop(Box::new(3u32)).unwrap_err();
        assert!(matches!(refused, DeferError::ReaderOnline { .. }), "{refused:?}");
        assert_eq!(*refused.into_value(), 3);
        assert_eq!(domain.pending(), 2, "below the watermark, callbacks queue as before");
    });
}

#[test]
fn another_threads_reader_is_waited_for_not_refused() {
    returns(|| {
        let domain = Domain::with_policy(ReclaimPolicy::Direct).unwrap();
        let cell = Arc::new(RcuCell::new(&domain, 1u64));
        let stop = Arc::new(AtomicBool::new(false));
        let (registered, wait) = mpsc::channel();
        let (d, c, s) = (domain.clone(), Arc::clone(&cell), Arc::clone(&stop));
        let reader = std::thread::spawn(move || {
            let mut reader = d.register("other").unwrap();
            registered.send(()).unwrap();
            while !s.load(Ordering::SeqCst) {
                assert!(*c.read(&reader) >= 1);
                reader.quiescent();
                std::thread::yield_now();
            }
        });
        wait.recv().unwrap();
        cell.replace(2).unwrap();
        stop.store(true, Ordering::SeqCst);
        reader.join().unwrap();
    });
}
