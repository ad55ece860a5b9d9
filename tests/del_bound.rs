//! DEL's time bound (`DEL_BUDGET`, 60 s from the process start): every wait of a DEL
//! gets only what is left of it, a rebind turn must begin 20 s before it ends, and a
//! DEL that runs out answers code 11 with its journal kept; the retry then restores
//! the host. The bound is shown without waiting it out: the test builds' seam
//! `IB_SRIOV_TEST_STARTED_AGO_MS` (feature `failpoints`) moves the process start into
//! the past. Needs root (netns, veth).

mod common;

use common::lab::{Lab, Run};
use serde_json::{json, Value};
use std::fs::File;
use std::time::{Duration, Instant};

/// The per-VF lock held by another process until the returned child is killed (the
/// caller kills and waits for it).
#[allow(clippy::zombie_processes)]
fn hold_vf_lock(lab: &Lab, vf: &str) -> std::process::Child {
    let dir = lab.state.join("locks");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{vf}.lock"));
    File::create(&path).unwrap();
    // -o: the lock stays with flock(1) itself (not the sleep), so killing it frees it.
    let mut child = std::process::Command::new("flock")
        .arg("-o")
        .arg(&path)
        .args(["sleep", "120"])
        .spawn()
        .expect("flock(1) from util-linux");
    // Until flock(1) holds it: a non-blocking try from here fails.
    let t0 = Instant::now();
    loop {
        let st = std::process::Command::new("flock")
            .args(["-n", path.to_str().unwrap(), "true"])
            .status()
            .unwrap();
        if !st.success() {
            return child;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flock(1) never held {path:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `verb` of `cid` as if the process had started `ago_ms` ago (the test seam),
/// with VF `locked`'s lock held by another process for the run when given. Returns
/// the run and how long it took.
fn run_late(
    lab: &Lab,
    verb: &str,
    cid: &str,
    netns: &str,
    conf: &Value,
    ago_ms: &str,
    locked: Option<&str>,
) -> (Run, Duration) {
    let mut holder = locked.map(|vf| hold_vf_lock(lab, vf));
    let t0 = Instant::now();
    let r = lab.run(
        verb,
        cid,
        netns,
        conf,
        &[("IB_SRIOV_TEST_STARTED_AGO_MS", ago_ms)],
    );
    let took = t0.elapsed();
    if let Some(h) = holder.as_mut() {
        let _ = h.kill();
        let _ = h.wait();
    }
    (r, took)
}

/// Attachment `cid` of VF 0 with `conf` added, then its DEL run as if started `ago_ms`
/// ago (with VF 0's lock held by another process when `locked`): it answers code 11,
/// whose error and duration go to `check`, keeps its journal, and the retried DEL
/// restores the host as before the ADD.
fn late_del_then_retry(
    lab: &Lab,
    conf: &Value,
    cid: &str,
    ago_ms: &str,
    locked: bool,
    check: impl FnOnce(&Value, Duration),
) {
    let vf = lab.host.vf(0).addr.clone();
    let pod = lab.host.new_pod();
    let before = lab.host.snapshot();
    lab.add(cid, &pod, conf).expect_ok();
    let binds = lab.driver_file("mlx5_core", "bind");
    let locked = locked.then_some(vf.as_str());
    let (r, took) = run_late(lab, "DEL", cid, pod.netns(), conf, ago_ms, locked);
    check(&r.expect_code(11), took);
    if locked.is_none() {
        assert_eq!(
            lab.driver_file("mlx5_core", "bind"),
            binds,
            "no rebind begun"
        );
    }
    assert_eq!(lab.journals().len(), 1, "journal kept for the retry");
    lab.del(cid, pod.netns(), conf).expect_ok();
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), before);
}

/// A busy VF lock with `lockTimeoutMs` at its maximum (10 min): a DEL 58 s into its
/// time gives up within the 2 s left, with code 11 naming the bound, keeps the
/// journal, and the retry restores the host.
#[test]
fn a_busy_vf_lock_cannot_take_del_past_60_s() {
    let lab = Lab::default();
    let mut conf = lab.conf("1.0.0", 0);
    conf["lockTimeoutMs"] = json!(600_000);
    late_del_then_retry(&lab, &conf, "bound-1", "58000", true, |e, took| {
        assert!(
            took < Duration::from_secs(6),
            "DEL waited {took:?} of a 10 min lockTimeoutMs"
        );
        assert!(e["msg"].as_str().unwrap().contains("within 60 s"), "{e}");
    });
}

/// A DEL that must rebind (to restore the GUID) begins it only while 20 s of its 60 s
/// are left: 45 s in, it answers 11 before touching the driver; the retry restores.
#[test]
fn a_rebind_turn_must_begin_by_40_s() {
    let lab = Lab::default();
    let mut conf = lab.conf("1.0.0", 0);
    conf["runtimeConfig"] = json!({"infinibandGUID": "02:00:00:00:00:00:0b:01"});
    late_del_then_retry(&lab, &conf, "bound-2", "45000", false, |e, _| {
        assert!(e["msg"].as_str().unwrap().contains("within 40 s"), "{e}");
    });
}

/// DEL's bound does not apply to ADD: an ADD started "58 s ago" still waits its
/// lockTimeoutMs for a VF lock (ADD's own bound cuts its waits only at 150 s,
/// `add_bound.rs`).
#[test]
fn add_is_not_cut_by_del_bound() {
    let lab = Lab::default();
    let vf = lab.host.vf(0).addr.clone();
    let mut conf = lab.conf("1.0.0", 0);
    conf["lockTimeoutMs"] = json!(1500);
    let pod = lab.host.new_pod();
    let (r, took) = run_late(
        &lab,
        "ADD",
        "bound-3",
        pod.netns(),
        &conf,
        "58000",
        Some(&vf),
    );
    r.expect_code(11);
    assert!(took >= Duration::from_millis(1400), "ADD waited {took:?}");
    lab.del("bound-3", pod.netns(), &conf).expect_ok();
}
