//! The configurations the SR-IOV network operator renders for a `SriovIBNetwork`
//! (fixtures in `tests/fixtures/operator/`, rendered from its template at
//! k8snetworkplumbingwg/sriov-network-operator 249e2001; see the README there), run
//! through libcni (tests/libcni/main.go on Debian's libcni) with what Multus adds
//! (multus-cni 95a09323 `pkg/types/conf.go`): `deviceID` and `pciBusID` in every plugin
//! of the configuration, the capability arguments it offers (`infinibandGUID`,
//! `CNIDeviceInfoFile`, `deviceID`), turned into `runtimeConfig` by libcni for the
//! capabilities the configuration declares, and `CNI_ARGS`
//! `IgnoreUnknown=true;K8S_POD_NAMESPACE=…;K8S_POD_NAME=…;K8S_POD_INFRA_CONTAINER_ID=…;K8S_POD_UID=…`.
//!
//! The pod already has `eth0` with an address and a default route, as the cluster
//! network leaves it. Each case: ADD, CHECK, DEL, DEL; the host (links, OFED files) is
//! as before and the pod keeps `eth0` and its default route.
//!
//! Test-only additions to the fixtures, outside what the operator renders: `stateDir`
//! (and host-local's `dataDir`) under the emulated host's root, so runs stay isolated.
//! Needs root, Debian's containernetworking-plugins (host-local, static, tuning) and
//! libcni (built by tests/libcni/build.sh).

mod common;

use common::emuhost::{exec_in_netns, EmuHost, EmuOptions, HostSnapshot, Pod};
use common::exec::Outcome;
use common::libcni::driver;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const DEBIAN_CNI: &str = "/usr/lib/cni";

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/operator")
        .join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(&p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

struct Lab {
    host: EmuHost,
    state: PathBuf,
    scratch: tempfile::TempDir,
}

impl Lab {
    fn new(vfs: u32) -> Lab {
        assert!(driver().is_file());
        for p in ["host-local", "static", "tuning"] {
            assert!(
                Path::new(DEBIAN_CNI).join(p).exists(),
                "{DEBIAN_CNI}/{p} is needed: apt-get install containernetworking-plugins"
            );
        }
        let host = EmuHost::build(EmuOptions {
            vfs,
            ..Default::default()
        });
        let state = host.root().join("var-lib-cni-ib-sriov");
        let scratch = tempfile::Builder::new()
            .prefix("ib-sriov-operator-")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(scratch.path().join("bin")).unwrap();
        Lab {
            host,
            state,
            scratch,
        }
    }

    /// A pod as the cluster network leaves it: `eth0` (a veth whose peer stays in the
    /// host netns) with 10.244.1.5/24 and a default route via 10.244.1.1.
    fn pod(&self) -> Pod {
        let pod = self.host.new_pod();
        let peer = format!("veth{}", pod.name.rsplit('-').next().unwrap());
        self.host.host_ip(&[
            "link", "add", &peer, "type", "veth", "peer", "name", "eth0", "netns", &pod.name,
        ]);
        self.host.host_ip(&["link", "set", &peer, "up"]);
        for cmd in [
            &["ip", "link", "set", "lo", "up"][..],
            &["ip", "link", "set", "eth0", "up"],
            &["ip", "addr", "add", "10.244.1.5/24", "dev", "eth0"],
            &[
                "ip",
                "route",
                "add",
                "default",
                "via",
                "10.244.1.1",
                "dev",
                "eth0",
            ],
        ] {
            let o = pod.exec(cmd);
            assert!(o.status.success(), "{cmd:?}: {o:?}");
        }
        pod
    }

    /// Multus' and the test's additions to an operator config: `deviceID` and
    /// `pciBusID` in every plugin (Multus), `stateDir` in ib-sriov's and `dataDir` in
    /// host-local's (test isolation).
    fn delegate(&self, mut conf: Value, vf: u32) -> Value {
        let addr = self.host.vf(vf).addr.clone();
        let state = self.state.clone();
        let data = self.host.root().join("host-local");
        let fix = |p: &mut Value| {
            p["deviceID"] = json!(addr);
            p["pciBusID"] = json!(addr);
            if p["type"] == "ib-sriov" {
                p["stateDir"] = json!(state);
                p["logLevel"] = json!("debug");
            }
            if p["ipam"]["type"] == "host-local" {
                p["ipam"]["dataDir"] = json!(data);
            }
        };
        match conf.get_mut("plugins").and_then(Value::as_array_mut) {
            Some(list) => list.iter_mut().for_each(fix),
            None => fix(&mut conf),
        }
        conf
    }

    fn write(&self, name: &str, conf: &Value) -> PathBuf {
        let ext = if conf.get("plugins").is_some() {
            "conflist"
        } else {
            "conf"
        };
        let p = self.scratch.path().join(format!("{name}.{ext}"));
        std::fs::write(&p, serde_json::to_vec_pretty(conf).unwrap()).unwrap();
        p
    }

    /// A stand-in for whereabouts (not packaged in Debian) on CNI_PATH: allocates
    /// 10.56.217.5/24 per container ID in a directory, releases on DEL.
    fn whereabouts(&self) {
        let store = self.scratch.path().join("whereabouts-store");
        std::fs::create_dir_all(&store).unwrap();
        let script = format!(
            r#"#!/bin/sh
s={store}
case "$CNI_COMMAND" in
VERSION) echo '{{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}}' ;;
ADD) echo "$CNI_IFNAME" > "$s/$CNI_CONTAINERID"
     echo '{{"cniVersion":"1.0.0","ips":[{{"address":"10.56.217.5/24","gateway":"10.56.217.1"}}]}}' ;;
DEL) rm -f "$s/$CNI_CONTAINERID" ;;
CHECK) test -f "$s/$CNI_CONTAINERID" || {{ echo '{{"code":999,"msg":"not allocated"}}'; exit 1; }} ;;
*) echo '{{"code":4,"msg":"unknown CNI_COMMAND"}}'; exit 1 ;;
esac
"#,
            store = store.display()
        );
        let p = self.scratch.path().join("bin/whereabouts");
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn whereabouts_held(&self) -> usize {
        std::fs::read_dir(self.scratch.path().join("whereabouts-store"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    fn drive(&self, caps: &[String], cmd: &str, conf: &Path, pod: &Pod, cid: &str) -> Outcome {
        let cni_path = format!(
            "{}:{DEBIAN_CNI}:{}",
            common::lab::bin().parent().unwrap().display(),
            self.scratch.path().join("bin").display()
        );
        let cache = self.scratch.path().join("cache");
        let cni_args = format!(
            "IgnoreUnknown=true;K8S_POD_NAMESPACE=default;K8S_POD_NAME=trainer-0;K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=6f1c2e4a-0b1d-4c52-9e0e-2b8f7d9a1c33"
        );
        let mut args: Vec<&str> = vec![driver().to_str().unwrap()];
        for c in caps {
            args.extend(["--cap", c.as_str()]);
        }
        args.extend([
            cmd,
            conf.to_str().unwrap(),
            pod.netns(),
            cid,
            "net1",
            cni_args.as_str(),
        ]);
        let env = [
            ("CNI_PATH", cni_path.as_str()),
            ("IB_SRIOV_SYSFS_ROOT", self.host.root().to_str().unwrap()),
            ("LIBCNI_CACHE_DIR", cache.to_str().unwrap()),
        ];
        exec_in_netns(&self.host.host_netns_path(), &args, &env, None).into()
    }

    fn journals(&self) -> Vec<String> {
        common::lab::list(&self.state)
            .into_iter()
            .filter(|n| n != "locks" && n != "vfs")
            .collect()
    }
}

/// A run of the driver ([`Lab::drive`]): its result or the CNI error it reports.
impl Outcome {
    /// The driver's stdout as JSON (Null when it is not); panics unless it succeeded.
    #[track_caller]
    fn ok(self) -> Value {
        let o = self.succeeded("driver");
        serde_json::from_str(&o.stdout).unwrap_or(Value::Null)
    }

    /// The CNI error the plugin returned (the driver's `cni-error:` line).
    #[track_caller]
    fn err(self) -> Value {
        assert!(
            !self.ok,
            "driver succeeded, expected an error: {}",
            self.stdout
        );
        let line = self
            .stderr
            .lines()
            .find_map(|l| l.strip_prefix("cni-error: "))
            .unwrap_or_else(|| panic!("no CNI error in: {}", self.stderr));
        serde_json::from_str(line).unwrap()
    }
}

fn routes(pod: &Pod) -> String {
    String::from_utf8_lossy(&pod.exec(&["ip", "route", "show"]).stdout).into_owned()
}

/// After DEL: the pod has `lo` and `eth0` with its default route, nothing of ours.
fn pod_as_before(pod: &Pod) {
    assert_eq!(pod.links(), vec!["lo", "eth0"]);
    let r = routes(pod);
    assert!(r.contains("default via 10.244.1.1 dev eth0"), "{r}");
    assert!(!r.contains("net1"), "{r}");
}

/// ADD, CHECK, DEL, DEL of `name` on VF `vf`; `during` inspects the attached pod.
fn full_cycle(
    lab: &Lab,
    name: &str,
    vf: u32,
    caps: &[String],
    during: impl Fn(&Lab, &Pod, &Value),
) {
    let conf = lab.delegate(fixture(name), vf);
    let file = lab.write(name, &conf);
    let pod = lab.pod();
    let before: HostSnapshot = lab.host.snapshot();
    let cid = format!("{name}-0123456789abcdef");
    let res = lab.drive(caps, "add", &file, &pod, &cid).ok();
    assert_eq!(res["interfaces"][0]["name"], "net1", "{res}");
    assert_eq!(res["interfaces"][0]["sandbox"], pod.netns());
    during(lab, &pod, &res);
    lab.drive(caps, "check", &file, &pod, &cid).ok();
    lab.drive(caps, "del", &file, &pod, &cid).ok();
    assert_eq!(lab.host.snapshot(), before, "{name}: host after DEL");
    assert!(lab.journals().is_empty());
    pod_as_before(&pod);
    lab.drive(caps, "del", &file, &pod, &cid).ok();
    assert_eq!(
        lab.host.snapshot(),
        before,
        "{name}: host after the second DEL"
    );
}

/// `"ipam": {}` (a SriovIBNetwork without spec.ipam): no IPAM, no address.
#[test]
fn no_ipam() {
    let lab = Lab::new(4);
    full_cycle(&lab, "ib-noipam", 0, &[], |_, pod, res| {
        assert!(res.get("ips").is_none(), "{res}");
        assert!(pod.links().contains(&"net1".to_string()));
    });
}

/// whereabouts (a stand-in on CNI_PATH): the delegate's address on net1, released on DEL.
#[test]
fn whereabouts() {
    let lab = Lab::new(4);
    lab.whereabouts();
    full_cycle(&lab, "ib-whereabouts", 1, &[], |lab, pod, res| {
        assert_eq!(res["ips"][0]["address"], "10.56.217.5/24");
        assert_eq!(lab.whereabouts_held(), 1);
        let a = String::from_utf8_lossy(&pod.exec(&["ip", "-4", "addr", "show", "net1"]).stdout)
            .into_owned();
        assert!(a.contains("10.56.217.5/24"), "{a}");
    });
    assert_eq!(lab.whereabouts_held(), 0);
}

/// host-local with `capabilities: {"infinibandGUID": true}` and `link_state: enable`,
/// a default route over IB next to the pod's own on eth0 (the Go plugin's semantics:
/// added beside it, not refused).
#[test]
fn host_local_guid_link_state_and_default_route() {
    let lab = Lab::new(4);
    let vf = lab.host.vf(2).clone();
    let node0 = std::fs::read_to_string(vf.ofed_node().unwrap()).unwrap();
    full_cycle(
        &lab,
        "ib-hostlocal",
        2,
        &[
            "infinibandGUID=c2:11:22:33:44:55:66:77".into(),
            // Offered by Multus but not declared by this config: libcni drops it.
            format!("deviceID={}", vf.addr),
        ],
        |lab, pod, res| {
            let a = res["ips"][0]["address"].as_str().unwrap();
            assert!(
                a.starts_with("10.56.217.17") || a.starts_with("10.56.217.18"),
                "{a}"
            );
            let r = routes(pod);
            assert!(r.contains("default via 10.56.217.1 dev net1"), "{r}");
            assert!(r.contains("default via 10.244.1.1 dev eth0"), "{r}");
            let vf = lab.host.vf(2);
            assert_eq!(
                std::fs::read_to_string(vf.ofed_node().unwrap())
                    .unwrap()
                    .trim(),
                "c2:11:22:33:44:55:66:77"
            );
            assert_eq!(
                std::fs::read_to_string(vf.ofed_policy().unwrap())
                    .unwrap()
                    .trim(),
                "Up"
            );
        },
    );
    assert_eq!(
        std::fs::read_to_string(vf.ofed_node().unwrap()).unwrap(),
        node0
    );
}

/// dhcp: refused before any change, as by the Go plugin ("ipam type dhcp is not
/// supported"); DEL of the never-made attachment succeeds twice.
#[test]
fn dhcp_is_refused_cleanly() {
    let lab = Lab::new(4);
    let conf = lab.delegate(fixture("ib-dhcp"), 0);
    let file = lab.write("ib-dhcp", &conf);
    let pod = lab.pod();
    let before = lab.host.snapshot();
    let e = lab.drive(&[], "add", &file, &pod, "dhcp-1").err();
    assert_eq!(e["code"], 7, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("dhcp"), "{e}");
    assert_eq!(lab.host.snapshot(), before);
    pod_as_before(&pod);
    lab.drive(&[], "del", &file, &pod, "dhcp-1").ok();
    lab.drive(&[], "del", &file, &pod, "dhcp-1").ok();
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.journals().is_empty());
}

/// `metaPlugins`: a conflist with Debian's tuning after ib-sriov (MTU and an
/// `IFNAME` sysctl on the VF netdev); tuning's DEL restores the MTU, ours the rest.
#[test]
fn tuning_chained_after_ib_sriov() {
    let lab = Lab::new(4);
    full_cycle(&lab, "ib-tuning", 3, &[], |_, pod, _| {
        let net1 = pod
            .link_snapshots()
            .into_iter()
            .find(|l| l.name == "net1")
            .unwrap();
        assert_eq!(net1.mtu, 2000);
        let v = pod.exec(&["cat", "/proc/sys/net/ipv4/conf/net1/arp_ignore"]);
        assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), "1");
    });
}

/// static IPAM with the device-info file Multus asks for (`CNIDeviceInfoFile`
/// capability): the file names the VF while attached and is gone after DEL.
#[test]
fn static_with_device_info_file() {
    let lab = Lab::new(4);
    let info = lab
        .scratch
        .path()
        .join("devinfo/default-ib-static-cid_net1");
    std::fs::create_dir_all(info.parent().unwrap()).unwrap();
    let cap = format!("CNIDeviceInfoFile={}", info.display());
    full_cycle(&lab, "ib-static", 1, &[cap], |lab, pod, res| {
        assert_eq!(res["ips"][0]["address"], "10.56.217.10/24");
        let d: Value = serde_json::from_slice(&std::fs::read(&info).unwrap()).unwrap();
        assert_eq!(d["pci"]["pci-address"], lab.host.vf(1).addr, "{d}");
        assert!(pod.links().contains(&"net1".to_string()));
    });
    assert!(!info.exists());
}

/// The node policy (src/policy.rs) never touches what the SR-IOV network operator renders:
/// none of its configurations, as rendered or as Multus delegates them, gives a path key
/// the policy checks (its template has no `logFile`, `stateDir`, `goCacheDir`,
/// `guidFile`; `runtimeConfig.CNIDeviceInfoFile` comes from Multus, under
/// `/var/run/k8s.cni.cncf.io/devinfo`, and the built-in IPAM is not the operator's), so
/// every one of them passes the default policy.
#[test]
fn operator_rendered_configs_have_no_policed_path() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/operator");
    let mut seen = 0;
    for sub in ["", "multus-delegated"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            let confs: Vec<Value> = match v.get("plugins").and_then(Value::as_array) {
                Some(list) => list.clone(),
                None => vec![v],
            };
            for c in confs {
                let paths = ib_sriov_cni::policy::configured_paths(&c);
                let policy = ib_sriov_cni::policy::NodePolicy::defaults(Path::new("/"));
                for (k, path) in &paths {
                    assert!(
                        *k == ib_sriov_cni::policy::PathKey::DeviceInfoFile
                            && policy.check(*k, path).is_ok(),
                        "{}: {k} {path:?}",
                        p.display()
                    );
                }
                seen += 1;
            }
        }
    }
    assert!(seen >= 9, "{seen} configurations");
}
