//! The MLNX_OFED per-VF files `<PF>/sriov/<N>/{node,port,policy}`.
//!
//! Kernel sources: these files exist only with the MLNX_OFED mlx5 driver (its
//! `mlx5_core` sriov_sysfs.c), not in the inbox kernel, which sets VF GUIDs and link
//! state by netlink on the PF (`IFLA_VF_IB_NODE_GUID`, `IFLA_VF_IB_PORT_GUID`,
//! `IFLA_VF_LINK_STATE` in include/uapi/linux/if_link.h). Text formats: a GUID as
//! `11:22:33:44:55:66:77:88`, a policy as `Follow`, `Up` or `Down`.

use super::{read_parsed, write_existing, Sysfs};
use crate::types::{Guid, LinkState, PciAddress, VfIndex};
use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuidKind {
    /// The VF node GUID, file `<PF>/sriov/<N>/node`.
    Node,
    /// The VF port GUID, file `<PF>/sriov/<N>/port`.
    Port,
}

impl GuidKind {
    /// The file name under `<PF>/sriov/<N>/`: `node` or `port`.
    pub fn file_name(self) -> &'static str {
        match self {
            GuidKind::Node => "node",
            GuidKind::Port => "port",
        }
    }
}

impl fmt::Display for GuidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_name())
    }
}

impl Sysfs {
    /// MLNX_OFED per-VF directory `<root>/bus/pci/devices/<pf>/sriov/<N>/` when it exists
    /// (only with the MLNX_OFED mlx5 driver; inbox kernels use netlink on the PF).
    pub fn ofed_dir(&self, pf: PciAddress, vf: VfIndex) -> Option<PathBuf> {
        let dir = self.pci_device_dir(pf).join("sriov").join(vf.to_string());
        dir.is_dir().then_some(dir)
    }

    /// The VF GUID from `<PF>/sriov/<N>/node` or `.../port` (MLNX_OFED), text
    /// `11:22:33:44:55:66:77:88`; `None` when the directory or file is absent.
    pub fn read_ofed_guid(
        &self,
        pf: PciAddress,
        vf: VfIndex,
        kind: GuidKind,
    ) -> io::Result<Option<Guid>> {
        // No `ofed_dir` check first: a missing directory reads as a missing file.
        let path = self.ofed_file(pf, vf, kind.file_name());
        read_parsed(path, "a GUID like 11:22:33:44:55:66:77:88", |t| {
            t.trim().parse().ok()
        })
    }

    /// Writes the VF GUID to `<PF>/sriov/<N>/node` or `.../port` (MLNX_OFED) as
    /// `11:22:33:44:55:66:77:88\n`. Fails with `NotFound` when the file does not exist
    /// (never creates it). mlx5 applies it only after a VF unbind/bind.
    pub fn write_ofed_guid(
        &self,
        pf: PciAddress,
        vf: VfIndex,
        kind: GuidKind,
        guid: Guid,
    ) -> io::Result<()> {
        let path = self.ofed_file(pf, vf, kind.file_name());
        write_existing(&path, &format!("{guid}\n"))
    }

    /// The VF link policy from `<PF>/sriov/<N>/policy` (MLNX_OFED): `Follow`, `Up` or
    /// `Down`; `None` when the directory or file is absent.
    pub fn read_ofed_policy(&self, pf: PciAddress, vf: VfIndex) -> io::Result<Option<LinkState>> {
        let path = self.ofed_file(pf, vf, "policy");
        read_parsed(path, "Follow, Up or Down", LinkState::from_ofed_policy)
    }

    /// Writes the VF link policy (`Follow`, `Up`, `Down` and a newline) to
    /// `<PF>/sriov/<N>/policy` (MLNX_OFED). Fails with `NotFound` when the file does not
    /// exist (never creates it).
    pub fn write_ofed_policy(
        &self,
        pf: PciAddress,
        vf: VfIndex,
        state: LinkState,
    ) -> io::Result<()> {
        let path = self.ofed_file(pf, vf, "policy");
        write_existing(&path, &format!("{}\n", state.to_ofed_policy()))
    }

    fn ofed_file(&self, pf: PciAddress, vf: VfIndex, name: &str) -> PathBuf {
        self.pci_device_dir(pf)
            .join("sriov")
            .join(vf.to_string())
            .join(name)
    }
}
