//! DEL and GC always finish: a VF netdev destroyed with its pod netns (a veth is, as the
//! real ipoib's netdevs are: `rtnl_link_ops` without `netns_refund`) is re-created by a
//! recovery rebind of the VF's driver; renames are settled by identity (udev naming a
//! netdev of the same VF is waited for, a foreign holder of the name gets the `ibvf%d`
//! fallback); racing ADDs of one attachment end with one attachment or none; nothing of
//! an attachment is left in stateDir after its last DEL. Emulated host, real binary;
//! the driver's probe is emulated by [`common::emuhost::EmuHost::probe_on_bind`].
//! Needs root.

mod common;

use common::fixture::{assert_no_state, del_sparing, lab_of, squat};
use common::lab::{bin, list, Lab, Run};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Holder links left in stateDir (`vfs/<BDF>`).
fn holders(lab: &Lab) -> Vec<String> {
    list(&lab.state.join("vfs"))
}

fn gc_conf(lab: &Lab, valid: Value) -> Value {
    let mut c = lab.conf("1.1.0", 0);
    c.as_object_mut().unwrap().remove("deviceID");
    c["cni.dev/valid-attachments"] = valid;
    c
}

/// The pod netns is deleted and the VF netdev dies with it (nothing returns it): DEL
/// waits its bound, rebinds the VF's driver (the emulated probe re-creates the netdev
/// in the host), restores name and state, releases the IP and removes the journal and
/// the holder link. A second DEL changes nothing.
#[test]
fn del_recreates_a_vf_netdev_destroyed_with_its_pod_netns() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let probe = lab.host.probe_on_bind(&before);
    let pod = lab.host.new_pod();
    let mut conf = lab.conf("1.0.0", 0);
    conf["link_state"] = json!("enable");
    lab.add("c1", &pod, &conf).expect_ok();
    assert_eq!(holders(&lab), [lab.host.vf(0).addr.clone()]);
    pod.delete().unwrap();
    // What the kernel's sysfs shows now: no netdev under the VF.
    lab.host.sync_netdevs().unwrap();
    let t = Instant::now();
    let r = lab.del("c1", pod.netns(), &conf);
    let took = t.elapsed();
    let log = r.stderr.clone();
    r.expect_ok();
    eprintln!("DEL with the netdev destroyed took {took:?}");
    assert!(log.contains("recovery rebind of VF"), "{log}");
    assert!(
        probe.binds().contains(&(lab.host.vf(0).addr.clone(), true)),
        "the probe re-created the netdev: {:?}\n{log}",
        probe.binds()
    );
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert!(lab.allocations().is_empty(), "IP released");
    assert!(holders(&lab).is_empty(), "holder link removed");
    assert_eq!(lab.host.snapshot(), before);
    lab.del_restores("c1", pod.netns(), &conf, &before);
}

/// The same attachment destroyed with its netns is reconciled by GC, which does not
/// wait for the kernel: among two healthy stale attachments (pods alive, not listed)
/// and one whose netdev died with its netns, GC finishes all three.
#[test]
fn gc_recovers_a_destroyed_netdev_among_healthy_stale_attachments() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let _probe = lab.host.probe_on_bind(&before);
    let pods: Vec<_> = (0..3).map(|_| lab.host.new_pod()).collect();
    for (k, pod) in pods.iter().enumerate() {
        lab.add(&format!("s{k}"), pod, &lab.conf("1.1.0", k as u32))
            .expect_ok();
    }
    pods[1].delete().unwrap();
    lab.host.sync_netdevs().unwrap();
    let r = lab.run("GC", "", "", &gc_conf(&lab, json!([])), &[]);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("recovery rebind of VF"), "{log}");
    assert!(log.contains("3 stale attachment(s) restored"), "{log}");
    assert_no_state(&lab);
    assert!(holders(&lab).is_empty(), "{:?}", holders(&lab));
    assert_eq!(pods[0].links(), ["lo"]);
    assert_eq!(pods[2].links(), ["lo"]);
    assert_eq!(lab.host.snapshot(), before);
}

/// A VF whose driver is gone (unbound after ADD) cannot get a netdev back: DEL logs it
/// and completes, releasing the IP; no rebind is attempted.
#[test]
fn a_vf_without_driver_is_released_without_a_rebind() {
    let lab = Lab::default();
    let probe = lab.host.probe_on_bind(&lab.host.snapshot());
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 1);
    lab.add("c1", &pod, &conf).expect_ok();
    pod.delete().unwrap();
    std::fs::remove_file(lab.host.vf(1).dir.join("driver")).unwrap();
    let r = lab.del("c1", pod.netns(), &conf);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("no driver bound"), "{log}");
    assert!(probe.binds().is_empty(), "{:?}", probe.binds());
    assert_no_state(&lab);
    assert!(holders(&lab).is_empty());
}

/// udev racing the rename: while the VF's netdev comes back, another netdev of the same
/// VF (listed under `<VF>/net/`, as the kernel lists a netdev being replaced) holds the
/// original name for a moment. DEL waits for it to go and gives the VF its original
/// name, never the fallback.
#[test]
fn a_name_held_by_another_netdev_of_the_vf_is_waited_for() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let vf = lab.host.vf(0).clone();
    let orig = vf.netdev.clone().unwrap();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 0);
    lab.add("c1", &pod, &conf).expect_ok();
    pod.delete().unwrap();
    lab.host
        .return_destroyed_vf_netdev(0, "net1", &before)
        .unwrap();
    // The other netdev of the VF, holding the original name, listed by the kernel.
    lab.host.host_ip(&[
        "link", "add", &orig, "type", "veth", "peer", "name", "own-p",
    ]);
    let listed = vf.dir.join("net").join(&orig);
    std::fs::create_dir_all(&listed).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(400));
            lab.host.host_ip(&["link", "del", &orig]);
            std::fs::remove_dir_all(&listed).unwrap();
        });
        let r = lab.del("c1", pod.netns(), &conf);
        let log = r.stderr.clone();
        r.expect_ok();
        assert!(!log.contains("cannot rename"), "{log}");
    });
    lab.host.sync_netdevs().unwrap();
    assert_eq!(lab.host.snapshot(), before, "the VF has its original name");
    assert!(lab.journals().is_empty() && holders(&lab).is_empty());
}

/// The original name taken by a foreign link while the pod netns is gone: the VF comes
/// back under its pod name and DEL gives it the `ibvf%d` fallback (docs/operations.md "Failures and
/// what the plugin does"), leaving the squatter alone; a second DEL changes nothing.
#[test]
fn original_name_taken_with_the_pod_gone_falls_back() {
    let (lab, before, pod, conf) = Lab::attached(0);
    let orig = lab.host.vf(0).netdev.clone().unwrap();
    let squatter = squat(&lab, &orig);
    pod.delete().unwrap();
    lab.host
        .return_destroyed_vf_netdev(0, "net1", &before)
        .unwrap();
    let after = del_sparing(&lab, "c1", pod.netns(), &conf, &squatter);
    assert!(after.link("net1").is_none(), "not left under its pod name");
    assert!(
        after.links.iter().any(|l| l.name.starts_with("ibvf")),
        "{:?}",
        after.links
    );
    lab.del("c1", pod.netns(), &conf).expect_ok();
    assert_eq!(lab.host.snapshot(), after);
    assert_no_state(&lab);
    assert!(holders(&lab).is_empty());
}

/// A runtime retrying ADD while its first call still runs: the same (containerID,
/// ifname) ADDed on two VFs at once, 50 rounds, each followed by DEL with both
/// configurations. At most one ADD succeeds (the other answers code 4 or 11 and changes
/// nothing); after the DELs the host is as before every round, with no journal, no
/// holder link, no allocation, nothing left in the pod.
#[test]
fn racing_adds_of_one_attachment_end_with_one_or_none() {
    let lab = lab_of(2);
    let before = lab.host.snapshot();
    let confs = [lab.conf("1.0.0", 0), lab.conf("1.0.0", 1)];
    let mut wins = [0u32; 3];
    for round in 0..50 {
        let pod = lab.host.new_pod();
        let runs: Vec<Run> = std::thread::scope(|s| {
            let hs: Vec<_> = confs
                .iter()
                .map(|c| {
                    let (lab, pod) = (&lab, &pod);
                    s.spawn(move || {
                        Run::from(lab.host.run_plugin(
                            bin(),
                            "ADD",
                            "race",
                            pod.netns(),
                            "net1",
                            &c.to_string(),
                            &[],
                        ))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ok = runs.iter().filter(|r| r.ok).count();
        assert!(ok <= 1, "round {round}: both ADDs succeeded: {runs:?}");
        for r in runs.iter().filter(|r| !r.ok) {
            let code = r.json["code"].as_u64();
            assert!(
                matches!(code, Some(4) | Some(11)),
                "round {round}: unexpected failure {r:?}"
            );
        }
        wins[ok] += 1;
        if ok == 1 {
            assert_eq!(lab.journals(), ["race:net1"], "round {round}");
            assert_eq!(sorted(pod.links()), ["lo", "net1"], "round {round}");
        } else {
            assert!(lab.journals().is_empty(), "round {round}");
        }
        for c in &confs {
            lab.del("race", pod.netns(), c).expect_ok();
        }
        assert_eq!(pod.links(), ["lo"], "round {round}: a VF left in the pod");
        assert!(lab.journals().is_empty(), "round {round}");
        assert!(
            holders(&lab).is_empty(),
            "round {round}: {:?}",
            holders(&lab)
        );
        assert!(lab.allocations().is_empty(), "round {round}");
        assert_eq!(lab.host.snapshot(), before, "round {round}");
    }
    eprintln!(
        "rounds with one attachment: {}, with none: {}",
        wins[1], wins[0]
    );
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}
