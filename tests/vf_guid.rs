//! VFs that come up without a GUID (docs/configuration.md "VFs without a GUID"), on the emulated host:
//! the SR-IOV operator's GUID file (`guidFile`), the derived GUID (`deriveGuid`), the
//! error that names both, and DEL leaving such a GUID on the VF. The real binary, as
//! root; the derived GUIDs are checked against the rule computed here, independently of
//! the plugin's code.

mod common;

use common::emuhost::{EmuOptions, PF_BDF, PF_PORT_GUID};
use common::fixture::{assert_no_state, assert_pristine, fresh_on};
use common::lab::Lab;
use serde_json::{json, Value};
use std::collections::HashSet;

const ZERO: &str = "00:00:00:00:00:00:00:00";

fn derived(pf_port_guid: &str, vf: u32) -> String {
    common::guid::derived_guid(pf_port_guid, vf)
}

fn zero_lab(vfs: u32, vfio: Vec<u32>) -> Lab {
    Lab::new(EmuOptions {
        vfs,
        vfio,
        zero_guids: true,
        ..Default::default()
    })
}

/// `lab.conf` with the GUID file pointed into the lab (absent unless written).
fn conf(lab: &Lab, vf: u32) -> Value {
    let mut c = lab.conf("1.0.0", vf);
    c["guidFile"] = json!(lab.host.root().join("etc-guids"));
    c
}

/// [`conf`] with `deriveGuid` set.
fn derive_conf(lab: &Lab, vf: u32) -> Value {
    let mut c = conf(lab, vf);
    c["deriveGuid"] = json!(true);
    c
}

fn write_guid_file(lab: &Lab, v: Value) {
    std::fs::write(lab.host.root().join("etc-guids"), v.to_string()).unwrap();
}

fn guids(lab: &Lab, vf: u32) -> (String, String) {
    let v = lab.host.vf(vf);
    (lab.read(v.ofed_node()), lab.read(v.ofed_port()))
}

fn zero_vf(lab: &Lab, vf: u32) {
    let v = lab.host.vf(vf);
    std::fs::write(v.ofed_node().unwrap(), format!("{ZERO}\n")).unwrap();
    std::fs::write(v.ofed_port().unwrap(), format!("{ZERO}\n")).unwrap();
}

#[test]
fn zero_guid_without_a_way_out_is_code_7_naming_both() {
    let (lab, before, pod) = fresh_on(zero_lab(2, vec![]));
    let e = lab.add("c1", &pod, &conf(&lab, 0)).expect_code(7);
    let msg = e["msg"].as_str().unwrap();
    for want in [
        "deriveGuid",
        "etc-guids",
        "guidFile",
        "infinibandGUID",
        ZERO,
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    // The default file path is named when guidFile is not set.
    let e = lab.add("c1", &pod, &lab.conf("1.0.0", 0)).expect_code(7);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("/etc/sriov-operator/infiniband/guids"),
        "{e}"
    );
    assert_pristine(&lab, &before);
}

#[test]
fn the_operator_file_by_pci_address_with_a_list_and_by_pf_guid_with_a_range() {
    let (lab, _, pod) = fresh_on(zero_lab(4, vec![]));
    // guids by pciAddress: VF 1 takes guids[1].
    write_guid_file(
        &lab,
        json!([
            {"pciAddress": "0000:99:00.0", "guids": ["02:00:00:00:00:00:99:00"]},
            {"pciAddress": PF_BDF, "guids": ["02:00:00:00:00:00:01:00", "02:00:00:00:00:00:01:01"]}
        ]),
    );
    let mut c = conf(&lab, 1);
    c["deriveGuid"] = json!(true); // the file comes first
    let log = lab.host.root().join("file.log");
    c["logFile"] = json!(log);
    lab.add("c1", &pod, &c).expect_ok();
    let g = "02:00:00:00:00:00:01:01";
    assert_eq!(guids(&lab, 1), (g.into(), g.into()));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("it gets GUID {g} from the operator's GUID file"))
            && text.contains("(entry 1)"),
        "{text}"
    );
    assert_eq!(
        lab.driver_file("mlx5_core", "unbind"),
        lab.host.vf(1).addr,
        "rebound"
    );
    lab.del("c1", pod.netns(), &c).expect_ok();
    assert_eq!(guids(&lab, 1), (g.into(), g.into()), "DEL keeps it");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(&format!("keeps GUID {g}")), "{text}");
    assert_no_state(&lab);

    // rangeStart/rangeEnd (the operator's code) by pfGuid, the PF's port GUID: VF 2
    // takes start + 2.
    write_guid_file(
        &lab,
        json!([{"pfGuid": PF_PORT_GUID.to_uppercase(), "rangeStart": "02:00:00:00:00:aa:00:10", "rangeEnd": "02:00:00:00:00:aa:00:13"}]),
    );
    lab.add("c2", &pod, &conf(&lab, 2)).expect_ok();
    assert_eq!(guids(&lab, 2).0, "02:00:00:00:00:aa:00:12");
    lab.del("c2", pod.netns(), &conf(&lab, 2)).expect_ok();
    assert_eq!(guids(&lab, 2).0, "02:00:00:00:00:aa:00:12");

    // guidsRange {start, end} (the operator's design document) by pfGuid, the PF
    // netdev's hardware address as the operator prints it.
    let pf_mac = lab
        .host
        .host_links()
        .into_iter()
        .find(|l| l.name == lab.host.pf().netdev)
        .unwrap()
        .address;
    write_guid_file(
        &lab,
        json!([{"pfGuid": pf_mac, "guidsRange": {"start": "02:00:00:00:00:bb:00:00", "end": "02:00:00:00:00:bb:00:03"}}]),
    );
    lab.add("c3", &pod, &conf(&lab, 3)).expect_ok();
    assert_eq!(guids(&lab, 3).1, "02:00:00:00:00:bb:00:03");
    lab.del("c3", pod.netns(), &conf(&lab, 3)).expect_ok();
}

#[test]
fn a_malformed_file_or_an_index_out_of_range_is_code_7_and_changes_nothing() {
    let (lab, before, pod) = fresh_on(zero_lab(4, vec![]));
    for (file, want) in [
        (
            json!({"pciAddress": PF_BDF}),
            "expected a JSON list".to_string(),
        ),
        (
            json!([
                {"pciAddress": PF_BDF, "guids": ["02:00:00:00:00:00:01:00"]},
                {"pciAddress": "0000:99:00.0", "guids": ["02:00:00:00:00:00:01:00"], "rangeStart": "02:00:00:00:00:00:01:00"}
            ]),
            "entry 1: either a guid list or a guid range should be provided, got both".into(),
        ),
        (
            json!([{"pciAddress": PF_BDF, "guids": ["02:00:00:00:00:00:01:00", "02:00:00:00:00:00:01:01"]}]),
            "entry 0: VF 3 of PF 0000:af:00.0 is past the end of the entry's guids list".into(),
        ),
        (
            json!([{"pciAddress": PF_BDF, "rangeStart": "02:00:00:00:00:aa:00:00", "rangeEnd": "02:00:00:00:00:aa:00:02"}]),
            "entry 0: VF 3 of PF 0000:af:00.0 is past the end of the entry's range".into(),
        ),
    ] {
        write_guid_file(&lab, file);
        let mut c = conf(&lab, 3);
        c["deriveGuid"] = json!(true); // a broken file is not skipped for the derivation
        let e = lab.add("c1", &pod, &c).expect_code(7);
        let msg = e["msg"].as_str().unwrap();
        assert!(
            msg.contains(&format!(
                "VF GUID file {}",
                lab.host.root().join("etc-guids").display()
            )) && msg.contains(&want),
            "{want:?} not in {msg}"
        );
        assert_pristine(&lab, &before);
    }
}

#[test]
fn a_derived_guid_is_stable_kept_by_del_and_needs_no_rebind_the_second_time() {
    let (lab, _, pod) = fresh_on(zero_lab(4, vec![]));
    let c = derive_conf(&lab, 1);
    let want = derived(PF_PORT_GUID, 1);
    assert!(!want.starts_with("02:"));

    lab.add("c1", &pod, &c).expect_ok();
    assert_eq!(guids(&lab, 1), (want.clone(), want.clone()));
    assert_eq!(lab.driver_file("mlx5_core", "bind"), lab.host.vf(1).addr);
    lab.del("c1", pod.netns(), &c).expect_ok();
    assert_eq!(guids(&lab, 1), (want.clone(), want.clone()), "DEL keeps it");
    assert_no_state(&lab);

    // Second round: the VF has a usable GUID now, so no set and no rebind.
    std::fs::write(lab.host.root().join("bus/pci/drivers/mlx5_core/unbind"), "").unwrap();
    lab.add("c2", &pod, &c).expect_ok();
    assert_eq!(lab.driver_file("mlx5_core", "unbind"), "", "no rebind");
    assert_eq!(guids(&lab, 1).0, want);
    lab.del("c2", pod.netns(), &c).expect_ok();

    // The VF re-created (a driver reload, a sriov_numvfs change): zero again, and the
    // same GUID comes back.
    zero_vf(&lab, 1);
    lab.add("c3", &pod, &c).expect_ok();
    assert_eq!(guids(&lab, 1), (want.clone(), want.clone()));
    lab.del("c3", pod.netns(), &c).expect_ok();
    assert_eq!(guids(&lab, 1).0, want);

    // Another PF (another port GUID): another GUID for the same index.
    let other_pf = "0c:42:a1:03:00:b1:c2:d4";
    std::fs::write(
        lab.host.pf().dir.join("infiniband/mlx5_0/ports/1/gids/0"),
        format!("{}\n", common::emuhost::gid_text(other_pf)),
    )
    .unwrap();
    zero_vf(&lab, 1);
    lab.add("c4", &pod, &c).expect_ok();
    let g2 = derived(other_pf, 1);
    assert_ne!(g2, want);
    assert_eq!(guids(&lab, 1).0, g2);
    lab.del("c4", pod.netns(), &c).expect_ok();
}

#[test]
fn every_vf_of_a_127_vf_pf_gets_its_own_derived_guid() {
    let (lab, _, pod) = fresh_on(zero_lab(127, vec![]));
    let mut seen = HashSet::new();
    for n in 0..127 {
        let c = derive_conf(&lab, n);
        let cid = format!("c{n}");
        lab.add(&cid, &pod, &c).expect_ok();
        lab.del(&cid, pod.netns(), &c).expect_ok();
        let (node, port) = guids(&lab, n);
        assert_eq!(node, port);
        assert_eq!(node, derived(PF_PORT_GUID, n), "VF {n}");
        assert!(node.starts_with("06:"), "{node}");
        assert!(node != ZERO && node != "ff:ff:ff:ff:ff:ff:ff:ff");
        assert!(seen.insert(node.clone()), "{node} twice");
    }
    assert_no_state(&lab);
}

#[test]
fn a_derived_guid_another_vf_already_has_is_refused() {
    let (lab, _, pod) = fresh_on(zero_lab(3, vec![]));
    let taken = derived(PF_PORT_GUID, 0);
    let v2 = lab.host.vf(2);
    std::fs::write(v2.ofed_node().unwrap(), format!("{taken}\n")).unwrap();
    std::fs::write(v2.ofed_port().unwrap(), format!("{taken}\n")).unwrap();
    let before = lab.host.snapshot();
    let c = derive_conf(&lab, 0);
    let e = lab.add("c1", &pod, &c).expect_code(7);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains(&taken) && msg.contains(&format!("already the GUID of VF {}", v2.addr)),
        "{msg}"
    );
    assert_eq!(lab.host.snapshot(), before);
}

#[test]
fn ib_kubernetes_without_a_guid_is_still_refused() {
    let (lab, before, pod) = fresh_on(zero_lab(2, vec![]));
    write_guid_file(
        &lab,
        json!([{"pciAddress": PF_BDF, "guids": ["02:00:00:00:00:00:01:00"]}]),
    );
    let mut c = derive_conf(&lab, 0);
    c["ibKubernetesEnabled"] = json!(true);
    c["args"] = json!({"cni": {"mellanox.infiniband.app": "configured"}});
    let e = lab.add("c1", &pod, &c).expect_code(11);
    assert!(
        e["msg"].as_str().unwrap().contains("no GUID was given"),
        "{e}"
    );
    assert_eq!(lab.host.snapshot(), before);
    assert_eq!(guids(&lab, 0), (ZERO.into(), ZERO.into()));
}

#[test]
fn a_vfio_vf_gets_the_derived_guid_through_the_pf_without_a_rebind() {
    let (lab, _, pod) = fresh_on(zero_lab(2, vec![1]));
    let mut c = derive_conf(&lab, 1);
    c.as_object_mut().unwrap().remove("ipam");
    lab.add("c1", &pod, &c).expect_ok();
    let want = derived(PF_PORT_GUID, 1);
    assert_eq!(guids(&lab, 1), (want.clone(), want.clone()));
    assert_eq!(
        lab.driver_file("vfio-pci", "unbind"),
        "",
        "vfio VFs are not rebound"
    );
    lab.del("c1", pod.netns(), &c).expect_ok();
    assert_eq!(guids(&lab, 1), (want.clone(), want));
    assert!(lab.journals().is_empty());
}
