//! Partition readiness (`pkeyWaitMs`, docs/configuration.md "Partition readiness"): with
//! `pkey` and `pkeyWaitMs` set, ADD waits, bounded, until the pkey (all 16 bits: full or
//! limited membership as configured) is in the VF port's pkey table
//! (`<VF>/infiniband/<dev>/ports/1/pkeys/<i>`), after setting the GUID and before moving
//! anything into the pod. Past the bound: code 11 naming the pkey and the GUID, the host
//! as before, and the retry works. Without `pkeyWaitMs`: no wait, the warning. Emulated
//! host (its pkey table is regular files a test thread writes, as the subnet manager
//! would through the VF's firmware), real binary, as root.

mod common;

use common::fixture::{
    assert_no_state, assert_pristine, del_leaves_nothing, fresh, fresh_on, vfio_lab,
};
use common::lab::Lab;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const GUID: &str = "02:00:00:00:00:00:41:01";

/// `<VF n>/infiniband/<dev>/ports/1/pkeys/<i>` of the emulated host.
fn pkey_entry(lab: &Lab, vf: u32, i: u32) -> PathBuf {
    let v = lab.host.vf(vf);
    v.dir
        .join("infiniband")
        .join(v.rdma.as_ref().unwrap())
        .join(format!("ports/1/pkeys/{i}"))
}

/// VF `vf`'s configuration with a GUID to set, `pkey` and, when given, `pkeyWaitMs`.
fn conf(lab: &Lab, vf: u32, pkey: &str, wait_ms: Option<u64>) -> Value {
    let mut c = lab.conf("1.0.0", vf);
    c["runtimeConfig"] = json!({"infinibandGUID": GUID});
    c["pkey"] = json!(pkey);
    if let Some(ms) = wait_ms {
        c["pkeyWaitMs"] = json!(ms);
    }
    c
}

/// The "subnet manager": writes `value` into pkey table entry 1 of VF `vf` after `delay`.
fn sm_writes_later(
    lab: &Lab,
    vf: u32,
    value: &str,
    delay: Duration,
) -> std::thread::JoinHandle<()> {
    let p = pkey_entry(lab, vf, 1);
    let v = format!("{value}\n");
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        std::fs::write(p, v).unwrap();
    })
}

#[test]
fn the_pkey_arrives_in_time() {
    let (lab, before, pod) = fresh();
    let mut c = conf(&lab, 0, "0x8005", Some(5_000));
    let log = lab.host.root().join("add.log");
    c["logFile"] = json!(log);
    let t0 = Instant::now();
    let sm = sm_writes_later(&lab, 0, "0x8005", Duration::from_millis(400));
    lab.add("c1", &pod, &c).expect_ok();
    let took = t0.elapsed();
    sm.join().unwrap();
    assert!(took >= Duration::from_millis(400), "ADD waited: {took:?}");
    assert!(took < Duration::from_millis(5_000), "{took:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("pkey 0x8005 is in the pkey table of VF"),
        "{text}"
    );
    assert!(!text.contains("not (yet) in the pkey table"), "{text}");
    assert_eq!(lab.read(lab.host.vf(0).ofed_node()), GUID);
    del_leaves_nothing(&lab, "c1", pod.netns(), &c, &before);
}

#[test]
fn the_pkey_arrives_late_code_11_host_unchanged_then_the_retry_works() {
    let (lab, before, pod) = fresh();
    let c = conf(&lab, 1, "0x8007", Some(300));
    let t0 = Instant::now();
    let e = lab.add("c1", &pod, &c).expect_code(11);
    assert!(t0.elapsed() >= Duration::from_millis(300));
    let msg = e["msg"].as_str().unwrap();
    for want in [
        "pkey 0x8007",
        GUID,
        "pkeyWaitMs 300",
        "0xffff 0x8002",
        "full member",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    // Rolled back: the GUID and everything else as before.
    assert_eq!(lab.host.snapshot(), before);
    assert_eq!(pod.links(), vec!["lo"]);
    assert_no_state(&lab);

    // The subnet manager catches up; the runtime's retry succeeds at once.
    std::fs::write(pkey_entry(&lab, 1, 1), "0x8007\n").unwrap();
    lab.add("c1", &pod, &c).expect_ok();
    assert_eq!(lab.read(lab.host.vf(1).ofed_node()), GUID);
    assert_eq!(pod.links().len(), 2);
    lab.del_restores("c1", pod.netns(), &c, &before);
}

/// Membership is part of the key: a limited-member entry (0x0005) does not satisfy a
/// full-membership pkey (0x8005), which never arrives; the limited pkey is there at
/// once.
#[test]
fn the_pkey_never_arrives_and_membership_counts() {
    let (lab, before, pod) = fresh();
    std::fs::write(pkey_entry(&lab, 2, 1), "0x0005\n").unwrap();
    let before_limited = lab.host.snapshot();
    let e = lab
        .add("c1", &pod, &conf(&lab, 2, "0x8005", Some(200)))
        .expect_code(11);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("0xffff 0x0005") && msg.contains("partition 0x0005 as a full member"),
        "{msg}"
    );
    assert_eq!(lab.host.snapshot(), before_limited);
    assert_no_state(&lab);

    let t0 = Instant::now();
    let c = conf(&lab, 2, "0x0005", Some(10_000));
    lab.add("c2", &pod, &c).expect_ok();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "no wait when present"
    );
    lab.del("c2", pod.netns(), &c).expect_ok();
    std::fs::write(pkey_entry(&lab, 2, 1), "0x8003\n").unwrap();
    assert_eq!(lab.host.snapshot(), before);
}

/// Without pkeyWaitMs: no wait, today's warning.
#[test]
fn without_pkey_wait_ms_a_warning_and_no_wait() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let mut c = conf(&lab, 0, "0x8009", None);
    let log = lab.host.root().join("add.log");
    c["logFile"] = json!(log);
    lab.add("c1", &pod, &c).expect_ok();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("pkey 0x8009 is not (yet) in the pkey table of VF"),
        "{text}"
    );
    lab.del("c1", pod.netns(), &c).expect_ok();
}

/// pkeyWaitMs is validated before any change: a range, an integer, `pkey` required, and
/// a device with a pkey table (not vfio).
#[test]
fn pkey_wait_ms_is_validated_before_any_change() {
    let (lab, before, pod) = fresh_on(vfio_lab(3));
    for (v, want) in [
        (json!(0), "pkeyWaitMs must be an integer from 1 to 60000"),
        (
            json!(60_001),
            "pkeyWaitMs must be an integer from 1 to 60000",
        ),
        (
            json!("500"),
            "pkeyWaitMs must be an integer from 1 to 60000",
        ),
        (json!(-1), "pkeyWaitMs must be an integer from 1 to 60000"),
    ] {
        let mut c = conf(&lab, 0, "0x8001", None);
        c["pkeyWaitMs"] = v.clone();
        let e = lab.add("c1", &pod, &c).expect_code(7);
        assert!(e["msg"].as_str().unwrap().contains(want), "{v}: {e}");
    }
    let mut c = conf(&lab, 0, "0x8001", Some(500));
    c.as_object_mut().unwrap().remove("pkey");
    let e = lab.add("c1", &pod, &c).expect_code(7);
    assert!(e["msg"].as_str().unwrap().contains("needs pkey"), "{e}");
    let e = lab
        .add("c1", &pod, &conf(&lab, 3, "0x8001", Some(500)))
        .expect_code(7);
    assert!(e["msg"].as_str().unwrap().contains("vfio mode"), "{e}");
    assert_pristine(&lab, &before);
}
