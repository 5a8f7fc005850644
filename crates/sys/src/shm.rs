//! Memory shared between processes: a file under `/dev/shm` mapped `MAP_SHARED` by each side.
//!
//! The express lane's node exchanges messages with applications through rings laid out in such
//! regions (`kairos_ring::bridge`), so that neither side makes a system call per message. This
//! module owns only the mapping: creating the file exclusively (mode 0600, so only the same user,
//! or root, can open it), sizing it, mapping it, and undoing all of that on drop. What the bytes
//! mean, and how two processes agree on them, belongs to the user of the region.
//!
//! Ownership of the file: the region that created it unlinks it when dropped (the creator owns
//! the name), a region that opened an existing file does not; [`SharedRegion::set_unlink_on_drop`]
//! changes either. Unlinking removes the name only: a process that still has the region mapped
//! keeps its memory until it unmaps it.
//!
//! The mapping is handed out as a raw pointer ([`SharedRegion::as_ptr`]): another process may
//! write it at any time, so Rust references to plain data in it would be unsound; its user
//! reaches it through atomics and argues why. The region stays mapped, at the same address,
//! for as long as the `SharedRegion` lives. One thing no mapping can prevent: a peer with the
//! right to open the file may shrink it (`ftruncate`), after which touching the lost pages
//! raises SIGBUS in every process mapping it. Mode 0600 limits that to the same user.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::RangeInclusive;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// Where shared regions live: the tmpfs every Linux system mounts for POSIX shared memory.
pub const SHM_DIR: &str = "/dev/shm";

/// Why a shared region could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The name given for a file under [`SHM_DIR`] is not a plain file name.
    #[error("'{name}': not a valid shared memory name (one path component, not '.' or '..')")]
    BadName {
        /// The name given.
        name: String,
    },
    /// A region of zero bytes was asked for (there is nothing to map).
    #[error("{}: a shared region needs at least one byte", .path.display())]
    Empty {
        /// The file's path.
        path: PathBuf,
    },
    /// The existing file's size is outside what the caller expects.
    #[error("{}: {len} bytes, expected {} to {} bytes", .path.display(), .expected.start(), .expected.end())]
    Size {
        /// The file's path.
        path: PathBuf,
        /// The file's size, bytes.
        len: u64,
        /// The sizes the caller accepts, bytes.
        expected: RangeInclusive<usize>,
    },
    /// The path names something other than a regular file.
    #[error("{}: not a regular file", .path.display())]
    NotAFile {
        /// The file's path.
        path: PathBuf,
    },
    /// The operating system refused one of the steps.
    #[error("{}: {step}: {source}", .path.display())]
    Io {
        /// The file's path.
        path: PathBuf,
        /// The step that failed (`create`, `open`, `ftruncate`, `mmap`, ...).
        step: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

/// The path of the shared memory file `name` under [`SHM_DIR`]. `name` must be one path
/// component (no `/`, not empty, not `.` or `..`), so the file cannot land elsewhere.
pub fn shm_path(name: &str) -> Result<PathBuf, ShmError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(ShmError::BadName { name: name.to_owned() });
    }
    Ok(Path::new(SHM_DIR).join(name))
}

/// A file-backed shared mapping, readable and writable, unmapped when dropped (and its file
/// unlinked, when this region owns it).
#[derive(Debug)]
pub struct SharedRegion {
    ptr: NonNull<u8>,
    len: usize,
    path: PathBuf,
    unlink_on_drop: bool,
}

// SAFETY: a `SharedRegion` holds an address and a length, never a reference into the mapping:
// it reads and writes none of the mapped bytes itself (its users do, through the raw pointer,
// under their own arguments). Unmapping in `drop` is valid from any thread, so the handle may
// move to another thread.
unsafe impl Send for SharedRegion {}
// SAFETY: the methods callable through `&SharedRegion` only return the address, the length and
// the path, which nothing mutates after construction but `set_unlink_on_drop` (which takes
// `&mut self`).
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// Creates the file `path` (which must not exist) with mode 0600, sizes it to `len` bytes
    /// (zeroed) and maps it shared. The region owns the file: dropping it unlinks `path`. On any
    /// failure after the file was created, the file is removed again.
    pub fn create(path: &Path, len: usize) -> Result<Self, ShmError> {
        let err = |step, source| ShmError::Io { path: path.to_path_buf(), step, source };
        if len == 0 {
            return Err(ShmError::Empty { path: path.to_path_buf() });
        }
        // `create_new` is O_CREAT | O_EXCL: it never opens an existing file nor follows a
        // symbolic link planted at the path; std adds O_CLOEXEC.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| err("create", e))?;
        let sized = (|| {
            // The umask may have removed bits from the mode but never added any; set it exactly.
            file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| err("fchmod", e))?;
            file.set_len(len as u64).map_err(|e| err("ftruncate", e))?;
            map(&file, len).map_err(|e| err("mmap", e))
        })();
        match sized {
            Ok(ptr) => Ok(Self { ptr, len, path: path.to_path_buf(), unlink_on_drop: true }),
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Opens the existing file `path` and maps all of it shared, after checking that its size is
    /// within `expected` (bytes; a size of zero is always refused). The region does not own the
    /// file: dropping it leaves `path` in place.
    pub fn open(path: &Path, expected: RangeInclusive<usize>) -> Result<Self, ShmError> {
        let err = |step, source| ShmError::Io { path: path.to_path_buf(), step, source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| err("open", e))?;
        let meta = file.metadata().map_err(|e| err("fstat", e))?;
        if !meta.is_file() {
            return Err(ShmError::NotAFile { path: path.to_path_buf() });
        }
        let size = meta.len();
        let len = usize::try_from(size).ok().filter(|n| *n > 0 && expected.contains(n));
        let Some(len) = len else {
            return Err(ShmError::Size { path: path.to_path_buf(), len: size, expected });
        };
        let ptr = map(&file, len).map_err(|e| err("mmap", e))?;
        Ok(Self { ptr, len, path: path.to_path_buf(), unlink_on_drop: false })
    }

    /// The first byte of the mapping: page aligned, valid for reads and writes of [`len`]
    /// bytes for as long as `self` lives. Other processes may write these bytes at any time:
    /// reach them through atomics only.
    ///
    /// [`len`]: Self::len
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length in bytes (never zero).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether dropping the region unlinks its file.
    pub fn unlinks_on_drop(&self) -> bool {
        self.unlink_on_drop
    }

    /// Makes dropping the region unlink its file (`true`: the creator's default; an opener may
    /// take over a file whose creator died) or leave it (`false`: to hand the file on).
    pub fn set_unlink_on_drop(&mut self, unlink: bool) {
        self.unlink_on_drop = unlink;
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly what a successful `mmap` returned and was given
        // (see `map`), and this is the only place that unmaps them, once. The region never
        // lent a Rust reference into the mapping; users of the raw pointer promised (in their
        // own `unsafe`) not to use it beyond the region's life, which ends here.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        debug_assert_eq!(rc, 0, "munmap of our own mapping failed: {}", io::Error::last_os_error());
        if self.unlink_on_drop {
            // Already gone (removed by hand, or by a peer that took it over) is fine.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Maps the first `len` (> 0) bytes of `file` shared, readable and writable, with its pages
/// populated up front so the first accesses take no page fault.
fn map(file: &File, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a null hint lets the kernel choose an unused address range, so no existing
    // mapping of this process is replaced; `len` is non-zero (both callers check); the
    // descriptor is open for reading and writing, matching PROT_READ | PROT_WRITE with
    // MAP_SHARED, and stays open for the call (the mapping keeps its own reference to the file
    // afterwards). The result is checked against MAP_FAILED before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned a null address"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// A name unique to this process and test, so parallel tests and runs never collide.
    fn scratch(test: &str) -> PathBuf {
        shm_path(&format!("kairos-sys-shm-{}-{test}", std::process::id())).unwrap()
    }

    /// The region's first word, seen as an atomic.
    fn word(region: &SharedRegion, index: usize) -> &AtomicU64 {
        assert!((index + 1) * 8 <= region.len());
        // SAFETY: the mapping is page aligned (so every multiple of 8 bytes is aligned for a
        // u64), the index is in bounds (checked above), the reference lives no longer than the
        // borrow of the region, and every access to the mapping in these tests is atomic.
        unsafe { &*region.as_ptr().add(index * 8).cast::<AtomicU64>() }
    }

    #[test]
    fn create_then_open_see_each_others_writes() {
        let path = scratch("shared");
        let a = SharedRegion::create(&path, 4096).unwrap();
        assert_eq!(a.len(), 4096);
        assert!(a.unlinks_on_drop());
        assert_eq!(a.as_ptr() as usize % 4096, 0, "not page aligned");
        let b = SharedRegion::open(&path, 4096..=4096).unwrap();
        assert!(!b.unlinks_on_drop());
        assert_ne!(a.as_ptr(), b.as_ptr(), "two mappings, two addresses");
        assert_eq!(word(&b, 3).load(Ordering::Relaxed), 0, "a new region is zeroed");
        word(&a, 3).store(0xfeed, Ordering::Release);
        assert_eq!(word(&b, 3).load(Ordering::Acquire), 0xfeed);
        word(&b, 511).store(7, Ordering::Release);
        assert_eq!(word(&a, 511).load(Ordering::Acquire), 7);
        drop(b);
        assert!(path.exists(), "the opener removed the creator's file");
        drop(a);
        assert!(!path.exists(), "the creator left its file behind");
    }

    #[test]
    fn the_file_is_private_to_its_user() {
        let path = scratch("mode");
        let _a = SharedRegion::create(&path, 100).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 100);
    }

    #[test]
    fn create_refuses_an_existing_file() {
        let path = scratch("exists");
        let _a = SharedRegion::create(&path, 64).unwrap();
        let err = SharedRegion::create(&path, 64).unwrap_err();
        assert!(
            matches!(&err, ShmError::Io { step: "create", source, .. } if source.kind() == io::ErrorKind::AlreadyExists),
            "{err}"
        );
        assert!(err.to_string().starts_with(&format!("{}: create:", path.display())), "{err}");
    }

    #[test]
    fn a_size_outside_the_expected_range_is_refused() {
        let path = scratch("size");
        let _a = SharedRegion::create(&path, 4096).unwrap();
        let err = SharedRegion::open(&path, 8192..=8192).unwrap_err();
        assert!(matches!(err, ShmError::Size { len: 4096, .. }), "{err}");
        assert_eq!(err.to_string(), format!("{}: 4096 bytes, expected 8192 to 8192 bytes", path.display()));
        assert!(SharedRegion::open(&path, 0..=4095).is_err());
        assert_eq!(SharedRegion::open(&path, 1..=1 << 20).unwrap().len(), 4096);
    }

    #[test]
    fn empty_regions_and_files_are_refused() {
        let path = scratch("empty");
        assert!(matches!(SharedRegion::create(&path, 0), Err(ShmError::Empty { .. })));
        assert!(!path.exists());
        let _region = SharedRegion::create(&path, 10).unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_len(0).unwrap();
        // The mapping above now has no pages behind it; it is only dropped, never touched.
        let err = SharedRegion::open(&path, 0..=100).unwrap_err();
        assert!(matches!(err, ShmError::Size { len: 0, .. }), "{err}");
    }

    #[test]
    fn open_names_the_missing_file_and_refuses_links_and_directories() {
        let path = scratch("missing");
        let err = SharedRegion::open(&path, 1..=10).unwrap_err();
        assert!(err.to_string().starts_with(&format!("{}: open:", path.display())), "{err}");

        let target = scratch("target");
        let _region = SharedRegion::create(&target, 8).unwrap();
        let link = scratch("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let refused = SharedRegion::open(&link, 1..=10);
        std::fs::remove_file(&link).unwrap();
        assert!(matches!(refused, Err(ShmError::Io { step: "open", .. })), "{refused:?}");

        let err = SharedRegion::open(Path::new(SHM_DIR), 1..=usize::MAX).unwrap_err();
        assert!(matches!(err, ShmError::Io { step: "open", .. }), "{err}");

        let fifo = scratch("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `name` is a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "{}", io::Error::last_os_error());
        let refused = SharedRegion::open(&fifo, 1..=10);
        std::fs::remove_file(&fifo).unwrap();
        assert!(matches!(refused, Err(ShmError::NotAFile { .. })), "{refused:?}");
    }

    #[test]
    fn an_opener_may_take_over_the_file() {
        let path = scratch("takeover");
        let mut creator = SharedRegion::create(&path, 64).unwrap();
        creator.set_unlink_on_drop(false);
        drop(creator);
        assert!(path.exists());
        let mut opener = SharedRegion::open(&path, 64..=64).unwrap();
        opener.set_unlink_on_drop(true);
        drop(opener);
        assert!(!path.exists());
    }

    #[test]
    fn names_stay_inside_the_shm_directory() {
        assert_eq!(shm_path("kairos-bridge-1").unwrap(), Path::new("/dev/shm/kairos-bridge-1"));
        for bad in ["", ".", "..", "a/b", "/abs", "nul\0"] {
            assert!(matches!(shm_path(bad), Err(ShmError::BadName { .. })), "{bad:?}");
        }
    }
}
