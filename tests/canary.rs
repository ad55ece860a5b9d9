//! The per-node canary under the SR-IOV network operator (issue 39 item 3): two
//! installers share one node's CNI bin directory, the operator's config daemon init
//! container `sriov-infiniband-cni` with the Go image (`--no-sleep`:
//! bindata/manifests/daemon/daemonset.yaml of k8snetworkplumbingwg/sriov-network-operator
//! at 249e2001), and our canary DaemonSet's thin_entrypoint with `-keep-installed`
//! (conf/ib-sriov-canary-daemonset.yaml). Either may write last; pods are attached by
//! whichever plugin is installed at the time, and deleted by whichever is installed
//! then. Each order must leave every pod deletable and the host restored.
//!
//! The Go installer is played as its `copyFileAtomic` does it (cmd/thin_entrypoint/
//! main.go of k8snetworkplumbingwg/ib-sriov-cni at 543060da: write
//! `<dir>/ib-sriov.temp`, chmod, rename over `<dir>/ib-sriov`), installing a stand-in
//! file for the Go binary; a CNI call finds the plugin that is installed *by content*
//! and runs ours (the copy in the directory, really executed) or plays the Go plugin's
//! ADD and DEL on the emulated host (`common::gofix::go_add`, `go_del`, from its
//! source). The canary is the real thin_entrypoint binary. Needs root (netns, veth) and
//! Debian's host-local.

mod common;

use common::emuhost::{HostSnapshot, Pod};
use common::gofix::*;
use common::lab::{bin, Lab, Run};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Stands in for the Go image's `/usr/bin/ib-sriov` in the CNI bin directory: never
/// run (the test plays the Go plugin's calls), only told apart from ours by content.
const GO_STANDIN: &[u8] = b"#!/bin/sh\n# the Go ib-sriov-cni (stand-in)\nexit 1\n";

/// How often the canary checks (the manifest's default is 10s).
const RECHECK: &str = "100ms";

/// The operator's init container with the Go image: what its entrypoint's
/// `copyFileAtomic` does.
fn go_installer(dir: &Path) {
    let tmp = dir.join("ib-sriov.temp");
    fs::write(&tmp, GO_STANDIN).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&tmp, dir.join("ib-sriov")).unwrap();
}

/// Our canary DaemonSet's container on the node: thin_entrypoint `-keep-installed`.
struct Canary {
    child: Child,
    log: PathBuf,
}

impl Canary {
    fn start(dir: &Path, log: &Path) -> Canary {
        Canary::start_with(dir, log, &[])
    }

    /// [`Canary::start`] with `extra` arguments after the others.
    fn start_with(dir: &Path, log: &Path, extra: &[String]) -> Canary {
        let child = Command::new(env!("CARGO_BIN_EXE_thin_entrypoint"))
            .arg("-cni-bin-dir")
            .arg(dir)
            .arg("-ib-sriov-cni-bin-file")
            .arg(bin())
            .args(["-keep-installed", &format!("-recheck-interval={RECHECK}")])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let c = Canary {
            child,
            log: log.to_path_buf(),
        };
        wait_for(&c, "the first install", || {
            c.log_text().contains("Keeping ")
        });
        c
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn reinstalls(&self) -> usize {
        self.log_text().matches("Re-installing ").count()
    }

    /// The node label removed: the pod is deleted, the container gets SIGTERM and
    /// exits 0.
    fn stop(mut self) -> String {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let st = self.child.wait().unwrap();
        assert!(st.success(), "{st:?}: {}", self.log_text());
        self.log_text()
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(c: &Canary, what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}; canary log:\n{}",
            c.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Plugin {
    Ours,
    Go,
}

/// Which plugin `<dir>/ib-sriov` is, by content.
fn installed(dir: &Path) -> Plugin {
    let b = fs::read(dir.join("ib-sriov")).unwrap();
    if b == GO_STANDIN {
        Plugin::Go
    } else {
        assert!(b == fs::read(bin()).unwrap(), "neither plugin is installed");
        Plugin::Ours
    }
}

/// One node: its emulated host and its CNI bin directory.
struct Node {
    lab: Lab,
    dir: PathBuf,
}

impl Node {
    fn new() -> Node {
        let lab = Lab::default();
        let dir = lab.host.root().join("cni-bin");
        fs::create_dir(&dir).unwrap();
        Node { lab, dir }
    }

    /// Where the Go plugin keeps its cache on this node (`/var/lib/cni/ib-sriov`; our
    /// ADD writes there too: the emulated host's `goCacheDir`).
    fn go_cache(&self, f: &Value) -> PathBuf {
        self.lab
            .host
            .root()
            .join("go-cache")
            .join(f["file"].as_str().unwrap())
    }

    /// The runtime's `cmd` for fixture `f`'s attachment in `pod`, through whichever
    /// plugin is installed now; returns which one it was.
    fn call(&self, cmd: &str, f: &Value, pod: &Pod) -> Plugin {
        let lab = &self.lab;
        let conf = del_conf(lab, f);
        let who = installed(&self.dir);
        match (who, cmd) {
            (Plugin::Ours, _) => {
                let path = format!("{}:{DEBIAN_CNI}", self.dir.display());
                Run::from(lab.host.run_plugin(
                    &self.dir.join("ib-sriov"),
                    cmd,
                    f["containerID"].as_str().unwrap(),
                    pod.netns(),
                    "net1",
                    &conf.to_string(),
                    &[("CNI_PATH", path.as_str())],
                ))
                .expect_ok();
            }
            (Plugin::Go, "ADD") => {
                go_add(lab, f, pod, &conf);
                // Its last step, `SaveNetConf`: dir 0700, file 0600.
                let cache = self.go_cache(f);
                let d = cache.parent().unwrap();
                fs::create_dir_all(d).unwrap();
                fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
                let src = fixtures()
                    .join(f["dir"].as_str().unwrap())
                    .join(f["file"].as_str().unwrap());
                fs::copy(src, &cache).unwrap();
                fs::set_permissions(&cache, fs::Permissions::from_mode(0o600)).unwrap();
            }
            (Plugin::Go, "DEL") => go_del(lab, f, pod, &conf, &self.go_cache(f)),
            (Plugin::Go, c) => panic!("the Go plugin's {c} is not played"),
        }
        who
    }
}

/// The host as it was, with the netdevs of VFs `down` back down (the Go plugin's DEL
/// leaves a netdev down, and ours restores a Go attachment as the Go DEL would).
fn want(node: &Node, before: &HostSnapshot, down: &[u32]) -> HostSnapshot {
    let mut w = before.clone();
    for &n in down {
        netdev_down(&node.lab, &mut w, n);
    }
    w
}

/// The operator's Go installer first, with a pod the Go plugin attached; then the canary
/// goes on the node and installs ours (a pod attached by ours, with a GUID); then the
/// config daemon's init container runs again and puts the Go binary back: the canary
/// notices by content, logs it and installs ours again. Both pods are deleted by ours:
/// the Go one as the Go DEL would, ours fully.
#[test]
fn go_first_then_the_canary() {
    let node = Node::new();
    let (g, r) = (manifest("b-noguid-hostlocal"), manifest("a-guid-hostlocal"));
    let (pod_g, pod_r) = (node.lab.host.new_pod(), node.lab.host.new_pod());
    let before = node.lab.host.snapshot();

    go_installer(&node.dir);
    assert_eq!(node.call("ADD", &g, &pod_g), Plugin::Go);

    let canary = Canary::start(&node.dir, &node.lab.host.root().join("canary.log"));
    assert_eq!(installed(&node.dir), Plugin::Ours);
    assert_eq!(node.call("ADD", &r, &pod_r), Plugin::Ours);
    assert_eq!(canary.reinstalls(), 0, "{}", canary.log_text());

    // The config daemon's pod restarts: its init container installs the Go image.
    go_installer(&node.dir);
    wait_for(&canary, "the re-install", || {
        installed(&node.dir) == Plugin::Ours
    });
    wait_for(&canary, "the re-install's log", || {
        canary
            .log_text()
            .contains("Successfully copied IB SR-IOV CNI binary")
            && canary.reinstalls() == 1
    });
    let log = canary.log_text();
    assert!(
        log.contains("was replaced by another binary") && log.contains("re-install #1"),
        "{log}"
    );
    assert!(!node.dir.join("ib-sriov.temp").exists());

    assert_eq!(node.call("DEL", &g, &pod_g), Plugin::Ours);
    assert_eq!(node.call("DEL", &r, &pod_r), Plugin::Ours);
    assert!(node.lab.journals().is_empty(), "{:?}", node.lab.journals());
    assert_eq!(pod_g.links(), ["lo"]);
    assert_eq!(pod_r.links(), ["lo"]);
    assert_eq!(node.lab.host.snapshot(), want(&node, &before, &[2]));
    let log = canary.stop();
    assert!(log.contains("(1 re-install(s))"), "{log}");
}

/// The canary first (the operator's init container runs just after it, and loses), a
/// pod attached by ours (`link_state`); then the per-node rollback: the label removed
/// (the canary stops and installs nothing more) and the config daemon's pod deleted (its
/// init container installs the Go binary, which stays); a pod attached by the Go
/// plugin; the Go plugin deletes our pod from the cache file our ADD wrote. Forward
/// again: the canary back on the node, ours deletes the Go pod, and our journal of the
/// pod the Go plugin deleted goes without touching its VF.
#[test]
fn the_canary_first_then_rolled_back_and_forward_again() {
    let node = Node::new();
    let (r, g) = (
        manifest("c-linkstate-enable"),
        manifest("b-noguid-hostlocal"),
    );
    let (pod_r, pod_g) = (node.lab.host.new_pod(), node.lab.host.new_pod());
    let before = node.lab.host.snapshot();
    let log1 = node.lab.host.root().join("canary-1.log");

    let canary = Canary::start(&node.dir, &log1);
    go_installer(&node.dir);
    wait_for(&canary, "the re-install", || {
        installed(&node.dir) == Plugin::Ours && canary.reinstalls() == 1
    });
    assert_eq!(node.call("ADD", &r, &pod_r), Plugin::Ours);
    assert!(
        node.go_cache(&r).exists(),
        "our ADD wrote the Go cache file"
    );

    // Rollback of this node.
    let log = canary.stop();
    assert!(log.contains("Received signal SIGTERM"), "{log}");
    go_installer(&node.dir);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(installed(&node.dir), Plugin::Go, "nothing re-installs ours");
    assert_eq!(node.call("ADD", &g, &pod_g), Plugin::Go);
    assert_eq!(node.call("DEL", &r, &pod_r), Plugin::Go);
    assert_eq!(pod_r.links(), ["lo"]);
    assert!(!node.go_cache(&r).exists());

    // Forward again.
    let canary = Canary::start(&node.dir, &node.lab.host.root().join("canary-2.log"));
    assert_eq!(installed(&node.dir), Plugin::Ours);
    assert_eq!(node.call("DEL", &g, &pod_g), Plugin::Ours);
    assert_eq!(pod_g.links(), ["lo"]);
    // The kubelet's DEL of the pod the Go plugin deleted, now through ours.
    assert_eq!(node.call("DEL", &r, &pod_r), Plugin::Ours);
    assert!(node.lab.journals().is_empty(), "{:?}", node.lab.journals());
    assert_eq!(node.lab.host.snapshot(), want(&node, &before, &[2, 3]));
    assert!(host_local_held(&node.lab, "ib-sriov-network").is_empty());
    canary.stop();
}

/// conf/ib-sriov-canary-daemonset.yaml: selects the labelled nodes, mounts the CNI
/// directory where thin_entrypoint writes by default, and its `args` are what the real
/// thin_entrypoint runs with: it installs, keeps the copy installed (a replaced copy is
/// put back) and stops on SIGTERM. Its ConfigMap's node file (valid, with the RDMA
/// recipe's default) is mounted where `-node-file` reads it and installed into the
/// host's /etc/ib-sriov (mounted where the entrypoint writes by default) while the pod
/// runs, then removed.
#[test]
fn the_canary_manifest_runs_the_entrypoint_that_keeps_ours() {
    let yaml = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/ib-sriov-canary-daemonset.yaml"),
    )
    .unwrap();
    let line = |key: &str| {
        yaml.lines()
            .map(str::trim)
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in the manifest"))
            .to_string()
    };
    assert_eq!(line("ib-sriov-canary:"), "ib-sriov-canary: \"true\"");
    assert_eq!(line("mountPath:"), "mountPath: /host/opt/cni/bin");
    assert_eq!(
        lines(&yaml, "kind:"),
        ["kind: ConfigMap", "kind: DaemonSet"]
    );
    // A YAML flow sequence of double-quoted strings is JSON.
    let args: Vec<String> =
        serde_json::from_str(line("args:").trim_start_matches("args:").trim()).unwrap();
    assert!(args.iter().any(|a| a == "-keep-installed"), "{args:?}");
    // The node file: the ConfigMap's, mounted where `-node-file` reads it, installed
    // into the host's /etc/ib-sriov (mounted at the entrypoint's default directory).
    let node_arg = args
        .iter()
        .find_map(|a| a.strip_prefix("-node-file="))
        .expect("-node-file in args");
    let mounts = lines(&yaml, "mountPath:");
    assert!(
        mounts.contains(&format!(
            "mountPath: {}",
            Path::new(node_arg).parent().unwrap().display()
        )),
        "{mounts:?}"
    );
    assert!(
        mounts.contains(&"mountPath: /host/etc/ib-sriov".to_string()),
        "{mounts:?}"
    );
    let paths = lines(&yaml, "path:");
    assert!(
        paths.contains(&"path: /etc/ib-sriov".to_string()),
        "{paths:?}"
    );
    assert!(yaml.contains("type: DirectoryOrCreate"));
    let node_json = manifest_node_file(&yaml);
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("bin");
    fs::create_dir(&dir).unwrap();
    let (cm, host_etc) = (d.path().join("cm"), d.path().join("etc-ib-sriov"));
    fs::create_dir(&cm).unwrap();
    fs::create_dir(&host_etc).unwrap();
    fs::write(cm.join("node.json"), &node_json).unwrap();
    let log = d.path().join("canary.log");
    let child = Command::new(env!("CARGO_BIN_EXE_thin_entrypoint"))
        .arg("-cni-bin-dir")
        .arg(&dir)
        .arg("-ib-sriov-cni-bin-file")
        .arg(bin())
        .args(&args)
        // This machine's stand-ins for the two mounts (Go's flag package: the last wins).
        .arg(format!("-node-file={}", cm.join("node.json").display()))
        .arg(format!("-node-file-dir={}", host_etc.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let c = Canary { child, log };
    wait_for(&c, "the first install", || {
        c.log_text().contains("Keeping ")
    });
    assert!(
        c.log_text().contains("checking every 10s"),
        "{}",
        c.log_text()
    );
    assert_eq!(installed(&dir), Plugin::Ours);
    assert_eq!(
        fs::read_to_string(host_etc.join("node.json")).unwrap(),
        node_json
    );
    go_installer(&dir);
    let t = Instant::now();
    wait_for(&c, "the re-install", || installed(&dir) == Plugin::Ours);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(c.stop().contains("(1 re-install(s))"));
    assert!(!host_etc.join("node.json").exists(), "removed on SIGTERM");
}

/// Every line of `yaml` that starts with `key` once trimmed, trimmed.
fn lines(yaml: &str, key: &str) -> Vec<String> {
    yaml.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(key))
        .map(str::to_string)
        .collect()
}

/// The ConfigMap's `node.json` in the canary manifest: one line of JSON in single
/// quotes. Panics unless the plugin's own parser accepts it with the RDMA recipe's
/// default.
fn manifest_node_file(yaml: &str) -> String {
    let l = lines(yaml, "node.json:");
    assert_eq!(l.len(), 1, "{l:?}");
    let v = l[0]
        .trim_start_matches("node.json:")
        .trim()
        .trim_matches('\'')
        .to_string();
    let p = ib_sriov_cni::policy::NodePolicy::from_json(Path::new("/"), v.as_bytes())
        .unwrap_or_else(|e| panic!("{v}: {e}"));
    assert_eq!(p.defaults.rdma_isolation, Some(true), "{v}");
    v
}

/// What plain `ib-sriov doctor` says of the node file of a node whose `/etc/ib-sriov`
/// is `etc`: its `nodeFile` object (state `valid` with its defaults, or `absent`).
fn doctor_node_file(etc: &Path) -> Value {
    let root = tempfile::tempdir().unwrap();
    fs::create_dir(root.path().join("etc")).unwrap();
    std::os::unix::fs::symlink(etc, root.path().join("etc/ib-sriov")).unwrap();
    let out = Command::new(bin())
        .args(["doctor", "--json", "--host-root"])
        .arg(root.path())
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    j["nodeFile"].clone()
}

/// The node file follows the label (issue 50): the canary with `-node-file` installs
/// the ConfigMap's node file into the host's `/etc/ib-sriov` when it starts (the node
/// labelled), puts it back when it was removed by hand, installs a changed ConfigMap,
/// keeps the installed file when the ConfigMap turns invalid (logged), and removes it
/// on SIGTERM (the label removed); plain doctor sees it valid with the recipe's
/// default, then absent. A node file it did not install is never replaced or removed.
#[test]
fn the_node_file_appears_and_disappears_with_the_label() {
    let yaml = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/ib-sriov-canary-daemonset.yaml"),
    )
    .unwrap();
    let node_json = manifest_node_file(&yaml);
    let d = tempfile::tempdir().unwrap();
    let (bin_dir, cm, etc) = (
        d.path().join("bin"),
        d.path().join("cm"),
        d.path().join("etc-ib-sriov"),
    );
    for x in [&bin_dir, &cm, &etc] {
        fs::create_dir(x).unwrap();
    }
    // kubelet's ConfigMap volume: the key a link into a `..data` directory.
    let data = cm.join("..2026_11_28_00_00_00.1");
    fs::create_dir(&data).unwrap();
    fs::write(data.join("node.json"), &node_json).unwrap();
    std::os::unix::fs::symlink(data.file_name().unwrap(), cm.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/node.json", cm.join("node.json")).unwrap();
    let installed_node = etc.join("node.json");
    let extra = [
        format!("-node-file={}", cm.join("node.json").display()),
        format!("-node-file-dir={}", etc.display()),
    ];
    assert_eq!(doctor_node_file(&etc)["state"], "absent");

    // Labelled: the pod starts.
    let c = Canary::start_with(&bin_dir, &d.path().join("canary.log"), &extra);
    assert_eq!(fs::read_to_string(&installed_node).unwrap(), node_json);
    let mode = fs::metadata(&installed_node).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let nf = doctor_node_file(&etc);
    assert_eq!(
        (nf["state"].as_str(), &nf["defaults"]),
        (Some("valid"), &serde_json::json!({"rdmaIsolation": true})),
        "{nf}"
    );
    // Removed by hand: put back at the next check.
    fs::remove_file(&installed_node).unwrap();
    wait_for(&c, "the node file put back", || installed_node.exists());
    // The ConfigMap changed (kubelet swaps `..data`): installed.
    let changed = r#"{"extraPathRoots": ["/data/cni"], "defaults": {"rdmaIsolation": true}}"#;
    let data2 = cm.join("..2026_11_28_00_01_00.2");
    fs::create_dir(&data2).unwrap();
    fs::write(data2.join("node.json"), changed).unwrap();
    std::os::unix::fs::symlink(data2.file_name().unwrap(), cm.join("..data.tmp")).unwrap();
    fs::rename(cm.join("..data.tmp"), cm.join("..data")).unwrap();
    wait_for(&c, "the changed node file", || {
        fs::read_to_string(&installed_node).unwrap_or_default() == changed
    });
    // Turned invalid: logged once, the installed file kept.
    fs::write(
        data2.join("node.json"),
        r#"{"defaults": {"rdmaIsolaton": true}}"#,
    )
    .unwrap();
    wait_for(&c, "the invalid ConfigMap logged", || {
        c.log_text().contains("is not a valid node file")
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fs::read_to_string(&installed_node).unwrap(), changed);
    assert_eq!(c.log_text().matches("is not a valid node file").count(), 1);
    fs::write(data2.join("node.json"), changed).unwrap();

    // The label removed: the pod gets SIGTERM and the file goes.
    let log = c.stop();
    assert!(log.contains("(the canary stops)"), "{log}");
    assert!(!installed_node.exists());
    assert_eq!(fs::read_dir(&etc).unwrap().count(), 0, "no record left");
    assert_eq!(doctor_node_file(&etc)["state"], "absent");

    // An admin's node file (or a MachineConfig's): never replaced, never removed.
    let admin = r#"{"extraPathRoots": ["/srv"]}"#;
    fs::write(&installed_node, admin).unwrap();
    let c = Canary::start_with(&bin_dir, &d.path().join("canary2.log"), &extra);
    assert!(
        c.log_text().contains("was not installed by this canary"),
        "{}",
        c.log_text()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fs::read_to_string(&installed_node).unwrap(), admin);
    c.stop();
    assert_eq!(fs::read_to_string(&installed_node).unwrap(), admin);
}

/// `s` with its `%XX` escapes decoded (RFC 3986 percent-encoding, as a data URL's
/// payload, RFC 2397). Panics on a malformed escape.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// conf/ib-sriov-node-file-machineconfig.yaml (OpenShift): a MachineConfigPool of the
/// canary nodes (the worker MachineConfigs plus its own, nodes by the role label) and a
/// MachineConfig of that role whose Ignition `storage.files` entry writes
/// /etc/ib-sriov/node.json (mode 0644) from a percent-encoded data URL that decodes to
/// the canary ConfigMap's node file, valid for the plugin's own parser.
#[test]
fn the_machineconfig_example_writes_the_recipes_node_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mc = fs::read_to_string(root.join("conf/ib-sriov-node-file-machineconfig.yaml")).unwrap();
    let ds = fs::read_to_string(root.join("conf/ib-sriov-canary-daemonset.yaml")).unwrap();
    assert_eq!(
        lines(&mc, "kind:"),
        ["kind: MachineConfigPool", "kind: MachineConfig"]
    );
    let api = lines(&mc, "apiVersion:");
    assert!(
        api.iter()
            .all(|a| a == "apiVersion: machineconfiguration.openshift.io/v1"),
        "{api:?}"
    );
    assert_eq!(
        lines(&mc, "machineconfiguration.openshift.io/role:"),
        ["machineconfiguration.openshift.io/role: ib-sriov-canary"]
    );
    assert_eq!(lines(&mc, "values:"), ["values: [worker, ib-sriov-canary]"]);
    assert_eq!(
        lines(&mc, "node-role.kubernetes.io/ib-sriov-canary:"),
        ["node-role.kubernetes.io/ib-sriov-canary: \"\""]
    );
    assert_eq!(lines(&mc, "version:"), ["version: 3.2.0"]);
    assert_eq!(lines(&mc, "- path:"), ["- path: /etc/ib-sriov/node.json"]);
    assert_eq!(lines(&mc, "mode:"), ["mode: 420"], "0644");
    let source = lines(&mc, "source:");
    assert_eq!(source.len(), 1, "{source:?}");
    let url = source[0].trim_start_matches("source:").trim();
    let payload = url
        .strip_prefix("data:,")
        .unwrap_or_else(|| panic!("not a plain data URL: {url}"));
    assert!(
        payload
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"%-_.~".contains(&c)),
        "percent-encoded: {payload}"
    );
    let node = percent_decode(payload);
    assert_eq!(
        node,
        manifest_node_file(&ds),
        "the same recipe as the canary's"
    );
    assert!(
        mc.contains(&format!("# The file's content (percent-decoded): {node}\n")),
        "the header shows it"
    );
}
