//! `Lab`: an emulated host plus the plugin's state and IPAM directories, and `Run`, the
//! outcome of one invocation of the real binary, shared by the integration tests.

use super::emuhost::{EmuHost, EmuOptions, HostSnapshot, Pod};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The plugin binary under test: the file named by `IB_SRIOV_BIN` when that is set (CI
/// runs the end-to-end tests that need no fail points once against the binary taken out
/// of the image, scripts/image-test.sh), else the one cargo built for the tests.
///
/// The node tools' binary must be beside it ([`tools_bin`]): the tests run `ib-sriov
/// doctor|exporter|top`, which runs it from there. Cargo builds a package's own binaries
/// for its tests, not another member's: scripts/test.sh builds the whole workspace
/// first (`cargo build --target "$triple" --features failpoints --workspace --bins`).
pub fn bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let b = plugin_bin(&BIN);
    let t = b.with_file_name("ib-sriovctl");
    static CHECKED: std::sync::Once = std::sync::Once::new();
    CHECKED.call_once(|| {
        let build = "build the node tools first, as scripts/test.sh does (cargo build --target <triple> --features failpoints --workspace --bins)";
        assert!(t.is_file(), "no {} beside the plugin under test: {build}", t.display());
        // A tools binary built at another commit (cargo rebuilt the plugin for the
        // tests, not the other package's binary) says another version: refused.
        let out = std::process::Command::new(&t)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", t.display()));
        let got = String::from_utf8_lossy(&out.stdout);
        let plugin = std::process::Command::new(b)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", b.display()));
        let want = String::from_utf8_lossy(&plugin.stdout).replacen("ib-sriov cni", "ib-sriovctl", 1);
        assert!(
            got.split(", date:").next() == want.split(", date:").next(),
            "{} is stale ({}) against the plugin ({}): {build}",
            t.display(),
            got.trim(),
            want.trim()
        );
    });
    b
}

/// The node tools' binary (`ib-sriovctl`, package src/ib-sriovctl) beside [`bin`].
pub fn tools_bin() -> PathBuf {
    bin().with_file_name("ib-sriovctl")
}

fn plugin_bin(cell: &'static std::sync::OnceLock<PathBuf>) -> &'static Path {
    cell.get_or_init(|| match std::env::var_os("IB_SRIOV_BIN") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(
                p.is_absolute(),
                "IB_SRIOV_BIN must be an absolute path: {p:?}"
            );
            assert_eq!(
                p.file_name().and_then(|n| n.to_str()),
                Some("ib-sriov"),
                "IB_SRIOV_BIN must name a file called ib-sriov (CNI finds a plugin by its type)"
            );
            p
        }
        _ => PathBuf::from(env!("CARGO_BIN_EXE_ib-sriov")),
    })
}

/// Where the labs' stateDirs live: on a tmpfs, as the plugin's default `/run/ib-sriov`
/// is on a systemd node (this machine's `/run` is not a mount of its own; `/dev/shm`
/// is a tmpfs everywhere).
pub const TMPFS_STATE_PARENT: &str = "/dev/shm/ib-sriov-tests";

/// One emulated host plus the plugin's state and IPAM directories.
pub struct Lab {
    /// The emulated host.
    pub host: EmuHost,
    /// The plugin's `stateDir`.
    pub state: PathBuf,
    /// The built-in IPAM `dataDir`.
    pub data: PathBuf,
}

impl Lab {
    /// An emulated host with the plugin's `stateDir` on a tmpfs, as the default
    /// `/run/ib-sriov` is on a node (`<TMPFS_STATE_PARENT>/<root name>`, removed on
    /// drop), and the IPAM `dataDir` under the host's root.
    pub fn new(opts: EmuOptions) -> Lab {
        let host = EmuHost::build(opts);
        let name = host.root().file_name().expect("root has a name").to_owned();
        let state = Path::new(TMPFS_STATE_PARENT).join(name);
        let data = host.root().join("var-lib-cni-networks");
        Lab { host, state, data }
    }

    #[allow(clippy::should_implement_trait)]
    pub fn default() -> Lab {
        Self::new(EmuOptions::default())
    }

    /// A default lab with VF `vf` attached as `c1`/`net1` (cniVersion 1.0.0) in a new
    /// pod: the lab, the host before the ADD, the pod and the config.
    #[track_caller]
    pub fn attached(vf: u32) -> (Lab, HostSnapshot, Pod, Value) {
        let lab = Lab::default();
        let before = lab.host.snapshot();
        let pod = lab.host.new_pod();
        let conf = lab.conf("1.0.0", vf);
        lab.add("c1", &pod, &conf).expect_ok();
        (lab, before, pod, conf)
    }

    /// A network config for VF `vf` with the built-in IPAM on 10.56.217.0/24.
    pub fn conf(&self, version: &str, vf: u32) -> Value {
        let mut c = plugin_conf(&self.host, &self.state, &self.data, vf);
        c["cniVersion"] = json!(version);
        c["name"] = json!("ibnet");
        c
    }

    pub fn run(
        &self,
        cmd: &str,
        cid: &str,
        netns: &str,
        conf: &Value,
        extra: &[(&str, &str)],
    ) -> Run {
        let out = self
            .host
            .run_plugin(bin(), cmd, cid, netns, "net1", &conf.to_string(), extra);
        Run::from(out)
    }

    pub fn add(&self, cid: &str, pod: &Pod, conf: &Value) -> Run {
        self.run("ADD", cid, pod.netns(), conf, &[])
    }

    pub fn del(&self, cid: &str, netns: &str, conf: &Value) -> Run {
        self.run("DEL", cid, netns, conf, &[])
    }

    /// DEL of `cid` in `netns` succeeds and leaves the host as `before` (its snapshot
    /// before the ADD).
    #[track_caller]
    pub fn del_restores(&self, cid: &str, netns: &str, conf: &Value, before: &HostSnapshot) {
        self.del(cid, netns, conf).expect_ok();
        assert_eq!(&self.host.snapshot(), before);
    }

    pub fn check(&self, cid: &str, pod: &Pod, conf: &Value, prev: &Value) -> Run {
        let mut c = conf.clone();
        c["prevResult"] = prev.clone();
        self.run("CHECK", cid, pod.netns(), &c, &[])
    }

    pub fn journals(&self) -> Vec<String> {
        list(&self.state)
            .into_iter()
            .filter(|n| n != "locks" && n != "vfs")
            .collect()
    }

    /// Addresses allocated in the built-in IPAM store of network `ibnet`.
    pub fn allocations(&self) -> Vec<String> {
        ipam_allocations(&self.data.join("ibnet"))
    }

    pub fn read(&self, p: Option<PathBuf>) -> String {
        std::fs::read_to_string(p.expect("OFED file"))
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn driver_file(&self, driver: &str, f: &str) -> String {
        std::fs::read_to_string(
            self.host
                .root()
                .join("bus/pci/drivers")
                .join(driver)
                .join(f),
        )
        .unwrap_or_default()
        .trim()
        .to_string()
    }

    /// `ib-sriov doctor --json` on the lab's host and stateDir, run in the host netns
    /// with the extra environment `env` (`NAME=value`): the findings of kind `code`.
    pub fn doctor_findings(&self, env: &[&str], code: &str) -> Vec<Value> {
        let root = format!("IB_SRIOV_SYSFS_ROOT={}", self.host.root().display());
        let (bin, state) = (
            bin().display().to_string(),
            self.state.display().to_string(),
        );
        let mut argv = vec!["env"];
        argv.extend_from_slice(env);
        argv.extend([
            root.as_str(),
            &bin,
            "doctor",
            "--json",
            "--state-dir",
            &state,
        ]);
        let out = self.host.host_exec(&argv);
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        let found: Vec<Value> = j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == code)
            .cloned()
            .collect();
        assert!(!found.is_empty(), "no {code} finding: {j}");
        found
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// Writes host-local records (`<store>/<ip>`: the container ID, `\r\n`, the ifname
/// `net1`, containernetworking/plugins plugins/ipam/host-local/backend/disk) for
/// `(ip, owner)` pairs, dated 400 days ago: leftovers of pods that died with an
/// earlier boot.
pub fn old_ipam_records(store: &Path, recs: &[(&str, &str)]) {
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(400 * 24 * 3600);
    for (ip, owner) in recs {
        let p = store.join(ip);
        std::fs::write(&p, format!("{owner}\r\nnet1")).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
    }
}

/// The addresses allocated in a built-in IPAM store directory (one network's): its
/// entries but the lock, the boot ID, the `last_reserved_ip*` files and dot files.
pub fn ipam_allocations(store: &Path) -> Vec<String> {
    list(store)
        .into_iter()
        .filter(|n| {
            n != "lock"
                && n != "boot_id"
                && !n.starts_with("last_reserved_ip")
                && !n.starts_with('.')
        })
        .collect()
}

/// The plugin's configuration for VF `vf` of `host` (without `cniVersion` and `name`):
/// stateDir `state`, the host's own Go cache directory, debug logging, and the built-in
/// IPAM on 10.56.217.0/24 with its data in `data`.
pub fn plugin_conf(host: &EmuHost, state: &Path, data: &Path, vf: u32) -> Value {
    // The Go plugin's cache files ADD writes for a rollback: the host's own directory
    // (doctor tests mirror it as /var/lib/cni/ib-sriov).
    let go_cache = host.root().join("go-cache");
    conf_for_device(&host.vf(vf).addr, state, &go_cache, data)
}

/// The plugin's configuration for the VF at PCI address `device` (without `cniVersion`
/// and `name`): stateDir `state`, Go cache directory `go_cache`, debug logging, and the
/// built-in IPAM on 10.56.217.0/24 (gateway .1, route 192.168.0.0/16) with its data in
/// `data`. Also the real-kernel lab's (tests/real_kernel.rs).
pub fn conf_for_device(device: &str, state: &Path, go_cache: &Path, data: &Path) -> Value {
    json!({
        "type": "ib-sriov",
        "deviceID": device,
        "stateDir": state,
        "goCacheDir": go_cache,
        "logLevel": "debug",
        "ipam": {
            "type": "ib-sriov-ipam",
            "subnet": "10.56.217.0/24",
            "gateway": "10.56.217.1",
            "routes": [{"dst": "192.168.0.0/16"}],
            "dataDir": data,
        }
    })
}

/// The boot ID recorded in a built-in IPAM store (`<store>/boot_id`) is the running
/// boot's (/proc/sys/kernel/random/boot_id).
#[track_caller]
pub fn assert_running_boot(store: &Path) {
    let running = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(
        std::fs::read_to_string(store.join("boot_id"))
            .unwrap()
            .trim(),
        running.trim()
    );
}

/// The CNI error `e`'s `msg` contains `needle`.
#[track_caller]
pub fn assert_msg_has(e: &Value, needle: &str) {
    assert!(e["msg"].as_str().unwrap().contains(needle), "{e}");
}

/// The first element of the JSON array `v` for which `pred` holds. Panics when `v` is
/// not an array, and with the message `missing()` when no element matches.
#[track_caller]
pub fn find_elem(
    v: &Value,
    pred: impl Fn(&Value) -> bool,
    missing: impl FnOnce() -> String,
) -> &Value {
    let arr = v.as_array().unwrap_or_else(|| panic!("not an array: {v}"));
    arr.iter()
        .find(|x| pred(x))
        .unwrap_or_else(|| panic!("{}", missing()))
}

/// The entry names of `dir`, sorted; empty when it cannot be read.
pub fn list(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A plugin's stdout parsed as JSON (`Null` when it is empty or white space). Panics,
/// naming `what`, when it is not JSON.
pub fn stdout_json(what: &str, stdout: &str) -> Value {
    if stdout.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e}): {stdout:?}"))
}

/// The outcome of one invocation.
#[derive(Debug)]
pub struct Run {
    /// Exit status 0.
    pub ok: bool,
    /// stdout parsed (Null when empty).
    pub json: Value,
    /// stdout as text.
    pub stdout: String,
    /// stderr as text (the plugin's log).
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        Run {
            ok: o.status.success(),
            json: stdout_json("the plugin", &stdout),
            stdout,
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    #[track_caller]
    pub fn expect_ok(self) -> Value {
        assert!(
            self.ok,
            "expected success, got {} / stderr: {}",
            self.stdout, self.stderr
        );
        self.json
    }

    #[track_caller]
    pub fn expect_code(self, code: u64) -> Value {
        assert!(
            !self.ok,
            "expected error code {code}, got success: {}",
            self.stdout
        );
        assert_eq!(
            self.json["code"], code,
            "expected code {code}: {} / stderr: {}",
            self.stdout, self.stderr
        );
        assert!(self.json["msg"].as_str().is_some_and(|m| !m.is_empty()));
        self.json
    }
}

/// The IPv4 addresses on `ifname` in the pod (the kernel adds an IPv6 link-local itself).
pub fn pod_addrs(pod: &Pod, ifname: &str) -> Vec<String> {
    pod.link_snapshots()
        .into_iter()
        .find(|l| l.name == ifname)
        .map(|l| l.addrs.into_iter().filter(|a| !a.contains(':')).collect())
        .unwrap_or_default()
}
