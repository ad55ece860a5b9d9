//! The index of a Go cache directory: which of its files the Go plugin wrote, and the
//! VF each names, so that ADD finds a Go plugin attachment holding its VF
//! ([`holder`]) without reading every file there. ADD also writes one file per
//! attachment into that directory ([`super::steps`] `go_cache.rs`, for a rollback), so
//! reading every file made ADD's cost grow with the node's attachments.
//!
//! One index per (stateDir, Go cache directory): `<stateDir>/locks/go-cache-index.<h>`
//! (`h`: the FNV-1a hash of the directory's path, [`index_path`]), a small text file
//! replaced atomically, and beside it `<index>.ours`, an append-only log of the files our
//! ADD wrote, read only when the directory is listed:
//!
//! ```text
//! ib-sriov go-cache index 2
//! stamp <dev> <ino> <mtime s> <mtime ns> <settled 0|1>
//! g <ino> <VF> <name>      a file the Go plugin wrote (no marker), naming that VF
//! x <ino> <name>           a file that is no Go NetConf (read under the Go lock)
//! o <ino> <VF> <name>      ours, of this boot, unknown to the log (a lost stateDir)
//!
//! <index>.ours:
//! + <ino> <name>           our ADD wrote it (it carries gocache::MARKER_KEY)
//! - <name>                 our DEL removed it
//! ```
//!
//! Names are percent-encoded (bytes outside `[A-Za-z0-9._:@+=,~-]`). A file is known by
//! its name and inode number (from the directory listing, no `stat`). A lookup reads the
//! small index only; our writes append one line to the log and replace the small index,
//! so neither reads or writes anything per file of the directory (the log is rewritten,
//! one line per file, when the directory is listed, and when it passes 256 KiB).
//!
//! **When the index is true.** The stamp is the directory's identity and mtime as a
//! `stat` returned them. Every entry added to or removed from the directory sets its
//! mtime, and since Linux 6.13 (multigrain timestamps, `fs/inode.c`
//! `inode_set_ctime_current`, on ext4, xfs, btrfs and tmpfs) a change after a `stat`
//! always gets an mtime different from the one that `stat` returned. So an mtime equal
//! to the stamp proves the listing is the one indexed. On other kernels and filesystems
//! two changes in one clock tick share an mtime, so a stamp counts ("settled") only when
//! it was read after the coarse clock had passed it (as git's "racily clean" rule);
//! otherwise the next lookup lists the directory again.
//!
//! **Who changes the directory.**
//! - The Go plugin writes its file at the end of its ADD while it holds its node lock
//!   [`crate::gocache::GO_LOCK_FILE`] (k8snetworkplumbingwg/ib-sriov-cni 543060da, `cmd/ib-sriov-cni/main.go`
//!   `cmdAdd`: `lockCNIExecution` then `utils.SaveNetConf`; every release since v1.0.1).
//!   Its DEL removes its file, sometimes after that lock is released: a removal only
//!   makes an entry stale, and every `g` entry naming the VF is read again before it is
//!   believed, so a stale one is harmless.
//! - Our ADD writes its file and our DEL removes it ([`creating`], [`removing`]), holding
//!   the same lock (at most [`LOCK_WAIT`]) from the `stat` that checks the stamp to the
//!   `stat` after the change: no Go file can appear in between, so the index with that
//!   one change is true at the new stamp. Without the lock, or with a stale index, the
//!   index is left alone and the next lookup lists the directory.
//! - Any other change (an admin, another stateDir's index, a crash between a change and
//!   the index write) moves the mtime away from the stamp, and the next lookup lists the
//!   directory: names with the indexed inode keep their entry, every other file is read
//!   once and classified (under the Go lock, so a Go file is never read half-written;
//!   without it, or when a file cannot be read, the new index is not settled and the
//!   next lookup lists again).
//!
//! Crash-safe: the index is a cache of what the directory shows. It is replaced
//! atomically; a lost, stale, corrupt or foreign index only makes the next lookup list
//! the directory and read the files it does not know. Not seen: a file rewritten in
//! place under the same name (same inode, no directory change), which needs a second
//! ADD of the same (containerID, ifname) without a DEL between (the CNI SPEC.md "ADD"
//! forbids it), and Go releases before v1.0.1 (no node lock).

use crate::gocache::{self, GoAttachment};
use crate::types::PciAddress;
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest wait for [`crate::gocache::GO_LOCK_FILE`] before the index is left to the next lookup (ours hold it
/// for microseconds; the Go plugin for a whole call).
pub const LOCK_WAIT: Duration = Duration::from_millis(50);

const HEADER: &str = "ib-sriov go-cache index 2";

/// A directory's identity and mtime as `stat(2)` returned them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    sec: i64,
    nsec: i64,
}

fn stamp(dir: &Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(dir)?;
    Ok(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        sec: m.mtime(),
        nsec: m.mtime_nsec(),
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// A file the Go plugin wrote (no marker), naming this VF.
    Go(PciAddress),
    /// A file that is no Go NetConf.
    Other,
    /// A file our ADD wrote, recorded in the ours log when it wrote it (or written in
    /// another boot: nothing of its attachment is left).
    Ours,
    /// A file our ADD wrote in this boot, naming this VF, that the ours log does not
    /// know and no journal of this stateDir holds the VF of: found by a listing after
    /// the stateDir (journals, holder links, log and index) was lost, so it may be all
    /// that is left of a live attachment.
    Orphan(PciAddress),
}

#[derive(Clone, Debug)]
struct Entry {
    name: String, // percent-encoded
    ino: u64,
    kind: Kind,
}

#[derive(Debug)]
struct Index {
    stamp: Stamp,
    settled: bool,
    entries: Vec<Entry>,
}

/// `<stateDir>/locks/go-cache-index.<h>` of `dir`: `h` is the 64-bit FNV-1a hash of
/// the directory's path, in hex (a name, not a proof: the index records the directory's
/// device and inode, and a stamp of another directory never matches).
pub fn index_path(state_dir: &Path, dir: &Path) -> PathBuf {
    let h = dir
        .as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    state_dir
        .join("locks")
        .join(format!("go-cache-index.{h:016x}"))
}

fn enc(name: &[u8]) -> String {
    let mut s = String::with_capacity(name.len());
    for &b in name {
        if b.is_ascii_alphanumeric() || b"._:@+=,~-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02x}"));
        }
    }
    s
}

fn dec(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Largest index read: 64 MiB (a line per cache file, under 200 bytes each).
const MAX_INDEX: u64 = 64 << 20;

/// Reads the index (its Go and other entries). `None` when missing, not a regular file,
/// larger than [`MAX_INDEX`] or malformed.
fn load(path: &Path) -> Option<Index> {
    // A regular file only, opened without blocking (a FIFO in its place cannot hang
    // the call), sized by its fstat.
    let text = crate::fsutil::read_regular_bounded(path, MAX_INDEX).ok()?;
    let text = String::from_utf8(text).ok()?;
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let s: Vec<&str> = lines.next()?.strip_prefix("stamp ")?.split(' ').collect();
    let [dev, ino, sec, nsec, settled] = s[..] else {
        return None;
    };
    let mut idx = Index {
        stamp: Stamp {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            sec: sec.parse().ok()?,
            nsec: nsec.parse().ok()?,
        },
        settled: settled == "1",
        entries: Vec::new(),
    };
    for l in lines {
        let (tag, rest) = l.split_once(' ')?;
        let (ino, rest) = rest.split_once(' ')?;
        let (kind, name) = match tag {
            "g" => {
                let (vf, name) = rest.split_once(' ')?;
                (Kind::Go(vf.parse().ok()?), name)
            }
            "o" => {
                let (vf, name) = rest.split_once(' ')?;
                (Kind::Orphan(vf.parse().ok()?), name)
            }
            "x" => (Kind::Other, rest),
            _ => return None,
        };
        idx.entries.push(Entry {
            name: name.to_string(),
            ino: ino.parse().ok()?,
            kind,
        });
    }
    Some(idx)
}

/// Replaces the index atomically; `false` when it could not be written.
fn save(path: &Path, idx: &Index) -> bool {
    let mut s = String::with_capacity(64 + idx.entries.len() * 48);
    let st = &idx.stamp;
    s.push_str(HEADER);
    s.push_str(&format!(
        "\nstamp {} {} {} {} {}\n",
        st.dev, st.ino, st.sec, st.nsec, idx.settled as u8
    ));
    for e in &idx.entries {
        match &e.kind {
            Kind::Go(vf) => s.push_str(&format!("g {} {vf} {}\n", e.ino, e.name)),
            Kind::Other => s.push_str(&format!("x {} {}\n", e.ino, e.name)),
            Kind::Orphan(vf) => s.push_str(&format!("o {} {vf} {}\n", e.ino, e.name)),
            Kind::Ours => {}
        }
    }
    write_file(path, s.as_bytes())
}

/// `<index>.ours`: the files our ADD wrote, an append-only log of `+ <ino> <name>`
/// (written) and `- <name>` (removed) lines, read only when the directory is listed.
fn ours_path(index: &Path) -> PathBuf {
    let mut p = index.as_os_str().to_os_string();
    p.push(".ours");
    PathBuf::from(p)
}

/// Past this size the log is not appended to: the index is left unsettled, and the next
/// lookup lists the directory and writes the log anew, one line per file.
const MAX_OURS_LOG: u64 = 256 * 1024;

/// The files of the log `path` (missing, unreadable, not a regular file or larger than
/// twice [`MAX_OURS_LOG`]: none).
fn load_ours(path: &Path) -> Vec<Entry> {
    let text = crate::fsutil::read_regular_bounded(path, 2 * MAX_OURS_LOG)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
    let mut live: HashMap<&str, u64> = HashMap::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("+ ") {
            if let Some((ino, name)) = rest.split_once(' ') {
                if let Ok(ino) = ino.parse() {
                    live.insert(name, ino);
                }
            }
        } else if let Some(name) = l.strip_prefix("- ") {
            live.remove(name);
        }
    }
    live.into_iter()
        .map(|(name, ino)| Entry {
            name: name.to_string(),
            ino,
            kind: Kind::Ours,
        })
        .collect()
}

/// Appends `line` to the log `path`; `false` when it failed or the log is full.
fn append_ours(path: &Path, line: &str) -> bool {
    use std::io::Write;
    let open = || {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(path)
    };
    let Ok(mut f) = crate::fsutil::in_dir(path.parent(), open) else {
        return false;
    };
    f.write_all(line.as_bytes()).is_ok() && f.metadata().is_ok_and(|m| m.len() <= MAX_OURS_LOG)
}

fn write_file(path: &Path, data: &[u8]) -> bool {
    match crate::fsutil::in_dir(path.parent(), || crate::fsutil::replace_nosync(path, data)) {
        Ok(()) => true,
        Err((_, e)) => {
            log::debug!("Go cache index {}: {e}", path.display());
            false
        }
    }
}

/// Whether a change after a `stat` of `dir` always gets a new mtime: Linux 6.13 or later
/// (multigrain timestamps) on ext4, xfs, btrfs or tmpfs.
fn multigrain(dir: &Path) -> bool {
    // The running kernel's release (`uname(2)`), asked once per process.
    static SINCE_6_13: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let new_enough = *SINCE_6_13.get_or_init(|| {
        let Ok(u) = nix::sys::utsname::uname() else {
            return false;
        };
        let rel = u.release().to_string_lossy();
        let mut v = rel.split(|c: char| !c.is_ascii_digit());
        let (Some(Ok(major)), Some(Ok(minor))) = (
            v.next().map(str::parse::<u32>),
            v.next().map(str::parse::<u32>),
        ) else {
            return false;
        };
        (major, minor) >= (6, 13)
    });
    new_enough && common_fs(dir)
}

/// Whether `dir` is on ext4, xfs, btrfs or tmpfs (`statfs(2)`: EXT4_SUPER_MAGIC,
/// XFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC, TMPFS_MAGIC, linux/magic.h). Asked once per
/// directory per process (a call's ADD or DEL asks it of one Go cache directory up to
/// twice; a failed `statfs` is asked again).
pub fn common_fs(dir: &Path) -> bool {
    static SEEN: std::sync::Mutex<Vec<(PathBuf, bool)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, common)) = seen.iter().find(|(d, _)| d == dir) {
        return *common;
    }
    let Ok(s) = nix::sys::statfs::statfs(dir) else {
        return false;
    };
    let common = matches!(
        s.filesystem_type().0 as u64,
        0xef53 | 0x5846_5342 | 0x9123_683e | 0x0102_1994
    );
    seen.push((dir.to_path_buf(), common));
    common
}

/// The coarse clock (what a filesystem without multigrain timestamps stamps changes with).
fn coarse_now() -> (i64, i64) {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_REALTIME_COARSE)
        .map(|t| (t.tv_sec(), t.tv_nsec()))
        .unwrap_or((0, 0))
}

/// A stamp read when the coarse clock was `before` counts for later lookups.
fn settles(dir: &Path, st: &Stamp, before: (i64, i64)) -> bool {
    multigrain(dir) || before > (st.sec, st.nsec)
}

fn go_lock() -> Option<crate::fsutil::FileLock> {
    crate::fsutil::lock_with_timeout(&gocache::go_lock_path(), LOCK_WAIT).ok()
}

/// What the listing of `dir` (read after `st`) shows, classified: files of `known` (the
/// old index's entries and the ours log's) with the same name and inode keep their
/// class, every other file is read. The result is settled when `settled` and every file
/// was read; the files that are ours come back apart (for the log).
fn rebuild(
    state_dir: &Path,
    dir: &Path,
    st: Stamp,
    settled: bool,
    known: Vec<Entry>,
) -> Option<(Index, Vec<Entry>)> {
    let store = crate::journal::JournalStore::new(state_dir);
    let rd = std::fs::read_dir(dir).ok()?;
    let mut known: HashMap<(String, u64), Kind> = known
        .into_iter()
        .map(|e| ((e.name, e.ino), e.kind))
        .collect();
    let mut idx = Index {
        stamp: st,
        settled,
        entries: Vec::new(),
    };
    let mut ours = Vec::new();
    for e in rd.flatten() {
        let raw = e.file_name();
        let raw = raw.as_bytes();
        // Journals (`<cid>:<ifname>`), temp files, `locks/`, `vfs/` (a stateDir that is
        // the Go plugin's directory, as earlier versions' default).
        if raw.contains(&b':') || raw.starts_with(b".") || raw == b"locks" || raw == b"vfs" {
            continue;
        }
        let (name, ino) = (enc(raw), e.ino());
        let kind = match known.remove(&(name.clone(), ino)) {
            Some(k) => k,
            None => {
                let p = e.path();
                match crate::fsutil::read_regular_bounded(&p, gocache::MAX_GO_CACHE_BYTES) {
                    Ok(b) => match gocache::parse(&b, p) {
                        // Ours, of this boot, unknown to the log: an orphan only when no
                        // journal of this stateDir holds its VF (its holder link,
                        // `<stateDir>/vfs/<VF>`); a live attachment's file (the log was
                        // lost, or an earlier version wrote it) stays out of the index,
                        // so the index does not grow with the node's attachments.
                        Ok(g)
                            if g.ours_this_boot()
                                && std::fs::symlink_metadata(store.holder_link_path(g.vf))
                                    .is_err() =>
                        {
                            Kind::Orphan(g.vf)
                        }
                        Ok(g) if g.ours.is_some() => Kind::Ours,
                        Ok(g) => Kind::Go(g.vf),
                        Err(_) => Kind::Other,
                    },
                    Err(err) => {
                        log::debug!("Go cache index: {}: {err}", e.path().display());
                        idx.settled = false;
                        continue;
                    }
                }
            }
        };
        let entry = Entry { name, ino, kind };
        if entry.kind == Kind::Ours {
            ours.push(entry);
        } else {
            idx.entries.push(entry);
        }
    }
    Some((idx, ours))
}

/// The attachment of VF `vf` whose cache file is in one of `dirs`: one the Go plugin
/// wrote, or one our ADD wrote in this boot that the ours log does not know
/// ([`Kind::Orphan`]), found through each directory's index in `state_dir` (built, or
/// brought up to date, when the directory changed behind it). Each indexed file naming
/// the VF is read again before it is believed; unreadable ones are skipped.
pub(super) fn holder(state_dir: &Path, dirs: &[PathBuf], vf: PciAddress) -> Option<GoAttachment> {
    dirs.iter().find_map(|d| holder_in(state_dir, d, vf))
}

fn holder_in(state_dir: &Path, dir: &Path, vf: PciAddress) -> Option<GoAttachment> {
    let ip = index_path(state_dir, dir);
    let before = coarse_now();
    let st = stamp(dir).ok()?;
    let idx = match load(&ip).filter(|i| i.settled && i.stamp == st) {
        Some(i) => i,
        None => {
            // Written only under the Go lock, as our own changes are (a lookup without
            // it uses what it listed and leaves the index to the next one).
            let lock = go_lock();
            let lp = ours_path(&ip);
            let mut known = load(&ip).map(|i| i.entries).unwrap_or_default();
            known.extend(load_ours(&lp));
            let settled = lock.is_some() && settles(dir, &st, before);
            let (i, ours) = rebuild(state_dir, dir, st, settled, known)?;
            if lock.is_some() {
                let log: String = ours
                    .iter()
                    .map(|e| format!("+ {} {}\n", e.ino, e.name))
                    .collect();
                // The log first: a crash between the two leaves the old stamp.
                let _ = write_file(&lp, log.as_bytes()) && save(&ip, &i);
            }
            i
        }
    };
    idx.entries.iter().find_map(|e| {
        if e.kind != Kind::Go(vf) && e.kind != Kind::Orphan(vf) {
            return None;
        }
        let p = dir.join(std::ffi::OsStr::from_bytes(&dec(&e.name)?));
        let b = crate::fsutil::read_regular_bounded(&p, gocache::MAX_GO_CACHE_BYTES).ok()?;
        gocache::parse(&b, p)
            .ok()
            .filter(|g| g.vf == vf && (g.ours.is_none() || g.ours_this_boot()))
    })
}

/// Runs `act`, which creates `path` in its Go cache directory and says whether it now
/// holds what our ADD wrote (`Ok(true)`), and records the file in the index.
pub(super) fn creating(
    state_dir: &Path,
    path: &Path,
    act: impl FnOnce() -> std::io::Result<bool>,
) -> std::io::Result<bool> {
    changing(state_dir, path, || {
        let r = act();
        let ours = matches!(r, Ok(true));
        (r, ours.then_some(Kind::Ours))
    })
}

/// Runs `act`, which removes `path` from its Go cache directory (or leaves it when it is
/// not ours to remove), and keeps the index true.
pub(super) fn removing<T>(state_dir: &Path, path: &Path, act: impl FnOnce() -> T) -> T {
    changing(state_dir, path, || (act(), None))
}

/// Holds the Go lock around `act` and, when the index was true before it, records its
/// one change (`Some(kind)`: `path` is now that file; `None`: `path` is gone, else the
/// index is left for the next lookup to rebuild).
fn changing<T>(state_dir: &Path, path: &Path, act: impl FnOnce() -> (T, Option<Kind>)) -> T {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return act().0;
    };
    let ip = index_path(state_dir, dir);
    let lock = go_lock();
    let idx = lock.as_ref().and_then(|_| {
        let st = stamp(dir).ok()?;
        load(&ip).filter(|i| i.settled && i.stamp == st)
    });
    let (r, kind) = act();
    let Some(mut idx) = idx else {
        // The ours log is true whatever the index: a file our ADD wrote is recorded, so
        // a later listing does not take it for one that a lost stateDir left
        // ([`Kind::Orphan`]).
        if let (Some(Kind::Ours), Ok(m)) = (&kind, std::fs::symlink_metadata(path)) {
            let line = format!("+ {} {}\n", m.ino(), enc(name.as_bytes()));
            append_ours(&ours_path(&ip), &line);
        }
        log::debug!(
            "Go cache index {}: not brought up to date ({}); the next lookup lists {}",
            ip.display(),
            if lock.is_some() {
                "stale or missing"
            } else {
                "the Go plugin's lock is busy"
            },
            dir.display()
        );
        return r;
    };
    let before = coarse_now();
    let (Ok(st), meta) = (stamp(dir), std::fs::symlink_metadata(path)) else {
        return r;
    };
    let name = enc(name.as_bytes());
    let line = match (kind, meta) {
        (Some(_), Ok(m)) => format!("+ {} {name}\n", m.ino()),
        (None, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => format!("- {name}\n"),
        _ => return r, // not what was meant: the next lookup lists the directory
    };
    // The log first, then the stamp: a crash between the two leaves the old stamp.
    idx.entries.retain(|e| e.name != name);
    idx.stamp = st;
    idx.settled = append_ours(&ours_path(&ip), &line) && settles(dir, &st, before);
    // Tests kill the process here: the change made, the index not yet written.
    let _ = crate::failpoint::hit("go_index.save");
    save(&ip, &idx);
    drop(lock);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_the_encoding() {
        for n in [&b"pod-1-net1"[..], b"a b\nc%d", b"\xff\x00z"] {
            assert_eq!(dec(&enc(n)).as_deref(), Some(n));
        }
        assert!(!enc(b"a b\nc").contains([' ', '\n']));
    }
}
