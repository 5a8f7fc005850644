//! Deferred callbacks and the queue they wait in for their grace period.
//!
//! A [`Callback`] is either "drop this box" (a function pointer and a raw pointer: no allocation
//! beyond the retired object itself) or a boxed closure. Callbacks wait in a [`Queue`]:
//! `unsealed` collects those deferred while a grace period is in flight; when none is in flight
//! they are sealed into a [`Batch`] stamped with the ticket of a freshly started grace period
//! (so callbacks deferred during one grace period share the next one, as in the kernel); sealed
//! batches complete in order. `spilled` holds callbacks whose grace period has already ended but
//! which a reader handed on (its budget ran out, or it unregistered).

use crate::ready::Ready;
use std::collections::VecDeque;

/// One deferred piece of reclamation work.
pub(crate) struct Callback {
    kind: Kind,
    /// Bytes this callback frees, for the unreclaimed-memory account (0 when unknown).
    pub(crate) bytes: usize,
}

enum Kind {
    Drop { ptr: *mut (), drop: unsafe fn(*mut ()) },
    Call(Box<dyn FnOnce() + Send>),
}

// SAFETY: `Drop` pointers come only from `Callback::drop_box::<T>` with `T: Send`, so the box may
// be dropped on any thread; `Call` closures are `Send` by their type.
unsafe impl Send for Callback {}

/// Drops a `Box<T>` given as a type-erased pointer.
///
/// # Safety
/// `ptr` must come from `Box::<T>::into_raw` and not have been freed.
unsafe fn drop_box<T>(ptr: *mut ()) {
    // SAFETY: guaranteed by the caller: `ptr` is an unfreed `Box<T>` pointer.
    drop(unsafe { Box::from_raw(ptr.cast::<T>()) });
}

impl Callback {
    /// A callback that drops `value`.
    pub(crate) fn drop_box<T: Send + 'static>(value: Box<T>) -> Self {
        Self {
            kind: Kind::Drop { ptr: Box::into_raw(value).cast(), drop: drop_box::<T> },
            bytes: std::mem::size_of::<T>(),
        }
    }

    /// A callback that drops the `Box<T>` behind `ptr`.
    ///
    /// # Safety
    /// `ptr` must come from `Box::<T>::into_raw` and be owned by this callback from now on.
    pub(crate) unsafe fn drop_raw<T: Send + 'static>(ptr: *mut T) -> Self {
        Self { kind: Kind::Drop { ptr: ptr.cast(), drop: drop_box::<T> }, bytes: std::mem::size_of::<T>() }
    }

    /// A callback that runs `f`, declared to free `bytes`.
    pub(crate) fn call(f: Box<dyn FnOnce() + Send>, bytes: usize) -> Self {
        Self { kind: Kind::Call(f), bytes }
    }

    /// Runs the callback, consuming it.
    pub(crate) fn run(self) {
        match self.kind {
            // SAFETY: `ptr` came from `Box::<T>::into_raw` with the matching `drop_box::<T>` and
            // this callback owned it; running consumes the callback, so it is freed once.
            Kind::Drop { ptr, drop } => unsafe { drop(ptr) },
            Kind::Call(f) => f(),
        }
    }
}

/// Callbacks sealed against one grace period.
pub(crate) struct Batch {
    pub(crate) ticket: u64,
    pub(crate) callbacks: Vec<Callback>,
}

/// The domain's callback queue; guarded by the domain's queue lock.
#[derive(Default)]
pub(crate) struct Queue {
    pub(crate) unsealed: Vec<Callback>,
    pub(crate) sealed: VecDeque<Batch>,
    pub(crate) spilled: Ready,
}

impl Queue {
    /// Takes every callback, in any state (used when no reader can exist any more).
    pub(crate) fn take_all(&mut self) -> Ready {
        let mut all = std::mem::take(&mut self.spilled);
        for batch in self.sealed.drain(..) {
            all.push(batch.callbacks);
        }
        all.push(std::mem::take(&mut self.unsealed));
        all
    }
}
