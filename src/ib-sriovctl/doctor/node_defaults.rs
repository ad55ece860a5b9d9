//! Whether the node file's `defaults` ([`crate::policy::NodeDefaults`]) can work on this
//! node: each free VF is judged as ADD would judge it for a network that leaves the
//! defaulted keys out (what the SR-IOV network operator renders), with ADD's own checks
//! ([`crate::plugin::device_and_mode`], [`crate::plugin::rdma::plan_for`]), so doctor and
//! ADD cannot disagree. A default that makes such an ADD fail is an error finding
//! (`node-default-fails-add`): the admin put it there for every network of the node.

use super::paths::Paths;
use super::report::{Finding, Report, Severity};
use crate::policy::{NodeDefaults, NODE_FILE};

/// The finding's code.
pub const CODE: &str = "node-default-fails-add";

/// The network configuration ADD would get from the SR-IOV network operator for VF
/// `pci`, with none of the keys the node file may default: `cniVersion`, `name`, `type`
/// and `deviceID` only (what Multus passes, SPEC.md "Network configuration").
fn bare_conf(pci: &str) -> Result<crate::config::NetConf, crate::cni::CniError> {
    let v = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "node-defaults",
        "type": "ib-sriov",
        "deviceID": pci,
    });
    crate::config::NetConf::parse(v.to_string().as_bytes())
}

/// The `node-default-fails-add` findings for `defaults` (the node file's, read under the
/// host root of `paths`) on the VFs of `report` that no attachment holds (a held VF's
/// RDMA device may be in its pod, and no ADD reaches it before its DEL): for each VF,
/// [`bare_conf`] with `defaults` applied as ADD applies them
/// ([`NodeDefaults::apply`]), then ADD's device and mode check and ADD's RDMA plan
/// ([`crate::plugin::rdma::plan_for`], against the kernel's RDMA netlink, or in a
/// `failpoints` build the mode of the fail point `doctor.rdma_netns_mode`). A VF ADD
/// would refuse without the defaults too (no such device, a PF) is not the defaults'
/// doing and is left to the other findings. One error finding per distinct refusal,
/// naming its VFs, with ADD's code and message; none when `defaults` is empty.
pub fn findings(report: &Report, paths: &Paths, defaults: &NodeDefaults) -> Vec<Finding> {
    if defaults.is_empty() {
        return Vec::new();
    }
    let sysfs = crate::sysfs::Sysfs::new(&paths.sys);
    let rdma = super::rdma_provider();
    let shown = serde_json::to_string(defaults).unwrap_or_default();
    // (code, message) -> VFs, in VF order.
    let mut refused: Vec<((u32, String), Vec<String>)> = Vec::new();
    for vf in report.vfs.iter().filter(|v| v.holders.is_empty()) {
        let Ok(mut conf) = bare_conf(&vf.pci) else {
            continue;
        };
        let Some(addr) = conf.device_id else { continue };
        defaults.apply(&mut conf);
        let Ok((dev, _is_pf, vfio)) = crate::plugin::device_and_mode(&sysfs, &conf, addr) else {
            continue;
        };
        if let Err(e) = crate::plugin::rdma::plan_for(&conf, &*rdma, &sysfs, &dev, vfio) {
            let key = (
                e.code,
                e.msg.replace(&paths.sys.display().to_string(), "/sys"),
            );
            match refused.iter_mut().find(|(k, _)| *k == key) {
                Some((_, vfs)) => vfs.push(vf.pci.clone()),
                None => refused.push((key, vec![vf.pci.clone()])),
            }
        }
    }
    refused
        .into_iter()
        .map(|((code, msg), vfs)| Finding {
            severity: Severity::Error,
            code: CODE.into(),
            subject: NODE_FILE.into(),
            message: format!(
                "the node default {shown} makes ADD fail with code {code} on VF {} for every network that leaves {} out (as the SR-IOV network operator renders them): {msg}",
                vfs.join(", "),
                NodeDefaults::KEYS.join(", "),
            ),
            fix: format!(
                "make the node able to do what the default asks (the message says how), or remove the key from \"defaults\" in {NODE_FILE} on this node (docs/configuration.md \"Node defaults\"; the canary DaemonSet writes and removes the file, docs/upgrading.md)"
            ),
        })
        .collect()
}
