//! The std side of the shim: the helpers' promises that the loom models take for granted
//! (poisoning ignored, `try_lock` never blocking) and the cell's pointers reaching the value.
//! Under loom these types work only inside `loom::model`, where the crates' models use them.
#![cfg(not(loom))]

use kairos_sync::{Arc, CachePadded, Mutex, UnsafeCell, backoff, lock, spin, try_lock};

/// A mutex poisoned by a thread that panicked while holding it.
fn poisoned(value: u32) -> Arc<Mutex<u32>> {
    let mutex = Arc::new(Mutex::new(value));
    let held = Arc::clone(&mutex);
    let died = std::thread::spawn(move || {
        let _guard = held.lock().unwrap();
        panic!("dies holding the lock");
    })
    .join();
    assert!(died.is_err());
    assert!(mutex.is_poisoned());
    mutex
}

#[test]
fn lock_after_a_poisoning_panic_returns_the_guard() {
    let mutex = poisoned(7);
    let mut guard = lock(&mutex);
    assert_eq!(*guard, 7);
    *guard = 8;
    drop(guard);
    assert_eq!(*lock(&mutex), 8);
}

#[test]
fn try_lock_is_none_while_held_and_some_when_free() {
    let mutex = Mutex::new(1u32);
    let guard = lock(&mutex);
    assert!(try_lock(&mutex).is_none());
    drop(guard);
    assert_eq!(try_lock(&mutex).map(|guard| *guard), Some(1));
}

#[test]
fn try_lock_is_none_while_another_thread_holds_it() {
    let mutex = Arc::new(Mutex::new(()));
    let (locked, wait) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = {
        let mutex = Arc::clone(&mutex);
        std::thread::spawn(move || {
            let _guard = lock(&mutex);
            locked.send(()).unwrap();
            released.recv().unwrap();
        })
    };
    wait.recv().unwrap();
    assert!(try_lock(&mutex).is_none());
    release.send(()).unwrap();
    holder.join().unwrap();
    assert!(try_lock(&mutex).is_some());
}

#[test]
fn try_lock_ignores_poisoning() {
    let mutex = poisoned(3);
    assert_eq!(try_lock(&mutex).map(|guard| *guard), Some(3));
}

#[test]
fn cell_writes_through_with_mut_are_read_through_with() {
    let cell = UnsafeCell::new(String::from("before"));
    cell.with_mut(|value| {
        // SAFETY: the cell is this thread's alone, and no other pointer to it is in use.
        unsafe { (*value).push_str(" and after") }
    });
    // SAFETY: as above; the write ended with the closure above.
    let read = cell.with(|value| unsafe { (*value).clone() });
    assert_eq!(read, "before and after");
    assert_eq!(cell.with(|value| value as usize), cell.get() as usize);
    assert_eq!(format!("{cell:?}"), "UnsafeCell { .. }");
}

#[test]
fn cache_padded_values_start_lines_of_their_own() {
    let padded = [CachePadded(1u8), CachePadded(2u8)];
    assert_eq!(std::mem::align_of::<CachePadded<u8>>(), 128);
    assert_eq!(std::mem::size_of_val(&padded), 256);
    assert_eq!(*padded[1], 2);
}

#[test]
fn wait_hints_return() {
    for round in [0, 63, 64, 127, 128, 1000] {
        backoff(round);
    }
    spin();
}
