//! The openings and endings the emulated-host suites share: a fresh lab with the host's
//! state before the test and a pod, and the checks that a test left the lab as it found
//! it (the host as before, no journal, no IPAM allocation).

use super::emuhost::{EmuOptions, HostSnapshot, Pod};
use super::lab::Lab;
use serde_json::Value;

/// A default lab (`Lab::default()`), its host's snapshot before anything happens, and a
/// new pod netns. Panics as `Lab::default` and `new_pod` do (the suites run as root).
pub fn fresh() -> (Lab, HostSnapshot, Pod) {
    fresh_with(EmuOptions::default())
}

/// [`fresh`] with the lab built from `opts`.
pub fn fresh_with(opts: EmuOptions) -> (Lab, HostSnapshot, Pod) {
    let lab = Lab::new(opts);
    let before = lab.host.snapshot();
    let pod = lab.host.new_pod();
    (lab, before, pod)
}

/// A lab of `vfs` netdev VFs, otherwise as `Lab::default()`.
pub fn lab_of(vfs: u32) -> Lab {
    Lab::new(EmuOptions {
        vfs,
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
