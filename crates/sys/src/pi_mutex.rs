//! A priority-inheritance mutex (`pthread_mutex` with `PTHREAD_PRIO_INHERIT`): what real-time
//! threads sharing state must use so that a low-priority holder is boosted instead of
//! inverting priorities. The lab measures RMDP handlers against threads that share one.
//!
//! The mutex is also error-checking (`PTHREAD_MUTEX_ERRORCHECK`): locking it twice on one
//! thread is the error `EDEADLK` instead of a hang, and unlocking it from a thread that does not
//! hold it is `EPERM`. The kernel tracks a PI mutex's owner by thread id, so only the locking
//! thread may unlock: [`PiGuard`] is therefore neither `Send` nor movable to another thread
//! (an unlock there would fail, the mutex would stay locked, and the next `lock` would wait
//! forever). [`PiGuard::unlock`] returns the kernel's answer; a guard dropped instead counts a
//! failed unlock in [`PiMutex::failed_unlocks`], since `Drop` cannot return it.
//!
//! The guard cannot be sent to another thread:
//!
//! ```compile_fail
//! use kairos_sys::pi_mutex::PiMutex;
//!
//! let mutex = PiMutex::new(0u64).unwrap();
//! let guard = mutex.lock().unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(move || drop(guard));
//! });
//! ```
//!
//! while the data it guards can be used on any thread, one at a time:
//!
//! ```
//! use kairos_sys::pi_mutex::PiMutex;
//!
//! let mutex = PiMutex::new(0u64).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| *mutex.lock().unwrap() += 1);
//! });
//! let guard = mutex.lock().unwrap();
//! assert_eq!(*guard, 1);
//! guard.unlock().unwrap();
//! ```

use std::cell::UnsafeCell;
use std::io;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

/// A mutex whose holder inherits the priority of its highest-priority waiter.
pub struct PiMutex<T> {
    // Boxed: a pthread mutex must not move once initialised.
    raw: Box<UnsafeCell<libc::pthread_mutex_t>>,
    failed_unlocks: AtomicU64,
    data: UnsafeCell<T>,
}

impl<T> std::fmt::Debug for PiMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PiMutex").field("failed_unlocks", &self.failed_unlocks()).finish_non_exhaustive()
    }
}

// SAFETY: access to `data` is serialised by the pthread mutex, as for std's Mutex.
unsafe impl<T: Send> Sync for PiMutex<T> {}
// SAFETY: moving the PiMutex moves the Box pointer, not the mutex it points to, and no guard
// can be alive while it moves (a guard borrows it).
unsafe impl<T: Send> Send for PiMutex<T> {}

/// Turns a pthread return code into an `io::Result`.
fn check(rc: i32) -> io::Result<()> {
    if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) }
}

impl<T> PiMutex<T> {
    /// A new, unlocked mutex holding `value`; fails if the C library refuses priority
    /// inheritance.
    pub fn new(value: T) -> io::Result<Self> {
        // SAFETY: an all-zero pthread_mutex_t is a valid place for pthread_mutex_init to write.
        let raw = Box::new(UnsafeCell::new(unsafe { std::mem::zeroed::<libc::pthread_mutex_t>() }));
        // SAFETY: the attribute object is initialised before use and destroyed after, on every
        // path; the mutex lives in its Box from here on and is initialised exactly once.
        unsafe {
            let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
            check(libc::pthread_mutexattr_init(attr.as_mut_ptr()))?;
            let result =
                check(libc::pthread_mutexattr_setprotocol(attr.as_mut_ptr(), libc::PTHREAD_PRIO_INHERIT))
                    .and_then(|()| {
                        check(libc::pthread_mutexattr_settype(
                            attr.as_mut_ptr(),
                            libc::PTHREAD_MUTEX_ERRORCHECK,
                        ))
                    })
                    .and_then(|()| check(libc::pthread_mutex_init(raw.get(), attr.as_ptr())));
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            result?;
        }
        Ok(Self { raw, failed_unlocks: AtomicU64::new(0), data: UnsafeCell::new(value) })
    }

    /// Waits for the mutex and returns its guard. `EDEADLK` if this thread already holds it.
    pub fn lock(&self) -> io::Result<PiGuard<'_, T>> {
        // SAFETY: the mutex was initialised in `new` and is destroyed only when `self` drops,
        // which no guard outlives.
        check(unsafe { libc::pthread_mutex_lock(self.raw.get()) })?;
        Ok(PiGuard { mutex: self, _locking_thread_only: PhantomData })
    }

    /// Unlocks through the C library, which checks that the calling thread holds the mutex
    /// (`EPERM` otherwise) and leaves the mutex as it was on refusal.
    fn unlock_raw(&self) -> io::Result<()> {
        // SAFETY: the mutex is initialised (as in `lock`); an error-checking mutex refuses an
        // unlock by a thread that does not hold it instead of corrupting its state.
        check(unsafe { libc::pthread_mutex_unlock(self.raw.get()) })
    }

    /// Unlocks that failed when a guard was dropped (never, unless the process is corrupt: a
    /// guard cannot leave its thread).
    pub fn failed_unlocks(&self) -> u64 {
        self.failed_unlocks.load(Ordering::Relaxed)
    }
}

impl<T> Drop for PiMutex<T> {
    fn drop(&mut self) {
        // SAFETY: no guard can outlive `self`, so the mutex is unlocked here.
        unsafe { libc::pthread_mutex_destroy(self.raw.get()) };
    }
}

/// Proof that the calling thread holds a [`PiMutex`]; unlocks it when dropped or by
/// [`PiGuard::unlock`]. Not `Send`: only the locking thread may unlock a PI mutex.
#[derive(Debug)]
pub struct PiGuard<'a, T> {
    mutex: &'a PiMutex<T>,
    // A raw pointer is neither Send nor Sync: the guard stays on the thread that locked.
    _locking_thread_only: PhantomData<*const ()>,
}

// SAFETY: sharing `&PiGuard` lends only `&T` to other threads, which is sound when T is Sync;
// the unlock still happens on the owning thread (as for std's MutexGuard).
unsafe impl<T: Sync> Sync for PiGuard<'_, T> {}

impl<T> PiGuard<'_, T> {
    /// Unlocks now and returns the kernel's answer.
    pub fn unlock(self) -> io::Result<()> {
        let guard = ManuallyDrop::new(self);
        guard.mutex.unlock_raw()
    }
}

impl<T> Deref for PiGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other thread touches the data.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T> DerefMut for PiGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T> Drop for PiGuard<'_, T> {
    fn drop(&mut self) {
        if self.mutex.unlock_raw().is_err() {
            self.mutex.failed_unlocks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_add_up_under_the_lock() {
        let m = Arc::new(PiMutex::new(0u64).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *m.lock().unwrap() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock().unwrap(), 40_000);
        assert_eq!(m.failed_unlocks(), 0);
    }

    #[test]
    fn an_unlock_by_a_thread_not_holding_the_mutex_is_reported_and_changes_nothing() {
        let m = PiMutex::new(7u32).unwrap();
        let guard = m.lock().unwrap();
        let other = std::thread::scope(|s| s.spawn(|| m.unlock_raw()).join().unwrap());
        assert_eq!(other.unwrap_err().raw_os_error(), Some(libc::EPERM));
        // Still held by this thread: its own unlock succeeds and the mutex is usable again.
        guard.unlock().unwrap();
        let again = std::thread::scope(|s| s.spawn(|| *m.lock().unwrap()).join().unwrap());
        assert_eq!(again, 7);
    }

    #[test]
    fn locking_twice_on_one_thread_is_an_error_not_a_hang() {
        let m = PiMutex::new(()).unwrap();
        let _held = m.lock().unwrap();
        assert_eq!(m.lock().unwrap_err().raw_os_error(), Some(libc::EDEADLK));
    }

    #[test]
    fn a_second_unlock_is_reported() {
        let m = PiMutex::new(()).unwrap();
        m.lock().unwrap().unlock().unwrap();
        assert_eq!(m.unlock_raw().unwrap_err().raw_os_error(), Some(libc::EPERM));
    }
}
