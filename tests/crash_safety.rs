//! Crash safety on the emulated host with the real binary: the process SIGKILLed at every
//! named fail point of ADD and DEL, SIGTERM/SIGINT during DEL, and every lock bounded.
//!
//! After each kill, the next DEL must restore the host exactly (VF netdev back under its
//! original name, GUID and link state restored, no allocation, no journal), and a retried
//! ADD must work. Needs root and the `failpoints` feature (the README's test command).

#![cfg(feature = "failpoints")]

mod common;

use common::emuhost::HostSnapshot;
use common::failpoints::{ADD_POINTS, DEL_POINTS};
use common::fixture::guid_and_link_state;
use common::lab::Lab;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// A config that exercises every step: GUID (set via OFED + driver rebind), link state,
/// device-info file, netdev move, built-in IPAM.
fn full_conf(lab: &Lab, vf: u32) -> (Value, PathBuf) {
    let mut conf = guid_and_link_state(lab.conf("1.1.0", vf), "02:00:00:00:00:00:77:77", "enable");
    let devinfo = lab.host.root().join("devinfo").join(format!("vf{vf}.json"));
    conf["runtimeConfig"]["CNIDeviceInfoFile"] = json!(devinfo);
    (conf, devinfo)
}

/// A default lab, its host before anything, and [`full_conf`] for VF `vf`.
fn full_lab(vf: u32) -> (Lab, HostSnapshot, Value, PathBuf) {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let (conf, devinfo) = full_conf(&lab, vf);
    (lab, before, conf, devinfo)
}

fn raw(lab: &Lab, cmd: &str, cid: &str, netns: &str, conf: &Value, fp: &str) -> Output {
    lab.host.run_plugin(
        common::lab::bin(),
        cmd,
        cid,
        netns,
        "net1",
        &conf.to_string(),
        &[("IB_SRIOV_FAILPOINTS", fp)],
    )
}

#[track_caller]
fn assert_killed(out: &Output, what: &str) {
    assert_eq!(
        out.status.signal(),
        Some(9),
        "{what}: expected SIGKILL, got {:?}; stdout {} stderr {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "{what}: a killed plugin printed nothing"
    );
}

#[track_caller]
fn assert_clean(lab: &Lab, before: &common::emuhost::HostSnapshot, devinfo: &Path, what: &str) {
    assert_eq!(&lab.host.snapshot(), before, "{what}: host restored");
    assert!(
        lab.journals().is_empty(),
        "{what}: journals {:?}",
        lab.journals()
    );
    assert!(
        lab.allocations().is_empty(),
        "{what}: allocations {:?}",
        lab.allocations()
    );
    assert!(!devinfo.exists(), "{what}: device-info file removed");
}

/// SIGKILL at each ADD step; then DEL restores everything. Again SIGKILL at each step;
/// then a retried ADD succeeds, CHECK passes, and DEL restores everything.
#[test]
fn killed_at_each_add_step_then_del_or_a_retried_add_recovers() {
    let (lab, before, conf, devinfo) = full_lab(1);
    for point in ADD_POINTS {
        // Kill, then DEL.
        let pod = lab.host.new_pod();
        let out = raw(
            &lab,
            "ADD",
            "k1",
            pod.netns(),
            &conf,
            &format!("{point}=kill"),
        );
        assert_killed(&out, point);
        assert_eq!(
            lab.journals(),
            ["k1:net1"],
            "{point}: the journal survives the kill"
        );
        lab.del("k1", pod.netns(), &conf).expect_ok();
        assert_clean(&lab, &before, &devinfo, &format!("{point}, kill then DEL"));
        assert_eq!(pod.links(), ["lo"], "{point}: nothing left in the pod");

        // Kill, then retry ADD, CHECK, DEL.
        let out = raw(
            &lab,
            "ADD",
            "k2",
            pod.netns(),
            &conf,
            &format!("{point}=kill"),
        );
        assert_killed(&out, point);
        let res = lab.add("k2", &pod, &conf).expect_ok();
        assert_eq!(res["ips"].as_array().unwrap().len(), 1, "{point}: {res}");
        assert_eq!(lab.allocations().len(), 1, "{point}: one address, not two");
        lab.check("k2", &pod, &conf, &res).expect_ok();
        lab.del("k2", pod.netns(), &conf).expect_ok();
        assert_clean(&lab, &before, &devinfo, &format!("{point}, kill then ADD"));
    }
}

/// SIGKILL at each DEL step; the DEL retried by the runtime finishes the job. A second
/// round deletes the pod netns between the kill and the retry.
#[test]
fn killed_at_each_del_step_then_del_again_restores_the_host() {
    let (lab, before, conf, devinfo) = full_lab(2);
    for point in DEL_POINTS {
        for delete_netns in [false, true] {
            let what = format!("{point} (netns deleted: {delete_netns})");
            let pod = lab.host.new_pod();
            lab.add("d1", &pod, &conf).expect_ok();
            let out = raw(
                &lab,
                "DEL",
                "d1",
                pod.netns(),
                &conf,
                &format!("{point}=kill"),
            );
            assert_killed(&out, &what);
            if delete_netns {
                pod.delete().unwrap();
                // The kernel returns a physical netdev to the host when its netns dies
                // (named as in the pod, down); a veth is destroyed: emulate the kernel.
                lab.host
                    .return_destroyed_vf_netdev(2, "net1", &before)
                    .unwrap();
            }
            lab.del("d1", pod.netns(), &conf).expect_ok();
            // The emulated sysfs is not live: show the renamed netdev again.
            lab.host.sync_netdevs().unwrap();
            lab.del("d1", pod.netns(), &conf).expect_ok();
            assert_clean(&lab, &before, &devinfo, &what);
        }
    }
}

/// SIGTERM and SIGINT while DEL is between its steps (held by a `sleep` fail point):
/// DEL is not interrupted, exits 0 and restores the host.
#[test]
fn sigterm_and_sigint_during_del_do_not_interrupt_it() {
    let (lab, before, conf, devinfo) = full_lab(3);
    let pod = lab.host.new_pod();
    lab.add("s1", &pod, &conf).expect_ok();
    let child = lab.host.spawn_plugin(
        common::lab::bin(),
        "DEL",
        "s1",
        pod.netns(),
        "net1",
        &conf.to_string(),
        &[("IB_SRIOV_FAILPOINTS", "del.ipam=sleep800,del.move=sleep400")],
    );
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    std::thread::sleep(Duration::from_millis(400));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "DEL finished despite SIGTERM/SIGINT: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_clean(&lab, &before, &devinfo, "after SIGTERM");
}

/// Every lock is bounded by `lockTimeoutMs`: a held VF lock or IPAM lock gives code 11
/// (ADD, DEL, GC), never a hang, and ADD leaves the host as it was.
#[test]
fn held_locks_give_code_11_within_the_bound() {
    let (lab, before, mut conf, devinfo) = full_lab(0);
    conf["lockTimeoutMs"] = json!(300);
    let pod = lab.host.new_pod();

    let hold = |p: PathBuf| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let f = std::fs::File::create(&p).unwrap();
        f.lock().unwrap();
        f
    };
    // The IPAM store's lock: taken after the netdev moved, so ADD rolls back.
    let ipam_lock = hold(lab.data.join("ibnet").join("lock"));
    let t = std::time::Instant::now();
    let e = lab.add("l1", &pod, &conf).expect_code(11);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "bounded: {:?}",
        t.elapsed()
    );
    assert!(e["msg"].as_str().unwrap().contains("lock"), "{e}");
    assert_clean(&lab, &before, &devinfo, "ADD with the IPAM lock held");
    lab.add("l1", &pod, &conf).expect_code(11);
    drop(ipam_lock);
    assert_clean(
        &lab,
        &before,
        &devinfo,
        "second ADD with the IPAM lock held",
    );

    // The VF lock: ADD and DEL wait at most lockTimeoutMs.
    let res = lab.add("l1", &pod, &conf).expect_ok();
    let vf_lock = hold(
        lab.state
            .join("locks")
            .join(format!("{}.lock", lab.host.vf(0).addr)),
    );
    let pod2 = lab.host.new_pod();
    lab.add("l2", &pod2, &conf).expect_code(11);
    let t = std::time::Instant::now();
    lab.del("l1", pod.netns(), &conf).expect_code(11);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "bounded: {:?}",
        t.elapsed()
    );
    assert_eq!(lab.journals(), ["l1:net1"], "DEL kept the journal to retry");
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    lab.run("GC", "", "", &gc, &[]).expect_code(11);
    drop(vf_lock);
    lab.check("l1", &pod, &conf, &res).expect_code(104);
    lab.del("l1", pod.netns(), &conf).expect_ok();
    lab.del("l2", pod2.netns(), &conf).expect_ok();
    assert_clean(&lab, &before, &devinfo, "after the locks were released");
}
