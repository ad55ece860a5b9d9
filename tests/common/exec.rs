//! Running a program as a CNI runtime does: its stdin a pipe carrying the config, its
//! stdout and stderr captured.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `cmd` with `stdin` written to its standard input (from another thread, so a
/// child that writes before it reads cannot deadlock the test; a child that exits
/// without reading is its own business) and its stdout and stderr captured.
/// Panics when it cannot be started: `what` names it in the message.
pub fn output_with_stdin(cmd: &mut Command, stdin: &[u8], what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let mut pipe = child.stdin.take().expect("piped stdin");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&data);
    });
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
    let _ = writer.join();
    out
}

/// A finished program's outcome as text: whether it exited 0, its stdout and stderr
/// (lossy UTF-8).
#[derive(Debug)]
pub struct Outcome {
    /// Exit status 0.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<Output> for Outcome {
    fn from(o: Output) -> Outcome {
        Outcome {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Outcome {
    /// The outcome of a program that succeeded; panics otherwise, naming it (`what`)
    /// and showing both streams.
    #[track_caller]
    pub fn succeeded(self, what: &str) -> Outcome {
        assert!(
            self.ok,
            "{what} failed:\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    /// The stdout of a program that succeeded, parsed as JSON; panics when it failed
    /// ([`Outcome::succeeded`]) or its stdout is not JSON.
    #[track_caller]
    pub fn json_of(self, what: &str) -> serde_json::Value {
        let o = self.succeeded(what);
        serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e}): {:?}", o.stdout))
    }
}
