//! A GUID for a VF that has none: the SR-IOV network operator's static GUID file, else a
//! GUID derived from the PF's port GUID and the VF index (docs/configuration.md "VFs without a GUID").
//!
//! ADD takes a GUID from here only when all of these hold: no GUID was supplied
//! (`runtimeConfig.infinibandGUID`, `args.cni.guid`), `ibKubernetesEnabled` is false, and
//! the VF's current GUID is all-zero, all-ones or unreadable. In that order:
//! 1. [`file::GuidFile`]: the operator's per-node file (`guidFile`, default
//!    [`DEFAULT_GUID_FILE`]), when it exists;
//! 2. [`derive::derived_guid`]: only when the network sets `deriveGuid: true`, and only
//!    after [`node_vf_guids`] shows no other VF on the node has it.
//!
//! Either GUID is a property of the VF, not of the attachment: DEL leaves it on the VF
//! (restoring all-zero would cost a rebind and break the VF again), and the journal's
//! `Guid` step says so with its [`GuidOrigin`].

pub mod derive;
pub mod file;
pub mod read;

use crate::netlink::Netlink;
use crate::sysfs::Sysfs;
use crate::types::{Guid, PciAddress, VfIndex};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use derive::{derived_guid, pf_port_guid, PortGuidSource, DERIVED_GUID_BYTE0};
pub use file::{GuidFile, GuidFileError};
pub use read::VfGuids;

/// Where the SR-IOV network operator reads its static VF GUID file
/// (k8snetworkplumbingwg/sriov-network-operator `consts.InfinibandGUIDConfigFilePath`,
/// doc/design/ib-vf-configuration.md "Config file"); the network config key `guidFile`
/// overrides it.
pub const DEFAULT_GUID_FILE: &str = "/etc/sriov-operator/infiniband/guids";

/// Where a GUID ADD gave a VF that had none came from; journaled in the `Guid` step, so
/// DEL knows to leave it on the VF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "camelCase")]
pub enum GuidOrigin {
    /// The operator's GUID file: its path and the index of the entry (from 0) that
    /// covers the VF's PF.
    #[serde(rename_all = "camelCase")]
    OperatorFile {
        /// The file, as configured.
        path: PathBuf,
        /// Index of the entry in the file's JSON list.
        entry: usize,
    },
    /// [`derived_guid`] of the PF's port GUID and the VF index.
    #[serde(rename_all = "camelCase")]
    Derived {
        /// The PF port GUID the derivation used.
        pf_port_guid: Guid,
    },
}

impl std::fmt::Display for GuidOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuidOrigin::OperatorFile { path, entry } => {
                write!(
                    f,
                    "the operator's GUID file {} (entry {entry})",
                    path.display()
                )
            }
            GuidOrigin::Derived { pf_port_guid } => {
                write!(f, "derived from PF port GUID {pf_port_guid}")
            }
        }
    }
}

/// What identifies a PF to the operator's file and to the derivation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PfIdentity {
    /// The PF's PCI address (the file's `pciAddress`).
    pub pci: Option<PciAddress>,
    /// Hardware addresses of the PF's netdevs (20 bytes for IPoIB), which the operator
    /// compares with `pfGuid` as text (`netlink.Link.Attrs().HardwareAddr.String()`).
    pub hwaddrs: Vec<Vec<u8>>,
    /// The PF's port GUID and where it was read ([`pf_port_guid`]).
    pub port_guid: Option<(Guid, PortGuidSource)>,
}

impl PfIdentity {
    /// The identity of PF `pf`: its netdevs' hardware addresses (rtnetlink in this netns,
    /// when `nl` is given) and its port GUID ([`pf_port_guid`]). Whatever cannot be read
    /// is left out.
    pub fn read(sysfs: &Sysfs, nl: Option<&Netlink>, pf: PciAddress) -> PfIdentity {
        let mut hwaddrs = Vec::new();
        let mut ib_link = None;
        for n in sysfs.netdevs(pf).unwrap_or_default() {
            if let Some(Ok(Some(l))) = nl.map(|nl| nl.link_by_name(&n)) {
                if l.address.len() == 20 && ib_link.is_none() {
                    ib_link = Some(l.address.clone());
                }
                hwaddrs.push(l.address);
            }
        }
        PfIdentity {
            pci: Some(pf),
            port_guid: pf_port_guid(sysfs, pf, ib_link.as_deref()),
            hwaddrs,
        }
    }
}

/// A GUID for a VF without one, and its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// The GUID (node and port).
    pub guid: Guid,
    /// Where it came from.
    pub origin: GuidOrigin,
}

/// The GUID VF `vf` of the PF `pf` would get, in the order of the module docs: the
/// operator's file at `file` when it exists and has an entry for the PF, else (with
/// `derive`) the derived GUID. `Ok(None)` when neither applies.
///
/// Errors: a malformed or unreadable file, or an index past the end of the PF's list
/// or range ([`GuidFileError`], code 7 at ADD); `derive` set but the PF's port GUID
/// unreadable.
pub fn choose(
    file: &std::path::Path,
    derive: bool,
    pf: &PfIdentity,
    vf: VfIndex,
) -> Result<Option<Fallback>, String> {
    if let Some(gf) = GuidFile::load(file).map_err(|e| e.to_string())? {
        if let Some((guid, entry)) = gf.lookup(pf, vf).map_err(|e| e.to_string())? {
            return Ok(Some(Fallback {
                guid,
                origin: GuidOrigin::OperatorFile {
                    path: file.to_path_buf(),
                    entry,
                },
            }));
        }
    }
    if !derive {
        return Ok(None);
    }
    match pf.port_guid {
        Some((pg, _)) => Ok(Some(Fallback {
            guid: derived_guid(pg, vf),
            origin: GuidOrigin::Derived { pf_port_guid: pg },
        })),
        None => Err(format!(
            "deriveGuid is set but the port GUID of PF {} cannot be read (no <PF>/infiniband/<dev>/ports/1/gids/0, no IPoIB netdev on the PF)",
            pf.pci.map(|p| p.to_string()).unwrap_or_default()
        )),
    }
}

/// Every VF GUID in use on the node, but those of `skip`: for each SR-IOV PF in sysfs
/// ([`Sysfs::sriov_pfs`]), its VF table over rtnetlink (`IFLA_VF_IB_{NODE,PORT}_GUID`,
/// one message per PF), then per VF [`VfGuids::read`]: the table's entry, the MLNX_OFED
/// `sriov/<N>/{node,port}` files, and the port GUID in each VF IPoIB netdev's hardware
/// address in this netns. Unassignable values
/// (all-zero, all-ones) and unreadable sources are left out. Shape: (VF, GUID) pairs,
/// a VF listed once per distinct GUID.
pub fn node_vf_guids(sysfs: &Sysfs, nl: &Netlink, skip: PciAddress) -> Vec<(PciAddress, Guid)> {
    let mut out: Vec<(PciAddress, Guid)> = Vec::new();
    for pf in sysfs.sriov_pfs().unwrap_or_default() {
        let mut configs = Vec::new();
        for n in sysfs.netdevs(pf).unwrap_or_default() {
            if let Ok(Some(l)) = nl.link_by_name(&n) {
                if let Ok(c) = nl.vf_configs(l.index) {
                    configs = c;
                    if l.address.len() == 20 {
                        break;
                    }
                }
            }
        }
        for (index, vf) in sysfs.virtfns(pf).unwrap_or_default() {
            if vf == skip {
                continue;
            }
            let gs = VfGuids::read(sysfs, Some(nl), pf, index, vf, &configs);
            for g in gs.all().filter(Guid::is_assignable) {
                if !out.contains(&(vf, g)) {
                    out.push((vf, g));
                }
            }
        }
    }
    out
}
