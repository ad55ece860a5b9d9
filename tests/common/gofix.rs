//! The Go ib-sriov-cni's cache fixtures (`tests/fixtures/go-cache/`, see the README
//! there) and the helpers the upgrade and rollback tests share: the manifest, the DEL
//! stdin, host-local on `CNI_PATH`, and the host state Go's DEL leaves.

use super::emuhost::{EmuHost, HostSnapshot, Pod};
use super::lab::{list, Lab, Run};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const DEBIAN_CNI: &str = "/usr/lib/cni";

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/go-cache")
}

pub fn manifest(name: &str) -> Value {
    let m: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap();
    m["fixtures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("fixture {name} not in manifest.json"))
        .clone()
}

pub fn cni_path() -> String {
    assert!(
        Path::new(DEBIAN_CNI).join("host-local").exists(),
        "{DEBIAN_CNI}/host-local is needed: apt-get install containernetworking-plugins"
    );
    format!(
        "{}:{DEBIAN_CNI}",
        super::lab::bin().parent().unwrap().display()
    )
}

/// The DEL stdin: the ADD stdin the Go plugin got (Go's DEL hands the DEL call's own
/// stdin to the IPAM plugin), pointed at the lab's state and host-local directories.
pub fn del_conf(lab: &Lab, f: &Value) -> Value {
    let mut c = f["stdin"].clone();
    c["stateDir"] = json!(lab.state);
    c["logLevel"] = json!("debug");
    if c["ipam"].get("type").is_some() {
        c["ipam"]["dataDir"] = json!(lab.host.root().join("host-local"));
    }
    c
}

pub fn run(lab: &Lab, cmd: &str, f: &Value, pod: &Pod, conf: &Value) -> Run {
    let path = cni_path();
    let cid = f["containerID"].as_str().unwrap();
    lab.run(cmd, cid, pod.netns(), conf, &[("CNI_PATH", path.as_str())])
}

/// host-local's ADD for a Go attachment of container `cid` in netns `netns` (a path),
/// as the Go plugin's `ipam.ExecAdd` ran it with the attachment's stdin `conf` (without
/// our `stateDir`); the first address of its result, `a.b.c.d/len`.
pub fn host_local_add(host: &EmuHost, cid: &str, netns: &str, conf: &Value) -> String {
    let mut ipam_conf = conf.clone();
    ipam_conf.as_object_mut().unwrap().remove("stateDir");
    let out = host.run_plugin(
        &Path::new(DEBIAN_CNI).join("host-local"),
        "ADD",
        cid,
        netns,
        "net1",
        &ipam_conf.to_string(),
        &[("CNI_PATH", DEBIAN_CNI)],
    );
    assert!(out.status.success(), "host-local ADD: {out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    r["ips"][0]["address"].as_str().unwrap().to_string()
}

/// Installs the cache file as the Go plugin wrote it (dir 0700, file 0600).
pub fn install_cache(lab: &Lab, f: &Value) -> PathBuf {
    std::fs::create_dir_all(&lab.state).unwrap();
    std::fs::set_permissions(&lab.state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let src = fixtures()
        .join(f["dir"].as_str().unwrap())
        .join(f["file"].as_str().unwrap());
    let dst = lab.state.join(f["file"].as_str().unwrap());
    std::fs::copy(&src, &dst).unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o600)).unwrap();
    dst
}

pub fn write(p: Option<PathBuf>, v: &str) {
    std::fs::write(p.unwrap(), format!("{v}\n")).unwrap();
}

pub fn host_local_held(lab: &Lab, network: &str) -> Vec<String> {
    list(&lab.host.root().join("host-local").join(network))
        .into_iter()
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

/// The netdev of VF `n` comes back under its host name and is left down (Go's
/// ReleaseVF sets it down and never up again).
pub fn netdev_down(lab: &Lab, v: &mut HostSnapshot, n: u32) {
    let name = lab.host.vf(n).netdev.clone().unwrap();
    let l = v.links.iter_mut().find(|l| l.name == name).unwrap();
    l.up = false;
}

/// Sets the expected content of one OFED file.
pub fn ofed(lab: &Lab, v: &mut HostSnapshot, file: Option<PathBuf>, content: &str) {
    let rel = file
        .unwrap()
        .strip_prefix(lab.host.root())
        .unwrap()
        .display()
        .to_string();
    let e = v.ofed.iter_mut().find(|(p, _)| *p == rel).unwrap();
    e.1 = format!("{content}\n");
}
