//! Process tests of the `thin_entrypoint` binary: the upstream contract (flags, the atomic
//! copy into the CNI bin directory, the VERSION check, sleeping until SIGTERM/SIGINT)
//! and its failures (missing, read-only, unwritable or full directory, missing source,
//! a source that does not answer VERSION).
//!
//! The binaries are the ones cargo built, or `THIN_ENTRYPOINT_BIN` and `IB_SRIOV_BIN`
//! when set (to test binaries taken out of an image). The tests that mount (read-only,
//! full disk) or change uid run as root, as CI does, and fail when they cannot set up;
//! their mounts live in a child's own mount namespace (`unshare -m`), so none reaches
//! the host.

#[path = "common/reaped.rs"]
mod reaped;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use reaped::Reaped;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn bin_from(var: &str, built: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(built), PathBuf::from)
}

fn entrypoint() -> PathBuf {
    bin_from("THIN_ENTRYPOINT_BIN", env!("CARGO_BIN_EXE_thin_entrypoint"))
}

fn plugin() -> PathBuf {
    bin_from("IB_SRIOV_BIN", env!("CARGO_BIN_EXE_ib-sriov"))
}

/// A temp dir that others may traverse (for the run as nobody).
fn tempdir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("thin-entrypoint-test")
        .tempdir()
        .unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Makes `<tmp>/bin`, the CNI bin directory of a test.
fn bin_dir(tmp: &Path) -> PathBuf {
    let dir = tmp.join("bin");
    fs::create_dir(&dir).unwrap();
    dir
}

fn entrypoint_cmd(dir: &Path, src: &Path) -> Command {
    let mut cmd = Command::new(entrypoint());
    cmd.arg("--cni-bin-dir")
        .arg(dir)
        .arg("--ib-sriov-cni-bin-file")
        .arg(src)
        .stdin(Stdio::null());
    cmd
}

/// Runs the entrypoint with `--no-sleep` and returns its output.
fn install(dir: &Path, src: &Path) -> Output {
    entrypoint_cmd(dir, src).arg("--no-sleep").output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Asserts the entrypoint failed with status 1 and stderr mentions all of `want`.
fn assert_failed(out: &Output, want: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    for w in want {
        assert!(err.contains(w), "stderr lacks {w:?}: {err}");
    }
}

/// Runs `bin` as a CNI runtime would for VERSION; returns its `supportedVersions`.
fn version_of(bin: &Path) -> Vec<String> {
    let mut child = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"cniVersion":"1.0.0"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{bin:?}: {:?}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["supportedVersions"]
        .as_array()
        .unwrap_or_else(|| panic!("no supportedVersions: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a run in a mount namespace left in the directory, seen from inside it.
struct NsRun {
    status: ExitStatus,
    stderr: String,
    names: Vec<String>,
    dest: String,
}

/// Runs the entrypoint on `dir` (with `--no-sleep`, source `src`) in a new mount
/// namespace with private propagation, after the shell code `setup` (`$D` is `dir`).
/// Reports what is left in `dir` as seen inside the namespace. Panics when `setup`
/// fails: these tests need root and must not pass without running.
fn run_in_mount_ns(dir: &Path, setup: &str, src: &Path) -> NsRun {
    let script = format!(
        r#"D=$1; shift
{{ {setup} ; }} || {{ echo "test setup failed" >&2; exit 99; }}
"$@"; rc=$?
ls -A "$D"; echo ---; cat "$D/ib-sriov" 2>/dev/null
exit $rc"#
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
        .arg(dir)
        .arg(entrypoint())
        .arg("--cni-bin-dir")
        .arg(dir)
        .arg("--ib-sriov-cni-bin-file")
        .arg(src)
        .arg("--no-sleep")
        .stdin(Stdio::null())
        .output()
        .expect("cannot run unshare (util-linux)");
    let err = stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(99),
        "cannot set up the mount (these tests need root): {err}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (listing, dest) = stdout
        .split_once("---\n")
        .unwrap_or_else(|| panic!("no listing: {stdout:?}, stderr: {err}"));
    NsRun {
        status: out.status,
        stderr: err,
        names: listing.lines().map(str::to_string).collect(),
        dest: dest.to_string(),
    }
}

#[test]
fn help_exits_0_and_an_unknown_flag_exits_2() {
    let out = Command::new(entrypoint()).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let usage = String::from_utf8_lossy(&out.stdout);
    for flag in ["-cni-bin-dir", "-ib-sriov-cni-bin-file", "-no-sleep"] {
        assert!(usage.contains(flag), "{usage}");
    }
    let out = Command::new(entrypoint()).args(["-h"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let out = Command::new(entrypoint())
        .args(["--no-sleep", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("flag provided but not defined: -bogus"),
        "{err}"
    );
    assert!(err.contains("Usage:"), "{err}");
    let out = Command::new(entrypoint())
        .arg("--cni-bin-dir")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn copies_byte_identical_with_mode_0755_and_the_copy_answers_version() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    // Go flag syntax: one dash and `=` work as well as two dashes and a separate value.
    let mut arg = std::ffi::OsString::from("-cni-bin-dir=");
    arg.push(&dir);
    let out = Command::new(entrypoint())
        .arg(arg)
        .arg("-ib-sriov-cni-bin-file")
        .arg(plugin())
        .arg("-no-sleep")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "logs go to stderr");
    let dst = dir.join("ib-sriov");
    assert_eq!(fs::read(&dst).unwrap(), fs::read(plugin()).unwrap());
    assert_eq!(fs::metadata(&dst).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(names(&dir), ["ib-sriov", "ib-sriov-ipam"]);
    assert!(version_of(&dst).contains(&"1.0.0".to_string()));
    // The IPAM plugin: a second copy, not a link, that runs as the IPAM plugin under
    // its name.
    let ipam = dir.join("ib-sriov-ipam");
    assert_eq!(fs::read(&ipam).unwrap(), fs::read(plugin()).unwrap());
    let (m, d) = (
        fs::symlink_metadata(&ipam).unwrap(),
        fs::metadata(&dst).unwrap(),
    );
    assert!(m.file_type().is_file(), "a regular file, not a symlink");
    assert_eq!(m.mode() & 0o7777, 0o755);
    assert_eq!(m.nlink(), 1, "not a hard link");
    assert_ne!(m.ino(), d.ino());
    assert!(version_of(&ipam).contains(&"1.1.0".to_string()));
    let v = Command::new(&ipam).arg("--version").output().unwrap();
    assert!(
        String::from_utf8_lossy(&v.stdout).starts_with("ib-sriov-ipam version:"),
        "{v:?}"
    );
    let err = stderr(&out);
    assert!(
        err.contains("Successfully copied IB SR-IOV CNI binary"),
        "{err}"
    );
    assert!(
        err.contains(&format!("Successfully copied its IPAM plugin to {ipam:?}")),
        "{err}"
    );
}

/// A rollback to the Go plugin replaces `ib-sriov` only (upstream's entrypoint writes
/// that one name): `ib-sriov-ipam`, a copy, stays what it was and still runs as the IPAM
/// plugin. A reinstall replaces an existing `ib-sriov-ipam` (by rename), and a
/// destination that cannot be replaced fails the run, naming it, after `ib-sriov` was
/// installed.
#[test]
fn the_ipam_copy_is_independent_of_ib_sriov_and_replaced_on_reinstall() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    let ipam = dir.join("ib-sriov-ipam");
    fs::write(&ipam, b"older ipam").unwrap();
    let out = install(&dir, &plugin());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(fs::read(&ipam).unwrap(), fs::read(plugin()).unwrap());
    // What the Go entrypoint does on a rollback: a new ib-sriov by rename.
    let go = dir.join("ib-sriov.temp");
    fs::write(&go, "#!/bin/sh\necho go plugin\n").unwrap();
    fs::rename(&go, dir.join("ib-sriov")).unwrap();
    assert_eq!(fs::read(&ipam).unwrap(), fs::read(plugin()).unwrap());
    let v = Command::new(&ipam).arg("--version").output().unwrap();
    assert!(
        String::from_utf8_lossy(&v.stdout).starts_with("ib-sriov-ipam version:"),
        "{v:?}"
    );
    // ib-sriov-ipam a directory: rename fails (EISDIR); ib-sriov was installed.
    let second = tmp.path().join("second");
    fs::create_dir(&second).unwrap();
    let dir2 = bin_dir(&second);
    fs::create_dir_all(dir2.join("ib-sriov-ipam").join("x")).unwrap();
    let out = install(&dir2, &plugin());
    assert_failed(
        &out,
        &[
            "failed to copy binary",
            &format!("{:?}", dir2.join("ib-sriov-ipam")),
        ],
    );
    assert_eq!(
        fs::read(dir2.join("ib-sriov")).unwrap(),
        fs::read(plugin()).unwrap()
    );
    assert_eq!(
        names(&dir2),
        ["ib-sriov", "ib-sriov-ipam"],
        "no temp file left"
    );
}

#[test]
fn replacement_is_atomic_for_a_concurrent_reader() {
    const RUNS: usize = 30;
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    let dst = dir.join("ib-sriov");
    // Two sources of different lengths and tails: the plugin with bytes appended (an
    // ELF file still runs with a tail), so every run really replaces the content.
    let base = fs::read(plugin()).unwrap();
    let versions: Vec<Vec<u8>> = [(b'A', 1 << 20), (b'B', 3 << 19)]
        .iter()
        .map(|&(fill, n)| {
            let mut v = base.clone();
            v.resize(base.len() + n, fill);
            v
        })
        .collect();
    let sources: Vec<PathBuf> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let p = tmp.path().join(format!("source-{i}"));
            fs::write(&p, v).unwrap();
            p
        })
        .collect();
    let versions = Arc::new(versions);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (versions, stop, dst) = (versions.clone(), stop.clone(), dst.clone());
        std::thread::spawn(move || {
            let (mut reads, mut seen) = (0usize, false);
            while !stop.load(Ordering::Relaxed) {
                match fs::read(&dst) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        assert!(!seen, "the destination vanished after it was installed");
                    }
                    Err(e) => panic!("reading {dst:?}: {e}"),
                    Ok(got) => {
                        seen = true;
                        reads += 1;
                        assert!(
                            versions.iter().any(|v| v.len() == got.len() && *v == got),
                            "read a partial or mixed file of {} bytes",
                            got.len()
                        );
                    }
                }
            }
            reads
        })
    };
    for i in 0..RUNS {
        let out = install(&dir, &sources[i % 2]);
        assert!(out.status.success(), "run {i}: {}", stderr(&out));
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().expect("the reader saw a partial file");
    assert!(reads >= RUNS, "the reader read only {reads} times");
    assert_eq!(fs::read(&dst).unwrap(), versions[(RUNS - 1) % 2]);
    assert_eq!(names(&dir), ["ib-sriov", "ib-sriov-ipam"]);
}

#[test]
fn missing_directory_fails_naming_it() {
    let tmp = tempdir();
    let dir = tmp.path().join("no-such-dir");
    let out = install(&dir, &plugin());
    assert_failed(
        &out,
        &[
            "CNI bin directory",
            &format!("{dir:?}"),
            "No such file or directory",
        ],
    );
    assert!(!dir.exists());
}

#[test]
fn missing_source_fails_naming_it() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    let src = tmp.path().join("no-such-plugin");
    let out = install(&dir, &src);
    assert_failed(
        &out,
        &[
            "IB SR-IOV CNI binary file",
            &format!("{src:?}"),
            "No such file or directory",
        ],
    );
    assert!(names(&dir).is_empty());
}

#[test]
fn source_not_answering_version_fails_and_keeps_the_old_plugin() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    fs::write(dir.join("ib-sriov"), b"old plugin").unwrap();
    let failing = tmp.path().join("failing");
    fs::write(&failing, "#!/bin/sh\nexit 1\n").unwrap();
    fs::set_permissions(&failing, fs::Permissions::from_mode(0o755)).unwrap();
    for src in [failing.as_path(), Path::new("/bin/true")] {
        let out = install(&dir, src);
        assert_failed(
            &out,
            &[&format!("{src:?}"), "does not answer CNI_COMMAND=VERSION"],
        );
        assert_eq!(fs::read(dir.join("ib-sriov")).unwrap(), b"old plugin");
        assert_eq!(names(&dir), ["ib-sriov"], "{src:?}");
    }
}

#[test]
fn read_only_directory_fails_with_erofs_and_keeps_the_old_plugin() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    let run = run_in_mount_ns(
        &dir,
        r#"printf 'old plugin' > "$D/ib-sriov" && mount --bind "$D" "$D" && mount -o remount,bind,ro "$D""#,
        &plugin(),
    );
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    for w in [dir.to_str().unwrap(), "Read-only file system"] {
        assert!(run.stderr.contains(w), "stderr lacks {w:?}: {}", run.stderr);
    }
    assert_eq!(run.names, ["ib-sriov"]);
    assert_eq!(run.dest, "old plugin");
}

#[test]
fn full_disk_fails_with_enospc_and_leaves_no_temp_file() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    let src = plugin();
    assert!(fs::metadata(&src).unwrap().len() > 64 << 10);
    let run = run_in_mount_ns(
        &dir,
        r#"mount -t tmpfs -o size=64k ib-sriov-test "$D" && printf 'old plugin' > "$D/ib-sriov""#,
        &src,
    );
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    for w in [dir.to_str().unwrap(), "No space left on device"] {
        assert!(run.stderr.contains(w), "stderr lacks {w:?}: {}", run.stderr);
    }
    assert_eq!(run.names, ["ib-sriov"]);
    assert_eq!(run.dest, "old plugin");
    // The tmpfs went with the namespace: nothing reached the host's directory.
    assert!(names(&dir).is_empty());
}

#[test]
fn unwritable_directory_fails_with_eacces() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path()); // root's, 0755: not writable for nobody
    let out = entrypoint_cmd(&dir, Path::new("/bin/true"))
        .arg("--no-sleep")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("cannot run the entrypoint as nobody (needs root, and a path nobody can read)");
    assert_failed(&out, &[dir.to_str().unwrap(), "Permission denied"]);
    assert!(names(&dir).is_empty());
}

/// Starts the entrypoint (sleeping after the copy), waits for the copy, sends `sig`
/// and expects exit status 0 within 5 s.
fn exits_0_on(sig: Signal) {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    let mut guard = Reaped::spawn(
        entrypoint_cmd(&dir, &plugin()).stderr(Stdio::piped()),
        "the entrypoint",
    );
    let child = guard.child();
    let dst = dir.join("ib-sriov-ipam");
    wait_for("the copies", Duration::from_secs(60), || dst.exists());
    // Still sleeping: the copy being in place does not end it.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "exited without a signal"
    );
    kill(Pid::from_raw(child.id() as i32), sig).unwrap();
    let t = Instant::now();
    let status = wait_timeout(child, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("still running 5 s after {sig}"));
    assert_eq!(status.code(), Some(0), "{status:?} after {sig}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("Entering sleep"), "{err}");
    assert!(err.contains(&format!("Received signal {sig}")), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn sigterm_ends_the_sleep_with_exit_0() {
    exits_0_on(Signal::SIGTERM);
}

#[test]
fn sigint_ends_the_sleep_with_exit_0() {
    exits_0_on(Signal::SIGINT);
}

/// As a container's entrypoint it is PID 1 of its PID namespace, where the kernel drops
/// signals that have the default action: blocked and taken with sigwait, SIGTERM from
/// outside (the runtime stopping the pod) still ends it.
#[test]
fn sigterm_ends_the_sleep_as_pid_1_of_a_pid_namespace() {
    let tmp = tempdir();
    let dir = bin_dir(tmp.path());
    let mut guard = Reaped::spawn(
        Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child"])
            .arg(entrypoint())
            .arg("--cni-bin-dir")
            .arg(&dir)
            .arg("--ib-sriov-cni-bin-file")
            .arg(plugin())
            .stdin(Stdio::null())
            .stderr(Stdio::piped()),
        "unshare (util-linux)",
    );
    let unshare = guard.child();
    let children = format!("/proc/{0}/task/{0}/children", unshare.id());
    let mut pid = 0;
    wait_for("unshare's child", Duration::from_secs(10), || {
        pid = fs::read_to_string(&children)
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .map_or(0, |p| p.parse().unwrap());
        pid != 0
    });
    let dst = dir.join("ib-sriov-ipam");
    wait_for("the copies", Duration::from_secs(60), || dst.exists());
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")),
        "not PID 1 in its namespace (needs root): {status}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        unshare.try_wait().unwrap().is_none(),
        "exited without a signal"
    );
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    let status = wait_timeout(unshare, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("PID 1 still running 5 s after SIGTERM"));
    assert_eq!(
        (status.code(), status.signal()),
        (Some(0), None),
        "{status:?}"
    );
}
