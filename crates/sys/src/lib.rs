//! `kairos-sys`: every operating-system call Kairos makes, behind safe, documented wrappers.
//!
//! Layer 0. The mechanisms above it (rings, RCU, the real-time shell, ports, the lab) hold no
//! OS `unsafe` of their own: what the kernel is asked, and what it may refuse, is written once
//! here, with the reason each call is sound. Failures come back as values (`io::Error`, typed
//! errors, `None`), never panics, because whether a thread may be pinned or made real-time, or
//! a file read, depends on the machine and the user, and callers degrade and say so.
//!
//! Modules:
//! - [`fs`]: bounded reads of files given from outside (configurations, traces), with errors
//!   that name the file.

#![warn(missing_docs)]

pub mod fs;
