//! Durable file operations: atomic replace (temp file, rename, fsync, fsync directory),
//! bounded file locks (flock with a deadline), and the safe open of a plugin-owned file.
//!
//! Every file the plugin opens by a path it did not just create itself (lock files,
//! IPAM records, `last_reserved_ip.*`, the log file) goes through [`open_regular`]:
//! `O_NOFOLLOW` (a planted symlink is refused, never followed: a dangling one at a lock
//! path would otherwise make the plugin create its target), `O_NONBLOCK` (a FIFO in its
//! place cannot hang the plugin: opening it for reading returns at once, for writing
//! fails with `ENXIO`), `O_NOCTTY`, `O_CLOEXEC`, then `fstat`: anything but a regular
//! file is refused with an error naming what it is ([`is_not_regular`]).

use nix::errno::Errno;
use nix::fcntl::{open, renameat2, OFlag, RenameFlags, AT_FDCWD};
use nix::sys::stat::{fstat, Mode, SFlag};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why [`open_regular`] refused a path: what was found there instead of a regular file.
/// Carried inside an [`io::Error`]; recognise it with [`is_not_regular`].
#[derive(Debug)]
pub struct NotRegular {
    /// What the path is: `"symbolic link"`, `"FIFO"`, `"directory"`, ...
    pub kind: &'static str,
}

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "is a {}, not a regular file (refused)", self.kind)
    }
}

impl std::error::Error for NotRegular {}

/// True when `e` is [`open_regular`]'s refusal of a non-regular file ([`NotRegular`]).
pub fn is_not_regular(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<NotRegular>())
}

fn not_regular(kind: &'static str) -> io::Error {
    io::Error::other(NotRegular { kind })
}

/// The name of a file type from `st_mode` (`S_IFMT` bits), for messages.
pub fn file_kind(st_mode: u32) -> &'static str {
    match SFlag::from_bits_truncate(st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFDIR => "directory",
        SFlag::S_IFLNK => "symbolic link",
        SFlag::S_IFIFO => "FIFO",
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFBLK => "block device",
        _ => "file of unknown type",
    }
}

/// Opens `path` with `flags` (access mode and e.g. `O_CREAT`, `O_APPEND`) plus
/// `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`, creating it with `mode` (before the
/// umask) when `O_CREAT` is given, and accepts it only if `fstat` says it is a regular
/// file. Never blocks on a FIFO, never follows a symlink in the last component (earlier
/// components, e.g. a symlinked `/var/lib`, are followed as usual).
///
/// Errors: [`NotRegular`] inside an [`io::Error`] (see [`is_not_regular`]) when the path
/// is a symlink (`ELOOP` from `O_NOFOLLOW`), a FIFO or socket (`ENXIO` when opened for
/// writing; the `fstat` check otherwise), a directory (`EISDIR` for writing) or any
/// other non-regular file; any other open or fstat error as is.
pub fn open_regular(path: &Path, flags: OFlag, mode: u32) -> io::Result<File> {
    open_regular_sized(path, flags, mode).map(|(f, _)| f)
}

/// [`open_regular`], with the file's size in bytes as its `fstat(2)` gave it.
fn open_regular_sized(path: &Path, flags: OFlag, mode: u32) -> io::Result<(File, u64)> {
    open_regular_with(path, flags | OFlag::O_NOFOLLOW, mode)
}

/// Reads the whole regular file at `path` as [`read_regular_bounded`] does, but
/// following symbolic links (a file an admin may project from a ConfigMap, whose name
/// is a link into `..data/`): opened `O_NONBLOCK` (a FIFO at the end of the links
/// cannot hang the read: opening one for reading returns at once), then refused unless
/// `fstat(2)` says regular file.
///
/// Errors: [`NotRegular`] inside an [`io::Error`] ([`is_not_regular`]) for a FIFO,
/// socket, directory or device; `InvalidData` past `max` bytes; any other open, fstat or
/// read error as is (`NotFound` for a missing file or a dangling link).
pub fn read_regular_following(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (f, size) = open_regular_with(path, OFlag::O_RDONLY, 0)?;
    read_bounded_sized(f, max, Some(size))
}

/// Opens `path` with `flags` plus `O_NONBLOCK | O_NOCTTY | O_CLOEXEC` and accepts only a
/// regular file (see [`open_regular`]); `O_NOFOLLOW` only when `flags` has it.
fn open_regular_with(path: &Path, flags: OFlag, mode: u32) -> io::Result<(File, u64)> {
    let all = flags | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let fd = match open(path, all, Mode::from_bits_truncate(mode)) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ELOOP) if flags.contains(OFlag::O_NOFOLLOW) => {
            return Err(not_regular("symbolic link"))
        }
        Err(nix::errno::Errno::ENXIO) => return Err(not_regular("FIFO or socket")),
        Err(nix::errno::Errno::EISDIR) => return Err(not_regular("directory")),
        Err(e) => return Err(e.into()),
    };
    let st = fstat(&fd)?;
    let kind = file_kind(st.st_mode);
    if kind != "regular file" {
        return Err(not_regular(kind));
    }
    Ok((File::from(fd), st.st_size.max(0) as u64))
}

/// Reads the whole regular file at `path` ([`open_regular`], read-only), refusing one
/// larger than `max` bytes.
///
/// Errors: as [`open_regular`]; [`io::ErrorKind::InvalidData`] when the file holds more
/// than `max` bytes (only `max + 1` bytes are ever read).
pub fn read_regular_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (f, size) = open_regular_sized(path, OFlag::O_RDONLY, 0)?;
    read_bounded_sized(f, max, Some(size))
}

/// Reads `r` to its end, refusing more than `max` bytes (only `max + 1` are ever read).
///
/// Errors: reading; [`io::ErrorKind::InvalidData`] past `max`.
pub fn read_bounded(r: impl Read, max: u64) -> io::Result<Vec<u8>> {
    read_bounded_sized(r, max, None)
}

/// [`read_bounded`] with the size `r` is expected to hold (`fstat(2)`'s `st_size`), or
/// `None` when unknown: the buffer is sized for it up front (at most `max + 1` bytes;
/// 8 KiB when unknown), so a small file takes two `read(2)`s (its bytes, then end of
/// file) instead of a probe and a read per doubling of the buffer. Only the number of
/// reads depends on `size`: the bytes read and the `max` check are [`read_bounded`]'s.
///
/// Errors: as [`read_bounded`].
pub fn read_bounded_sized(r: impl Read, max: u64, size: Option<u64>) -> io::Result<Vec<u8>> {
    // One byte past the expected size, so end of file is seen without growing.
    let want = size
        .map_or(8192, |s| s.saturating_add(1))
        .min(max.saturating_add(1));
    let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(8192));
    r.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// Writes `data` to `path` atomically and durably: a temp file in the same directory is
/// written, renamed to `path`, fsync'd, then the directory is fsync'd. Readers see the
/// old content (or none) or the new, never a mix (rename(2) atomicity), and when this
/// returns `Ok` both the name and the content are on disk.
///
/// Crash states, by whether `path` existed:
/// - new name (the rename is `renameat2(RENAME_NOREPLACE)`): renamed first, then one
///   fsync of the file. On a journaling filesystem (ext4, XFS) that fsync commits the
///   rename with the data, so the directory fsync that follows finds nothing left to
///   commit: one journal commit instead of two (a commit cost ~0.9 ms here on a
///   journaled ext4, 2.5 ms -> 1.7 ms per write). A machine crash before the fsync
///   returns may leave `path` empty (the name committed, the delayed-allocation data
///   not): read an empty file as "not written" ([`is_unwritten`]);
/// - existing name (`EEXIST`), or a filesystem without `RENAME_NOREPLACE` (`EINVAL`):
///   the temp file is fsync'd before it is renamed over `path`, so a crash leaves the
///   old content or the new, never an empty file where the old one was.
///
/// Errors: as the underlying calls; on an error nothing is left at `path` that was not
/// there before (a new name whose fsync failed is unlinked again, once proven to be
/// the file this call wrote: same device and inode).
pub fn atomic_write(path: &Path, data: &[u8]) -> io::Result<()> {
    write_replace(path, data, true)
}

/// Writes `data` to `path` atomically, only if `path` does not exist: the temp file is
/// renamed into place with `renameat2(RENAME_NOREPLACE)` (or, on a filesystem without
/// it, `EINVAL`, hard-linked with `link(2)`, which never replaces either), so of two
/// writers racing to create the same name exactly one succeeds. `durable`: the file and
/// then its directory are fsync'd after the rename, as [`atomic_write`] does for a new
/// name (a machine crash before that may leave `path` empty: [`is_unwritten`]).
///
/// Errors: `AlreadyExists` when `path` exists (nothing is written); else as the
/// underlying calls, and then nothing is left at `path` that this call put there.
pub fn create_new(path: &Path, data: &[u8], durable: bool) -> io::Result<()> {
    via_temp(path, data, |dir, tmp, f| {
        match renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => {}
            Err(Errno::EINVAL) => {
                fs::hard_link(tmp, path)?;
                let _ = fs::remove_file(tmp);
            }
            Err(e) => return Err(io::Error::from(e)),
        }
        if durable {
            if let Err(e) = f.sync_all().and_then(|()| fsync_dir(dir)) {
                remove_if_same(path, f);
                return Err(e);
            }
        }
        Ok(())
    })
}

/// Like [`atomic_write`] (readers see the old or the new content, never a mix) but
/// without the fsyncs: for state whose loss in a crash is harmless (a hint, or a flag
/// that only makes the next DEL do work it would have done anyway).
pub fn replace_nosync(path: &Path, data: &[u8]) -> io::Result<()> {
    write_replace(path, data, false)
}

/// Creates the temp file `tmp` exclusively (`O_EXCL`, which does not follow symlinks;
/// `O_NOFOLLOW`). The temp name is predictable: whatever is there (a temp file of a
/// killed writer that had this pid, or a planted symlink or FIFO) is unlinked, never
/// followed, and the creation tried once more.
fn open_temp(tmp: &Path) -> io::Result<File> {
    let open = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc_flags(OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC))
            .open(tmp)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let _ = fs::remove_file(tmp);
            open()
        }
        r => r,
    }
}

/// Writes `data` to a temp file beside `path` (`.<name>.tmp.<pid>`, [`open_temp`]) and
/// hands `finish` the directory, the temp file's path and its open file, to put it in
/// place. When either fails, the temp file is removed.
///
/// Errors: `InvalidInput` for a path without a parent or file name; the temp file's
/// creation or write; `finish`'s.
fn via_temp(
    path: &Path,
    data: &[u8],
    finish: impl FnOnce(&Path, &Path, &File) -> io::Result<()>,
) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(".{}.tmp.{}", name.to_string_lossy(), pid()));
    let res = open_temp(&tmp).and_then(|mut f| {
        f.write_all(data)?;
        finish(dir, &tmp, &f)
    });
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res
}

fn write_replace(path: &Path, data: &[u8], durable: bool) -> io::Result<()> {
    via_temp(path, data, |dir, tmp, f| {
        if !durable {
            return fs::rename(tmp, path);
        }
        match renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => {
                if let Err(e) = f.sync_all().and_then(|()| fsync_dir(dir)) {
                    remove_if_same(path, f);
                    return Err(e);
                }
                return Ok(());
            }
            Err(Errno::EEXIST | Errno::EINVAL) => {}
            Err(e) => return Err(e.into()),
        }
        f.sync_all()?;
        fs::rename(tmp, path)?;
        fsync_dir(dir)
    })
}

/// True for a file [`atomic_write`] had renamed into place (a new name) when a machine
/// crash came before its fsync returned: empty (the name committed, the data not). For
/// content that is never empty (a journal's JSON), no successful [`atomic_write`] or
/// [`replace_nosync`] leaves an empty file, so such a file stands for "never written".
pub fn is_unwritten(content: &[u8]) -> bool {
    content.is_empty()
}

/// Unlinks `path` if it is still the file `f` is open on (same device and inode),
/// best effort: the error path of [`atomic_write`], which must not remove a file that
/// someone else has put there since.
fn remove_if_same(path: &Path, f: &File) {
    use std::os::unix::fs::MetadataExt;
    let (Ok(mine), Ok(there)) = (f.metadata(), fs::symlink_metadata(path)) else {
        return;
    };
    if mine.dev() == there.dev() && mine.ino() == there.ino() {
        let _ = fs::remove_file(path);
    }
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
pub fn remove_temps_of(path: &Path) -> usize {
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

fn libc_flags(f: OFlag) -> i32 {
    f.bits()
}

/// fsyncs a directory so a rename or unlink in it is durable. Opened with
/// `O_DIRECTORY | O_NONBLOCK`: anything but a directory fails (`ENOTDIR`) instead of
/// blocking.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags(
            OFlag::O_DIRECTORY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        ))
        .open(dir)?
        .sync_all()
}

/// Runs `f`, which creates something in `dir`; when that fails with `NotFound`, creates
/// `dir` with its parents (mode 0777 before the umask, as `create_dir_all`) and runs `f`
/// once more. For directories that almost always exist: no `mkdir` and `stat` per write.
///
/// Errors: `(false, e)` from `f`; `(true, e)` when `dir` could not be created.
pub fn in_dir<T>(
    dir: Option<&Path>,
    mut f: impl FnMut() -> io::Result<T>,
) -> Result<T, (bool, io::Error)> {
    match (f(), dir) {
        (Err(e), Some(d)) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(d).map_err(|e| (true, e))?;
            f().map_err(|e| (false, e))
        }
        (r, _) => r.map_err(|e| (false, e)),
    }
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

/// Takes an exclusive `flock(2)` on `path` (created if missing, mode 0644 before the
/// umask; its parent directories too), waiting in the kernel ([`flock_until`]) until
/// `timeout` has passed. The file is opened with [`open_regular`]: a symlink at `path`
/// (even a dangling one, whose target would otherwise be created), a FIFO or any other
/// non-regular file is refused.
///
/// Errors: [`LockError::Timeout`] when still held at the deadline;
/// [`LockError::Io`] naming the path when it cannot be created, is not a regular file
/// (see [`is_not_regular`]) or flock fails otherwise (callers map this to code 5).
pub fn lock_with_timeout(path: &Path, timeout: Duration) -> Result<FileLock, LockError> {
    let file = in_dir(path.parent(), || {
        open_regular(path, OFlag::O_RDWR | OFlag::O_CREAT, 0o644)
    })
    .map_err(|e| LockError::Io(path.to_path_buf(), e.1))?;
    match flock_until(&file, true, Instant::now() + timeout) {
        Ok(true) => Ok(FileLock {
            _file: file,
            path: path.to_path_buf(),
        }),
        Ok(false) => Err(LockError::Timeout(path.to_path_buf(), timeout)),
        Err(e) => Err(LockError::Io(path.to_path_buf(), e)),
    }
}

/// Signal that interrupts a blocked `flock(2)` at its deadline (a one-shot POSIX timer
/// aimed at the calling thread, `timer_create(2)` with `SIGEV_THREAD_ID`).
const LOCK_TIMER_SIGNAL: nix::sys::signal::Signal = nix::sys::signal::Signal::SIGALRM;

extern "C" fn interrupt_only(_: nix::libc::c_int) {}

/// Takes `flock(2)` on `file` (`LOCK_EX` when `exclusive`, else `LOCK_SH`), blocking in
/// the kernel until the lock is free or `deadline` passes: the holder's unlock wakes
/// this process at once (no sleep-and-retry). A try first (`LOCK_NB`); when that would
/// block, a per-thread CLOCK_MONOTONIC timer is armed for the deadline, repeating every
/// 10 ms after it (so a signal that fires before `flock` starts sleeping cannot leave
/// it blocked), and `SIGALRM` is handled by a no-op handler without `SA_RESTART`, so
/// `flock` returns `EINTR` at the deadline. That handler is installed on first use and
/// stays for the life of the process (SIGALRM then never terminates it); each timer
/// targets its own thread, so threads may wait at the same time.
///
/// Returns `Ok(true)` when locked, `Ok(false)` at the deadline. Errors: `flock`'s own
/// (e.g. `EBADF`, `ENOLCK`), or the timer's.
pub fn flock_until(file: &File, exclusive: bool, deadline: Instant) -> io::Result<bool> {
    use nix::libc::{flock, LOCK_EX, LOCK_NB, LOCK_SH};
    use nix::sys::signal::{
        sigaction, SaFlags, SigAction, SigEvent, SigHandler, SigSet, SigevNotify,
    };
    use nix::sys::time::TimeSpec;
    use nix::sys::timer::{Expiration, Timer, TimerSetTimeFlags};
    use std::os::fd::AsRawFd;
    let op = if exclusive { LOCK_EX } else { LOCK_SH };
    let fd = file.as_raw_fd();
    // SAFETY: flock on an fd this function borrows; no memory is passed.
    if unsafe { flock(fd, op | LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(nix::libc::EWOULDBLOCK) {
        return Err(e);
    }
    let now = Instant::now();
    if now >= deadline {
        return Ok(false);
    }
    // Installed once for the process and left in place: a per-call install and restore
    // would race between threads waiting at the same time (one thread restoring the
    // default action, which terminates the process, while another's timer is armed).
    static HANDLER: std::sync::OnceLock<Result<(), nix::errno::Errno>> = std::sync::OnceLock::new();
    HANDLER
        .get_or_init(|| {
            let handler = SigAction::new(
                SigHandler::Handler(interrupt_only),
                SaFlags::empty(),
                SigSet::empty(),
            );
            // SAFETY: the handler does nothing (async-signal-safe).
            unsafe { sigaction(LOCK_TIMER_SIGNAL, &handler) }.map(|_| ())
        })
        .map_err(io::Error::from)?;
    (|| {
        let mut timer = Timer::new(
            nix::time::ClockId::CLOCK_MONOTONIC,
            SigEvent::new(SigevNotify::SigevThreadId {
                signal: LOCK_TIMER_SIGNAL,
                thread_id: nix::unistd::gettid().as_raw(),
                si_value: 0,
            }),
        )
        .map_err(io::Error::from)?;
        let first = deadline
            .saturating_duration_since(now)
            .max(Duration::from_micros(1));
        timer
            .set(
                Expiration::IntervalDelayed(
                    TimeSpec::from_duration(first),
                    TimeSpec::from_duration(Duration::from_millis(10)),
                ),
                TimerSetTimeFlags::empty(),
            )
            .map_err(io::Error::from)?;
        loop {
            // SAFETY: as above.
            if unsafe { flock(fd, op) } == 0 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(nix::libc::EINTR) {
                return Err(e);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    })()
}

/// This process's ID, asked of the kernel once: `std::process::id()` is a `getpid(2)` at
/// every call (glibc stopped caching it in 2.25), and a call names its temp files and
/// log lines with it. The plugin never forks without an `exec`, so it cannot change.
pub fn pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// The content of a small file (a sysfs or procfs attribute: at most a page), read by
/// [`read_bounded`] (no bound): `fs::read_to_string` would first `statx` the file for a
/// size hint, which such a file does not give (a sysfs attribute's size reads as 4096,
/// a procfs file's as 0, whatever it holds): one system call per read saved.
///
/// Errors: `open`'s and `read`'s; `InvalidData` when the content is not UTF-8.
pub fn read_text(path: &Path) -> io::Result<String> {
    let bytes = read_bounded(std::fs::File::open(path)?, u64::MAX - 1)?;
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiter gets the lock as soon as the holder releases it (woken by the kernel,
    /// not by a poll), and gives up at its deadline when the holder keeps it; several
    /// threads may wait at once.
    #[test]
    fn flock_until_wakes_on_release_and_stops_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l");
        let holder = File::create(&p).unwrap();
        assert!(flock_until(&holder, true, Instant::now()).unwrap());
        std::thread::scope(|s| {
            let waiters: Vec<_> = (0..3)
                .map(|_| {
                    let p = &p;
                    s.spawn(move || {
                        let f = File::open(p).unwrap();
                        let t = Instant::now();
                        let got = flock_until(&f, false, t + Duration::from_millis(150)).unwrap();
                        (got, t.elapsed())
                    })
                })
                .collect();
            for w in waiters {
                let (got, took) = w.join().unwrap();
                assert!(!got, "the lock is held");
                assert!(took >= Duration::from_millis(150), "{took:?}");
                assert!(took < Duration::from_millis(400), "{took:?}");
            }
        });
        let released_at = std::sync::Mutex::new(None);
        std::thread::scope(|s| {
            let w = s.spawn(|| {
                let f = File::open(&p).unwrap();
                let got = flock_until(&f, true, Instant::now() + Duration::from_secs(5)).unwrap();
                (got, Instant::now())
            });
            std::thread::sleep(Duration::from_millis(100));
            *released_at.lock().unwrap() = Some(Instant::now());
            drop(holder);
            let (got, at) = w.join().unwrap();
            assert!(got);
            let lag = at.duration_since(released_at.lock().unwrap().unwrap());
            assert!(
                lag < Duration::from_millis(20),
                "woken {lag:?} after the release"
            );
        });
    }

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

    /// The error path of a durable write to a new name unlinks the file it renamed
    /// into place, and only that file: one put there since (same name, another inode)
    /// stays.
    #[test]
    fn remove_if_same_removes_only_the_file_it_holds_open() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        atomic_write(&p, b"one").unwrap();
        let f = File::open(&p).unwrap();
        remove_if_same(&p, &f);
        assert!(!p.exists());
        atomic_write(&p, b"two").unwrap();
        let f = File::open(&p).unwrap();
        fs::remove_file(&p).unwrap();
        fs::write(&p, b"someone else's").unwrap();
        remove_if_same(&p, &f);
        assert_eq!(fs::read(&p).unwrap(), b"someone else's");
        assert!(!is_unwritten(b"x") && is_unwritten(b""));
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

    #[test]
    fn a_symlink_at_a_lock_path_is_refused_and_its_target_not_created() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target-file");
        let p = d.path().join("l.lock");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let e = lock_with_timeout(&p, Duration::from_millis(10)).unwrap_err();
        match &e {
            LockError::Io(path, io) => {
                assert_eq!(path, &p);
                assert!(is_not_regular(io), "{io:?}");
            }
            other => panic!("expected Io, got {other:?}"),
        }
        assert!(e.to_string().contains("l.lock"), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(!target.exists(), "the symlink's target was created");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking_for_reading_and_writing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fifo");
        nix::unistd::mkfifo(&p, Mode::from_bits_truncate(0o600)).unwrap();
        let t0 = Instant::now();
        let e = read_regular_bounded(&p, 10).unwrap_err();
        assert!(is_not_regular(&e) && e.to_string().contains("FIFO"), "{e}");
        let e = open_regular(&p, OFlag::O_WRONLY | OFlag::O_APPEND, 0).unwrap_err();
        assert!(is_not_regular(&e), "{e}");
        let e = lock_with_timeout(&p, Duration::from_millis(10)).unwrap_err();
        assert!(
            matches!(e, LockError::Io(_, ref io) if is_not_regular(io)),
            "{e}"
        );
        assert!(t0.elapsed() < Duration::from_secs(2));
        let e = open_regular(d.path(), OFlag::O_RDONLY, 0).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
    }

    /// The node file's read follows links (a ConfigMap projection) but, like the
    /// others, never blocks on a FIFO at their end.
    #[test]
    fn read_regular_following_follows_links_and_refuses_a_fifo_at_once() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        fs::write(&f, b"{}").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read_regular_following(&link, 10).unwrap(), b"{}");
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let to_fifo = d.path().join("to-fifo");
        std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
        let t0 = Instant::now();
        for p in [&fifo, &to_fifo] {
            let e = read_regular_following(p, 10).unwrap_err();
            assert!(is_not_regular(&e) && e.to_string().contains("FIFO"), "{e}");
        }
        assert!(t0.elapsed() < Duration::from_secs(2));
        let e = read_regular_following(&d.path().join("none"), 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn read_regular_bounded_refuses_larger_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        fs::write(&p, b"12345").unwrap();
        assert_eq!(read_regular_bounded(&p, 5).unwrap(), b"12345");
        let e = read_regular_bounded(&p, 4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn atomic_write_replaces_a_planted_temp_symlink_instead_of_following_it() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let p = d.path().join("j");
        let tmp = d.path().join(format!(".j.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        atomic_write(&p, b"data").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert_eq!(fs::read(&p).unwrap(), b"data");
        assert!(fs::symlink_metadata(&tmp).is_err(), "temp name left behind");
    }
}
