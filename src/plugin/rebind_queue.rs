//! The node's rebind queue: every VF driver rebind on a node takes its turn here, one at
//! a time, in arrival order, and a waiter gives up only when the queue stops moving or
//! its verb runs out of time.
//!
//! Why one at a time: the kernel hands a re-probed VF the lowest free RDMA device name
//! and `uverbsN` minor (`ib_register_device()`/`assign_name()` in
//! drivers/infiniband/core/device.c, `ib_uverbs_add_one()` in uverbs_main.c), so two
//! overlapping rebinds could swap them between VFs. Why a queue and not one `flock(2)`:
//! the kernel wakes every waiter of a released flock and lets them race (fs/locks.c,
//! `locks_wake_up_blocks()`; flock(2) promises no order), so under a start-up storm a
//! waiter can lose the race again and again while the node is rebinding at full speed.
//!
//! Layout, in `dir` (`<stateDir>/locks/rebind.queue`, see
//! [`crate::journal::JournalStore::rebind_queue_dir`]):
//! - `<ticket>.<pid>.<nonce>`: one entry per process waiting for or holding its turn;
//!   `ticket` is a 20-digit decimal (so names sort as numbers), one more than the
//!   largest ticket present when it was taken; `pid` the owner's process ID (for
//!   messages only); `nonce` the owner's `CLOCK_BOOTTIME` in ns when it joined, so a
//!   name is never used twice in a boot (a waiter unlinks a dead entry by name, and
//!   must never unlink a successor of the same name). Empty files.
//! - `.ticket`: the flock that serializes joining (held for one directory scan, one
//!   create and one rename, never while waiting).
//! - `.new.<pid>.<nonce>`: an entry being created; one left over is a dead joiner's
//!   and is removed by the next joiner.
//!
//! Liveness comes from the kernel: an entry's owner holds `LOCK_EX` on its entry file
//! from before the name is visible until after it is removed, and the kernel drops that
//! lock when the owner dies, however it dies (flock(2): the lock belongs to the open
//! file description and is released when its last descriptor is closed, which process
//! exit does). So an entry that someone else can lock (`LOCK_SH | LOCK_NB` succeeds) is
//! dead, and is removed by whoever finds it. The entry is created under a temporary
//! name, locked, then renamed into place (`renameat2(RENAME_NOREPLACE)`, atomic per
//! rename(2)): no entry is ever visible unlocked while its owner lives.
//!
//! Waiting blocks in the kernel on the first live entry ahead (`flock(LOCK_SH)` on its
//! file, [`flock_until`]), which returns when that entry's owner finishes or dies; then
//! the directory is scanned again. No polling.
//!
//! Progress: an entry ahead that finished or vanished (or is found dead) is progress.
//! New entries never come ahead (their ticket is larger than every ticket present), so
//! progress is exactly "fewer live entries ahead than at the last scan".
//!
//! Older binaries: they take only the node-wide flock `<stateDir>/locks/rebind`. The
//! first of the queue takes it too, before its turn begins, and releases it first when
//! the turn ends, so an older plugin and this one exclude each other during an upgrade.
//!
//! The Go ib-sriov-cni: it holds its own node lock
//! ([`crate::gocache::GO_LOCK_FILE`], `flock(2)` `LOCK_EX`) across each whole ADD and
//! DEL. A queue made [`RebindQueue::with_go_lock`] takes that lock too, after the older
//! binaries' lock, and releases it first, so a Go call still in flight while the binary
//! is swapped (or after a rollback) and one of our rebinds never overlap. The Go plugin
//! never waits on anything of ours, so the order cannot deadlock.

use crate::cni::{code, CniError};
use crate::fsutil::{flock_until, lock_with_timeout, open_regular, FileLock, LockError};
use nix::errno::Errno;
use nix::fcntl::{renameat2, OFlag, RenameFlags, AT_FDCWD};
use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The joining lock, in the queue directory.
const TICKET_LOCK: &str = ".ticket";
/// Prefix of an entry being created.
const TEMP_PREFIX: &str = ".new.";
/// A wait at least this long is logged at info (shorter ones at debug).
pub const LONG_WAIT: Duration = Duration::from_secs(5);

/// A rebind queue: its directory, the older binaries' node-wide lock file and, when set,
/// the Go plugin's node lock file.
#[derive(Debug, Clone)]
pub struct RebindQueue {
    dir: PathBuf,
    legacy: PathBuf,
    go_lock: Option<PathBuf>,
}

/// When a waiter gives up.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Give up when no entry ahead has finished or vanished for this long (the
    /// configuration's `lockTimeoutMs`). Also bounds the wait for the joining lock and
    /// for the older binaries' lock, neither of which shows progress.
    pub no_progress: Duration,
    /// The latest instant a turn may begin (the caller's time bound minus what it needs
    /// after the turn begins); a turn that cannot begin by then is refused, whether
    /// the queue is busy or not.
    pub begin_by: Instant,
}

/// One entry of the queue, as named in its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its place: smaller goes first.
    pub ticket: u64,
    /// The process that joined with it.
    pub pid: u32,
    /// Its file name in the queue directory.
    pub name: String,
}

impl Entry {
    /// Parses `<ticket>.<pid>.<nonce>` (all decimal); anything else is no entry.
    fn parse(name: &str) -> Option<Entry> {
        let mut it = name.split('.');
        let ticket = it.next()?.parse().ok()?;
        let pid = it.next()?.parse().ok()?;
        it.next()?.parse::<u64>().ok()?;
        if it.next().is_some() {
            return None;
        }
        Some(Entry {
            ticket,
            pid,
            name: name.to_string(),
        })
    }
}

/// Why no turn was given.
#[derive(Debug)]
pub enum QueueError {
    /// No entry ahead finished or vanished for [`Limits::no_progress`].
    NoProgress {
        /// The queue directory.
        dir: PathBuf,
        /// How long the queue stood still.
        idle: Duration,
        /// Live entries ahead.
        ahead: usize,
        /// The process whose turn it is (the first entry ahead).
        first_pid: u32,
    },
    /// The turn could not begin by [`Limits::begin_by`].
    TimeBound {
        /// The queue directory.
        dir: PathBuf,
        /// How long this waiter waited.
        waited: Duration,
        /// Live entries still ahead.
        ahead: usize,
    },
    /// A lock that shows no progress (the joining lock, the older binaries' node-wide
    /// lock, or the Go plugin's node lock) stayed held for [`Limits::no_progress`] (or
    /// up to [`Limits::begin_by`]).
    Held {
        /// The lock file.
        path: PathBuf,
        /// What it is, for the message.
        what: &'static str,
        /// How long it was waited for.
        waited: Duration,
    },
    /// A file of the queue could not be created, opened, locked, renamed or listed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        err: io::Error,
    },
}

impl std::fmt::Display for QueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueError::NoProgress {
                dir,
                idle,
                ahead,
                first_pid,
            } => write!(
                f,
                "the node's VF rebind queue {} has not moved for {:.1} s (lockTimeoutMs) with {ahead} rebind(s) ahead of this one (the first by pid {first_pid})",
                dir.display(),
                idle.as_secs_f64()
            ),
            QueueError::TimeBound { dir, waited, ahead } => write!(
                f,
                "waiting on in the node's VF rebind queue {} would take this call past its time bound ({ahead} rebind(s) still ahead after {:.1} s of waiting)",
                dir.display(),
                waited.as_secs_f64()
            ),
            QueueError::Held { path, what, waited } => write!(
                f,
                "{what} {} is still held by another process after {:.1} s",
                path.display(),
                waited.as_secs_f64()
            ),
            QueueError::Io { path, err } => {
                write!(f, "rebind queue {}: {err}", path.display())
            }
        }
    }
}

impl std::error::Error for QueueError {}

impl From<QueueError> for CniError {
    /// Code 11 (try again later) for a queue that stopped, a time bound or a held lock;
    /// code 5 for an I/O failure.
    fn from(e: QueueError) -> CniError {
        match e {
            QueueError::Io { .. } => CniError::new(code::IO_FAILURE, e.to_string()),
            _ => CniError::try_later(e.to_string()),
        }
    }
}

/// A turn in the queue: while it lives, no other rebind on the node runs. Dropping it
/// releases the Go plugin's lock, then the older binaries' lock, removes the entry,
/// then closes the entry file
/// (which releases its flock and wakes the waiters blocked on it), in that order.
#[must_use = "the turn ends when the guard is dropped"]
#[derive(Debug)]
pub struct RebindTurn {
    go: Option<FileLock>,
    legacy: Option<FileLock>,
    /// Holds `LOCK_EX` on the entry (see the module docs); closed last.
    _entry: File,
    path: PathBuf,
    ticket: u64,
    waited: Duration,
}

impl RebindTurn {
    /// This turn's ticket.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }

    /// How long the turn was waited for (from joining to its beginning).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The entry file.
    pub fn entry_path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RebindTurn {
    fn drop(&mut self) {
        drop(self.go.take());
        drop(self.legacy.take());
        match fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            // Still safe: the lock goes with the file below, and a waiter then finds
            // the entry dead and removes it.
            Err(e) => log::warn!("removing rebind queue entry {}: {e}", self.path.display()),
        }
        // `_entry` is closed after this function returns (fields drop after `drop`),
        // which releases its flock and wakes the waiters blocked on it.
    }
}

/// `flock(fd, op | LOCK_NB)`: `Ok(true)` locked, `Ok(false)` held by someone else.
fn try_flock(f: &File, op: i32) -> io::Result<bool> {
    // SAFETY: flock on a descriptor `f` owns; no memory is passed.
    if unsafe { nix::libc::flock(f.as_raw_fd(), op | nix::libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() == Some(nix::libc::EWOULDBLOCK) {
        true => Ok(false),
        false => Err(e),
    }
}

/// What a look at an entry found.
enum Probe {
    /// Its owner holds it: the open file, to wait on.
    Live(File),
    /// Its owner is gone: removed now (or by someone else meanwhile).
    Dead,
    /// No longer there (finished).
    Gone,
}

impl RebindQueue {
    /// The queue in `dir`, with `legacy` the node-wide lock file older binaries take.
    pub fn new(dir: impl Into<PathBuf>, legacy: impl Into<PathBuf>) -> Self {
        RebindQueue {
            dir: dir.into(),
            legacy: legacy.into(),
            go_lock: None,
        }
    }

    /// The same queue, whose turns also hold the Go plugin's node lock `path`
    /// ([`crate::gocache::GO_LOCK_FILE`] in production): its directory is created mode
    /// 0700 when missing, as the Go plugin creates it.
    pub fn with_go_lock(mut self, path: impl Into<PathBuf>) -> Self {
        self.go_lock = Some(path.into());
        self
    }

    /// The queue directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn io(&self, path: &Path) -> impl FnOnce(io::Error) -> QueueError {
        let path = path.to_path_buf();
        move |err| QueueError::Io { path, err }
    }

    /// The entries present, live or dead, in ticket order (no liveness check; a
    /// missing directory is an empty queue). Errors: the directory cannot be read.
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for e in rd {
            let e = e?;
            if let Some(entry) = e.file_name().to_str().and_then(Entry::parse) {
                out.push(entry);
            }
        }
        out.sort_by(|a, b| (a.ticket, &a.name).cmp(&(b.ticket, &b.name)));
        Ok(out)
    }

    /// Looks at `entry`: live (its owner holds `LOCK_EX`), dead (anyone can lock it:
    /// removed here, while this process holds `LOCK_SH` on it, so it is the dead entry
    /// and never a successor that is unlinked), or gone.
    fn probe(&self, entry: &Entry) -> io::Result<Probe> {
        let path = self.dir.join(&entry.name);
        let f = match open_regular(&path, OFlag::O_RDONLY, 0) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Gone),
            Err(e) => return Err(e),
        };
        if !try_flock(&f, nix::libc::LOCK_SH)? {
            return Ok(Probe::Live(f));
        }
        match fs::remove_file(&path) {
            Ok(()) => log::info!(
                "rebind queue {}: removed entry {} (ticket {}) of pid {}, which died",
                self.dir.display(),
                entry.name,
                entry.ticket,
                entry.pid
            ),
            // Removed by its owner as it finished (unlink, then close), or by another
            // waiter that found it dead first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Probe::Dead)
    }

    /// The live entries ahead of `ticket`, in order, with the first one's file open;
    /// dead ones are removed on the way.
    fn live_ahead(&self, ticket: u64) -> Result<(Vec<Entry>, Option<File>), QueueError> {
        let mut live = Vec::new();
        let mut first = None;
        let entries = self.entries().map_err(self.io(&self.dir))?;
        for e in entries.into_iter().filter(|e| e.ticket < ticket) {
            match self.probe(&e).map_err(self.io(&self.dir.join(&e.name)))? {
                Probe::Live(f) => {
                    if first.is_none() {
                        first = Some(f);
                    }
                    live.push(e);
                }
                Probe::Dead | Probe::Gone => {}
            }
        }
        Ok((live, first))
    }

    /// Joins the queue: under the joining lock, removes what dead joiners and owners
    /// left, creates the entry under a temporary name, locks it (`LOCK_EX`) and renames
    /// it into place with a ticket one above every ticket present. The joining lock is
    /// waited for until `until`.
    fn join(&self, until: Instant) -> Result<RebindTurn, QueueError> {
        let t0 = Instant::now();
        fs::create_dir_all(&self.dir).map_err(self.io(&self.dir))?;
        let md = fs::symlink_metadata(&self.dir).map_err(self.io(&self.dir))?;
        if !md.is_dir() {
            return Err(QueueError::Io {
                path: self.dir.clone(),
                err: io::Error::other("not a directory"),
            });
        }
        let ticket_path = self.dir.join(TICKET_LOCK);
        let tl = open_regular(&ticket_path, OFlag::O_RDWR | OFlag::O_CREAT, 0o644)
            .map_err(self.io(&ticket_path))?;
        if !flock_until(&tl, true, until).map_err(self.io(&ticket_path))? {
            return Err(QueueError::Held {
                path: ticket_path,
                what: "the rebind queue's joining lock",
                waited: t0.elapsed(),
            });
        }
        // Under the joining lock every temporary entry is a dead joiner's: a live one
        // renames its own before it unlocks.
        let rd = fs::read_dir(&self.dir).map_err(self.io(&self.dir))?;
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                let _ = fs::remove_file(e.path());
            }
        }
        let mut max = 0;
        for e in self.entries().map_err(self.io(&self.dir))? {
            match self.probe(&e).map_err(self.io(&self.dir.join(&e.name)))? {
                Probe::Live(_) => max = max.max(e.ticket),
                Probe::Dead | Probe::Gone => {}
            }
        }
        let ticket = max + 1;
        let pid = crate::fsutil::pid();
        let nonce = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
            .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
            .map_err(|e| self.io(&self.dir)(e.into()))?;
        let tmp = self.dir.join(format!("{TEMP_PREFIX}{pid}.{nonce}"));
        let path = self.dir.join(format!("{ticket:020}.{pid}.{nonce}"));
        let created = (|| {
            let f = open_regular(&tmp, OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL, 0o644)?;
            if !try_flock(&f, nix::libc::LOCK_EX)? {
                return Err(io::Error::other("a new file is locked by someone else"));
            }
            match renameat2(
                AT_FDCWD,
                tmp.as_path(),
                AT_FDCWD,
                path.as_path(),
                RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => {}
                // A filesystem without RENAME_NOREPLACE: link(2), which never replaces
                // either.
                Err(Errno::EINVAL) => {
                    fs::hard_link(&tmp, &path)?;
                    let _ = fs::remove_file(&tmp);
                }
                Err(e) => return Err(e.into()),
            }
            Ok(f)
        })();
        let entry = match created {
            Ok(f) => f,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(QueueError::Io { path, err: e });
            }
        };
        drop(tl);
        Ok(RebindTurn {
            go: None,
            legacy: None,
            _entry: entry,
            path,
            ticket,
            waited: Duration::ZERO,
        })
    }

    /// Takes the flock of `path`, a lock that shows no progress (the older binaries' or
    /// the Go plugin's), once this waiter is first in the queue: waited for from
    /// `since` up to [`Limits::no_progress`] ([`QueueError::Held`] naming `what`), and
    /// never past [`Limits::begin_by`] ([`QueueError::TimeBound`], with the wait counted
    /// from `joined`).
    fn side_lock(
        &self,
        path: &Path,
        what: &'static str,
        (joined, since): (Instant, Instant),
        limits: &Limits,
    ) -> Result<FileLock, QueueError> {
        let until = limits.begin_by.min(since + limits.no_progress);
        lock_with_timeout(path, until.saturating_duration_since(since)).map_err(|e| match e {
            LockError::Timeout(..) if Instant::now() >= limits.begin_by => QueueError::TimeBound {
                dir: self.dir.clone(),
                waited: joined.elapsed(),
                ahead: 0,
            },
            LockError::Timeout(path, _) => QueueError::Held {
                path,
                what,
                waited: since.elapsed(),
            },
            LockError::Io(path, err) => QueueError::Io { path, err },
        })
    }

    /// Waits for this process's turn: joins the queue, then, until no live entry is
    /// ahead, blocks on the first live entry's flock (shared, so every waiter can wait
    /// on it at once) until that entry's owner finishes or dies, and looks again; once
    /// first, takes the older binaries' lock, then the Go plugin's lock when the queue
    /// has one ([`RebindQueue::with_go_lock`]). Entries of dead processes ahead are
    /// removed on the way and never block.
    ///
    /// Gives up when no entry ahead has finished or vanished for
    /// [`Limits::no_progress`] ([`QueueError::NoProgress`]), or when the turn could not
    /// begin by [`Limits::begin_by`] ([`QueueError::TimeBound`], also when the queue is
    /// free but that instant has passed); the joining lock, the older binaries' lock and
    /// the Go plugin's lock are each waited for up to [`Limits::no_progress`]
    /// ([`QueueError::Held`]), never past [`Limits::begin_by`].
    /// On any error this process's entry is removed. Logs the wait (position, time
    /// waited) at debug, and at info when it lasted [`LONG_WAIT`] or more.
    ///
    /// Errors: as above; [`QueueError::Io`] when a queue file cannot be created,
    /// listed, opened, locked or renamed.
    pub fn enter(&self, limits: &Limits) -> Result<RebindTurn, QueueError> {
        let t0 = Instant::now();
        let mut turn = self.join(limits.begin_by.min(t0 + limits.no_progress))?;
        let mut last_progress = Instant::now();
        let mut before: Option<usize> = None;
        let mut on_arrival = 0;
        loop {
            let (ahead, first) = self.live_ahead(turn.ticket)?;
            let now = Instant::now();
            match before {
                None => on_arrival = ahead.len(),
                Some(b) if ahead.len() < b => last_progress = now,
                Some(_) => {}
            }
            before = Some(ahead.len());
            if now >= limits.begin_by {
                return Err(QueueError::TimeBound {
                    dir: self.dir.clone(),
                    waited: now - t0,
                    ahead: ahead.len(),
                });
            }
            let (Some(head), Some(file)) = (ahead.first(), first) else {
                break;
            };
            let idle_until = last_progress + limits.no_progress;
            if now >= idle_until {
                return Err(QueueError::NoProgress {
                    dir: self.dir.clone(),
                    idle: now - last_progress,
                    ahead: ahead.len(),
                    first_pid: head.pid,
                });
            }
            log::debug!(
                "rebind queue {}: ticket {}, position {} ({} ahead, the first by pid {}), waited {:.3} s",
                self.dir.display(),
                turn.ticket,
                ahead.len() + 1,
                ahead.len(),
                head.pid,
                (now - t0).as_secs_f64()
            );
            // Returns when the first entry's owner unlocks (finished or died) or at the
            // limit; either way the next scan decides. The shared lock taken, if any,
            // goes with `file`.
            flock_until(&file, false, idle_until.min(limits.begin_by))
                .map_err(self.io(&self.dir.join(&head.name)))?;
        }
        let first_at = Instant::now();
        turn.legacy = Some(self.side_lock(
            &self.legacy,
            "the node-wide rebind lock (taken by ib-sriov versions before the rebind queue)",
            (t0, first_at),
            limits,
        )?);
        if let Some(go) = &self.go_lock {
            let at = Instant::now();
            if let Some(d) = go.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(d)
                    .map_err(self.io(d))?;
            }
            turn.go = Some(self.side_lock(
                go,
                "the Go ib-sriov-cni's node lock (held across each of its ADD and DEL calls)",
                (t0, at),
                limits,
            )?);
            let held_for = at.elapsed();
            if held_for >= LONG_WAIT {
                log::info!(
                    "rebind queue {}: waited {:.3} s for the Go ib-sriov-cni's node lock {}",
                    self.dir.display(),
                    held_for.as_secs_f64(),
                    go.display()
                );
            }
        }
        turn.waited = t0.elapsed();
        let msg = format!(
            "rebind queue {}: ticket {} begins its turn after {:.3} s ({on_arrival} rebind(s) were ahead on arrival)",
            self.dir.display(),
            turn.ticket,
            turn.waited.as_secs_f64()
        );
        match turn.waited >= LONG_WAIT {
            true => log::info!("{msg}"),
            false => log::debug!("{msg}"),
        }
        Ok(turn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_parse_and_sort_as_numbers() {
        let e = Entry::parse("00000000000000000012.345.678").unwrap();
        assert_eq!((e.ticket, e.pid), (12, 345));
        for bad in [".ticket", ".new.1.2", "1.2", "1.2.3.4", "a.2.3", "rebind"] {
            assert!(Entry::parse(bad).is_none(), "{bad}");
        }
        let d = tempfile::tempdir().unwrap();
        let q = RebindQueue::new(d.path().join("q"), d.path().join("rebind"));
        assert!(q.entries().unwrap().is_empty());
        fs::create_dir(q.dir()).unwrap();
        for n in [
            "00000000000000000010.1.1",
            "00000000000000000009.1.1",
            ".ticket",
        ] {
            fs::write(q.dir().join(n), b"").unwrap();
        }
        let t: Vec<u64> = q.entries().unwrap().iter().map(|e| e.ticket).collect();
        assert_eq!(t, vec![9, 10]);
    }

    /// A turn removes its entry when dropped and leaves nothing but the joining lock;
    /// the next one gets ticket 1 again, and an entry left by a dead process (a file
    /// nobody locks) does not hold the next one up.
    #[test]
    fn a_turn_cleans_up_and_dead_entries_never_block() {
        let d = tempfile::tempdir().unwrap();
        let q = RebindQueue::new(d.path().join("q"), d.path().join("rebind"));
        let limits = Limits {
            no_progress: Duration::from_secs(30),
            begin_by: Instant::now() + Duration::from_secs(60),
        };
        let t = q.enter(&limits).unwrap();
        assert_eq!(t.ticket(), 1);
        drop(t);
        assert!(q.entries().unwrap().is_empty());
        fs::write(q.dir().join("00000000000000000001.999999.1"), b"").unwrap();
        fs::write(q.dir().join(".new.999999.2"), b"").unwrap();
        let t0 = Instant::now();
        let t = q.enter(&limits).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert_eq!(t.ticket(), 1, "the dead entry was removed when joining");
        let names: Vec<String> = fs::read_dir(q.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&TICKET_LOCK.to_string()), "{names:?}");
    }

    /// The production path, `Ctx::lock_rebind`: the verb's time bound counts from
    /// `Ctx::started` (a DEL that started 41 s ago is refused a free queue, code 11
    /// naming the bound and the queue), a fresh verb gets its turn, and a stuck queue
    /// is code 11 after `lockTimeoutMs` saying it has not moved.
    #[test]
    fn lock_rebind_gives_code_11_naming_the_verb_bound_or_the_stuck_queue() {
        use crate::plugin::{Ctx, DEL_BUDGET, REBIND_RESERVE};
        let d = tempfile::tempdir().unwrap();
        let conf = crate::config::NetConf::parse(
            serde_json::json!({
                "cniVersion": "1.0.0", "name": "ibnet", "type": "ib-sriov",
                "deviceID": "0000:af:00.2", "stateDir": d.path(), "lockTimeoutMs": 200
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let vars: std::collections::HashMap<String, String> = [
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "net1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let env = crate::cni::CniEnv::from_map(&vars).unwrap();
        let ctx = |started| Ctx {
            env: &env,
            conf: &conf,
            sysfs: crate::sysfs::Sysfs::new(d.path()),
            store: crate::journal::JournalStore::new(d.path()),
            rdma: &crate::plugin::rdma::KernelRdma,
            started,
            rolling_back: std::cell::Cell::new(false),
        };
        let late = Instant::now() - (DEL_BUDGET - REBIND_RESERVE) - Duration::from_secs(1);
        let e = ctx(late).lock_rebind().unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e:?}");
        for want in [
            "DEL keeps within 60 s",
            "within 40 s",
            "time bound",
            "rebind.queue",
        ] {
            assert!(e.msg.contains(want), "{want}: {}", e.msg);
        }
        let held = ctx(Instant::now()).lock_rebind().unwrap();
        assert!(held
            .entry_path()
            .starts_with(d.path().join("locks/rebind.queue")));
        let t0 = Instant::now();
        let e = ctx(Instant::now()).lock_rebind().unwrap_err();
        assert!(
            t0.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e:?}");
        assert!(e.msg.contains("has not moved"), "{}", e.msg);
        drop(held);
        drop(ctx(Instant::now()).lock_rebind().unwrap());
    }
}
