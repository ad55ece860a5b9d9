//! The on-disk store, byte-compatible with host-local's
//! (plugins/ipam/host-local/backend/disk/backend.go):
//!
//! ```text
//! <dataDir>/<network>/                 directory, mode 0755 (os.MkdirAll)
//! <dataDir>/<network>/lock             flock'ed lock file (see lock.rs)
//! <dataDir>/<network>/<ip>             one per allocated address, mode 0600, content
//!                                      "<containerID>\r\n<ifname>" (no final newline);
//!                                      created exclusively by link(2) from a written
//!                                      temp file `.reserve.<pid>`; after a machine crash
//!                                      possibly empty: a remnant, see [`Record::is_remnant`]
//! <dataDir>/<network>/last_reserved_ip.<rangeset index>
//!                                      content "<ip>" (no newline), mode 0600
//! <dataDir>/<network>/boot_id          ours only: the boot the records belong to
//!                                      ([`DiskStore::boot_marker`]); not an address,
//!                                      so host-local and [`DiskStore::scan`] skip it
//! ```
//!
//! `<ip>` is Go's `net.IP.String()`: dotted quad for IPv4, RFC 5952 for IPv6,
//! which is what Rust's `Display` prints for the addresses we hand out.
//! Callers hold the lock (see [`super::lock`]) around every method here.
//!
//! Files are read with [`crate::fsutil::read_regular_bounded`] (`O_NOFOLLOW`,
//! `O_NONBLOCK`, regular files only, at most [`MAX_FILE_LEN`] bytes): a
//! symlink, FIFO, socket or device planted under an address's name or as
//! `last_reserved_ip.<n>` is an error naming the path ([`IpamError::Io`]),
//! never followed or waited on. Files are created exclusively (`O_EXCL`,
//! which does not follow symlinks) and put in place with link(2)/rename(2),
//! which replace or fail on a name, never write through it.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{ErrorKind, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::IpamError;
use super::lock::{FileLock, LockMode};
use super::range::canonical_ip;
use crate::fsutil::{is_not_regular, read_regular_bounded};

/// host-local's default `dataDir` (backend.go `defaultDataDir`).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// Name of the boot marker file ([`DiskStore::boot_marker`]).
pub const BOOT_MARKER_FILE: &str = "boot_id";

/// Prefix of the round-robin cursor files (backend.go `lastIPFilePrefix`).
pub const LAST_IP_FILE_PREFIX: &str = "last_reserved_ip.";

/// Name prefix of the temp files of [`DiskStore::reserve_first`] (not an address, so
/// host-local and [`DiskStore::scan`] ignore them).
pub const RESERVE_TEMP_PREFIX: &str = ".reserve.";

/// Separator between container ID and interface name in a per-IP file
/// (backend.go `LineBreak`).
pub const LINE_BREAK: &str = "\r\n";

/// Largest per-IP or `last_reserved_ip.<n>` file read, in bytes. Ours hold
/// at most 255 + 2 + 15 bytes (container ID, `\r\n`, ifname); a larger file
/// is not one of ours and is treated as unreadable.
pub const MAX_FILE_LEN: u64 = 4096;

/// One per-IP file as read back from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The address (the file name, canonicalized).
    pub ip: IpAddr,
    /// The container ID: the whitespace-trimmed content up to `\r\n`, or the
    /// whole trimmed content for legacy files (written by host-local before it
    /// recorded interface names).
    pub container_id: String,
    /// The interface name after `\r\n`; empty for legacy files.
    pub ifname: String,
    /// The whitespace-trimmed content, which host-local matches against.
    pub content: String,
}

impl Record {
    /// host-local's exact match: trimmed content ==
    /// `TrimSpace(id) + "\r\n" + ifname`.
    pub fn matches(&self, container_id: &str, ifname: &str) -> bool {
        self.content == record_content(container_id, ifname)
    }

    /// host-local's backwards-compatible match: trimmed content ==
    /// `TrimSpace(id)` (a file naming only the container).
    pub fn matches_legacy(&self, container_id: &str) -> bool {
        self.content == container_id.trim()
    }

    /// True for a remnant: a record naming nobody (empty, or only whitespace and NUL
    /// bytes). See [`is_remnant`].
    pub fn is_remnant(&self) -> bool {
        is_remnant(self.content.as_bytes())
    }
}

/// True when the bytes of a per-IP file name nobody: empty, or only whitespace and NUL
/// bytes. Read under the network's lock, such a record is a remnant of a crash between
/// its name and its content reaching the disk, never an allocation in use: every
/// writer (ours, and host-local's `Reserve`: `O_EXCL` create, write, close) puts the
/// content in before it lets the lock go, so only a machine crash (the name committed
/// by the filesystem's journal, the data not yet written back: ext4 delayed
/// allocation, Documentation/admin-guide/ext4.rst; XFS may leave NUL bytes) or a
/// writer killed between its create and its write (host-local) leaves one. Its claimer
/// either died with the machine (every netns and pod on the node went with it) or
/// never answered ADD with a result, so no pod uses the address, and no DEL can release
/// it (DEL matches the content). [`super::IpamConfig::release`],
/// [`super::IpamConfig::release_known`] and GC therefore free remnants.
pub fn is_remnant(content: &[u8]) -> bool {
    content.iter().all(|b| *b == 0 || b.is_ascii_whitespace())
}

/// Who the per-IP file of an address names, as [`DiskStore::holder_of`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// No file: the address is free.
    Absent,
    /// A remnant naming nobody ([`is_remnant`]).
    Remnant,
    /// Exactly the attachment asked about (host-local's exact match).
    This,
    /// Someone else (another attachment, or a legacy container-ID-only file).
    Other,
}

/// The exact bytes host-local writes into a per-IP file:
/// `strings.TrimSpace(id) + "\r\n" + ifname` (backend.go `Reserve`).
pub fn record_content(container_id: &str, ifname: &str) -> String {
    format!("{}{LINE_BREAK}{ifname}", container_id.trim())
}

/// The directory of one network and the operations on its files.
#[derive(Debug, Clone)]
pub struct DiskStore {
    /// `<dataDir>/<network>`.
    dir: PathBuf,
}

impl DiskStore {
    /// The store of `network` under `data_dir` (`<data_dir>/<network>`). The
    /// network name must already be validated as a path component.
    pub fn new(data_dir: &Path, network: &str) -> DiskStore {
        DiskStore {
            dir: data_dir.join(network),
        }
    }

    /// `<dataDir>/<network>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the network directory exists.
    pub fn exists(&self) -> bool {
        self.dir.is_dir()
    }

    /// Create the network directory and its parents, mode 0755
    /// (host-local `disk.New`: `os.MkdirAll(dir, 0o755)`).
    pub fn ensure_dir(&self) -> Result<(), IpamError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.dir)
            .map_err(|e| IpamError::io("cannot create directory", &self.dir, &e))
    }

    /// Take the network's lock (`<dir>/lock`), see [`FileLock::acquire`].
    pub fn lock(&self, mode: LockMode, timeout: Duration) -> Result<FileLock, IpamError> {
        FileLock::acquire(&self.dir, mode, timeout)
    }

    /// Path of the per-IP file of `ip` (Go `net.IP.String()` naming).
    pub fn ip_path(&self, ip: IpAddr) -> PathBuf {
        self.dir.join(canonical_ip(ip).to_string())
    }

    /// Path of `last_reserved_ip.<range_set>`.
    pub fn last_ip_path(&self, range_set: usize) -> PathBuf {
        self.dir.join(format!("{LAST_IP_FILE_PREFIX}{range_set}"))
    }

    /// Every per-IP file of the network, sorted by address. Entries whose
    /// name is not an IP address (`lock`, `last_reserved_ip.*`, temp files)
    /// and directories are ignored; unreadable files (and files larger than
    /// [`MAX_FILE_LEN`]) are skipped with a warning (host-local's
    /// `filepath.Walk` callbacks ignore them too). A missing network
    /// directory yields an empty list.
    ///
    /// Errors: [`IpamError::Io`] when the directory cannot be listed, or
    /// naming the path when an entry named like an address is a symlink,
    /// FIFO, socket or device (not followed, not opened for long: see the
    /// module docs).
    pub fn scan(&self) -> Result<Vec<Record>, IpamError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(IpamError::io("cannot list", &self.dir, &e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| IpamError::io("cannot list", &self.dir, &e))?;
            let Some(ip) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let path = entry.path();
            // The entry's own type (not followed); `None` if it cannot be told.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let data = match read_regular_bounded(&path, MAX_FILE_LEN) {
                Ok(d) => d,
                Err(e) if is_not_regular(&e) => {
                    return Err(IpamError::io("refusing", &path, &e));
                }
                Err(e) => {
                    log::warn!("skipping unreadable {}: {e}", path.display());
                    continue;
                }
            };
            let content = String::from_utf8_lossy(&data).trim().to_string();
            let (container_id, ifname) = match content.split_once(LINE_BREAK) {
                Some((c, i)) => (c.to_string(), i.to_string()),
                None => (content.clone(), String::new()),
            };
            out.push(Record {
                ip: canonical_ip(ip),
                container_id,
                ifname,
                content,
            });
        }
        out.sort_by_key(|a| a.ip);
        Ok(out)
    }

    /// host-local `Store.Reserve` over a list of candidates: reserves the first free
    /// address among `candidates` for (container_id, ifname), as `<dir>/<ip>` with
    /// content `record_content(id, ifname)`, mode 0600, without listing the store. The
    /// record is written once to a temp file (`.reserve.<pid>`), then hard-linked to
    /// `<ip>` for each candidate in turn until link(2) succeeds; EEXIST (like O_EXCL)
    /// means the address is held, by us or by host-local, and the next one is tried. So
    /// no process ever sees `<ip>` without its content (host-local's create-then-write
    /// leaves an empty `<ip>` when killed in between), and a kill leaves at most the
    /// temp file, which [`DiskStore::remove_stale_temp_files`] removes.
    /// Neither the file nor the directory is fsynced ([`super::IpamConfig::allocate_new`]
    /// says why): a machine crash may leave the name without its content, a remnant
    /// ([`is_remnant`]) that release and GC free.
    /// Cost: one failed link per held candidate met, not one read per record. The temp
    /// name is removed in every case. Under the exclusive lock (one writer at a time).
    ///
    /// Returns the reserved address with the candidate's tag, `None` when every
    /// candidate is held. Errors: [`IpamError::Io`] naming the path.
    pub fn reserve_first<T>(
        &self,
        candidates: impl IntoIterator<Item = (T, IpAddr)>,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<(T, IpAddr)>, IpamError> {
        let tmp = self
            .dir
            .join(format!("{RESERVE_TEMP_PREFIX}{}", crate::fsutil::pid()));
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| IpamError::io("cannot create", &tmp, &e))?;
        let written = f.write_all(record_content(container_id, ifname).as_bytes());
        drop(f);
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(IpamError::io("cannot write", &tmp, &e));
        }
        let mut out = Ok(None);
        for (tag, ip) in candidates {
            let path = self.ip_path(ip);
            match fs::hard_link(&tmp, &path) {
                Ok(()) => {
                    out = Ok(Some((tag, ip)));
                    break;
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    out = Err(IpamError::io("cannot create", &path, &e));
                    break;
                }
            }
        }
        let _ = fs::remove_file(&tmp);
        out
    }

    /// Who the record of `ip` names: [`Holder::This`] for exactly (container_id, ifname)
    /// (host-local's exact match on the trimmed content), [`Holder::Remnant`] for a file
    /// naming nobody ([`is_remnant`]), [`Holder::Other`] for anyone else,
    /// [`Holder::Absent`] when there is no file. Opened without following symlinks,
    /// bounded.
    ///
    /// Errors: [`IpamError::Io`] for a file that is not a regular file, or unreadable.
    pub fn holder_of(
        &self,
        ip: IpAddr,
        container_id: &str,
        ifname: &str,
    ) -> Result<Holder, IpamError> {
        let path = self.ip_path(ip);
        match read_regular_bounded(&path, MAX_FILE_LEN) {
            Ok(b) if is_remnant(&b) => Ok(Holder::Remnant),
            Ok(b) => {
                let this = String::from_utf8_lossy(&b).trim()
                    == record_content(container_id, ifname).trim();
                Ok(if this { Holder::This } else { Holder::Other })
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(Holder::Absent),
            Err(e) if is_not_regular(&e) => Err(IpamError::io("refusing", &path, &e)),
            Err(e) => Err(IpamError::io("cannot read", &path, &e)),
        }
    }

    /// Removes the temp files of [`DiskStore::reserve_first`] left by killed
    /// processes. Only under the exclusive lock: every writer holds it, so no
    /// temp file then belongs to a live one. Best effort.
    pub fn remove_stale_temp_files(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(RESERVE_TEMP_PREFIX))
            {
                match fs::remove_file(e.path()) {
                    Ok(()) => log::info!("removed stale {}", e.path().display()),
                    Err(err) => log::warn!("removing stale {}: {err}", e.path().display()),
                }
            }
        }
    }

    /// Remove the per-IP file of `ip`. Returns `Ok(false)` when it was
    /// already gone.
    pub fn remove(&self, ip: IpAddr) -> Result<bool, IpamError> {
        let path = self.ip_path(ip);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(IpamError::io("cannot remove", &path, &e)),
        }
    }

    /// The boot marker `<network dir>/boot_id`: the boot ID ([`crate::boot::id`]) of the
    /// boot the network's records belong to, as written by [`DiskStore::set_boot_marker`].
    /// `Ok(None)` when absent; `Ok(Some(None))` when present but not a boot ID (torn,
    /// foreign), which the caller treats as unknown.
    ///
    /// Errors: [`IpamError::Io`] naming the path when it is not a regular file.
    pub fn boot_marker(&self) -> Result<Option<Option<String>>, IpamError> {
        let path = self.dir.join(BOOT_MARKER_FILE);
        match read_regular_bounded(&path, MAX_FILE_LEN) {
            Ok(b) => Ok(Some(crate::boot::parse_id(&String::from_utf8_lossy(&b)))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(IpamError::io("cannot read", &path, &e)),
        }
    }

    /// Writes the boot marker (atomically: a reader sees the old or the new ID). Not
    /// fsync'd: a marker lost in a machine crash is rewritten by the first allocation of
    /// the next boot, which then frees the records of the boots before (by their times,
    /// [`super::IpamConfig::allocate_new`]); one torn reads as unknown, as absent does.
    ///
    /// Errors: [`IpamError::Io`] naming the path.
    pub fn set_boot_marker(&self, boot_id: &str) -> Result<(), IpamError> {
        let path = self.dir.join(BOOT_MARKER_FILE);
        crate::fsutil::replace_nosync(&path, format!("{boot_id}\n").as_bytes())
            .map_err(|e| IpamError::io("cannot write", &path, &e))
    }

    /// host-local `Store.LastReservedIP`: the address in
    /// `last_reserved_ip.<range_set>`, or `None` when the file is missing,
    /// unreadable or larger than [`MAX_FILE_LEN`] (logged, as host-local
    /// does) or not an address.
    ///
    /// Errors: [`IpamError::Io`] naming the path when it is a symlink, FIFO,
    /// socket, directory or device (refused, see the module docs).
    pub fn last_reserved_ip(&self, range_set: usize) -> Result<Option<IpAddr>, IpamError> {
        let path = self.last_ip_path(range_set);
        match read_regular_bounded(&path, MAX_FILE_LEN) {
            Ok(s) => Ok(String::from_utf8_lossy(&s)
                .trim()
                .parse::<IpAddr>()
                .ok()
                .map(canonical_ip)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) if is_not_regular(&e) => Err(IpamError::io("refusing", &path, &e)),
            Err(e) => {
                log::warn!(
                    "error retrieving last reserved ip from {}: {e}",
                    path.display()
                );
                Ok(None)
            }
        }
    }

    /// Record `ip` as the last reserved address of `range_set`: `last_reserved_ip.<n>`
    /// rewritten in place (mode 0600 when created, content the address with no newline,
    /// as host-local's `os.WriteFile`). Overwritten at offset 0, then cut to the new length
    /// only when the old content was longer, rather than opened with `O_TRUNC`: on ext4 a
    /// truncate to size 0 followed by a write makes `close(2)` start the file's writeback
    /// (the `auto_da_alloc` replace-via-truncate heuristic, Documentation/admin-guide/
    /// ext4.rst), which cost ~0.23 ms per allocation here against ~0.03 ms in place
    /// (median of 300 writes each, this VM's virtio ext4). Neither a temp file nor an
    /// fsync: the file is only the round-robin hint; torn or lost in a crash it reads as
    /// no address and the next allocation starts at the range start, as host-local does
    /// for a missing or unparsable file (and every candidate is still claimed with
    /// link(2), so a wrong hint never hands out a held address). Written under the
    /// exclusive lock, which host-local also takes to read it. Opened without following
    /// symlinks and never blocking on a FIFO ([`crate::fsutil::open_regular`]).
    ///
    /// Errors: [`IpamError::Io`] naming the path (not a regular file, or the write or
    /// truncate failed).
    pub fn set_last_reserved_ip(&self, range_set: usize, ip: IpAddr) -> Result<(), IpamError> {
        use std::os::unix::fs::FileExt;
        let path = self.last_ip_path(range_set);
        let content = canonical_ip(ip).to_string();
        let write = || -> std::io::Result<()> {
            let f = crate::fsutil::open_regular(
                &path,
                nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CREAT,
                0o600,
            )?;
            f.write_all_at(content.as_bytes(), 0)?;
            let len = content.len() as u64;
            if f.metadata()?.len() > len {
                f.set_len(len)?;
            }
            Ok(())
        };
        write().map_err(|e| IpamError::io("cannot write", &path, &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// One address through [`DiskStore::reserve_first`]: true when it was free.
    fn reserve(s: &DiskStore, ip: IpAddr, cid: &str, ifname: &str) -> bool {
        s.reserve_first([((), ip)], cid, ifname).unwrap().is_some()
    }

    fn store() -> (tempfile::TempDir, DiskStore) {
        let d = tempfile::tempdir().unwrap();
        let s = DiskStore::new(&d.path().join("data"), "net1");
        s.ensure_dir().unwrap();
        (d, s)
    }

    #[test]
    fn reserve_writes_host_local_bytes() {
        let (_d, s) = store();
        assert!(reserve(&s, ip("10.0.0.2"), "abc123", "net1"));
        let path = s.dir().join("10.0.0.2");
        assert_eq!(fs::read(&path).unwrap(), b"abc123\r\nnet1");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(reserve(&s, ip("2001:db8::2"), "abc123", "net2"));
        assert_eq!(
            fs::read(s.dir().join("2001:db8::2")).unwrap(),
            b"abc123\r\nnet2"
        );
        // O_EXCL: a second reservation fails and leaves the content alone.
        assert!(!reserve(&s, ip("10.0.0.2"), "other", "eth0"));
        assert_eq!(fs::read(&path).unwrap(), b"abc123\r\nnet1");
        let mode = fs::metadata(s.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o755, 0, "dir mode {mode:o}");
        // No temp file left behind.
        let names: Vec<_> = fs::read_dir(s.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn a_killed_reserve_leaves_no_address_taken_and_its_temp_file_is_removed() {
        let (_d, s) = store();
        // What a writer killed after writing its temp file leaves.
        let tmp = s.dir().join(format!("{RESERVE_TEMP_PREFIX}10.0.0.2.4242"));
        fs::write(&tmp, "dead\r\nnet1").unwrap();
        assert!(s.scan().unwrap().is_empty(), "a temp file is no allocation");
        assert!(reserve(&s, ip("10.0.0.2"), "c", "net1"));
        s.remove_stale_temp_files();
        assert!(!tmp.exists());
        assert_eq!(fs::read(s.dir().join("10.0.0.2")).unwrap(), b"c\r\nnet1");
    }

    #[test]
    fn last_reserved_ip_round_trip_and_format() {
        let (_d, s) = store();
        assert_eq!(s.last_reserved_ip(0).unwrap(), None);
        s.set_last_reserved_ip(0, ip("10.0.0.5")).unwrap();
        s.set_last_reserved_ip(1, ip("2001:db8::5")).unwrap();
        assert_eq!(
            fs::read(s.dir().join("last_reserved_ip.0")).unwrap(),
            b"10.0.0.5"
        );
        assert_eq!(
            fs::read(s.dir().join("last_reserved_ip.1")).unwrap(),
            b"2001:db8::5"
        );
        assert_eq!(s.last_reserved_ip(0).unwrap(), Some(ip("10.0.0.5")));
        s.set_last_reserved_ip(0, ip("10.0.0.6")).unwrap();
        assert_eq!(s.last_reserved_ip(0).unwrap(), Some(ip("10.0.0.6")));
        // Rewritten in place: a longer address grows the file, a shorter one leaves no
        // trailing bytes of the old (host-local parses the whole file).
        s.set_last_reserved_ip(0, ip("10.0.0.254")).unwrap();
        assert_eq!(fs::read(s.last_ip_path(0)).unwrap(), b"10.0.0.254");
        s.set_last_reserved_ip(0, ip("10.0.0.7")).unwrap();
        assert_eq!(fs::read(s.last_ip_path(0)).unwrap(), b"10.0.0.7");
        // A hand-edited file far longer than an address is cut too.
        fs::write(s.last_ip_path(0), "x".repeat(100)).unwrap();
        s.set_last_reserved_ip(0, ip("10.0.0.8")).unwrap();
        assert_eq!(fs::read(s.last_ip_path(0)).unwrap(), b"10.0.0.8");
        let mode = fs::metadata(s.last_ip_path(0))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        // No temp file left behind.
        let names: Vec<_> = fs::read_dir(s.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        // Garbage or a trailing newline (hand edits) are tolerated.
        fs::write(s.last_ip_path(2), "10.0.0.9\n").unwrap();
        assert_eq!(s.last_reserved_ip(2).unwrap(), Some(ip("10.0.0.9")));
        fs::write(s.last_ip_path(3), "bogus").unwrap();
        assert_eq!(s.last_reserved_ip(3).unwrap(), None);
    }

    #[test]
    fn scan_parses_current_and_legacy_records_and_ignores_the_rest() {
        let (_d, s) = store();
        fs::write(s.dir().join("10.0.0.3"), "cid-b\r\neth0").unwrap();
        fs::write(s.dir().join("10.0.0.2"), "cid-a\r\nnet1\n").unwrap();
        fs::write(s.dir().join("10.0.0.4"), "legacy-cid\n").unwrap();
        fs::write(s.dir().join("lock"), "").unwrap();
        fs::write(s.dir().join("last_reserved_ip.0"), "10.0.0.4").unwrap();
        fs::create_dir(s.dir().join("10.0.0.9")).unwrap();
        let recs = s.scan().unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].ip, ip("10.0.0.2"));
        assert_eq!(
            (recs[0].container_id.as_str(), recs[0].ifname.as_str()),
            ("cid-a", "net1")
        );
        assert!(recs[0].matches("cid-a", "net1"));
        assert!(!recs[0].matches("cid-a", "net2"));
        assert!(!recs[0].matches_legacy("cid-a"));
        assert_eq!(
            (recs[2].container_id.as_str(), recs[2].ifname.as_str()),
            ("legacy-cid", "")
        );
        assert!(recs[2].matches_legacy("legacy-cid"));
        assert!(!recs[2].matches("legacy-cid", "eth0"));
    }

    #[test]
    fn scan_of_missing_dir_is_empty() {
        let d = tempfile::tempdir().unwrap();
        let s = DiskStore::new(d.path(), "absent");
        assert!(!s.exists());
        assert!(s.scan().unwrap().is_empty());
    }

    #[test]
    fn holder_of_tells_this_other_remnant_and_absent() {
        let (_d, s) = store();
        assert!(reserve(&s, ip("10.0.0.2"), "c", "net1"));
        assert_eq!(
            s.holder_of(ip("10.0.0.2"), "c", "net1").unwrap(),
            Holder::This
        );
        assert_eq!(
            s.holder_of(ip("10.0.0.2"), "c", "net2").unwrap(),
            Holder::Other
        );
        assert_eq!(
            s.holder_of(ip("10.0.0.3"), "c", "net1").unwrap(),
            Holder::Absent
        );
        for bytes in [&b""[..], b"\n", b"\0\0 \r\n"] {
            fs::write(s.dir().join("10.0.0.4"), bytes).unwrap();
            assert_eq!(
                s.holder_of(ip("10.0.0.4"), "c", "net1").unwrap(),
                Holder::Remnant
            );
        }
        fs::write(s.dir().join("10.0.0.4"), "c").unwrap();
        assert_eq!(
            s.holder_of(ip("10.0.0.4"), "c", "net1").unwrap(),
            Holder::Other
        );
        assert!(s.scan().unwrap().iter().filter(|r| r.is_remnant()).count() == 0);
    }

    #[test]
    fn remove_is_idempotent() {
        let (_d, s) = store();
        assert!(reserve(&s, ip("10.0.0.2"), "c", "e"));
        assert!(s.remove(ip("10.0.0.2")).unwrap());
        assert!(!s.remove(ip("10.0.0.2")).unwrap());
    }

    #[test]
    fn planted_symlinks_and_fifos_are_errors_naming_the_path_and_never_followed() {
        let (d, s) = store();
        let secret = d.path().join("secret");
        fs::write(&secret, "root-only\r\nx").unwrap();
        let fifo = |p: &Path| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        };
        let t0 = std::time::Instant::now();

        // A record name.
        std::os::unix::fs::symlink(&secret, s.dir().join("10.0.0.7")).unwrap();
        let e = s.scan().unwrap_err();
        assert!(
            matches!(&e, IpamError::Io(m) if m.contains("10.0.0.7") && m.contains("symbolic link")),
            "{e:?}"
        );
        fs::remove_file(s.dir().join("10.0.0.7")).unwrap();
        fifo(&s.dir().join("10.0.0.8"));
        let e = s.scan().unwrap_err();
        assert!(
            matches!(&e, IpamError::Io(m) if m.contains("10.0.0.8") && m.contains("FIFO")),
            "{e:?}"
        );
        fs::remove_file(s.dir().join("10.0.0.8")).unwrap();
        s.scan().unwrap();

        // The round-robin cursor.
        std::os::unix::fs::symlink(&secret, s.last_ip_path(0)).unwrap();
        let e = s.last_reserved_ip(0).unwrap_err();
        assert!(
            matches!(&e, IpamError::Io(m) if m.contains("last_reserved_ip.0")),
            "{e:?}"
        );
        fifo(&s.last_ip_path(1));
        let e = s.last_reserved_ip(1).unwrap_err();
        assert!(
            matches!(&e, IpamError::Io(m) if m.contains("FIFO")),
            "{e:?}"
        );
        // Writing the cursor never writes through a symlink or into a FIFO: refused.
        let e = s.set_last_reserved_ip(0, ip("10.0.0.2")).unwrap_err();
        assert!(
            matches!(&e, IpamError::Io(m) if m.contains("symbolic link")),
            "{e:?}"
        );
        let e = s.set_last_reserved_ip(1, ip("10.0.0.2")).unwrap_err();
        assert!(
            matches!(&e, IpamError::Io(m) if m.contains("FIFO")),
            "{e:?}"
        );
        assert_eq!(fs::read(&secret).unwrap(), b"root-only\r\nx");
        fs::remove_file(s.last_ip_path(0)).unwrap();
        s.set_last_reserved_ip(0, ip("10.0.0.2")).unwrap();
        assert_eq!(s.last_reserved_ip(0).unwrap(), Some(ip("10.0.0.2")));
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn oversized_files_are_skipped_like_unreadable_ones() {
        let (_d, s) = store();
        fs::write(
            s.dir().join("10.0.0.2"),
            "x".repeat(MAX_FILE_LEN as usize + 1),
        )
        .unwrap();
        fs::write(s.dir().join("10.0.0.3"), "c\r\nnet1").unwrap();
        let recs = s.scan().unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].ip, ip("10.0.0.3"));
        fs::write(s.last_ip_path(0), " ".repeat(MAX_FILE_LEN as usize + 1)).unwrap();
        assert_eq!(s.last_reserved_ip(0).unwrap(), None);
    }
}
