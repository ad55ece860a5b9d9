//! The per-network lock, taken exactly where host-local takes it.
//!
//! host-local backend/disk/lock.go `NewFileLock(dir)`: when the path is a
//! directory the lock file is `<dir>/lock`; go-filemutex opens it with
//! `O_CREAT|O_RDONLY` mode 0750 and `flock(LOCK_EX)`s it for every
//! `Get`/`Release`. We open the same file the same way (plus `O_NOFOLLOW` and
//! `O_NONBLOCK`, and only a regular file is accepted) and use the same
//! `flock`, so our processes and host-local's exclude each other. Like
//! host-local we block in `flock`, but only until a deadline
//! ([`crate::fsutil::flock_until`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

use crate::fsutil::open_regular;

use super::error::IpamError;

/// Name of the lock file inside `<dataDir>/<network>/` (host-local lock.go).
pub const LOCK_FILE_NAME: &str = "lock";

/// Exclusive (writers: allocate/release; host-local only uses this) or
/// shared (our read-only queries) `flock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// `LOCK_EX`.
    Exclusive,
    /// `LOCK_SH`.
    Shared,
}

/// A held `flock` on `<dir>/lock`; released when dropped (closing the file
/// description releases the flock).
#[derive(Debug)]
pub struct FileLock {
    /// The open lock file; its open file description holds the flock.
    file: File,
    /// `<dir>/lock`, for messages.
    path: PathBuf,
}

impl FileLock {
    /// Open (creating, mode 0750, like go-filemutex) `<dir>/lock` and take
    /// the flock in `mode`, blocking in the kernel until `timeout` has elapsed
    /// ([`crate::fsutil::flock_until`]). A zero timeout makes a single attempt.
    ///
    /// The file is opened with [`crate::fsutil::open_regular`] (`O_NOFOLLOW`,
    /// `O_NONBLOCK`, then `fstat`): a symlink at `<dir>/lock` (a dangling one
    /// would otherwise make us create its target), a FIFO (which would block
    /// the open) or any other non-regular file is refused.
    ///
    /// Errors: [`IpamError::Busy`] naming the lock path when the deadline
    /// passes while another open file description holds a conflicting lock
    /// (in this or another process); [`IpamError::Io`] naming the path when
    /// the file cannot be opened, is not a regular file, or flock fails
    /// otherwise.
    pub fn acquire(dir: &Path, mode: LockMode, timeout: Duration) -> Result<FileLock, IpamError> {
        let path = dir.join(LOCK_FILE_NAME);
        let file = open_regular(&path, OFlag::O_CREAT | OFlag::O_RDONLY, 0o750)
            .map_err(|e| IpamError::io("cannot open lock file", &path, &e))?;
        match crate::fsutil::flock_until(
            &file,
            mode == LockMode::Exclusive,
            Instant::now() + timeout,
        ) {
            Ok(true) => {
                log::debug!("took {mode:?} lock {}", path.display());
                Ok(FileLock { file, path })
            }
            Ok(false) => Err(IpamError::Busy(format!(
                "timed out after {timeout:?} waiting for the lock {} (held by another process)",
                path.display()
            ))),
            Err(e) => Err(IpamError::io("cannot flock", &path, &e)),
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Err(e) = self.file.unlock() {
            log::warn!("cannot unlock {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_lock_file_with_go_filemutex_mode() {
        let dir = tempfile::tempdir().unwrap();
        let l = FileLock::acquire(dir.path(), LockMode::Exclusive, Duration::ZERO).unwrap();
        assert_eq!(l.path, dir.path().join("lock"));
        let meta = std::fs::metadata(&l.path).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.len(), 0);
        // 0750 minus whatever the umask removes; never group/other writable.
        let mode = meta.permissions().mode() & 0o777;
        assert_eq!(mode & !0o750, 0, "mode {mode:o}");
    }

    #[test]
    fn exclusive_lock_times_out_with_busy_while_another_fd_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        // A separate open file description, as another process would have.
        let holder = File::create(dir.path().join("lock")).unwrap();
        holder.lock().unwrap();
        let t0 = Instant::now();
        let err = FileLock::acquire(dir.path(), LockMode::Exclusive, Duration::from_millis(150))
            .unwrap_err();
        let waited = t0.elapsed();
        match &err {
            IpamError::Busy(m) => {
                assert!(m.contains(&dir.path().join("lock").display().to_string()))
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // Shared is refused too while LOCK_EX is held.
        assert!(matches!(
            FileLock::acquire(dir.path(), LockMode::Shared, Duration::ZERO),
            Err(IpamError::Busy(_))
        ));
        holder.unlock().unwrap();
        FileLock::acquire(dir.path(), LockMode::Exclusive, Duration::ZERO).unwrap();
    }

    #[test]
    fn lock_is_taken_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let held = FileLock::acquire(dir.path(), LockMode::Exclusive, Duration::ZERO).unwrap();
        let path = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            FileLock::acquire(&path, LockMode::Exclusive, Duration::from_secs(10)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished());
        drop(held);
        waiter.join().unwrap().unwrap();
    }

    #[test]
    fn shared_locks_coexist_and_exclude_writers() {
        let dir = tempfile::tempdir().unwrap();
        let a = FileLock::acquire(dir.path(), LockMode::Shared, Duration::ZERO).unwrap();
        let b = FileLock::acquire(dir.path(), LockMode::Shared, Duration::ZERO).unwrap();
        assert!(matches!(
            FileLock::acquire(dir.path(), LockMode::Exclusive, Duration::from_millis(20)),
            Err(IpamError::Busy(_))
        ));
        drop((a, b));
        FileLock::acquire(dir.path(), LockMode::Exclusive, Duration::ZERO).unwrap();
    }

    #[test]
    fn missing_directory_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = FileLock::acquire(
            &dir.path().join("nope"),
            LockMode::Exclusive,
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(
            matches!(err, IpamError::Io(ref m) if m.contains("nope/lock")),
            "{err:?}"
        );
    }

    #[test]
    fn a_symlink_or_fifo_at_the_lock_path_is_refused_without_creating_or_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join("lock")).unwrap();
        let err = FileLock::acquire(dir.path(), LockMode::Exclusive, Duration::ZERO).unwrap_err();
        assert!(
            matches!(&err, IpamError::Io(m) if m.contains("lock") && m.contains("symbolic link")),
            "{err:?}"
        );
        assert_eq!(err.cni_code(), 5);
        assert!(!target.exists(), "the symlink's target was created");

        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &dir.path().join("lock"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let t0 = Instant::now();
        let err = FileLock::acquire(dir.path(), LockMode::Shared, Duration::ZERO).unwrap_err();
        assert!(
            matches!(&err, IpamError::Io(m) if m.contains("FIFO")),
            "{err:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(2));
    }
}
