//! The Go ib-sriov-cni's cache fixtures (`tests/fixtures/go-cache/`, see the README
//! there) and the helpers the upgrade and rollback tests share: the manifest, the DEL
//! stdin, host-local on `CNI_PATH`, the host state Go's DEL leaves, and the Go plugin's
//! ADD ([`go_add`]) and DEL ([`go_del`]) played on the emulated host.

use super::emuhost::{EmuHost, HostSnapshot, Pod};
use super::lab::{find_elem, list, Lab, Run};
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
    find_elem(
        &m["fixtures"],
        |f| f["name"] == name,
        || format!("fixture {name} not in manifest.json"),
    )
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

/// The emulated host fixture `name` needs: VF 1 bound to vfio-pci for `d-vfio`, the
/// default host for the others.
pub fn fixture_host(name: &str) -> super::emuhost::EmuOptions {
    match name {
        "d-vfio" => super::emuhost::EmuOptions {
            vfio: vec![1],
            ..Default::default()
        },
        _ => Default::default(),
    }
}

/// What the Go plugin's DEL leaves of the host for fixture `name` (its documented
/// differences from "as before ADD", `cmdDel`/`ReleaseVF`/`ResetVFConfig` in
/// cmd/ib-sriov-cni/main.go at 543060da), applied to the pre-ADD snapshot `v`: a
/// netdev comes back down under its host name; a GUID given by runtimeConfig leaves
/// node and port GUID at the port GUID Go read before ADD; a link state leaves
/// `Follow`; in vfio mode node and port GUID are left all-ones (Go's default GUID).
pub fn go_del_leaves(lab: &Lab, name: &str, v: &mut HostSnapshot) {
    match name {
        // (f) is pod (a) as the v1.2.1 release wrote it.
        "a-guid-hostlocal" | "f-legacy-v1.2.1" => {
            netdev_down(lab, v, 0);
            ofed(
                lab,
                v,
                lab.host.vf(0).ofed_node(),
                "02:00:00:00:00:02:00:00",
            );
        }
        "b-noguid-hostlocal" => netdev_down(lab, v, 2),
        "c-linkstate-enable" => {
            netdev_down(lab, v, 3);
            ofed(lab, v, lab.host.vf(3).ofed_policy(), "Follow");
        }
        "d-vfio" => {
            let vf = lab.host.vf(1);
            ofed(lab, v, vf.ofed_node(), "ff:ff:ff:ff:ff:ff:ff:ff");
            ofed(lab, v, vf.ofed_port(), "ff:ff:ff:ff:ff:ff:ff:ff");
        }
        _ => panic!("no Go DEL expectation for fixture {name}"),
    }
}

/// What the Go ADD leaves for a VF with a netdev: GUID (both) and link state set, the
/// netdev in the pod as net1, up, with host-local's address and the configured routes
/// (allocated by running host-local itself, keyed by the pod's container ID).
pub fn go_add(lab: &Lab, f: &Value, pod: &Pod, conf: &Value) {
    let vf = lab.host.vf(f["vf"].as_u64().unwrap() as u32);
    let stdin = &f["stdin"];
    if let Some(g) = stdin["runtimeConfig"]["infinibandGUID"].as_str() {
        write(vf.ofed_node(), g);
        write(vf.ofed_port(), g);
    }
    if stdin.get("link_state").is_some() {
        write(vf.ofed_policy(), "Up");
    }
    if vf.is_vfio() {
        return;
    }
    let dev = vf.netdev.as_ref().unwrap();
    lab.host.host_ip(&["link", "set", dev, "down"]);
    lab.host
        .host_ip(&["link", "set", dev, "netns", pod.netns(), "name", "net1"]);
    assert!(pod
        .exec(&["ip", "link", "set", "net1", "up"])
        .status
        .success());
    // host-local's ADD, as ipam.ExecAdd ran it, then ConfigureIface's address and routes.
    let cid = f["containerID"].as_str().unwrap();
    let addr = host_local_add(&lab.host, cid, pod.netns(), conf);
    assert!(pod
        .exec(&["ip", "addr", "add", &addr, "dev", "net1"])
        .status
        .success());
    assert!(pod.exec(&go_default_route(&["ip"])).status.success());
}

/// `prefix` (`ip`, or `-n <netns>` for `ip_ok`) then the arguments of the default route
/// the Go plugin's `ConfigureIface` adds in the pod for the fixtures' host-local gateway.
pub fn go_default_route<'a>(prefix: &[&'a str]) -> Vec<&'a str> {
    let mut v = prefix.to_vec();
    v.extend("route add default via 10.56.217.1 dev net1".split(' '));
    v
}

/// What the Go plugin's `cmdDel` does with its cache file `cache` for the DEL of
/// `f`'s attachment in `pod` (stdin `conf`), on the emulated host, with the IPAM plugins
/// of `cni_dir` (then Debian's) on its `CNI_PATH`. The VF GUID and link
/// state are set through the MLNX_OFED sysfs files the emulated PF has (Go sets them
/// with PF netlink; the effect on the VF is the same), the rebind through the driver's
/// `unbind`/`bind` files.
pub fn go_del(lab: &Lab, f: &Value, pod: &Pod, conf: &Value, cache: &Path) {
    go_del_with(lab, f, pod, conf, cache, Path::new(DEBIAN_CNI))
}

pub fn go_del_with(lab: &Lab, f: &Value, pod: &Pod, conf: &Value, cache: &Path, cni_dir: &Path) {
    go_del_rdma(lab, f, pod, conf, cache, cni_dir, None)
}

/// [`go_del_with`], with the Go plugin's RDMA step played by `rdma_back`: when the cache
/// file has `rdmaIsolation: true`, `handleVFCleanup` (cmd/ib-sriov-cni/main.go at
/// 543060da) moves `RdmaNetState.containerRdmaDevName` from the pod netns back to the
/// host's (`utils.MoveRdmaDevFromNs`, pkg/utils/rdma.go) after `ReleaseVF` and before
/// `ResetVFConfig`; `rdma_back` gets that name. Without `rdma_back` such a cache file
/// panics: this host has no RDMA subsystem, so the caller must play the move.
pub fn go_del_rdma(
    lab: &Lab,
    f: &Value,
    pod: &Pod,
    conf: &Value,
    cache: &Path,
    cni_dir: &Path,
    rdma_back: Option<&dyn Fn(&str)>,
) {
    let c: Value = serde_json::from_slice(&std::fs::read(cache).unwrap()).unwrap();
    // IPAM first, with the DEL call's own stdin (the cache keeps only ipam.type): the
    // plugin of that name on CNI_PATH, as `ipam.ExecDel` finds it.
    if let Some(t) = c["ipam"]["type"].as_str().filter(|t| !t.is_empty()) {
        let mut ipam_conf = conf.clone();
        ipam_conf.as_object_mut().unwrap().remove("stateDir");
        let bin = [cni_dir, Path::new(DEBIAN_CNI)]
            .iter()
            .map(|d| d.join(t))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no IPAM plugin {t} on CNI_PATH"));
        let out = lab.host.run_plugin(
            &bin,
            "DEL",
            f["containerID"].as_str().unwrap(),
            pod.netns(),
            "net1",
            &ipam_conf.to_string(),
            &[("CNI_PATH", DEBIAN_CNI)],
        );
        assert!(out.status.success(), "{t} DEL: {out:?}");
    }
    if pod.exists() {
        let vfio = c["vfioPciMode"] == true;
        let vf: u32 = c["VFID"].as_u64().unwrap() as u32;
        let emu = lab.host.vf(vf);
        // ReleaseVF: down, renamed to HostIFNames, moved to the host netns.
        if !vfio {
            let host = c["HostIFNames"].as_str().unwrap();
            for args in [
                vec!["ip", "link", "set", "net1", "down"],
                vec!["ip", "link", "set", "net1", "name", host],
            ] {
                assert!(pod.exec(&args).status.success(), "{args:?}");
            }
            let to = lab.host.host_netns();
            assert!(pod
                .exec(&["ip", "link", "set", host, "netns", to])
                .status
                .success());
        }
        // MoveRdmaDevFromNs, when the cache file says rdmaIsolation (an error fails DEL).
        if c["rdmaIsolation"] == true {
            let name = c["RdmaNetState"]["containerRdmaDevName"].as_str().unwrap();
            rdma_back.expect("a cache file with rdmaIsolation: play the RDMA move")(name);
        }
        // ResetVFConfig: the GUID ADD was given back as HostIFGUID (all-zero read as
        // all-ones), node and port, then the rebind (not in vfio mode); link state auto.
        if let Some(g) = c["HostIFGUID"].as_str().filter(|g| !g.is_empty()) {
            let g = g.to_lowercase();
            let g = if g == "00:00:00:00:00:00:00:00" {
                "ff:ff:ff:ff:ff:ff:ff:ff".to_string()
            } else {
                g
            };
            std::fs::write(emu.ofed_node().unwrap(), format!("{g}\n")).unwrap();
            std::fs::write(emu.ofed_port().unwrap(), format!("{g}\n")).unwrap();
            if !vfio {
                let drivers = lab.host.root().join("bus/pci/drivers/mlx5_core");
                std::fs::write(drivers.join("unbind"), &emu.addr).unwrap();
                std::fs::write(drivers.join("bind"), &emu.addr).unwrap();
            }
        }
        if c["link_state"].as_str().is_some_and(|s| !s.is_empty()) {
            std::fs::write(emu.ofed_policy().unwrap(), "Follow\n").unwrap();
        }
    }
    std::fs::remove_file(cache).unwrap();
}
