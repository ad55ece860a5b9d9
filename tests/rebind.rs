//! Driver rebinds are serialized node-wide (issue 9 item 9): the kernel hands a re-probed
//! VF the lowest free RDMA device name and `uverbsN` minor, which the SR-IOV device plugin
//! has already mounted into the pod, so two overlapping rebinds could swap them. Per-VF
//! locks stay for everything else; an RDMA device name that changed across our rebind is
//! an error that rolls the ADD back, naming both names. Emulated host, real binary, fail
//! points to widen the rebind window (cargo feature `failpoints`). Needs root.

#![cfg(feature = "failpoints")]

mod common;

use common::emuhost::Pod;
use common::fixture::{fresh, lab_of};
use common::lab::{bin, Lab, Run};
use serde_json::json;

/// VF `vf`'s configuration (cniVersion 1.0.0) with the GUID `guid` to set.
fn guid_conf(lab: &Lab, vf: u32, guid: &str) -> serde_json::Value {
    let mut conf = lab.conf("1.0.0", vf);
    conf["runtimeConfig"]["infinibandGUID"] = json!(guid);
    conf
}

/// Starts ADD of `conf` as `cid`/`net1` in `pod`, held `ms` milliseconds by the fail
/// point just after the VF was bound again (`add.rebind.bound`).
fn spawn_add_held(
    lab: &Lab,
    cid: &str,
    pod: &Pod,
    conf: &serde_json::Value,
    ms: u64,
) -> std::process::Child {
    let fp = format!("add.rebind.bound=sleep{ms}");
    lab.host.spawn_plugin(
        bin(),
        "ADD",
        cid,
        pod.netns(),
        "net1",
        &conf.to_string(),
        &[("IB_SRIOV_FAILPOINTS", &fp)],
    )
}

/// Seconds since the epoch of a log line's timestamp (`2026-11-25T19:32:43.123Z`,
/// RFC 3339 UTC): days from the civil date (H. Hinnant's `days_from_civil`).
fn line_time(l: &str) -> f64 {
    let ts = l.split_whitespace().next().unwrap();
    let n = |r: std::ops::Range<usize>| ts[r].parse::<i64>().unwrap();
    assert!(ts.len() == 24 && ts.ends_with('Z'), "{l}");
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let y = if m <= 2 { y - 1 } else { y };
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = y % 400 * 365 + y % 400 / 4 - y % 400 / 100 + doy;
    let days = y / 400 * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    secs as f64 + n(20..23) as f64 / 1e3
}

/// `(begin, end)` of each "rebind window" in a plugin log, in seconds.
fn windows(log: &str) -> Vec<(f64, f64)> {
    let t = line_time;
    let mut out = Vec::new();
    let mut begin = None;
    for l in log.lines() {
        if l.contains("rebind window of VF") && l.ends_with("begins") {
            begin = Some(t(l));
        } else if l.contains("rebind window of VF") && l.ends_with("ends") {
            out.push((begin.take().expect("end without begin"), t(l)));
        }
    }
    out
}

/// Four ADDs with GUID changes started together (each rebind held open 300 ms by a fail
/// point): their rebind windows never overlap, every ADD succeeds, and every DEL (which
/// rebinds again to restore the GUID) leaves the host as before.
#[test]
fn parallel_rebinds_never_overlap() {
    let lab = lab_of(4);
    let before = lab.host.snapshot();
    let pod = lab.host.new_pod();
    let logs: Vec<_> = (0..4)
        .map(|k| lab.host.root().join(format!("rebind-{k}.log")))
        .collect();
    let confs: Vec<_> = (0..4u32)
        .map(|k| {
            let mut c = lab.conf("1.0.0", k);
            c["runtimeConfig"]["infinibandGUID"] =
                json!(format!("02:00:00:00:00:00:cc:0{}", k + 1));
            c["logFile"] = json!(logs[k as usize]);
            c
        })
        .collect();
    // `cmd` on the four VFs at once, each expected to succeed.
    let all_at_once = |cmd: &str, env: &[(&str, &str)]| {
        std::thread::scope(|s| {
            for k in 0..4u32 {
                let (lab, pod, conf) = (&lab, &pod, &confs[k as usize]);
                s.spawn(move || {
                    Run::from(lab.host.run_plugin(
                        bin(),
                        cmd,
                        "pod-x",
                        pod.netns(),
                        &format!("net{}", k + 1),
                        &conf.to_string(),
                        env,
                    ))
                    .expect_ok()
                });
            }
        })
    };
    all_at_once(
        "ADD",
        &[("IB_SRIOV_FAILPOINTS", "add.rebind.bound=sleep300")],
    );
    let mut all: Vec<(f64, f64)> = logs
        .iter()
        .flat_map(|p| windows(&std::fs::read_to_string(p).unwrap()))
        .collect();
    assert_eq!(all.len(), 4, "one rebind per ADD: {all:?}");
    all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    for w in all.windows(2) {
        assert!(w[0].1 <= w[1].0, "rebind windows overlap: {all:?}");
    }
    assert!(all.iter().all(|(b, e)| e - b >= 0.29), "{all:?}");
    all_at_once("DEL", &[]);
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(lab.journals().is_empty());
    assert_eq!(lab.host.snapshot(), before);
}

/// The VF's RDMA device comes back under another name after the rebind (here: renamed
/// in the emulated sysfs while the fail point holds the window open): ADD fails with
/// code 102 naming both names and rolls back (GUID restored, nothing in the pod).
#[test]
fn rdma_name_changed_by_the_rebind_is_an_error() {
    let (lab, before, pod) = fresh();
    let vf = lab.host.vf(1).clone();
    let conf = guid_conf(&lab, 1, "02:00:00:00:00:00:dd:01");
    let child = spawn_add_held(&lab, "rn", &pod, &conf, 800);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let ib = vf.dir.join("infiniband");
    let old = ib.join(vf.rdma.as_ref().unwrap());
    let new = ib.join("mlx5_9");
    std::fs::rename(&old, &new).unwrap();
    let r = Run::from(child.wait_with_output().unwrap());
    std::fs::rename(&new, &old).unwrap();
    let e = r.expect_code(102);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains(vf.rdma.as_ref().unwrap())
            && msg.contains("mlx5_9")
            && msg.contains("rolled back"),
        "{msg}"
    );
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(lab.host.snapshot(), before);
}

/// A process holding the Go ib-sriov-cni's node lock (a shell that opens the file, takes
/// `flock(2)` `LOCK_EX` on it with flock(1) and execs `sleep`, keeping the descriptor, as
/// a Go call in flight holds `/var/run/cni/ib-sriov/cni.lock`): held once this returns,
/// released when dropped (the one process is killed; the kernel drops its flock).
struct GoCall(std::process::Child);

impl GoCall {
    fn hold(path: &std::path::Path) -> GoCall {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let child = std::process::Command::new("sh")
            .args(["-c", "exec 9>\"$0\" && flock -x 9 && exec sleep 600"])
            .arg(path)
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while !GoCall::held(path) {
            assert!(t.elapsed().as_secs() < 10, "flock never took {path:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        GoCall(child)
    }

    /// True when another process holds the lock (a try by this one fails).
    fn held(path: &std::path::Path) -> bool {
        matches!(
            ib_sriov_cni::fsutil::lock_with_timeout(path, std::time::Duration::ZERO),
            Err(ib_sriov_cni::fsutil::LockError::Timeout(..))
        )
    }
}

impl Drop for GoCall {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The interop lock (issue 39 item 4): while a Go call holds the Go plugin's node lock,
/// an ADD that must rebind waits before its rebind window (no GUID write, no unbind),
/// and goes on when the lock is released; held past `lockTimeoutMs`, ADD answers code
/// 11 naming the lock and leaves the host as it was; a DEL that must rebind (the GUID
/// restore) keeps its journal with code 11 the same way, and its retry restores the
/// host. While our rebind turn is open, the lock is ours (a Go call would wait).
#[test]
fn a_go_call_holding_its_node_lock_holds_our_rebinds_off() {
    let (lab, before, pod) = fresh();
    let vf = lab.host.vf(1).clone();
    let go_lock = lab.host.go_lock_path();
    let node_guid = lab.read(vf.ofed_node());
    let conf = guid_conf(&lab, 1, "02:00:00:00:00:00:ee:01");
    let unbinds = || lab.driver_file("mlx5_core", "unbind");

    // Waits while held; goes on when released. The fail point holds the window open
    // so the test can see the lock is ours during it.
    let go = GoCall::hold(&go_lock);
    let child = spawn_add_held(&lab, "gl", &pod, &conf, 1500);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(unbinds(), "", "no rebind while the Go call holds the lock");
    assert_eq!(lab.read(vf.ofed_node()), node_guid, "no GUID write either");
    assert!(pod.links() == vec!["lo"]);
    let released = std::time::Instant::now();
    drop(go);
    let t = std::time::Instant::now();
    while unbinds().is_empty() {
        assert!(
            t.elapsed().as_secs() < 10,
            "ADD never rebound after the release"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        GoCall::held(&go_lock),
        "our rebind window holds the Go lock"
    );
    Run::from(child.wait_with_output().unwrap()).expect_ok();
    assert!(released.elapsed().as_secs() < 10);
    assert_eq!(unbinds(), vf.addr);
    assert!(!GoCall::held(&go_lock), "released when the window ends");
    assert_eq!(pod.links(), vec!["lo", "net1"]);

    // DEL must rebind to restore the GUID: held past its lockTimeoutMs, code 11 with
    // the journal kept, nothing undone that needs the rebind; the retry restores.
    let mut quick = conf.clone();
    quick["lockTimeoutMs"] = json!(700);
    std::fs::write(lab.host.root().join("bus/pci/drivers/mlx5_core/unbind"), "").unwrap();
    let go = GoCall::hold(&go_lock);
    let t = std::time::Instant::now();
    let e = lab.del("gl", pod.netns(), &quick).expect_code(11);
    let took = t.elapsed();
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("Go ib-sriov-cni's node lock") && msg.contains(&*go_lock.to_string_lossy()),
        "{msg}"
    );
    assert!(took.as_millis() >= 700 && took.as_secs() < 10, "{took:?}");
    assert_eq!(unbinds(), "");
    assert_eq!(lab.journals().len(), 1, "the journal is kept for the retry");
    drop(go);
    lab.del("gl", pod.netns(), &quick).expect_ok();
    assert!(lab.journals().is_empty());
    assert_eq!(unbinds(), vf.addr);

    // ADD with the lock held past lockTimeoutMs: code 11 naming it, rolled back.
    std::fs::write(lab.host.root().join("bus/pci/drivers/mlx5_core/unbind"), "").unwrap();
    let _go = GoCall::hold(&go_lock);
    let t = std::time::Instant::now();
    let e = lab.add("gl2", &pod, &quick).expect_code(11);
    let took = t.elapsed();
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("Go ib-sriov-cni's node lock") && msg.contains("still held"),
        "{msg}"
    );
    assert!(took.as_millis() >= 700 && took.as_secs() < 10, "{took:?}");
    assert_eq!(unbinds(), "");
    assert_eq!(pod.links(), vec!["lo"]);
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert_eq!(lab.host.snapshot(), before);
}
