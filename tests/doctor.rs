//! `ib-sriov doctor` on the emulated host (issue 24), the real binary run in the
//! emulated host's netns with `--host-root` pointing at a directory that mirrors a
//! node's `/sys` (the emulated tree), `/proc`, `/var/run/netns`, the Go cache dir, the
//! IPAM data dir and the stateDir. Golden files in `tests/fixtures/doctor/` hold the
//! human and JSON forms with run-dependent values replaced by placeholders
//! (`UPDATE_GOLDEN=1` rewrites them). Needs root.

mod common;

use common::emuhost::EmuOptions;
use common::fixture::{assert_has_all, assert_no_state, vfio_lab};
use common::lab::{bin, Lab};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

/// A host root for `--host-root`: symlinks standing in for a node's directories.
struct HostRoot {
    dir: tempfile::TempDir,
    go_cache: PathBuf,
    /// Bind mounts under the root, unmounted on drop.
    binds: Vec<PathBuf>,
}

impl Drop for HostRoot {
    fn drop(&mut self) {
        for b in self.binds.iter().rev() {
            let _ = nix::mount::umount2(b, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Creates `<root>/<abs>` (parents as directories) as a symlink to `target`.
fn mirror(root: &Path, abs: &Path, target: &Path) {
    let at = root.join(abs.strip_prefix("/").unwrap());
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, &at).unwrap();
}

impl HostRoot {
    fn new(lab: &Lab) -> HostRoot {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let go_cache = lab.host.root().join("go-cache");
        std::fs::create_dir_all(&go_cache).unwrap();
        std::fs::create_dir_all(&lab.state).unwrap();
        std::fs::create_dir_all(&lab.data).unwrap();
        mirror(r, Path::new("/sys"), lab.host.root());
        mirror(r, Path::new("/proc"), Path::new("/proc"));
        mirror(r, Path::new("/var/run/netns"), Path::new("/var/run/netns"));
        mirror(r, Path::new("/var/lib/cni/ib-sriov"), &go_cache);
        mirror(r, Path::new("/var/lib/cni/networks"), &lab.data);
        // The stateDir and dataDir at their own paths: bind mounts, not links, since a
        // link to its own absolute path is a loop to a reader that resolves links under
        // the host root (the node policy does, as the kernel would on the node).
        let mut binds = Vec::new();
        for d in [&lab.state, &lab.data] {
            let at = r.join(d.strip_prefix("/").unwrap());
            std::fs::create_dir_all(&at).unwrap();
            nix::mount::mount(
                Some(d.as_path()),
                &at,
                None::<&str>,
                nix::mount::MsFlags::MS_BIND,
                None::<&str>,
            )
            .unwrap_or_else(|e| panic!("bind mount {d:?} on {at:?}: {e}"));
            binds.push(at);
        }
        // The node file, as the machine's (the suites widen the path policy to their
        // temporary directories; tests/common/policy.rs).
        mirror(r, Path::new("/etc/ib-sriov"), Path::new("/etc/ib-sriov"));
        HostRoot {
            dir,
            go_cache,
            binds,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes directory `d` visible at its own path under the root (a bind mount).
    fn bind(&mut self, d: &Path) {
        std::fs::create_dir_all(d).unwrap();
        let at = self.path().join(d.strip_prefix("/").unwrap());
        std::fs::create_dir_all(&at).unwrap();
        nix::mount::mount(
            Some(d),
            &at,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap_or_else(|e| panic!("bind mount {d:?} on {at:?}: {e}"));
        self.binds.push(at);
    }

    /// Makes the root's `/proc` show kernel release `release` in
    /// `/proc/sys/kernel/osrelease`: a directory of links to this machine's `/proc`
    /// entries (those there now), with `sys/kernel/osrelease` a file.
    fn fake_release(&self, release: &str) {
        let at = self.path().join("proc");
        if at.is_symlink() {
            std::fs::remove_file(&at).unwrap();
            let mut dir = at.clone();
            let mut real = PathBuf::from("/proc");
            for keep in ["sys", "kernel", ""] {
                std::fs::create_dir_all(&dir).unwrap();
                for e in std::fs::read_dir(&real).unwrap() {
                    let n = e.unwrap().file_name();
                    if n != keep && n != "osrelease" {
                        std::os::unix::fs::symlink(real.join(&n), dir.join(&n)).unwrap();
                    }
                }
                dir.push(keep);
                real.push(keep);
            }
        }
        std::fs::write(at.join("sys/kernel/osrelease"), format!("{release}\n")).unwrap();
    }

    /// Writes `text` at node path `abs` under the root.
    fn write(&self, abs: &str, text: &str) {
        let at = self.path().join(abs.strip_prefix('/').unwrap());
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }
}

/// `lab` and a host root mirroring it ([`HostRoot::new`]); the root goes first on drop.
fn with_root(lab: Lab) -> (Lab, HostRoot) {
    let h = HostRoot::new(&lab);
    (lab, h)
}

/// Runs the binary under test with `args` on this machine (no emulated host) and waits
/// for it. Panics when it cannot be started.
fn run_bin(args: &[&str]) -> Output {
    std::process::Command::new(bin())
        .args(args)
        .output()
        .unwrap()
}

/// Runs `ib-sriov doctor --host-root H --state-dir <stateDir> [extra]` in the emulated
/// host's netns.
fn doctor(lab: &Lab, h: &HostRoot, extra: &[&str]) -> Output {
    let b = bin().display().to_string();
    let hr = h.path().display().to_string();
    let st = lab.state.display().to_string();
    let mut args = vec![b.as_str(), "doctor", "--host-root", &hr, "--state-dir", &st];
    args.extend_from_slice(extra);
    lab.host.host_exec(&args)
}

/// [`doctor`] under `env` (`KEY=VALUE` each, through env(1)).
fn doctor_env(lab: &Lab, h: &HostRoot, env: &[&str], extra: &[&str]) -> Output {
    if env.is_empty() {
        return doctor(lab, h, extra);
    }
    let b = bin().display().to_string();
    let hr = h.path().display().to_string();
    let st = lab.state.display().to_string();
    let mut args = vec!["env"];
    args.extend_from_slice(env);
    args.extend_from_slice(&[b.as_str(), "doctor", "--host-root", &hr, "--state-dir", &st]);
    args.extend_from_slice(extra);
    lab.host.host_exec(&args)
}

/// Replaces what differs from run to run with placeholders.
fn normalize(lab: &Lab, h: &HostRoot, text: &str) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let emu = std::fs::canonicalize(lab.host.root()).unwrap();
    let mut t = text
        .replace(&h.path().display().to_string(), "<HOST>")
        .replace(&emu.display().to_string(), "<EMU>")
        .replace(&lab.host.root().display().to_string(), "<EMU>")
        .replace(&lab.state.display().to_string(), "<STATE>")
        .replace(kernel.trim(), "<KERNEL>")
        .replace(boot.trim(), "<BOOT>")
        .replace(ib_sriov_cni::version(), "<VERSION>");
    // Pod netns names carry the test process's PID: ibemu-<pid>-<n>-pod<k>.
    let prefix = lab
        .host
        .root()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .split("-sysfs")
        .next()
        .unwrap()
        .to_string();
    t = t.replace(&prefix, "<EMUNS>");
    t
}

/// The RDMA subsystem's presence depends on the machine (no `ib_core` on the CI
/// machine, `rdma_rxe` loaded on a developer's): its line and finding are left out.
fn without_rdma_lines(text: &str) -> String {
    without_lines(text, |l| l.contains("rdma-unavailable"))
        .lines()
        .filter(|l| !l.starts_with("  rdma netns mode"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `text` without the findings (and their fix lines) whose code contains `code`.
fn without_finding_lines(text: &str, code: &str) -> String {
    without_lines(text, |l| l.starts_with("  ") && l.contains(code))
}

/// `text` without the finding lines `drop` picks, each with its `fix:` line (the line
/// right after it), if any.
fn without_lines(text: &str, drop: impl Fn(&str) -> bool) -> String {
    let mut out = Vec::new();
    let mut skip_fix = false;
    for l in text.lines() {
        if std::mem::take(&mut skip_fix) && l.trim_start().starts_with("fix:") {
            continue;
        }
        if drop(l) {
            skip_fix = true;
            continue;
        }
        out.push(l);
    }
    out.join("\n") + "\n"
}

fn json_without_rdma(mut v: Value) -> Value {
    v["node"]["rdmaNetnsMode"] = json!("<RDMA>");
    if let Some(f) = v["findings"].as_array_mut() {
        f.retain(|x| x["code"] != "rdma-unavailable");
    }
    v
}

/// Compares `got` with golden file `name`, or writes it under `UPDATE_GOLDEN=1`.
fn golden(name: &str, got: &str) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/doctor")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", p.display()));
    assert_eq!(got, want, "golden {name} differs; got:\n{got}");
}

/// Both forms against their golden files; returns the JSON and the exit status.
fn check_golden(lab: &Lab, h: &HostRoot, name: &str) -> (Value, i32) {
    check_golden_with(lab, h, name, &[])
}

/// [`check_golden`] with extra doctor arguments.
fn check_golden_with(lab: &Lab, h: &HostRoot, name: &str, extra: &[&str]) -> (Value, i32) {
    check_golden_env(lab, h, name, &[], extra)
}

/// [`check_golden_with`] with the doctor run under `env` (`KEY=VALUE` each, through
/// env(1)).
fn check_golden_env(
    lab: &Lab,
    h: &HostRoot,
    name: &str,
    env: &[&str],
    extra: &[&str],
) -> (Value, i32) {
    let doctor = |lab: &Lab, h: &HostRoot, extra: &[&str]| doctor_env(lab, h, env, extra);
    let out = doctor(lab, h, extra);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut text = normalize(lab, h, &String::from_utf8_lossy(&out.stdout));
    // The kernel facts of this machine's kernel, unless the test gave the host root a
    // release of its own ([`HostRoot::fake_release`]): they depend on the machine.
    let machine_kernel = h.path().join("proc").is_symlink();
    if machine_kernel {
        text = without_finding_lines(&text, "kernel-lacks-");
    }
    golden(&format!("{name}.txt"), &without_rdma_lines(&text));
    let mut json_args = vec!["--json"];
    json_args.extend_from_slice(extra);
    let out_json = doctor(lab, h, &json_args);
    assert_eq!(out_json.status.code(), out.status.code());
    let j: Value = serde_json::from_str(&normalize(
        lab,
        h,
        &String::from_utf8_lossy(&out_json.stdout),
    ))
    .unwrap();
    let mut j = json_without_rdma(j);
    if machine_kernel {
        if let Some(f) = j["findings"].as_array_mut() {
            f.retain(|x| {
                !x["code"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("kernel-lacks-")
            });
        }
    }
    golden(
        &format!("{name}.json"),
        &(serde_json::to_string_pretty(&j).unwrap() + "\n"),
    );
    assert_eq!(j["schemaVersion"], 1);
    (j, out.status.code().unwrap())
}

/// The findings of `j` (doctor's `--json`) whose code is one of `codes`.
fn findings<'a>(j: &'a Value, codes: &[&str]) -> Vec<&'a Value> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| codes.iter().any(|c| f["code"] == *c))
        .collect()
}

/// The string fields `a` and `b` of finding `f`, separated by a space.
fn two_fields(f: &Value, a: &str, b: &str) -> String {
    format!("{} {}", f[a].as_str().unwrap(), f[b].as_str().unwrap())
}

fn codes(j: &Value) -> Vec<String> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| two_fields(f, "severity", "code"))
        .collect()
}

/// An idle node: the PF and its four VFs (one bound to vfio-pci) with their netdevs,
/// GUIDs and policies from the MLNX_OFED files, no holder, no finding; exit 0.
#[test]
fn doctor_on_an_idle_node() {
    let (lab, h) = with_root(vfio_lab(3));
    let (j, rc) = check_golden(&lab, &h, "idle");
    assert_eq!(rc, 0, "{j}");
    assert_eq!(j["vfs"].as_array().unwrap().len(), 4);
    assert_eq!(
        j["vfs"][0]["netdevs"][0]["name"],
        lab.host.vf(0).netdev.clone().unwrap()
    );
    assert_eq!(j["vfs"][3]["driver"], "vfio-pci");
    assert_eq!(j["node"]["vfGuidSource"], "mlnx-ofed-sysfs");
    assert!(codes(&j).is_empty(), "{:?}", codes(&j));
}

/// The kernel facts the plugin relies on (docs/design.md "Kernel facts"), one
/// `kernel-lacks-<fact>` finding for each the running kernel lacks. What the emulated
/// host really shows: its VF netdevs are veths, which have no parent device, while its
/// sysfs tree gives each a PCI `device`; so the parent-device probe finds
/// `IFLA_PARENT_DEV_NAME` missing on every kernel, and the release decides. On this
/// machine's kernel (6.5 or later) the doctor reports nothing; with the release the
/// host root shows replaced by Debian 11's 5.10 (parent device missing, by the probe
/// and the release) and by RHEL 8's 4.18 with its RDMA netns mode answering (the
/// probe wins over the release), goldens `kernel-5.10` and `kernel-4.18`.
#[test]
fn doctor_reports_the_kernel_facts_the_running_kernel_lacks() {
    let (lab, h) = with_root(vfio_lab(3));
    let real = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = real.trim().split(|c: char| !c.is_ascii_digit());
    let (major, minor): (u32, u32) = (
        v.next().unwrap().parse().unwrap(),
        v.next().unwrap().parse().unwrap(),
    );
    assert!(
        (major, minor) >= (5, 6),
        "this test expects a kernel from 5.6 on; {real}"
    );
    let out = doctor(&lab, &h, &["--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lacks = |j: &Value| -> Vec<String> {
        codes(j)
            .into_iter()
            .filter(|c| c.contains("kernel-lacks-"))
            .collect()
    };
    // This machine's kernel: only what its release lacks (docs/design.md "Kernel
    // facts"; the emulated host's probe cannot show a parent device either way).
    let mut want = Vec::new();
    if (major, minor) < (5, 14) {
        want.push("info kernel-lacks-parent-dev");
    }
    if (major, minor) < (6, 5) {
        want.push("info kernel-lacks-skip-vf-stats");
    }
    assert_eq!(lacks(&j), want, "{:?}", codes(&j));

    h.fake_release("5.10.0-46-amd64");
    let (j, rc) = check_golden(&lab, &h, "kernel-5.10");
    assert_eq!(rc, 0, "{j}");
    assert_eq!(
        lacks(&j),
        [
            "info kernel-lacks-parent-dev",
            "info kernel-lacks-skip-vf-stats"
        ]
    );
    let f = findings(&j, &["kernel-lacks-parent-dev"]);
    let vf0 = lab.host.vf(0);
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("in sysfs but the kernel reports no IFLA_PARENT_DEV_NAME"),
        "the probe, not only the release: {f:?} ({vf0:?})"
    );

    h.fake_release("4.18.0-553.el8_10.x86_64");
    let (j, rc) = check_golden_env(
        &lab,
        &h,
        "kernel-4.18",
        &["IB_SRIOV_FAILPOINTS=doctor.rdma_netns_mode=exclusive"],
        &[],
    );
    assert_eq!(rc, 0, "{j}");
    assert_eq!(
        lacks(&j),
        [
            "warning kernel-lacks-vf-guid-read",
            "info kernel-lacks-altnames",
            "info kernel-lacks-parent-dev",
            "info kernel-lacks-skip-vf-stats"
        ]
    );
}

/// A node with attachments: ours on VF 0 (pod alive, built-in IPAM address), ours on
/// VF 1 whose pod netns is gone, and a Go plugin's cache file for VF 2. Holders, IPs,
/// the IPAM store's range and counts, and the one finding (netns-gone) are shown; the
/// doctor changed nothing (journals and host as before); exit 0 (a warning only).
#[test]
fn doctor_on_a_node_with_attachments() {
    let (lab, h) = with_root(Lab::default());
    let pod = lab.host.new_pod();
    let pod_gone = lab.host.new_pod();
    lab.add("live", &pod, &lab.conf("1.0.0", 0)).expect_ok();
    lab.add("gone", &pod_gone, &lab.conf("1.0.0", 1))
        .expect_ok();
    pod_gone.delete().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/go-cache/ib-sriov")
        .join("6901bdd3182eac82109fd0ff9b6657b43d784812cb2c785d2f61bb67688e7c62-net1");
    std::fs::copy(&fixture, h.go_cache.join(fixture.file_name().unwrap())).unwrap();
    // The kernel destroys the dead netns' veth pair asynchronously: wait for it.
    let peer1 = lab.host.vf(1).peer.clone().unwrap();
    let t = std::time::Instant::now();
    while lab.host.snapshot().link(&peer1).is_some() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{peer1} lives on"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let before = (lab.host.snapshot(), lab.journals());
    let (j, rc) = check_golden(&lab, &h, "attachments");
    assert_eq!(rc, 0);
    assert_eq!((lab.host.snapshot(), lab.journals()), before, "read-only");
    let vf0 = &j["vfs"][0];
    assert_eq!(vf0["holders"][0]["containerId"], "live");
    assert_eq!(vf0["holders"][0]["netnsState"], "alive");
    assert_eq!(vf0["netdevLocation"], "in-pod");
    assert_eq!(j["vfs"][1]["holders"][0]["netnsState"], "gone");
    assert_eq!(j["vfs"][2]["holders"][0]["source"], "go-cache");
    assert_eq!(j["ipam"][0]["allocated"], 2);
    assert_eq!(
        j["ipam"][0]["total"], 253,
        "10.56.217.0/24 without .0, .1 (gateway) and .255"
    );
    assert_eq!(codes(&j), ["warning netns-gone"]);
    lab.del("live", pod.netns(), &lab.conf("1.0.0", 0))
        .expect_ok();
    lab.del("gone", pod_gone.netns(), &lab.conf("1.0.0", 1))
        .expect_ok();
}

/// The per-attachment view (docs/operations.md "Diagnosing a node"): for each attachment
/// of ours, the pod CNI_ARGS named (namespace/name, uid), the network, the VF, its GUID,
/// the PF's port GUID, the pkey and whether the VF's pkey table has it, the RDMA device;
/// and each VF's pkey table. Three attachments: a pod with a GUID set and a pkey in the
/// table (VF 0 has 0x8001), a pod whose pkey is not in it (VF 1), and one without pod
/// args and pkey (cnitool-like, VF 2). The journal records the same facts.
#[test]
fn doctor_per_attachment_view() {
    let (lab, h) = with_root(Lab::default());
    let pod = lab.host.new_pod();
    let args = |ns: &str, name: &str, uid: &str| {
        format!("IgnoreUnknown=true;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID=sb;K8S_POD_UID={uid}")
    };
    let mut c0 = lab.conf("1.0.0", 0);
    c0["pkey"] = json!("0x8001");
    c0["runtimeConfig"] = json!({"infinibandGUID": "02:00:00:00:00:00:41:00"});
    let a0 = args("team-a", "trainer-0", "uid-0");
    lab.run("ADD", "sb0", pod.netns(), &c0, &[("CNI_ARGS", a0.as_str())])
        .expect_ok();
    let mut c1 = lab.conf("1.0.0", 1);
    c1["pkey"] = json!("0x8005");
    let a1 = args("team-a", "trainer-1", "uid-1");
    let pod1 = lab.host.new_pod();
    lab.run(
        "ADD",
        "sb1",
        pod1.netns(),
        &c1,
        &[("CNI_ARGS", a1.as_str())],
    )
    .expect_ok();
    let pod2 = lab.host.new_pod();
    lab.add("plain", &pod2, &lab.conf("1.0.0", 2)).expect_ok();

    let j0: Value =
        serde_json::from_slice(&std::fs::read(lab.state.join("sb0:net1")).unwrap()).unwrap();
    assert_eq!(
        j0["pod"],
        json!({"namespace": "team-a", "name": "trainer-0", "uid": "uid-0"})
    );
    assert_eq!(j0["guid"], "02:00:00:00:00:00:41:00");
    assert_eq!(j0["conf"]["pkey"], "0x8001");
    assert_eq!(j0["network"], "ibnet");

    let before = (lab.host.snapshot(), lab.journals());
    let (j, rc) = check_golden(&lab, &h, "per-attachment");
    assert_eq!(rc, 0);
    assert_eq!((lab.host.snapshot(), lab.journals()), before, "read-only");
    let a = j["attachments"].as_array().unwrap();
    assert_eq!(a.len(), 3, "{a:?}");
    let by = |att: &str| a.iter().find(|x| x["attachment"] == att).unwrap().clone();
    let x0 = by("sb0/net1");
    assert_eq!(x0["pod"], "team-a/trainer-0");
    assert_eq!(x0["podUid"], "uid-0");
    assert_eq!(x0["vf"], lab.host.vf(0).addr);
    assert_eq!(x0["guid"], "02:00:00:00:00:00:41:00");
    assert_eq!(x0["pfPortGuid"], common::emuhost::PF_PORT_GUID);
    assert_eq!(x0["pkey"], "0x8001");
    assert_eq!(x0["pkeyInTable"], true);
    assert_eq!(x0["rdmaDevice"], lab.host.vf(0).rdma.clone().unwrap());
    let x1 = by("sb1/net1");
    assert_eq!(x1["pkey"], "0x8005");
    assert_eq!(x1["pkeyInTable"], false);
    assert_eq!(
        x1["guid"],
        lab.host.vf(1).port_guid.clone().unwrap(),
        "kept"
    );
    let x2 = by("plain/net1");
    assert!(x2["pod"].is_null() && x2["pkey"].is_null() && x2["pkeyInTable"].is_null());
    assert_eq!(j["vfs"][0]["pkeys"], json!(["0xffff", "0x8001"]));
    lab.run("DEL", "sb0", pod.netns(), &c0, &[("CNI_ARGS", a0.as_str())])
        .expect_ok();
    lab.run(
        "DEL",
        "sb1",
        pod1.netns(),
        &c1,
        &[("CNI_ARGS", a1.as_str())],
    )
    .expect_ok();
    lab.del("plain", pod2.netns(), &lab.conf("1.0.0", 2))
        .expect_ok();
}

/// Every finding the emulated host can produce, at once: a VF held twice (our journal
/// and a Go cache file), a journal naming a VF bound to vfio-pci while it attached a
/// netdev, a zero GUID under ibKubernetesEnabled, duplicate GUIDs across two VFs, a
/// bound VF without netdev, allocations of another boot and without attachment, an
/// unreadable journal (garbage), an oversized one, a FIFO in place of a journal and of
/// a sysfs attribute; and `--conf` refusing a configuration ADD would refuse. Hostile
/// files give findings, not a crash; exit 1.
#[test]
fn doctor_reports_each_finding_and_survives_hostile_files() {
    let (lab, h) = with_root(vfio_lab(3));
    let pod = lab.host.new_pod();
    lab.add("twice", &pod, &lab.conf("1.0.0", 0)).expect_ok();
    // Held twice: a Go cache file for the same VF 0 (the fixture's VF 0).
    let go = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/go-cache/ib-sriov")
        .join("7075bb54a2a9b66e19396ad85e55f07510cc5a7d73595e94d0dfc36088eeb330-net1");
    std::fs::copy(&go, h.go_cache.join(go.file_name().unwrap())).unwrap();
    // A journal edited to claim vfio VF 3 as a netdev attachment with ib-kubernetes.
    let mut jv: Value =
        serde_json::from_slice(&std::fs::read(lab.state.join("twice:net1")).unwrap()).unwrap();
    jv["containerId"] = json!("edited");
    jv["vf"] = json!(lab.host.vf(3).addr);
    jv["conf"]["ibKubernetesEnabled"] = json!(true);
    std::fs::write(lab.state.join("edited:net1"), jv.to_string()).unwrap();
    // VF 3's GUIDs zero; VF 1 and VF 2 share a GUID.
    for (vf, g) in [
        (3, "00:00:00:00:00:00:00:00"),
        (1, "02:00:00:00:00:00:77:77"),
        (2, "02:00:00:00:00:00:77:77"),
    ] {
        let v = lab.host.vf(vf);
        for p in [v.ofed_node(), v.ofed_port()] {
            std::fs::write(p.unwrap(), format!("{g}\n")).unwrap();
        }
    }
    // VF 2 (bound to mlx5_core) loses its netdev.
    let peer = lab.host.vf(2).peer.clone().unwrap();
    lab.host.host_ip(&["link", "del", &peer]);
    lab.host.sync_netdevs().unwrap();
    // IPAM: the marker names another boot; a record without attachment.
    let store = lab.data.join("ibnet");
    std::fs::write(
        store.join("boot_id"),
        "00000000-0000-4000-8000-000000000000\n",
    )
    .unwrap();
    std::fs::write(store.join("10.56.217.99"), "nobody\r\nnet9").unwrap();
    // Hostile journals and sysfs.
    std::fs::write(lab.state.join("garbage:net1"), "{not json").unwrap();
    std::fs::write(lab.state.join("huge:net1"), vec![b' '; 9 << 20]).unwrap();
    nix::unistd::mkfifo(
        &lab.state.join("fifo:net1"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let numvfs = lab.host.pf().dir.join("sriov_numvfs");
    std::fs::remove_file(&numvfs).unwrap();
    nix::unistd::mkfifo(&numvfs, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let conf = h.path().join("bad.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion":"1.0.0","name":"ibnet","plugins":[{"type":"ib-sriov","link_state":"sideways"}]}"#,
    )
    .unwrap();

    let (j, rc) = check_golden(&lab, &h, "findings");
    assert_eq!(rc, 1, "an error finding makes the exit status 1");
    let c = codes(&j);
    for want in [
        "error vf-held-twice",
        "error vfio-under-netdev-attachment",
        "error zero-guid",
        "error duplicate-guid",
        "error journal-unreadable",
        // VF 2 has no netdev and no holder, but unusable journals might hold it.
        "warning holder-unknown",
        "warning allocations-of-another-boot",
        "warning ipam-orphans",
    ] {
        assert!(c.iter().any(|x| x == want), "{want} missing from {c:?}");
    }
    assert_eq!(
        c.iter()
            .filter(|x| *x == "error journal-unreadable")
            .count(),
        3,
        "garbage, oversized and FIFO journals: {c:?}"
    );
    assert_eq!(
        j["pfs"][0]["numVfs"],
        Value::Null,
        "a FIFO attribute reads as unknown"
    );
    // --conf: the refusal ADD would give, as an error finding.
    let out = doctor(&lab, &h, &["--json", "--conf", &conf.display().to_string()]);
    let jc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jc["conf"][0]["ok"], false, "{jc}");
    assert!(
        jc["conf"][0]["error"]
            .as_str()
            .unwrap()
            .contains("link_state"),
        "{jc}"
    );
    assert!(codes(&jc).contains(&"error conf-invalid".to_string()));
    for p in ["garbage:net1", "huge:net1", "fifo:net1", "edited:net1"] {
        std::fs::remove_file(lab.state.join(p)).unwrap();
    }
    lab.del("twice", pod.netns(), &lab.conf("1.0.0", 0))
        .expect_ok();
}

/// VFs without a GUID (docs/configuration.md "VFs without a GUID"): per VF, the GUID the operator's file
/// gives it and the one `deriveGuid` would give it. Four node states, each a golden:
/// - `guids-file`: a file whose entry for the PF (by pciAddress) lists two GUIDs: VFs 0
///   and 1 get theirs (info), VFs 2 and 3 are past the end of the list (error);
/// - `guids-range`: an entry by pfGuid with a range: every VF gets start + N;
/// - `guids-derived`: no file: every VF without a GUID is a warning naming its derived
///   GUID, which equals the rule computed here and what ADD then sets;
/// - `guids-invalid`: an invalid file: one error naming the file and the entry.
#[test]
fn doctor_shows_the_guid_each_vf_without_one_would_get() {
    let (lab, h) = with_root(Lab::new(EmuOptions {
        vfio: vec![3],
        zero_guids: true,
        ..EmuOptions::default()
    }));
    let file = h.path().join("etc/sriov-operator/infiniband/guids");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        &file,
        json!([{"pciAddress": common::emuhost::PF_BDF, "guids": ["02:00:00:00:00:00:01:00", "02:00:00:00:00:00:01:01"]}]).to_string(),
    )
    .unwrap();
    let (j, rc) = check_golden(&lab, &h, "guids-file");
    assert_eq!(rc, 1, "VFs 2 and 3 cannot get a GUID: an error");
    assert_eq!(j["guidFile"]["state"], "valid");
    assert_eq!(j["vfs"][1]["fileGuid"], "02:00:00:00:00:00:01:01");
    assert_eq!(j["vfs"][1]["fileEntry"], 0);
    let c = codes(&j);
    assert_eq!(
        c.iter()
            .filter(|x| *x == "error guid-file-exhausted")
            .count(),
        2,
        "{c:?}"
    );
    assert_eq!(
        c.iter().filter(|x| *x == "info vf-guid-from-file").count(),
        2,
        "{c:?}"
    );

    // A range by pfGuid (the PF's port GUID): every VF gets start + N.
    std::fs::write(
        &file,
        json!([{"pfGuid": common::emuhost::PF_PORT_GUID, "guidsRange": {"start": "02:00:00:00:00:aa:00:00", "end": "02:00:00:00:00:aa:00:07"}}]).to_string(),
    )
    .unwrap();
    let (j, rc) = check_golden(&lab, &h, "guids-range");
    assert_eq!(rc, 0);
    assert_eq!(j["vfs"][3]["fileGuid"], "02:00:00:00:00:aa:00:03");
    assert_eq!(
        codes(&j)
            .iter()
            .filter(|x| *x == "info vf-guid-from-file")
            .count(),
        4
    );

    // No file (another path): every VF gets a warning with its derived GUID.
    let (j, rc) = check_golden_with(&lab, &h, "guids-derived", &["--guid-file", "/nowhere"]);
    assert_eq!(rc, 0);
    assert_eq!(j["guidFile"]["state"], "absent");
    assert_eq!(j["pfs"][0]["portGuid"], common::emuhost::PF_PORT_GUID);
    for n in 0..4u32 {
        let want = common::guid::derived_guid(common::emuhost::PF_PORT_GUID, n);
        assert_eq!(j["vfs"][n as usize]["derivedGuid"], want.as_str());
    }
    assert_eq!(
        codes(&j)
            .iter()
            .filter(|x| *x == "warning vf-guid-unset")
            .count(),
        4
    );
    // ADD with deriveGuid sets exactly what the doctor showed; DEL keeps it, and the
    // doctor then has nothing to say about VF 2.
    let shown = j["vfs"][2]["derivedGuid"].as_str().unwrap().to_string();
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("1.0.0", 2);
    conf["deriveGuid"] = json!(true);
    // No such file, in a root the node policy allows.
    conf["guidFile"] = json!("/run/ib-sriov-tests-no-guid-file");
    lab.add("c1", &pod, &conf).expect_ok();
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(lab.read(lab.host.vf(2).ofed_node()), shown);
    let out = doctor(&lab, &h, &["--json", "--guid-file", "/nowhere"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["vfs"][2]["nodeGuid"], shown.as_str());
    assert!(!j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["subject"] == lab.host.vf(2).addr.as_str()));

    // An invalid file: one error naming it and the entry.
    std::fs::write(&file, r#"[{"pciAddress":"0000:af:00.0","guids":["02:00:00:00:00:00:01:00"],"rangeStart":"02:00:00:00:00:00:01:00"}]"#).unwrap();
    let (j, rc) = check_golden(&lab, &h, "guids-invalid");
    assert_eq!(rc, 1);
    assert_eq!(j["guidFile"]["state"], "invalid");
    let f: Vec<&Value> = findings(&j, &["guid-file-invalid"]);
    assert_eq!(f.len(), 1, "{j}");
    assert_eq!(f[0]["subject"], "/etc/sriov-operator/infiniband/guids");
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("entry 0: either a guid list or a guid range should be provided, got both"),
        "{}",
        f[0]
    );
}

/// `doctor --conf` and ADD agree (issue 30): a table of broken configurations, each run
/// through ADD on the emulated host and through `doctor --conf`. A configuration ADD
/// refuses is `conf-invalid` with exactly ADD's code and message; one ADD accepts with a
/// warning (a typo of a key) is valid with `conf-unknown-key` naming the same key and
/// its near miss, and ADD's log has the same words. The table, with both answers, is the
/// golden file `conf-table.txt`.
#[test]
fn doctor_conf_and_add_agree_on_broken_configurations() {
    let (lab, h) = with_root(Lab::default());
    let pod = lab.host.new_pod();
    let vf = lab.host.vf(1).addr.clone();
    let base = || {
        let mut c = lab.conf("1.0.0", 1);
        c["logLevel"] = json!("warn");
        c
    };
    let vf2 = lab.host.vf(2);
    for f in [vf2.ofed_node(), vf2.ofed_port()] {
        std::fs::write(f.unwrap(), "00:00:00:00:00:00:00:00\n").unwrap();
    }
    // The base configuration with `kv` set.
    let with = |kv: &[(&str, Value)]| {
        let mut c = base();
        for (k, v) in kv {
            c[*k] = v.clone();
        }
        c
    };
    let zero_guid_vf = || {
        let mut c = lab.conf("1.0.0", 2);
        c["logLevel"] = json!("warn");
        c["guidFile"] = json!(lab.host.root().join("no-guid-file"));
        c
    };
    // The same file for ADD (the real path) and the doctor (under the host root).
    let bad_guid_file = lab.host.root().join("guids");
    std::fs::write(&bad_guid_file, "[{\"pciAddress\": 7}]").unwrap();
    // A copy at the same path under the host root (a link to its own absolute path
    // would be a loop under the host root); `no-guid-file` is absent in both.
    let at = h.path().join(bad_guid_file.strip_prefix("/").unwrap());
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::copy(&bad_guid_file, &at).unwrap();
    let planted = tempfile::Builder::new()
        .prefix("ib-sriov-planted-")
        .tempdir()
        .unwrap();
    std::os::unix::fs::symlink("/etc", planted.path().join("out")).unwrap();
    mirror(h.path(), &planted.path().join("out"), Path::new("/etc"));
    let rows: Vec<(&str, Value)> = vec![
        ("link_state typo", with(&[("link_stat", json!("enable"))])),
        ("rdmaIsolation typo", with(&[("rdmaIsolaton", json!(true))])),
        (
            "ipam subnet typo",
            with(&[(
                "ipam",
                json!({"type": "ib-sriov-ipam", "subnt": "10.56.217.0/24", "dataDir": lab.data}),
            )]),
        ),
        (
            "device that does not exist",
            with(&[("deviceID", json!("0000:af:0f.7"))]),
        ),
        (
            "vfioPciMode on a netdev VF",
            with(&[("vfioPciMode", json!(true))]),
        ),
        ("pkey out of range", with(&[("pkey", json!("0x1ffff"))])),
        (
            "delegated IPAM that is not installed (a typo)",
            with(&[(
                "ipam",
                json!({"type": "whereabout", "range": "10.56.217.0/24"}),
            )]),
        ),
        ("dhcp IPAM", with(&[("ipam", json!({"type": "dhcp"}))])),
        ("ipam range outside its subnet", {
            let mut c = base();
            c["ipam"]["rangeStart"] = json!("10.99.0.10");
            c
        }),
        // The node policy (src/policy.rs): a path outside the roots, a link planted in an
        // allowed root that leads out (in both views: the machine and the host root),
        // and a logFile outside them (a warning, not a refusal).
        (
            "stateDir outside the node policy",
            with(&[("stateDir", json!("/etc/ib-sriov-doctor-probe"))]),
        ),
        ("ipam.dataDir through a link out of an allowed root", {
            let mut c = base();
            c["ipam"]["dataDir"] = json!(planted.path().join("out/ipam"));
            c
        }),
        // Every warning ADD logs (src/plugin/add.rs device_warnings, the IPAM
        // configuration's, the parser's), each a row.
        (
            "relative logFile",
            with(&[("logFile", json!("ib-sriov.log"))]),
        ),
        (
            "pkey not in the VF's pkey table",
            with(&[("pkey", json!("0x8005"))]),
        ),
        ("pkey with base key 0", with(&[("pkey", json!("0x8000"))])),
        (
            "pkeyWaitMs without pkey",
            with(&[("pkeyWaitMs", json!(500))]),
        ),
        (
            "pkeyWaitMs past its bound",
            with(&[("pkey", json!("0x8002")), ("pkeyWaitMs", json!(60_001))]),
        ),
        (
            "pkeyWaitMs with the pkey in the VF's pkey table",
            with(&[("pkey", json!("0x8002")), ("pkeyWaitMs", json!(500))]),
        ),
        (
            "top-level rangeStart without a top-level subnet",
            with(&[(
                "ipam",
                json!({"type": "ib-sriov-ipam", "rangeStart": "10.56.217.10",
                    "ranges": [[{"subnet": "10.56.217.0/24"}]], "dataDir": lab.data}),
            )]),
        ),
        (
            "top-level guid",
            with(&[("guid", json!("02:00:00:00:00:00:00:42"))]),
        ),
        (
            "deviceID and pciBusID disagree",
            with(&[("pciBusID", json!(lab.host.vf(3).addr))]),
        ),
        // Every error, not only the first (ADD answers the first).
        (
            "three bad keys and a stateDir outside the node policy",
            with(&[
                ("pkey", json!("0x1ffff")),
                ("link_state", json!("sideways")),
                ("rdmaIsolation", json!("yes")),
                ("stateDir", json!("/etc/ib-sriov-doctor-probe")),
            ]),
        ),
        (
            "logFile outside the node policy",
            with(&[("logFile", json!("/etc/ib-sriov-doctor-probe.log"))]),
        ),
        // The GUID rule, on VF 2 whose GUID is all-zero (in this order: the last row
        // gives it the derived GUID, which it keeps).
        ("VF without a GUID, malformed guidFile", {
            let mut c = zero_guid_vf();
            c["guidFile"] = json!(bad_guid_file);
            c
        }),
        (
            "VF without a GUID, no guidFile entry, no deriveGuid",
            zero_guid_vf(),
        ),
        ("VF without a GUID, deriveGuid", {
            let mut c = zero_guid_vf();
            c["deriveGuid"] = json!(true);
            c
        }),
    ];
    let mut table = String::new();
    for (i, (name, conf)) in rows.iter().enumerate() {
        let cid = format!("t{i}");
        let add = lab.add(&cid, &pod, conf);
        let add_text = if add.ok {
            lab.del(&cid, pod.netns(), conf).expect_ok();
            "valid".to_string()
        } else {
            format!(
                "code {}: {}",
                add.json["code"],
                add.json["msg"].as_str().unwrap()
            )
        };
        let f = h.path().join(format!("conf-{i}.json"));
        std::fs::write(&f, conf.to_string()).unwrap();
        let out = doctor(&lab, &h, &["--json", "--conf", &f.display().to_string()]);
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        let check = &j["conf"][0];
        let doc_text = if check["ok"] == true {
            "valid".to_string()
        } else {
            check["error"].as_str().unwrap().to_string()
        };
        // The same sysfs, reached through the host root by the doctor.
        // ADD's CNI_PATH is the test binary's directory; the doctor's the two usual
        // directories (the host root has no containerd or CRI-O configuration).
        let bin_dir = bin().parent().unwrap().display().to_string();
        let sys_text = |t: &str| {
            t.replace(&h.path().join("sys").display().to_string(), "<SYS>")
                .replace(&lab.host.root().display().to_string(), "<SYS>")
                .replace(&bin_dir, "<CNI_PATH>")
                .replace("/opt/cni/bin:/var/lib/cni/bin", "<CNI_PATH>")
        };
        let (doc_text, add_text) = (sys_text(&doc_text), sys_text(&add_text));
        assert_eq!(doc_text, add_text, "{name}: doctor and ADD disagree");
        let warnings: Vec<String> = findings(&j, &["conf-unknown-key", "conf-warning"])
            .into_iter()
            .map(|f| two_fields(f, "code", "message"))
            .collect();
        for w in &warnings {
            let words = w.split_once(": ").unwrap().1;
            let words = words.split("; logging to").next().unwrap();
            assert!(
                add.stderr.contains(words),
                "{name}: ADD's log lacks {words:?}: {}",
                add.stderr
            );
        }
        table.push_str(&format!("{name}\n  ADD and doctor: {add_text}\n"));
        // The errors after ADD's answer: one conf-invalid finding each.
        let errors: Vec<String> = findings(&j, &["conf-invalid"])
            .into_iter()
            .map(|f| {
                let m = f["message"].as_str().unwrap();
                sys_text(m.split_once(": ").unwrap().1)
            })
            .collect();
        assert_eq!(errors.is_empty(), add.ok, "{name}: {errors:?}");
        if let Some(first) = errors.first() {
            assert_eq!(first, &add_text, "{name}: the first error is ADD's answer");
        }
        for e in errors.iter().skip(1) {
            table.push_str(&format!("  doctor, also: {e}\n"));
        }
        for w in warnings {
            table.push_str(&format!("  doctor: {w}\n"));
        }
    }
    // RDMA exclusive netns mode (the fail point `doctor.rdma_netns_mode` stands in for
    // the RDMA subsystem this machine lacks), with rdma-cni chained after ib-sriov or
    // not, `rdmaIsolation` from the network or from the node file's defaults. Doctor
    // only: libcni hands each plugin of a chain its own configuration, so ADD cannot see
    // the chain.
    let chain = |entry: Value| {
        let mut e = entry;
        let o = e.as_object_mut().unwrap();
        o.remove("name");
        o.remove("cniVersion");
        json!({"cniVersion": "1.0.0", "name": "ibnet", "plugins": [e, {"type": "rdma"}]})
    };
    let isolated = || with(&[("rdmaIsolation", json!(true))]);
    let machine_node_file: Value =
        serde_json::from_slice(&std::fs::read("/etc/ib-sriov/node.json").unwrap()).unwrap();
    let mut with_default = machine_node_file.clone();
    with_default["defaults"] = json!({"rdmaIsolation": true});
    let rdma_rows: Vec<(&str, Value, Option<&Value>)> = vec![
        ("ib-sriov alone, no rdmaIsolation", base(), None),
        (
            "rdma chained after ib-sriov, no rdmaIsolation",
            chain(base()),
            None,
        ),
        (
            "rdma chained after ib-sriov, rdmaIsolation true",
            chain(isolated()),
            None,
        ),
        ("ib-sriov alone, rdmaIsolation true", isolated(), None),
        (
            "ib-sriov alone, node default rdmaIsolation true",
            base(),
            Some(&with_default),
        ),
        (
            "rdma chained after ib-sriov, node default rdmaIsolation true",
            chain(base()),
            Some(&with_default),
        ),
        (
            "rdma chained after ib-sriov, rdmaIsolation false beats the node default",
            chain(with(&[("rdmaIsolation", json!(false))])),
            Some(&with_default),
        ),
    ];
    let node_dir = h.path().join("etc/ib-sriov");
    for (i, (name, conf, node)) in rdma_rows.iter().enumerate() {
        // The node file under the host root: the machine's (a link), or a copy of it
        // with `defaults`.
        std::fs::remove_file(&node_dir)
            .or_else(|_| std::fs::remove_dir_all(&node_dir))
            .unwrap();
        match node {
            Some(n) => {
                std::fs::create_dir(&node_dir).unwrap();
                std::fs::write(node_dir.join("node.json"), n.to_string()).unwrap();
            }
            None => std::os::unix::fs::symlink("/etc/ib-sriov", &node_dir).unwrap(),
        }
        let f = h.path().join(format!("conf-rdma-{i}.json"));
        std::fs::write(&f, conf.to_string()).unwrap();
        let (b, hr, st) = (
            bin().display().to_string(),
            h.path().display().to_string(),
            lab.state.display().to_string(),
        );
        let out = lab.host.host_exec(&[
            "env",
            "IB_SRIOV_FAILPOINTS=doctor.rdma_netns_mode=exclusive",
            &b,
            "doctor",
            "--host-root",
            &hr,
            "--state-dir",
            &st,
            "--json",
            "--conf",
            &f.display().to_string(),
        ]);
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["node"]["rdmaNetnsMode"], "exclusive");
        let defaults = &j["nodeFile"]["defaults"];
        assert_eq!(defaults["rdmaIsolation"] == true, node.is_some(), "{j}");
        let check = &j["conf"][0];
        let verdict = if check["ok"] == true {
            "valid".to_string()
        } else {
            format!("refused: {}", check["error"].as_str().unwrap())
        };
        table.push_str(&format!(
            "RDMA exclusive mode: {name}{}\n  doctor only: {verdict}\n",
            if node.is_some() {
                format!(" (node file defaults {defaults})")
            } else {
                String::new()
            }
        ));
        for f in j["findings"].as_array().unwrap() {
            let code = f["code"].as_str().unwrap();
            if code.starts_with("conf-") {
                table.push_str(&format!(
                    "  doctor: {} {code} {}\n    fix: {}\n",
                    f["severity"].as_str().unwrap(),
                    f["message"].as_str().unwrap(),
                    f["fix"].as_str().unwrap()
                ));
            }
        }
        let status = out.status.code().unwrap();
        assert_eq!(
            status,
            i32::from(verdict != "valid"),
            "{name}: exit {status}"
        );
    }
    std::fs::remove_file(&node_dir)
        .or_else(|_| std::fs::remove_dir_all(&node_dir))
        .unwrap();
    std::os::unix::fs::symlink("/etc/ib-sriov", &node_dir).unwrap();
    let table = table
        .replace(&planted.path().display().to_string(), "<PLANTED>")
        .replace(&vf, "<VF>")
        .replace(&lab.data.display().to_string(), "<DATA>")
        .replace(&lab.host.root().display().to_string(), "<EMU>");
    golden("conf-table.txt", &table);
    assert_no_state(&lab);
}

/// `ib-sriov --help` names the doctor and the binary it is in (issue 30: an admin finds
/// it from the binary; issue 53: the node tools' own binary), and `ib-sriov doctor
/// --help` gives its synopsis.
#[test]
fn help_lists_doctor() {
    let out = run_bin(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_has_all(&text, &["`ib-sriov doctor`", "ib-sriovctl"]);
    let out = run_bin(&["doctor", "--help"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_has_all(&text, &["usage: ib-sriov doctor [--json] [--conf FILE]"]);
    let out = std::process::Command::new(common::lab::tools_bin())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_has_all(
        &text,
        &["ib-sriov doctor [--json] [--conf FILE]", "read-only"],
    );
}

/// Rollback readiness (issue 50), a golden (`rollback.txt`/`.json`) on seven VFs, each
/// attachment live (its pod netns there, its netdev in it):
/// - `nofile` (VF 0): its ADD wrote no Go plugin cache file (`goCacheDir` `""`);
/// - `removed` (VF 1): its file removed by hand;
/// - `corrupt` (VF 2): its file overwritten with garbage;
/// - `unreadable` (VF 3): a directory in its file's place;
/// - `foreign` (VF 4): its file replaced by another attachment's (`ready`'s, VF 5).
///
/// Each is `rollback-unready`, an error (exit 1), whose fix names the heal and the
/// command by hand; `ready` (VF 5), its file as ADD wrote it, has no finding; `undone`
/// (VF 6), its pod deleted by the Go plugin's DEL (played from its cache file as
/// tests/go_rollback.rs plays it: netdev back under its name, down), is `undone-by-go`
/// (info), and only it.
#[test]
fn doctor_reports_rollback_readiness() {
    let (lab, h) = with_root(Lab::new(EmuOptions {
        vfs: 7,
        ..Default::default()
    }));
    let names = [
        "nofile",
        "removed",
        "corrupt",
        "unreadable",
        "foreign",
        "ready",
        "undone",
    ];
    let pods: Vec<_> = names.iter().map(|_| lab.host.new_pod()).collect();
    let confs: Vec<Value> = (0..names.len() as u32)
        .map(|n| {
            let mut c = lab.conf("1.0.0", n);
            match n {
                0 => c["goCacheDir"] = json!(""),
                // No IPAM: the Go DEL played below runs none.
                6 => {
                    c.as_object_mut().unwrap().remove("ipam");
                }
                _ => {}
            }
            c
        })
        .collect();
    for (k, name) in names.iter().enumerate() {
        lab.add(name, &pods[k], &confs[k]).expect_ok();
    }
    let file = |n: &str| h.go_cache.join(format!("{n}-net1"));
    std::fs::remove_file(file("removed")).unwrap();
    std::fs::write(file("corrupt"), "{\"deviceID\": trunc").unwrap();
    std::fs::remove_file(file("unreadable")).unwrap();
    std::fs::create_dir(file("unreadable")).unwrap();
    std::fs::copy(file("ready"), file("foreign")).unwrap();
    common::gofix::go_del(
        &lab,
        &json!({"containerID": "undone"}),
        &pods[6],
        &confs[6],
        &file("undone"),
    );
    lab.host.sync_netdevs().unwrap();
    let (j, rc) = check_golden(&lab, &h, "rollback");
    assert_eq!(rc, 1, "rollback-unready is an error");
    let find = |code: &str| -> Vec<String> {
        findings(&j, &[code])
            .into_iter()
            .map(|f| two_fields(f, "severity", "subject"))
            .collect()
    };
    let vf = |n: u32| lab.host.vf(n).addr.clone();
    assert_eq!(
        find("rollback-unready"),
        (0..5)
            .map(|n| format!("error {}", vf(n)))
            .collect::<Vec<_>>()
    );
    assert_eq!(find("undone-by-go"), vec![format!("info {}", vf(6))]);
    let unready = findings(&j, &["rollback-unready"]);
    assert!(
        unready[1]["message"]
            .as_str()
            .unwrap()
            .contains("is missing")
            && unready[1]["fix"].as_str().unwrap().contains("next CNI GC"),
        "{j}"
    );
    for (k, name) in names.iter().enumerate() {
        if k == 3 {
            std::fs::remove_dir(file(name)).unwrap();
        }
        lab.del(name, pods[k].netns(), &confs[k]).expect_ok();
    }
    assert!(lab.journals().is_empty());
}

/// A `--host-root` that is not there is an error (exit 2, naming it), not an empty node;
/// a root with no SR-IOV PF says plainly that there was nothing to check.
#[test]
fn doctor_refuses_a_missing_host_root_and_says_when_there_is_nothing_to_check() {
    let out = run_bin(&["doctor", "--host-root", "/nonexistent-ib-sriov-host-root"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent-ib-sriov-host-root"),
        "{out:?}"
    );
    let empty = tempfile::tempdir().unwrap();
    let out = run_bin(&["doctor", "--host-root", empty.path().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_has_all(&text, &["info    nothing-to-check", ": nothing to check"]);
}

/// `--conf` looks a delegated IPAM plugin up as ADD does in `CNI_PATH`, where the node's
/// runtime looks (issue 50: the default `/opt/cni/bin` told OpenShift users, whose CNI
/// directory is `/var/lib/cni/bin`, to install a plugin that was there): without a
/// containerd or CRI-O configuration under the host root in `/opt/cni/bin` and
/// `/var/lib/cni/bin`; else in the directories that configuration names; or in
/// `--cni-path` (under the host root too). `conf-ipam-plugin` says where it looked and
/// where it found the plugin.
#[test]
fn doctor_conf_looks_up_the_delegated_ipam_plugin() {
    let (lab, h) = with_root(Lab::default());
    mirror(
        h.path(),
        Path::new("/usr/lib/cni"),
        Path::new("/usr/lib/cni"),
    );
    let mut c = lab.conf("1.0.0", 0);
    c["ipam"] = json!({"type": "host-local", "subnet": "10.56.217.0/24"});
    let f = h.path().join("conf-hl.json");
    std::fs::write(&f, c.to_string()).unwrap();
    let f = f.display().to_string();
    let check = |extra: &[&str]| -> (Value, String) {
        let mut args = vec!["--json", "--conf", f.as_str()];
        args.extend_from_slice(extra);
        let out = doctor(&lab, &h, &args);
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        let lookup = findings(&j, &["conf-ipam-plugin"])
            .iter()
            .map(|f| f["message"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join("\n");
        (j["conf"][0].clone(), lookup)
    };
    // The plugin only in OpenShift's directory: found there.
    let oc = h.path().join("var/lib/cni/bin");
    std::fs::create_dir_all(&oc).unwrap();
    std::fs::copy("/usr/lib/cni/host-local", oc.join("host-local")).unwrap();
    let (found, lookup) = check(&[]);
    assert_eq!(found["ok"], true, "{found}");
    assert!(
        lookup.starts_with("network ibnet: delegated ipam plugin \"host-local\" found at /var/lib/cni/bin/host-local; looked up in /opt/cni/bin "),
        "{lookup}"
    );
    // Nowhere: both directories named.
    std::fs::remove_file(oc.join("host-local")).unwrap();
    let (none, lookup) = check(&[]);
    assert_eq!(none["ok"], false, "{none}");
    assert_eq!(
        none["error"],
        "code 7: ipam plugin \"host-local\" not found in CNI_PATH (/opt/cni/bin:/var/lib/cni/bin); install it there or use another ipam type"
    );
    assert_eq!(
        lookup,
        "network ibnet: delegated ipam plugin \"host-local\" not found; looked up in /opt/cni/bin (no containerd or CRI-O configuration found: the CNI default), /var/lib/cni/bin (no containerd or CRI-O configuration found: OpenShift's)"
    );
    std::fs::copy("/usr/lib/cni/host-local", oc.join("host-local")).unwrap();
    // The node's containerd names another directory: only it is searched.
    h.write(
        "/etc/containerd/config.toml",
        "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = ['/usr/lib/cni']\n",
    );
    let (found, lookup) = check(&[]);
    assert_eq!(found["ok"], true, "{found}");
    assert_eq!(
        lookup,
        "network ibnet: delegated ipam plugin \"host-local\" found at /usr/lib/cni/host-local; looked up in /usr/lib/cni (containerd /etc/containerd/config.toml plugins.\"io.containerd.cri.v1.runtime\".cni.bin_dirs)"
    );
    h.write("/etc/containerd/config.toml", "version = 2\n");
    let (none, _) = check(&[]);
    assert_eq!(
        none["error"],
        "code 7: ipam plugin \"host-local\" not found in CNI_PATH (/opt/cni/bin); install it there or use another ipam type"
    );
    // CRI-O's drop-in names OpenShift's directory.
    std::fs::remove_file(h.path().join("etc/containerd/config.toml")).unwrap();
    h.write(
        "/etc/crio/crio.conf.d/00-default",
        "[crio.network]\nplugin_dirs = [\"/var/lib/cni/bin\", \"/usr/libexec/cni\"]\n",
    );
    let (found, lookup) = check(&[]);
    assert_eq!(found["ok"], true, "{found}");
    assert!(
        lookup.contains("found at /var/lib/cni/bin/host-local; looked up in /var/lib/cni/bin (CRI-O /etc/crio/crio.conf.d/00-default crio.network.plugin_dirs)"),
        "{lookup}"
    );
    let (found, lookup) = check(&["--cni-path", "/nonexistent:/usr/lib/cni"]);
    assert_eq!(found["ok"], true, "{found}");
    assert!(
        lookup.contains("looked up in /nonexistent (--cni-path), /usr/lib/cni (--cni-path)"),
        "{lookup}"
    );
}

/// `doctor --conf` shows every error and warning of a configuration in one run (issue
/// 50: `lockTimeoutMs: 0` hid the IPAM error, the unknown keys and the `logFile`
/// warning), ADD's answer first. A golden.
#[test]
fn doctor_conf_shows_every_error_and_warning() {
    let (lab, h) = with_root(Lab::default());
    let pod = lab.host.new_pod();
    let mut c = lab.conf("1.0.0", 1);
    c["lockTimeoutMs"] = json!(0);
    c["ipam"]["rangeStart"] = json!("10.99.0.10");
    c["ipam"]["routes"] = json!([{"dst": "nope"}]);
    c["link_stat"] = json!("enable");
    c["frobnicate"] = json!(1);
    c["logFile"] = json!("ib-sriov.log");
    let add = lab.add("every", &pod, &c);
    assert!(!add.ok);
    let f = h.path().join("conf-every.json");
    std::fs::write(&f, c.to_string()).unwrap();
    let (j, rc) = check_golden_with(
        &lab,
        &h,
        "conf-every-error",
        &["--conf", &f.display().to_string()],
    );
    assert_eq!(rc, 1);
    assert_eq!(
        j["conf"][0]["error"].as_str().unwrap(),
        format!(
            "code {}: {}",
            add.json["code"],
            add.json["msg"].as_str().unwrap()
        ),
        "the first error is ADD's answer"
    );
    let mut got: Vec<String> = findings(&j, &["conf-invalid", "conf-unknown-key", "conf-warning"])
        .iter()
        .map(|f| two_fields(f, "severity", "code"))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "error conf-invalid",
            "error conf-invalid",
            "error conf-invalid",
            "warning conf-unknown-key",
            "warning conf-unknown-key",
            "warning conf-warning"
        ],
        "{j}"
    );
    assert_no_state(&lab);
}

/// `doctor --conf` takes NetworkAttachmentDefinitions as admins have them (issue 50:
/// "not JSON"): a YAML file of two documents, each NAD checked by its `spec.config`
/// and reported by its `namespace/name`. The one with the built-in IPAM and no device
/// is `conf-node-local-range` (Multus runs it on every node). A golden.
#[test]
fn doctor_conf_reads_network_attachment_definitions() {
    let (lab, h) = with_root(Lab::default());
    let mut good = lab.conf("1.0.0", 1);
    good.as_object_mut().unwrap().remove("deviceID");
    good["name"] = json!("ib-rail");
    let mut bad = lab.conf("1.0.0", 2);
    bad["name"] = json!("ib-broken");
    bad["pkey"] = json!("0x1ffff");
    bad["link_state"] = json!("sideways");
    let yaml = format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: ib-rail\n  namespace: team-a\nspec:\n  config: '{}'\n---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: ib-broken\n  namespace: team-b\nspec:\n  config: |\n    {}\n",
        good,
        bad
    );
    let f = h.path().join("nads.yaml");
    std::fs::write(&f, yaml).unwrap();
    let (j, rc) = check_golden_with(&lab, &h, "conf-nad", &["--conf", &f.display().to_string()]);
    assert_eq!(rc, 1);
    let checks: Vec<String> = j["conf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {} {}",
                c["nad"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
                c["ok"]
            )
        })
        .collect();
    assert_eq!(
        checks,
        [
            "team-a/ib-rail ib-rail true",
            "team-b/ib-broken ib-broken false"
        ]
    );
    let subjects: Vec<String> = findings(&j, &["conf-invalid", "conf-node-local-range"])
        .iter()
        .map(|f| two_fields(f, "code", "subject"))
        .collect();
    assert_eq!(
        subjects,
        [
            "conf-invalid team-b/ib-broken",
            "conf-invalid team-b/ib-broken",
            "conf-node-local-range team-a/ib-rail"
        ]
    );
}

/// No `conf-node-local-range` on the per-node file the docs ship (issue 50:
/// `conf/multi-rail-same-subnet.conflist`, "one node's copy" in docs/configuration.md
/// "Multi-rail pods", was warned about): a file that is not a NetworkAttachmentDefinition
/// is one node's, with that node's own range. The same conflist as a NAD's spec.config,
/// which every node runs as it is, is warned about.
#[test]
fn doctor_conf_node_local_range_for_a_nad_not_for_a_node_file() {
    let (lab, h) = with_root(Lab::default());
    let shipped =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/multi-rail-same-subnet.conflist");
    let run = |p: &Path| -> Value {
        let out = doctor(&lab, &h, &["--json", "--conf", &p.display().to_string()]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let j = run(&shipped);
    assert_eq!(j["conf"][0]["ok"], true, "{j}");
    assert!(findings(&j, &["conf-node-local-range"]).is_empty(), "{j}");
    let text = std::fs::read_to_string(&shipped).unwrap();
    let nad = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "ib-rails", "namespace": "default"}, "spec": {"config": text}});
    let f = h.path().join("rails-nad.json");
    std::fs::write(&f, nad.to_string()).unwrap();
    let j = run(&f);
    let local: Vec<String> = findings(&j, &["conf-node-local-range"])
        .iter()
        .map(|f| two_fields(f, "severity", "subject"))
        .collect();
    assert_eq!(local, ["warning default/ib-rails"], "{j}");
}

/// Standard base64 with padding, as Go's `encoding/json` writes a `[]byte` (libcni's
/// cache `config`).
fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut o = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                o.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                o.push('=');
            }
        }
    }
    o
}

/// A libcni result cache entry (containernetworking/cni `libcni/api.go` `cachedInfo`,
/// commit 3f51e88) for attachment `cid`/net1 of configuration `conf`.
fn libcni_cache(cid: &str, conf: &Value) -> String {
    json!({
        "kind": "cniCacheV1",
        "containerId": cid,
        "config": base64(conf.to_string().as_bytes()),
        "ifName": "net1",
        "networkName": conf["name"],
        "result": {"cniVersion": "1.0.0"}
    })
    .to_string()
}

/// doctor never advises harm (issue 39): before it suggests a fix that touches a VF
/// (an unbind/bind), it accounts for every holder it can find. Three node states, each
/// a golden:
/// - `harm-held-elsewhere`: VFs 0, 1 and 2 are in pods under three stateDirs other than
///   the default and `--state-dir`: one named by a conflist in /etc/cni/net.d, one by a
///   Multus configuration in /etc/cni/multus/net.d, one only by Multus' libcni cache of
///   the attachment (a NetworkAttachmentDefinition's configuration). Each is shown held,
///   and nothing is `netdev-missing` (before, all three were, with an unbind/bind fix
///   that would pull them out of their live pods).
/// - `harm-holder-unknown`: VF 0's stateDir cannot be read (the runtime's cache names
///   the attachment, no journal or Go cache file answers), a file in /etc/cni/net.d names ib-sriov but is
///   not JSON, and VF 2 has lost its netdev: every VF without a netdev is
///   `holder-unknown`, with read-only advice, never an unbind/bind;
/// - `harm-accounted`: every source read and VF 2 free: it alone is `netdev-missing`,
///   with the rebind.
#[test]
fn doctor_never_advises_harm_to_a_vf_held_elsewhere() {
    let (lab, mut h) = with_root(Lab::default());
    let dir = |tag: &str| PathBuf::from(format!("{}-{tag}", lab.state.display()));
    let (netd, multus, nad, hidden) = (dir("netd"), dir("multus"), dir("nad"), dir("hidden"));
    for d in [&netd, &multus, &nad] {
        h.bind(d);
    }
    let conf = |vf: u32, state: &Path| {
        let mut c = lab.conf("1.0.0", vf);
        c["stateDir"] = json!(state);
        c
    };
    let (c0, c1, c2) = (conf(0, &netd), conf(1, &multus), conf(2, &nad));
    let pods = [lab.host.new_pod(), lab.host.new_pod(), lab.host.new_pod()];
    for (i, c) in [&c0, &c1, &c2].into_iter().enumerate() {
        lab.add(&format!("c{i}"), &pods[i], c).expect_ok();
    }
    // What names each stateDir on the node. The conflist without its deviceID, as a
    // network is written; Multus' configuration with the network as a delegate.
    let mut listed = c0.clone();
    listed.as_object_mut().unwrap().remove("deviceID");
    h.write(
        "/etc/cni/net.d/20-ib.conflist",
        &json!({"cniVersion": "1.0.0", "name": "ibnet", "plugins": [listed]}).to_string(),
    );
    h.write(
        "/etc/cni/multus/net.d/ib-multus.conf",
        &json!({"cniVersion": "1.0.0", "name": "multus", "type": "multus", "delegates": [c1]})
            .to_string(),
    );
    h.write(
        "/var/lib/cni/multus/results/ibnet-c2-net1",
        &libcni_cache("c2", &c2),
    );
    let (j, rc) = check_golden(&lab, &h, "harm-held-elsewhere");
    assert_eq!(rc, 0, "{j}");
    let c = codes(&j);
    assert!(
        !c.iter()
            .any(|x| x.ends_with("netdev-missing") || x.ends_with("holder-unknown")),
        "{c:?}"
    );
    for vf in 0..3 {
        assert_eq!(
            j["vfs"][vf]["holders"][0]["containerId"],
            format!("c{vf}"),
            "{j}"
        );
    }

    // VF 0 moves to a stateDir the doctor cannot see; a configuration file is broken;
    // VF 2 is released and loses its netdev.
    lab.del("c0", pods[0].netns(), &c0).expect_ok();
    // Without the Go cache copy ADD writes, which the doctor would find.
    let mut c0h = conf(0, &hidden);
    c0h["goCacheDir"] = json!("");
    lab.add("c0", &pods[0], &c0h).expect_ok();
    h.write(
        "/var/lib/cni/results/ibnet-c0-net1",
        &libcni_cache("c0", &c0h),
    );
    std::fs::remove_file(h.path().join("etc/cni/net.d/20-ib.conflist")).unwrap();
    h.write("/etc/cni/net.d/30-broken.conf", "{\"type\": \"ib-sriov\", ");
    lab.del("c2", pods[2].netns(), &c2).expect_ok();
    std::fs::remove_file(h.path().join("var/lib/cni/multus/results/ibnet-c2-net1")).unwrap();
    let peer = lab.host.vf(2).peer.clone().unwrap();
    lab.host.host_ip(&["link", "del", &peer]);
    lab.host.sync_netdevs().unwrap();
    let (j, _) = check_golden(&lab, &h, "harm-holder-unknown");
    let unknown: Vec<&Value> = findings(&j, &["holder-unknown"]);
    let subjects: Vec<&str> = unknown
        .iter()
        .map(|f| f["subject"].as_str().unwrap())
        .collect();
    assert_eq!(
        subjects,
        [lab.host.vf(0).addr.as_str(), lab.host.vf(2).addr.as_str()],
        "{j}"
    );
    assert!(
        !codes(&j).iter().any(|x| x.ends_with("netdev-missing")),
        "{j}"
    );
    for f in unknown {
        assert!(
            f["fix"].as_str().unwrap().starts_with("do not unbind/bind"),
            "{f}"
        );
    }

    // Everything read, VF 0 released: VF 2 alone gets the rebind.
    std::fs::remove_file(h.path().join("etc/cni/net.d/30-broken.conf")).unwrap();
    lab.del("c0", pods[0].netns(), &c0h).expect_ok();
    std::fs::remove_file(h.path().join("var/lib/cni/results/ibnet-c0-net1")).unwrap();
    lab.host.sync_netdevs().unwrap();
    let (j, _) = check_golden(&lab, &h, "harm-accounted");
    let missing: Vec<&Value> = findings(&j, &["netdev-missing", "holder-unknown"]);
    assert_eq!(missing.len(), 1, "{j}");
    assert_eq!(missing[0]["code"], "netdev-missing");
    assert_eq!(missing[0]["subject"], lab.host.vf(2).addr.as_str());
    lab.del("c1", pods[1].netns(), &c1).expect_ok();
    for d in [&netd, &multus, &nad, &hidden] {
        let left: Vec<_> = std::fs::read_dir(d)
            .map(|r| r.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            left.iter().all(|n| !n.to_string_lossy().contains(':')),
            "{d:?}: {left:?}"
        );
    }
    drop(h);
    for d in [&netd, &multus, &nad, &hidden] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `--state-dir` is repeatable and must be absolute.
#[test]
fn doctor_takes_state_dir_more_than_once_and_refuses_a_relative_one() {
    let out = run_bin(&["doctor", "--state-dir", "run/ib-sriov"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an absolute path"));
    let empty = tempfile::tempdir().unwrap();
    let out = run_bin(&[
        "doctor",
        "--json",
        "--state-dir",
        "/run/a",
        "--state-dir",
        "/run/b",
        "--host-root",
        empty.path().to_str().unwrap(),
    ]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let dirs: Vec<(&str, &str)> = j["holderSources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "stateDir")
        .map(|s| (s["path"].as_str().unwrap(), s["from"].as_str().unwrap()))
        .collect();
    assert_eq!(
        dirs,
        [
            ("/run/ib-sriov", "default"),
            ("/run/a", "--state-dir"),
            ("/run/b", "--state-dir")
        ]
    );
}

/// Node defaults that make ADD fail (issue 50): `{"defaults": {"rdmaIsolation": true}}`
/// in the node file while the RDMA netns mode is shared makes every ADD of a network
/// without the key fail with code 7, so plain doctor reports it as an error naming the
/// netdev VFs (not the vfio one: the node default does not apply in vfio mode) and
/// exits 1 (golden `node-default-shared`). In exclusive mode the default works (no
/// finding, exit 0) until a VF has no RDMA device (an error naming that VF only);
/// without defaults there is nothing to judge. On this machine (no RDMA subsystem, no
/// fail point) ADD itself, under the same node file, refuses with the very message
/// doctor shows: both run ADD's check. A vfio attachment made under the default is not
/// taken for one that asked for isolation. A default the node file cannot hold (a path,
/// an IPAM, a value of the wrong type) makes the file invalid: `node-file-invalid`.
#[test]
fn doctor_reports_node_defaults_that_make_add_fail() {
    let (lab, h) = with_root(vfio_lab(3));
    let machine: Value =
        serde_json::from_slice(&std::fs::read("/etc/ib-sriov/node.json").unwrap()).unwrap();
    let mut node = machine.clone();
    node["defaults"] = json!({"rdmaIsolation": true});
    // The node file under the host root: a copy of the machine's with `defaults`.
    let node_dir = h.path().join("etc/ib-sriov");
    std::fs::remove_file(&node_dir).unwrap();
    std::fs::create_dir(&node_dir).unwrap();
    let set_node = |v: &Value| std::fs::write(node_dir.join("node.json"), v.to_string()).unwrap();
    set_node(&node);
    let shared = ["IB_SRIOV_FAILPOINTS=doctor.rdma_netns_mode=shared"];
    let exclusive = ["IB_SRIOV_FAILPOINTS=doctor.rdma_netns_mode=exclusive"];
    let vfs = |n: &[u32]| -> String {
        n.iter()
            .map(|i| lab.host.vf(*i).addr.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };

    let (j, rc) = check_golden_env(&lab, &h, "node-default-shared", &shared, &[]);
    assert_eq!(rc, 1, "{j}");
    let f = findings(&j, &["node-default-fails-add"]);
    assert_eq!(f.len(), 1, "{j}");
    assert_eq!(
        (f[0]["severity"].as_str(), f[0]["subject"].as_str()),
        (Some("error"), Some("/etc/ib-sriov/node.json"))
    );
    let m = f[0]["message"].as_str().unwrap();
    assert!(
        m.contains(&format!("on VF {} for every network", vfs(&[0, 1, 2])))
            && m.contains("code 7")
            && m.contains("shared netns mode"),
        "{m}"
    );

    let out = doctor_env(&lab, &h, &exclusive, &["--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(findings(&j, &["node-default-fails-add"]).is_empty(), "{j}");
    assert_eq!(out.status.code(), Some(0), "{j}");

    // VF 1 without its RDMA device (mlx5_ib not bound to it, say).
    let ib = Path::new(&lab.host.vf(1).dir).join("infiniband");
    let aside = lab.host.root().join("vf1-infiniband");
    std::fs::rename(&ib, &aside).unwrap();
    let out = doctor_env(&lab, &h, &exclusive, &["--json"]);
    std::fs::rename(&aside, &ib).unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = findings(&j, &["node-default-fails-add"]);
    assert_eq!(f.len(), 1, "{j}");
    let m = f[0]["message"].as_str().unwrap();
    assert!(
        m.contains(&format!("on VF {} for every network", vfs(&[1])))
            && m.contains("must have exactly one RDMA device"),
        "{m}"
    );
    assert_eq!(out.status.code(), Some(1));

    // This machine's kernel: doctor's message is ADD's refusal, word for word.
    let out = doctor(&lab, &h, &["--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = findings(&j, &["node-default-fails-add"]);
    assert_eq!(f.len(), 1, "{j}");
    let (_d, wrapper) = common::policy::private_node_file(Some(&node.to_string()));
    let pod = lab.host.new_pod();
    let add = common::lab::Run::from(lab.host.run_plugin(
        &wrapper,
        "ADD",
        "dflt",
        pod.netns(),
        "net1",
        &lab.conf("1.0.0", 0).to_string(),
        &[],
    ));
    assert_eq!(add.json["code"], 7, "{} / {}", add.stdout, add.stderr);
    let msg = add.json["msg"].as_str().unwrap();
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .ends_with(&format!("code 7 on VF {} for every network that leaves rdmaIsolation out (as the SR-IOV network operator renders them): {msg}", vfs(&[0, 1, 2]))),
        "doctor {} / ADD {msg}",
        f[0]["message"]
    );

    // A vfio attachment made under the default (which does not apply in vfio mode)
    // asked for no isolation: in shared mode it is not `rdma-shared-with-isolation`.
    let mut vfio_conf = lab.conf("1.0.0", 3);
    vfio_conf.as_object_mut().unwrap().remove("ipam");
    let add = common::lab::Run::from(lab.host.run_plugin(
        &wrapper,
        "ADD",
        "vfio",
        pod.netns(),
        "net1",
        &vfio_conf.to_string(),
        &[],
    ));
    assert!(add.ok, "{} / {}", add.stdout, add.stderr);
    let out = doctor_env(&lab, &h, &shared, &["--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["attachments"].as_array().unwrap().len(), 1, "{j}");
    assert!(
        findings(&j, &["rdma-shared-with-isolation"]).is_empty(),
        "{j}"
    );
    lab.del("vfio", pod.netns(), &vfio_conf).expect_ok();

    // A default the node file cannot give (only `rdmaIsolation` describes the node; a
    // path, an IPAM, a value of the wrong type belong to a network or are wrong): the
    // file is invalid, every ADD is refused with code 7, and doctor says so, exit 1.
    for bad in [
        json!({"stateDir": "/nowhere"}),
        json!({"ipam": {"type": "whereabouts"}}),
        json!({"rdmaIsolation": "yes"}),
    ] {
        let mut n = machine.clone();
        n["defaults"] = bad.clone();
        set_node(&n);
        let out = doctor_env(&lab, &h, &exclusive, &["--json"]);
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        let f = findings(&j, &["node-file-invalid"]);
        assert_eq!(f.len(), 1, "{bad}: {j}");
        assert_eq!(f[0]["severity"], "error");
        assert_eq!(j["nodeFile"]["state"], "invalid");
        assert_eq!(out.status.code(), Some(1), "{bad}");
    }

    // No defaults: nothing to judge.
    set_node(&machine);
    let out = doctor_env(&lab, &h, &shared, &["--json"]);
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(findings(&j, &["node-default-fails-add"]).is_empty(), "{j}");
    assert_eq!(out.status.code(), Some(0), "{j}");
    assert_no_state(&lab);
}
