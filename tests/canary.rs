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
        let child = Command::new(env!("CARGO_BIN_EXE_thin_entrypoint"))
            .arg("-cni-bin-dir")
            .arg(dir)
            .arg("-ib-sriov-cni-bin-file")
            .arg(bin())
            .args(["-keep-installed", &format!("-recheck-interval={RECHECK}")])
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
/// put back) and stops on SIGTERM.
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
    assert_eq!(line("kind:"), "kind: DaemonSet");
    // A YAML flow sequence of double-quoted strings is JSON.
    let args: Vec<String> =
        serde_json::from_str(line("args:").trim_start_matches("args:").trim()).unwrap();
    assert!(args.iter().any(|a| a == "-keep-installed"), "{args:?}");
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("bin");
    fs::create_dir(&dir).unwrap();
    let log = d.path().join("canary.log");
    let child = Command::new(env!("CARGO_BIN_EXE_thin_entrypoint"))
        .arg("-cni-bin-dir")
        .arg(&dir)
        .arg("-ib-sriov-cni-bin-file")
        .arg(bin())
        .args(&args)
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
    go_installer(&dir);
    let t = Instant::now();
    wait_for(&c, "the re-install", || installed(&dir) == Plugin::Ours);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(c.stop().contains("(1 re-install(s))"));
}
