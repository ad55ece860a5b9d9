//! The plugin's own call metrics: how many CNI calls of each verb ended with each result
//! code, and how long they took, for the exporter (`ib-sriovctl exporter`, src/ib-sriovctl/exporter).
//!
//! Mechanism: one fixed-size file per stateDir, [`FILE_NAME`] in its `locks` directory
//! (`<stateDir>/locks/calls.metrics`, beside the lock files and the Go cache index, where
//! nothing takes it for a journal or a Go cache file; [`FILE_SIZE`] bytes), a table of 64-bit counters that every call adds to in place with
//! atomic fetch-and-add on a shared memory mapping of the file (`mmap(MAP_SHARED)`):
//! - bounded: the file never grows (a counter wraps after 2^64 calls);
//! - lock-free: no lock is taken, so a call never waits on another call or on the
//!   exporter; concurrent calls add to the same words atomically (the mapping of one
//!   tmpfs or page-cache page is shared by every process that maps it);
//! - never in the way: recording runs after the result has been printed, and every
//!   failure (a full disk, a foreign file) is ignored: the call's outcome is already
//!   decided and sent ([`record`] returns nothing); a stateDir that does not exist is
//!   not created for it (a call refused before it made anything leaves nothing);
//! - reset on reboot: the default stateDir `/run/ib-sriov` is a tmpfs on systemd nodes,
//!   and the file's header holds the boot ID (`/proc/sys/kernel/random/boot_id`): a file
//!   of another boot (an on-disk stateDir) is replaced by a fresh one at the first call,
//!   and the exporter ignores it until then.
//!
//! Cost on the call path: `open`, `fstat`, `mmap`, a few atomic adds, `munmap`, `close`
//! (plus `ftruncate` once when the file is created); no `write(2)`, no fsync.
//!
//! Layout (native-endian `u64` words; little-endian on x86-64 and arm64):
//! - word 0: [`MAGIC`] (`IBSCM001` in ASCII, little-endian);
//! - words 1..=5: the boot ID, 36 ASCII bytes, zero-padded to 40;
//! - word 6: attachments GC removed ([`record_gc_removed`]); word 7: set by the call
//!   that stamps a fresh file (boot ID first, then the magic);
//! - from word 8, one block of [`BLOCK_WORDS`] words per verb of [`VERBS`], in order:
//!   [`CODE_SLOTS`] counters by result code ([`code_slot`]), then [`BUCKETS_LE`]`.len()`
//!   latency bucket counters (not cumulative: the call falls in the first bucket whose
//!   upper bound it does not exceed), then the sum of latencies in microseconds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The file's name in `<stateDir>/locks`.
pub const FILE_NAME: &str = "calls.metrics";

/// The counters file of `state_dir`: `<stateDir>/locks/calls.metrics`.
pub fn file_in(state_dir: &Path) -> PathBuf {
    state_dir.join("locks").join(FILE_NAME)
}
/// The file's size in bytes: one page.
pub const FILE_SIZE: usize = 4096;
/// Word 0 of a valid file: `IBSCM001` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"IBSCM001");
/// The CNI verbs counted, in block order (CNI SPEC.md "Parameters": `CNI_COMMAND`).
pub const VERBS: [&str; 6] = ["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"];
/// Result codes with a slot of their own ([`code_slot`]): 0 is success, the others are
/// CNI SPEC.md "Error" well-known codes (1-7, 11, 50, 51) and this plugin's own
/// (100-104, [`crate::cni::code`]). Any other code counts in the last slot, exported as
/// `other`.
pub const CODES: [u32; 19] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 50, 51, 100, 101, 102, 103, 104,
];
/// Code slots per verb: [`CODES`] and `other`.
pub const CODE_SLOTS: usize = CODES.len() + 1;
/// Upper bounds of the latency buckets in seconds (the last is +Inf).
pub const BUCKETS_LE: [f64; 16] = [
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    f64::INFINITY,
];
/// Words per verb block.
pub const BLOCK_WORDS: usize = 48;
const HEADER_WORDS: usize = 8;
const GC_REMOVED_WORD: usize = 6;
/// Set (0 to 1) by the call that stamps a fresh file.
const CLAIM_WORD: usize = 7;
/// The header words holding the boot ID.
fn boot_idx() -> std::ops::Range<usize> {
    1..6
}
const _: () = assert!(CODE_SLOTS + BUCKETS_LE.len() < BLOCK_WORDS);
const _: () = assert!((HEADER_WORDS + VERBS.len() * BLOCK_WORDS) * 8 <= FILE_SIZE);

/// The slot of result code `code` in a verb block: its index in [`CODES`], else the
/// `other` slot ([`CODES`]`.len()`).
pub fn code_slot(code: u32) -> usize {
    CODES.iter().position(|c| *c == code).unwrap_or(CODES.len())
}

/// The latency bucket of a call that took `d`.
pub fn bucket(d: Duration) -> usize {
    let s = d.as_secs_f64();
    BUCKETS_LE
        .iter()
        .position(|le| s <= *le)
        .unwrap_or(BUCKETS_LE.len() - 1)
}

/// The stateDir whose file this call records into: set once the configuration is
/// parsed ([`set_state_dir`]), else the default stateDir.
static STATE_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Names the stateDir of this call's configuration (the first call wins).
pub fn set_state_dir(dir: &Path) {
    let _ = STATE_DIR.set(dir.to_path_buf());
}

/// The file this call records into.
fn file_path() -> PathBuf {
    match STATE_DIR.get() {
        Some(d) => file_in(d),
        None => file_in(Path::new(crate::config::DEFAULT_STATE_DIR)),
    }
}

/// The boot ID as the header stores it (36 bytes, zero-padded to 40).
fn boot_words() -> [u64; 5] {
    let mut b = [0u8; 40];
    if let Some(id) = crate::boot::id() {
        let n = id.len().min(40);
        b[..n].copy_from_slice(&id.as_bytes()[..n]);
    }
    let mut w = [0u64; 5];
    for (i, c) in b.chunks_exact(8).enumerate() {
        w[i] = u64::from_ne_bytes(c.try_into().expect("8 bytes"));
    }
    w
}

/// A shared mapping of a counters file.
struct Map {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
}

impl Map {
    /// Maps the first [`FILE_SIZE`] bytes of `f` (which must be at least that long).
    fn new(f: &std::fs::File, writable: bool) -> Option<Map> {
        use nix::sys::mman::{mmap, MapFlags, ProtFlags};
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: a fresh mapping of a file descriptor we hold; the memory is only
        // accessed through atomics below, which is sound for memory other processes
        // change concurrently.
        let ptr = unsafe {
            mmap(
                None,
                std::num::NonZeroUsize::new(FILE_SIZE)?,
                prot,
                MapFlags::MAP_SHARED,
                f,
                0,
            )
        }
        .ok()?;
        Some(Map { ptr })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < FILE_SIZE / 8);
        // SAFETY: in bounds (checked), 8-byte aligned (a page-aligned mapping), valid
        // while `self` lives.
        unsafe { &*(self.ptr.as_ptr() as *const AtomicU64).add(i) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, FILE_SIZE) };
    }
}

/// Records one call of `verb` that ended with `code` (0: success) after `took`, into
/// the stateDir's counters file. Never fails and never blocks: any problem leaves the
/// call unrecorded. Verbs outside [`VERBS`] are not recorded.
pub fn record(verb: &str, code: u32, took: Duration) {
    let Some(v) = VERBS.iter().position(|x| *x == verb) else {
        return;
    };
    let base = HEADER_WORDS + v * BLOCK_WORDS;
    let us = took.as_micros().min(u64::MAX as u128) as u64;
    update(
        &file_path(),
        &[
            (base + code_slot(code), 1),
            (base + CODE_SLOTS + bucket(took), 1),
            (base + CODE_SLOTS + BUCKETS_LE.len(), us),
        ],
    );
}

/// Records that a GC removed `n` attachments (their journals undone and deleted).
pub fn record_gc_removed(n: u64) {
    if n > 0 {
        update(&file_path(), &[(GC_REMOVED_WORD, n)]);
    }
}

/// Adds each (word, value) of `adds` to the file at `path`, creating it (and its
/// `locks` directory) when missing, but only in a stateDir that exists. Errors are
/// ignored.
fn update(path: &Path, adds: &[(usize, u64)]) {
    use nix::fcntl::OFlag;
    let open = || crate::fsutil::open_regular(path, OFlag::O_RDWR | OFlag::O_CREAT, 0o644);
    let f = match open() {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let Some(locks) = path.parent() else { return };
            if !locks.parent().is_some_and(Path::is_dir) {
                return;
            }
            match std::fs::create_dir(locks) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(_) => return,
            }
            match open() {
                Ok(f) => f,
                Err(_) => return,
            }
        }
        Err(_) => return,
    };
    let Ok(md) = f.metadata() else { return };
    if md.len() < FILE_SIZE as u64 && f.set_len(FILE_SIZE as u64).is_err() {
        return;
    }
    let Some(m) = Map::new(&f, true) else { return };
    let boot = boot_words();
    match m.word(0).load(Ordering::Acquire) {
        // A fresh file: the call that claims it (word 7) stamps it with the boot, then
        // sets the magic, so a file with the magic always has its whole stamp. Calls
        // that find it being stamped count in it meanwhile.
        0 => {
            if m.word(CLAIM_WORD)
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                for (i, w) in boot_idx().zip(boot) {
                    m.word(i).store(w, Ordering::Relaxed);
                }
                m.word(0).store(MAGIC, Ordering::Release);
            }
        }
        MAGIC => {
            let ours = boot_idx()
                .zip(boot)
                .all(|(i, w)| m.word(i).load(Ordering::Relaxed) == w);
            if !ours {
                drop(m);
                replace_stale(path, &boot, adds);
                return;
            }
        }
        // Not ours: leave it alone.
        _ => return,
    }
    for (i, n) in adds {
        m.word(*i).fetch_add(*n, Ordering::Relaxed);
    }
}

/// Replaces a counters file of another boot with a fresh one holding `adds` (written to a
/// temporary file and renamed over it, so a reader sees the old file or the new one).
fn replace_stale(path: &Path, boot: &[u64; 5], adds: &[(usize, u64)]) {
    let mut words = vec![0u64; FILE_SIZE / 8];
    words[0] = MAGIC;
    words[CLAIM_WORD] = 1;
    for (i, w) in boot_idx().zip(boot.iter()) {
        words[i] = *w;
    }
    for (i, n) in adds {
        words[*i] = words[*i].wrapping_add(*n);
    }
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let _ = crate::fsutil::replace_nosync(path, &bytes);
}

/// One verb's counters as read from a file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerbCounts {
    /// Calls by result code: (code, calls); code `None` is `other`. Only codes with
    /// calls are listed.
    pub by_code: Vec<(Option<u32>, u64)>,
    /// Calls per latency bucket of [`BUCKETS_LE`] (not cumulative).
    pub buckets: [u64; BUCKETS_LE.len()],
    /// Sum of latencies, in microseconds.
    pub sum_us: u64,
}

impl VerbCounts {
    /// Total calls.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// The counters of one file (or the sum of several).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// By verb, in the order of [`VERBS`].
    pub verbs: [VerbCounts; VERBS.len()],
    /// Attachments GC removed.
    pub gc_removed: u64,
}

impl Counts {
    /// Adds `o` to `self`.
    pub fn add(&mut self, o: &Counts) {
        self.gc_removed += o.gc_removed;
        for (a, b) in self.verbs.iter_mut().zip(&o.verbs) {
            for (code, n) in &b.by_code {
                match a.by_code.iter_mut().find(|(c, _)| c == code) {
                    Some((_, m)) => *m += n,
                    None => a.by_code.push((*code, *n)),
                }
            }
            a.by_code.sort();
            for (x, y) in a.buckets.iter_mut().zip(&b.buckets) {
                *x += y;
            }
            a.sum_us += b.sum_us;
        }
    }
}

/// Reads the counters file of `state_dir` ([`file_in`]), read-only (a shared read-only mapping; no
/// lock). `Ok(None)`: there is none, or it is not a counters file of this boot.
///
/// Errors: the file cannot be opened or mapped for another reason.
pub fn read(state_dir: &Path) -> std::io::Result<Option<Counts>> {
    use nix::fcntl::OFlag;
    let path = file_in(state_dir);
    let f = match crate::fsutil::open_regular(&path, OFlag::O_RDONLY, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if f.metadata()?.len() < FILE_SIZE as u64 {
        return Ok(None);
    }
    let m = Map::new(&f, false).ok_or_else(|| std::io::Error::other("mmap failed"))?;
    if m.word(0).load(Ordering::Acquire) != MAGIC
        || !boot_idx()
            .zip(boot_words())
            .all(|(i, w)| m.word(i).load(Ordering::Acquire) == w)
    {
        return Ok(None);
    }
    let mut c = Counts {
        gc_removed: m.word(GC_REMOVED_WORD).load(Ordering::Relaxed),
        ..Counts::default()
    };
    for (v, vc) in c.verbs.iter_mut().enumerate() {
        let base = HEADER_WORDS + v * BLOCK_WORDS;
        for s in 0..CODE_SLOTS {
            let n = m.word(base + s).load(Ordering::Relaxed);
            if n > 0 {
                vc.by_code.push((CODES.get(s).copied(), n));
            }
        }
        for (b, x) in vc.buckets.iter_mut().enumerate() {
            *x = m.word(base + CODE_SLOTS + b).load(Ordering::Relaxed);
        }
        vc.sum_us = m
            .word(base + CODE_SLOTS + BUCKETS_LE.len())
            .load(Ordering::Relaxed);
    }
    Ok(Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_buckets_have_their_slots() {
        assert_eq!(code_slot(0), 0);
        assert_eq!(code_slot(7), 7);
        assert_eq!(code_slot(11), 11);
        assert_eq!(code_slot(104), CODES.len() - 1);
        assert_eq!(code_slot(999), CODES.len());
        assert_eq!(bucket(Duration::from_micros(500)), 0);
        assert_eq!(bucket(Duration::from_millis(1)), 0);
        assert_eq!(bucket(Duration::from_micros(1001)), 1);
        assert_eq!(bucket(Duration::from_secs(3600)), BUCKETS_LE.len() - 1);
    }

    #[test]
    fn concurrent_records_all_count() {
        let d = tempfile::tempdir().unwrap();
        let p = file_in(d.path());
        std::thread::scope(|s| {
            for t in 0..4 {
                let p = &p;
                s.spawn(move || {
                    for i in 0..250 {
                        let code = if (t + i) % 10 == 0 { 7 } else { 0 };
                        update(
                            p,
                            &[
                                (HEADER_WORDS + code_slot(code), 1),
                                (
                                    HEADER_WORDS + CODE_SLOTS + bucket(Duration::from_millis(3)),
                                    1,
                                ),
                                (HEADER_WORDS + CODE_SLOTS + BUCKETS_LE.len(), 3000),
                            ],
                        );
                    }
                });
            }
        });
        assert_eq!(std::fs::metadata(&p).unwrap().len(), FILE_SIZE as u64);
        let c = read(d.path()).unwrap().expect("a file of this boot");
        let add = &c.verbs[0];
        assert_eq!(add.count(), 1000);
        assert_eq!(add.by_code, vec![(Some(0), 900), (Some(7), 100)]);
        assert_eq!(add.buckets[2], 1000);
        assert_eq!(add.sum_us, 3_000_000);
        assert_eq!(c.verbs[1], VerbCounts::default());
    }

    #[test]
    fn a_file_of_another_boot_is_ignored_then_replaced() {
        let d = tempfile::tempdir().unwrap();
        let p = file_in(d.path());
        std::fs::create_dir(p.parent().unwrap()).unwrap();
        let mut words = vec![0u64; FILE_SIZE / 8];
        words[0] = MAGIC;
        words[1] = u64::from_ne_bytes(*b"00000000");
        words[HEADER_WORDS] = 42;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        std::fs::write(&p, bytes).unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        update(&p, &[(HEADER_WORDS + code_slot(5), 1)]);
        let c = read(d.path()).unwrap().expect("replaced");
        assert_eq!(c.verbs[0].by_code, vec![(Some(5), 1)]);
    }

    #[test]
    fn a_foreign_file_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let p = file_in(d.path());
        std::fs::create_dir(p.parent().unwrap()).unwrap();
        std::fs::write(&p, vec![b'x'; FILE_SIZE]).unwrap();
        update(&p, &[(HEADER_WORDS, 1)]);
        assert_eq!(std::fs::read(&p).unwrap(), vec![b'x'; FILE_SIZE]);
        assert_eq!(read(d.path()).unwrap(), None);
    }

    #[test]
    fn a_missing_state_dir_is_not_created() {
        let d = tempfile::tempdir().unwrap();
        let gone = d.path().join("state");
        update(&file_in(&gone), &[(HEADER_WORDS, 1)]);
        assert!(!gone.exists());
    }
}
