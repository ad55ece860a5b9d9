//! Durable file operations: atomic replace (temp file, fsync, rename, fsync directory)
//! and bounded file locks (flock with a deadline).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Writes `data` to `path` atomically and durably: a temp file in the same directory is
/// written and fsync'd, renamed over `path`, then the directory is fsync'd, so a crash
/// leaves either the old or the new content, never a mix (rename(2) atomicity).
pub fn atomic_write(path: &Path, data: &[u8]) -> io::Result<()> {
    write_replace(path, data, true)
}

/// Like [`atomic_write`] (readers see the old or the new content, never a mix) but
/// without the fsyncs: for state whose loss in a crash is harmless (a hint, or a flag
/// that only makes the next DEL do work it would have done anyway).
pub fn replace_nosync(path: &Path, data: &[u8]) -> io::Result<()> {
    write_replace(path, data, false)
}

fn write_replace(path: &Path, data: &[u8], durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let res = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(data)?;
        if durable {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if durable {
            fsync_dir(dir)?;
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res
}

/// Removes `path`, and the temp files that writers of `path` killed mid-write left
/// next to it (`.<name>.tmp.<pid>`, see [`atomic_write`]), and fsyncs its directory;
/// `Ok(false)` when `path` did not exist. Callers hold whatever lock serializes the
/// writers of `path`, so no such temp file belongs to a live writer.
pub fn remove_durable(path: &Path) -> io::Result<bool> {
    let removed = match fs::remove_file(path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let temps = remove_temps_of(path);
    if removed || temps > 0 {
        if let Some(d) = path.parent() {
            fsync_dir(d)?;
        }
    }
    Ok(removed)
}

/// Removes the `.<name>.tmp.<pid>` files of `path` (best effort); returns how many.
fn remove_temps_of(path: &Path) -> usize {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return 0;
    };
    let prefix = format!(".{}.tmp.", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            match fs::remove_file(e.path()) {
                Ok(()) => {
                    log::info!("removed {} left by a killed writer", e.path().display());
                    n += 1;
                }
                Err(err) => log::warn!("removing {}: {err}", e.path().display()),
            }
        }
    }
    n
}

/// fsyncs a directory so a rename or unlink in it is durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// An exclusive flock held until dropped (the kernel also drops it if the process dies).
#[derive(Debug)]
pub struct FileLock {
    _file: File,
    path: PathBuf,
}

impl FileLock {
    /// The locked file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why a lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Still held by another process when the deadline passed (callers map this to
    /// CNI code 11, "try again later").
    Timeout(PathBuf, Duration),
    /// The lock file could not be opened or locked.
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Timeout(p, d) => write!(
                f,
                "lock {} is still held by another invocation after {:.1}s",
                p.display(),
                d.as_secs_f64()
            ),
            LockError::Io(p, e) => write!(f, "lock {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for LockError {}

/// Takes an exclusive `flock(2)` on `path` (created if missing), polling with a
/// short back-off until `timeout` has passed.
pub fn lock_with_timeout(path: &Path, timeout: Duration) -> Result<FileLock, LockError> {
    if let Some(d) = path.parent() {
        fs::create_dir_all(d).map_err(|e| LockError::Io(path.to_path_buf(), e))?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| LockError::Io(path.to_path_buf(), e))?;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        match file.try_lock() {
            Ok(()) => {
                return Ok(FileLock {
                    _file: file,
                    path: path.to_path_buf(),
                })
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                if Instant::now() >= deadline {
                    return Err(LockError::Timeout(path.to_path_buf(), timeout));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(LockError::Io(path.to_path_buf(), e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
        assert!(remove_durable(&p).unwrap());
        assert!(!remove_durable(&p).unwrap());
    }

    #[test]
    fn remove_durable_also_removes_temps_of_killed_writers() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c1-net1");
        atomic_write(&p, b"one").unwrap();
        fs::write(d.path().join(".c1-net1.tmp.4242"), b"half").unwrap();
        fs::write(d.path().join(".c1-net10.tmp.4242"), b"other").unwrap();
        fs::write(d.path().join("c1-net10"), b"other").unwrap();
        assert!(remove_durable(&p).unwrap());
        let mut left: Vec<String> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec![".c1-net10.tmp.4242", "c1-net10"]);
    }

    #[test]
    fn lock_times_out_while_held_and_succeeds_after() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/l.lock");
        let held = lock_with_timeout(&p, Duration::from_millis(10)).unwrap();
        let t0 = Instant::now();
        match lock_with_timeout(&p, Duration::from_millis(100)) {
            Err(LockError::Timeout(_, _)) => {}
            other => panic!("expected timeout, got {other:?}"),
        }
        assert!(t0.elapsed() >= Duration::from_millis(100));
        drop(held);
        lock_with_timeout(&p, Duration::from_millis(10)).unwrap();
    }
}
