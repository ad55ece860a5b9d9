//! Every command of the executable, run by hand or by a runtime, with what a shell or a
//! runtime can give it that a test at a terminal never does (issue 50, finding 5):
//! - stdout a pipe whose reader is already gone (`ib-sriov doctor --json | head -c 100`),
//!   stdout and stderr both such pipes;
//! - no terminal: a session of its own (setsid(2), so no `/dev/tty`), stdin not a
//!   terminal;
//! - bad flags: unknown, a value missing, a value that names nothing.
//!
//! None may panic (`panicked` on stderr, or exit status 101, std's and the plugin's
//! status for a panic). A broken stdout ends the command as coreutils end: silently, by
//! SIGPIPE (src/process.rs `print_out`). `top` without a terminal says so in one line
//! and exits 2.
//!
//! The commands: the plugin's own flags, every subcommand of the node tools (`ib-sriovctl
//! --help` lists them: its table, `ib_sriovctl::SUBCOMMANDS`, which a unit test holds to
//! that text), run as users type them, `ib-sriov NAME` (which runs `ib-sriovctl NAME`),
//! with every flag its own `--help` lists, the IPAM plugin (`ib-sriov-ipam`, the same
//! executable under that name), every CNI verb through `CNI_COMMAND`, and
//! `thin_entrypoint`. Nothing here changes the host: the CNI verbs get a sysfs root and
//! a stateDir of their own and a configuration they refuse before touching anything.
//!
//! Also: `ib-sriovctl --help` lists every flag of every subcommand, as each
//! subcommand's `--help` does (finding 6); without the tools binary, `ib-sriov doctor`
//! says where to get it and exits 2 (issue 53).

#[path = "common/reaped.rs"]
mod reaped;

use reaped::Reaped;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ib-sriov");
const THIN: &str = env!("CARGO_BIN_EXE_thin_entrypoint");

/// Where the command's stdout (and stderr) go.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// stdout a pipe whose read end is closed before the start; stderr to a file.
    StdoutGone,
    /// stdout and stderr both such pipes.
    BothGone,
    /// A session of its own (no controlling terminal), stdin a file, stdout a file.
    NoTerminal,
}

/// One run: the program, its argv[0], arguments, environment and stdin.
#[derive(Debug, Clone)]
struct Case {
    prog: &'static str,
    arg0: Option<&'static str>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Vec<u8>,
    /// A server that runs until killed (`ib-sriov exporter` without `--once`).
    serves: bool,
    /// `ib-sriov top` with good flags: without a terminal, one line and exit status 2.
    needs_terminal: bool,
    /// Prints on stdout and nothing on stderr: with stdout gone, ends by SIGPIPE.
    prints: bool,
}

impl Case {
    fn new(prog: &'static str, args: &[&str]) -> Case {
        Case {
            prog,
            arg0: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            stdin: Vec::new(),
            serves: false,
            needs_terminal: false,
            prints: false,
        }
    }

    fn label(&self) -> String {
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "{} {} {:?} stdin {:?}",
            env.join(" "),
            self.arg0.unwrap_or_else(|| Path::new(self.prog)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()),
            self.args,
            String::from_utf8_lossy(&self.stdin)
        )
    }
}

/// How a run ended: its status (`None`: killed by the test, still serving) and stderr.
struct Ended {
    status: Option<ExitStatus>,
    stderr: String,
}

fn run(case: &Case, mode: Mode, tmp: &Path) -> Ended {
    let mut cmd = Command::new(case.prog);
    if let Some(a0) = case.arg0 {
        cmd.arg0(a0);
    }
    cmd.args(&case.args).env_clear();
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in &case.env {
        cmd.env(k, v);
    }
    let stdin = tmp.join("stdin");
    std::fs::write(&stdin, &case.stdin).unwrap();
    cmd.stdin(std::fs::File::open(&stdin).unwrap());
    let err = tmp.join("stderr");
    let gone_pipe = || {
        let (r, w) = nix::unistd::pipe().unwrap();
        drop(r);
        Stdio::from(w)
    };
    match mode {
        Mode::StdoutGone => {
            cmd.stdout(gone_pipe());
            cmd.stderr(std::fs::File::create(&err).unwrap());
        }
        Mode::BothGone => {
            std::fs::write(&err, "").unwrap();
            cmd.stdout(gone_pipe());
            cmd.stderr(gone_pipe());
        }
        Mode::NoTerminal => {
            cmd.stdout(std::fs::File::create(tmp.join("stdout")).unwrap());
            cmd.stderr(std::fs::File::create(&err).unwrap());
        }
    }
    let mut child = Reaped::spawn_in_session(&mut cmd, &case.label());
    drop(cmd); // the parent's ends of the pipes
    let limit = if case.serves {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(60)
    };
    let status = child.wait_timeout(limit);
    if status.is_none() {
        child.kill();
        assert!(
            case.serves,
            "{} ({mode:?}): still running after {limit:?}",
            case.label()
        );
    }
    Ended {
        status,
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    }
}

/// The flags a usage text lists: the `--name` words of its synopsis lines and of its
/// lines that describe one flag (indented, starting with `--`).
fn flags_of(usage: &str) -> Vec<String> {
    let mut v = Vec::new();
    for l in usage.lines() {
        let t = l.trim_start();
        let words: Vec<&str> = if t.starts_with("usage:") || t.starts_with("ib-sriov ") {
            t.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == '|')
                .collect()
        } else if t.starts_with("--") && l.starts_with(' ') {
            t.split_whitespace().take(1).collect()
        } else {
            Vec::new()
        };
        for w in words {
            let w = w.trim_end_matches("...");
            if w.starts_with("--") && w.len() > 2 && !v.iter().any(|x| x == w) {
                v.push(w.to_string());
            }
        }
    }
    v
}

fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "ib-sriov {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands the node tools' `ib-sriovctl --help` lists (`ib-sriov NAME [...]`
/// lines: the synopsis users type, which the plugin hands over), each with its synopsis
/// there. `ib-sriov --help` names each of them.
fn subcommands() -> Vec<(String, String)> {
    let out = Command::new(Path::new(BIN).with_file_name("ib-sriovctl"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "ib-sriovctl --help: {out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let v: Vec<(String, String)> = help
        .lines()
        .filter(|l| l.starts_with("usage: ") || l.starts_with(' '))
        .map(|l| l.trim_start().trim_start_matches("usage: "))
        .filter_map(|l| {
            let name = l.strip_prefix("ib-sriov ")?.split(' ').next()?;
            (!name.starts_with('[') && name.chars().all(|c| c.is_ascii_lowercase()))
                .then(|| (name.to_string(), l.to_string()))
        })
        .collect();
    assert!(v.len() >= 3, "no subcommands in --help:\n{help}");
    let top = stdout_of(&["--help"]);
    for (name, _) in &v {
        assert!(
            top.contains(&format!("`ib-sriov {name}`")),
            "ib-sriov --help does not name {name}:\n{top}"
        );
    }
    v
}

/// The subcommand's own usage (`ib-sriov NAME --help`).
fn usage_of(name: &str) -> String {
    stdout_of(&[name, "--help"])
}

fn cases(tmp: &Path) -> Vec<Case> {
    let mut v = Vec::new();
    for args in [
        &[][..],
        &["-v"],
        &["--version"],
        &["-h"],
        &["--help"],
        &["--bogus"],
        &["-v", "extra"],
    ] {
        let mut c = Case::new(BIN, args);
        c.prints = args.len() == 1 && args[0] != "--bogus";
        v.push(c);
    }
    let nothing = "/nonexistent/ib-sriov-test";
    for (name, _) in subcommands() {
        let n = name.as_str();
        let serve = |c: &mut Case| {
            c.serves = n == "exporter" && !c.args.iter().any(|a| a == "--once");
            // A server listens where nothing else does.
            if c.serves && !c.args.iter().any(|a| a == "--listen") {
                c.args.extend(["--listen".into(), "127.0.0.1:0".into()]);
            }
        };
        for rest in [&[][..], &["-h"], &["--help"], &["--bogus"], &["extra"]] {
            let mut c = Case::new(BIN, &[&[n][..], rest].concat());
            serve(&mut c);
            c.needs_terminal = n == "top" && rest.is_empty();
            c.prints = rest
                .first()
                .is_some_and(|a| a.starts_with("-h") || *a == "--help");
            v.push(c);
        }
        for f in flags_of(&usage_of(n)) {
            // Alone (a value missing, or a flag that takes none), then with a value
            // that names nothing.
            for args in [vec![n, &f], vec![n, &f, nothing]] {
                let mut c = Case::new(BIN, &args);
                serve(&mut c);
                v.push(c);
            }
        }
    }
    // Runs that succeed and print, under a host root of their own (fast) and on the
    // host itself (read-only).
    let root = tmp.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let root = root.to_str().unwrap();
    for args in [
        &["doctor"][..],
        &["doctor", "--json"],
        &["doctor", "--host-root", root],
        &["doctor", "--json", "--host-root", root],
        &["exporter", "--once", "--host-root", root],
        &["exporter", "--once"],
        &["top", "--interval", "1", "--host-root", root],
    ] {
        let mut c = Case::new(BIN, args);
        c.needs_terminal = args[0] == "top";
        c.prints = !c.needs_terminal;
        v.push(c);
    }
    // The IPAM plugin run by hand.
    for args in [&[][..], &["-v"], &["--help"], &["--bogus"]] {
        let mut c = Case::new(BIN, args);
        c.arg0 = Some("ib-sriov-ipam");
        v.push(c);
    }
    // Every CNI verb (and one that is none), of the plugin and of the IPAM plugin, with
    // a configuration refused before any change (no deviceID; no IPAM ranges) and with
    // one that is not JSON.
    let sysfs = tmp.join("sysfs");
    std::fs::create_dir_all(&sysfs).unwrap();
    let state = tmp.join("state");
    let conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "np", "type": "ib-sriov",
        "stateDir": state, "ipam": {"type": "ib-sriov-ipam", "dataDir": tmp.join("ipam")},
    })
    .to_string();
    let ipam_conf = serde_json::json!({
        "cniVersion": "1.0.0", "name": "np",
        "ipam": {"type": "ib-sriov-ipam", "dataDir": tmp.join("ipam")},
    })
    .to_string();
    for verb in ["VERSION", "ADD", "DEL", "CHECK", "GC", "STATUS", "BOGUS"] {
        for (arg0, stdin) in [
            (None, conf.as_str()),
            (None, "{not json"),
            (Some("ib-sriov-ipam"), ipam_conf.as_str()),
            (Some("ib-sriov-ipam"), "{not json"),
        ] {
            let mut c = Case::new(BIN, &[]);
            c.arg0 = arg0;
            c.stdin = stdin.as_bytes().to_vec();
            for (k, val) in [
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", "no-panic-test"),
                ("CNI_NETNS", nothing),
                ("CNI_IFNAME", "net1"),
                ("CNI_PATH", nothing),
                ("IB_SRIOV_SYSFS_ROOT", sysfs.to_str().unwrap()),
            ] {
                c.env.push((k.into(), val.into()));
            }
            v.push(c);
        }
    }
    // The installer's entrypoint (its runs that install are tests/thin_entrypoint.rs').
    for args in [&["--help"][..], &["-h"], &["--bogus"], &["-cni-bin-dir"]] {
        v.push(Case::new(THIN, args));
    }
    v
}

/// No command panics, whatever its stdout, terminal and flags; a broken stdout ends it
/// silently by SIGPIPE; `top` without a terminal says so in one line and exits 2.
#[test]
fn no_command_panics_with_stdout_gone_without_a_terminal_or_with_bad_flags() {
    let d = tempfile::tempdir().unwrap();
    let cases = cases(d.path());
    let mut bad = Vec::new();
    let mut runs = 0;
    for case in &cases {
        for mode in [Mode::StdoutGone, Mode::BothGone, Mode::NoTerminal] {
            let run_dir = d.path().join("run");
            let _ = std::fs::remove_dir_all(&run_dir);
            std::fs::create_dir(&run_dir).unwrap();
            let e = run(case, mode, &run_dir);
            runs += 1;
            let what = format!("{} ({mode:?})", case.label());
            let status = e.status;
            if e.stderr.contains("panicked") || status.and_then(|s| s.code()) == Some(101) {
                bad.push(format!("{what}: {status:?}\n{}", e.stderr));
                continue;
            }
            match status.and_then(|s| s.signal()) {
                None => {}
                Some(13) if mode != Mode::NoTerminal && e.stderr.is_empty() => {}
                Some(sig) => bad.push(format!(
                    "{what}: killed by signal {sig}, stderr:\n{}",
                    e.stderr
                )),
            }
            // `top` with good flags and no terminal: one line, exit status 2.
            if case.needs_terminal {
                let lines = e.stderr.lines().count();
                let one_line = lines == 1 || mode == Mode::BothGone;
                if status.and_then(|s| s.code()) != Some(2) || !one_line {
                    bad.push(format!(
                        "{what}: top without a terminal: {status:?}, {lines} line(s) on stderr:\n{}",
                        e.stderr
                    ));
                }
            }
            // What prints on stdout, into a pipe with no reader: ended by SIGPIPE,
            // silently (`ib-sriov doctor --json | head -c 100`).
            if case.prints
                && mode == Mode::StdoutGone
                && status.and_then(|s| s.signal()) != Some(13)
            {
                bad.push(format!(
                    "{what}: stdout gone, not ended by SIGPIPE: {status:?}\n{}",
                    e.stderr
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {runs} runs panicked or ended wrongly:\n{}",
        bad.len(),
        bad.join("\n---\n")
    );
    assert!(runs > 100, "{runs} runs");
}

/// `ib-sriov doctor|exporter|top` without the node tools installed (no `ib-sriovctl`
/// beside the plugin, none on `PATH`): exit status 2, nothing on stdout, and stderr
/// names the binary and where to get it; `ib-sriov --help` says so too.
#[test]
fn a_tool_without_the_tools_binary_says_where_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("ib-sriov");
    std::fs::copy(BIN, &lone).unwrap();
    for args in [
        &["doctor"][..],
        &["exporter", "--once"],
        &["top"],
        &["doctor", "--help"],
    ] {
        let out = output_of_copy(
            Command::new(&lone)
                .args(args)
                .env("PATH", dir.path().join("nothing")),
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("ib-sriovctl")
                && err.contains("/usr/bin/ib-sriovctl")
                && err.contains("release asset"),
            "{args:?}: {err}"
        );
    }
    // Found on PATH when not beside the plugin.
    let out = output_of_copy(
        Command::new(&lone)
            .args(["doctor", "--help"])
            .env("PATH", Path::new(BIN).parent().unwrap()),
    );
    assert!(out.status.success(), "{out:?}");
    let help = stdout_of(&["--help"]);
    assert!(
        help.contains("ib-sriovctl") && help.contains("exits 2"),
        "{help}"
    );
}

/// `cmd.output()` of a freshly copied executable: retried while exec fails with
/// `ETXTBSY` (a child forked by another test thread still holds the copy's write
/// descriptor until it execs).
fn output_of_copy(cmd: &mut Command) -> std::process::Output {
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(nix::libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => return r.unwrap(),
        }
    }
    panic!("{cmd:?}: ETXTBSY for 2 s")
}

/// The node tools' `--help` lists every flag of every subcommand: its line for a
/// subcommand is that subcommand's own synopsis (the first line of `ib-sriov NAME
/// --help`), and names every flag the subcommand's usage describes.
#[test]
fn top_level_help_lists_every_flag_of_every_subcommand() {
    let mut bad = Vec::new();
    for (name, line) in subcommands() {
        let own = usage_of(&name);
        let synopsis = own.lines().next().unwrap().trim_start_matches("usage: ");
        if synopsis != line {
            bad.push(format!(
                "{name}: ib-sriovctl --help shows\n  {line}\nib-sriov {name} --help shows\n  {synopsis}"
            ));
        }
        let top: Vec<String> = flags_of(&line);
        for f in flags_of(&own) {
            if !top.contains(&f) {
                bad.push(format!("{name}: {f} is missing from ib-sriovctl --help"));
            }
        }
        assert!(!flags_of(&own).is_empty(), "{name}: no flags in\n{own}");
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
