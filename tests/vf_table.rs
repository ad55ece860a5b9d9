//! A PF whose VF table does not fit the kernel's single RTM_GETLINK reply (docs/configuration.md "VF
//! state on a PF of any size"), on the emulated host. The kernels that answer `EMSGSIZE`
//! cannot be booted here, so the answer is injected at the fail points
//! `netlink.vf_get` (the single request) and `netlink.vf_dump` (the link dump) of the
//! `failpoints` build; the real kernel's VF table read through both routes is the lab's
//! (`ib::ib_vf_table_by_dump_on_the_last_vf_of_a_big_pf`). Needs root.

mod common;

use common::emuhost::{HostSnapshot, Pod, PF_PORT_GUID};
use common::fixture::{assert_has_all, assert_no_state, fresh};
use common::lab::{Lab, Run};
use serde_json::{json, Value};

const EMSGSIZE_GET: (&str, &str) = ("IB_SRIOV_FAILPOINTS", "netlink.vf_get=errno90");
const EMSGSIZE_BOTH: (&str, &str) = (
    "IB_SRIOV_FAILPOINTS",
    "netlink.vf_get=errno90,netlink.vf_dump=errno90",
);

fn derived(vf: u32) -> String {
    common::guid::derived_guid(PF_PORT_GUID, vf)
}

fn conf(lab: &Lab, vf: u32) -> Value {
    let mut c = lab.conf("1.0.0", vf);
    c["link_state"] = json!("enable");
    c["runtimeConfig"] = json!({"infinibandGUID": "02:00:00:00:00:00:0a:01"});
    c
}

/// ADD of VF `vf` as `c1` in `pod` with the fail points `fp`, whose log says each of
/// `says` (panics otherwise): the config and ADD's run.
#[track_caller]
fn add_with(lab: &Lab, pod: &Pod, vf: u32, fp: (&str, &str), says: &[&str]) -> (Value, Run) {
    let c = conf(lab, vf);
    let add = lab.run("ADD", "c1", pod.netns(), &c, &[fp]);
    assert_has_all(&add.stderr, says);
    (c, add)
}

/// DEL of `c1` with the fail points `fp`: it succeeds and the host is as `before`.
fn del_with(lab: &Lab, pod: &Pod, c: &Value, fp: (&str, &str), before: &HostSnapshot) {
    lab.run("DEL", "c1", pod.netns(), c, &[fp]).expect_ok();
    assert_eq!(&lab.host.snapshot(), before);
}

#[test]
fn emsgsize_on_the_single_request_reads_the_link_dump() {
    let (lab, before, pod) = fresh();
    let says = ["does not fit its own buffer", "reading it from a link dump"];
    let (c, add) = add_with(&lab, &pod, 1, EMSGSIZE_GET, &says);
    assert!(
        !add.stderr.contains("cannot be read over netlink"),
        "the dump answered: {}",
        add.stderr
    );
    add.expect_ok();
    del_with(&lab, &pod, &c, EMSGSIZE_GET, &before);
}

#[test]
fn a_vf_table_no_route_can_read_is_said_and_the_ofed_files_still_serve() {
    let (lab, before, pod) = fresh();
    let says = ["cannot be read over netlink", "(single request)", "(dump)"];
    let (c, add) = add_with(&lab, &pod, 2, EMSGSIZE_BOTH, &says);
    add.expect_ok();
    // The doctor names it (the same fail points, in the doctor's process).
    let f = lab.doctor_findings(
        &["IB_SRIOV_FAILPOINTS=netlink.vf_get=errno90,netlink.vf_dump=errno90"],
        "vf-table-unreadable",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0]["subject"], lab.host.pf().addr.as_str());
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("Message too long"),
        "{}",
        f[0]
    );
    del_with(&lab, &pod, &c, EMSGSIZE_BOTH, &before);
}

/// What DEL does with originals ADD could not read (journaled as null): link state
/// `auto`, and the VF's derived GUID rather than the pod's. The journal is edited to
/// say so, as an ADD on a node where no route gives the VF table and no OFED file
/// exists would have written it; the doctor reports it first.
#[test]
fn unknown_originals_are_restored_by_the_stated_rule() {
    let lab = Lab::default();
    let pod = lab.host.new_pod();
    let vf = lab.host.vf(3);
    let c = conf(&lab, 3);
    lab.add("c1", &pod, &c).expect_ok();
    assert_eq!(lab.read(vf.ofed_node()), "02:00:00:00:00:00:0a:01");
    assert_eq!(lab.read(vf.ofed_policy()), "Up");
    let jp = lab.state.join("c1:net1");
    let mut jv: Value = serde_json::from_slice(&std::fs::read(&jp).unwrap()).unwrap();
    let mut seen = 0;
    for st in jv["steps"].as_array_mut().unwrap() {
        match st["step"].as_str().unwrap() {
            "link_state" => {
                st["orig"] = Value::Null;
                seen += 1;
            }
            "guid" => {
                st["orig_node"] = Value::Null;
                st["orig_port"] = Value::Null;
                seen += 1;
            }
            _ => {}
        }
    }
    assert_eq!(seen, 2, "{jv}");
    std::fs::write(&jp, jv.to_string()).unwrap();

    let unknown: Vec<String> = lab
        .doctor_findings(&[], "original-unknown")
        .iter()
        .map(|f| f["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(unknown.len(), 2, "{unknown:?}");
    assert!(unknown.iter().any(|m| m.contains("original GUID")));
    assert!(unknown.iter().any(|m| m.contains("original link state")));

    let del = lab.del("c1", pod.netns(), &c);
    assert_has_all(
        &del.stderr,
        &["restoring auto", "giving it its derived GUID"],
    );
    del.expect_ok();
    assert_eq!(lab.read(vf.ofed_policy()), "Follow", "auto");
    assert_eq!(lab.read(vf.ofed_node()), derived(3));
    assert_eq!(lab.read(vf.ofed_port()), derived(3));
    assert_no_state(&lab);
}
