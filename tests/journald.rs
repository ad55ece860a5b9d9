//! The systemd journal (issue 30): with no `logFile`, every record of a call also goes to
//! journald's native socket with `SYSLOG_IDENTIFIER=ib-sriov`, `PRIORITY` and the call's
//! fields, and still to stderr; a journal that refuses never fails a verb; with
//! `logFile` set, nothing goes to the journal.
//!
//! The first tests need no journald: the real binary runs in a private mount namespace
//! (`unshare -m`, a tmpfs on its `/run`) where `/run/systemd/journal/socket` is a
//! datagram socket the test bound, and the test decodes the native protocol it
//! receives. The last one needs a running journald and is the only test of this suite
//! that skips (saying why) where there is none. Needs root (mount namespaces).

mod common;

use common::exec::output_with_stdin;
use common::lab::bin;
use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// A configuration whose ADD logs and fails (code 7: the VF does not exist) without
/// touching the host; its state and IPAM directories are under `dir`.
fn failing_conf(dir: &Path, log_file: Option<&Path>) -> String {
    let mut c = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "jnet",
        "type": "ib-sriov",
        "deviceID": "0000:af:07.7",
        "stateDir": dir.join("state"),
        "goCacheDir": dir.join("go-cache"),
        "logLevel": "debug",
        "ipam": {"type": "ib-sriov-ipam", "subnet": "10.56.217.0/24", "dataDir": dir.join("data")},
    });
    if let Some(f) = log_file {
        c["logFile"] = serde_json::json!(f);
    }
    c.to_string()
}

/// A container ID no other run uses, to find this run's records.
fn marker(what: &str) -> String {
    format!(
        "journald-{what}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Runs `ADD` of `conf` as the container `cid`, in a private mount namespace whose `/run`
/// is a fresh tmpfs holding `socket` (any socket file, bound or not) at
/// [`JOURNAL_SOCKET`]. The host's mounts are not changed (`unshare -m` makes the new
/// namespace's mounts private).
fn add_with_journal_socket(socket: &Path, cid: &str, conf: &str) -> Output {
    run_with_journal_socket(socket, "ADD", cid, conf)
}

/// [`add_with_journal_socket`] for any command.
fn run_with_journal_socket(socket: &Path, cmd_name: &str, cid: &str, conf: &str) -> Output {
    common::policy::widen_for_tests();
    let script = format!(
        "set -e; mount -t tmpfs ib-sriov-journald-test /run; mkdir -p /run/systemd/journal; \
         : > {JOURNAL_SOCKET}; mount --bind '{}' {JOURNAL_SOCKET}; exec '{}'",
        socket.display(),
        bin().display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script]);
    cni_env(&mut cmd, cmd_name, cid);
    output_with_stdin(&mut cmd, conf.as_bytes(), "unshare (util-linux)")
}

/// The CNI environment of a test call: `verb` on `cid`, interface `net1`, the test's
/// own netns, no `CNI_PATH`, and no `JOURNAL_STREAM` (the plugin's stderr is a pipe).
fn cni_env<'c>(cmd: &'c mut Command, verb: &str, cid: &str) -> &'c mut Command {
    cmd.env("CNI_COMMAND", verb)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_IFNAME", "net1")
        .env("CNI_NETNS", "/proc/self/ns/net")
        .env("CNI_PATH", "/nonexistent")
        .env_remove("JOURNAL_STREAM")
}

/// Runs `call` with a journal socket at `<dir>/journal.sock` listening (its path is
/// `call`'s argument): the call's output and every datagram the socket received.
fn with_journal_socket(dir: &Path, call: impl FnOnce(&Path) -> Output) -> (Output, Vec<Vec<u8>>) {
    let sock_path = dir.join("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let rx = receive_all(sock, stop.clone());
    let out = call(&sock_path);
    stop.store(true, Ordering::SeqCst);
    (out, rx.join().unwrap())
}

/// Receives the datagrams sent to `sock` until `stop` is set and nothing more comes.
fn receive_all(sock: UnixDatagram, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    std::thread::spawn(move || {
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 17];
        loop {
            match sock.recv(&mut buf) {
                Ok(n) => got.push(buf[..n].to_vec()),
                Err(_) if stop.load(Ordering::SeqCst) => return got,
                Err(_) => {}
            }
        }
    })
}

/// Decodes one datagram of the journal's native protocol
/// (<https://systemd.io/JOURNAL_NATIVE_PROTOCOL/>): `KEY=value\n`, or `KEY\n`, a
/// little-endian u64 length, the value and `\n`.
fn decode(mut d: &[u8]) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    while !d.is_empty() {
        let nl = d
            .iter()
            .position(|&b| b == b'\n')
            .expect("a field ends with \\n");
        match d[..nl].iter().position(|&b| b == b'=') {
            Some(eq) => {
                let k = String::from_utf8(d[..eq].to_vec()).unwrap();
                let v = String::from_utf8_lossy(&d[eq + 1..nl]).into_owned();
                fields.insert(k, v);
                d = &d[nl + 1..];
            }
            None => {
                let k = String::from_utf8(d[..nl].to_vec()).unwrap();
                let len = u64::from_le_bytes(d[nl + 1..nl + 9].try_into().unwrap()) as usize;
                let v = &d[nl + 9..nl + 9 + len];
                assert_eq!(d[nl + 9 + len], b'\n', "binary field {k} ends with \\n");
                fields.insert(k, String::from_utf8_lossy(v).into_owned());
                d = &d[nl + 10 + len..];
            }
        }
    }
    fields
}

/// A failing ADD with no `logFile`: the socket gets the probe (an empty datagram) and
/// one entry per record with the identifier, the priority of its level and the call's
/// fields; stderr has the same records as lines; stdout has only the error.
#[test]
fn records_go_to_the_journal_with_the_call_fields_and_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let cid = marker("fields");
    let (out, got) = with_journal_socket(dir.path(), |sock| {
        add_with_journal_socket(sock, &cid, &failing_conf(dir.path(), None))
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let err: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON error ({e}): {stdout:?} / {stderr}"));
    assert_eq!(err["code"], 7, "{err} / {stderr}");

    assert_eq!(got.first().map(Vec::len), Some(0), "the probe comes first");
    let entries: Vec<_> = got[1..].iter().map(|d| decode(d)).collect();
    let failed = entries
        .iter()
        .find(|e| e["MESSAGE"].contains("ADD failed"))
        .unwrap_or_else(|| panic!("no 'ADD failed' entry: {entries:#?}"));
    let want = [
        ("SYSLOG_IDENTIFIER", "ib-sriov"),
        ("PRIORITY", "3"),
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", cid.as_str()),
        ("CNI_IFNAME", "net1"),
        ("CNI_NETWORK", "jnet"),
        ("CNI_DEVICEID", "0000:af:07.7"),
    ];
    for (k, v) in want {
        assert_eq!(
            failed.get(k).map(String::as_str),
            Some(v),
            "{k}: {failed:#?}"
        );
    }
    assert_eq!(
        failed["MESSAGE"],
        format!("ADD {cid}/net1: ADD failed: PCI device 0000:af:07.7 not found under /sys/bus/pci/devices")
    );
    // The debug record of the configuration: priority 6 (journald's "info").
    assert!(
        entries
            .iter()
            .any(|e| e["PRIORITY"] == "6" && e["MESSAGE"].contains(": config: {")),
        "{entries:#?}"
    );
    // stderr has every record as a line, RFC 3339 time first; no warning.
    let lines: Vec<_> = stderr.lines().collect();
    assert_eq!(lines.len(), entries.len(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let failed_line = lines
        .iter()
        .find(|l| l.contains("ADD failed"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let ts = failed_line.split(' ').next().unwrap();
    assert!(
        ts.len() == 24 && ts.as_bytes()[10] == b'T' && ts.ends_with('Z'),
        "RFC 3339 with milliseconds: {failed_line}"
    );
}

/// A container ID the runtime chose with a newline and a would-be journal field in it
/// (DEL with an environment ADD refuses logs the raw ID): the journal gets it as the
/// data of `CNI_CONTAINERID` (length-prefixed, the native protocol's binary form), never
/// as a field of its own, and `MESSAGE` carries it escaped on one line.
#[test]
fn a_chosen_container_id_is_data_in_the_journal_never_a_field() {
    let dir = tempfile::tempdir().unwrap();
    let cid = format!("{}\nPRIORITY=0\nFORGED_FIELD=1\u{2028}x", marker("inject"));
    let (out, got) = with_journal_socket(dir.path(), |sock| {
        run_with_journal_socket(sock, "DEL", &cid, &failing_conf(dir.path(), None))
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entries: Vec<_> = got.iter().skip(1).map(|d| decode(d)).collect();
    assert!(!entries.is_empty(), "no journal entry");
    for e in &entries {
        assert_eq!(e.get("CNI_CONTAINERID"), Some(&cid), "{e:#?}");
        assert!(!e.contains_key("FORGED_FIELD"), "{e:#?}");
        assert_ne!(e.get("PRIORITY").map(String::as_str), Some("0"), "{e:#?}");
        let m = &e["MESSAGE"];
        assert!(
            !m.contains('\n')
                && !m.contains('\u{2028}')
                && m.contains("\\nPRIORITY=0\\nFORGED_FIELD=1\\u{2028}x"),
            "{m:?}"
        );
    }
}

/// A journal socket that exists but where nobody listens (journald gone): the verb's
/// result is the same, one warning on stderr says so, and the records are on stderr.
#[test]
fn a_journal_that_refuses_falls_back_to_stderr_with_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("journal.sock");
    drop(UnixDatagram::bind(&sock_path).unwrap()); // the file stays, nobody reads it
    let out = add_with_journal_socket(
        &sock_path,
        &marker("refused"),
        &failing_conf(dir.path(), None),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let err: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON error ({e}): {stdout:?} / {stderr}"));
    assert_eq!(err["code"], 7, "{err} / {stderr}");
    assert_eq!(
        stderr
            .matches("warning: cannot write to the journal")
            .count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("ADD failed"), "{stderr}");
}

/// With `logFile` set, the journal is not used (not even probed): the records are in
/// the file only.
#[test]
fn with_a_log_file_nothing_goes_to_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("plugin.log");
    let (out, got) = with_journal_socket(dir.path(), |sock| {
        add_with_journal_socket(
            sock,
            &marker("logfile"),
            &failing_conf(dir.path(), Some(&log)),
        )
    });
    assert!(!out.status.success());
    assert!(got.is_empty(), "{} datagram(s)", got.len());
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("ADD failed"));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// Where journald runs: a failing ADD (no `logFile`) is found with
/// `journalctl -t ib-sriov CNI_CONTAINERID=<unique>` with its fields. Skips, saying why,
/// where journald does not run (a container without systemd).
#[test]
fn the_real_journal_shows_the_call_with_journalctl() {
    let probe = UnixDatagram::unbound().and_then(|s| s.send_to(&[], JOURNAL_SOCKET));
    if let Err(e) = probe {
        eprintln!("SKIP the_real_journal_shows_the_call_with_journalctl: journald is not running here ({JOURNAL_SOCKET}: {e})");
        return;
    }
    if Command::new("journalctl")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP the_real_journal_shows_the_call_with_journalctl: journald runs but journalctl is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cid = marker("real");
    let mut cmd = Command::new(bin());
    cni_env(&mut cmd, "ADD", &cid);
    let out = output_with_stdin(
        &mut cmd,
        failing_conf(dir.path(), None).as_bytes(),
        "the plugin",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    // journald writes asynchronously: poll for the entry.
    let deadline = Instant::now() + Duration::from_secs(10);
    let entry = loop {
        let q = Command::new("journalctl")
            .args(["-t", "ib-sriov", "-o", "json", "--no-pager"])
            .arg(format!("CNI_CONTAINERID={cid}"))
            .output()
            .unwrap();
        let found = add_failed_entry(&String::from_utf8_lossy(&q.stdout));
        if let Some(e) = found {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "no journal entry for {cid}: {}",
            String::from_utf8_lossy(&q.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    check_journalctl_entry(&entry, &cid);
}

/// The first entry of `json_lines` (journalctl's `-o json`, one entry a line) whose
/// MESSAGE says "ADD failed"; lines that are not JSON are skipped.
fn add_failed_entry(json_lines: &str) -> Option<serde_json::Value> {
    json_lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| {
            e["MESSAGE"]
                .as_str()
                .is_some_and(|m| m.contains("ADD failed"))
        })
}

/// `entry` (one line of `journalctl -o json`) is the "ADD failed" record of `cid`.
fn check_journalctl_entry(entry: &serde_json::Value, cid: &str) {
    for (k, v) in [
        ("SYSLOG_IDENTIFIER", "ib-sriov"),
        ("PRIORITY", "3"),
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", cid),
        ("CNI_IFNAME", "net1"),
        ("CNI_NETWORK", "jnet"),
        ("CNI_DEVICEID", "0000:af:07.7"),
        ("_TRANSPORT", "journal"),
    ] {
        assert_eq!(entry[k].as_str(), Some(v), "{k}: {entry}");
    }
    assert!(
        entry["MESSAGE"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("ADD {cid}/net1: ADD failed: "))),
        "{entry}"
    );
}

/// The same against a real journald where none runs: a private `systemd-journald` in
/// a private mount namespace (tmpfs on `/run` and `/var/log/journal`, so nothing of it
/// reaches the host's files; stopped with SIGKILL, so it writes nothing to the kernel
/// log either), the plugin and `journalctl` in the same namespace. Skips, saying why,
/// where the systemd-journald binary is not installed.
#[test]
fn a_private_journald_shows_the_call_with_journalctl() {
    let Some(journald) = [
        "/lib/systemd/systemd-journald",
        "/usr/lib/systemd/systemd-journald",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists()) else {
        eprintln!("SKIP a_private_journald_shows_the_call_with_journalctl: systemd-journald is not installed");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.json");
    std::fs::write(&conf, failing_conf(dir.path(), None)).unwrap();
    let cid = marker("private");
    let script = r#"
set -e
mount -t tmpfs ib-sriov-journald-test /run
if [ -d /var/log/journal ]; then mount -t tmpfs ib-sriov-journald-test /var/log/journal; fi
mkdir -p /run/systemd/journal /run/log/journal
"$JOURNALD" </dev/null >/dev/null 2>&1 &
jd=$!
trap 'kill -KILL $jd 2>/dev/null || true' EXIT
i=0
until [ -S /run/systemd/journal/socket ]; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "journald did not start" >&2; exit 1; }
    sleep 0.1
done
rc=0
"$PLUGIN" <"$CONF" >"$OUT/stdout" 2>"$OUT/stderr" || rc=$?
echo "$rc" >"$OUT/rc"
i=0
while [ $i -lt 100 ]; do
    journalctl -t ib-sriov -o json --no-pager "CNI_CONTAINERID=$CNI_CONTAINERID" >"$OUT/journal" 2>&1 || true
    if grep -q 'ADD failed' "$OUT/journal"; then exit 0; fi
    i=$((i + 1)); sleep 0.1
done
echo "no entry in the private journal" >&2
exit 1
"#;
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", script])
        .env("JOURNALD", journald)
        .env("PLUGIN", bin())
        .env("CONF", &conf)
        .env("OUT", dir.path());
    let out = cni_env(&mut cmd, "ADD", &cid)
        .stdin(Stdio::null())
        .output()
        .expect("unshare (util-linux)");
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
    assert!(
        out.status.success(),
        "{}\njournal: {}\nplugin stderr: {}",
        String::from_utf8_lossy(&out.stderr),
        read("journal"),
        read("stderr")
    );
    assert_eq!(read("rc").trim(), "1");
    let err: serde_json::Value = serde_json::from_str(&read("stdout")).unwrap();
    assert_eq!(err["code"], 7, "{err}");
    let plugin_stderr = read("stderr");
    assert!(plugin_stderr.contains("ADD failed"), "{plugin_stderr}");
    assert!(!plugin_stderr.contains("warning"), "{plugin_stderr}");
    let journal = read("journal");
    let entry = add_failed_entry(&journal).unwrap_or_else(|| panic!("{journal}"));
    check_journalctl_entry(&entry, &cid);
}

/// A call refused before its configuration could be parsed (stdin is not JSON, so no
/// `logFile` can be known) is logged to the journal, naming the command and the reason.
#[test]
fn a_call_refused_before_parsing_is_logged_to_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let cid = marker("refused");
    let (out, got) = with_journal_socket(dir.path(), |sock| {
        add_with_journal_socket(sock, &cid, "{\"cniVersion\": ")
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(err["code"], 6, "{err}");
    let entries: Vec<_> = got.iter().skip(1).map(|d| decode(d)).collect();
    let refused = entries
        .iter()
        .find(|e| e["MESSAGE"].contains("ADD refused"))
        .unwrap_or_else(|| panic!("no 'ADD refused' entry: {entries:#?}"));
    assert_eq!(refused["PRIORITY"], "3", "{refused:#?}");
    assert_eq!(refused["CNI_CONTAINERID"], cid, "{refused:#?}");
    assert!(
        refused["MESSAGE"].contains("cannot decode the network configuration"),
        "{refused:#?}"
    );
}
