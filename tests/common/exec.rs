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
