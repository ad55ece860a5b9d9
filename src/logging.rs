//! A `log` backend for a short-lived CNI invocation: records go to `logFile`
//! (append) or stderr, never stdout (stdout carries the CNI result, SPEC.md "Result").
//!
//! Each record is formatted into one buffer and written with a single `write(2)` on an
//! `O_APPEND` descriptor, so records of concurrent invocations never interleave.
//! Control characters and Unicode line separators in a record (a newline in a delegate's
//! stderr, in an unvalidated GC container ID, in a path or key a configuration chose)
//! are escaped, so one record is always one line and cannot forge another. The
//! journal's fields (`CNI_CONTAINERID`, ...) are sent as data: a value with a newline
//! goes length-prefixed (the native protocol's binary form), never as a second field.
//!
//! Rules that keep log lines out of the result channel:
//! - `logFile` is never a reason to fail a verb ([`crate::config`] does not check it):
//!   one outside the node policy is not opened at all ([`crate::policy::screen`]); else
//!   it must be an absolute path and, if it exists, a regular file other than stdout.
//!   [`init`] opens it with `O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
//!   O_NOCTTY | O_CLOEXEC` (mode 0600 when created) and checks again with `fstat`
//!   (the file may have been replaced since): a symlink, FIFO, character device
//!   (`/dev/stdout`), directory or the very file stdout writes to is refused, and the
//!   records go to stderr after one warning there.
//! - stderr is not used when it is the same open file as stdout (same `st_dev`/`st_ino`,
//!   e.g. a runtime that ran the plugin with `2>&1`) and not a terminal: the records are
//!   then dropped rather than mixed into the result.
//!
//! The systemd journal: when `logFile` is unset and journald listens on its native socket
//! ([`JOURNAL_SOCKET`], probed with an empty datagram, which journald discards), every
//! record also goes to the journal with `SYSLOG_IDENTIFIER=ib-sriov`, `PRIORITY` from the
//! level (error 3, warn 4, info 5, debug 6, trace 7) and the call's fields
//! (`CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_IFNAME`, `CNI_NETWORK`, `CNI_DEVICEID`, each
//! when known), so `journalctl -t ib-sriov` shows every call whatever runtime or
//! operator rendered the configuration. The plugin runs in the host's mount namespace
//! (a child of containerd or CRI-O), so the socket is the host's. stderr keeps every
//! record as before (runtimes and `cnitool` show it on failure, libcni copies it to
//! the runtime's own log), except when stderr already is a journal stream
//! (`$JOURNAL_STREAM` names it, `systemd.exec(5)`): then the journal copy suffices. A
//! journal that refuses a record never fails the verb: one warning on stderr, and from
//! then on stderr only.
//!
//! Timestamps of the lines (stderr, `logFile`) are RFC 3339 in UTC with milliseconds
//! ([`rfc3339_utc`]); the journal stamps its entries itself.

use crate::fsutil::open_regular;
use log::{LevelFilter, Log, Metadata, Record};
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, FileStat};
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};
use systemd_journal_logger::JournalLog;

/// journald's native-protocol socket (`systemd-journald.socket`).
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// `SYSLOG_IDENTIFIER` of the journal entries (`journalctl -t ib-sriov`).
pub const SYSLOG_IDENTIFIER: &str = "ib-sriov";

struct Logger {
    file: Option<File>,
    /// The journal, when `logFile` is unset and journald accepted the probe.
    journal: Option<JournalLog>,
    /// Set when the journal refused a record: stderr only from then on.
    journal_failed: AtomicBool,
    /// stderr is a journal stream ([`systemd_journal_logger::connected_to_journal`]):
    /// not written while the journal takes the records.
    stderr_is_journal: bool,
    prefix: String,
    /// [`stderr_is_separate`], decided once at [`init`].
    stderr_ok: bool,
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    (yoe + era * 400 + i64::from(m <= 2), m as u32, d as u32)
}

/// `t` in RFC 3339, UTC, with milliseconds: `2026-11-25T19:32:43.123Z`. An instant
/// before 1970 (a clock set wrong) is written as the epoch.
pub fn rfc3339_utc(t: SystemTime) -> String {
    let mut out = String::with_capacity(24);
    push_rfc3339_utc(&mut out, t);
    out
}

/// [`rfc3339_utc`] appended to `out`, digit by digit: a log line is built per record,
/// and the formatting machinery (`format!` with widths) cost more than the rest of it.
fn push_rfc3339_utc(out: &mut String, t: SystemTime) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, mo, day) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let fields: [(u64, usize, &str); 7] = [
        (y.max(0) as u64, 4, "-"),
        (u64::from(mo), 2, "-"),
        (u64::from(day), 2, "T"),
        (s / 3600, 2, ":"),
        (s / 60 % 60, 2, ":"),
        (s % 60, 2, "."),
        (u64::from(d.subsec_millis()), 3, "Z"),
    ];
    for (n, width, sep) in fields {
        push_digits(out, n, width);
        out.push_str(sep);
    }
}

/// `n` in decimal, zero-padded to `width` digits (more when `n` needs them), as
/// `{n:0width$}` writes it.
fn push_digits(out: &mut String, n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    let mut m = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    let start = i.min(buf.len().saturating_sub(width));
    out.push_str(std::str::from_utf8(&buf[start..]).unwrap_or_default());
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Whether `c` is escaped in a record: a control character (C0, DEL, C1: newlines,
/// carriage returns, terminal escapes, NEL) or a Unicode line or paragraph separator
/// (U+2028, U+2029), anything a reader of the file or the journal could take for the
/// start of another record.
fn escaped(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Replaces every character [`escaped`] names, and none other, by an escape (`\n`,
/// `\u{1b}`, `\u{2028}`), so a log record stays one line whatever strings a
/// configuration, a pod or a runtime chose (network and interface names, container IDs,
/// `CNI_ARGS`, paths, a delegate's stderr).
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(escaped) {
        return s.into();
    }
    s.chars()
        .map(|c| {
            if escaped(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

fn same_file(a: &FileStat, b: &FileStat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// True when writing to stderr cannot reach the result channel: stderr is not the same
/// open file as stdout, or it is a terminal (a run by hand).
pub fn stderr_is_separate() -> bool {
    let err = std::io::stderr();
    if err.is_terminal() {
        return true;
    }
    match (fstat(std::io::stdout().as_fd()), fstat(err.as_fd())) {
        (Ok(o), Ok(e)) => !same_file(&o, &e),
        _ => true,
    }
}

/// Writes one diagnostic line (a newline is added) to stderr unless stderr is the result
/// channel ([`stderr_is_separate`]); for what happens before or instead of the logger.
pub fn to_stderr(line: &str) {
    if stderr_is_separate() {
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{}\n", one_line(line)).as_bytes());
    }
}

/// Whether [`init`] has installed the logger of this process.
pub fn installed() -> bool {
    LOGGER.get().is_some()
}

/// Writes `line` (one line, no newline) through the installed logger at level error
/// (to `logFile` or stderr), or to stderr under [`to_stderr`]'s rule when no logger is
/// installed yet. For the panic hook: a panic message must never reach stdout.
pub fn emergency(line: &str) {
    if LOGGER.get().is_some() && log::max_level() >= LevelFilter::Error {
        log::error!("{line}");
    } else {
        to_stderr(&format!("ib-sriov: {line}"));
    }
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let msg = r.args().to_string();
        let (prefix, msg) = (one_line(&self.prefix), one_line(&msg));
        if let Some(f) = &self.file {
            let _ = (&*f).write(self.line(r, &prefix, &msg).as_bytes());
            return;
        }
        let mut journaled = false;
        if let Some(j) = &self.journal {
            if !self.journal_failed.load(Ordering::Relaxed) {
                let sent = j.journal_send(
                    &Record::builder()
                        .args(format_args!("{prefix}: {msg}"))
                        .level(r.level())
                        .target(r.target())
                        .module_path(r.module_path())
                        .file(r.file())
                        .line(r.line())
                        .build(),
                );
                match sent {
                    Ok(()) => journaled = true,
                    Err(e) => {
                        if !self.journal_failed.swap(true, Ordering::Relaxed) {
                            to_stderr(&format!(
                                "ib-sriov: warning: cannot write to the journal ({JOURNAL_SOCKET}): {e}; logging to stderr only"
                            ));
                        }
                    }
                }
            }
        }
        if self.stderr_ok && !(journaled && self.stderr_is_journal) {
            let _ = std::io::stderr()
                .lock()
                .write(self.line(r, &prefix, &msg).as_bytes());
        }
    }

    fn flush(&self) {}
}

impl Logger {
    /// One record as a line of stderr or `logFile` (with its newline).
    fn line(&self, r: &Record, prefix: &str, msg: &str) -> String {
        // "<RFC 3339> <level, padded to 5> ib-sriov[<pid>] <prefix>: <msg>\n", built in
        // one buffer ([`push_rfc3339_utc`] says why not with `format!`).
        let mut out = String::with_capacity(48 + prefix.len() + msg.len());
        push_rfc3339_utc(&mut out, SystemTime::now());
        out.push(' ');
        let level = r.level().as_str();
        out.push_str(level);
        out.extend(std::iter::repeat_n(' ', 5usize.saturating_sub(level.len())));
        out.push_str(" ib-sriov[");
        push_digits(&mut out, u64::from(crate::fsutil::pid()), 1);
        out.push_str("] ");
        out.push_str(prefix);
        out.push_str(": ");
        out.push_str(msg);
        out.push('\n');
        out
    }
}

/// The journal when journald listens on [`JOURNAL_SOCKET`] (it accepted an empty
/// datagram), with the identifier and `fields` set on every entry; else `None`, after
/// a warning on stderr when the socket exists but refused the probe.
fn open_journal(fields: &[(&str, &str)]) -> Option<JournalLog> {
    if std::fs::symlink_metadata(JOURNAL_SOCKET).is_err() {
        return None;
    }
    match JournalLog::empty() {
        Ok(j) => Some(
            j.with_syslog_identifier(SYSLOG_IDENTIFIER.into())
                .with_extra_fields(fields.iter().filter(|(_, v)| !v.is_empty()).copied()),
        ),
        Err(e) => {
            to_stderr(&format!(
                "ib-sriov: warning: cannot write to the journal ({JOURNAL_SOCKET}): {e}; logging to stderr only"
            ));
            None
        }
    }
}

/// Opens `logFile` for appending as the module docs describe; `Err` says why not
/// (`"is not an absolute path"`, `"is a directory, not a regular file"`, ...).
fn open_log_file(path: &Path) -> Result<File, String> {
    if !path.is_absolute() {
        return Err(
            "is not an absolute path (a plugin's working directory is the runtime's)".into(),
        );
    }
    let f = open_regular(
        path,
        OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
        0o600,
    )
    .map_err(|e| e.to_string())?;
    if let (Ok(st), Ok(out)) = (fstat(f.as_fd()), fstat(std::io::stdout().as_fd())) {
        if same_file(&st, &out) {
            return Err("is the plugin's stdout (the CNI result channel)".into());
        }
    }
    Ok(f)
}

/// Installs the logger once per process. `prefix` names the invocation
/// (e.g. `ADD <containerID>/<ifname>`). If `file` cannot be opened or is refused (see
/// the module docs), records go to stderr and one warning there says why. Without
/// `file`, records also go to the journal when journald runs (see the module docs),
/// each with `fields` (`("CNI_COMMAND", "ADD")`, ...; empty values are left out).
pub fn init(level: LevelFilter, file: Option<&Path>, prefix: String, fields: &[(&str, &str)]) {
    let f = file.and_then(|p| match open_log_file(p) {
        Ok(f) => Some(f),
        Err(e) => {
            to_stderr(&format!(
                "ib-sriov: warning: cannot use logFile {}: {e}; logging to stderr",
                p.display()
            ));
            None
        }
    });
    let journal = match (&f, file) {
        (None, None) => open_journal(fields),
        _ => None,
    };
    let logger = Logger {
        file: f,
        stderr_is_journal: journal.is_some() && systemd_journal_logger::connected_to_journal(),
        journal,
        journal_failed: AtomicBool::new(false),
        prefix,
        stderr_ok: stderr_is_separate(),
    };
    if LOGGER.set(logger).is_ok() {
        if let Some(l) = LOGGER.get() {
            let _ = log::set_logger(l);
        }
    }
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `push_digits` writes what `{n:0width$}` writes, and a line has the layout the
    /// module docs give (level padded to 5, pid in brackets).
    #[test]
    fn lines_are_built_as_format_would() {
        for n in [0u64, 7, 9, 10, 99, 100, 999, 1000, 2026, 12_345, u64::MAX] {
            for width in 1..=5 {
                let mut s = String::new();
                push_digits(&mut s, n, width);
                assert_eq!(s, format!("{n:0width$}"));
            }
        }
        let logger = Logger {
            file: None,
            journal: None,
            journal_failed: AtomicBool::new(false),
            stderr_is_journal: false,
            prefix: String::new(),
            stderr_ok: false,
        };
        for level in [log::Level::Info, log::Level::Error, log::Level::Debug] {
            let r = Record::builder()
                .level(level)
                .args(format_args!("m"))
                .build();
            let line = logger.line(&r, "ADD c/net1", "moved é");
            let (stamp, rest) = line.split_at(24);
            assert_eq!(stamp.len(), "2026-11-25T19:32:43.123Z".len());
            assert!(
                stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
                "{line}"
            );
            assert_eq!(
                rest,
                format!(
                    " {level:5} ib-sriov[{}] ADD c/net1: moved é\n",
                    std::process::id()
                )
            );
        }
    }

    #[test]
    fn rfc3339_utc_at_known_instants() {
        use std::time::Duration;
        let at = |secs: u64, ms: u64| {
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_795_635_163, 123), "2026-11-25T19:32:43.123Z");
        // Leap days: an ordinary leap year, a 400-year one; 2100 is not a leap year.
        assert_eq!(at(1_709_251_199, 999), "2024-02-29T23:59:59.999Z");
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(4_107_542_400 - 86_400, 7), "2100-02-28T00:00:00.007Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
        assert_eq!(at(946_684_799, 1), "1999-12-31T23:59:59.001Z");
        assert_eq!(at(2_147_483_648, 0), "2038-01-19T03:14:08.000Z");
        // Sub-millisecond digits are truncated, not rounded; before 1970 is the epoch.
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_micros(1_999)),
            "1970-01-01T00:00:00.001Z"
        );
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000Z"
        );
    }

    /// `civil_from_days` agrees with counting days one by one from 1970-01-01 for
    /// 400 years (a whole Gregorian cycle and then some).
    #[test]
    fn civil_from_days_matches_day_by_day_counting() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let (mut y, mut m, mut d) = (1970i64, 1u32, 1u32);
        for days in 0..146_097 + 366 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            d += 1;
            if d > len(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    #[test]
    fn one_line_escapes_control_characters_only() {
        assert_eq!(one_line("plain é"), "plain é");
        assert_eq!(one_line("a\nb\r\u{1b}[31m"), "a\\nb\\r\\u{1b}[31m");
        assert_eq!(
            one_line("a\u{2028}b\u{2029}c\u{85}d"),
            "a\\u{2028}b\\u{2029}c\\u{85}d"
        );
    }

    #[test]
    fn log_file_open_refuses_what_is_not_a_regular_file() {
        let d = tempfile::tempdir().unwrap();
        let reg = d.path().join("ok.log");
        std::fs::write(&reg, "").unwrap();
        open_log_file(&reg).unwrap();
        assert!(open_log_file(Path::new("rel.log"))
            .unwrap_err()
            .contains("absolute"));
        let link = d.path().join("link.log");
        std::os::unix::fs::symlink(&reg, &link).unwrap();
        let fifo = d.path().join("fifo.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (p, kind) in [
            (link.as_path(), "symbolic link"),
            (fifo.as_path(), "FIFO"),
            (d.path(), "directory"),
            (Path::new("/dev/null"), "character device"),
        ] {
            let e = open_log_file(p).unwrap_err();
            assert!(
                e.contains(kind) || e.contains("symbolic link"),
                "{p:?}: {e}"
            );
        }
        // A dangling symlink: its target is not created.
        let dangling = d.path().join("dangling.log");
        std::os::unix::fs::symlink(d.path().join("target"), &dangling).unwrap();
        assert!(open_log_file(&dangling).is_err());
        assert!(!d.path().join("target").exists());
        // A regular file is opened for appending, created 0600.
        let new = d.path().join("new.log");
        let mut f = open_log_file(&new).unwrap();
        f.write_all(b"x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&new).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o600, 0, "{mode:o}");
    }
}
