//! `ib-sriov-ipam` as an IPAM plugin of its own: the `ib-sriov` executable started under
//! the file name `ib-sriov-ipam` (here a symlink in a CNI bin directory of the test, as
//! the image installs a copy) is the built-in allocator as a delegated IPAM plugin
//! (SPEC.md "Plugin Delegation"), which the Go ib-sriov-cni execs after a rollback.
//!
//! Driven by a main plugin that is not ours: Debian's `host-device`
//! (containernetworking-plugins 1.1.1, /usr/lib/cni; scripts/deps.sh installs it) on a
//! veth of the emulated host's netns, directly and through libcni (the driver of
//! tests/libcni, tests/common/libcni.rs). Debian's plugins know CNI versions up to
//! 1.0.0, so those runs use 1.0.0; GC and STATUS (1.1.0) are run on the IPAM plugin
//! directly. Needs root.

mod common;

use common::emuhost::{exec_in_netns, EmuHost, EmuOptions, Pod};
use common::lab::{bin, list};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// An emulated host (only its netns is used), a CNI bin directory holding
/// `ib-sriov-ipam` (a symlink to the binary under test), and the IPAM store.
struct Fx {
    host: EmuHost,
    cni_dir: tempfile::TempDir,
    data: PathBuf,
    veths: std::cell::Cell<u32>,
}

const DEBIAN_CNI: &str = "/usr/lib/cni";
const NET: &str = "hdnet";
const IFNAME: &str = "net1";

impl Fx {
    fn new() -> Fx {
        assert!(
            Path::new(DEBIAN_CNI).join("host-device").exists(),
            "{DEBIAN_CNI}/host-device is needed: apt-get install containernetworking-plugins"
        );
        let host = EmuHost::build(EmuOptions::default());
        let cni_dir = tempfile::Builder::new()
            .prefix("ib-sriov-ipam-bin-")
            .tempdir()
            .unwrap();
        std::os::unix::fs::symlink(bin(), cni_dir.path().join("ib-sriov-ipam")).unwrap();
        let data = host.root().join("ipam-data");
        Fx {
            host,
            cni_dir,
            data,
            veths: std::cell::Cell::new(0),
        }
    }

    fn ipam_bin(&self) -> PathBuf {
        self.cni_dir.path().join("ib-sriov-ipam")
    }

    fn cni_path(&self) -> String {
        format!("{}:{DEBIAN_CNI}", self.cni_dir.path().display())
    }

    fn store(&self) -> PathBuf {
        self.data.join(NET)
    }

    /// The per-IP records of the store.
    fn held(&self) -> Vec<String> {
        let mut v: Vec<String> = list(&self.store())
            .into_iter()
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect();
        v.sort();
        v
    }

    /// A new veth in the host netns (its peer stays there); returns its name.
    fn veth(&self) -> String {
        let k = self.veths.get();
        self.veths.set(k + 1);
        let (a, b) = (format!("hd{k}"), format!("hdp{k}"));
        self.host
            .host_ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        a
    }

    fn ipam(&self) -> Value {
        json!({"type": "ib-sriov-ipam", "dataDir": self.data,
               "ranges": [[{"subnet": "10.66.0.0/24", "rangeStart": "10.66.0.2",
                            "rangeEnd": "10.66.0.20", "gateway": "10.66.0.1"}]],
               "routes": [{"dst": "172.30.0.0/16", "gw": "10.66.0.1"}]})
    }

    /// host-device's configuration for `device` with the IPAM `ipam`.
    fn host_device(&self, device: &str, ipam: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": NET, "type": "host-device",
               "device": device, "ipam": ipam})
    }

    /// Runs `plugin` in the host netns with CNI_PATH holding ib-sriov-ipam.
    fn run(&self, plugin: &Path, cmd: &str, cid: &str, netns: &str, conf: &Value) -> Call {
        self.run_env(&[], plugin, cmd, cid, netns, conf)
    }

    /// [`Fx::run`] with the extra environment `env`.
    fn run_env(
        &self,
        env: &[(&str, &str)],
        plugin: &Path,
        cmd: &str,
        cid: &str,
        netns: &str,
        conf: &Value,
    ) -> Call {
        let path = self.cni_path();
        let mut e = vec![("CNI_PATH", path.as_str())];
        e.extend_from_slice(env);
        let out = self
            .host
            .run_plugin(plugin, cmd, cid, netns, IFNAME, &conf.to_string(), &e);
        Call::new(format!("{} {cmd} {cid}", plugin.display()), out)
    }

    fn host_device_bin(&self) -> PathBuf {
        Path::new(DEBIAN_CNI).join("host-device")
    }
}

/// One invocation's outcome.
struct Call {
    what: String,
    ok: bool,
    json: Value,
    stderr: String,
}

impl Call {
    fn new(what: String, out: Output) -> Call {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
        Call {
            what,
            ok: out.status.success(),
            json,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn expect_ok(self) -> Value {
        assert!(
            self.ok,
            "{} failed: {} / {}",
            self.what, self.json, self.stderr
        );
        self.json
    }

    fn expect_code(self, code: u64) -> Value {
        assert!(!self.ok, "{} succeeded: {}", self.what, self.json);
        assert_eq!(
            self.json["code"], code,
            "{}: {} / {}",
            self.what, self.json, self.stderr
        );
        self.json
    }
}

fn addrs(pod: &Pod, ifname: &str) -> Vec<String> {
    common::lab::pod_addrs(pod, ifname)
}

/// host-device with `"ipam": {"type": "ib-sriov-ipam"}`: ADD allocates from the range
/// (the record in host-local's format), the address is on the moved device, CHECK is
/// forwarded to the IPAM plugin and passes (and fails once the record is gone), DEL
/// releases; a second container gets the next address; DEL again succeeds.
#[test]
fn host_device_add_check_del_with_ib_sriov_ipam() {
    let fx = Fx::new();
    let hd = fx.host_device_bin();
    let (p1, p2) = (fx.host.new_pod(), fx.host.new_pod());
    let c1 = fx.host_device(&fx.veth(), fx.ipam());
    let res = fx.run(&hd, "ADD", "c1", p1.netns(), &c1).expect_ok();
    assert_eq!(res["ips"][0]["address"], "10.66.0.2/24", "{res}");
    assert_eq!(res["ips"][0]["gateway"], "10.66.0.1");
    assert_eq!(res["routes"][0]["dst"], "172.30.0.0/16");
    assert_eq!(addrs(&p1, IFNAME), ["10.66.0.2/24"]);
    assert_eq!(fx.held(), ["10.66.0.2"]);
    assert_eq!(
        std::fs::read_to_string(fx.store().join("10.66.0.2")).unwrap(),
        "c1\r\nnet1",
        "host-local's record format"
    );
    assert_eq!(
        std::fs::read_to_string(fx.store().join("last_reserved_ip.0")).unwrap(),
        "10.66.0.2"
    );
    let running = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(
        std::fs::read_to_string(fx.store().join("boot_id"))
            .unwrap()
            .trim(),
        running.trim(),
        "the boot marker"
    );

    let mut chk = c1.clone();
    chk["prevResult"] = res.clone();
    fx.run(&hd, "CHECK", "c1", p1.netns(), &chk).expect_ok();
    // Only the IPAM plugin can see that its record is gone: CHECK reaches it.
    let rec = std::fs::read(fx.store().join("10.66.0.2")).unwrap();
    std::fs::remove_file(fx.store().join("10.66.0.2")).unwrap();
    let r = fx.run(&hd, "CHECK", "c1", p1.netns(), &chk);
    assert!(!r.ok, "CHECK passed without the record");
    assert!(
        r.json["msg"]
            .as_str()
            .unwrap_or_default()
            .contains("holds no address in IPAM network hdnet"),
        "{} / {}",
        r.json,
        r.stderr
    );
    std::fs::write(fx.store().join("10.66.0.2"), rec).unwrap();
    fx.run(&hd, "CHECK", "c1", p1.netns(), &chk).expect_ok();

    let c2 = fx.host_device(&fx.veth(), fx.ipam());
    let res2 = fx.run(&hd, "ADD", "c2", p2.netns(), &c2).expect_ok();
    assert_eq!(res2["ips"][0]["address"], "10.66.0.3/24", "{res2}");
    assert_eq!(fx.held(), ["10.66.0.2", "10.66.0.3"]);

    fx.run(&hd, "DEL", "c1", p1.netns(), &c1).expect_ok();
    assert_eq!(fx.held(), ["10.66.0.3"], "c1's address released");
    // (A second DEL through host-device 1.1.1 fails in host-device itself, "failed to
    // find net1", after the IPAM plugin's DEL succeeded: its own non-idempotence.)
    // DEL straight to the IPAM plugin is idempotent, also without CNI_NETNS.
    fx.run(&fx.ipam_bin(), "DEL", "c1", "", &c1).expect_ok();
    fx.run(&hd, "DEL", "c2", p2.netns(), &c2).expect_ok();
    assert!(fx.held().is_empty());
    // Round robin: the next container gets the address after the last one handed out.
    let p3 = fx.host.new_pod();
    let c3 = fx.host_device(&fx.veth(), fx.ipam());
    let res3 = fx.run(&hd, "ADD", "c3", p3.netns(), &c3).expect_ok();
    assert_eq!(res3["ips"][0]["address"], "10.66.0.4/24", "{res3}");
    fx.run(&hd, "DEL", "c3", p3.netns(), &c3).expect_ok();
    assert!(fx.held().is_empty());
}

/// The reboot leak of host-local (containernetworking/plugins#697), closed in this mode
/// too: records of another boot (the store's marker names another boot, the records
/// date from before this boot began) are freed by the first ADD of this boot, so a
/// one-address pool they fill does not stay exhausted; a record written in this boot
/// stays.
#[test]
fn the_first_add_of_a_boot_frees_the_records_of_earlier_boots() {
    let fx = Fx::new();
    let hd = fx.host_device_bin();
    let ipam = json!({"type": "ib-sriov-ipam", "dataDir": fx.data,
        "ranges": [[{"subnet": "10.67.0.0/24", "rangeStart": "10.67.0.2", "rangeEnd": "10.67.0.3"}]]});
    let store = fx.store();
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(
        store.join("boot_id"),
        "0badb007-0000-4000-8000-000000000001\n",
    )
    .unwrap();
    common::lab::old_ipam_records(&store, &[("10.67.0.2", "dead1"), ("10.67.0.3", "dead2")]);
    let pod = fx.host.new_pod();
    let conf = fx.host_device(&fx.veth(), ipam.clone());
    // STATUS still sees the pool full (it frees nothing).
    let mut st = json!({"cniVersion": "1.1.0", "name": NET, "ipam": ipam});
    fx.run(&fx.ipam_bin(), "STATUS", "", "", &st)
        .expect_code(50);
    let res = fx.run(&hd, "ADD", "r1", pod.netns(), &conf).expect_ok();
    assert_eq!(res["ips"][0]["address"], "10.67.0.2/24", "{res}");
    assert_eq!(
        fx.held(),
        ["10.67.0.2"],
        "both records of the earlier boot freed"
    );
    assert_eq!(
        std::fs::read_to_string(store.join("10.67.0.2")).unwrap(),
        "r1\r\nnet1"
    );
    common::lab::assert_running_boot(&store);
    st["ipam"] = conf["ipam"].clone();
    fx.run(&fx.ipam_bin(), "STATUS", "", "", &st).expect_ok();
    // A record of this boot (host-local sharing the store) is not freed by a later ADD.
    std::fs::write(store.join("10.67.0.3"), "alive\r\nnet1").unwrap();
    let pod2 = fx.host.new_pod();
    let conf2 = fx.host_device(&fx.veth(), conf["ipam"].clone());
    let e = fx
        .run(&hd, "ADD", "r2", pod2.netns(), &conf2)
        .expect_code(103);
    common::lab::assert_msg_has(&e, "no IP addresses available");
    fx.run(&hd, "DEL", "r1", pod.netns(), &conf).expect_ok();
    assert_eq!(fx.held(), ["10.67.0.3"]);
}

/// The IPAM plugin on its own: VERSION lists the versions, ADD prints `ips` and `routes`
/// without `interfaces`, STATUS answers (code 50 when the pool is exhausted), GC (1.1.0)
/// releases the records of attachments not listed, CNI codes for errors, and a run under
/// `IB_SRIOV_DELEGATED` (ib-sriov's delegation-loop guard) still allocates.
#[test]
fn standalone_version_add_status_gc_and_errors() {
    let fx = Fx::new();
    let ipam = fx.ipam_bin();
    let out = Command::new(&ipam)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["supportedVersions"],
        json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
    let out = Command::new(&ipam).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ib-sriov-ipam version:"));

    let conf = json!({"cniVersion": "1.1.0", "name": NET, "ipam": {
        "type": "ib-sriov-ipam", "dataDir": fx.data,
        "ranges": [[{"subnet": "10.68.0.0/29"}], [{"subnet": "fd00:68::/120"}]]}});
    fx.run(&ipam, "STATUS", "", "", &conf).expect_ok();
    let pod = fx.host.new_pod();
    let a = fx.run(&ipam, "ADD", "s1", pod.netns(), &conf).expect_ok();
    assert_eq!(a["cniVersion"], "1.1.0");
    assert!(a.get("interfaces").is_none(), "{a}");
    assert_eq!(a["ips"][0]["address"], "10.68.0.2/29", "{a}");
    assert_eq!(a["ips"][0]["gateway"], "10.68.0.1");
    assert!(a["ips"][0].get("interface").is_none(), "{a}");
    assert_eq!(a["ips"][1]["address"], "fd00:68::2/120", "{a}");
    // ADD again for the same attachment: the same addresses.
    let again = fx.run(&ipam, "ADD", "s1", pod.netns(), &conf).expect_ok();
    assert_eq!(again["ips"], a["ips"]);
    // Under ib-sriov's delegation-loop guard the IPAM plugin still allocates.
    let d = fx
        .run_env(
            &[("IB_SRIOV_DELEGATED", "1")],
            &ipam,
            "ADD",
            "s2",
            pod.netns(),
            &conf,
        )
        .expect_ok();
    assert_eq!(d["ips"][0]["address"], "10.68.0.3/29", "{d}");
    // Older result versions.
    let mut old = conf.clone();
    old["cniVersion"] = json!("0.3.1");
    let r = fx.run(&ipam, "ADD", "s3", pod.netns(), &old).expect_ok();
    assert_eq!(r["ips"][0]["version"], "4", "{r}");
    assert_eq!(fx.held().len(), 6);

    // GC keeps s1 only.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "s1", "ifname": IFNAME}]);
    fx.run(&ipam, "GC", "", "", &gc).expect_ok();
    assert_eq!(fx.held(), ["10.68.0.2", "fd00:68::2"]);
    old["cni.dev/valid-attachments"] = json!([]);
    fx.run(&ipam, "GC", "", "", &old).expect_code(1);
    gc.as_object_mut()
        .unwrap()
        .remove("cni.dev/valid-attachments");
    fx.run(&ipam, "GC", "", "", &gc).expect_code(7);

    // Exhausted: STATUS says 50, ADD 103.
    // Round robin from the last address handed out (10.68.0.4): .5, .6, then .3, .4.
    for (cid, want) in [("x1", 5), ("x2", 6), ("x3", 3), ("x4", 4)] {
        let r = fx.run(&ipam, "ADD", cid, pod.netns(), &conf).expect_ok();
        assert_eq!(r["ips"][0]["address"], format!("10.68.0.{want}/29"), "{r}");
    }
    fx.run(&ipam, "STATUS", "", "", &conf).expect_code(50);
    fx.run(&ipam, "ADD", "x6", pod.netns(), &conf)
        .expect_code(103);

    // Bad configurations: 7; bad version: 1; DEL of a refused configuration succeeds.
    let mut bad = conf.clone();
    bad["ipam"]["ranges"] = json!([[{"subnet": "10.68.0.1/29"}]]);
    fx.run(&ipam, "ADD", "b1", pod.netns(), &bad).expect_code(7);
    let mut none = conf.clone();
    none.as_object_mut().unwrap().remove("ipam");
    fx.run(&ipam, "ADD", "b1", pod.netns(), &none)
        .expect_code(7);
    fx.run(&ipam, "DEL", "b1", pod.netns(), &none).expect_ok();
    let mut v9 = conf.clone();
    v9["cniVersion"] = json!("9.9.9");
    fx.run(&ipam, "ADD", "b1", pod.netns(), &v9).expect_code(1);
    // DEL releases with the store alone, whatever the ranges became.
    fx.run(&ipam, "DEL", "s1", pod.netns(), &bad).expect_ok();
    assert!(!fx.held().contains(&"10.68.0.2".to_string()));
    // A busy store lock: 11.
    let lock = nix::fcntl::Flock::lock(
        std::fs::File::open(fx.store().join("lock")).unwrap(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .map_err(|(_, e)| e)
    .unwrap();
    let mut quick = conf.clone();
    quick["lockTimeoutMs"] = json!(200);
    fx.run(&ipam, "ADD", "l1", pod.netns(), &quick)
        .expect_code(11);
    drop(lock);
}

/// Through libcni (the Go library of containerd, CRI-O, Multus): a conflist with
/// host-device and ib-sriov-ipam, ADD, CHECK, DEL, and GC (at 1.0.0 libcni's GC is
/// the DEL of every cached attachment not listed as valid; GC itself needs 1.1.0, which
/// Debian's host-device does not speak).
#[test]
fn libcni_conflist_with_host_device_and_ib_sriov_ipam() {
    let fx = Fx::new();
    let driver = common::libcni::driver();
    let scratch = tempfile::tempdir().unwrap();
    let conflist = |device: &str| {
        let p = scratch.path().join(format!("{device}.conflist"));
        let v = json!({"cniVersion": "1.0.0", "name": NET, "plugins": [
            {"type": "host-device", "device": device, "ipam": fx.ipam()}]});
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    let cache = scratch.path().join("cache");
    let drive = |args: &[&str]| -> Output {
        let mut argv = vec![driver.to_str().unwrap()];
        argv.extend_from_slice(args);
        let path = fx.cni_path();
        exec_in_netns(
            &fx.host.host_netns_path(),
            &argv,
            &[
                ("CNI_PATH", path.as_str()),
                ("LIBCNI_CACHE_DIR", cache.to_str().unwrap()),
            ],
            None,
        )
    };
    let ok = |o: Output, what: &str| -> String {
        assert!(
            o.status.success(),
            "{what}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let (p1, p2) = (fx.host.new_pod(), fx.host.new_pod());
    let (f1, f2) = (conflist(&fx.veth()), conflist(&fx.veth()));
    let (f1, f2) = (f1.to_str().unwrap(), f2.to_str().unwrap());
    let r1: Value =
        serde_json::from_str(&ok(drive(&["add", f1, p1.netns(), "l1", IFNAME]), "add l1")).unwrap();
    assert_eq!(r1["ips"][0]["address"], "10.66.0.2/24", "{r1}");
    assert_eq!(addrs(&p1, IFNAME), ["10.66.0.2/24"]);
    let r2: Value =
        serde_json::from_str(&ok(drive(&["add", f2, p2.netns(), "l2", IFNAME]), "add l2")).unwrap();
    assert_eq!(r2["ips"][0]["address"], "10.66.0.3/24", "{r2}");
    assert_eq!(
        std::fs::read_to_string(fx.store().join("10.66.0.3")).unwrap(),
        "l2\r\nnet1"
    );
    ok(drive(&["check", f1, p1.netns(), "l1", IFNAME]), "check l1");
    ok(drive(&["check", f2, p2.netns(), "l2", IFNAME]), "check l2");
    // GC with l1 valid: libcni DELs l2 (its cached attachment), releasing its address.
    ok(drive(&["--valid", "l1/net1", "gc", f2]), "gc");
    assert_eq!(fx.held(), ["10.66.0.2"]);
    ok(drive(&["del", f1, p1.netns(), "l1", IFNAME]), "del l1");
    assert!(fx.held().is_empty());
}
