//! A thread with an owner: it runs until its owner raises its stop flag, and the owner joins it
//! on every path, so no measurement or I/O thread outlives the value that started it.
//!
//! The thread's body polls the flag it is given (every iteration of its loop, or at least every
//! few milliseconds). [`StoppableThread::stop`] raises the flag, joins, and returns the body's
//! result, or [`ThreadDied`] with the panic's message when the body panicked, so a dead thread
//! is an error its owner sees instead of a silently missing result. Dropping the owner without
//! `stop` raises the flag and joins too (the result, and a panic, are then discarded: the panic
//! was already printed by the panic hook). Joining waits as long as the body takes to notice
//! the flag; nothing here can bound that but the body.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// A thread's body panicked; its result is lost.
#[derive(Debug, thiserror::Error)]
#[error("thread {thread} died: {message}")]
pub struct ThreadDied {
    /// The thread's name.
    pub thread: String,
    /// The panic's message (or a note that it was not text).
    pub message: String,
}

/// A running thread that stops and is joined when its owner says so or drops it.
#[derive(Debug)]
pub struct StoppableThread<T> {
    name: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> StoppableThread<T> {
    /// Starts `body` on a thread named `name`; `body` must return soon after the flag it is
    /// given turns true. Fails only when the system cannot start a thread.
    pub fn spawn<F>(name: impl Into<String>, body: F) -> io::Result<Self>
    where
        F: FnOnce(&AtomicBool) -> T + Send + 'static,
    {
        let name = name.into();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new().name(name.clone()).spawn(move || body(&flag))?;
        Ok(Self { name, stop, handle: Some(handle) })
    }
}

impl<T> StoppableThread<T> {
    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Raises the stop flag without waiting: an owner of several threads raises every flag
    /// first, then stops each, so they wind down together.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether the body has returned (or panicked) already.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Raises the stop flag, waits for the body to return, and returns its result, or why
    /// there is none.
    pub fn stop(mut self) -> Result<T, ThreadDied> {
        self.request_stop();
        let handle = self.handle.take().expect("the handle is taken only here and in drop");
        handle
            .join()
            .map_err(|payload| ThreadDied { thread: self.name.clone(), message: panic_message(&*payload) })
    }
}

impl<T> Drop for StoppableThread<T> {
    fn drop(&mut self) {
        self.request_stop();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The text of a panic payload (`panic!` with a literal or a format string), for any code that
/// joins a thread and reports why it died.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic whose payload is not text".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn until_stopped(flag: &AtomicBool) -> u64 {
        let mut rounds = 0;
        while !flag.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
            rounds += 1;
        }
        rounds
    }

    #[test]
    fn stop_returns_the_body_result() {
        let thread = StoppableThread::spawn("test-stop", until_stopped).unwrap();
        assert_eq!(thread.name(), "test-stop");
        std::thread::sleep(Duration::from_millis(5));
        assert!(!thread.is_finished());
        assert!(thread.stop().unwrap() >= 1);
    }

    #[test]
    fn a_panicking_body_is_an_error_with_its_message() {
        let thread =
            StoppableThread::spawn("test-panic", |_: &AtomicBool| -> u64 { panic!("sensor {} lost", 3) })
                .unwrap();
        while !thread.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let err = thread.stop().unwrap_err();
        assert_eq!(err.thread, "test-panic");
        assert_eq!(err.message, "sensor 3 lost");
        assert_eq!(err.to_string(), "thread test-panic died: sensor 3 lost");
    }

    #[test]
    fn dropping_the_owner_stops_and_joins_the_thread() {
        let alive = Arc::new(AtomicBool::new(true));
        let seen = Arc::clone(&alive);
        let thread = StoppableThread::spawn("test-drop", move |flag| {
            until_stopped(flag);
            seen.store(false, Ordering::SeqCst);
        })
        .unwrap();
        drop(thread);
        // Joined: the body finished before drop returned.
        assert!(!alive.load(Ordering::SeqCst));
    }

    #[test]
    fn dropping_the_owner_of_a_dead_thread_does_not_panic() {
        let thread = StoppableThread::spawn("test-drop-dead", |_: &AtomicBool| panic!("gone")).unwrap();
        drop::<StoppableThread<()>>(thread);
    }
}
