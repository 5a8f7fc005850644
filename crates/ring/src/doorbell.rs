//! A doorbell: lets the consumer of a ring sleep when the ring is empty, and the producer wake it
//! only when it sleeps (one fence and one load per burst otherwise, no syscall).
//!
//! On a machine with fewer cores than polling threads, a consumer that spins on an empty ring
//! takes the core from the producer that would fill it; one that sleeps gives it back. The
//! classic lost wake-up is avoided Dekker-style: the consumer announces it is going to sleep,
//! then looks at the ring once more; the producer publishes, then looks for the announcement;
//! sequentially consistent fences on both sides make at least one of them see the other.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::thread::Thread;
use std::time::Duration;

/// Sleep and wake-up between one waiting consumer and any number of producers. Share it (an
/// `Arc`, or a reference into a scope) between the ring's two sides.
#[derive(Debug, Default)]
pub struct Doorbell {
    sleeping: AtomicBool,
    sleeper: OnceLock<Thread>,
}

impl Doorbell {
    /// A doorbell nobody waits on yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleeps until [`Doorbell::ring`] or `timeout`, unless `ready()` (checked after announcing
    /// the sleep) says there is work. Only one thread may wait on a doorbell.
    pub fn wait(&self, timeout: Duration, ready: impl Fn() -> bool) {
        let me = self.sleeper.get_or_init(std::thread::current);
        debug_assert_eq!(me.id(), std::thread::current().id(), "one waiter per doorbell");
        self.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !ready() {
            std::thread::park_timeout(timeout);
        }
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Wakes the waiter if it sleeps. Call after publishing work.
    #[inline]
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed)
            && self.sleeping.swap(false, Ordering::Relaxed)
            && let Some(t) = self.sleeper.get()
        {
            t.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_rung_sleeper_wakes_long_before_its_timeout() {
        let bell = Arc::new(Doorbell::new());
        let work = Arc::new(AtomicU64::new(0));
        let (b, w) = (Arc::clone(&bell), Arc::clone(&work));
        let (woke, woken) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            while w.load(Ordering::Acquire) == 0 {
                b.wait(Duration::from_secs(3_600), || w.load(Ordering::Acquire) > 0);
            }
            let _ = woke.send(());
        });
        std::thread::sleep(Duration::from_millis(20));
        work.store(1, Ordering::Release);
        bell.ring();
        // A delivered ring wakes the consumer within a scheduling delay; a lost one leaves it
        // asleep for its hour-long timeout. 60 s tells the two apart on any machine, however
        // loaded.
        woken.recv_timeout(Duration::from_secs(60)).expect("the ring was lost: the consumer slept on");
    }
}
