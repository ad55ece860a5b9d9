//! Unit tests of the sysfs reads and writes, on emulated trees.

use super::netdev::pick_pf_netdev;
use super::pci::vf_index_by_routing_id;
use super::*;
use crate::types::{Guid, LinkState, PciAddress, VfIndex};
use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn pci(s: &str) -> PciAddress {
    s.parse().unwrap()
}

/// A sysfs tree laid out as the kernel does (facts.md section 2): PF 0000:af:00.0
/// behind root port 0000:ae:00.0, VFs 0000:af:00.2.. as virtfn0.., all links relative.
struct Tree {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

const PARENT: &str = "devices/pci0000:ae/0000:ae:00.0";
const PF: &str = "0000:af:00.0";

fn vf_bdf(n: u32) -> String {
    format!("0000:af:00.{}", n + 2)
}

impl Tree {
    fn new(vfs: u32) -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let t = Tree { _tmp: tmp, root };
        for d in ["mlx5_core", "vfio-pci"] {
            let dir = t.root.join("bus/pci/drivers").join(d);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("bind"), "").unwrap();
            fs::write(dir.join("unbind"), "").unwrap();
        }
        fs::create_dir_all(t.root.join("class/net")).unwrap();
        t.device(PF, "mlx5_core");
        let pf = t.dev(PF);
        fs::write(pf.join("sriov_totalvfs"), "8\n").unwrap();
        fs::write(pf.join("sriov_numvfs"), format!("{vfs}\n")).unwrap();
        t.netdev(PF, "ibp175s0f0");
        for n in 0..vfs {
            let b = vf_bdf(n);
            t.device(&b, "mlx5_core");
            symlink(format!("../{PF}"), t.dev(&b).join("physfn")).unwrap();
            symlink(format!("../{b}"), pf.join(format!("virtfn{n}"))).unwrap();
            t.netdev(&b, &format!("ibp175s0f0v{n}"));
            let pk = t
                .dev(&b)
                .join(format!("infiniband/mlx5_{}/ports/1/pkeys", n + 1));
            fs::create_dir_all(&pk).unwrap();
            // Written out of lexical order on purpose: 10 sorts before 2 as text.
            for (i, v) in [(0, "0xffff"), (2, "0x0000"), (10, "0x8001"), (1, "0x7fff")] {
                fs::write(pk.join(i.to_string()), format!("{v}\n")).unwrap();
            }
            let o = pf.join(format!("sriov/{n}"));
            fs::create_dir_all(&o).unwrap();
            fs::write(o.join("node"), format!("02:00:00:00:00:01:00:{n:02x}\n")).unwrap();
            fs::write(o.join("port"), format!("02:00:00:00:00:02:00:{n:02x}\n")).unwrap();
            fs::write(o.join("policy"), "Follow\n").unwrap();
        }
        t
    }

    fn dev(&self, bdf: &str) -> PathBuf {
        self.root.join(PARENT).join(bdf)
    }

    fn device(&self, bdf: &str, driver: &str) {
        let d = self.dev(bdf);
        fs::create_dir_all(&d).unwrap();
        let devices = self.root.join("bus/pci/devices");
        fs::create_dir_all(&devices).unwrap();
        symlink(format!("../../../{PARENT}/{bdf}"), devices.join(bdf)).unwrap();
        self.set_driver(bdf, Some(driver));
    }

    fn set_driver(&self, bdf: &str, driver: Option<&str>) {
        let link = self.dev(bdf).join("driver");
        let _ = fs::remove_file(&link);
        if let Some(driver) = driver {
            // <root>/devices/pci0000:ae/0000:ae:00.0/<bdf>: four levels up to <root>.
            symlink(format!("../../../../bus/pci/drivers/{driver}"), link).unwrap();
        }
    }

    fn netdev(&self, bdf: &str, name: &str) {
        let d = self.dev(bdf).join("net").join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("ifindex"), "42\n").unwrap();
        symlink(format!("../../../{bdf}"), d.join("device")).unwrap();
        symlink(
            format!("../../{PARENT}/{bdf}/net/{name}"),
            self.root.join("class/net").join(name),
        )
        .unwrap();
    }

    fn sysfs(&self) -> Sysfs {
        Sysfs::new(&self.root)
    }
}

/// With `sriov_offset`/`sriov_stride` the index comes from the routing ID and one
/// readlink (a bogus earlier `virtfn1` naming the same VF, which the scan would take,
/// is never looked at); a wrong offset falls back to the scan.
#[test]
fn vf_index_by_routing_id_then_by_scan() {
    let t = Tree::new(5);
    let pf = t.dev(PF);
    fs::write(pf.join("sriov_offset"), "2\n").unwrap();
    fs::write(pf.join("sriov_stride"), "1\n").unwrap();
    fs::remove_file(pf.join("virtfn1")).unwrap();
    symlink(format!("../{}", vf_bdf(3)), pf.join("virtfn1")).unwrap();
    let vf = t.sysfs().discover_vf(pci(&vf_bdf(3))).unwrap();
    assert_eq!(vf.vf_index, VfIndex(3));
    assert_eq!(vf.netdev.as_deref(), Some("ibp175s0f0v3"));
    assert_eq!(vf.pkeys, vec![0xffff, 0x7fff, 0x0000, 0x8001]);
    // Off by one: the routing ID names virtfn4, which is another VF: the scan decides
    // (and finds the bogus virtfn1 first, as before this rule existed).
    fs::write(pf.join("sriov_offset"), "1\n").unwrap();
    assert_eq!(
        t.sysfs().discover_vf(pci(&vf_bdf(3))).unwrap().vf_index,
        VfIndex(1)
    );
    // At offset 1, routing ID 0xaf07 is index 6.
    assert_eq!(
        vf_index_by_routing_id(&pf, pci(PF), pci("0000:af:00.7")),
        Some(VfIndex(6))
    );
    fs::write(pf.join("sriov_stride"), "0\n").unwrap();
    assert_eq!(vf_index_by_routing_id(&pf, pci(PF), pci(&vf_bdf(3))), None);
    fs::write(pf.join("sriov_stride"), "1\n").unwrap();
    fs::write(pf.join("sriov_offset"), "2\n").unwrap();
    // A VF on the next device number: 0000:af:01.0 is routing ID 0xaf08, index 6.
    assert_eq!(
        vf_index_by_routing_id(&pf, pci(PF), pci("0000:af:01.0")),
        Some(VfIndex(6))
    );
    assert_eq!(
        vf_index_by_routing_id(&pf, pci(PF), pci("0001:af:00.3")),
        None
    );
    assert_eq!(
        vf_index_by_routing_id(&pf, pci(PF), pci("0000:af:00.1")),
        None
    );
}

#[test]
fn discovers_a_vf() {
    let t = Tree::new(3);
    let vf = t.sysfs().discover_vf(pci("0000:af:00.3")).unwrap();
    assert_eq!(
        vf,
        VfDevice {
            addr: pci("0000:af:00.3"),
            pf: pci(PF),
            vf_index: VfIndex(1),
            pf_netdev: Some("ibp175s0f0".into()),
            netdev: Some("ibp175s0f0v1".into()),
            driver: Some("mlx5_core".into()),
            rdma_devices: vec!["mlx5_2".into()],
            pkeys: vec![0xffff, 0x7fff, 0x0000, 0x8001],
        }
    );
    assert!(!vf.is_vfio());
}

#[test]
fn index_comes_from_virtfn_links_not_from_the_address() {
    let t = Tree::new(3);
    let pf = t.dev(PF);
    // Swap virtfn0 and virtfn2.
    fs::remove_file(pf.join("virtfn0")).unwrap();
    fs::remove_file(pf.join("virtfn2")).unwrap();
    symlink(format!("../{}", vf_bdf(2)), pf.join("virtfn0")).unwrap();
    symlink(format!("../{}", vf_bdf(0)), pf.join("virtfn2")).unwrap();
    let vf = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap();
    assert_eq!(vf.vf_index, VfIndex(2));
}

#[test]
fn vfio_vf_without_netdev_or_rdma() {
    let t = Tree::new(2);
    let b = vf_bdf(1);
    fs::remove_dir_all(t.dev(&b).join("net")).unwrap();
    fs::remove_dir_all(t.dev(&b).join("infiniband")).unwrap();
    t.set_driver(&b, Some("vfio-pci"));
    let vf = t.sysfs().discover_vf(pci(&b)).unwrap();
    assert!(vf.is_vfio());
    assert_eq!(vf.driver.as_deref(), Some("vfio-pci"));
    assert_eq!(vf.netdev, None);
    assert!(vf.rdma_devices.is_empty());
    assert!(vf.pkeys.is_empty());
    assert_eq!(vf.vf_index, VfIndex(1));
}

#[test]
fn pf_netdev_prefers_the_infiniband_one() {
    let d = tempfile::tempdir().unwrap();
    let net = d.path();
    for (n, ty) in [("enp1s0", "1"), ("ibpf0", "32"), ("zz0", "1")] {
        fs::create_dir_all(net.join(n)).unwrap();
        fs::write(net.join(n).join("type"), format!("{ty}\n")).unwrap();
    }
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        pick_pf_netdev(net, names(&["enp1s0", "ibpf0", "zz0"])).as_deref(),
        Some("ibpf0")
    );
    // One netdev: taken whatever its type; none InfiniBand: the first; none: None.
    assert_eq!(pick_pf_netdev(net, names(&["zz0"])).as_deref(), Some("zz0"));
    assert_eq!(
        pick_pf_netdev(net, names(&["enp1s0", "zz0"])).as_deref(),
        Some("enp1s0")
    );
    assert_eq!(pick_pf_netdev(net, Vec::new()), None);
}

#[test]
fn unbound_vf_and_empty_net_dir() {
    let t = Tree::new(1);
    let b = vf_bdf(0);
    t.set_driver(&b, None);
    fs::remove_dir_all(t.dev(&b).join("net/ibp175s0f0v0")).unwrap();
    let s = t.sysfs();
    let vf = s.discover_vf(pci(&b)).unwrap();
    assert_eq!(vf.driver, None);
    assert_eq!(vf.netdev, None);
    assert_eq!(s.driver(pci(&b)).unwrap(), None);
    assert!(s.netdevs(pci(&b)).unwrap().is_empty());
}

#[test]
fn unknown_address_is_not_found() {
    let t = Tree::new(1);
    let e = t.sysfs().discover_vf(pci("0000:af:03.7")).unwrap_err();
    assert!(matches!(e, DiscoveryError::NotFound { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "PCI device 0000:af:03.7 not found under {}/bus/pci/devices",
            t.root.display()
        )
    );
    let io = t.sysfs().netdevs(pci("0000:af:03.7")).unwrap_err();
    assert_eq!(io.kind(), io::ErrorKind::NotFound);
    assert!(t.sysfs().driver(pci("0000:af:03.7")).is_err());
    assert!(t.sysfs().rdma_devices(pci("0000:af:03.7")).is_err());
}

#[test]
fn pf_is_rejected() {
    let t = Tree::new(1);
    let e = t.sysfs().discover_vf(pci(PF)).unwrap_err();
    assert!(matches!(e, DiscoveryError::IsPf { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "0000:af:00.0 is a PF (it has sriov_totalvfs and no physfn link); deviceID must name a VF"
    );
}

#[test]
fn plain_device_is_not_a_vf() {
    let t = Tree::new(1);
    t.device("0000:af:00.1", "mlx5_core");
    let e = t.sysfs().discover_vf(pci("0000:af:00.1")).unwrap_err();
    assert!(matches!(e, DiscoveryError::NotVf { .. }), "{e:?}");
    assert!(e
        .to_string()
        .starts_with("0000:af:00.1 is not an SR-IOV VF"));
}

#[test]
fn vf_missing_from_virtfn_links() {
    let t = Tree::new(2);
    fs::remove_file(t.dev(PF).join("virtfn0")).unwrap();
    let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
    assert!(matches!(e, DiscoveryError::NotListed { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "VF 0000:af:00.2 is not listed as a virtfnN of its PF 0000:af:00.0"
    );
}

#[test]
fn dangling_physfn() {
    let t = Tree::new(1);
    let link = t.dev(&vf_bdf(0)).join("physfn");
    fs::remove_file(&link).unwrap();
    symlink("../0000:af:00.7", &link).unwrap();
    let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
    assert!(matches!(e, DiscoveryError::BadLink { .. }), "{e:?}");
    assert!(e.to_string().contains("-> ../0000:af:00.7"), "{e}");
}

#[test]
fn physfn_to_a_non_pci_directory() {
    let t = Tree::new(1);
    let link = t.dev(&vf_bdf(0)).join("physfn");
    fs::remove_file(&link).unwrap();
    // ../.. is devices/pci0000:ae: a directory, but not named like a PCI device.
    symlink("../..", &link).unwrap();
    let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
    assert!(matches!(e, DiscoveryError::BadLink { .. }), "{e:?}");
}

#[test]
fn two_netdevs_are_ambiguous() {
    let t = Tree::new(1);
    t.netdev(&vf_bdf(0), "ibp175s0f0v0.8001");
    let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
    assert!(matches!(e, DiscoveryError::AmbiguousNetdev { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("(ibp175s0f0v0, ibp175s0f0v0.8001); expected at most one"),
        "{e}"
    );
}

#[test]
fn malformed_pkey() {
    let t = Tree::new(1);
    let p = t.dev(&vf_bdf(0)).join("infiniband/mlx5_1/ports/1/pkeys/1");
    fs::write(&p, "junk\n").unwrap();
    let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
    assert!(matches!(e, DiscoveryError::Malformed { .. }), "{e:?}");
    assert!(e.to_string().contains("\"junk\\n\""), "{e}");
}

#[test]
fn pf_without_netdev() {
    let t = Tree::new(1);
    fs::remove_dir_all(t.dev(PF).join("net")).unwrap();
    let vf = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap();
    assert_eq!(vf.pf_netdev, None);
}

#[test]
fn wait_for_netdev_returns_the_single_name() {
    let t = Tree::new(1);
    let s = t.sysfs();
    let name = s
        .wait_for_netdev(pci(&vf_bdf(0)), Duration::from_millis(10))
        .unwrap();
    assert_eq!(name, "ibp175s0f0v0");
    assert_eq!(s.netdev_ifindex(pci(&vf_bdf(0)), &name).unwrap(), Some(42));
    assert_eq!(s.netdev_ifindex(pci(&vf_bdf(0)), "nope").unwrap(), None);
}

#[test]
fn wait_for_netdev_sees_a_late_netdev() {
    let t = Tree::new(1);
    let b = vf_bdf(0);
    fs::remove_dir_all(t.dev(&b).join("net")).unwrap();
    fs::remove_file(t.root.join("class/net/ibp175s0f0v0")).unwrap();
    let dir = t.dev(&b).join("net/ib0");
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        fs::create_dir_all(dir).unwrap();
    });
    let name = t
        .sysfs()
        .wait_for_netdev(pci(&b), Duration::from_secs(5))
        .unwrap();
    writer.join().unwrap();
    assert_eq!(name, "ib0");
}

#[test]
fn wait_for_netdev_times_out() {
    let t = Tree::new(1);
    let b = vf_bdf(0);
    fs::remove_dir_all(t.dev(&b).join("net")).unwrap();
    let start = Instant::now();
    let e = t
        .sysfs()
        .wait_for_netdev(pci(&b), Duration::from_millis(60))
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(60));
    assert!(matches!(e, DiscoveryError::Timeout { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "timed out after 60ms waiting for a netdev under {}/bus/pci/devices/0000:af:00.2/net",
            t.root.display()
        )
    );
}

#[test]
fn wait_for_netdev_times_out_on_two() {
    let t = Tree::new(1);
    t.netdev(&vf_bdf(0), "ib1");
    let e = t
        .sysfs()
        .wait_for_netdev(pci(&vf_bdf(0)), Duration::from_millis(20))
        .unwrap_err();
    assert!(
        e.to_string()
            .ends_with("(found ib1, ibp175s0f0v0, expected exactly one)"),
        "{e}"
    );
}

#[test]
fn wait_for_netdev_on_missing_device_fails_at_once() {
    let t = Tree::new(1);
    let start = Instant::now();
    let e = t
        .sysfs()
        .wait_for_netdev(pci("0000:af:03.7"), Duration::from_secs(5))
        .unwrap_err();
    assert!(matches!(e, DiscoveryError::NotFound { .. }), "{e:?}");
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn unbind_and_bind_write_the_bdf() {
    let t = Tree::new(1);
    let s = t.sysfs();
    let a = pci(&vf_bdf(0));
    s.unbind(a, "mlx5_core").unwrap();
    s.bind(a, "vfio-pci").unwrap();
    let drivers = t.root.join("bus/pci/drivers");
    assert_eq!(
        fs::read_to_string(drivers.join("mlx5_core/unbind")).unwrap(),
        "0000:af:00.2"
    );
    assert_eq!(
        fs::read_to_string(drivers.join("vfio-pci/bind")).unwrap(),
        "0000:af:00.2"
    );
    let e = s.bind(a, "no-such-driver").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("no-such-driver/bind"), "{e}");
    assert!(!drivers.join("no-such-driver").exists());
    let e = s.bind(a, "../../x").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn ofed_guid_and_policy_round_trip() {
    let t = Tree::new(2);
    let s = t.sysfs();
    let pf = pci(PF);
    assert!(s.ofed_dir(pf, VfIndex(1)).is_some());
    assert_eq!(s.ofed_dir(pf, VfIndex(7)), None);
    assert_eq!(
        s.read_ofed_guid(pf, VfIndex(1), GuidKind::Node).unwrap(),
        Some("02:00:00:00:00:01:00:01".parse().unwrap())
    );
    assert_eq!(
        s.read_ofed_guid(pf, VfIndex(1), GuidKind::Port).unwrap(),
        Some("02:00:00:00:00:02:00:01".parse().unwrap())
    );
    let g: Guid = "11:22:33:44:55:66:77:88".parse().unwrap();
    s.write_ofed_guid(pf, VfIndex(1), GuidKind::Port, g)
        .unwrap();
    assert_eq!(
        s.read_ofed_guid(pf, VfIndex(1), GuidKind::Port).unwrap(),
        Some(g)
    );
    assert_eq!(
        fs::read_to_string(t.dev(PF).join("sriov/1/port")).unwrap(),
        "11:22:33:44:55:66:77:88\n"
    );
    assert_eq!(
        s.read_ofed_policy(pf, VfIndex(0)).unwrap(),
        Some(LinkState::Auto)
    );
    s.write_ofed_policy(pf, VfIndex(0), LinkState::Disable)
        .unwrap();
    assert_eq!(
        fs::read_to_string(t.dev(PF).join("sriov/0/policy")).unwrap(),
        "Down\n"
    );
    assert_eq!(
        s.read_ofed_policy(pf, VfIndex(0)).unwrap(),
        Some(LinkState::Disable)
    );
}

#[test]
fn ofed_absent() {
    let t = Tree::new(1);
    let s = t.sysfs();
    let pf = pci(PF);
    fs::remove_file(t.dev(PF).join("sriov/0/port")).unwrap();
    assert_eq!(
        s.read_ofed_guid(pf, VfIndex(0), GuidKind::Port).unwrap(),
        None
    );
    let e = s
        .write_ofed_guid(pf, VfIndex(0), GuidKind::Port, Guid(1))
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(!t.dev(PF).join("sriov/0/port").exists(), "must not create");
    fs::remove_dir_all(t.dev(PF).join("sriov")).unwrap();
    assert_eq!(s.ofed_dir(pf, VfIndex(0)), None);
    assert_eq!(
        s.read_ofed_guid(pf, VfIndex(0), GuidKind::Node).unwrap(),
        None
    );
    assert_eq!(s.read_ofed_policy(pf, VfIndex(0)).unwrap(), None);
    assert!(s
        .write_ofed_policy(pf, VfIndex(0), LinkState::Enable)
        .is_err());
}

#[test]
fn ofed_malformed() {
    let t = Tree::new(1);
    let s = t.sysfs();
    fs::write(t.dev(PF).join("sriov/0/node"), "zz\n").unwrap();
    fs::write(t.dev(PF).join("sriov/0/policy"), "Sideways\n").unwrap();
    let e = s
        .read_ofed_guid(pci(PF), VfIndex(0), GuidKind::Node)
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(
        e.to_string().contains("sriov/0/node holds \"zz\\n\""),
        "{e}"
    );
    let e = s.read_ofed_policy(pci(PF), VfIndex(0)).unwrap_err();
    assert!(e.to_string().contains("Follow, Up or Down"), "{e}");
}

#[test]
fn netdev_owner_and_virtfns() {
    let t = Tree::new(3);
    let s = t.sysfs();
    assert_eq!(
        s.netdev_pci_address("ibp175s0f0v2").unwrap(),
        Some(pci("0000:af:00.4"))
    );
    assert_eq!(s.netdev_pci_address("ibp175s0f0").unwrap(), Some(pci(PF)));
    assert_eq!(s.netdev_pci_address("eth9").unwrap(), None);
    assert!(s.netdev_pci_address("../x").is_err());
    assert_eq!(
        s.virtfns(pci(PF)).unwrap(),
        vec![
            (VfIndex(0), pci("0000:af:00.2")),
            (VfIndex(1), pci("0000:af:00.3")),
            (VfIndex(2), pci("0000:af:00.4")),
        ]
    );
    assert_eq!(s.rdma_devices(pci("0000:af:00.4")).unwrap(), vec!["mlx5_3"]);
    assert_eq!(
        s.driver(pci("0000:af:00.4")).unwrap().as_deref(),
        Some("mlx5_core")
    );
}

#[test]
fn root_from_env_and_default() {
    // Only this test touches the variable.
    std::env::set_var(SYSFS_ROOT_ENV, "/tmp/x");
    assert_eq!(Sysfs::from_env().root(), Path::new("/tmp/x"));
    std::env::set_var(SYSFS_ROOT_ENV, "");
    assert_eq!(Sysfs::from_env().root(), Path::new("/sys"));
    std::env::remove_var(SYSFS_ROOT_ENV);
    assert_eq!(Sysfs::from_env().root(), Path::new("/sys"));
    assert_eq!(
        Sysfs::new("/sys").pci_device_dir(pci("af:00.2")),
        Path::new("/sys/bus/pci/devices/0000:af:00.2")
    );
}

#[test]
fn works_on_this_machines_sysfs() {
    // The same code on a real kernel's /sys: every PCI device either discovers as a
    // VF or is rejected with a typed error; nothing panics.
    let s = Sysfs::new("/sys");
    let Ok(rd) = fs::read_dir("/sys/bus/pci/devices") else {
        return;
    };
    for e in rd.flatten() {
        let Ok(addr) = e.file_name().to_string_lossy().parse::<PciAddress>() else {
            continue;
        };
        match s.discover_vf(addr) {
            Ok(vf) => assert_eq!(vf.addr, addr),
            Err(DiscoveryError::IsPf { .. } | DiscoveryError::NotVf { .. }) => {}
            Err(e) => panic!("{addr}: {e}"),
        }
        s.driver(addr).unwrap();
    }
}
