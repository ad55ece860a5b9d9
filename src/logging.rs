//! A `log` backend for a short-lived CNI invocation: records go to `logFile`
//! (append) or stderr, never stdout (stdout carries the CNI result).
//!
//! Each record is formatted into one buffer and written with a single `write(2)` on an
//! `O_APPEND` descriptor, so records of concurrent invocations never interleave.

use log::{LevelFilter, Log, Metadata, Record};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

struct Logger {
    file: Option<File>,
    prefix: String,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

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
        let line = format!(
            "{}.{:03} {:5} ib-sriov[{}] {}: {}\n",
            now.as_secs(),
            now.subsec_millis(),
            r.level(),
            std::process::id(),
            self.prefix,
            r.args()
        );
        match &self.file {
            Some(f) => {
                let _ = (&*f).write(line.as_bytes());
            }
            None => {
                let _ = std::io::stderr().lock().write(line.as_bytes());
            }
        }
    }

    fn flush(&self) {}
}

/// Installs the logger once per process. `prefix` names the invocation
/// (e.g. `ADD <containerID>/<ifname>`). If `file` cannot be opened, logs go to stderr
/// and the failure is reported there.
pub fn init(level: LevelFilter, file: Option<&Path>, prefix: String) {
    let f = file.and_then(
        |p| match OpenOptions::new().create(true).append(true).open(p) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!(
                    "ib-sriov: cannot open logFile {}: {e}; logging to stderr",
                    p.display()
                );
                None
            }
        },
    );
    if LOGGER.set(Logger { file: f, prefix }).is_ok() {
        if let Some(l) = LOGGER.get() {
            let _ = log::set_logger(l);
        }
    }
    log::set_max_level(level);
}
