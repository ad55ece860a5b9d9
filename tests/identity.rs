//! Identity, not names (issue 11): no pod, runtime mistake or bad input makes the plugin
//! move, overwrite or wedge what is not its own. The real binary on the emulated host
//! (tests/common/emuhost.rs); every test asserts the host, the pod and the IPAM store
//! afterwards, not only the exit code. Needs root; without it the fixture panics.

mod common;

use common::emuhost::Pod;
use common::fixture::{
    assert_no_state, assert_pristine, del_leaves_nothing, del_sparing, fresh, squat,
};
use common::lab::{bin, pod_addrs, Lab, Run};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn run_if(lab: &Lab, cmd: &str, cid: &str, netns: &str, ifname: &str, conf: &Value) -> Run {
    Run::from(
        lab.host
            .run_plugin(bin(), cmd, cid, netns, ifname, &conf.to_string(), &[]),
    )
}

#[track_caller]
fn pod_ok(pod: &Pod, args: &[&str]) {
    let out = pod.exec(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
}

#[track_caller]
fn host_ok(lab: &Lab, args: &[&str]) {
    let out = lab.host.host_ip(args);
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Finding 1 and the hostile pod: inside the pod the VF is renamed away and a veth named
/// like CNI_IFNAME takes its place. DEL brings back the VF (found by ifindex and
/// address), never the pod's veth.
#[test]
fn a_pod_cannot_push_its_own_device_into_the_host() {
    let (lab, before, pod, conf) = Lab::attached(0);
    pod_ok(&pod, &["ip", "link", "set", "net1", "down"]);
    pod_ok(&pod, &["ip", "link", "set", "net1", "name", "renamed"]);
    pod_ok(
        &pod,
        &[
            "ip", "link", "add", "net1", "type", "veth", "peer", "name", "evil",
        ],
    );
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(lab.host.snapshot(), before, "the VF, and only it, is back");
    assert_eq!(sorted(pod.links()), ["evil", "lo", "net1"]);
    assert_no_state(&lab);
    // A later ADD on that VF gets the VF, not the pod's veth.
    let pod2 = lab.host.new_pod();
    let r = lab.add("c2", &pod2, &conf).expect_ok();
    assert_eq!(
        r["interfaces"][0]["mac"],
        before
            .link(lab.host.vf(0).netdev.as_deref().unwrap())
            .unwrap()
            .address
    );
    lab.del_restores("c2", pod2.netns(), &conf, &before);
}

/// The hostile pod, more ways: the VF renamed (found and returned); the VF moved to a
/// third netns (DEL keeps the journal and says where to look; once it is back, DEL
/// finishes); the VF's address copied onto a veth named CNI_IFNAME (the copy lacks the
/// VF's ifindex: the VF is returned, the copy stays).
#[test]
fn hostile_pod_renames_moves_and_copies_the_vf() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let conf = lab.conf("1.0.0", 1);

    // Renamed only.
    let pod = lab.host.new_pod();
    lab.add("h1", &pod, &conf).expect_ok();
    pod_ok(&pod, &["ip", "link", "set", "net1", "down"]);
    pod_ok(&pod, &["ip", "link", "set", "net1", "name", "x0"]);
    lab.del_restores("h1", pod.netns(), &conf, &before);
    assert_eq!(pod.links(), ["lo"]);

    // Moved to a third namespace.
    let pod = lab.host.new_pod();
    let third = lab.host.new_pod();
    lab.add("h2", &pod, &conf).expect_ok();
    pod_ok(&pod, &["ip", "link", "set", "net1", "netns", &third.name]);
    let e = lab.del("h2", pod.netns(), &conf).expect_code(102);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("another network namespace")
            || e["details"]
                .as_str()
                .unwrap_or("")
                .contains("another network namespace"),
        "{e}"
    );
    assert_eq!(lab.journals(), ["h2:net1"], "journal kept");
    assert_eq!(lab.allocations().len(), 1, "IP kept while the VF is out");
    assert!(lab.host.snapshot().link("net1").is_none());
    let out = third.exec(&["ip", "link", "set", "net1", "netns", &pod.name]);
    assert!(out.status.success(), "{out:?}");
    del_leaves_nothing(&lab, "h2", pod.netns(), &conf, &before);

    // The VF renamed away and its address copied onto a new veth named net1: the copy
    // lacks the VF's ifindex, so DEL returns the VF and leaves the copy.
    let pod = lab.host.new_pod();
    let r = lab.add("h3", &pod, &conf).expect_ok();
    let mac = r["interfaces"][0]["mac"].as_str().unwrap().to_string();
    pod_ok(&pod, &["ip", "link", "set", "net1", "down"]);
    pod_ok(&pod, &["ip", "link", "set", "net1", "name", "x1"]);
    pod_ok(
        &pod,
        &[
            "ip", "link", "add", "net1", "address", &mac, "type", "veth", "peer", "name", "y1",
        ],
    );
    lab.del("h3", pod.netns(), &conf).expect_ok();
    assert_eq!(sorted(pod.links()), ["lo", "net1", "y1"]);
    assert_pristine(&lab, &before);
}

/// Finding 2: without a journal DEL moves nothing, whatever CNI_IFNAME names: the
/// pod's own net1 after a refused ADD, the pod's eth0, lo.
#[test]
fn del_without_a_journal_moves_no_device() {
    let (lab, before, pod) = fresh();
    pod_ok(
        &pod,
        &[
            "ip", "link", "add", "net1", "type", "veth", "peer", "name", "eth0",
        ],
    );
    let conf = lab.conf("1.0.0", 0);
    lab.add("c1", &pod, &conf).expect_code(4);
    for ifname in ["net1", "eth0", "lo"] {
        for _ in 0..2 {
            run_if(&lab, "DEL", "c1", pod.netns(), ifname, &conf).expect_ok();
        }
    }
    assert_eq!(sorted(pod.links()), ["eth0", "lo", "net1"]);
    assert_pristine(&lab, &before);
}

/// Finding 3: `(pod-x, net1)` and `(pod, x-net1)` have distinct journals: DEL of one
/// leaves the other attached.
#[test]
fn journal_names_do_not_collide() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let (a, b) = (lab.host.new_pod(), lab.host.new_pod());
    run_if(
        &lab,
        "ADD",
        "pod-x",
        a.netns(),
        "net1",
        &lab.conf("1.0.0", 0),
    )
    .expect_ok();
    run_if(
        &lab,
        "ADD",
        "pod",
        b.netns(),
        "x-net1",
        &lab.conf("1.0.0", 1),
    )
    .expect_ok();
    assert_eq!(sorted(lab.journals()), ["pod-x:net1", "pod:x-net1"]);
    let ip_a = pod_addrs(&a, "net1");
    run_if(
        &lab,
        "DEL",
        "pod",
        b.netns(),
        "x-net1",
        &lab.conf("1.0.0", 1),
    )
    .expect_ok();
    assert_eq!(
        pod_addrs(&a, "net1"),
        ip_a,
        "the other attachment is intact"
    );
    assert_eq!(lab.allocations().len(), 1);
    assert_eq!(lab.journals(), ["pod-x:net1"]);
    run_if(
        &lab,
        "DEL",
        "pod-x",
        a.netns(),
        "net1",
        &lab.conf("1.0.0", 0),
    )
    .expect_ok();
    assert_pristine(&lab, &before);
}

/// Finding 5: the device-info path. A directory there, or a file the plugin did not
/// write: ADD refused before any change, the path untouched. A path that cannot be
/// written: ADD rolls back completely, nothing wedged. A file replaced after ADD: DEL
/// leaves it.
#[test]
fn device_info_path_is_never_overwritten_or_removed_when_not_ours() {
    let (lab, before, pod) = fresh();
    let dir = lab.host.root().join("devinfo");
    std::fs::create_dir_all(dir.join("a-directory")).unwrap();
    std::fs::write(dir.join("foreign.json"), "not mine").unwrap();
    std::fs::write(dir.join("a-file"), "").unwrap();
    let with = |p: std::path::PathBuf| {
        let mut c = lab.conf("1.0.0", 0);
        c["runtimeConfig"] = json!({"CNIDeviceInfoFile": p});
        c
    };
    for (p, code) in [
        (dir.join("a-directory"), 7),
        (dir.join("foreign.json"), 7),
        (dir.join("a-file/below"), 5),
    ] {
        let c = with(p.clone());
        lab.add("d1", &pod, &c).expect_code(code);
        assert_eq!(lab.host.snapshot(), before, "{p:?}");
        assert!(
            lab.journals().is_empty() && lab.allocations().is_empty(),
            "{p:?}"
        );
        assert_eq!(pod.links(), ["lo"]);
        lab.del("d1", pod.netns(), &c).expect_ok();
    }
    assert!(dir.join("a-directory").is_dir());
    assert_eq!(
        std::fs::read_to_string(dir.join("foreign.json")).unwrap(),
        "not mine"
    );
    // Ours, then replaced behind our back: DEL leaves the replacement.
    let p = dir.join("mine.json");
    let c = with(p.clone());
    lab.add("d2", &pod, &c).expect_ok();
    let ours: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(ours["pci"]["pci-address"], lab.host.vf(0).addr);
    std::fs::write(&p, "replaced").unwrap();
    lab.del("d2", pod.netns(), &c).expect_ok();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "replaced");
    // Ours and intact: removed.
    std::fs::remove_file(&p).unwrap();
    lab.add("d3", &pod, &c).expect_ok();
    lab.del("d3", pod.netns(), &c).expect_ok();
    assert!(!p.exists());
    assert_eq!(lab.host.snapshot(), before);
}

/// Finding 6: move and rename are not atomic in the kernel. With the VF's original name
/// taken in the host, DEL returns the VF under the fallback name, and a second DEL does
/// not touch the device that took the name.
#[test]
fn original_name_taken_in_the_host_returns_the_vf_under_the_fallback_name() {
    let (lab, _, pod, conf) = Lab::attached(0);
    lab.host.sync_netdevs().unwrap();
    let orig = lab.host.vf(0).netdev.clone().unwrap();
    let squatter = squat(&lab, &orig);
    let after = del_sparing(&lab, "c1", pod.netns(), &conf, &squatter);
    let back = after
        .links
        .iter()
        .find(|l| l.name.starts_with("ibvf"))
        .expect("VF back under the fallback name");
    assert!(back.up, "admin state restored");
    assert_eq!(pod.links(), ["lo"]);
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(lab.host.snapshot(), after, "a second DEL changes nothing");
    assert_no_state(&lab);
}

/// The kernel lists a VF's netdev under `<VF>/net/<name>/` with its ifindex. Between
/// the plugin's read of that listing and its netlink lookup, the netdev can be renamed
/// and another link can take the old name (the explorer met it: a DEL returning
/// another VF's netdev as `net1` while an ADD read `net1` for its VF). ADD moves the
/// VF's own netdev, found by the listed ifindex, never the link that now has the name.
#[test]
fn add_moves_the_listed_ifindex_not_the_link_that_took_the_listed_name() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 0);
    lab.host.sync_netdevs().unwrap();
    let orig = lab.host.vf(0).netdev.clone().unwrap();
    let vf_link = lab.host.snapshot().link(&orig).unwrap().clone();
    // The listing says `<orig>` (as read before the rename); the VF's netdev is now
    // `renamed0`, and a foreign link holds `<orig>`.
    host_ok(&lab, &["link", "set", &orig, "name", "renamed0"]);
    host_ok(
        &lab,
        &[
            "link", "add", &orig, "type", "veth", "peer", "name", "squat-p",
        ],
    );
    let squatter = lab.host.snapshot().link(&orig).unwrap().clone();
    assert_ne!(squatter.ifindex, vf_link.ifindex);
    let r = lab.add("c1", &pod, &conf);
    r.expect_ok();
    let after = lab.host.snapshot();
    assert_eq!(
        after.link(&orig),
        Some(&squatter),
        "the squatter stays in the host"
    );
    assert!(
        after.link("renamed0").is_none(),
        "the VF's netdev went to the pod"
    );
    let in_pod = pod.link_snapshots().into_iter().find(|l| l.name == "net1");
    assert_eq!(
        in_pod.map(|l| l.address),
        Some(vf_link.address.clone()),
        "the pod's net1 is the VF's netdev"
    );
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(pod.links(), ["lo"]);
    assert_no_state(&lab);
}

/// Finding 6 (second part) and 7: a repeated ADD of a live attachment, with bad input or
/// good, on the same VF or another, is refused and the live attachment is untouched.
#[test]
fn repeated_add_never_touches_the_live_attachment() {
    let (lab, before, pod, conf) = Lab::attached(0);
    let ip = pod_addrs(&pod, "net1");
    let live = lab.host.snapshot();
    let mut bad = conf.clone();
    bad["runtimeConfig"]["infinibandGUID"] = json!("not-a-guid");
    lab.add("c1", &pod, &bad).expect_code(7);
    lab.add("c1", &pod, &conf).expect_code(4);
    lab.add("c1", &pod, &lab.conf("1.0.0", 1)).expect_code(4);
    assert_eq!(pod_addrs(&pod, "net1"), ip, "address unchanged");
    assert_eq!(lab.host.snapshot(), live, "host unchanged (VF 1 untouched)");
    assert_eq!(lab.journals(), ["c1:net1"]);
    assert_eq!(lab.allocations().len(), 1);
    lab.del_restores("c1", pod.netns(), &conf, &before);
}

/// Finding 8: DEL with an empty CNI_NETNS while the pod lives finds the pod netns from
/// the journal (identity-checked) and brings the VF back before releasing the IP.
#[test]
fn del_with_empty_netns_while_the_pod_lives_returns_the_vf() {
    let (lab, before, pod, conf) = Lab::attached(0);
    lab.del("c1", "", &conf).expect_ok();
    assert_eq!(pod.links(), ["lo"]);
    assert_pristine(&lab, &before);
}

/// A netns path re-used by another namespace is not the pod's: DEL does not act in it.
#[test]
fn a_new_namespace_at_the_recorded_path_is_not_the_pod() {
    let (lab, before, pod, conf) = Lab::attached(0);
    pod.delete().unwrap();
    lab.host
        .return_destroyed_vf_netdev(0, "net1", &before)
        .unwrap();
    // Another namespace at the same path, with its own net1.
    let out = std::process::Command::new("ip")
        .args(["netns", "add", &pod.name])
        .output()
        .unwrap();
    assert!(out.status.success());
    pod_ok(
        &pod,
        &[
            "ip", "link", "add", "net1", "type", "veth", "peer", "name", "n1p",
        ],
    );
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(
        sorted(pod.links()),
        ["lo", "n1p", "net1"],
        "the new namespace is untouched"
    );
    assert_eq!(lab.host.snapshot(), before);
}

/// Finding 9: the kernel returns a VF from a dead netns late (here 1 s after the netns
/// went). DEL waits for it (bounded by its 5 s return wait) and restores it, without a
/// recovery rebind; the IP is released and the journal removed.
#[test]
fn a_vf_returned_late_is_not_lost() {
    let (lab, before, pod, conf) = Lab::attached(0);
    pod.delete().unwrap();
    let t = Instant::now();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1000));
            lab.host
                .return_destroyed_vf_netdev(0, "net1", &before)
                .unwrap();
        });
        lab.del("c1", pod.netns(), &conf)
    });
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "returned within the wait: {:?}",
        t.elapsed()
    );
    assert!(!r.stderr.contains("recovery rebind"), "{}", r.stderr);
    r.expect_ok();
    lab.host.sync_netdevs().unwrap();
    assert_pristine(&lab, &before);
}

/// Finding 10: an unreadable journal makes DEL fail without releasing the IP still on
/// the pod's interface, saying what to do; the VF stays held for other ADDs.
#[test]
fn an_unreadable_journal_holds_its_vf_and_its_ip() {
    let (lab, before, pod, conf) = Lab::attached(0);
    let path = lab.state.join("c1:net1");
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, b"{ truncated").unwrap();
    let e = lab.del("c1", pod.netns(), &conf).expect_code(5);
    assert!(
        e["msg"].as_str().unwrap().contains("move the file aside"),
        "{e}"
    );
    assert_eq!(lab.allocations().len(), 1, "IP kept");
    assert!(pod.links().contains(&"net1".to_string()));
    let pod2 = lab.host.new_pod();
    lab.add("c2", &pod2, &conf).expect_code(101);
    std::fs::write(&path, good).unwrap();
    del_leaves_nothing(&lab, "c1", pod.netns(), &conf, &before);
}

/// The hostile pod's last move: its netns deleted while DEL runs. Whatever DEL saw, the
/// VF ends up back (or its journal kept for the retry), never lost or duplicated. A
/// netdev destroyed with the netns (a veth is) is re-created by DEL's recovery rebind,
/// through the emulated driver probe.
#[test]
fn pod_netns_deleted_while_del_runs() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let _probe = lab.host.probe_on_bind(&before);
    for round in 0..3 {
        let pod = lab.host.new_pod();
        let conf = lab.conf("1.0.0", 0);
        let cid = format!("r{round}");
        lab.add(&cid, &pod, &conf).expect_ok();
        let child = lab.host.spawn_plugin(
            bin(),
            "DEL",
            &cid,
            pod.netns(),
            "net1",
            &conf.to_string(),
            &[],
        );
        std::thread::sleep(Duration::from_millis(5 * round));
        pod.delete().unwrap();
        let out = child.wait_with_output().unwrap();
        lab.host
            .return_destroyed_vf_netdev(0, "net1", &before)
            .unwrap();
        if !out.status.success() {
            assert_eq!(lab.journals(), [format!("{cid}:net1")], "{out:?}");
            lab.del(&cid, pod.netns(), &conf).expect_ok();
        }
        assert_eq!(lab.host.snapshot(), before, "round {round}");
        assert_no_state(&lab);
        // The emulated sysfs does not follow renames by itself (emuhost docs).
        lab.host.sync_netdevs().unwrap();
    }
}

/// Finding 9, continued: the next ADD of a VF whose holder's pod netns is gone finishes
/// that attachment's DEL (VF restored, its IP released) and takes the VF.
#[test]
fn the_next_add_finishes_a_dead_holder() {
    let (lab, before, pod) = fresh();
    let mut conf = lab.conf("1.0.0", 0);
    conf["runtimeConfig"]["infinibandGUID"] = json!("02:00:00:00:00:00:00:77");
    lab.add("old", &pod, &conf).expect_ok();
    pod.delete().unwrap();
    lab.host
        .return_destroyed_vf_netdev(0, "net1", &before)
        .unwrap();
    lab.host.sync_netdevs().unwrap();
    let pod2 = lab.host.new_pod();
    let conf2 = lab.conf("1.0.0", 0);
    lab.add("new", &pod2, &conf2).expect_ok();
    assert_eq!(lab.journals(), ["new:net1"]);
    assert_eq!(lab.allocations().len(), 1);
    // The old attachment's late DEL finds nothing to do and does not touch the VF.
    lab.del("old", pod.netns(), &conf).expect_ok();
    assert!(pod2.links().contains(&"net1".to_string()));
    del_leaves_nothing(&lab, "new", pod2.netns(), &conf2, &before);
}

/// Finding 13: container IDs up to the accepted 255 bytes work end to end (the journal
/// name is hashed past 200 bytes; "File name too long" used to fail ADD past ~239 bytes
/// and DEL for ever at 255).
#[test]
fn the_longest_container_ids_add_and_del() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    for len in [200, 239, 240, 255] {
        let cid = "c".repeat(len);
        let pod = lab.host.new_pod();
        let conf = lab.conf("1.0.0", 0);
        lab.add(&cid, &pod, &conf).expect_ok();
        let j = lab.journals();
        assert!(j.len() == 1 && j[0].len() <= 200, "{len}: {j:?}");
        lab.del(&cid, pod.netns(), &conf).expect_ok();
        assert_eq!(lab.host.snapshot(), before, "{len}");
        assert!(
            lab.journals().is_empty() && lab.allocations().is_empty(),
            "{len}"
        );
        lab.host.sync_netdevs().unwrap();
    }
}

/// CHECK acts only in the namespace ADD recorded: another live namespace given as
/// CNI_NETNS fails the check (code 104), even when it has an interface of that name.
#[test]
fn check_in_another_namespace_fails() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 0);
    let res = lab.add("c1", &pod, &conf).expect_ok();
    let other = lab.host.new_pod();
    pod_ok(
        &other,
        &[
            "ip", "link", "add", "net1", "type", "veth", "peer", "name", "o1",
        ],
    );
    lab.check("c1", &other, &conf, &res).expect_code(104);
    assert_eq!(lab.check("c1", &pod, &conf, &res).expect_ok(), Value::Null);
    lab.del("c1", pod.netns(), &conf).expect_ok();
}
