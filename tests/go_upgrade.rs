//! In-place upgrade from the Go ib-sriov-cni: pods it attached, each described by the
//! cache file it wrote (fixtures in `tests/fixtures/go-cache/`, generated from the Go
//! plugin's own types at k8snetworkplumbingwg/ib-sriov-cni 543060da; see the README
//! there), are deleted by our binary as the Go plugin's DEL would: the emulated host is
//! first put in the state the Go ADD leaves (the VF netdev in the pod as `net1` with its
//! host-local address and default route, GUID and link state set), then DEL must
//! restore what Go's DEL restores, release host-local's allocation, remove the cache;
//! a second DEL changes nothing. CHECK, GC and STATUS tolerate the cache files.
//! Needs root (netns, veth) and Debian's host-local (containernetworking-plugins).

mod common;

use common::emuhost::{EmuOptions, HostSnapshot, Pod};
use common::gofix::*;
use common::lab::{list, Lab};
use serde_json::{json, Value};

/// What the Go ADD leaves for a VF with a netdev: GUID (both) and link state set, the
/// netdev in the pod as net1, up, with host-local's address and the configured routes
/// (allocated by running host-local itself, keyed by the pod's container ID).
fn go_add(lab: &Lab, f: &Value, pod: &Pod, conf: &Value) {
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
    assert!(pod
        .exec(&[
            "ip",
            "route",
            "add",
            "default",
            "via",
            "10.56.217.1",
            "dev",
            "net1"
        ])
        .status
        .success());
}

/// Runs one fixture: Go's ADD state, CHECK, GC and STATUS tolerate it, DEL restores as
/// Go's DEL, a second DEL changes nothing. `expect` adjusts the pre-ADD snapshot to
/// what Go's DEL leaves (its documented differences from "as before ADD").
fn upgrade_case(name: &str, opts: EmuOptions, expect: impl Fn(&Lab, &mut HostSnapshot)) {
    let lab = Lab::new(opts);
    let f = manifest(name);
    let vf = lab.host.vf(f["vf"].as_u64().unwrap() as u32).clone();
    let pod = lab.host.new_pod();
    let conf = del_conf(&lab, &f);
    let before = lab.host.snapshot();
    go_add(&lab, &f, &pod, &conf);
    let cache = install_cache(&lab, &f);

    // CHECK (Go's CHECK never failed): the VF netdev is in the pod.
    let mut c = conf.clone();
    c["prevResult"] = json!({"cniVersion": "1.0.0"});
    run(&lab, "CHECK", &f, &pod, &c).expect_ok();
    // GC with nothing valid and STATUS leave a Go-attached pod alone.
    let mut gc = conf.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    run(&lab, "GC", &f, &pod, &gc).expect_ok();
    run(&lab, "STATUS", &f, &pod, &gc).expect_ok();
    assert!(cache.exists(), "GC left the Go cache alone");
    let network = f["stdin"]["name"].as_str().unwrap();
    if !vf.is_vfio() {
        assert_eq!(host_local_held(&lab, network).len(), 1);
        assert!(pod.links().contains(&"net1".to_string()));
    }

    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
    assert!(
        !cache.exists(),
        "the Go cache is removed by a successful DEL"
    );
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(host_local_held(&lab, network).is_empty(), "IP released");
    let mut want = before.clone();
    expect(&lab, &mut want);
    assert_eq!(lab.host.snapshot(), want, "{name}: host after DEL");
    let after = lab.host.snapshot();
    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
    assert_eq!(lab.host.snapshot(), after, "second DEL changes nothing");
}

/// (a) GUID from runtimeConfig, host-local: netdev back down under its name; node and
/// port GUID set to HostIFGUID (the old port GUID: Go sets both), driver rebound.
#[test]
fn go_attached_with_guid_and_host_local() {
    upgrade_case("a-guid-hostlocal", EmuOptions::default(), |lab, v| {
        netdev_down(lab, v, 0);
        ofed(
            lab,
            v,
            lab.host.vf(0).ofed_node(),
            "02:00:00:00:00:02:00:00",
        );
        assert_eq!(lab.driver_file("mlx5_core", "bind"), "0000:af:00.2");
    });
}

/// (f) pod (a) as the v1.2.1 release wrote it (struct key order, no vfioPciMode).
#[test]
fn go_v1_2_1_cache() {
    upgrade_case("f-legacy-v1.2.1", EmuOptions::default(), |lab, v| {
        netdev_down(lab, v, 0);
        ofed(
            lab,
            v,
            lab.host.vf(0).ofed_node(),
            "02:00:00:00:00:02:00:00",
        );
    });
}

/// (b) no GUID: netdev back, no GUID write, no rebind.
#[test]
fn go_attached_without_guid() {
    upgrade_case("b-noguid-hostlocal", EmuOptions::default(), |lab, v| {
        netdev_down(lab, v, 2);
        assert_eq!(lab.driver_file("mlx5_core", "bind"), "");
    });
}

/// (c) link_state enable: set back to auto (Follow), whatever it was before ADD.
#[test]
fn go_attached_with_link_state() {
    upgrade_case("c-linkstate-enable", EmuOptions::default(), |lab, v| {
        netdev_down(lab, v, 3);
        assert_eq!(lab.read(lab.host.vf(3).ofed_policy()), "Follow");
    });
}

/// (d) vfio: no netdev, no IPAM; node and port GUID set to all-ones (Go's default GUID,
/// HostIFGUID in vfio mode); no rebind.
#[test]
fn go_attached_vfio() {
    upgrade_case(
        "d-vfio",
        EmuOptions {
            vfio: vec![1],
            ..Default::default()
        },
        |lab, v| {
            let vf = lab.host.vf(1);
            ofed(lab, v, vf.ofed_node(), "ff:ff:ff:ff:ff:ff:ff:ff");
            ofed(lab, v, vf.ofed_port(), "ff:ff:ff:ff:ff:ff:ff:ff");
            assert_eq!(lab.driver_file("vfio-pci", "unbind"), "");
        },
    );
}

/// Every fixture, current and legacy (v1.2.1) format, parses; a corrupt cache is named
/// by DEL, which acts on nothing in it, leaves it in place and succeeds, as the Go
/// plugin's DEL does with a cache it cannot load (`cmdDel` returns nil when
/// `config.LoadConfFromCache` fails, cmd/ib-sriov-cni/main.go at 543060da): failing
/// would block the pod's teardown for ever without restoring anything more.
#[test]
fn every_fixture_parses_and_a_corrupt_one_is_named() {
    for dir in ["ib-sriov", "ib-sriov-v1.2.1"] {
        for name in list(&fixtures().join(dir)) {
            let p = fixtures().join(dir).join(&name);
            let a = ib_sriov_cni::gocache::parse(&std::fs::read(&p).unwrap(), p.clone())
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(a.vf.to_string().starts_with("0000:af:00."), "{name}");
        }
    }
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let f = manifest("b-noguid-hostlocal");
    let conf = del_conf(&lab, &f);
    let cache = install_cache(&lab, &f);
    std::fs::write(&cache, "{\"deviceID\": 5").unwrap();
    let r = run(&lab, "DEL", &f, &pod, &conf);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(
        log.contains(f["file"].as_str().unwrap()) && log.contains("left in place"),
        "{log}"
    );
    assert!(cache.exists());
}
