//! A priority-inheritance mutex (`pthread_mutex` with `PTHREAD_PRIO_INHERIT`): what real-time
//! threads sharing state must use so that a low-priority holder is boosted instead of
//! inverting priorities. The peer the RMDP handlers are measured against.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

pub struct PiMutex<T> {
    // Boxed: a pthread mutex must not move once initialised.
    raw: Box<UnsafeCell<libc::pthread_mutex_t>>,
    data: UnsafeCell<T>,
}

impl<T> std::fmt::Debug for PiMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PiMutex")
    }
}

// SAFETY: access to `data` is serialised by the pthread mutex, as for std's Mutex.
unsafe impl<T: Send> Sync for PiMutex<T> {}
// SAFETY: moving the PiMutex moves the Box pointer, not the mutex it points to.
unsafe impl<T: Send> Send for PiMutex<T> {}

impl<T> PiMutex<T> {
    pub fn new(value: T) -> std::io::Result<Self> {
        // SAFETY: an all-zero pthread_mutex_t is a valid place for pthread_mutex_init to write.
        let raw = Box::new(UnsafeCell::new(unsafe { std::mem::zeroed::<libc::pthread_mutex_t>() }));
        // SAFETY: the attribute object is initialised before use and destroyed after; the
        // mutex lives in its Box from here on and is initialised exactly once.
        unsafe {
            let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
            let check = |rc: i32| if rc == 0 { Ok(()) } else { Err(std::io::Error::from_raw_os_error(rc)) };
            check(libc::pthread_mutexattr_init(attr.as_mut_ptr()))?;
            let result =
                check(libc::pthread_mutexattr_setprotocol(attr.as_mut_ptr(), libc::PTHREAD_PRIO_INHERIT))
                    .and_then(|()| check(libc::pthread_mutex_init(raw.get(), attr.as_ptr())));
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            result?;
        }
        Ok(Self { raw, data: UnsafeCell::new(value) })
    }

    pub fn lock(&self) -> PiGuard<'_, T> {
        // SAFETY: the mutex was initialised in `new` and is not destroyed before `self` drops;
        // a default (non-recursive) mutex locked by this thread is released by the guard.
        let rc = unsafe { libc::pthread_mutex_lock(self.raw.get()) };
        assert_eq!(rc, 0, "pthread_mutex_lock failed: {rc}");
        PiGuard { mutex: self }
    }
}

impl<T> Drop for PiMutex<T> {
    fn drop(&mut self) {
        // SAFETY: no guard can outlive `self`, so the mutex is unlocked here.
        unsafe { libc::pthread_mutex_destroy(self.raw.get()) };
    }
}

#[derive(Debug)]
pub struct PiGuard<'a, T> {
    mutex: &'a PiMutex<T>,
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
        // SAFETY: this thread locked the mutex when it made the guard.
        unsafe { libc::pthread_mutex_unlock(self.mutex.raw.get()) };
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
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 40_000);
    }
}
