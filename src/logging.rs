//! A `log` backend for a short-lived CNI invocation: records go to `logFile`
//! (append) or stderr, never stdout (stdout carries the CNI result, SPEC.md "Result").
//!
//! Each record is formatted into one buffer and written with a single `write(2)` on an
//! `O_APPEND` descriptor, so records of concurrent invocations never interleave.
//! Control characters in a record (a newline in a delegate's stderr, in an unvalidated
//! GC container ID) are escaped, so one record is always one line and cannot forge
//! another.
//!
//! Rules that keep log lines out of the result channel:
//! - `logFile` is never a reason to fail a verb ([`crate::config`] does not check it):
//!   it must be an absolute path and, if it exists, a regular file other than stdout.
//!   [`init`] opens it with `O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
//!   O_NOCTTY | O_CLOEXEC` (mode 0600 when created) and checks again with `fstat`
//!   (the file may have been replaced since): a symlink, FIFO, character device
//!   (`/dev/stdout`), directory or the very file stdout writes to is refused, and the
//!   records go to stderr after one warning there.
//! - stderr is not used when it is the same open file as stdout (same `st_dev`/`st_ino`,
//!   e.g. a runtime that ran the plugin with `2>&1`) and not a terminal: the records are
//!   then dropped rather than mixed into the result.

use crate::fsutil::open_regular;
use log::{LevelFilter, Log, Metadata, Record};
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, FileStat};
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

struct Logger {
    file: Option<File>,
    prefix: String,
    /// [`stderr_is_separate`], decided once at [`init`].
    stderr_ok: bool,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Replaces every control character of `s` but none other by an escape (`\n`, `\u{1b}`),
/// so a log record stays one line.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return s.into();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
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
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let msg = r.args().to_string();
        let line = format!(
            "{}.{:03} {:5} ib-sriov[{}] {}: {}\n",
            now.as_secs(),
            now.subsec_millis(),
            r.level(),
            std::process::id(),
            one_line(&self.prefix),
            one_line(&msg)
        );
        match &self.file {
            Some(f) => {
                let _ = (&*f).write(line.as_bytes());
            }
            None if self.stderr_ok => {
                let _ = std::io::stderr().lock().write(line.as_bytes());
            }
            None => {}
        }
    }

    fn flush(&self) {}
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
/// the module docs), records go to stderr and one warning there says why.
pub fn init(level: LevelFilter, file: Option<&Path>, prefix: String) {
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
    let logger = Logger {
        file: f,
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

    #[test]
    fn one_line_escapes_control_characters_only() {
        assert_eq!(one_line("plain é"), "plain é");
        assert_eq!(one_line("a\nb\r\u{1b}[31m"), "a\\nb\\r\\u{1b}[31m");
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
