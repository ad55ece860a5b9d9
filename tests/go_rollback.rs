//! Rolling a node back to the Go ib-sriov-cni with pods running: ADD also writes the
//! Go plugin's cache file (`goCacheDir`, default `/var/lib/cni/ib-sriov`), byte for
//! byte what the Go plugin writes for the same stdin (fixtures in
//! `tests/fixtures/go-cache/`, generated from its own types at
//! k8snetworkplumbingwg/ib-sriov-cni 543060da) plus our marker key, so the Go plugin's
//! DEL can undo an attachment we made. The Go plugin's DEL is played here by
//! [`go_del`], which follows its `cmdDel` (cmd/ib-sriov-cni/main.go at 543060da: IPAM
//! `ExecDel` with the DEL's stdin, nothing more when the netns is gone,
//! `sriovManager.ReleaseVF`, `ResetVFConfig`, then `utils.CleanCachedNetConf`), acting on
//! the emulated host's sysfs and netns as the Go code acts on the kernel. Then (the node
//! upgraded again) our DEL of the same attachment must touch nothing and succeed.
//! Needs root (netns, veth) and Debian's host-local (containernetworking-plugins).

mod common;

use common::emuhost::{EmuOptions, HostSnapshot};
use common::gofix::*;
use common::lab::Lab;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const OTHER_BOOT: &str = "6f1c7d0e-0000-4000-8000-000000000042";

/// The config of fixture `f` for our binary: the fixture's stdin, with the lab's
/// stateDir, host-local dataDir and a goCacheDir of its own.
fn conf(lab: &Lab, f: &Value) -> (Value, PathBuf) {
    let dir = lab.host.root().join("var-lib-cni-ib-sriov");
    let mut c = del_conf(lab, f);
    c["goCacheDir"] = json!(dir);
    (c, dir)
}

/// The fixture's cache file, and ours with its marker (the last key) cut off.
fn compare_with_fixture(f: &Value, cache: &Path) {
    let ours = std::fs::read_to_string(cache).unwrap();
    let v: Value = serde_json::from_str(&ours).unwrap();
    assert!(
        v["x-ib-sriov"]["bootId"].is_string(),
        "our marker records the boot: {ours}"
    );
    let cut = ours.find(",\"x-ib-sriov\":").unwrap();
    let go = std::fs::read_to_string(
        fixtures()
            .join("ib-sriov")
            .join(f["file"].as_str().unwrap()),
    )
    .unwrap();
    assert_eq!(format!("{}}}", &ours[..cut]), go, "{}", f["name"]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(cache), 0o600);
    assert_eq!(mode(cache.parent().unwrap()), 0o700);
}

/// ADD by us, DEL by the Go plugin, then DEL by us again: the cache file is Go's byte
/// for byte; Go's DEL leaves the host as it leaves its own attachments (`expect`
/// adjusts the pre-ADD snapshot); our later DEL succeeds touching nothing; the VF is
/// free for the next pod, whose ADD and DEL work as usual.
fn rollback_case(name: &str, opts: EmuOptions, expect: impl Fn(&Lab, &mut HostSnapshot)) {
    let lab = Lab::new(opts);
    let f = manifest(name);
    let (conf, dir) = conf(&lab, &f);
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    run(&lab, "ADD", &f, &pod, &conf).expect_ok();
    let cache = dir.join(f["file"].as_str().unwrap());
    compare_with_fixture(&f, &cache);
    let network = f["stdin"]["name"].as_str().unwrap();
    let vfio = f["stdin"]["vfioPciMode"] == true;
    if !vfio {
        assert_eq!(host_local_held(&lab, network).len(), 1);
    }

    go_del(&lab, &f, &pod, &conf, &cache);
    let mut want = before.clone();
    expect(&lab, &mut want);
    assert_eq!(
        lab.host.snapshot(),
        want,
        "{name}: host after the Go plugin's DEL"
    );
    assert!(
        host_local_held(&lab, network).is_empty(),
        "Go's DEL released the IP"
    );
    assert_eq!(pod.links(), vec!["lo"]);

    // Upgraded again: the kubelet's DEL of the same attachment reaches our binary.
    assert_eq!(lab.journals().len(), 1, "our journal outlived the rollback");
    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(lab.host.snapshot(), want, "our DEL touched nothing");

    // The VF is free: another pod's ADD and DEL.
    let pod2 = lab.host.new_pod();
    let mut f2 = f.clone();
    f2["containerID"] = json!(format!("{}-2", &f["containerID"].as_str().unwrap()[..60]));
    run(&lab, "ADD", &f2, &pod2, &conf).expect_ok();
    run(&lab, "DEL", &f2, &pod2, &conf).expect_ok();
    assert!(lab.journals().is_empty());
    assert!(
        !dir.join(format!("{}-net1", f2["containerID"].as_str().unwrap()))
            .exists(),
        "our DEL removes the cache file our ADD wrote"
    );
}

#[test]
fn rollback_guid_and_host_local() {
    rollback_case("a-guid-hostlocal", EmuOptions::default(), |lab, v| {
        netdev_down(lab, v, 0);
        // Go gives node and port the port GUID it read before ADD.
        ofed(
            lab,
            v,
            lab.host.vf(0).ofed_node(),
            "02:00:00:00:00:02:00:00",
        );
    });
}

#[test]
fn rollback_without_guid() {
    rollback_case("b-noguid-hostlocal", EmuOptions::default(), |lab, v| {
        netdev_down(lab, v, 2);
    });
}

#[test]
fn rollback_link_state() {
    rollback_case("c-linkstate-enable", EmuOptions::default(), |lab, v| {
        netdev_down(lab, v, 3);
        ofed(lab, v, lab.host.vf(3).ofed_policy(), "Follow");
    });
}

#[test]
fn rollback_vfio() {
    rollback_case(
        "d-vfio",
        EmuOptions {
            vfio: vec![1],
            ..Default::default()
        },
        |lab, v| {
            let vf = lab.host.vf(1);
            ofed(lab, v, vf.ofed_node(), "ff:ff:ff:ff:ff:ff:ff:ff");
            ofed(lab, v, vf.ofed_port(), "ff:ff:ff:ff:ff:ff:ff:ff");
        },
    );
}

/// A cache file our ADD wrote in an earlier boot is never acted on: the DEL that finds
/// it without a journal (the reboot emptied /run) releases the IP, removes the file and
/// does not touch the VF.
#[test]
fn cache_file_from_an_earlier_boot_is_not_acted_on() {
    let lab = Lab::default();
    let f = manifest("a-guid-hostlocal");
    let (conf, dir) = conf(&lab, &f);
    let pod = lab.host.new_pod();
    run(&lab, "ADD", &f, &pod, &conf).expect_ok();
    let cache = dir.join(f["file"].as_str().unwrap());
    assert!(cache.exists());
    // The "reboot": /run emptied, a new boot ID. The pod netns is kept here only to
    // show that nothing is moved out of it.
    std::fs::remove_dir_all(&lab.state).unwrap();
    let attached = lab.host.snapshot();
    let cni_path = cni_path();
    let out = lab.run(
        "DEL",
        f["containerID"].as_str().unwrap(),
        pod.netns(),
        &conf,
        &[
            ("CNI_PATH", cni_path.as_str()),
            ("IB_SRIOV_TEST_BOOT_ID", OTHER_BOOT),
        ],
    );
    out.expect_ok();
    assert!(!cache.exists(), "the stale cache file is removed");
    assert!(host_local_held(&lab, "ib-sriov-network").is_empty());
    assert_eq!(lab.host.snapshot(), attached, "the VF was not touched");
    assert!(pod.links().contains(&"net1".to_string()));
}

/// Crash safety around the cache file: ADD killed right after writing it (journal not
/// complete) and DEL killed right after removing it (journal still there) both end,
/// after a retried DEL, with the host as before and no file left.
#[test]
fn killed_around_the_cache_file() {
    for (verb, fp) in [("ADD", "add.go_cache"), ("DEL", "del.go_cache")] {
        let lab = Lab::default();
        let f = manifest("a-guid-hostlocal");
        let (conf, dir) = conf(&lab, &f);
        let pod = lab.host.new_pod();
        let before = lab.host.snapshot();
        let cache = dir.join(f["file"].as_str().unwrap());
        let cni_path = cni_path();
        let cid = f["containerID"].as_str().unwrap();
        let env = [
            ("CNI_PATH", cni_path.as_str()),
            ("IB_SRIOV_FAILPOINTS", &format!("{fp}=kill")),
        ];
        if verb == "DEL" {
            run(&lab, "ADD", &f, &pod, &conf).expect_ok();
        }
        let out = lab.run(verb, cid, pod.netns(), &conf, &env);
        assert!(!out.ok, "{verb} was killed at {fp}");
        assert_eq!(cache.exists(), verb == "ADD", "{fp}");
        assert_eq!(lab.journals().len(), 1, "{fp}");
        run(&lab, "DEL", &f, &pod, &conf).expect_ok();
        assert!(!cache.exists(), "{fp}");
        assert!(lab.journals().is_empty(), "{fp}");
        assert!(host_local_held(&lab, "ib-sriov-network").is_empty(), "{fp}");
        assert_eq!(pod.links(), vec!["lo"], "{fp}");
        assert_eq!(lab.host.snapshot(), before, "{fp}: host restored");
    }
}

/// `"goCacheDir": ""` writes no cache file.
#[test]
fn empty_go_cache_dir_writes_none() {
    let lab = Lab::default();
    let f = manifest("b-noguid-hostlocal");
    let (mut conf, dir) = conf(&lab, &f);
    conf["goCacheDir"] = json!("");
    let pod = lab.host.new_pod();
    run(&lab, "ADD", &f, &pod, &conf).expect_ok();
    assert!(!dir.exists());
    run(&lab, "DEL", &f, &pod, &conf).expect_ok();
}

/// The built-in IPAM (`"type": "ib-sriov-ipam"`) across a rollback: the Go plugin's DEL
/// execs the `ib-sriov-ipam` our entrypoint installed beside it (here a symlink to the
/// binary under test, as tests/ipam_plugin.rs does), which releases the record the
/// built-in allocator wrote at our ADD.
#[test]
fn rollback_with_the_builtin_ipam() {
    let lab = Lab::default();
    let mut f = manifest("b-noguid-hostlocal");
    f["containerID"] = json!("rollback-builtin");
    let mut conf = lab.conf("1.0.0", 2);
    let dir = lab.host.root().join("go-cache");
    conf["goCacheDir"] = json!(dir);
    let cni_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(common::lab::bin(), cni_dir.path().join("ib-sriov-ipam")).unwrap();
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    lab.add("rollback-builtin", &pod, &conf).expect_ok();
    assert_eq!(lab.allocations().len(), 1);
    let cache = dir.join("rollback-builtin-net1");
    let c: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    assert_eq!(c["ipam"], json!({"type": "ib-sriov-ipam"}));
    go_del_with(&lab, &f, &pod, &conf, &cache, cni_dir.path());
    assert!(
        lab.allocations().is_empty(),
        "released through ib-sriov-ipam"
    );
    let mut want = before.clone();
    netdev_down(&lab, &mut want, 2);
    assert_eq!(lab.host.snapshot(), want);
    lab.del("rollback-builtin", pod.netns(), &conf).expect_ok();
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), want);
}

/// The Go plugin's file name `<containerID>-<ifname>` is not injective: `(pod-x, net1)`
/// and `(pod, x-net1)` share it. The second ADD leaves the first's file alone (and
/// says it cannot be rolled back); each DEL then undoes its own attachment fully, in
/// either order, and the file goes with the first attachment's DEL.
#[test]
fn colliding_cache_file_names_do_not_mix_attachments() {
    for first_del in [0usize, 1] {
        let lab = Lab::default();
        let dir = lab.host.root().join("go-cache");
        let pods = [lab.host.new_pod(), lab.host.new_pod()];
        let pairs = [("pod-x", "net1"), ("pod", "x-net1")];
        let confs = [lab.conf("1.0.0", 0), lab.conf("1.0.0", 1)];
        let before = lab.host.snapshot();
        let call = |cmd: &str, k: usize| {
            common::lab::Run::from(lab.host.run_plugin(
                common::lab::bin(),
                cmd,
                pairs[k].0,
                pods[k].netns(),
                pairs[k].1,
                &confs[k].to_string(),
                &[],
            ))
        };
        call("ADD", 0).expect_ok();
        let r = call("ADD", 1);
        assert!(r.stderr.contains("cannot be rolled back"), "{}", r.stderr);
        r.expect_ok();
        let file = dir.join("pod-x-net1");
        let c: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(
            c["ContIFNames"], "net1",
            "the first attachment's file stays"
        );
        let second = 1 - first_del;
        call("DEL", first_del).expect_ok();
        assert_eq!(pods[first_del].links(), vec!["lo"]);
        call("DEL", second).expect_ok();
        assert_eq!(
            pods[second].links(),
            vec!["lo"],
            "DEL {second} undid its attachment"
        );
        assert!(!file.exists());
        assert!(lab.journals().is_empty());
        assert_eq!(lab.host.snapshot(), before);
    }
}
