//! Entering a network namespace: `setns(2)` on a namespace file (`/var/run/netns/<name>`, as
//! `ip netns` makes them).
//!
//! Only the calling thread moves; sockets it then creates stay in the namespace whichever
//! thread uses them, so the testbed enters a namespace on a short-lived helper thread, binds,
//! and hands the socket back. Needs `CAP_SYS_ADMIN`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Moves the calling thread into the network namespace `namespace` is open on.
pub fn enter_network_namespace(namespace: &File) -> io::Result<()> {
    // SAFETY: `namespace` is an open file for the whole call; setns changes only this thread
    // and fails with EINVAL when the file is not a network namespace.
    let rc = unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_no_namespace_is_refused() {
        let file = File::open("/proc/self/status").unwrap();
        let err = std::thread::spawn(move || enter_network_namespace(&file)).join().unwrap().unwrap_err();
        assert!(matches!(err.raw_os_error(), Some(libc::EINVAL | libc::EPERM)), "{err}");
    }

    #[test]
    fn entering_the_current_namespace_works_as_root() {
        if !crate::user::is_root() {
            eprintln!("skipped: setns needs root");
            return;
        }
        let file = File::open("/proc/self/ns/net").unwrap();
        std::thread::spawn(move || enter_network_namespace(&file)).join().unwrap().unwrap();
    }
}
