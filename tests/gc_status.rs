//! CNI 1.1 GC and STATUS (SPEC.md "GC: Clean up any stale resources", "STATUS: Check
//! plugin status") on the emulated host with the real binary. Needs root.
//!
//! GC: "The plugin should remove any resources ... not in the valid-attachments list";
//! "Plugins should GC as many resources as possible, and return errors"; the runtime
//! sends `cni.dev/valid-attachments` (libcni also `cni.dev/attachments`).
//! STATUS: "If the plugin can service ADD requests it should exit with 0"; otherwise
//! code 50 ("The plugin is not available").

mod common;

use common::fixture::{assert_no_state, fresh, guid_and_link_state};
use common::lab::{list, Lab};
use serde_json::{json, Value};

fn gc_conf(lab: &Lab, valid: Value) -> Value {
    let mut c = lab.conf("1.1.0", 0);
    c.as_object_mut().unwrap().remove("deviceID");
    c["cni.dev/valid-attachments"] = valid;
    c
}

fn gc(lab: &Lab, conf: &Value) -> common::lab::Run {
    lab.run("GC", "", "", conf, &[])
}

fn status(lab: &Lab, conf: &Value) -> common::lab::Run {
    lab.run("STATUS", "", "", conf, &[])
}

/// GC with an empty list: every attachment of the network goes, each VF is taken back
/// from its (live) pod and restored, every address released.
#[test]
fn gc_with_an_empty_list_releases_every_attachment() {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let mut pods = Vec::new();
    for vf in [0, 1, 2] {
        let pod = lab.host.new_pod();
        let conf = guid_and_link_state(
            lab.conf("1.1.0", vf),
            &format!("02:00:00:00:00:00:66:0{vf}"),
            "enable",
        );
        lab.add(&format!("g{vf}"), &pod, &conf).expect_ok();
        pods.push(pod);
    }
    assert_eq!(lab.journals().len(), 3);
    assert_eq!(lab.allocations().len(), 3);
    let r = gc(&lab, &gc_conf(&lab, json!([]))).expect_ok();
    assert_eq!(r, Value::Null, "GC prints nothing on success");
    assert!(lab.journals().is_empty(), "{:?}", lab.journals());
    assert!(lab.allocations().is_empty(), "{:?}", lab.allocations());
    assert_eq!(lab.host.snapshot(), before);
    for p in &pods {
        assert_eq!(p.links(), ["lo"]);
    }
    // Idempotent, and a DEL after GC has nothing left to do.
    gc(&lab, &gc_conf(&lab, json!([]))).expect_ok();
    lab.del_restores("g0", pods[0].netns(), &lab.conf("1.1.0", 0), &before);
}

/// Listed attachments (under either key) are untouched; the rest go.
#[test]
fn gc_keeps_exactly_the_valid_attachments() {
    for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
        let lab = Lab::default();
        let before = lab.host.snapshot();
        let (pa, pb) = (lab.host.new_pod(), lab.host.new_pod());
        let ca = lab.conf("1.1.0", 0);
        let cb = lab.conf("1.1.0", 1);
        let ra = lab.add("keep", &pa, &ca).expect_ok();
        lab.add("drop", &pb, &cb).expect_ok();
        let mut g = lab.conf("1.1.0", 0);
        g[key] = json!([{"containerID": "keep", "ifname": "net1"},
                        {"containerID": "drop", "ifname": "other-if"}]);
        gc(&lab, &g).expect_ok();
        assert_eq!(lab.journals(), ["keep:net1"], "{key}");
        assert_eq!(lab.allocations().len(), 1, "{key}");
        lab.check("keep", &pa, &ca, &ra).expect_ok();
        assert_eq!(pb.links(), ["lo"], "{key}: the dropped VF left its pod");
        lab.del("keep", pa.netns(), &ca).expect_ok();
        assert_eq!(lab.host.snapshot(), before, "{key}");
    }
}

/// GC of an attachment whose pod netns is gone: the kernel returned the VF netdev (named
/// as in the pod); GC renames it back, restores GUID and link state, releases the IP.
#[test]
fn gc_of_an_attachment_whose_netns_is_gone() {
    let (lab, before, pod) = fresh();
    let conf = guid_and_link_state(lab.conf("1.1.0", 2), "02:00:00:00:00:00:55:55", "disable");
    lab.add("gone", &pod, &conf).expect_ok();
    pod.delete().unwrap();
    lab.host
        .return_destroyed_vf_netdev(2, "net1", &before)
        .unwrap();
    gc(&lab, &gc_conf(&lab, json!([]))).expect_ok();
    assert_no_state(&lab);
    lab.host.sync_netdevs().unwrap();
    assert_eq!(lab.host.snapshot(), before);
}

/// GC touches only its own network, releases allocations that have no journal, and
/// refuses a request without the list or below cniVersion 1.1.0.
#[test]
fn gc_scope_and_input_errors() {
    let (lab, before, pod) = fresh();
    let mut other = lab.conf("1.1.0", 3);
    other["name"] = json!("othernet");
    lab.add("o1", &pod, &other).expect_ok();
    // A leftover allocation of this network without any journal (e.g. host-local's).
    let leak = lab.data.join("ibnet");
    std::fs::create_dir_all(&leak).unwrap();
    std::fs::write(leak.join("10.56.217.77"), "leaked\r\nnet1").unwrap();
    std::fs::write(leak.join("10.56.217.78"), "kept\r\nnet1").unwrap();

    let mut g = gc_conf(&lab, json!([{"containerID": "kept", "ifname": "net1"}]));
    gc(&lab, &g).expect_ok();
    assert_eq!(lab.allocations(), ["10.56.217.78"]);
    assert_eq!(
        lab.journals(),
        ["o1:net1"],
        "the other network is untouched"
    );
    assert_eq!(
        list(&lab.data.join("othernet")).len(),
        4,
        "its address kept (beside lock, last_reserved_ip.0 and boot_id)"
    );

    g.as_object_mut()
        .unwrap()
        .remove("cni.dev/valid-attachments");
    let e = gc(&lab, &g).expect_code(7);
    assert!(
        e["msg"].as_str().unwrap().contains("valid-attachments"),
        "{e}"
    );
    let mut old = gc_conf(&lab, json!([]));
    old["cniVersion"] = json!("1.0.0");
    gc(&lab, &old).expect_code(1);
    assert_eq!(
        lab.allocations(),
        ["10.56.217.78"],
        "nothing released by a refused GC"
    );

    lab.del_restores("o1", pod.netns(), &other, &before);
}

/// STATUS: ready on a fresh host; code 50 when the pool is exhausted and ready again once
/// an address is free; code 50 when the journal or IPAM directory cannot be written, or
/// when `rdmaIsolation: true` cannot be honoured (this kernel has no RDMA subsystem).
#[test]
fn status_reports_what_would_stop_an_add() {
    let lab = Lab::default();
    let mut conf = lab.conf("1.1.0", 0);
    conf["ipam"]["rangeStart"] = json!("10.56.217.10");
    conf["ipam"]["rangeEnd"] = json!("10.56.217.10");
    assert_eq!(status(&lab, &conf).expect_ok(), Value::Null);

    let pod = lab.host.new_pod();
    lab.add("s1", &pod, &conf).expect_ok();
    let e = status(&lab, &conf).expect_code(50);
    assert!(e["msg"].as_str().unwrap().contains("exhausted"), "{e}");
    // STATUS tells the truth: an ADD now fails on the pool.
    let pod2 = lab.host.new_pod();
    let snap = lab.host.snapshot();
    lab.add("s2", &pod2, &lab_conf_vf(&conf, &lab, 1))
        .expect_code(103);
    assert_eq!(lab.host.snapshot(), snap, "the failed ADD changed nothing");
    assert_eq!(pod2.links(), ["lo"]);
    assert_eq!(lab.journals(), ["s1:net1"]);
    lab.del("s1", pod.netns(), &conf).expect_ok();
    status(&lab, &conf).expect_ok();

    // A path under a regular file can never be a directory, even for root.
    let file = lab.host.root().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let mut bad_state = conf.clone();
    bad_state["stateDir"] = json!(file.join("state"));
    let e = status(&lab, &bad_state).expect_code(50);
    assert!(
        e["msg"].as_str().unwrap().contains("journal directory"),
        "{e}"
    );
    let mut bad_ipam = conf.clone();
    bad_ipam["ipam"]["dataDir"] = json!(file.join("ipam"));
    let e = status(&lab, &bad_ipam).expect_code(50);
    assert!(e["msg"].as_str().unwrap().contains("IPAM store"), "{e}");

    let mut rdma = conf.clone();
    rdma["rdmaIsolation"] = json!(true);
    let e = status(&lab, &rdma).expect_code(50);
    assert!(e["msg"].as_str().unwrap().contains("rdmaIsolation"), "{e}");
    let mut old = conf.clone();
    old["cniVersion"] = json!("1.0.0");
    status(&lab, &old).expect_code(1);
}

fn lab_conf_vf(conf: &Value, lab: &Lab, vf: u32) -> Value {
    let mut c = conf.clone();
    c["deviceID"] = json!(lab.host.vf(vf).addr);
    c
}
