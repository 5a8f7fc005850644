//! Reading files a user names: bounded, and with errors that say which file; and replacing a
//! record file whole.
//!
//! A configuration or trace path comes from outside; it may be a directory, a device such as
//! `/dev/zero` that never ends, or binary garbage. Every reader of such a path goes through
//! [`read_text`] (or [`read_bytes`]), which refuses a device outright and anything over a limit
//! the caller states (a regular file by its size, before a byte is read; anything else once the
//! read passes the limit by one byte) and names the file in every error.
//!
//! A record that must survive the process being killed at any instant (what a run changed on
//! the machine, so that it can be undone) is written with [`write_atomic`]: a reader finds the
//! old content or the new, never a part.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a file could not be read as text.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path names a directory.
    #[error("{}: is a directory, expected a file", .path.display())]
    Directory {
        /// The path given.
        path: PathBuf,
    },
    /// The path names a device (`/dev/zero`, a disk), not a file: read to the limit, an
    /// endless one would only fill memory before the refusal.
    #[error("{}: is a device, expected a file", .path.display())]
    Device {
        /// The path given.
        path: PathBuf,
    },
    /// The file holds more than the caller allows.
    #[error("{}: larger than {} (the limit for this kind of file); is it the right file?", .path.display(), Bytes(*.limit))]
    TooLarge {
        /// The path given.
        path: PathBuf,
        /// The caller's limit, bytes.
        limit: u64,
    },
    /// The bytes are not UTF-8 text.
    #[error("{}: not UTF-8 text (first bad byte at offset {offset}); expected a text file", .path.display())]
    NotText {
        /// The path given.
        path: PathBuf,
        /// Offset of the first byte that is not valid UTF-8.
        offset: usize,
    },
    /// The operating system refused (missing file, permissions, ...).
    #[error("{}: {source}", .path.display())]
    Io {
        /// The path given.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            n if n >= 1 << 30 => write!(f, "{} GiB", n >> 30),
            n if n >= 1 << 20 => write!(f, "{} MiB", n >> 20),
            n if n >= 1 << 10 => write!(f, "{} KiB", n >> 10),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// Reads `path` as UTF-8 text of at most `limit` bytes.
///
/// Reads at most `limit + 1` bytes whatever the file is (a device, a pipe, a file growing
/// under us), so memory stays bounded.
pub fn read_text(path: &Path, limit: u64) -> Result<String, FileError> {
    String::from_utf8(read_bytes(path, limit)?)
        .map_err(|e| FileError::NotText { path: path.to_path_buf(), offset: e.utf8_error().valid_up_to() })
}

/// Reads the bytes of `path`, at most `limit` of them (a key, a binary file), as
/// [`read_text`] reads text.
pub fn read_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let io = |source| FileError::Io { path: path.to_path_buf(), source };
    if path.is_dir() {
        return Err(FileError::Directory { path: path.to_path_buf() });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // Refused from what the file is, before a byte is read: a device may never end, and a
    // regular file's size is known.
    let meta = file.metadata().map_err(io)?;
    {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_char_device() || meta.file_type().is_block_device() {
            return Err(FileError::Device { path: path.to_path_buf() });
        }
    }
    if meta.is_file() && meta.len() > limit {
        return Err(FileError::TooLarge { path: path.to_path_buf(), limit });
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge { path: path.to_path_buf(), limit });
    }
    Ok(bytes)
}

/// Replaces `path` with `contents` atomically: written to a temporary file beside it, flushed
/// to disk, then renamed over it (and the directory flushed), so that whoever reads `path`,
/// even after a crash, finds the previous content or the new one whole. Creates the parent
/// directories when missing.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), FileError> {
    use std::io::Write;
    let io = |source| FileError::Io { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".tmp-{}", std::process::id()));
    let temporary = PathBuf::from(temporary);
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        // The rename is durable once the directory is.
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path named `name` in a directory of the test's own, removed with the returned guard.
    fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new().prefix("kairos-sys-fs-").tempdir().unwrap();
        let path = dir.path().join(name);
        (dir, path)
    }

    #[test]
    fn reads_text_within_the_limit() {
        let (_dir, p) = scratch("ok.txt");
        std::fs::write(&p, "a = 1\n").unwrap();
        assert_eq!(read_text(&p, 6).unwrap(), "a = 1\n");
    }

    #[test]
    fn an_endless_device_is_refused_before_a_byte_is_read_and_a_large_file_by_its_size() {
        let err = read_text(Path::new("/dev/zero"), 1 << 30).unwrap_err();
        assert!(matches!(err, FileError::Device { .. }), "{err}");
        assert_eq!(err.to_string(), "/dev/zero: is a device, expected a file");
        let (_dir, p) = scratch("large.txt");
        std::fs::write(&p, "0123456789").unwrap();
        let err = read_text(&p, 9).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: larger than 9 bytes (the limit for this kind of file); is it the right file?",
                p.display()
            )
        );
    }

    #[test]
    fn errors_name_the_file() {
        let dir = std::env::temp_dir();
        let err = read_text(&dir, 100).unwrap_err();
        assert!(err.to_string().starts_with(&format!("{}: is a directory", dir.display())), "{err}");

        let (_dir, p) = scratch("garbage.bin");
        std::fs::write(&p, [b'o', b'k', 0xff, 0xfe]).unwrap();
        let err = read_text(&p, 100).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: not UTF-8 text (first bad byte at offset 2); expected a text file", p.display())
        );

        let (_dir, missing) = scratch("missing.toml");
        let err = read_text(&missing, 100).unwrap_err();
        assert!(err.to_string().starts_with(&format!("{}: ", missing.display())), "{err}");
    }

    #[test]
    fn an_atomic_write_replaces_the_file_whole_and_leaves_no_temporary() {
        let (_scratch, dir) = scratch("atomic");
        let p = dir.join("nested").join("state.json");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "second");
        let names: Vec<_> =
            std::fs::read_dir(p.parent().unwrap()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
        let err = write_atomic(&p.join("below-a-file"), b"x").unwrap_err();
        assert!(err.to_string().contains("below-a-file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
