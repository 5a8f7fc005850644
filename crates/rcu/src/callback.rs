//! Deferred callbacks: one piece of reclamation work each, run exactly once.
//!
//! A [`Callback`] is either "drop this box" (a function pointer and a raw pointer: no allocation
//! beyond the retired object itself) or a boxed closure. Where callbacks wait, and who runs them
//! when, is the backlog's business (`backlog`).

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

// SAFETY: `Drop` pointers come only from `Callback::drop_box::<T>` and `Callback::drop_raw::<T>`,
// both with `T: Send`, so the box may be dropped on any thread; `Call` closures are `Send` by
// their type.
unsafe impl Send for Callback {}

/// Drops a `Box<T>` given as a type-erased pointer.
///
/// # Safety
/// `ptr` must come from `Box::<T>::into_raw`, not have been freed, and not be used afterwards.
unsafe fn drop_box<T>(ptr: *mut ()) {
    // SAFETY: the caller's contract: `ptr` is an unfreed `Box<T>` pointer that nobody else uses,
    // so rebuilding the box and dropping it frees the value exactly once.
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
