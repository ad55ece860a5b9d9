//! The node policy of configuration paths (issue 40; src/policy.rs, docs/configuration.md
//! "Node policy file"), with the real binary on the emulated host: a NetworkAttachment-
//! Definition's paths cannot make the root plugin write (or read) outside the roots the
//! node allows, and the strings it chooses cannot forge log records.
//!
//! The suites' own temporary paths (`/tmp`, `/dev/shm`) are let through by the machine's
//! node file (tests/common/policy.rs); the tests of a policy of their own run the plugin
//! with a private node file. Needs root (network namespaces, mount namespaces).

mod common;

use common::emuhost::{EmuHost, EmuOptions, Pod};
use common::fixture::zero_guid_lab;
use common::lab::{bin, Lab, Run};
use common::policy::{private_node_file, NODE_FILE};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A name no other run uses, for the files an adversary case must not create.
fn probe(tag: &str) -> String {
    format!("ib-sriov-probe-{}-{tag}", std::process::id())
}

/// Sets path key `key` of `conf` to `path` (the IPAM and runtimeConfig keys nested).
fn set(conf: &mut Value, key: &str, path: &str) {
    match key {
        "ipam.dataDir" => conf["ipam"]["dataDir"] = json!(path),
        "runtimeConfig.CNIDeviceInfoFile" => {
            conf["runtimeConfig"] = json!({ "CNIDeviceInfoFile": path })
        }
        k => conf[k] = json!(path),
    }
}

/// A directory in an allowed root (`/tmp`, widened for the suites) with a planted link
/// `out` -> `/etc`, as a pod with a hostPath or another tenant could leave one.
fn planted() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("ib-sriov-planted-")
        .tempdir()
        .unwrap();
    std::os::unix::fs::symlink("/etc", d.path().join("out")).unwrap();
    d
}

/// The adversary paths for a key that creates or writes files: (path, the file on the
/// host it would create).
fn write_cases(plant: &Path, tag: &str) -> Vec<(String, PathBuf)> {
    let p = probe(tag);
    let cwd = std::env::current_dir().unwrap();
    vec![
        (format!("/etc/{p}"), PathBuf::from(format!("/etc/{p}"))),
        (format!("/proc/self/cwd/{p}"), cwd.join(&p)),
        (
            format!("/sys/kernel/{p}"),
            PathBuf::from(format!("/sys/kernel/{p}")),
        ),
        (
            format!("/run/../etc/{p}"),
            PathBuf::from(format!("/etc/{p}")),
        ),
        (
            format!("{}/out/{p}", plant.display()),
            PathBuf::from(format!("/etc/{p}")),
        ),
    ]
}

/// The adversary paths for `guidFile` (read, its errors echoed): files whose contents
/// must not reach the error.
fn read_cases(plant: &Path) -> Vec<String> {
    vec![
        "/etc/passwd".into(),
        "/proc/self/environ".into(),
        "/sys/kernel/uevent_seqnum".into(),
        "/run/../etc/passwd".into(),
        format!("{}/out/passwd", plant.display()),
    ]
}

fn code(r: &Run) -> u64 {
    r.json["code"].as_u64().unwrap_or(0)
}

/// Every path key but `logFile`, with every adversary case: ADD answers code 7 naming the
/// key, the path and the node file, and changes nothing (the host's links and OFED
/// files, no journal, no address, no file at the target); DEL of the same configuration
/// succeeds and changes nothing either. Prints the adversary table.
#[test]
fn every_path_key_refuses_the_adversary_paths_and_nothing_is_created() {
    let lab = Lab::default();
    let plant = planted();
    let pod = lab.host.new_pod();
    let mut table = vec![format!(
        "{:<32} {:<60} {:>4} {:>4}  created outside the roots",
        "key", "path", "ADD", "DEL"
    )];
    let keys = [
        "stateDir",
        "ipam.dataDir",
        "goCacheDir",
        "runtimeConfig.CNIDeviceInfoFile",
        "guidFile",
    ];
    for (k, key) in keys.iter().enumerate() {
        let cases: Vec<(String, Option<PathBuf>)> = if *key == "guidFile" {
            read_cases(plant.path())
                .into_iter()
                .map(|p| (p, None))
                .collect()
        } else {
            write_cases(plant.path(), &format!("k{k}"))
                .into_iter()
                .map(|(p, t)| (p, Some(t)))
                .collect()
        };
        for (i, (path, target)) in cases.iter().enumerate() {
            let mut conf = lab.conf("1.0.0", 0);
            set(&mut conf, key, path);
            let before = lab.host.snapshot();
            let cid = format!("adv-{k}-{i}");
            let add = lab.add(&cid, &pod, &conf);
            assert!(!add.ok, "{key} {path}: ADD succeeded: {}", add.stdout);
            assert_eq!(code(&add), 7, "{key} {path}: {}", add.stdout);
            let msg = add.json["msg"].as_str().unwrap_or_default();
            for want in [*key, path.as_str(), NODE_FILE] {
                assert!(msg.contains(want), "{key} {path}: {want:?} not in {msg:?}");
            }
            assert!(
                !msg.contains("root:") && !msg.contains("PATH="),
                "{key} {path}: a file's contents in the error: {msg}"
            );
            let del = lab.del(&cid, pod.netns(), &conf);
            assert!(del.ok, "{key} {path}: DEL: {} / {}", del.stdout, del.stderr);
            assert_eq!(
                lab.host.snapshot(),
                before,
                "{key} {path}: the host changed"
            );
            assert!(
                lab.journals().is_empty(),
                "{key} {path}: {:?}",
                lab.journals()
            );
            assert!(lab.allocations().is_empty(), "{key} {path}");
            let created = target.as_ref().filter(|t| t.exists());
            if let Some(t) = created {
                let _ = std::fs::remove_dir_all(t).or_else(|_| std::fs::remove_file(t));
            }
            assert!(created.is_none(), "{key} {path}: created {created:?}");
            table.push(format!(
                "{key:<32} {path:<60} {:>4} {:>4}  {}",
                code(&add),
                if del.ok { "ok" } else { "fail" },
                target
                    .as_ref()
                    .map(|t| format!("nothing ({} absent)", t.display()))
                    .unwrap_or_else(|| "nothing (read-only key; no contents echoed)".into())
            ));
        }
    }
    // The pod got nothing either.
    assert_eq!(
        common::emuhost::netns_links(&pod.name).len(),
        1,
        "only lo in the pod"
    );
    println!("{}", table.join("\n"));
}

/// `logFile` outside the policy never fails a verb: ADD and DEL succeed, stdout is the
/// result alone (even for `/proc/self/fd/1`, the result channel), one warning on stderr
/// names the key, the path and the node file, and no file is created at the target.
#[test]
fn a_log_file_outside_the_policy_never_fails_a_verb_and_is_not_opened() {
    let lab = Lab::default();
    let plant = planted();
    let mut cases = write_cases(plant.path(), "log");
    cases.push(("/proc/self/fd/1".into(), PathBuf::from("/nonexistent")));
    cases.push(("var/log/relative.log".into(), PathBuf::from("/nonexistent")));
    for (i, (path, target)) in cases.iter().enumerate() {
        let pod = lab.host.new_pod();
        let mut conf = lab.conf("1.0.0", 0);
        conf["logFile"] = json!(path);
        let cid = format!("log-{i}");
        let add = lab.add(&cid, &pod, &conf);
        assert!(add.ok, "{path}: {} / {}", add.stdout, add.stderr);
        assert_eq!(
            add.json["interfaces"][0]["name"], "net1",
            "{path}: {}",
            add.stdout
        );
        let warnings: Vec<&str> = add
            .stderr
            .lines()
            .filter(|l| l.contains("logFile") && l.contains(NODE_FILE))
            .collect();
        assert_eq!(warnings.len(), 1, "{path}: {}", add.stderr);
        assert!(
            warnings[0].contains(" WARN ")
                && warnings[0].contains("logging to the journal or stderr"),
            "{}",
            warnings[0]
        );
        assert!(
            add.stderr.contains("ADD succeeded"),
            "{path}: records go to stderr"
        );
        let del = lab.del(&cid, pod.netns(), &conf);
        assert!(del.ok, "{path}: {} / {}", del.stdout, del.stderr);
        assert!(del.stdout.trim().is_empty(), "{path}: {}", del.stdout);
        assert!(!target.exists(), "{path}: created {}", target.display());
        assert!(lab.journals().is_empty());
    }
}

/// Runs `wrapper` (the plugin under a node file of the test's own, [`private_node_file`])
/// as `cmd` for `cid`/`net1` in `pod` with `conf`.
fn run_via(lab: &Lab, wrapper: &Path, cmd: &str, cid: &str, pod: &Pod, conf: &Value) -> Run {
    Run::from(lab.host.run_plugin(
        wrapper,
        cmd,
        cid,
        pod.netns(),
        "net1",
        &conf.to_string(),
        &[],
    ))
}

/// A node file of the test's own (a private mount namespace): `pathRoots` narrows a key
/// below the machine's roots, widens it to a directory outside the defaults, and
/// `extraPathRoots` adds to every key; a broken node file makes ADD answer code 7 naming
/// it, and DEL then applies the default roots (touching nothing outside them) until the
/// file is fixed.
#[test]
fn a_node_file_widens_narrows_and_a_broken_one_fails_closed() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 0); // stateDir in /dev/shm, the rest in /tmp
    let run = |wrapper: &Path, cmd: &str, cid: &str| run_via(&lab, wrapper, cmd, cid, &pod, &conf);

    // Narrowed: stateDir only under /run/ib-sriov (the other keys keep /tmp).
    let (_d1, narrow) = private_node_file(Some(
        r#"{"pathRoots": {"stateDir": ["/run/ib-sriov"], "ipam.dataDir": ["/tmp"], "goCacheDir": ["/tmp"]}}"#,
    ));
    let before = lab.host.snapshot();
    let r = run(&narrow, "ADD", "narrow");
    assert_eq!(code(&r), 7, "{} / {}", r.stdout, r.stderr);
    let msg = r.json["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("stateDir ")
            && msg.contains("beneath /run/ib-sriov")
            && !msg.contains("goCacheDir"),
        "{msg}"
    );
    assert_eq!(lab.host.snapshot(), before);
    assert!(run(&narrow, "DEL", "narrow").ok);

    // No node file at all: the defaults, which hold none of /tmp, /dev/shm.
    let (_d0, none) = private_node_file(None);
    let r = run(&none, "ADD", "defaults");
    assert_eq!(code(&r), 7, "{}", r.stdout);
    let msg = r.json["msg"].as_str().unwrap();
    for k in ["stateDir", "ipam.dataDir", "goCacheDir"] {
        assert!(msg.contains(&format!("{k} ")), "{k}: {msg}");
    }
    assert!(
        msg.contains("beneath /run, /var/run, /var/lib/cni, /var/log"),
        "{msg}"
    );
    assert_eq!(lab.host.snapshot(), before);

    // Widened per key to /dev/shm and /tmp (outside the defaults): ADD works.
    let (_d2, wide) = private_node_file(Some(
        r#"{"pathRoots": {"stateDir": ["/dev/shm"], "ipam.dataDir": ["/tmp"], "goCacheDir": ["/tmp"]}}"#,
    ));
    let r = run(&wide, "ADD", "wide");
    assert!(r.ok, "{} / {}", r.stdout, r.stderr);
    assert_eq!(lab.journals().len(), 1);

    // The node file broken while the pod lives: ADD of another pod is refused naming
    // the file; DEL applies the defaults, so the attachment (stateDir in /dev/shm) is
    // left as it is, and logged; fixed, DEL restores everything.
    let (d3, broken) = private_node_file(Some("{\"extraPathRoots\": "));
    let r = run(&broken, "ADD", "other");
    assert_eq!(code(&r), 7, "{}", r.stdout);
    assert!(
        r.json["msg"]
            .as_str()
            .unwrap()
            .contains(&format!("node file {NODE_FILE}")),
        "{}",
        r.stdout
    );
    let r = run(&broken, "DEL", "wide");
    assert!(r.ok, "{} / {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("nothing touched"), "{}", r.stderr);
    assert_eq!(lab.journals().len(), 1, "the attachment is kept");
    std::fs::write(
        d3.path().join("etc/node.json"),
        r#"{"extraPathRoots": ["/tmp", "/dev/shm"]}"#,
    )
    .unwrap();
    let r = run(&broken, "DEL", "wide");
    assert!(r.ok, "{} / {}", r.stdout, r.stderr);
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), before, "DEL restored the host");
}

/// The node file's `defaults` through the real binary (docs/configuration.md "Node
/// defaults"): `rdmaIsolation: true` there makes an operator-rendered configuration
/// (no `rdmaIsolation`) ask for isolation, which this kernel (no RDMA subsystem) cannot
/// give: ADD is refused with code 7 before any change, saying where the value came from;
/// STATUS says so too; a network that sets `rdmaIsolation: false` wins and attaches; an
/// unknown key in `defaults` makes the file invalid (code 7 naming it); once it is
/// fixed, DEL restores what ADD made.
#[test]
fn node_defaults_fill_rdma_isolation_and_the_network_key_wins() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.1.0", 0);
    assert!(conf.get("rdmaIsolation").is_none());
    let run = |wrapper: &Path, cmd: &str, cid: &str, conf: &Value| {
        run_via(&lab, wrapper, cmd, cid, &pod, conf)
    };
    let (d, node) = private_node_file(Some(
        r#"{"extraPathRoots": ["/tmp", "/dev/shm"], "defaults": {"rdmaIsolation": true}}"#,
    ));
    let before = lab.host.snapshot();
    let r = run(&node, "ADD", "dflt", &conf);
    assert_eq!(r.json["code"], 7, "{} / {}", r.stdout, r.stderr);
    let msg = r.json["msg"].as_str().unwrap();
    assert!(msg.starts_with("rdmaIsolation is true but"), "{msg}");
    assert!(
        r.stderr.contains(&format!(
            "rdmaIsolation: true (from the defaults of {NODE_FILE}"
        )),
        "{}",
        r.stderr
    );
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.journals().is_empty());
    let r = run(&node, "STATUS", "", &conf);
    assert_eq!(r.json["code"], 50, "{} / {}", r.stdout, r.stderr);
    assert!(r.json["msg"].as_str().unwrap().contains("rdmaIsolation"));

    let mut explicit = conf.clone();
    explicit["rdmaIsolation"] = json!(false);
    let r = run(&node, "ADD", "net-wins", &explicit);
    assert!(r.ok, "the network's key wins: {} / {}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("from the defaults"), "{}", r.stderr);
    assert_eq!(lab.journals().len(), 1);

    std::fs::write(
        d.path().join("etc/node.json"),
        r#"{"extraPathRoots": ["/tmp", "/dev/shm"], "defaults": {"rdmaIsolaton": true}}"#,
    )
    .unwrap();
    let r = run(&node, "ADD", "typo", &conf);
    assert_eq!(r.json["code"], 7, "{}", r.stdout);
    let msg = r.json["msg"].as_str().unwrap();
    assert!(
        msg.contains(&format!("node file {NODE_FILE}")) && msg.contains("rdmaIsolaton"),
        "{msg}"
    );
    // Fixed (as for any broken node file, DEL would keep the attachment, whose
    // stateDir is outside the default roots, until then): DEL restores what ADD made.
    std::fs::write(
        d.path().join("etc/node.json"),
        r#"{"extraPathRoots": ["/tmp", "/dev/shm"]}"#,
    )
    .unwrap();
    let r = run(&node, "DEL", "net-wins", &explicit);
    assert!(r.ok, "{} / {}", r.stdout, r.stderr);
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), before);
}

/// The node default `rdmaIsolation: true` does not break the node's vfio networks
/// (issue 50): a VF bound to vfio-pci has no RDMA device to move, so ADD of a network
/// that leaves the key out attaches it (no RDMA move, the Go cache file without
/// `rdmaIsolation`, so the Go plugin's DEL moves nothing either), whatever the RDMA
/// subsystem (this machine has none); a network that sets `rdmaIsolation: true` on it
/// is still refused (code 7), as before. Before the fix the default made every vfio
/// ADD fail with code 7.
#[test]
fn the_node_default_rdma_isolation_leaves_vfio_networks_attachable() {
    let lab = common::fixture::vfio_lab(3);
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("1.1.0", 3);
    conf.as_object_mut().unwrap().remove("ipam");
    assert!(conf.get("rdmaIsolation").is_none());
    let (_d, node) = private_node_file(Some(
        r#"{"extraPathRoots": ["/tmp", "/dev/shm"], "defaults": {"rdmaIsolation": true}}"#,
    ));
    let before = lab.host.snapshot();
    let r = run_via(&lab, &node, "ADD", "vfio-dflt", &pod, &conf);
    assert!(r.ok, "{} / {}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("the node default rdmaIsolation does not apply"),
        "{}",
        r.stderr
    );
    let cache_dir = PathBuf::from(conf["goCacheDir"].as_str().unwrap());
    let cache: Value =
        serde_json::from_slice(&std::fs::read(cache_dir.join("vfio-dflt-net1")).unwrap()).unwrap();
    assert!(cache.get("rdmaIsolation").is_none(), "{cache}");
    assert_eq!(cache["vfioPciMode"], true, "{cache}");
    assert_eq!(cache["RdmaNetState"]["containerRdmaDevName"], "", "{cache}");
    let r = run_via(&lab, &node, "DEL", "vfio-dflt", &pod, &conf);
    assert!(r.ok, "{} / {}", r.stdout, r.stderr);
    assert_eq!(lab.host.snapshot(), before);

    let mut explicit = conf.clone();
    explicit["rdmaIsolation"] = json!(true);
    let r = run_via(&lab, &node, "ADD", "vfio-explicit", &pod, &explicit);
    assert_eq!(r.json["code"], 7, "{} / {}", r.stdout, r.stderr);
    assert!(
        r.json["msg"].as_str().unwrap().contains("vfio mode"),
        "{}",
        r.stdout
    );
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), before);
}

/// The strings a configuration, a pod or a runtime chose cannot forge a log record:
/// newlines, carriage returns, terminal escapes and Unicode line separators in an unknown
/// key, `CNI_ARGS`, a GUID file's contents (echoed in the error), a refused path and an
/// unvalidated container ID are escaped, so every line of the log file and of stderr is
/// one record (RFC 3339 time, level, `ib-sriov[pid]`) and none starts with the forged
/// text.
#[test]
fn chosen_strings_cannot_forge_log_records() {
    // VFs without a GUID: ADD reads the GUID file and echoes what is wrong with it.
    let lab = zero_guid_lab();
    let pod = lab.host.new_pod();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("plugin.log");
    const FORGED: &str = "2026-01-01T00:00:00.000Z ERROR ib-sriov[1] FORGED";
    let evil = |sep: &str| format!("x{sep}{FORGED}");
    let seps = [
        "\n",
        "\r",
        "\r\n",
        "\u{2028}",
        "\u{2029}",
        "\u{85}",
        "\u{1b}[2K\r",
    ];
    let mut logged_calls = 0;
    for (i, sep) in seps.iter().enumerate() {
        // An unknown key and malformed CNI_ARGS (warned about, by name), then a GUID
        // file whose contents are echoed in the error (code 7, logged).
        let guid_file = dir.path().join(format!("guids-{i}"));
        std::fs::write(&guid_file, evil(sep)).unwrap();
        let mut conf = lab.conf("1.0.0", 0);
        conf["logFile"] = json!(log);
        conf["guidFile"] = json!(guid_file);
        conf[evil(sep)] = json!(1);
        let args = format!("IgnoreUnknown=1;K8S_POD_NAME={};{}", evil(sep), evil(sep));
        let r = lab.run(
            "ADD",
            &format!("inj-{i}"),
            pod.netns(),
            &conf,
            &[("CNI_ARGS", &args)],
        );
        assert_eq!(code(&r), 7, "{}", r.stdout);
        // A stateDir outside the policy, refused and logged with its path.
        let mut conf = lab.conf("1.0.0", 0);
        conf["logFile"] = json!(log);
        conf["stateDir"] = json!(format!("/etc/{}", evil(sep)));
        let r = lab.run("ADD", &format!("inj-s-{i}"), pod.netns(), &conf, &[]);
        assert_eq!(code(&r), 7, "{}", r.stdout);
        logged_calls += 2;
        // DEL with a container ID ADD refuses: the raw ID names the call in the
        // configured logFile (a refused call is logged where the admin looks).
        let r = lab.run("DEL", &evil(sep), pod.netns(), &conf, &[]);
        assert!(r.ok, "{}", r.stderr);
        check_lines("stderr", &r.stderr, FORGED);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().count() >= logged_calls, "{text}");
    check_lines("logFile", &text, FORGED);
    for what in [
        "unknown key",
        "CNI_ARGS",
        "guid",
        "stateDir",
        "DEL with an environment ADD refuses",
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains(what) && l.contains("FORGED")),
            "the chosen string is logged, escaped, with {what}: {text}"
        );
    }
}

/// Every line of `text` is one record: RFC 3339 time, a level, `ib-sriov[`; no line
/// starts with the forged record and no raw separator is left.
#[track_caller]
fn check_lines(what: &str, text: &str, forged: &str) {
    for l in text.lines() {
        let ts = l.split(' ').next().unwrap_or("");
        assert!(
            ts.len() == 24
                && ts.as_bytes()[10] == b'T'
                && ts.ends_with('Z')
                && l.contains(" ib-sriov["),
            "{what}: a line that is not a record: {l:?}"
        );
        assert!(!l.starts_with(forged), "{what}: forged {l:?}");
        assert!(
            !l.chars()
                .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}'),
            "{what}: a raw separator in {l:?}"
        );
    }
}

/// The IPAM plugin (`ib-sriov-ipam`, run by the Go plugin after a rollback) applies the
/// same policy to the two paths it opens: a `dataDir` outside it is code 7 at ADD and a
/// DEL that touches nothing; a `logFile` outside it is not opened.
#[test]
fn the_ipam_plugin_confines_data_dir_and_log_file() {
    let host = EmuHost::build(EmuOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let ipam_bin = dir.path().join("ib-sriov-ipam");
    std::os::unix::fs::symlink(bin(), &ipam_bin).unwrap();
    let p = probe("ipam");
    for (data, log, want_ok) in [
        (format!("/etc/{p}"), None, false),
        (format!("/run/../etc/{p}"), None, false),
        (
            dir.path().join("data").display().to_string(),
            Some(format!("/etc/{p}.log")),
            true,
        ),
    ] {
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": "ipnet", "type": "ib-sriov",
            "ipam": {"type": "ib-sriov-ipam", "subnet": "10.9.0.0/24", "dataDir": data}
        });
        if let Some(l) = &log {
            conf["logFile"] = json!(l);
        }
        for cmd in ["ADD", "DEL"] {
            let r = Run::from(host.run_plugin(
                &ipam_bin,
                cmd,
                "ipam-c",
                "/proc/self/ns/net",
                "net1",
                &conf.to_string(),
                &[],
            ));
            if cmd == "ADD" && !want_ok {
                assert_eq!(code(&r), 7, "{data}: {}", r.stdout);
                assert!(
                    r.json["msg"].as_str().unwrap().contains("ipam.dataDir"),
                    "{}",
                    r.stdout
                );
            } else {
                assert!(r.ok, "{cmd} {data}: {} / {}", r.stdout, r.stderr);
            }
            if log.is_some() {
                assert!(
                    r.stderr.contains("logFile") && r.stderr.contains(NODE_FILE),
                    "{}",
                    r.stderr
                );
            }
        }
        assert!(!Path::new(&format!("/etc/{p}")).exists());
        assert!(!Path::new(&format!("/etc/{p}.log")).exists());
    }
}

/// Each refused ADD is logged once (issue 50: under a real kubelet every ADD the node
/// policy refused was logged twice, with the same pid and time, by src/policy.rs and by
/// src/cli.rs): one error record naming the refusal in the configuration's `logFile`,
/// whichever check refused it — the node policy (a `stateDir` outside its roots), the
/// parser (a malformed `deviceID`), or the IPAM plugin's node policy (its `dataDir`).
#[test]
fn a_refused_add_is_logged_once() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let dir = tempfile::tempdir().unwrap();
    let ipam_bin = dir.path().join("ib-sriov-ipam");
    std::os::unix::fs::symlink(bin(), &ipam_bin).unwrap();
    let p = probe("once");
    let mut cases: Vec<(&str, Value, bool)> = Vec::new();
    let mut conf = lab.conf("1.0.0", 0);
    conf["stateDir"] = json!(format!("/etc/{p}"));
    cases.push(("stateDir outside the node policy", conf, false));
    let mut conf = lab.conf("1.0.0", 0);
    conf["deviceID"] = json!("not-a-pci-address");
    cases.push(("malformed deviceID", conf, false));
    let conf = json!({
        "cniVersion": "1.0.0", "name": "ipnet", "type": "ib-sriov",
        "ipam": {"type": "ib-sriov-ipam", "subnet": "10.9.0.0/24", "dataDir": format!("/etc/{p}")}
    });
    cases.push((
        "the IPAM plugin's dataDir outside the node policy",
        conf,
        true,
    ));
    for (i, (what, mut conf, ipam)) in cases.into_iter().enumerate() {
        let log = dir.path().join(format!("{i}.log"));
        conf["logFile"] = json!(log);
        let r = if ipam {
            Run::from(lab.host.run_plugin(
                &ipam_bin,
                "ADD",
                "once-c",
                "/proc/self/ns/net",
                "net1",
                &conf.to_string(),
                &[],
            ))
        } else {
            lab.add(&format!("once-{i}"), &pod, &conf)
        };
        assert_eq!(code(&r), 7, "{what}: {}", r.stdout);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let errors: Vec<&str> = text.lines().filter(|l| l.contains(" ERROR ")).collect();
        assert_eq!(
            errors.len(),
            1,
            "{what}: {} error records of one refused ADD:\n{text}",
            errors.len()
        );
        assert!(errors[0].contains("refused"), "{what}: {text}");
        assert!(!Path::new(&format!("/etc/{p}")).exists());
    }
}
