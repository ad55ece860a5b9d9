//! Client-level end-to-end: the real `ib-sriov` binary driven through libcni, the Go
//! library under cnitool, containerd, CRI-O and Multus, on the emulated host
//! (tests/common/emuhost.rs).
//!
//! The driver is tests/libcni/main.go, built once per test binary with
//! tests/libcni/build.sh against Debian's libcni 1.1.2 (installed with apt-get when
//! missing). A failed build fails the tests; nothing is skipped. The driver runs inside
//! the emulated host's netns and finds the plugin by its `type` in CNI_PATH, as a
//! runtime does; libcni adds its own behaviour on top of the plugin's: the result cache
//! and `prevResult` for CHECK and DEL, version conversion of the result, refusal of
//! CHECK below 0.4.0, and capability arguments turned into `runtimeConfig`.
//!
//! Needs root; without it the fixture panics, so these tests fail rather than skip.

mod common;

use common::emuhost::{exec_in_netns, EmuHost, EmuOptions, Pod};
use common::lab::list;
use common::libcni::driver;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

const NET: &str = "ibnet";
const IFNAME: &str = "net1";

/// How the network configuration is handed to libcni.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// A single plugin `.conf` (libcni wraps it in a one-plugin list).
    Conf,
    /// A `.conflist` with the plugin as its only member; libcni injects the list's
    /// `name` and `cniVersion` into the plugin's configuration.
    Conflist,
}

/// One emulated host, the plugin's state and IPAM directories under its root, and a
/// scratch directory for the configuration files and libcni's cache.
struct Lab {
    host: EmuHost,
    state: PathBuf,
    data: PathBuf,
    scratch: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        let driver = driver();
        assert!(driver.is_file());
        let host = EmuHost::build(EmuOptions::default());
        let state = host.root().join("var-lib-cni-ib-sriov");
        let data = host.root().join("var-lib-cni-networks");
        let scratch = tempfile::Builder::new()
            .prefix("ib-sriov-libcni-")
            .tempdir()
            .expect("scratch dir");
        Lab {
            host,
            state,
            data,
            scratch,
        }
    }

    /// The plugin's configuration for VF `vf` with the built-in IPAM on 10.56.217.0/24.
    fn plugin(&self, vf: u32) -> Value {
        common::lab::plugin_conf(&self.host, &self.state, &self.data, vf)
    }

    /// Writes `plugin` as a `.conf` or `.conflist` of network [`NET`] at `version`.
    fn write_conf(&self, version: &str, format: Format, plugin: Value) -> PathBuf {
        let (file, v) = match format {
            Format::Conf => {
                let mut p = plugin;
                p["cniVersion"] = json!(version);
                p["name"] = json!(NET);
                (format!("{NET}-{version}.conf"), p)
            }
            Format::Conflist => (
                format!("{NET}-{version}.conflist"),
                json!({"cniVersion": version, "name": NET, "plugins": [plugin]}),
            ),
        };
        let path = self.scratch.path().join(file);
        std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        path
    }

    fn cache_dir(&self) -> PathBuf {
        self.scratch.path().join("cache")
    }

    /// libcni's cached result of attachment `cid`/net1.
    fn cache_entry(&self, cid: &str) -> PathBuf {
        self.cache_dir()
            .join("results")
            .join(format!("{NET}-{cid}-{IFNAME}"))
    }

    /// Runs the driver inside the host netns: `<flags> <cmd> <conf> <netns> <cid> net1`.
    fn drive(&self, flags: &[&str], cmd: &str, conf: &Path, netns: &str, cid: &str) -> Drive {
        let driver = driver().to_str().expect("UTF-8 path");
        let conf = conf.to_str().expect("UTF-8 path");
        let cni_path = common::lab::bin().parent().unwrap().to_str().unwrap();
        let root = self.host.root().to_str().unwrap();
        let cache = self.cache_dir();
        let cache = cache.to_str().unwrap();
        let mut args = vec![driver];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[cmd, conf, netns, cid, IFNAME]);
        let env = [
            ("CNI_PATH", cni_path),
            ("IB_SRIOV_SYSFS_ROOT", root),
            ("LIBCNI_CACHE_DIR", cache),
        ];
        let out = exec_in_netns(&self.host.host_netns_path(), &args, &env, None);
        Drive::new(format!("{cmd} {conf} {cid}"), out)
    }

    fn add(&self, flags: &[&str], conf: &Path, pod: &Pod, cid: &str) -> Value {
        let d = self.drive(flags, "add", conf, pod.netns(), cid).expect_ok();
        serde_json::from_str(&d.stdout)
            .unwrap_or_else(|e| panic!("{}: stdout is not JSON ({e}): {:?}", d.what, d.stdout))
    }

    fn journals(&self) -> Vec<String> {
        list(&self.state)
            .into_iter()
            .filter(|n| n != "locks" && n != "vfs")
            .collect()
    }

    /// Addresses allocated in the built-in IPAM store of network [`NET`].
    fn allocations(&self) -> Vec<String> {
        common::lab::ipam_allocations(&self.data.join(NET))
    }
}

fn read(p: Option<PathBuf>) -> String {
    std::fs::read_to_string(p.expect("OFED file"))
        .unwrap()
        .trim()
        .to_string()
}

/// One run of the driver.
#[derive(Debug)]
struct Drive {
    what: String,
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Drive {
    fn new(what: String, o: Output) -> Drive {
        Drive {
            what,
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    #[track_caller]
    fn expect_ok(self) -> Drive {
        assert!(
            self.ok,
            "libcni-driver {} failed:\nstdout: {}\nstderr: {}",
            self.what, self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    fn expect_err(self) -> Drive {
        assert!(
            !self.ok,
            "libcni-driver {} succeeded, expected a failure:\nstdout: {}",
            self.what, self.stdout
        );
        self
    }
}

/// The IPv4 addresses on `ifname` in the pod (the kernel adds an IPv6 link-local itself).
fn pod_addrs(pod: &Pod, ifname: &str) -> Vec<String> {
    pod.link_snapshots()
        .into_iter()
        .find(|l| l.name == ifname)
        .map(|l| l.addrs.into_iter().filter(|a| !a.contains(':')).collect())
        .unwrap_or_default()
}

#[test]
fn add_check_del_del_through_libcni_for_each_version_and_config_format() {
    let lab = Lab::new();
    let vf = lab.host.vf(0);
    let netdev = vf.netdev.clone().expect("VF 0 has a netdev");
    let mut n = 0;
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        for format in [Format::Conf, Format::Conflist] {
            let ctx = format!("{version} {format:?}");
            n += 1;
            let cid = format!("lc-{n}");
            let conf = lab.write_conf(version, format, lab.plugin(0));
            let before = lab.host.snapshot();
            let pod = lab.host.new_pod();

            // ADD: the result as libcni hands it to the runtime.
            let res = lab.add(&[], &conf, &pod, &cid);
            assert_eq!(res["cniVersion"], version, "{ctx}: {res}");
            let ifaces = res["interfaces"].as_array().expect("interfaces");
            assert_eq!(ifaces.len(), 1, "{ctx}: {res}");
            assert_eq!(ifaces[0]["name"], IFNAME, "{ctx}: {res}");
            assert_eq!(ifaces[0]["sandbox"], pod.netns(), "{ctx}: {res}");
            let ips = res["ips"].as_array().expect("ips");
            assert_eq!(ips.len(), 1, "{ctx}: {res}");
            let ip = &ips[0];
            let addr = ip["address"].as_str().expect("address").to_string();
            assert!(
                addr.starts_with("10.56.217.") && addr.ends_with("/24"),
                "{ctx}: {addr}"
            );
            assert_eq!(ip["gateway"], "10.56.217.1", "{ctx}: {res}");
            assert_eq!(ip["interface"], 0, "{ctx}: {res}");
            if version.starts_with("0.") {
                assert_eq!(ip["version"], "4", "{ctx}: {res}");
            } else {
                assert!(ip.get("version").is_none(), "{ctx}: {res}");
            }
            assert_eq!(res["routes"][0]["dst"], "192.168.0.0/16", "{ctx}: {res}");

            // The netdev is in the pod as net1 with the address, gone from the host;
            // the plugin journaled the attachment and libcni cached the result.
            assert_eq!(pod_addrs(&pod, IFNAME), vec![addr.clone()], "{ctx}");
            assert!(
                lab.host.snapshot().link(&netdev).is_none(),
                "{ctx}: VF netdev still in the host netns"
            );
            assert_eq!(lab.journals(), vec![format!("{cid}:{IFNAME}")], "{ctx}");
            assert_eq!(
                lab.allocations(),
                vec![addr.trim_end_matches("/24").to_string()],
                "{ctx}"
            );
            assert!(lab.cache_entry(&cid).is_file(), "{ctx}: libcni cache entry");

            // CHECK: libcni sends the cached result as prevResult from 0.4.0 on and
            // refuses the command itself below that.
            let check = lab.drive(&[], "check", &conf, pod.netns(), &cid);
            if version == "0.3.1" {
                let e = check.expect_err();
                assert!(
                    e.stderr.contains("does not support the CHECK command"),
                    "{ctx}: {}",
                    e.stderr
                );
            } else {
                check.expect_ok();
            }

            // DEL, then DEL again (no cached result, nothing left to undo).
            for (first, what) in [
                (true, "host restored after DEL"),
                (false, "second DEL changed the host"),
            ] {
                lab.drive(&[], "del", &conf, pod.netns(), &cid).expect_ok();
                assert_eq!(lab.host.snapshot(), before, "{ctx}: {what}");
                assert_eq!(pod.links(), vec!["lo"], "{ctx}");
                assert!(lab.journals().is_empty(), "{ctx}: {:?}", lab.journals());
                assert!(
                    lab.allocations().is_empty(),
                    "{ctx}: {:?}",
                    lab.allocations()
                );
                if first {
                    assert!(!lab.cache_entry(&cid).exists(), "{ctx}: libcni cache entry");
                }
            }
        }
    }
}

#[test]
fn infiniband_guid_capability_arg_reaches_the_vf_and_is_restored_on_del() {
    const GUID: &str = "02:aa:bb:cc:dd:ee:ff:01";
    let lab = Lab::new();
    let vf = lab.host.vf(1);
    let node0 = read(vf.ofed_node());
    assert_ne!(node0, GUID);
    let before = lab.host.snapshot();
    let pod = lab.host.new_pod();
    let cap = format!("infinibandGUID={GUID}");

    // Declared capability: libcni turns --cap into runtimeConfig.infinibandGUID.
    let mut plugin = lab.plugin(1);
    plugin["capabilities"] = json!({"infinibandGUID": true});
    let conf = lab.write_conf("1.0.0", Format::Conflist, plugin);
    let res = lab.add(&["--cap", &cap], &conf, &pod, "guid-1");
    assert_eq!(res["interfaces"][0]["name"], IFNAME, "{res}");
    assert_eq!(read(vf.ofed_node()), GUID);
    assert_eq!(read(vf.ofed_port()), GUID);
    lab.drive(&["--cap", &cap], "check", &conf, pod.netns(), "guid-1")
        .expect_ok();
    // A GUID changed behind the plugin's back: CHECK fails, and the plugin's CNI error
    // object comes through libcni.
    let port = vf.ofed_port().unwrap();
    std::fs::write(&port, "02:aa:bb:cc:dd:ee:ff:02\n").unwrap();
    let e = lab
        .drive(&["--cap", &cap], "check", &conf, pod.netns(), "guid-1")
        .expect_err();
    assert!(
        e.stderr.contains(r#"cni-error: {"code":104,"#),
        "{}",
        e.stderr
    );
    std::fs::write(&port, format!("{GUID}\n")).unwrap();
    lab.drive(&["--cap", &cap], "del", &conf, pod.netns(), "guid-1")
        .expect_ok();
    assert_eq!(read(vf.ofed_node()), node0);
    assert_eq!(lab.host.snapshot(), before);
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(lab.journals().is_empty() && lab.allocations().is_empty());

    // Undeclared capability: libcni does not pass it on, the VF keeps its GUID.
    let conf = lab.write_conf("1.0.0", Format::Conf, lab.plugin(1));
    lab.add(&["--cap", &cap], &conf, &pod, "guid-2");
    assert_eq!(read(vf.ofed_node()), node0);
    lab.drive(&["--cap", &cap], "del", &conf, pod.netns(), "guid-2")
        .expect_ok();
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.journals().is_empty() && lab.allocations().is_empty());
}
