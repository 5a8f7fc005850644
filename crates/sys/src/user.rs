//! Who the process runs as: the effective user id, which decides whether namespaces, cpusets,
//! real-time policies and forced socket buffers are allowed.

/// The process's effective user id (`geteuid`).
pub fn effective_user_id() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether the process runs as root (effective user id 0).
pub fn is_root() -> bool {
    effective_user_id() == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_user_matches_proc() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        // Uid: real effective saved filesystem
        let effective: u32 = uid_line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(effective_user_id(), effective);
        assert_eq!(is_root(), effective == 0);
    }
}
