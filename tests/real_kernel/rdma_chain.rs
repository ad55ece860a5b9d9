//! rdma-cni chained after ib-sriov, through libcni, in exclusive RDMA netns mode, on the
//! lab's mlx5-shaped VFs (tests/kmod/ibvf.c: moving a VF's RDMA device to another
//! netns destroys its IPoIB netdev and creates a new one in the initial netns, as the
//! ipoib ULP does). rdma-cni is played by tests/libcni/rdma-standin (built by the lab,
//! `LAB_RDMA_STANDIN`), which does what rdma-cni 449bfbc's CmdAdd/CmdDel do: the lookup
//! under `/sys/bus/pci/devices/<deviceID>/infiniband`, the move by RDMA netlink, the
//! same errors.
//!
//! Each case records, after each step, where the VF's RDMA device and its IPoIB netdev
//! are (asserted, and printed as `lab-figure:` lines for the notes):
//! 1. `rdmaIsolation` absent, rdma chained: ADD succeeds, the RDMA device is in the pod,
//!    the IPoIB netdev re-created in the host; CHECK says so; DEL restores the VF;
//! 2. the node file's default `rdmaIsolation: true`, no rdma: both in the pod; DEL
//!    restores;
//! 3. `rdmaIsolation: true` with rdma chained: ADD fails with rdma-cni's "no RDMA
//!    devices found"; the runtime's DEL (what it sends after a failed ADD) leaves the
//!    host as it was.

use super::*;

/// Where VF `vf`'s RDMA device `rdma` and its IPoIB netdev are, host or pod, as
/// iproute2 and sysfs show them (never from the code under test).
fn whereabouts(vf: &str, rdma: &str, pod: &Pod) -> String {
    let rdma_at = match (
        host_rdma_names().contains(&rdma.to_string()),
        pod_rdma(pod).contains(&rdma.to_string()),
    ) {
        (true, false) => "host".to_string(),
        (false, true) => "pod".to_string(),
        (h, p) => format!("host {h}, pod {p}"),
    };
    let in_pod: Vec<String> = ip_json(&["-n", &pod.name, "-d", "link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| parent_of(Some(&pod.name), l) == vf)
        .map(|l| {
            format!(
                "pod {} (ifindex {})",
                l["ifname"].as_str().unwrap(),
                l["ifindex"]
            )
        })
        .collect();
    let in_host: Vec<String> = sysfs_netdevs(vf)
        .iter()
        .map(|n| format!("host {n} (ifindex {})", ifindex_of(n)))
        .collect();
    let netdev: Vec<String> = in_host.into_iter().chain(in_pod).collect();
    format!(
        "RDMA device {rdma} in the {rdma_at}; IPoIB netdev {}",
        if netdev.is_empty() {
            "nowhere".to_string()
        } else {
            netdev.join(", ")
        }
    )
}

/// Prints and returns the whereabouts after `step` of case `case`.
fn figure(case: &str, step: &str, vf: &str, rdma: &str, pod: &Pod) -> String {
    let w = whereabouts(vf, rdma, pod);
    eprintln!("lab-figure: {case}: after {step}: {w}");
    w
}

/// One network through libcni (tests/libcni driver): a conflist of `plugins` in a
/// CNI_PATH holding `ib-sriov` and the rdma-cni stand-in `rdma`, optionally run in a
/// private mount namespace whose `/etc/ib-sriov` holds `node_json` (the node file).
struct Chain<'a> {
    p: &'a Plugin,
    pod: &'a Pod,
    conf_path: PathBuf,
    bin_dir: PathBuf,
    node_dir: Option<PathBuf>,
    added: std::cell::Cell<bool>,
}

impl<'a> Chain<'a> {
    fn new(p: &'a Plugin, pod: &'a Pod, plugins: Vec<Value>, node_json: Option<&str>) -> Chain<'a> {
        let list = json!({"cniVersion": "1.0.0", "name": NET, "plugins": plugins});
        let conf_path = p.dir.path().join("chain.conflist");
        std::fs::write(&conf_path, list.to_string()).unwrap();
        let bin_dir = p.dir.path().join("cni-bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        std::os::unix::fs::symlink(bin(), bin_dir.join("ib-sriov")).unwrap();
        std::os::unix::fs::symlink(var("LAB_RDMA_STANDIN"), bin_dir.join("rdma")).unwrap();
        let node_dir = node_json.map(|j| {
            assert!(
                Path::new("/etc/ib-sriov").is_dir(),
                "the node file's directory /etc/ib-sriov must exist to mount over it"
            );
            let d = p.dir.path().join("node-etc");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("node.json"), j).unwrap();
            d
        });
        Chain {
            p,
            pod,
            conf_path,
            bin_dir,
            node_dir,
            added: std::cell::Cell::new(false),
        }
    }

    /// Runs `cmd` (add, check, del) for container `cid-chain`, `net1`.
    fn run(&self, cmd: &str) -> (bool, String, String) {
        if cmd == "add" {
            self.added.set(true);
        }
        let driver = var("LAB_LIBCNI_DRIVER");
        let args = [
            cmd,
            self.conf_path.to_str().unwrap(),
            &self.pod.path(),
            "cid-chain",
            IFNAME,
        ];
        let mut c = match &self.node_dir {
            None => {
                let mut c = Command::new(&driver);
                c.args(args);
                c
            }
            Some(d) => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "sh", "-c"])
                    .arg("mount --bind \"$0\" /etc/ib-sriov && exec \"$@\"")
                    .arg(d)
                    .arg(&driver)
                    .args(args);
                c
            }
        };
        let out = run(c
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_PATH", &self.bin_dir)
            .env("LIBCNI_CACHE_DIR", self.p.dir.path().join("libcni-cache"))
            .env(
                "RDMA_STANDIN_CACHE_DIR",
                self.p.dir.path().join("rdma-cache"),
            ));
        if cmd == "del" && out.status.success() {
            self.added.set(false);
        }
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    /// [`Chain::run`] of `cmd`, which must succeed (`what` names it in the panic): its
    /// stdout.
    fn run_ok(&self, cmd: &str, what: &str) -> String {
        let (ok, stdout, stderr) = self.run(cmd);
        assert!(ok, "{what}: {stdout}{stderr}");
        stdout
    }

    /// [`Chain::run`] of `cmd`, which must fail: the `cni-error:` line of its stderr (all
    /// of the stderr when there is none), and the stderr.
    fn run_err(&self, cmd: &str) -> (String, String) {
        let (ok, stdout, stderr) = self.run(cmd);
        assert!(!ok, "{} must fail: {stdout}", cmd.to_uppercase());
        let err = stderr.lines().find(|l| l.starts_with("cni-error:"));
        (err.unwrap_or(&stderr).to_string(), stderr.clone())
    }
}

impl Drop for Chain<'_> {
    fn drop(&mut self) {
        if self.added.get() {
            let _ = self.run("del");
        }
    }
}

/// The ib-sriov entry of a conflist for VF `vf` (no name or cniVersion: the list's).
fn entry(p: &Plugin, vf: &str, guid: u64, isolation: Option<bool>) -> Value {
    let mut c = p.ib_conf(vf, guid, false);
    let o = c.as_object_mut().unwrap();
    o.remove("name");
    o.remove("cniVersion");
    o.remove("rdmaIsolation");
    if let Some(b) = isolation {
        c["rdmaIsolation"] = json!(b);
    }
    c
}

const RDMA: &str = r#"{"type": "rdma"}"#;

/// One case: its label, VF, the VF's netdev name and RDMA device, the host view and the
/// plugin's directories before it, and its pod.
struct Case {
    label: &'static str,
    vf: String,
    name: String,
    rdma: String,
    before: Value,
    p: Plugin,
    pod: Pod,
}

impl Case {
    /// Case `label` on the lab's VF `vf_index`, its pod tagged `tag`; prints where the
    /// RDMA device and the netdev are before anything.
    fn start(label: &'static str, vf_index: usize, tag: &str) -> Case {
        ib_phase();
        let vf = vfs()[vf_index].clone();
        let (name, rdma) = ib_vf_before(&vf);
        let c = Case {
            label,
            before: ib_host_view(),
            p: Plugin::new(),
            pod: Pod::new(tag),
            vf,
            name,
            rdma,
        };
        c.figure("nothing (before ADD)");
        c
    }

    fn figure(&self, step: &str) -> String {
        figure(self.label, step, &self.vf, &self.rdma, &self.pod)
    }

    /// A chain of the ib-sriov entry (GUID `guid`, `rdmaIsolation` as given) and, when
    /// `rdma`, rdma-cni; the node file `node_json` when given.
    fn chain(
        &self,
        guid: u64,
        isolation: Option<bool>,
        rdma: bool,
        node_json: Option<&str>,
    ) -> Chain<'_> {
        let mut plugins = vec![entry(&self.p, &self.vf, guid, isolation)];
        if rdma {
            // Multus adds the device plugin's deviceID to every plugin of the list
            // (multus-cni 95a09323 pkg/types/conf.go), which is where rdma-cni reads it.
            let mut r: Value = serde_json::from_str(RDMA).unwrap();
            r["deviceID"] = json!(self.vf);
            plugins.push(r);
        }
        Chain::new(&self.p, &self.pod, plugins, node_json)
    }

    /// After the last DEL: no RDMA device and only `lo` in the pod, the VF restored
    /// (name, GUID, link state, RDMA device), the host view as before, no journal, no
    /// allocation. `what` names the step for the messages.
    fn assert_restored(&self, what: &str) {
        udev_settle();
        let w = self.figure(what);
        assert!(
            pod_rdma(&self.pod).is_empty(),
            "no RDMA device in the pod: {w}"
        );
        assert_eq!(self.pod.link_names(), vec!["lo".to_string()], "{w}");
        assert_ib_restored(&self.vf, &self.name, &self.rdma);
        assert_eq!(ib_host_view(), self.before, "host as before after {what}");
        assert!(self.p.journals().is_empty());
        assert!(self.p.allocations().is_empty());
    }
}

/// Case 1: `rdmaIsolation` absent (what the SR-IOV network operator renders), rdma-cni
/// chained after ib-sriov, as operator users run it in exclusive mode. ADD succeeds as
/// under the Go plugin: ib-sriov moves the netdev into the pod and leaves the RDMA
/// device, rdma-cni moves the device, and the kernel re-creates the IPoIB netdev in
/// the host: the pod has its RDMA device and no `net1`. CHECK says so plainly. DEL
/// (libcni: rdma-cni first, then ib-sriov) restores the VF: netdev name, GUID, link
/// state, RDMA device, the whole host view.
#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_rdma_chain_without_isolation_add_check_del() {
    let c = Case::start("case 1 (rdmaIsolation absent, rdma chained)", 0, "chain1");
    let (vf, rdma) = (&c.vf, &c.rdma);
    let guid = 0x0200_0000_0000_0c01;
    let chain = c.chain(guid, None, true, None);

    chain.run_ok("add", "libcni add");
    // The re-created netdev shows up in the host (udev renames it meanwhile).
    wait_until(
        "VF netdev back in the host",
        Duration::from_secs(30),
        || !sysfs_netdevs(vf).is_empty(),
    );
    udev_settle();
    let w = c.figure("ADD");
    assert!(
        pod_rdma(&c.pod).contains(rdma),
        "RDMA device in the pod: {w}"
    );
    assert!(
        rdma_of(vf).is_empty(),
        "<VF>/infiniband empty in the host: {w}"
    );
    assert_eq!(c.pod.link_names(), vec!["lo".to_string()], "net1 gone: {w}");
    let host_netdev = vf_netdev(vf, Duration::from_secs(10));
    let t = pf_vf_text(vf_index(vf));
    assert!(t.contains(&format!("NODE_GUID {}", guid_text(guid))), "{t}");
    assert!(t.contains("link-state enable"), "{t}");

    let (err, stderr) = chain.run_err("check");
    eprintln!("lab-figure: {}: CHECK: {err}", c.label);
    for needle in [
        "net1 is gone from",
        &format!("RDMA device {rdma} of VF {vf}"),
        "rdma-cni",
        "recreate the IPoIB netdev in the host network namespace",
        &format!("as {host_netdev}"),
        "\"code\":104",
    ] {
        assert!(
            err.contains(needle),
            "{needle:?} in CHECK's error: {stderr}"
        );
    }
    c.figure("CHECK");

    chain.run_ok("del", "libcni del");
    c.assert_restored("DEL");
    chain.run_ok("del", "second libcni del");
    c.assert_restored("a second DEL");
}

/// Case 2: no rdma in the chain, the node file's `defaults` give `rdmaIsolation: true`
/// (the operator recipe, docs/configuration.md "RDMA device isolation"): ib-sriov moves
/// the RDMA device first, then the (re-created) netdev, so the pod has both; CHECK
/// passes; DEL restores.
#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_node_default_isolation_without_rdma_gives_the_pod_both() {
    let c = Case::start(
        "case 2 (node default rdmaIsolation true, no rdma)",
        1,
        "chain2",
    );
    let guid = 0x0200_0000_0000_0c02;
    let chain = c.chain(
        guid,
        None,
        false,
        Some(r#"{"defaults": {"rdmaIsolation": true}}"#),
    );
    let stdout = chain.run_ok("add", "libcni add");
    let mut res: Value = serde_json::from_str(&stdout).unwrap();
    // libcni 1.1.2's result type has no `pciID` (CNI 1.1, libcni 1.2) and drops it; the
    // plugin's own result carries it (the direct-call cases check it).
    assert!(res["interfaces"][0].get("pciID").is_none(), "{res}");
    res["interfaces"][0]["pciID"] = json!(c.vf);
    let w = c.figure("ADD");
    assert_ib_attached(&c.p, &c.pod, &res, &c.vf, IFNAME, guid, &c.rdma);
    chain.run_ok("check", &format!("libcni check ({w})"));
    c.figure("CHECK");
    chain.run_ok("del", "libcni del");
    c.assert_restored("DEL");
}

/// Case 3: `rdmaIsolation: true` and rdma chained (what `ib-sriov doctor --conf`
/// refuses): ib-sriov moves the RDMA device and the netdev into the pod, then rdma-cni
/// finds nothing under `<VF>/infiniband` and fails the ADD with its own "no RDMA devices
/// found". libcni does not undo the plugins before the failed one; the runtime sends
/// DEL for a failed ADD (SPEC.md "ADD": the runtime cleans up with DEL), and after it
/// the host is as before (the stand-in has no state, so its DEL does nothing).
#[test]
#[ignore = "needs the real-kernel lab: scripts/kernel-lab.sh"]
fn ib_isolation_with_rdma_chained_fails_cleanly() {
    let c = Case::start("case 3 (rdmaIsolation true, rdma chained)", 0, "chain3");
    let chain = c.chain(0x0200_0000_0000_0c03, Some(true), true, None);
    let (err, stderr) = chain.run_err("add");
    eprintln!("lab-figure: {}: ADD: {err}", c.label);
    assert!(
        err.contains(&format!(
            "failed to get RDMA device for device ID {}: no RDMA devices found",
            c.vf
        )),
        "{stderr}"
    );
    let w = c.figure("the failed ADD");
    assert!(
        pod_rdma(&c.pod).contains(&c.rdma),
        "ib-sriov's part stays until DEL: {w}"
    );
    chain.run_ok("del", "libcni del");
    c.assert_restored("the runtime's DEL");
}
