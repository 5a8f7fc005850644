//! Checks repeated until they hold, within a limit: for a program that comes up, an election,
//! a member that catches up.
//!
//! Blocking: at most the limit plus one check and one pause.

use std::time::{Duration, Instant};

/// Runs `check` every `every` until it returns a value, for up to `limit`: the value, or
/// `None` once the limit has passed.
pub fn wait_for<T>(limit: Duration, every: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Runs `ready` every `every` until it holds, for up to `limit`: whether it held.
pub fn wait_until(limit: Duration, every: Duration, mut ready: impl FnMut() -> bool) -> bool {
    wait_for(limit, every, || ready().then_some(())).is_some()
}
