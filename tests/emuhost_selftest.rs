//! The emulated host checks itself: its sysfs tree reads back through
//! `ib_sriov_cni::sysfs` as the host it describes, its veths live in the private host
//! netns, snapshots are stable and see changes, and everything is removed on drop.
//! Needs root; without it every test fails (the fixture panics), none is skipped.

mod common;

use common::emuhost::{self, EmuHost, EmuOptions, PF_BDF, PF_NETDEV, ROOT_PORT_BDF};
use ib_sriov_cni::sysfs::{DiscoveryError, GuidKind, Sysfs};
use ib_sriov_cni::types::{Guid, LinkState, PciAddress, VfIndex};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Options for a host of `n` netdev VFs, otherwise the defaults.
fn vfs(n: u32) -> EmuOptions {
    EmuOptions {
        vfs: n,
        ..Default::default()
    }
}

fn pci(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn one_vfio() -> EmuHost {
    EmuHost::build(EmuOptions {
        vfio: vec![1],
        ..Default::default()
    })
}

fn caller_link_names() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-j", "link", "show"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn discovery_reads_every_vf_as_the_fixture_describes_it() {
    let host = one_vfio();
    let sysfs = Sysfs::new(host.root());
    let links = host.host_links();
    assert_eq!(host.vfs().len(), 4);
    for vf in host.vfs() {
        let d = sysfs.discover_vf(pci(&vf.addr)).unwrap();
        assert_eq!(d.addr.to_string(), vf.addr);
        assert_eq!(d.pf, pci(PF_BDF));
        assert_eq!(d.vf_index, VfIndex(vf.index));
        assert_eq!(d.pf_netdev.as_deref(), Some(PF_NETDEV));
        assert_eq!(d.netdev, vf.netdev);
        assert_eq!(d.driver.as_deref(), Some(vf.driver.as_str()));
        assert_eq!(d.rdma_devices, vf.rdma.iter().cloned().collect::<Vec<_>>());
        assert_eq!(d.pkeys, vf.pkeys);
        assert_eq!(d.is_vfio(), vf.index == 1);
        let pf = pci(PF_BDF);
        let idx = VfIndex(vf.index);
        // Same directory, reached through bus/pci/devices/<PF> or through devices/...
        let canon = |p: Option<std::path::PathBuf>| p.map(|p| p.canonicalize().unwrap());
        assert_eq!(canon(sysfs.ofed_dir(pf, idx)), canon(vf.ofed_dir.clone()));
        assert_eq!(
            sysfs.read_ofed_guid(pf, idx, GuidKind::Node).unwrap(),
            Some(vf.node_guid.as_deref().unwrap().parse::<Guid>().unwrap())
        );
        assert_eq!(
            sysfs.read_ofed_guid(pf, idx, GuidKind::Port).unwrap(),
            Some(vf.port_guid.as_deref().unwrap().parse::<Guid>().unwrap())
        );
        assert_eq!(
            sysfs.read_ofed_policy(pf, idx).unwrap(),
            Some(LinkState::Auto)
        );
        if let Some(name) = &vf.netdev {
            // The ifindex in sysfs is the real veth's.
            let real = links.iter().find(|l| &l.name == name).unwrap().ifindex;
            assert_eq!(
                sysfs.netdev_ifindex(pci(&vf.addr), name).unwrap(),
                Some(real)
            );
            assert_eq!(sysfs.netdev_pci_address(name).unwrap(), Some(pci(&vf.addr)));
            assert_eq!(
                sysfs
                    .wait_for_netdev(pci(&vf.addr), Duration::from_millis(100))
                    .unwrap(),
                *name
            );
        }
    }
    assert_eq!(
        host.vfs()
            .iter()
            .map(|v| v.addr.as_str())
            .collect::<Vec<_>>(),
        [
            "0000:af:00.2",
            "0000:af:00.3",
            "0000:af:00.4",
            "0000:af:00.5"
        ]
    );
    assert_eq!(sysfs.virtfns(pci(PF_BDF)).unwrap().len(), host.vfs().len());
}

#[test]
fn discovery_rejects_the_pf_the_root_port_and_unknown_addresses() {
    let host = EmuHost::build(EmuOptions::default());
    let sysfs = Sysfs::new(host.root());
    let e = sysfs.discover_vf(pci(PF_BDF)).unwrap_err();
    assert!(matches!(e, DiscoveryError::IsPf { .. }), "{e}");
    let e = sysfs.discover_vf(pci(ROOT_PORT_BDF)).unwrap_err();
    assert!(matches!(e, DiscoveryError::NotVf { .. }), "{e}");
    let e = sysfs.discover_vf(pci("0000:af:07.7")).unwrap_err();
    assert!(matches!(e, DiscoveryError::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("0000:af:07.7"), "{e}");
}

#[test]
fn vf_addresses_cross_a_device_boundary_like_the_hardware() {
    let host = EmuHost::build(vfs(8));
    assert_eq!(host.vf(5).addr, "0000:af:00.7");
    assert_eq!(host.vf(6).addr, "0000:af:01.0");
    let d = Sysfs::new(host.root())
        .discover_vf(pci("0000:af:01.0"))
        .unwrap();
    assert_eq!(d.vf_index, VfIndex(6));
    assert_eq!(d.netdev.as_deref(), Some("ibp175s0f0v6"));
}

#[test]
fn without_ofed_there_are_no_sriov_files() {
    let host = EmuHost::build(EmuOptions {
        ofed: false,
        ..vfs(1)
    });
    let sysfs = Sysfs::new(host.root());
    assert_eq!(host.vf(0).ofed_dir, None);
    assert_eq!(sysfs.ofed_dir(pci(PF_BDF), VfIndex(0)), None);
    assert_eq!(
        sysfs
            .read_ofed_guid(pci(PF_BDF), VfIndex(0), GuidKind::Node)
            .unwrap(),
        None
    );
    assert!(host.snapshot().ofed.is_empty());
}

#[test]
fn zero_guids_option() {
    let host = EmuHost::build(EmuOptions {
        zero_guids: true,
        ..vfs(1)
    });
    let g = Sysfs::new(host.root())
        .read_ofed_guid(pci(PF_BDF), VfIndex(0), GuidKind::Port)
        .unwrap()
        .unwrap();
    assert!(g.is_zero());
}

#[test]
fn veths_live_in_the_host_netns_and_not_in_ours() {
    let host = one_vfio();
    let names: Vec<String> = host.host_links().into_iter().map(|l| l.name).collect();
    let mut expected = vec!["lo".to_string(), PF_NETDEV.into(), "peer-pf".into()];
    for vf in host.vfs() {
        if let (Some(n), Some(p)) = (&vf.netdev, &vf.peer) {
            expected.push(n.clone());
            expected.push(p.clone());
        }
    }
    let mut sorted = names.clone();
    sorted.sort();
    expected.sort();
    assert_eq!(sorted, expected);
    assert!(!names.contains(&"ibp175s0f0v1".to_string()), "VF 1 is vfio");
    let ours = caller_link_names();
    for n in expected.iter().filter(|n| *n != "lo") {
        assert!(!ours.contains(n), "{n} leaked into the caller's netns");
    }
    for l in host.host_links() {
        assert!(l.up, "{} is down", l.name);
        if l.name != "lo" {
            assert_eq!(l.mtu, emuhost::DEFAULT_MTU, "{}", l.name);
        }
    }
}

#[test]
fn snapshot_is_stable_and_sees_changes() {
    let host = EmuHost::build(EmuOptions::default());
    let before = host.snapshot();
    assert_eq!(before, host.snapshot());
    assert_eq!(before.ofed.len(), 3 * host.vfs().len());
    let vf = host.vf(2).netdev.clone().unwrap();

    host.host_ip(&["link", "set", &vf, "down"]);
    let down = host.snapshot();
    assert_ne!(before, down);
    assert!(!down.link(&vf).unwrap().up);
    host.host_ip(&["link", "set", &vf, "up"]);
    assert_eq!(before, host.snapshot());

    host.host_ip(&["addr", "add", "192.0.2.1/24", "dev", &vf]);
    assert_eq!(host.snapshot().link(&vf).unwrap().addrs, ["192.0.2.1/24"]);
    host.host_ip(&["addr", "del", "192.0.2.1/24", "dev", &vf]);
    assert_eq!(before, host.snapshot());

    let policy = host.vf(0).ofed_policy().unwrap();
    std::fs::write(&policy, "Down\n").unwrap();
    assert_ne!(before, host.snapshot());
    std::fs::write(&policy, "Follow\n").unwrap();
    assert_eq!(before, host.snapshot());
}

#[test]
fn a_vf_moved_into_a_pod_and_back() {
    let host = EmuHost::build(EmuOptions::default());
    let sysfs = Sysfs::new(host.root());
    let before = host.snapshot();
    let pod = host.new_pod();
    let vf = host.vf(0);
    let name = vf.netdev.clone().unwrap();

    host.host_ip(&["link", "set", &name, "netns", &pod.name]);
    assert!(pod.links().contains(&name));
    assert!(host.snapshot().link(&name).is_none());
    host.sync_netdevs().unwrap();
    let d = sysfs.discover_vf(pci(&vf.addr)).unwrap();
    assert_eq!(d.netdev, None, "sysfs net/ is per netns");
    assert_eq!(sysfs.netdev_pci_address(&name).unwrap(), None);

    let out = pod.exec(&["ip", "link", "set", &name, "netns", host.host_netns()]);
    assert!(out.status.success(), "{out:?}");
    host.host_ip(&["link", "set", &name, "up"]);
    host.sync_netdevs().unwrap();
    assert_eq!(
        sysfs.discover_vf(pci(&vf.addr)).unwrap().netdev,
        Some(name.clone())
    );
    assert_eq!(before, host.snapshot());
    assert_eq!(pod.links(), ["lo"]);
}

#[test]
fn pods_are_deleted_on_drop_or_on_request() {
    let host = EmuHost::build(vfs(1));
    let pod = host.new_pod();
    let path = pod.path.clone();
    assert!(path.starts_with("/var/run/netns"));
    assert!(path.exists());
    assert_eq!(pod.links(), ["lo"]);
    drop(pod);
    assert!(!path.exists());

    let pod = host.new_pod();
    assert_ne!(pod.path, path, "pod names are not reused");
    pod.delete().unwrap();
    assert!(!pod.exists());
    pod.delete().unwrap();
    drop(pod);
}

#[test]
fn the_host_is_removed_on_drop() {
    let host = EmuHost::build(vfs(1));
    let root = host.root().to_path_buf();
    let ns = host.host_netns_path();
    assert!(root.join("bus/pci/devices").is_dir());
    assert!(ns.exists());
    drop(host);
    assert!(!root.exists());
    assert!(!ns.exists());
}

#[test]
fn run_plugin_gives_a_runtime_environment_inside_the_host_netns() {
    let host = EmuHost::build(vfs(1));
    let pod = host.new_pod();
    // /bin/sh reads its script from stdin: it reports its environment and netns.
    let script = "env | sort; echo ---; ip -o link show | cut -d: -f2";
    let out = host.run_plugin(
        Path::new("/bin/sh"),
        "ADD",
        "ctr1",
        pod.netns(),
        "net1",
        script,
        &[("CNI_ARGS", "IgnoreUnknown=1")],
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let (env, links) = text.split_once("---\n").unwrap();
    let mut vars: Vec<&str> = env
        .lines()
        .map(|l| l.split_once('=').unwrap().0)
        .filter(|k| !["PWD", "SHLVL", "_", "OLDPWD"].contains(k)) // set by sh itself
        .collect();
    vars.sort();
    assert_eq!(
        vars,
        [
            "CNI_ARGS",
            "CNI_COMMAND",
            "CNI_CONTAINERID",
            "CNI_IFNAME",
            "CNI_NETNS",
            "CNI_PATH",
            "IB_SRIOV_SYSFS_ROOT",
            "IB_SRIOV_TEST_GO_LOCK",
            "PATH"
        ]
    );
    assert!(env.contains("CNI_COMMAND=ADD\n"));
    assert!(env.contains(&format!("CNI_NETNS={}\n", pod.netns())));
    assert!(env.contains(&format!("IB_SRIOV_SYSFS_ROOT={}\n", host.root().display())));
    assert!(env.contains(&format!(
        "IB_SRIOV_TEST_GO_LOCK={}\n",
        host.go_lock_path().display()
    )));
    assert!(env.contains("CNI_PATH=/bin\n"));
    assert!(links.contains(PF_NETDEV), "not in the host netns: {links}");

    // Empty netns (DEL after the pod is gone): CNI_NETNS is not set at all.
    let out = host.run_plugin(Path::new("/bin/sh"), "DEL", "ctr1", "", "net1", "env", &[]);
    let env = String::from_utf8(out.stdout).unwrap();
    assert!(!env.contains("CNI_NETNS"), "{env}");
    assert!(env.contains("CNI_COMMAND=DEL"));
}

#[test]
fn hosts_built_in_parallel_do_not_collide() {
    let hosts: Vec<EmuHost> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3).map(|_| s.spawn(|| EmuHost::build(vfs(2)))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut names: Vec<&str> = hosts.iter().map(|h| h.host_netns()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3);
    for h in &hosts {
        assert!(h.host_links().iter().any(|l| l.name == PF_NETDEV));
    }
}

#[test]
fn attach_reads_back_a_kept_host() {
    let mut host = EmuHost::build(EmuOptions {
        vfio: vec![0],
        ..vfs(2)
    });
    host.keep();
    let mut again = EmuHost::attach(host.root()).unwrap();
    assert_eq!(again.describe(), host.describe());
    assert_eq!(again.vfs(), host.vfs());
    again.unkeep();
    let (root, ns) = (host.root().to_path_buf(), host.host_netns_path());
    drop(host);
    assert!(root.exists());
    drop(again);
    assert!(!root.exists() && !ns.exists());
}
