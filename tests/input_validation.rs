//! Hostile and malformed input to the real binary on the emulated host
//! (tests/common/emuhost.rs): each case gets its CNI code and message, returns within a
//! bound, and changes nothing (host links and OFED files, journals, IPAM store, no stray
//! file or directory). Needs root.
//!
//! Covers the input bounds of docs/operations.md "Errors" / the module docs of src/cli.rs,
//! src/config.rs, src/cni/{env,args,exec}.rs, src/netns.rs, src/logging.rs,
//! src/fsutil.rs and src/ipam/{disk,lock}.rs.

mod common;

use common::emuhost::HostSnapshot;
use common::fixture::{assert_no_state, assert_pristine, fresh};
use common::lab::{bin, list, Lab, Run};
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// What a refused call must leave behind: the host as `before`, no journal directory,
/// no IPAM store.
#[track_caller]
fn nothing_created(lab: &Lab, before: &HostSnapshot, what: &str) {
    assert_eq!(&lab.host.snapshot(), before, "{what}: host changed");
    assert!(
        !lab.state.exists(),
        "{what}: stateDir created: {:?}",
        list(&lab.state)
    );
    assert!(
        !lab.data.exists(),
        "{what}: dataDir created: {:?}",
        list(&lab.data)
    );
}

#[track_caller]
fn msg_of(j: &Value) -> String {
    format!(
        "{} {}",
        j["msg"].as_str().unwrap_or_default(),
        j["details"].as_str().unwrap_or_default()
    )
}

/// The config for `verb`: 1.1.0 for GC and STATUS (with an empty attachment list for
/// GC), a prevResult for CHECK.
fn conf_for(lab: &Lab, verb: &str) -> Value {
    let mut c = lab.conf(
        if matches!(verb, "GC" | "STATUS") {
            "1.1.0"
        } else {
            "1.0.0"
        },
        0,
    );
    if verb == "GC" {
        c["cni.dev/valid-attachments"] = json!([]);
    }
    if verb == "CHECK" {
        c["prevResult"] = json!({"cniVersion": "1.0.0", "ips": []});
    }
    c
}

const VERBS: [&str; 5] = ["ADD", "DEL", "CHECK", "GC", "STATUS"];

/// The outcome a refused input must have: `code` for every verb but DEL, which succeeds
/// (ADD refuses such input before any change, so there is nothing to delete: SPEC.md
/// DEL; issue 11). `None` for DEL.
#[track_caller]
fn refused(verb: &str, r: Run, code: u64) -> Option<Value> {
    if verb == "DEL" {
        r.expect_ok();
        None
    } else {
        Some(r.expect_code(code))
    }
}

/// Runs the plugin binary (or, with `merge_stderr`, `sh -c 'exec plugin 2>&1'`) in the
/// emulated host's netns with exactly `env` (plus `PATH` and `IB_SRIOV_SYSFS_ROOT`),
/// writing `stdin` from a thread (the plugin may stop reading early). Returns the output
/// and how long it took.
fn raw_run(
    lab: &Lab,
    exe: &Path,
    env: &[(&str, &OsStr)],
    stdin: Vec<u8>,
    merge_stderr: bool,
) -> (Output, Duration) {
    let mut cmd = if merge_stderr {
        let mut c = Command::new("sh");
        c.arg("-c").arg("exec \"$0\" 2>&1").arg(exe);
        c
    } else {
        Command::new(exe)
    };
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("IB_SRIOV_SYSFS_ROOT", lab.host.root());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let ns = common::emuhost::open_netns(&lab.host.host_netns_path());
    common::emuhost::exec_in_netns_file(&mut cmd, ns);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&stdin);
    });
    let out = output_bounded(child, RUN_LIMIT, "plugin");
    let took = t0.elapsed();
    let _ = writer.join();
    (out, took)
}

/// How long any single call may take before the test declares it blocked.
const RUN_LIMIT: Duration = Duration::from_secs(15);

/// Collects `child`'s output (stdout and stderr read by threads, so a large log cannot
/// fill a pipe), waiting at most `limit`; past it the child is killed with SIGKILL (ADD,
/// DEL and GC hold SIGTERM) and the test fails, instead of hanging the suite on a call
/// that blocks (a FIFO opened without `O_NONBLOCK` blocks in open(2) for ever).
#[track_caller]
fn output_bounded(mut child: std::process::Child, limit: Duration, what: &str) -> Output {
    use std::io::Read;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {limit:?}: blocked");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// [`Lab::run`] bounded by [`RUN_LIMIT`] ([`output_bounded`]).
#[track_caller]
fn run_bounded(
    lab: &Lab,
    verb: &str,
    cid: &str,
    netns: &str,
    conf: &Value,
    extra: &[(&str, &str)],
) -> Run {
    let stdin = conf.to_string();
    let child = lab
        .host
        .spawn_plugin(bin(), verb, cid, netns, "net1", &stdin, extra);
    Run::from(output_bounded(child, RUN_LIMIT, verb))
}

fn cni_env<'a>(
    lab: &'a Lab,
    verb: &'a str,
    cid: &'a str,
    netns: &'a str,
) -> Vec<(&'a str, &'a OsStr)> {
    let _ = lab;
    vec![
        ("CNI_COMMAND", OsStr::new(verb)),
        ("CNI_CONTAINERID", OsStr::new(cid)),
        ("CNI_NETNS", OsStr::new(netns)),
        ("CNI_IFNAME", OsStr::new("net1")),
        ("CNI_PATH", OsStr::new("/nonexistent")),
    ]
}

/// A directory on `CNI_PATH` holding test delegates.
fn cni_bin_dir(lab: &Lab) -> PathBuf {
    let d = lab.host.root().join("cni-bin");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `"ipam": {"type": "ib-sriov"}` is refused for every verb that resolves the IPAM
/// plugin (code 7, nothing created), and so is a symlink to this very executable under
/// another name (same `(st_dev, st_ino)` as `/proc/self/exe`).
#[test]
fn own_type_and_links_to_the_plugin_as_ipam_are_refused_before_anything() {
    let (lab, before, pod) = fresh();
    for verb in ["ADD", "CHECK", "STATUS"] {
        let mut c = conf_for(&lab, verb);
        c["ipam"] = json!({"type": "ib-sriov"});
        let r = lab.run(verb, "own", pod.netns(), &c, &[]);
        assert!(!r.ok, "{verb}: {}", r.stdout);
        // STATUS reports any unusable IPAM as "not available" (50) with the reason.
        let code = if verb == "STATUS" { 50 } else { 7 };
        let j = r.expect_code(code);
        assert!(msg_of(&j).contains("this plugin itself"), "{verb}: {j}");
        assert!(!lab.data.exists(), "{verb}: IPAM store created");
    }
    // STATUS probes stateDir first: start the "nothing created" check afresh.
    let _ = std::fs::remove_dir_all(&lab.state);
    nothing_created(&lab, &before, "own type");

    let dir = cni_bin_dir(&lab);
    std::os::unix::fs::symlink(bin(), dir.join("self-ipam")).unwrap();
    let mut c = lab.conf("1.0.0", 0);
    c["ipam"] = json!({"type": "self-ipam"});
    let path = dir.display().to_string();
    let j = lab
        .run("ADD", "own", pod.netns(), &c, &[("CNI_PATH", &path)])
        .expect_code(7);
    let m = msg_of(&j);
    assert!(
        m.contains("own executable") && m.contains("self-ipam"),
        "{j}"
    );
    nothing_created(&lab, &before, "symlink to the plugin");
}

/// A byte-for-byte copy of the plugin under another name as `ipam.type`: the copy
/// finds `IB_SRIOV_DELEGATED` set and fails at once with code 7, so the parent's ADD fails
/// fast (far below the 20 s VF lock timeout the copy would otherwise wait for), rolls
/// back, and a wrapper that counts its starts is started exactly once.
#[test]
fn a_copy_of_the_plugin_as_ipam_fails_fast_and_runs_once() {
    let (lab, before, pod) = fresh();
    let dir = cni_bin_dir(&lab);
    let copy = dir.join("loop-ipam");
    std::fs::copy(bin(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let starts = lab.host.root().join("starts");
    let wrapper = dir.join("count-ipam");
    let wrapper_text = format!(
        "#!/bin/sh\necho \"$PPID\" >> {}\nexec {} \"$@\"\n",
        starts.display(),
        copy.display()
    );
    std::fs::write(&wrapper, &wrapper_text).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.display().to_string();

    let mut c = lab.conf("1.0.0", 0);
    c["ipam"] = json!({"type": "loop-ipam"});
    let t0 = Instant::now();
    let r = run_bounded(&lab, "ADD", "loop", pod.netns(), &c, &[("CNI_PATH", &path)]);
    let took = t0.elapsed();
    let j = r.expect_code(7);
    let m = msg_of(&j);
    assert!(m.contains("loop-ipam"), "{j}");
    assert!(
        m.contains("ib-sriov was invoked as an IPAM plugin of ib-sriov (delegation loop)"),
        "{j}"
    );
    assert!(took < Duration::from_secs(5), "ADD took {took:?}");
    assert_eq!(lab.host.snapshot(), before, "ADD rolled back");
    assert_eq!(pod.links(), vec!["lo"]);
    // The rollback's delegate DEL succeeds doing nothing: nothing is wedged.
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    lab.run("DEL", "loop", pod.netns(), &c, &[("CNI_PATH", &path)])
        .expect_ok();

    for (verb, cid) in [("ADD", "count1"), ("DEL", "count2")] {
        let _ = std::fs::remove_file(&starts);
        let mut c = lab.conf("1.0.0", 1);
        c["ipam"] = json!({"type": "count-ipam"});
        let t0 = Instant::now();
        let r = run_bounded(&lab, verb, cid, pod.netns(), &c, &[("CNI_PATH", &path)]);
        let took = t0.elapsed();
        if verb == "ADD" {
            assert!(!r.ok, "{verb}: {}", r.stdout);
            assert!(
                msg_of(&r.json).contains("delegation loop"),
                "{verb}: {}",
                r.json
            );
        } else {
            // DEL of a never-made attachment: the delegate's DEL does nothing, success.
            assert!(r.ok, "{verb}: {}", r.stdout);
        }
        assert!(took < Duration::from_secs(5), "{verb} took {took:?}");
        // Every start of the delegate comes from the one plugin process under test
        // (its ADD, and the DEL of its rollback): none from a delegate (a loop).
        let n = std::fs::read_to_string(&starts).unwrap_or_default();
        let parents: Vec<&str> = n.lines().collect();
        assert!(
            !parents.is_empty() && parents.len() <= 2,
            "{verb}: delegate started {n:?}"
        );
        assert!(parents.iter().all(|p| *p == parents[0]), "{verb}: {n:?}");
        assert_eq!(lab.host.snapshot(), before, "{verb}");
        assert!(lab.journals().is_empty(), "{verb}: {:?}", lab.journals());
    }
}

/// Started as a delegate of itself (`IB_SRIOV_DELEGATED` set), the plugin refuses every
/// command but VERSION and DEL at once, with code 7 and the exact message, doing nothing;
/// DEL succeeds doing nothing (it never allocated, and a failing DEL would wedge the
/// calling attachment's journal).
#[test]
fn started_as_its_own_delegate_it_refuses_every_command_but_version_and_del() {
    let (lab, before, pod) = fresh();
    for verb in VERBS {
        let mut env = cni_env(&lab, verb, "deleg", pod.netns());
        env.push(("IB_SRIOV_DELEGATED", OsStr::new("1")));
        let stdin = conf_for(&lab, verb).to_string().into_bytes();
        let (out, took) = raw_run(&lab, bin(), &env, stdin, false);
        let r = Run::from(out);
        if verb == "DEL" {
            assert_eq!(r.expect_ok(), Value::Null);
            assert!(took < Duration::from_secs(2), "{verb} took {took:?}");
            nothing_created(&lab, &before, verb);
            continue;
        }
        let j = r.expect_code(7);
        assert_eq!(
            j["msg"],
            "ib-sriov was invoked as an IPAM plugin of ib-sriov (delegation loop): ipam.type names this plugin under another name; use \"ib-sriov-ipam\" for the built-in allocator or a real IPAM plugin",
            "{verb}"
        );
        assert_eq!(
            j["cniVersion"],
            conf_for(&lab, verb)["cniVersion"],
            "{verb}"
        );
        assert!(took < Duration::from_secs(2), "{verb} took {took:?}");
        nothing_created(&lab, &before, verb);
    }
    let env = [
        ("CNI_COMMAND", OsStr::new("VERSION")),
        ("IB_SRIOV_DELEGATED", OsStr::new("1")),
    ];
    let (out, _) = raw_run(
        &lab,
        bin(),
        &env,
        b"{\"cniVersion\":\"1.0.0\"}".to_vec(),
        false,
    );
    let v = Run::from(out).expect_ok();
    assert_eq!(v["cniVersion"], "1.0.0");
}

/// The network `name` names `<dataDir>/<name>`: an unsafe one is code 7 for every verb
/// at parse time, and nothing is created (STATUS used to create directories first).
#[test]
fn invalid_network_names_are_code_7_for_every_verb_and_status_creates_nothing() {
    let (lab, before, pod) = fresh();
    let long = "n".repeat(256);
    for name in [
        "a/b",
        "..",
        ".",
        "",
        "x\ny",
        "c\u{7}",
        "../../etc",
        long.as_str(),
    ] {
        for verb in VERBS {
            let mut c = conf_for(&lab, verb);
            c["name"] = json!(name);
            if let Some(j) = refused(verb, lab.run(verb, "badname", pod.netns(), &c, &[]), 7) {
                assert!(
                    j["msg"].as_str().unwrap().contains("name"),
                    "{verb} {name:?}: {j}"
                );
            }
            nothing_created(&lab, &before, &format!("{verb} {name:?}"));
        }
    }
}

/// `CNI_IFNAME` with what the kernel's `dev_valid_name()` refuses or a control character,
/// and `CNI_CONTAINERID` outside the spec's alphabet or 255 bytes: code 4, naming the
/// variable, nothing created.
#[test]
fn bad_bytes_in_cni_ifname_and_cni_containerid_are_code_4() {
    let (lab, before, pod) = fresh();
    let conf = lab.conf("1.0.0", 0);
    let long_id = "c".repeat(256);
    let mut cases: Vec<(&str, &str)> = vec![];
    for ifname in [
        "net\u{1}",
        "a\tb",
        "a\nb",
        "net\u{7f}",
        "n\u{e0}t", // U+00E0 is C3 A0: 0xA0 is a space for the kernel
        "a:b",
        "a/b",
        "..",
        "sixteen-chars-xx",
    ] {
        cases.push(("CNI_IFNAME", ifname));
    }
    for cid in ["c\u{1}", "c d", "-c", "c/d", "é", long_id.as_str()] {
        cases.push(("CNI_CONTAINERID", cid));
    }
    for verb in ["ADD", "DEL", "CHECK"] {
        for (var, value) in &cases {
            let mut c = conf.clone();
            if verb == "CHECK" {
                c["prevResult"] = json!({"cniVersion": "1.0.0"});
            }
            let r = lab.run(verb, "good", pod.netns(), &c, &[(var, value)]);
            if let Some(j) = refused(verb, r, 4) {
                assert!(
                    j["msg"].as_str().unwrap().contains(var),
                    "{verb} {var}={value:?}: {j}"
                );
            }
            nothing_created(&lab, &before, &format!("{verb} {var}={value:?}"));
        }
    }
    // A CNI_* variable that is not UTF-8 is code 4 too (not a panic).
    let mut env = cni_env(&lab, "ADD", "good", pod.netns());
    env.retain(|(k, _)| *k != "CNI_IFNAME");
    env.push(("CNI_IFNAME", OsStr::from_bytes(b"net\xff")));
    let (out, _) = raw_run(&lab, bin(), &env, conf.to_string().into_bytes(), false);
    let j = Run::from(out).expect_code(4);
    assert!(j["msg"].as_str().unwrap().contains("CNI_IFNAME"), "{j}");
    nothing_created(&lab, &before, "non-UTF-8 CNI_IFNAME");
}

/// SPEC.md: only CHECK uses `prevResult`; ADD and DEL must not fail on a malformed one.
#[test]
fn a_malformed_prev_result_is_ignored_by_add_and_del_and_refused_by_check() {
    let (lab, before, pod) = fresh();
    let mut conf = lab.conf("1.0.0", 0);
    conf["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "not-an-ip"}]});
    let res = lab.add("prev", &pod, &conf).expect_ok();
    assert_eq!(res["interfaces"][0]["name"], "net1");
    let j = lab
        .run("CHECK", "prev", pod.netns(), &conf, &[])
        .expect_code(7);
    assert!(j["msg"].as_str().unwrap().contains("prevResult"), "{j}");
    // A non-object too.
    conf["prevResult"] = json!("garbage");
    lab.del("prev", pod.netns(), &conf).expect_ok();
    assert_eq!(lab.host.snapshot(), before, "DEL restored the host");
    assert_no_state(&lab);
    lab.del("prev", pod.netns(), &conf).expect_ok();
}

/// A FIFO as `CNI_NETNS` would block a plain open(2) for ever; a namespace file of
/// another type (`/proc/self/ns/mnt`) is on nsfs but no network namespace. Both are
/// refused at once: ADD code 3 naming the path, nothing created. DEL does not hang.
#[test]
fn a_fifo_or_a_namespace_of_another_type_as_cni_netns_fails_fast() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let conf = lab.conf("1.0.0", 0);
    let fifo = lab.host.root().join("netns-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let fifo = fifo.display().to_string();
    for (netns, want) in [
        (fifo.as_str(), "is not a network namespace"),
        ("/proc/self/ns/mnt", "it is a mount namespace"),
        ("/dev/null", "is not a network namespace"),
    ] {
        let t0 = Instant::now();
        let j = run_bounded(&lab, "ADD", "ns", netns, &conf, &[]).expect_code(3);
        assert!(t0.elapsed() < Duration::from_secs(2), "{netns}");
        let m = j["msg"].as_str().unwrap();
        assert!(m.contains(netns) && m.contains(want), "{netns}: {j}");
        assert!(lab.journals().is_empty(), "{netns}");
        assert!(lab.allocations().is_empty(), "{netns}");
        assert_eq!(lab.host.snapshot(), before, "{netns}");
        let t0 = Instant::now();
        let _ = run_bounded(&lab, "DEL", "ns", netns, &conf, &[]);
        assert!(t0.elapsed() < Duration::from_secs(5), "DEL {netns}");
        assert_eq!(lab.host.snapshot(), before, "DEL {netns}");
    }
}

/// An unusable `logFile` never fails a verb (issue 22; outside the node policy, issue
/// 40, it is not even opened): a character device
/// (`/dev/stdout`, which would put log lines into the result), a FIFO (which would
/// block), a directory, a symlink (its target is not created) or a relative path sends
/// the log to stderr after exactly one warning, and ADD, CHECK, STATUS, GC and DEL all
/// succeed, with stdout carrying only their results. With stderr joined to stdout
/// (`2>&1`), log records are dropped rather than mixed into the result.
#[test]
fn an_unusable_log_file_never_fails_a_verb_and_logs_never_reach_stdout() {
    let (lab, before, pod) = fresh();
    let root = lab.host.root();
    let fifo = root.join("log-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let target = root.join("log-target");
    let link = root.join("log-link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let dir = root.join("log-dir");
    std::fs::create_dir(&dir).unwrap();
    for lf in [
        PathBuf::from("/dev/stdout"),
        PathBuf::from("/dev/null"),
        PathBuf::from("/proc/self/fd/1"),
        fifo,
        link,
        dir.clone(),
        PathBuf::from("ib-sriov-relative.log"),
    ] {
        let warned = |verb: &str, r: &Run| {
            // Outside the node policy (`/dev/...`, `/proc/...`, a relative path) the
            // warning is the policy's; inside it, the open's.
            let n = r
                .stderr
                .lines()
                .filter(|l| {
                    l.contains("warning: cannot use logFile")
                        || (l.contains("logFile \"") && l.contains("/etc/ib-sriov/node.json"))
                })
                .count();
            assert_eq!(n, 1, "{verb} {lf:?}: one warning on stderr: {}", r.stderr);
        };
        let t0 = Instant::now();
        let mut c = conf_for(&lab, "ADD");
        c["logFile"] = json!(lf);
        let r = run_bounded(&lab, "ADD", "log", pod.netns(), &c, &[]);
        warned("ADD", &r);
        let res = r.expect_ok();
        let addr = res["ips"][0]["address"].as_str().unwrap_or_default();
        assert!(addr.starts_with("10.56.217."), "{lf:?}: {res}");
        let mut check = conf_for(&lab, "CHECK");
        check["logFile"] = json!(lf);
        check["prevResult"] = res.clone();
        let r = run_bounded(&lab, "CHECK", "log", pod.netns(), &check, &[]);
        warned("CHECK", &r);
        assert_eq!(r.stdout, "", "CHECK {lf:?}");
        r.expect_ok();
        for verb in ["STATUS", "GC"] {
            let mut c = conf_for(&lab, verb);
            c["logFile"] = json!(lf);
            c["cni.dev/valid-attachments"] = json!([{"containerID": "log", "ifname": "net1"}]);
            let r = run_bounded(&lab, verb, "log", pod.netns(), &c, &[]);
            warned(verb, &r);
            assert_eq!(r.stdout, "", "{verb} {lf:?}");
            r.expect_ok();
        }
        assert_eq!(lab.journals(), ["log:net1"], "GC kept the valid attachment");
        let mut c = conf_for(&lab, "DEL");
        c["logFile"] = json!(lf);
        let r = run_bounded(&lab, "DEL", "log", pod.netns(), &c, &[]);
        warned("DEL", &r);
        assert_eq!(r.stdout, "", "DEL {lf:?}");
        r.expect_ok();
        assert!(t0.elapsed() < Duration::from_secs(10), "{lf:?}");
        assert_eq!(lab.host.snapshot(), before, "{lf:?}");
        assert_no_state(&lab);
        assert!(!target.exists(), "symlink target created");
        assert!(!Path::new("ib-sriov-relative.log").exists());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "{lf:?}");
    }

    // stderr joined to stdout, logLevel debug, an ADD that logs and fails (unknown VF).
    let mut c = lab.conf("1.0.0", 0);
    c["deviceID"] = json!("0000:af:07.7");
    let env = cni_env(&lab, "ADD", "log", pod.netns());
    let (out, _) = raw_run(&lab, bin(), &env, c.to_string().into_bytes(), true);
    let text = String::from_utf8_lossy(&out.stdout);
    let j: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("stdout+stderr is not one JSON document ({e}): {text:?}"));
    assert_eq!(j["code"], 7, "{j}");
    // The same call with stderr separate does log.
    let (out, _) = raw_run(&lab, bin(), &env, c.to_string().into_bytes(), false);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ADD failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lab.host.snapshot(), before, "2>&1");
    assert_no_state(&lab);
}

/// Relative `dataDir`, `stateDir` and `runtimeConfig.CNIDeviceInfoFile` are code 7 for
/// every verb (they would be resolved against the runtime's working directory), and
/// nothing is created there or anywhere. (A relative `logFile` only sends the log to
/// stderr: [`an_unusable_log_file_never_fails_a_verb_and_logs_never_reach_stdout`].)
#[test]
fn relative_paths_are_code_7_and_create_nothing() {
    let (lab, before, pod) = fresh();
    let rel = "ib-sriov-relative-path-test";
    for (key, set) in [
        ("dataDir", "ipam.dataDir"),
        ("stateDir", "stateDir"),
        ("CNIDeviceInfoFile", "runtimeConfig.CNIDeviceInfoFile"),
    ] {
        for verb in VERBS {
            let mut c = conf_for(&lab, verb);
            match set {
                "ipam.dataDir" => c["ipam"]["dataDir"] = json!(rel),
                "runtimeConfig.CNIDeviceInfoFile" => {
                    c["runtimeConfig"] = json!({"CNIDeviceInfoFile": rel})
                }
                k => c[k] = json!(rel),
            }
            if let Some(j) = refused(verb, lab.run(verb, "rel", pod.netns(), &c, &[]), 7) {
                let m = j["msg"].as_str().unwrap();
                assert!(
                    m.contains(key) && m.contains("absolute"),
                    "{verb} {set}: {j}"
                );
            }
            nothing_created(&lab, &before, &format!("{verb} {set}"));
            // The plugin inherits the test's working directory.
            assert!(!Path::new(rel).exists(), "{verb} {set}: created {rel}");
        }
    }
}

/// stdin is read up to 4 MiB: a 40 MB configuration is code 6 at once, without reading
/// (let alone parsing) the rest; a configuration of exactly 4 MiB is accepted.
#[test]
fn stdin_is_bounded_to_4_mib() {
    let (lab, before, pod) = fresh();
    let limit = 4usize << 20;
    let padded = |len: usize| -> Vec<u8> {
        let mut c = lab.conf("1.0.0", 0);
        c["pad"] = json!("");
        let base = c.to_string().len();
        c["pad"] = json!("x".repeat(len - base));
        let s = c.to_string().into_bytes();
        assert_eq!(s.len(), len);
        s
    };
    let env = cni_env(&lab, "ADD", "big", pod.netns());
    let (out, took) = raw_run(&lab, bin(), &env, padded(40_000_000), false);
    let j = Run::from(out).expect_code(6);
    assert!(
        j["msg"].as_str().unwrap().contains("larger than 4 MiB"),
        "{j}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    nothing_created(&lab, &before, "40 MB stdin");
    let (out, _) = raw_run(&lab, bin(), &env, padded(limit + 1), false);
    Run::from(out).expect_code(6);
    nothing_created(&lab, &before, "4 MiB + 1 stdin");
    // Exactly at the bound: parsed as usual (a DEL of nothing succeeds).
    let env = cni_env(&lab, "DEL", "big", pod.netns());
    let (out, _) = raw_run(&lab, bin(), &env, padded(limit), false);
    Run::from(out).expect_ok();
    assert_pristine(&lab, &before);
    // The largest child so far stayed far below what parsing 40 MB took (1.26 GiB).
    // SAFETY: getrusage(2) fills the zeroed struct it is given.
    let max_rss_kib = unsafe {
        let mut ru: nix::libc::rusage = std::mem::zeroed();
        assert_eq!(nix::libc::getrusage(nix::libc::RUSAGE_CHILDREN, &mut ru), 0);
        ru.ru_maxrss
    };
    assert!(max_rss_kib < 256 * 1024, "max RSS {max_rss_kib} KiB");
}

/// The Go plugin never parses `CNI_ARGS`: a malformed segment fails no call (it is
/// skipped with a warning, well-formed pairs are kept) and VERSION does not look at it.
#[test]
fn malformed_cni_args_fail_no_call() {
    let (lab, before, pod) = fresh();
    let args = ("CNI_ARGS", "garbage;K8S_POD_NAME=p;=x;IgnoreUnknown=1");
    let v = lab
        .run("VERSION", "", "", &json!({"cniVersion": "1.0.0"}), &[args])
        .expect_ok();
    assert_eq!(v["cniVersion"], "1.0.0");
    let conf = lab.conf("1.0.0", 0);
    let r = lab.run("ADD", "args", pod.netns(), &conf, &[args]);
    assert!(
        r.stderr
            .contains("CNI_ARGS: ignoring malformed segment \"garbage\""),
        "{}",
        r.stderr
    );
    let res = r.expect_ok();
    let mut c = conf.clone();
    c["prevResult"] = res;
    lab.run("CHECK", "args", pod.netns(), &c, &[args])
        .expect_ok();
    lab.run("DEL", "args", pod.netns(), &conf, &[args])
        .expect_ok();
    assert_pristine(&lab, &before);
    let mut c = lab.conf("1.1.0", 0);
    c["cni.dev/valid-attachments"] = json!([]);
    lab.run("GC", "", "", &c, &[args]).expect_ok();
    lab.run("STATUS", "", "", &c, &[args]).expect_ok();
}

/// Entries of the IPAM store and the VF lock that are not regular files: a dangling
/// symlink at a lock path (whose target would be created), a FIFO at the lock or at
/// `last_reserved_ip.0` (which would block the read). Each is refused at once with an
/// error naming the path (IPAM: code 103; VF lock: code 5), the symlink's target is not
/// created, and ADD leaves the host as it was. Planted at record names, they are never
/// opened: ADD skips them as held addresses.
#[test]
fn ipam_and_lock_entries_that_are_not_regular_files_are_refused() {
    let (lab, before, pod) = fresh();
    let conf = lab.conf("1.0.0", 0);
    let store = lab.data.join("ibnet");
    let target = lab.host.root().join("planted-target");
    let mkfifo =
        |p: &Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let vf_lock = lab
        .state
        .join("locks")
        .join(format!("{}.lock", lab.host.vf(0).addr));
    type Plant<'a> = (&'a str, PathBuf, bool, u64, &'a str);
    let cases: Vec<Plant> = vec![
        (
            "IPAM lock symlink",
            store.join("lock"),
            true,
            103,
            "symbolic link",
        ),
        ("IPAM lock FIFO", store.join("lock"), false, 103, "FIFO"),
        (
            "cursor FIFO",
            store.join("last_reserved_ip.0"),
            false,
            103,
            "FIFO",
        ),
        ("VF lock symlink", vf_lock.clone(), true, 5, "symbolic link"),
        ("VF lock FIFO", vf_lock, false, 5, "FIFO"),
    ];
    for (what, path, symlink, code, kind) in cases {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // An earlier ADD left the (regular) lock file there: replace it.
        let _ = std::fs::remove_file(&path);
        if symlink {
            std::os::unix::fs::symlink(&target, &path).unwrap();
        } else {
            mkfifo(&path);
        }
        let t0 = Instant::now();
        let j = run_bounded(&lab, "ADD", "plant", pod.netns(), &conf, &[]).expect_code(code);
        assert!(t0.elapsed() < Duration::from_secs(5), "{what}");
        let m = msg_of(&j);
        assert!(
            m.contains(&path.display().to_string()) && m.contains(kind),
            "{what}: {j}"
        );
        assert!(!target.exists(), "{what}: symlink target created");
        assert_eq!(lab.host.snapshot(), before, "{what}: host changed");
        assert!(lab.journals().is_empty(), "{what}: journal left");
        assert_eq!(pod.links(), vec!["lo"], "{what}");
        std::fs::remove_file(&path).unwrap();
    }
    // With the store clean again, ADD and DEL work.
    lab.add("plant", &pod, &conf).expect_ok();
    lab.del_restores("plant", pod.netns(), &conf, &before);

    // A FIFO and a dangling symlink planted at record names: ADD never opens a record
    // (it claims addresses with link(2), EEXIST meaning "held"), so both are skipped as
    // held addresses without blocking or creating the symlink's target.
    mkfifo(&store.join("10.56.217.2"));
    std::os::unix::fs::symlink(&target, store.join("10.56.217.3")).unwrap();
    let t0 = Instant::now();
    let r = run_bounded(&lab, "ADD", "plant2", pod.netns(), &conf, &[]).expect_ok();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(r["ips"][0]["address"], "10.56.217.4/24", "{r}");
    assert!(!target.exists(), "symlink target created");
    lab.del_restores("plant2", pod.netns(), &conf, &before);
    for ip in ["10.56.217.2", "10.56.217.3"] {
        assert!(
            std::fs::symlink_metadata(store.join(ip)).is_ok(),
            "{ip} left alone"
        );
    }
}

/// Every call leaves a line where the admin looks (issue 39): a NAD with a malformed
/// `deviceID` (function 8) gets ADD refused with code 7, naming what is valid, and the
/// refusal is in the configured `logFile`; each DEL of it succeeds and says so there,
/// with "nothing left to undo" (also for a DEL repeated after a completed one).
#[test]
fn a_refused_call_is_logged_to_the_configured_log_file() {
    let lab = Lab::default();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("ib-sriov.log");
    let mut c = lab.conf("1.0.0", 0);
    c["deviceID"] = json!("0000:af:00.8");
    c["logFile"] = json!(log);
    c["logLevel"] = json!("info");
    let pod = lab.host.new_pod();
    let e = lab.add("bad", &pod, &c).expect_code(7);
    let msg = msg_of(&e);
    assert!(
        msg.contains("0000:af:00.8") && msg.contains("function 0-7"),
        "{msg}"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("ADD bad/net1")
            && text.contains("ADD refused")
            && text.contains("function 0-7"),
        "{text}"
    );
    for _ in 0..2 {
        lab.del("bad", pod.netns(), &c).expect_ok();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let dels: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("DEL bad/net1") && l.contains("nothing left to undo"))
        .collect();
    assert_eq!(dels.len(), 2, "{text}");
    // A DEL repeated after a completed ADD and DEL.
    let mut ok = lab.conf("1.0.0", 0);
    ok["logFile"] = json!(log);
    ok["logLevel"] = json!("info");
    lab.add("good", &pod, &ok).expect_ok();
    lab.del("good", pod.netns(), &ok).expect_ok();
    lab.del("good", pod.netns(), &ok).expect_ok();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("DEL good/net1") && l.contains("nothing left to undo")),
        "{text}"
    );
    assert!(!text.contains("ADD made nothing to restore"), "{text}");
}
