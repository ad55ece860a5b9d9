//! State that lives exactly as long as what it describes: journals stamped with the boot
//! they were written in are dropped by DEL and GC when they come from another boot
//! (their IPAM released, the VF untouched: the reboot re-created it); the built-in
//! IPAM frees the allocations of earlier boots at the first allocation of a new boot;
//! and an ADD+DEL cycle makes no fsync at all. The "other boot" is made with the test
//! builds' boot-ID seam (`IB_SRIOV_TEST_BOOT_ID`, cargo feature `failpoints`), which the
//! release binary does not have. Emulated host, real binary. Needs root and strace.

#![cfg(feature = "failpoints")]

mod common;

use common::fixture::{assert_pristine, attached_as, fresh, guid_and_link_state};
use common::lab::{bin, list, Lab};
use common::script::install_script;
use serde_json::json;

/// A boot ID that is not the running kernel's.
const OTHER_BOOT: &str = "0badb007-0000-4000-8000-000000000001";

fn other_boot() -> [(&'static str, &'static str); 1] {
    [("IB_SRIOV_TEST_BOOT_ID", OTHER_BOOT)]
}

fn holders(lab: &Lab) -> Vec<String> {
    list(&lab.state.join("vfs"))
}

/// The journal's recorded boot.
fn journal_boot(lab: &Lab, name: &str) -> Option<String> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(lab.state.join(name)).unwrap()).unwrap();
    v["bootId"].as_str().map(str::to_string)
}

/// DEL in a boot other than the journal's: the IP is released and the journal and its
/// holder link removed, and nothing is done to the VF (here it is still in the pod,
/// which a real reboot would have ended).
#[test]
fn del_drops_a_journal_of_another_boot_without_touching_the_vf() {
    let (lab, _, pod, conf) = attached_as("b1", 0);
    let running = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(
        journal_boot(&lab, "b1:net1").as_deref(),
        Some(running.trim())
    );
    assert_eq!(lab.allocations().len(), 1);
    let r = lab.run("DEL", "b1", pod.netns(), &conf, &other_boot());
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(log.contains("written in another boot"), "{log}");
    assert!(lab.journals().is_empty() && holders(&lab).is_empty());
    assert!(lab.allocations().is_empty(), "IP released");
    let mut links = pod.links();
    links.sort();
    assert_eq!(links, ["lo", "net1"], "the VF was not touched");
}

/// GC in another boot drops every stale journal of the network the same way, and frees
/// their allocations, touching no VF.
#[test]
fn gc_drops_journals_of_another_boot() {
    let lab = Lab::default();
    let (p0, p1) = (lab.host.new_pod(), lab.host.new_pod());
    lab.add("g0", &p0, &lab.conf("1.1.0", 0)).expect_ok();
    lab.add("g1", &p1, &lab.conf("1.1.0", 1)).expect_ok();
    let mut gc = lab.conf("1.1.0", 0);
    gc.as_object_mut().unwrap().remove("deviceID");
    gc["cni.dev/valid-attachments"] = json!([]);
    let r = lab.run("GC", "", "", &gc, &other_boot());
    let log = r.stderr.clone();
    r.expect_ok();
    assert_eq!(log.matches("written in another boot").count(), 2, "{log}");
    assert!(lab.journals().is_empty() && holders(&lab).is_empty());
    assert!(lab.allocations().is_empty());
    assert!(p0.links().contains(&"net1".to_string()), "VF 0 untouched");
    assert!(p1.links().contains(&"net1".to_string()), "VF 1 untouched");
}

/// The built-in IPAM store knows the boot of its allocations (`boot_id` beside the
/// records): the first allocation of another boot frees the records written before
/// that boot began, keeps those written since (host-local sharing the store), and
/// marks the store with the new boot; the next allocation in the same boot frees
/// nothing.
#[test]
fn the_first_allocation_of_a_new_boot_frees_the_earlier_boots_allocations() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", 0);
    // An allocation in "another boot" marks the store with it.
    lab.run("ADD", "old1", pod.netns(), &conf, &other_boot())
        .expect_ok();
    let store = lab.data.join("ibnet");
    assert_eq!(
        std::fs::read_to_string(store.join("boot_id"))
            .unwrap()
            .trim(),
        OTHER_BOOT
    );
    // Its record, and a leftover of a pod that died with that boot, dated before the
    // running boot began; and one written by host-local in this boot.
    lab.run("DEL", "old1", pod.netns(), &conf, &other_boot())
        .expect_ok();
    common::lab::old_ipam_records(
        &store,
        &[("10.56.217.40", "dead1"), ("10.56.217.41", "dead2")],
    );
    std::fs::write(store.join("10.56.217.42"), "alive\r\nnet1").unwrap();
    // The first allocation of the running boot.
    let r = lab.run("ADD", "new1", pod.netns(), &conf, &[]);
    let log = r.stderr.clone();
    r.expect_ok();
    assert!(
        log.contains("freed 2 allocation(s) of earlier boots"),
        "{log}"
    );
    let mut left = lab.allocations();
    left.sort();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&"10.56.217.42".to_string()), "{left:?}");
    common::lab::assert_running_boot(&store);
    lab.del("new1", pod.netns(), &conf).expect_ok();
    let pod2 = lab.host.new_pod();
    let r = lab.add("new2", &pod2, &conf);
    assert!(!r.stderr.contains("earlier boots"), "{}", r.stderr);
    r.expect_ok();
    lab.del("new2", pod2.netns(), &conf).expect_ok();
    assert_eq!(lab.allocations(), ["10.56.217.42"]);
}

/// An ADD+DEL cycle (built-in IPAM, GUID and link state set) calls no fsync,
/// fdatasync, sync, syncfs, sync_file_range or msync: traced with `strace -f`.
#[test]
fn add_and_del_make_no_fsync() {
    let (lab, before, pod) = fresh();
    let conf = guid_and_link_state(lab.conf("1.0.0", 2), "02:00:00:00:00:00:77:01", "enable");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let wrapper = install_script(dir.path(), "ib-sriov", &format!(
            "#!/bin/sh\nexec strace -f -qq -o '{}' -e signal=none -e trace=fsync,fdatasync,sync,syncfs,sync_file_range,msync '{}' \"$@\"\n",
            trace.display(),
            bin().display()
        ));
    let mut calls = String::new();
    for cmd in ["ADD", "DEL"] {
        let out = lab.host.run_plugin(
            &wrapper,
            cmd,
            "nf",
            pod.netns(),
            "net1",
            &conf.to_string(),
            &[],
        );
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t = std::fs::read_to_string(&trace).expect("strace wrote its trace");
        calls.push_str(&t);
    }
    assert_eq!(calls.trim(), "", "sync calls in ADD+DEL:\n{calls}");
    lab.host.sync_netdevs().unwrap();
    assert_pristine(&lab, &before);
}
