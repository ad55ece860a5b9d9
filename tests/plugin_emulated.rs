//! The real `ib-sriov` binary on the emulated host (tests/common/emuhost.rs): a sysfs tree
//! laid out as the kernel does, veth pairs in a private "host" netns standing in for the
//! PF and VF netdevs, and real pod network namespaces. Needs root; without it the fixture
//! panics, so these tests fail rather than skip.
//!
//! Fault injection needs the `failpoints` feature (`cargo test --features failpoints`,
//! the README's test command); without it `failpoints_feature_is_enabled` fails.

mod common;

use common::emuhost::{HostSnapshot, Pod};
use common::fixture::{
    assert_no_state, assert_pristine, del_leaves_nothing, fresh, fresh_on, guid_and_link_state,
    lab_of, vfio_lab, zero_guid_lab,
};
use common::lab::{bin, list, pod_addrs, Lab, Run};
use common::script::install_script;
use serde_json::{json, Value};

const VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

#[test]
fn version_lists_every_supported_version() {
    let lab = Lab::default();
    let r = lab
        .run("VERSION", "", "", &json!({"cniVersion": "1.0.0"}), &[])
        .expect_ok();
    assert_eq!(r["cniVersion"], "1.0.0");
    assert_eq!(r["supportedVersions"], json!(VERSIONS));
}

#[test]
fn add_check_del_del_for_every_version() {
    let lab = Lab::default();
    let vf = lab.host.vf(0);
    for (i, version) in VERSIONS.iter().enumerate() {
        let before = lab.host.snapshot();
        let pod = lab.host.new_pod();
        let cid = format!("ctr-{i}");
        let conf = lab.conf(version, 0);
        let res = lab.add(&cid, &pod, &conf).expect_ok();

        assert_eq!(res["cniVersion"], *version);
        // 0.1.0/0.2.0 (libcni types/020): `ip4` {ip, gateway, routes}, no interfaces;
        // rewritten into the 0.3.0 shape for the checks below.
        let res = if version.starts_with("0.1") || version.starts_with("0.2") {
            assert!(res.get("interfaces").is_none() && res.get("ips").is_none());
            let ip4 = &res["ip4"];
            assert_eq!(ip4["routes"], json!([{"dst": "192.168.0.0/16"}]));
            let mac = pod
                .link_snapshots()
                .into_iter()
                .find(|l| l.name == "net1")
                .unwrap()
                .address;
            json!({"cniVersion": version,
                "interfaces": [{"name": "net1", "sandbox": pod.netns(), "mac": mac}],
                "ips": [{"version": "4", "interface": 0, "address": ip4["ip"],
                         "gateway": ip4["gateway"]}],
                "routes": ip4["routes"]})
        } else {
            res
        };
        let iface = &res["interfaces"][0];
        assert_eq!(iface["name"], "net1");
        assert_eq!(iface["sandbox"], pod.netns());
        assert_eq!(
            iface["mac"].as_str().unwrap().split(':').count(),
            6,
            "veth MAC"
        );
        let ip = &res["ips"][0];
        assert!(ip["address"].as_str().unwrap().starts_with("10.56.217."));
        assert!(ip["address"].as_str().unwrap().ends_with("/24"));
        assert_eq!(ip["gateway"], "10.56.217.1");
        assert_eq!(ip["interface"], 0);
        if version.starts_with("0.") {
            assert_eq!(ip["version"], "4", "{version}");
        } else {
            assert!(ip.get("version").is_none(), "{version}");
        }
        if *version == "1.1.0" {
            assert_eq!(iface["pciID"], vf.addr);
            assert_eq!(iface["mtu"], 2044);
        } else {
            assert!(iface.get("pciID").is_none() && iface.get("mtu").is_none());
        }
        assert_eq!(res["routes"][0]["dst"], "192.168.0.0/16");

        // The netdev is in the pod as net1, up, with the address; gone from the host.
        let addr = ip["address"].as_str().unwrap().to_string();
        let pl = pod.link_snapshots();
        let net1 = pl.iter().find(|l| l.name == "net1").expect("net1 in pod");
        assert!(net1.up);
        assert!(net1.addrs.contains(&addr), "{:?}", net1.addrs);
        let route = pod.exec(&["ip", "route", "show", "192.168.0.0/16"]);
        assert!(String::from_utf8_lossy(&route.stdout).contains("via 10.56.217.1 dev net1"));
        assert!(lab
            .host
            .snapshot()
            .link(vf.netdev.as_ref().unwrap())
            .is_none());
        assert_eq!(lab.journals(), vec![format!("{cid}:net1")]);
        assert_eq!(
            lab.allocations(),
            vec![addr.trim_end_matches("/24").to_string()]
        );

        if version.starts_with("0.1") || version.starts_with("0.2") || version.starts_with("0.3") {
            // CHECK arrived in 0.4.0.
            lab.check(&cid, &pod, &conf, &res).expect_code(1);
        } else {
            assert_eq!(lab.check(&cid, &pod, &conf, &res).expect_ok(), Value::Null);
        }

        lab.del(&cid, pod.netns(), &conf).expect_ok();
        assert_eq!(
            lab.host.snapshot(),
            before,
            "host restored after DEL ({version})"
        );
        assert_eq!(pod.links(), vec!["lo"]);
        assert!(lab.journals().is_empty());
        assert!(lab.allocations().is_empty());
        lab.del(&cid, pod.netns(), &conf).expect_ok();
        assert_eq!(lab.host.snapshot(), before, "second DEL changes nothing");
    }
}

#[test]
fn guid_and_link_state_are_set_then_restored_through_ofed_files() {
    // The PF is a veth: the kernel answers EOPNOTSUPP to IFLA_VF_* and the plugin falls
    // back to the MLNX_OFED sysfs files.
    let lab = Lab::default();
    let vf = lab.host.vf(1);
    let before = lab.host.snapshot();
    let (node0, port0) = (lab.read(vf.ofed_node()), lab.read(vf.ofed_port()));
    assert_eq!(lab.read(vf.ofed_policy()), "Follow");
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("1.0.0", 1);
    conf["runtimeConfig"] = json!({"infinibandGUID": "02:aa:bb:cc:dd:ee:ff:01"});
    conf["link_state"] = json!("enable");
    let res = lab.add("c1", &pod, &conf).expect_ok();
    assert_eq!(lab.read(vf.ofed_node()), "02:aa:bb:cc:dd:ee:ff:01");
    assert_eq!(lab.read(vf.ofed_port()), "02:aa:bb:cc:dd:ee:ff:01");
    assert_eq!(lab.read(vf.ofed_policy()), "Up");
    // The GUID change rebinds the VF driver.
    assert_eq!(lab.driver_file("mlx5_core", "unbind"), vf.addr);
    assert_eq!(lab.driver_file("mlx5_core", "bind"), vf.addr);
    lab.check("c1", &pod, &conf, &res).expect_ok();

    // CHECK notices a GUID changed behind our back.
    std::fs::write(vf.ofed_port().unwrap(), "02:aa:bb:cc:dd:ee:ff:02\n").unwrap();
    let e = lab.check("c1", &pod, &conf, &res).expect_code(104);
    assert!(e["msg"].as_str().unwrap().contains("port GUID"), "{e}");
    std::fs::write(vf.ofed_port().unwrap(), "02:aa:bb:cc:dd:ee:ff:01\n").unwrap();

    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(lab.read(vf.ofed_node()), node0);
    assert_eq!(lab.read(vf.ofed_port()), port0);
    assert_eq!(lab.read(vf.ofed_policy()), "Follow");
    assert_eq!(lab.host.snapshot(), before);
}

#[test]
fn guid_precedence_and_no_rebind_when_unchanged() {
    let lab = Lab::default();
    let vf = lab.host.vf(2);
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("1.0.0", 2);
    conf["guid"] = json!("02:00:00:00:00:00:00:33");
    conf["args"] = json!({"cni": {"guid": "02:00:00:00:00:00:00:22", "labels": {"a": 1}, "n": 5}});
    lab.add("c1", &pod, &conf).expect_ok();
    assert_eq!(
        lab.read(vf.ofed_node()),
        "02:00:00:00:00:00:00:22",
        "args.cni.guid applies; the top-level guid never does"
    );
    lab.del("c1", pod.netns(), &conf).expect_ok();

    // The top-level guid alone: ignored with a warning naming what to use (as Go,
    // whose field is `json:"-"`); the VF keeps its GUID.
    let node0 = lab.read(vf.ofed_node());
    let mut only_top = lab.conf("1.0.0", 2);
    only_top["guid"] = json!("02:00:00:00:00:00:00:33");
    let log = lab.host.root().join("top-guid.log");
    only_top["logFile"] = json!(log);
    lab.add("c0", &pod, &only_top).expect_ok();
    assert_eq!(
        lab.read(vf.ofed_node()),
        node0,
        "top-level guid not applied"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("guid: the top-level key is ignored")
            && text.contains("runtimeConfig.infinibandGUID"),
        "{text}"
    );
    lab.del("c0", pod.netns(), &only_top).expect_ok();

    // A GUID equal to the current one: no set, no rebind.
    std::fs::write(vf.ofed_node().unwrap(), "02:00:00:00:00:00:00:44\n").unwrap();
    std::fs::write(vf.ofed_port().unwrap(), "02:00:00:00:00:00:00:44\n").unwrap();
    let unbind = lab.host.root().join("bus/pci/drivers/mlx5_core/unbind");
    std::fs::write(&unbind, "").unwrap();
    let mut conf = lab.conf("1.0.0", 2);
    conf["runtimeConfig"] = json!({"infinibandGUID": "02:00:00:00:00:00:00:44"});
    lab.add("c2", &pod, &conf).expect_ok();
    assert_eq!(std::fs::read_to_string(&unbind).unwrap(), "", "no rebind");
    lab.del("c2", pod.netns(), &conf).expect_ok();
}

#[test]
fn zero_guid_without_a_given_guid_is_refused_before_any_change() {
    let lab = zero_guid_lab();
    let before = lab.host.snapshot();
    let pod = lab.host.new_pod();
    let e = lab.add("c1", &pod, &lab.conf("1.0.0", 0)).expect_code(7);
    assert!(e["msg"].as_str().unwrap().contains("infinibandGUID"), "{e}");
    assert_pristine(&lab, &before);
    // With a GUID it works.
    let mut conf = lab.conf("1.0.0", 0);
    conf["runtimeConfig"]["infinibandGUID"] = json!("02:00:00:00:00:00:00:01");
    lab.add("c1", &pod, &conf).expect_ok();
    lab.del_restores("c1", pod.netns(), &conf, &before);
}

#[test]
fn vfio_vf_gets_guid_and_link_state_but_no_netdev_or_ip() {
    let lab = vfio_lab(3);
    let vf = lab.host.vf(3);
    assert!(vf.is_vfio());
    let before = lab.host.snapshot();
    let node0 = lab.read(vf.ofed_node());
    let pod = lab.host.new_pod();
    let conf = guid_and_link_state(lab.conf("1.1.0", 3), "02:00:00:00:00:00:0f:0f", "disable");
    let res = lab.add("c1", &pod, &conf).expect_ok();
    // As the Go plugin's result: CNI_IFNAME with the pod netns as sandbox (Multus'
    // network-status and KubeVirt key on it), plus the PCI address in 1.1.0.
    assert_eq!(
        res["interfaces"],
        json!([{"name": "net1", "sandbox": pod.netns(), "pciID": vf.addr}])
    );
    assert!(res.get("ips").is_none());
    assert_eq!(lab.read(vf.ofed_node()), "02:00:00:00:00:00:0f:0f");
    assert_eq!(lab.read(vf.ofed_policy()), "Down");
    assert_eq!(
        lab.driver_file("vfio-pci", "unbind"),
        "",
        "no rebind in vfio mode"
    );
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(lab.allocations().is_empty());
    lab.check("c1", &pod, &conf, &res).expect_ok();
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(lab.read(vf.ofed_node()), node0);
    assert_eq!(lab.host.snapshot(), before);

    // vfioPciMode: false on a vfio-pci VF: the driver decides (Go auto-detects too).
    let mut conf = lab.conf("1.0.0", 3);
    conf["vfioPciMode"] = json!(false);
    let res = lab.add("c2", &pod, &conf).expect_ok();
    assert_eq!(res["interfaces"][0]["name"], "net1");
    assert_eq!(pod.links(), vec!["lo"]);
    lab.del_restores("c2", pod.netns(), &conf, &before);

    // vfioPciMode: true on a VF bound to mlx5_core: refused before any change, as Go.
    let mut conf = lab.conf("1.0.0", 0);
    conf["vfioPciMode"] = json!(true);
    let e = lab.add("c3", &pod, &conf).expect_code(7);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("vfioPciMode is true") && msg.contains("mlx5_core"),
        "{msg}"
    );
    assert_eq!(lab.host.snapshot(), before);
    lab.del("c3", pod.netns(), &conf).expect_ok();
}

/// PF passthrough (the Go plugin since 2026-03): a PF bound to vfio-pci is accepted
/// with nothing to move and a vfio-style result; DEL releases it; a PF on its network
/// driver is refused, and nothing changes either way.
#[test]
fn pf_passthrough_only_on_vfio_pci() {
    let lab = Lab::default();
    let pf = lab.host.pf().clone();
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("1.1.0", 0);
    conf["deviceID"] = json!(pf.addr);
    conf["runtimeConfig"]["deviceID"] = json!(pf.addr);
    conf["runtimeConfig"]["infinibandGUID"] = json!("02:00:00:00:00:00:00:42");
    let before = lab.host.snapshot();
    // On its network driver: refused (ib-sriov never moves the PF's netdev).
    let e = lab.add("pf1", &pod, &conf).expect_code(7);
    assert!(
        e["msg"].as_str().unwrap().contains("bound to vfio-pci"),
        "{e}"
    );
    conf["vfioPciMode"] = json!(true);
    lab.add("pf1", &pod, &conf).expect_code(7);
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.journals().is_empty());

    // Bound to vfio-pci (the emulated sysfs link moved as the kernel would show it).
    let link = pf.dir.join("driver");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(lab.host.root().join("bus/pci/drivers/vfio-pci"), &link).unwrap();
    let before = lab.host.snapshot();
    for (cid, mode) in [("pf2", json!(true)), ("pf3", Value::Null)] {
        conf["vfioPciMode"] = mode;
        let res = lab.add(cid, &pod, &conf).expect_ok();
        assert_eq!(
            res["interfaces"],
            json!([{"name": "net1", "sandbox": pod.netns(), "pciID": pf.addr}])
        );
        assert_eq!(pod.links(), vec!["lo"]);
        assert_eq!(
            lab.host.snapshot(),
            before,
            "a PF passthrough changes nothing"
        );
        // The PF is held: a second pod cannot take it.
        let other = lab.host.new_pod();
        lab.add("other", &other, &conf).expect_code(101);
        lab.check(cid, &pod, &conf, &res).expect_ok();
        lab.del(cid, pod.netns(), &conf).expect_ok();
        lab.del(cid, pod.netns(), &conf).expect_ok();
        assert!(lab.journals().is_empty());
        assert_eq!(lab.host.snapshot(), before);
    }
}

#[test]
fn del_after_the_pod_netns_was_deleted() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let vf = lab.host.vf(0);
    let node0 = lab.read(vf.ofed_node());
    let pod = lab.host.new_pod();
    let conf = guid_and_link_state(lab.conf("1.0.0", 0), "02:00:00:00:00:00:00:99", "enable");
    lab.add("c1", &pod, &conf).expect_ok();
    let netns = pod.netns().to_string();
    pod.delete().unwrap();
    // The kernel returns the VF netdev to the host, down, still named net1 (a veth
    // would be destroyed: the emulated host re-creates it as the kernel returns it).
    lab.host
        .return_destroyed_vf_netdev(0, "net1", &before)
        .unwrap();
    assert!(lab.host.snapshot().link("net1").is_some());
    // With CNI_NETNS still naming the deleted path, and again with it empty.
    lab.del("c1", &netns, &conf).expect_ok();
    assert!(lab.journals().is_empty());
    assert!(lab.allocations().is_empty());
    assert_eq!(lab.read(vf.ofed_node()), node0);
    assert_eq!(lab.read(vf.ofed_policy()), "Follow");
    lab.host.sync_netdevs().unwrap();
    lab.del("c1", "", &conf).expect_ok();
    // Back under its original name, up as before, same ifindex and MAC.
    assert_eq!(lab.host.snapshot(), before);
}

/// The returned netdev carries its original name as an altname (what udev's
/// AlternativeNamesPolicy adds to a netdev that comes back from a dead pod under its
/// pod name): the kernel refuses the rename-back with EEXIST until DEL deletes that
/// altname of the very same link; an altname of another link is never touched.
/// VF 0 attached as c1, its pod deleted, its netdev returned to the host under the pod
/// name `net1` with its original name as an altname (what udev's AlternativeNamesPolicy
/// adds): the lab, the host before ADD, the config, the dead pod's netns path and the
/// original name.
fn returned_with_its_name_as_altname() -> (Lab, HostSnapshot, Value, String, String) {
    let (lab, before, pod, conf) = Lab::attached(0);
    let orig = lab.host.vf(0).netdev.clone().unwrap();
    let netns = pod.netns().to_string();
    pod.delete().unwrap();
    lab.host
        .return_destroyed_vf_netdev(0, "net1", &before)
        .unwrap();
    lab.host
        .host_ip(&["link", "property", "add", "dev", "net1", "altname", &orig]);
    (lab, before, conf, netns, orig)
}

#[test]
fn del_renames_back_over_its_own_altname() {
    let (lab, before, conf, netns, orig) = returned_with_its_name_as_altname();
    let refused = lab
        .host
        .host_exec(&["ip", "link", "set", "dev", "net1", "name", &orig]);
    assert!(
        !refused.status.success(),
        "the kernel refuses the name held as an altname"
    );
    lab.del_restores("c1", &netns, &conf, &before);
    let shown = String::from_utf8_lossy(
        &lab.host
            .host_ip(&["-d", "link", "show", "dev", &orig])
            .stdout,
    )
    .into_owned();
    assert!(!shown.contains("altname"), "the altname is gone: {shown}");
    assert!(lab.journals().is_empty());
}

/// The altname DEL would delete to give the netdev back its name goes to another netdev
/// (or away) between DEL's look and its delete: the kernel answers EINVAL (the name now
/// belongs to another device, `netdev_name_node_alt_destroy()`), forced here with fail
/// point `netlink.del_altname=errno22` (a lab run met it once, as the successor of a
/// netdev being destroyed by a rebind took the altname). DEL treats the name as held
/// elsewhere: it succeeds, the VF netdev is back in the host under the name it has,
/// never a 102.
#[test]
fn del_succeeds_when_the_altname_moves_away_before_its_delete() {
    let (lab, before, conf, netns, orig) = returned_with_its_name_as_altname();
    let (mac, was_up) = {
        let l = before.link(&orig).unwrap();
        (l.address.clone(), l.up)
    };
    let r = lab.run(
        "DEL",
        "c1",
        &netns,
        &conf,
        &[("IB_SRIOV_FAILPOINTS", "netlink.del_altname=errno22")],
    );
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("held by another netdev now"), "{log}");
    let after = lab.host.snapshot();
    let back = after
        .links
        .iter()
        .find(|l| l.address == mac)
        .expect("the VF netdev is in the host");
    assert_eq!(back.up, was_up, "admin state restored: {back:?}");
    assert_no_state(&lab);
}

#[test]
fn del_with_empty_netns_still_releases_the_ip() {
    let (lab, _, _pod, conf) = Lab::attached(1);
    assert_eq!(lab.allocations().len(), 1);
    lab.del("c1", "", &conf).expect_ok();
    assert!(
        lab.allocations().is_empty(),
        "IP released with an empty CNI_NETNS"
    );
}

/// Without a journal nothing proves that the pod's CNI_IFNAME is the VF (ADD journals
/// before its first change, so no journal means ADD moved nothing): DEL releases the
/// IP and moves no device (issue 11, finding 2).
#[test]
fn del_without_a_journal_releases_the_ip_and_moves_no_device() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 2);
    // A lost journal whose rollback file (written by our ADD in this boot) remains: the
    // host may still hold what the file describes, so DEL undoes it from the file, as
    // the Go plugin's DEL would, and releases the IP (src/plugin/del.rs).
    lab.add("c0", &pod, &conf).expect_ok();
    std::fs::remove_file(lab.state.join("c0:net1")).unwrap();
    let r = lab.del("c0", pod.netns(), &conf);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("the journal was lost"), "{log}");
    assert!(lab.allocations().is_empty());
    assert_eq!(pod.links(), vec!["lo"], "{log}");
    // Neither journal nor rollback file: nothing says what ADD made, so no device moves
    // (whatever the pod has under CNI_IFNAME is the pod's); the IP is released.
    lab.add("c1", &pod, &conf).expect_ok();
    std::fs::remove_file(lab.state.join("c1:net1")).unwrap();
    let go_dir = lab.host.root().join("go-cache");
    std::fs::remove_file(go_dir.join("c1-net1")).unwrap();
    let host_before = lab.host.snapshot();
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert!(lab.allocations().is_empty());
    assert!(
        pod.links().contains(&"net1".to_string()),
        "{:?}",
        pod.links()
    );
    assert_eq!(
        lab.host.snapshot(),
        host_before,
        "nothing moved into the host"
    );
    lab.del("c1", pod.netns(), &conf).expect_ok();
}

#[test]
fn two_adds_racing_for_one_vf() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let pods = [lab.host.new_pod(), lab.host.new_pod()];
    let conf = lab.conf("1.0.0", 0);
    let runs: Vec<Run> = std::thread::scope(|s| {
        let hs: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (lab, conf) = (&lab, &conf);
                s.spawn(move || lab.add(&format!("race-{i}"), p, conf))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<usize> = (0..2).filter(|&i| runs[i].ok).collect();
    assert_eq!(winners.len(), 1, "exactly one ADD wins: {runs:?}");
    let loser = &runs[1 - winners[0]];
    assert_eq!(loser.json["code"], 101, "{loser:?}");
    assert!(loser.json["msg"]
        .as_str()
        .unwrap()
        .contains(&format!("race-{}", winners[0])));
    assert_eq!(lab.journals().len(), 1);
    assert_eq!(lab.allocations().len(), 1);
    // The loser's DEL must not disturb the winner.
    lab.del(
        &format!("race-{}", 1 - winners[0]),
        pods[1 - winners[0]].netns(),
        &conf,
    )
    .expect_ok();
    assert!(pods[winners[0]].links().contains(&"net1".to_string()));
    assert_eq!(lab.allocations().len(), 1);
    lab.del(
        &format!("race-{}", winners[0]),
        pods[winners[0]].netns(),
        &conf,
    )
    .expect_ok();
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.allocations().is_empty() && lab.journals().is_empty());
}

#[test]
fn parallel_adds_on_several_vfs_get_distinct_ips_and_leak_nothing() {
    let lab = lab_of(6);
    let before = lab.host.snapshot();
    let pods: Vec<Pod> = (0..6).map(|_| lab.host.new_pod()).collect();
    let results: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let lab = &lab;
                s.spawn(move || {
                    lab.add(&format!("p{i}"), p, &lab.conf("1.0.0", i as u32))
                        .expect_ok()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ips: Vec<String> = results
        .iter()
        .map(|r| r["ips"][0]["address"].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 6, "distinct IPs: {ips:?}");
    for (i, p) in pods.iter().enumerate() {
        assert_eq!(
            pod_addrs(p, "net1"),
            vec![results[i]["ips"][0]["address"].as_str().unwrap()]
        );
    }
    std::thread::scope(|s| {
        for (i, p) in pods.iter().enumerate() {
            let lab = &lab;
            s.spawn(move || {
                lab.del(&format!("p{i}"), p.netns(), &lab.conf("1.0.0", i as u32))
                    .expect_ok()
            });
        }
    });
    assert_eq!(lab.host.snapshot(), before);
    assert!(lab.allocations().is_empty() && lab.journals().is_empty());
}

#[test]
fn lock_timeout_is_code_11() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("1.0.0", 0);
    conf["lockTimeoutMs"] = json!(200);
    let lock = lab
        .state
        .join("locks")
        .join(format!("{}.lock", lab.host.vf(0).addr));
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    let f = std::fs::File::create(&lock).unwrap();
    f.lock().unwrap();
    let before = lab.host.snapshot();
    lab.add("c1", &pod, &conf).expect_code(11);
    assert_eq!(lab.host.snapshot(), before);
    drop(f);
    lab.add("c1", &pod, &conf).expect_ok();
    lab.del("c1", pod.netns(), &conf).expect_ok();
}

#[test]
fn runtime_inputs_multus_style() {
    // Repeated IgnoreUnknown, pciBusID instead of deviceID, capabilities left in,
    // runtimeConfig.deviceID, args.cni values of every JSON type.
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("0.4.0", 1);
    conf.as_object_mut().unwrap().remove("deviceID");
    conf["pciBusID"] = json!("0000:af:01.7");
    conf["runtimeConfig"] = json!({"deviceID": lab.host.vf(1).addr});
    conf["capabilities"] = json!({"infinibandGUID": true, "deviceID": true});
    conf["args"] = json!({"cni": {"x": [1, 2], "y": null, "z": {"k": true}, "n": 3.5}});
    let args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;IgnoreUnknown=1;K8S_POD_INFRA_CONTAINER_ID=c1";
    let r = lab.run("ADD", "c1", pod.netns(), &conf, &[("CNI_ARGS", args)]);
    r.expect_ok();
    // The journal names the pod CNI_ARGS gave (no K8S_POD_UID sent: no uid key).
    let js = lab.journals();
    assert_eq!(js.len(), 1, "{js:?}");
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(lab.state.join(&js[0])).unwrap()).unwrap();
    assert_eq!(
        j["pod"],
        json!({"namespace": "default", "name": "p"}),
        "{j}"
    );
    lab.run("DEL", "c1", pod.netns(), &conf, &[("CNI_ARGS", args)])
        .expect_ok();
}

/// (what, config, extra environment, expected code).
type BadCase<'a> = (&'a str, Value, Vec<(&'a str, &'a str)>, u64);

#[test]
fn every_bad_input_gets_its_code_and_changes_nothing() {
    let (lab, before, pod) = fresh_on(vfio_lab(3));
    let good = lab.conf("1.0.0", 0);
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    // (what, key, value, expected code): the good configuration with one key set.
    let keyed: [(&str, &str, Value, u64); 16] = [
        ("cniVersion 0.2.0", "cniVersion", json!("0.0.9"), 1),
        ("cniVersion 9.9.9", "cniVersion", json!("9.9.9"), 1),
        ("deviceID garbage", "deviceID", json!("not-pci"), 7),
        ("deviceID unknown", "deviceID", json!("0000:af:07.7"), 7),
        ("deviceID is the PF", "deviceID", json!("0000:af:00.0"), 7),
        ("deviceID not a string", "deviceID", json!(12), 7),
        (
            "guid malformed",
            "runtimeConfig",
            json!({"infinibandGUID": "02:00:00"}),
            7,
        ),
        (
            "guid all zero",
            "runtimeConfig",
            json!({"infinibandGUID": "00:00:00:00:00:00:00:00"}),
            7,
        ),
        ("link_state bad", "link_state", json!("up"), 7),
        ("pkey bad", "pkey", json!("0xfffff"), 7),
        ("rdmaIsolation not bool", "rdmaIsolation", json!("yes"), 7),
        (
            "ipam bad subnet",
            "ipam",
            json!({"type": "ib-sriov-ipam", "subnet": "10.0.0.0/33"}),
            7,
        ),
        ("ipam dhcp", "ipam", json!({"type": "dhcp"}), 7),
        (
            "ipam type not a string",
            "ipam",
            json!({"type": 5, "subnet": "10.0.0.0/24"}),
            7,
        ),
        (
            "mlx5_core VF with vfioPciMode true",
            "vfioPciMode",
            json!(true),
            7,
        ),
        (
            "ibKubernetesEnabled, pod not annotated",
            "ibKubernetesEnabled",
            json!(true),
            11,
        ),
    ];
    let mut cases: Vec<BadCase> = keyed
        .into_iter()
        .map(|(what, k, v, code)| (what, with(k, v), vec![], code))
        .collect();
    cases.extend([
        (
            "ibKubernetesEnabled, no GUID",
            {
                let mut c = with("ibKubernetesEnabled", json!(true));
                c["args"] = json!({"cni": {"mellanox.infiniband.app": "configured"}});
                c
            },
            vec![],
            11,
        ),
        (
            "no deviceID",
            {
                let mut c = good.clone();
                c.as_object_mut().unwrap().remove("deviceID");
                c
            },
            vec![],
            7,
        ),
    ]);
    // (what, variable, value, expected code): the good configuration, one variable set.
    let env: [(&str, &str, &str, u64); 4] = [
        ("CNI_IFNAME too long", "CNI_IFNAME", "sixteen-chars-xx", 4),
        ("CNI_CONTAINERID bad", "CNI_CONTAINERID", "../x", 4),
        (
            "CNI_NETNS missing path",
            "CNI_NETNS",
            "/var/run/netns/does-not-exist",
            3,
        ),
        ("CNI_COMMAND unknown", "CNI_COMMAND", "ATTACH", 4),
    ];
    cases.extend(
        env.into_iter()
            .map(|(what, k, v, code)| (what, good.clone(), vec![(k, v)], code)),
    );
    // CNI_IFNAME already present in the pod.
    pod.exec(&["ip", "link", "add", "net1", "type", "dummy"]);
    let has_dummy = pod.links().contains(&"net1".to_string());
    if !has_dummy {
        // No dummy module on this kernel: use a veth end instead.
        let out = pod.exec(&[
            "ip", "link", "add", "net1", "type", "veth", "peer", "name", "net1p",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    cases.push(("CNI_IFNAME exists in the pod", good.clone(), vec![], 4));
    for (what, conf, env, code) in cases {
        let r = lab.run("ADD", "bad", pod.netns(), &conf, &env);
        let j = r.expect_code(code);
        assert!(j["cniVersion"].is_string(), "{what}: {j}");
        assert_eq!(lab.host.snapshot(), before, "{what}: host changed");
        assert!(lab.journals().is_empty(), "{what}: journal left");
        assert!(lab.allocations().is_empty(), "{what}: IP allocated");
    }
    // Undecodable stdin: code 6.
    let out = lab
        .host
        .run_plugin(bin(), "ADD", "bad", pod.netns(), "net1", "{nope", &[]);
    Run::from(out).expect_code(6);
    assert_eq!(lab.host.snapshot(), before);
}

/// Each ADD step failing (fail points), then DEL: the host is exactly as before.
#[cfg(feature = "failpoints")]
#[test]
fn each_add_step_failing_rolls_back_and_del_leaves_the_host_as_before() {
    let lab = Lab::default();
    let vf = lab.host.vf(1);
    let before = lab.host.snapshot();
    for point in common::failpoints::ADD_POINTS {
        let pod = lab.host.new_pod();
        let mut conf =
            guid_and_link_state(lab.conf("1.0.0", 1), "02:00:00:00:00:00:77:77", "enable");
        let devinfo = lab.host.root().join("devinfo").join("fp.json");
        conf["runtimeConfig"]["CNIDeviceInfoFile"] = json!(devinfo);
        let spec = format!("{point}=error");
        let r = lab.run(
            "ADD",
            "fp",
            pod.netns(),
            &conf,
            &[("IB_SRIOV_FAILPOINTS", &spec)],
        );
        let e = r.expect_code(102);
        assert!(e["msg"].as_str().unwrap().contains(point), "{point}: {e}");
        assert_eq!(
            lab.host.snapshot(),
            before,
            "{point}: rollback restored the host"
        );
        assert_eq!(pod.links(), vec!["lo"], "{point}");
        assert!(lab.journals().is_empty(), "{point}: journal removed");
        assert!(lab.allocations().is_empty(), "{point}: IP released");
        lab.del("fp", pod.netns(), &conf).expect_ok();
        assert_eq!(lab.host.snapshot(), before, "{point}: DEL after rollback");
        assert_eq!(lab.read(vf.ofed_policy()), "Follow");
        assert!(!devinfo.exists(), "{point}: device-info file removed");
    }
}

/// A failing undo keeps the journal and reports the undo error in `details`; DEL then
/// finishes the job.
#[cfg(feature = "failpoints")]
#[test]
fn failed_rollback_keeps_the_journal_for_del() {
    let (lab, before, pod) = fresh();
    let mut conf = lab.conf("1.0.0", 2);
    conf["link_state"] = json!("enable");
    let r = lab.run(
        "ADD",
        "fp",
        pod.netns(),
        &conf,
        &[(
            "IB_SRIOV_FAILPOINTS",
            "add.addresses=error,del.link_state=error",
        )],
    );
    let e = r.expect_code(102);
    assert!(e["msg"].as_str().unwrap().contains("add.addresses"));
    assert!(
        e["details"].as_str().unwrap().contains("del.link_state"),
        "{e}"
    );
    assert_eq!(lab.journals(), vec!["fp:net1"]);
    del_leaves_nothing(&lab, "fp", pod.netns(), &conf, &before);
}

#[cfg(not(feature = "failpoints"))]
#[test]
fn failpoints_feature_is_enabled() {
    panic!(
        "fault-injection tests need `cargo test --features failpoints` (the README's test command)"
    );
}

/// This machine's kernel has no RDMA subsystem (NETLINK_RDMA -> EPROTONOSUPPORT) while
/// the emulated sysfs shows RDMA devices: `rdmaIsolation: true` must fail clearly and
/// change nothing; absent and false proceed without asking the kernel (absent means
/// false, as under the Go plugin).
#[test]
fn rdma_isolation_on_a_kernel_without_rdma() {
    let (lab, before, pod) = fresh();
    let mut conf = lab.conf("1.0.0", 0);
    conf["rdmaIsolation"] = json!(true);
    conf["link_state"] = json!("enable");
    let e = lab.add("c1", &pod, &conf).expect_code(7);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("rdmaIsolation") && msg.contains("RDMA"),
        "{msg}"
    );
    assert_pristine(&lab, &before);

    for iso in [None, Some(false)] {
        match iso {
            None => conf.as_object_mut().unwrap().remove("rdmaIsolation"),
            Some(b) => conf
                .as_object_mut()
                .unwrap()
                .insert("rdmaIsolation".into(), json!(b)),
        };
        let r = lab.add("c1", &pod, &conf);
        assert!(
            !r.stderr.contains("RDMA subsystem"),
            "{iso:?}: {}",
            r.stderr
        );
        r.expect_ok();
        lab.del_restores("c1", pod.netns(), &conf, &before);
    }
}

/// NPWG device-info spec 1.1.0 file at `runtimeConfig.CNIDeviceInfoFile`: written on ADD,
/// removed on DEL, and nothing written when no path is given.
#[test]
fn device_info_file_written_on_add_and_removed_on_del() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let dir = lab.host.root().join("devinfo");
    let path = dir.join("ibnet-c1-net1-deviceinfo.json");
    let mut conf = lab.conf("1.1.0", 1);
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": path});
    lab.add("c1", &pod, &conf).expect_ok();
    let info: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(info["type"], "pci");
    assert_eq!(info["version"], "1.1.0");
    assert_eq!(info["pci"]["pci-address"], lab.host.vf(1).addr);
    assert_eq!(info["pci"]["pf-pci-address"], lab.host.pf().addr);
    assert_eq!(
        info["pci"]["rdma-device"],
        lab.host.vf(1).rdma.clone().unwrap()
    );
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert!(!path.exists(), "removed on DEL");

    // Without a path nothing is written; an unrelated file there is left alone.
    std::fs::write(dir.join("other.json"), "{}").unwrap();
    let conf = lab.conf("1.1.0", 1);
    lab.add("c2", &pod, &conf).expect_ok();
    lab.del("c2", pod.netns(), &conf).expect_ok();
    assert_eq!(list(&dir), vec!["other.json"]);
}

/// `"ipam": {}` (what the SR-IOV network operator renders for a SriovIBNetwork without
/// spec.ipam) is "no IPAM", as in the Go plugin: ADD attaches without addresses, CHECK
/// and STATUS pass, DEL succeeds (issue 9, item 1).
#[test]
fn empty_ipam_object_means_no_ipam() {
    let (lab, before, pod) = fresh();
    let mut conf = lab.conf("1.1.0", 0);
    conf["ipam"] = json!({});
    let res = lab.add("e1", &pod, &conf).expect_ok();
    assert!(
        res.get("ips")
            .is_none_or(|v| v.as_array().is_some_and(|a| a.is_empty())),
        "{res}"
    );
    assert!(pod.links().contains(&"net1".to_string()));
    assert!(pod_addrs(&pod, "net1").is_empty());
    assert_eq!(lab.check("e1", &pod, &conf, &res).expect_ok(), Value::Null);
    assert_eq!(
        lab.run("STATUS", "", "", &conf, &[]).expect_ok(),
        Value::Null
    );
    lab.del("e1", pod.netns(), &conf).expect_ok();
    del_leaves_nothing(&lab, "e1", pod.netns(), &conf, &before);
}

/// Interface configuration as containernetworking/plugins `ConfigureIface` does it
/// (issue 9 item 2): in a pod whose netns has IPv6 disabled, an IPv6 address from the
/// IPAM result enables IPv6 on the interface, DAD has finished when ADD returns (no
/// tentative address), and the result's routes keep their `priority`, `table` and
/// `scope`. The IPAM result comes from a stand-in delegate on CNI_PATH.
#[test]
fn ipv6_dad_and_route_attributes() {
    let (lab, before, pod) = fresh();
    for k in ["all", "default"] {
        let o = pod.exec(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
        ]);
        assert!(o.status.success(), "{o:?}");
    }
    let fake = lab.host.root().join("fake-cni-bin");
    install_script(
        &fake,
        "v6ipam",
        r#"#!/bin/sh
cat >/dev/null
case "$CNI_COMMAND" in
ADD) echo '{"cniVersion":"1.1.0","ips":[{"address":"10.56.217.9/24","gateway":"10.56.217.1"},{"address":"fd00:56::9/64","gateway":"fd00:56::1"}],"routes":[{"dst":"10.60.0.0/16","priority":300},{"dst":"10.61.0.0/16","table":100},{"dst":"10.62.0.0/16","scope":200},{"dst":"fd00:60::/48"}]}' ;;
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}' ;;
esac
"#,
    );
    let mut conf = lab.conf("1.1.0", 0);
    conf["ipam"] = json!({"type": "v6ipam"});
    let path = format!("{}:{}", fake.display(), bin().parent().unwrap().display());
    let env = [("CNI_PATH", path.as_str())];
    let res = lab.run("ADD", "v6", pod.netns(), &conf, &env).expect_ok();
    assert_eq!(
        res["routes"][0],
        json!({"dst": "10.60.0.0/16", "priority": 300})
    );
    let sh = |args: &[&str]| String::from_utf8_lossy(&pod.exec(args).stdout).into_owned();
    assert_eq!(
        sh(&["cat", "/proc/sys/net/ipv6/conf/net1/disable_ipv6"]).trim(),
        "0"
    );
    let a6 = sh(&["ip", "-6", "addr", "show", "dev", "net1"]);
    assert!(a6.contains("fd00:56::9/64"), "{a6}");
    assert!(
        !a6.contains("tentative"),
        "DAD finished before ADD returned: {a6}"
    );
    let r = sh(&["ip", "-4", "route", "show", "table", "all"]);
    assert!(
        r.contains("10.60.0.0/16 via 10.56.217.1 dev net1 metric 300"),
        "{r}"
    );
    assert!(
        r.contains("10.61.0.0/16 via 10.56.217.1 dev net1 table 100 "),
        "{r}"
    );
    assert!(
        r.contains("10.62.0.0/16 via 10.56.217.1 dev net1 scope site"),
        "{r}"
    );
    let r6 = sh(&["ip", "-6", "route", "show"]);
    assert!(r6.contains("fd00:60::/48 via fd00:56::1 dev net1"), "{r6}");
    lab.run("DEL", "v6", pod.netns(), &conf, &env).expect_ok();
    assert_eq!(pod.links(), vec!["lo"]);
    assert_eq!(lab.host.snapshot(), before);
}
