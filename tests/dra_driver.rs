//! ib-sriov under Kubernetes DRA: the SR-IOV DRA driver k8snetworkplumbingwg/dra-driver-sriov
//! (standalone mode, cd9404f0301e088653abb562df6ed8b106b097d6) calls the plugin through
//! libcni for each claimed VF. tests/libcni/dra-standin reproduces that call through
//! Debian's libcni (its header lists what is reproduced, with the driver's files:
//! pkg/cni/cni.go AttachNetwork/DetachNetwork, pkg/types/types.go AddDeviceIDToNetConf,
//! pkg/devicestate/state.go, pkg/nri/nri.go, pkg/cni/status.go cniResultToNetworkData):
//! the NAD config with `deviceID` injected at the top level, ONE plugin (no conflist),
//! RuntimeConf{ContainerID = sandbox ID, NetNS, IfName} with the args IgnoreUnknown,
//! K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_INFRA_CONTAINER_ID, K8S_POD_UID, and no
//! capability args (so no runtimeConfig, no ib-kubernetes GUID).
//!
//! Cases: ADD, DEL, DEL again; DEL after the pod netns died; DEL after a reboot (the test
//! builds' boot-ID seam); the GUID sources that work without runtimeConfig: the VF's
//! own GUID, the SR-IOV operator's GUID file, `deriveGuid`. Each ADD's
//! NetworkDeviceData (what the driver writes into the ResourceClaim status, KEP-4817)
//! is printed (`--nocapture`) and checked: interfaceName is the claim's, hardwareAddress
//! is the pod interface's hardware address, ips are the IPAM allocation, all within
//! KEP-4817's field limits. On the emulated host the VF netdevs are veths (6-byte MAC);
//! the 20-byte IPoIB address is checked in the real-kernel lab
//! (tests/real_kernel/ib.rs, the DRA case).
//!
//! Emulated host, real binary, as root: without root the fixture panics (no skip).

mod common;

use common::emuhost::{EmuOptions, Pod, PF_BDF, PF_PORT_GUID};
use common::exec::Outcome;
use common::lab::Lab;
use common::libcni::dra_standin;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// dra-driver-sriov's driver name (pkg/consts/consts.go `DriverName`): the network name
/// of a NAD config that has none.
const DRIVER_NAME: &str = "sriovnetwork.k8snetworkplumbingwg.io";
const POD_NAMESPACE: &str = "vf-test1";
const POD_NAME: &str = "pod0";
const POD_UID: &str = "6b1f0c36-5a0e-4f0e-9a51-7d2f3e2b1c01";

/// One emulated host with the plugin, libcni's cache and the NAD files.
struct Dra {
    lab: Lab,
    scratch: tempfile::TempDir,
}

/// A run of the stand-in ([`Dra::run`]) that must succeed.
impl Outcome {
    #[track_caller]
    fn ok(self) -> Outcome {
        self.succeeded("dra-standin")
    }
    #[track_caller]
    fn json(self) -> Value {
        self.json_of("dra-standin")
    }
}

impl Dra {
    fn new(opts: EmuOptions) -> Dra {
        assert!(dra_standin().is_file());
        Dra {
            lab: Lab::new(opts),
            scratch: tempfile::Builder::new()
                .prefix("ib-sriov-dra-")
                .tempdir()
                .expect("scratch dir"),
        }
    }

    /// A NetworkAttachmentDefinition's spec.config for ib-sriov at cniVersion 1.0.0,
    /// the built-in IPAM on 10.56.217.0/24, merged with `extra`. It carries a stale
    /// `deviceID` (the driver replaces it with the claimed VF's) and declares the
    /// infinibandGUID capability (the driver sends no capability args, so it stays
    /// unused).
    fn nad(&self, extra: Value) -> PathBuf {
        let mut c = json!({
            "cniVersion": "1.0.0",
            "name": "ibnet",
            "type": "ib-sriov",
            "deviceID": "0000:00:00.0",
            "capabilities": {"infinibandGUID": true},
            "stateDir": self.lab.state,
            "goCacheDir": self.lab.host.root().join("go-cache"),
            "logLevel": "debug",
            "ipam": {
                "type": "ib-sriov-ipam",
                "subnet": "10.56.217.0/24",
                "gateway": "10.56.217.1",
                "dataDir": self.lab.data,
            }
        });
        for (k, v) in extra.as_object().expect("an object") {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        let p = self.scratch.path().join(format!(
            "nad-{}.json",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::write(&p, serde_json::to_vec_pretty(&c).unwrap()).unwrap();
        p
    }

    /// Runs the stand-in in the host netns as the driver's NRI hook would:
    /// `<cmd> <nad> <vf> <netns> <sandbox> <ifname> <pod namespace> <pod name> <uid>`.
    /// `at` is (VF index, netns path, sandbox ID, ifname).
    fn run(
        &self,
        cmd: &str,
        nad: &Path,
        at: (u32, &str, &str, &str),
        env: &[(&str, &str)],
    ) -> Outcome {
        let (vf, netns, sandbox, ifname) = at;
        let prog = dra_standin().to_str().unwrap();
        let cni_path = common::lab::bin().parent().unwrap().to_str().unwrap();
        let root = self.lab.host.root().to_str().unwrap();
        let cache = self.scratch.path().join("cache");
        let cache = cache.to_str().unwrap();
        let vf = self.lab.host.vf(vf).addr.clone();
        let args = [
            prog,
            cmd,
            nad.to_str().unwrap(),
            &vf,
            netns,
            sandbox,
            ifname,
            POD_NAMESPACE,
            POD_NAME,
            POD_UID,
        ];
        let mut e = vec![
            ("CNI_PATH", cni_path),
            ("IB_SRIOV_SYSFS_ROOT", root),
            ("LIBCNI_CACHE_DIR", cache),
        ];
        e.extend_from_slice(env);
        common::emuhost::exec_in_netns(&self.lab.host.host_netns_path(), &args, &e, None).into()
    }

    /// ADDs VF 0 as `net1` of `sandbox` in a new pod with the default NAD, checks the
    /// network device data it returns (`what` names the call), then deletes the pod's
    /// netns as a dying pod would. Returns the NAD and the netns path.
    #[track_caller]
    fn add_then_lose_the_pod(&self, sandbox: &str, what: &str) -> (PathBuf, String) {
        let pod = self.lab.host.new_pod();
        let nad = self.nad(json!({}));
        let a = self
            .run("add", &nad, (0, pod.netns(), sandbox, "net1"), &[])
            .json();
        check_network_device_data(self, what, &a, &pod, "net1", "ibnet");
        let netns = pod.netns().to_string();
        pod.delete().unwrap();
        (nad, netns)
    }

    /// libcni's cached result of `sandbox`/`ifname` on network `net`.
    fn cache_entry(&self, net: &str, sandbox: &str, ifname: &str) -> PathBuf {
        self.scratch
            .path()
            .join("cache/results")
            .join(format!("{net}-{sandbox}-{ifname}"))
    }

    /// Addresses allocated in the built-in IPAM store of network `net`.
    fn allocations(&self, net: &str) -> Vec<String> {
        common::lab::ipam_allocations(&self.lab.data.join(net))
    }

    /// The journal of `sandbox`/`ifname`.
    fn journal(&self, sandbox: &str, ifname: &str) -> Value {
        serde_json::from_slice(
            &std::fs::read(self.lab.state.join(format!("{sandbox}:{ifname}"))).unwrap(),
        )
        .unwrap()
    }

    fn guids(&self, vf: u32) -> (String, String) {
        let v = self.lab.host.vf(vf);
        (self.lab.read(v.ofed_node()), self.lab.read(v.ofed_port()))
    }
}

/// Checks one ADD's output against what the pod has: the NetworkDeviceData the driver
/// derives (printed), within KEP-4817's limits (resource.k8s.io/v1 NetworkDeviceData:
/// interfaceName at most 256 characters, hardwareAddress at most 128, ips at most 16
/// entries, unique, CIDR), naming the claim's interface, its hardware address as the pod
/// sees it, and addresses allocated to network `net`. Returns the hardware address.
#[track_caller]
fn check_network_device_data(
    dra: &Dra,
    case: &str,
    out: &Value,
    pod: &Pod,
    ifname: &str,
    net: &str,
) -> String {
    let nd = &out["networkDeviceData"];
    println!("{case}: NetworkDeviceData {nd}");
    println!("{case}: CNI result (1.0.0) {}", out["result"]);
    let name = nd["interfaceName"].as_str().expect("interfaceName");
    assert_eq!(name, ifname, "{case}: the claim's ifName");
    assert!(name.len() <= 256, "{case}");
    let hw = nd["hardwareAddress"].as_str().expect("hardwareAddress");
    assert!(!hw.is_empty() && hw.len() <= 128, "{case}: {hw}");
    let link = pod
        .link_snapshots()
        .into_iter()
        .find(|l| l.name == ifname)
        .unwrap_or_else(|| panic!("{case}: {ifname} not in the pod"));
    assert_eq!(hw, link.address, "{case}: the pod interface's address");
    let ips: Vec<String> = nd["ips"]
        .as_array()
        .expect("ips")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(!ips.is_empty() && ips.len() <= 16, "{case}: {ips:?}");
    for ip in &ips {
        let (a, p) = ip.split_once('/').expect("CIDR");
        a.parse::<std::net::IpAddr>().expect("an IP");
        p.parse::<u8>().expect("a prefix length");
    }
    let stored = dra.allocations(net);
    for ip in &ips {
        let a = ip.split_once('/').unwrap().0;
        assert!(
            stored.iter().any(|s| s == a),
            "{case}: {a} is not allocated in {net}: {stored:?}"
        );
    }
    let v4: Vec<String> = link
        .addrs
        .into_iter()
        .filter(|a| !a.contains(':'))
        .collect();
    assert_eq!(v4, ips, "{case}: the addresses on {ifname} in the pod");
    hw.to_string()
}

/// The pod's CNI_ARGS name as the journal records it (field `pod`).
#[track_caller]
fn check_journal_pod(j: &Value) {
    assert_eq!(
        j["pod"],
        json!({"namespace": POD_NAMESPACE, "name": POD_NAME, "uid": POD_UID}),
        "{j}"
    );
}

/// Two claimed VFs of one pod, as the driver attaches them: VF 0 with the claim's
/// `ifName` net1, VF 1 without one (the driver's default prefix and an index, vfnet0).
/// The NAD has no name (the driver names the network after itself) and a stale
/// deviceID (replaced by the claimed VF's). Each VF keeps its own GUID: the declared
/// infinibandGUID capability gets no value, since the driver sends no capability
/// args. DEL restores the host; a second DEL (StopPodSandbox again) changes nothing.
#[test]
fn add_del_del_with_the_vfs_own_guid_two_claimed_vfs() {
    let dra = Dra::new(EmuOptions::default());
    let before = dra.lab.host.snapshot();
    let guids_before = (dra.guids(0), dra.guids(1));
    let pod = dra.lab.host.new_pod();
    let nad = dra.nad(json!({"name": null}));
    let sandbox = "5d1c9a0e7f3b";
    let net = DRIVER_NAME;

    let a0 = dra
        .run("add", &nad, (0, pod.netns(), sandbox, "net1"), &[])
        .json();
    let a1 = dra
        .run("add", &nad, (1, pod.netns(), sandbox, "vfnet0"), &[])
        .json();
    check_network_device_data(&dra, "VF 0 as net1", &a0, &pod, "net1", net);
    check_network_device_data(&dra, "VF 1 as vfnet0", &a1, &pod, "vfnet0", net);
    assert_eq!(
        a0["networkDeviceData"]["ips"].as_array().unwrap().len()
            + a1["networkDeviceData"]["ips"].as_array().unwrap().len(),
        dra.allocations(net).len()
    );
    assert_eq!((dra.guids(0), dra.guids(1)), guids_before, "own GUIDs kept");
    for (vf, ifname) in [(0, "net1"), (1, "vfnet0")] {
        let j = dra.journal(sandbox, ifname);
        assert_eq!(j["vf"], dra.lab.host.vf(vf).addr, "the injected deviceID");
        assert_eq!(j["network"], net);
        check_journal_pod(&j);
        assert!(dra.cache_entry(net, sandbox, ifname).is_file());
    }

    for ifname in ["net1", "vfnet0"] {
        let vf = if ifname == "net1" { 0 } else { 1 };
        dra.run("del", &nad, (vf, pod.netns(), sandbox, ifname), &[])
            .ok();
        assert!(!dra.cache_entry(net, sandbox, ifname).exists());
    }
    assert_eq!(dra.lab.host.snapshot(), before);
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(dra.lab.journals().is_empty() && dra.allocations(net).is_empty());
    dra.run("del", &nad, (0, pod.netns(), sandbox, "net1"), &[])
        .ok();
    assert_eq!(dra.lab.host.snapshot(), before);
}

/// StopPodSandbox after the pod's netns died: the driver still passes the netns path
/// NRI reported (pkg/nri/nri.go). The kernel returned the VF netdev to the host, down,
/// named as in the pod; DEL restores it, releases the IP and drops the journal, and the
/// retried DEL changes nothing.
#[test]
fn del_after_the_pod_netns_died() {
    let dra = Dra::new(EmuOptions::default());
    let before = dra.lab.host.snapshot();
    let (nad, netns) = dra.add_then_lose_the_pod("sb-dead", "netns-died ADD");
    dra.lab
        .host
        .return_destroyed_vf_netdev(0, "net1", &before)
        .unwrap();
    dra.run("del", &nad, (0, &netns, "sb-dead", "net1"), &[])
        .ok();
    assert!(dra.lab.journals().is_empty() && dra.allocations("ibnet").is_empty());
    dra.lab.host.sync_netdevs().unwrap();
    dra.run("del", &nad, (0, &netns, "sb-dead", "net1"), &[])
        .ok();
    assert_eq!(dra.lab.host.snapshot(), before);
}

/// StopPodSandbox after a reboot: libcni's cache (on disk) and the IPAM store outlive
/// it, the pod netns does not, and the VF came back with its original netdev. The
/// plugin's journal is of another boot (the test builds' boot-ID seam
/// `IB_SRIOV_TEST_BOOT_ID`, cargo feature `failpoints`): DEL releases the IP, drops
/// the journal and libcni's entry, and leaves the re-created VF as it is.
#[cfg(feature = "failpoints")]
#[test]
fn del_after_a_reboot() {
    let dra = Dra::new(EmuOptions::default());
    let before = dra.lab.host.snapshot();
    let orig = dra.lab.host.vf(0).netdev.clone().unwrap();
    // The reboot: the pod netns is gone, the VF netdev is the driver's new one, under
    // its udev name.
    let (nad, netns) = dra.add_then_lose_the_pod("sb-boot", "reboot ADD");
    dra.lab
        .host
        .return_destroyed_vf_netdev(0, &orig, &before)
        .unwrap();
    let rebooted = dra.lab.host.snapshot();
    let boot = [(
        "IB_SRIOV_TEST_BOOT_ID",
        "0badb007-0000-4000-8000-000000000041",
    )];
    let d = dra
        .run("del", &nad, (0, &netns, "sb-boot", "net1"), &boot)
        .ok();
    assert!(d.stderr.contains("written in another boot"), "{}", d.stderr);
    assert!(dra.lab.journals().is_empty() && dra.allocations("ibnet").is_empty());
    assert!(!dra.cache_entry("ibnet", "sb-boot", "net1").exists());
    assert_eq!(dra.lab.host.snapshot(), rebooted, "the VF is left as it is");
    dra.run("del", &nad, (0, &netns, "sb-boot", "net1"), &boot)
        .ok();
    assert_eq!(dra.lab.host.snapshot(), rebooted);
}

const ZERO: &str = "00:00:00:00:00:00:00:00";

/// VFs that come up without a GUID get one without runtimeConfig: from the SR-IOV
/// operator's GUID file (`guidFile`), or derived from the PF's port GUID
/// (`deriveGuid`). DEL keeps it on the VF (docs/configuration.md "VFs without a GUID").
#[test]
fn guid_from_the_operators_guid_file_and_derived() {
    let dra = Dra::new(EmuOptions {
        vfs: 3,
        zero_guids: true,
        ..Default::default()
    });
    let pod = dra.lab.host.new_pod();
    let file = dra.lab.host.root().join("etc-guids");
    std::fs::write(
        &file,
        json!([{"pciAddress": PF_BDF, "guids": ["02:00:00:00:00:00:41:00", "02:00:00:00:00:00:41:01"]}])
            .to_string(),
    )
    .unwrap();

    // The GUID file: VF 1 takes guids[1].
    assert_eq!(dra.guids(1), (ZERO.into(), ZERO.into()));
    let nad = dra.nad(json!({"guidFile": file}));
    let a = dra
        .run("add", &nad, (1, pod.netns(), "sb-file", "net1"), &[])
        .json();
    check_network_device_data(&dra, "guidFile", &a, &pod, "net1", "ibnet");
    let g = "02:00:00:00:00:00:41:01";
    assert_eq!(dra.guids(1), (g.into(), g.into()));
    check_journal_pod(&dra.journal("sb-file", "net1"));
    dra.run("del", &nad, (1, pod.netns(), "sb-file", "net1"), &[])
        .ok();
    assert_eq!(dra.guids(1), (g.into(), g.into()), "DEL keeps it");

    // deriveGuid, no file entry: VF 2 gets the GUID derived from the PF port GUID.
    let nad = dra.nad(json!({"deriveGuid": true, "guidFile": dra.lab.host.root().join("none")}));
    let a = dra
        .run("add", &nad, (2, pod.netns(), "sb-derive", "net1"), &[])
        .json();
    check_network_device_data(&dra, "deriveGuid", &a, &pod, "net1", "ibnet");
    let d = common::guid::derived_guid(PF_PORT_GUID, 2);
    assert_eq!(dra.guids(2), (d.clone(), d.clone()));
    dra.run("del", &nad, (2, pod.netns(), "sb-derive", "net1"), &[])
        .ok();
    assert_eq!(dra.guids(2), (d.clone(), d));
    assert!(dra.lab.journals().is_empty() && dra.allocations("ibnet").is_empty());

    // Neither: code 7 naming both ways out, through libcni; nothing changed.
    let before = dra.lab.host.snapshot();
    let nad = dra.nad(json!({"guidFile": dra.lab.host.root().join("none")}));
    let e = dra.run("add", &nad, (0, pod.netns(), "sb-none", "net1"), &[]);
    assert!(!e.ok);
    assert!(
        e.stderr.contains(r#"cni-error: {"code":7,"#)
            && e.stderr.contains("deriveGuid")
            && e.stderr.contains("guidFile"),
        "{}",
        e.stderr
    );
    assert_eq!(dra.lab.host.snapshot(), before);
    assert!(dra.lab.journals().is_empty() && dra.allocations("ibnet").is_empty());
}

/// What does not work under the driver, as docs/dra.md says: a conflist NAD (the driver
/// loads one plugin; libcni refuses a configuration without `type`), and
/// `ibKubernetesEnabled` (the driver sends no runtimeConfig and no args.cni, so ADD
/// answers code 11 for ib-kubernetes' GUID that never comes). Nothing changes.
#[test]
fn a_conflist_nad_and_ib_kubernetes_do_not_work_under_the_driver() {
    let dra = Dra::new(EmuOptions::default());
    let before = dra.lab.host.snapshot();
    let pod = dra.lab.host.new_pod();

    let plugin =
        serde_json::from_slice::<Value>(&std::fs::read(dra.nad(json!({}))).unwrap()).unwrap();
    let list = dra.scratch.path().join("nad-conflist.json");
    std::fs::write(
        &list,
        json!({"cniVersion": "1.0.0", "name": "ibnet", "plugins": [plugin, {"type": "rdma"}]})
            .to_string(),
    )
    .unwrap();
    let e = dra.run("add", &list, (0, pod.netns(), "sb-list", "net1"), &[]);
    assert!(!e.ok, "{}", e.stdout);
    assert!(
        e.stderr.contains("loading the plugin configuration"),
        "{}",
        e.stderr
    );

    let nad = dra.nad(json!({"ibKubernetesEnabled": true}));
    let e = dra.run("add", &nad, (0, pod.netns(), "sb-ibk", "net1"), &[]);
    assert!(!e.ok, "{}", e.stdout);
    assert!(
        e.stderr.contains(r#"cni-error: {"code":11,"#),
        "{}",
        e.stderr
    );
    dra.run("del", &nad, (0, pod.netns(), "sb-ibk", "net1"), &[])
        .ok();
    assert_eq!(dra.lab.host.snapshot(), before);
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(dra.lab.journals().is_empty() && dra.allocations("ibnet").is_empty());
}
