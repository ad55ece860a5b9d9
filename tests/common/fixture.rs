//! The openings and endings the emulated-host suites share: a fresh lab with the host's
//! state before the test and a pod, and the checks that a test left the lab as it found
//! it (the host as before, no journal, no IPAM allocation).

use super::emuhost::{EmuOptions, HostSnapshot, LinkSnapshot, Pod};
use super::lab::Lab;
use serde_json::{json, Value};

/// A default lab (`Lab::default()`), its host's snapshot before anything happens, and a
/// new pod netns. Panics as `Lab::default` and `new_pod` do (the suites run as root).
pub fn fresh() -> (Lab, HostSnapshot, Pod) {
    fresh_on(Lab::default())
}

/// [`fresh`] on `lab`: the lab, its host's snapshot now, and a new pod netns.
pub fn fresh_on(lab: Lab) -> (Lab, HostSnapshot, Pod) {
    let before = lab.host.snapshot();
    let pod = lab.host.new_pod();
    (lab, before, pod)
}

/// A default lab with VF `vf` attached as `cid`/`net1` (cniVersion 1.0.0) in a new pod:
/// the lab, the host before the ADD, the pod and the config (`Lab::attached` under
/// another container ID). Panics when the ADD fails.
#[track_caller]
pub fn attached_as(cid: &str, vf: u32) -> (Lab, HostSnapshot, Pod, Value) {
    let lab = Lab::default();
    let before = lab.host.snapshot();
    let pod = lab.host.new_pod();
    let conf = lab.conf("1.0.0", vf);
    lab.add(cid, &pod, &conf).expect_ok();
    (lab, before, pod, conf)
}

/// `conf` with `runtimeConfig.infinibandGUID` = `guid` and `link_state` = `state`.
pub fn guid_and_link_state(mut conf: Value, guid: &str, state: &str) -> Value {
    conf["runtimeConfig"]["infinibandGUID"] = json!(guid);
    conf["link_state"] = json!(state);
    conf
}

/// A foreign link takes the name `name` in the host: a veth (peer `squat-p`). Returns
/// its snapshot. Panics when `ip link add` fails.
#[track_caller]
pub fn squat(lab: &Lab, name: &str) -> LinkSnapshot {
    lab.host.host_ip(&[
        "link", "add", name, "type", "veth", "peer", "name", "squat-p",
    ]);
    lab.host.snapshot().link(name).unwrap().clone()
}

/// DEL of `cid` in `netns` succeeds and leaves `squatter` (from [`squat`]) untouched;
/// returns the host after the DEL. Panics otherwise.
#[track_caller]
pub fn del_sparing(
    lab: &Lab,
    cid: &str,
    netns: &str,
    conf: &Value,
    squatter: &LinkSnapshot,
) -> HostSnapshot {
    lab.del(cid, netns, conf).expect_ok();
    let after = lab.host.snapshot();
    assert_eq!(
        after.link(&squatter.name),
        Some(squatter),
        "the squatter is untouched"
    );
    after
}

/// A lab of `vfs` netdev VFs, otherwise as `Lab::default()`.
pub fn lab_of(vfs: u32) -> Lab {
    Lab::new(EmuOptions {
        vfs,
        ..Default::default()
    })
}

/// A lab whose VF `vf` is bound to vfio-pci (no netdev), otherwise as `Lab::default()`.
pub fn vfio_lab(vf: u32) -> Lab {
    Lab::new(EmuOptions {
        vfio: vec![vf],
        ..Default::default()
    })
}

/// A lab whose VFs all have a zero GUID (`zero_guids`), otherwise as `Lab::default()`.
pub fn zero_guid_lab() -> Lab {
    Lab::new(EmuOptions {
        zero_guids: true,
        ..Default::default()
    })
}

/// The lab holds no state: no journal in its stateDir and no allocation in its IPAM
/// store. Panics otherwise.
#[track_caller]
pub fn assert_no_state(lab: &Lab) {
    assert!(lab.journals().is_empty() && lab.allocations().is_empty());
}

/// The host is exactly as `before` and the lab holds no state ([`assert_no_state`]).
/// Panics otherwise.
#[track_caller]
pub fn assert_pristine(lab: &Lab, before: &HostSnapshot) {
    assert_eq!(&lab.host.snapshot(), before);
    assert_no_state(lab);
}

/// DEL of `cid` in `netns` with `conf` succeeds, leaves the host as `before` and the lab
/// without state (`Lab::del_restores`, then [`assert_no_state`]). Panics otherwise.
#[track_caller]
pub fn del_leaves_nothing(lab: &Lab, cid: &str, netns: &str, conf: &Value, before: &HostSnapshot) {
    lab.del_restores(cid, netns, conf, before);
    assert_no_state(lab);
}

/// `text` contains every one of `needles`; panics naming the first missing one.
#[track_caller]
pub fn assert_has_all(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "{n:?} not in: {text}");
    }
}
