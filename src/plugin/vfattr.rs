//! Reading and setting a VF's link state and node/port GUID through its PF:
//! rtnetlink first (facts: `IFLA_VF_LINK_STATE`, `IFLA_VF_IB_NODE_GUID`/`PORT_GUID`),
//! and on `EOPNOTSUPP` the MLNX_OFED sysfs files `<PF>/sriov/<N>/{policy,node,port}`
//! where they exist. The mechanism that worked is recorded in the journal ([`Via`]) so
//! the undo goes the same way.

use crate::cni::CniError;
use crate::journal::Via;
use crate::netlink::vf::{GuidKind, VfConfig};
use crate::netlink::{Link, Netlink, NlError};
use crate::sysfs::{self, Sysfs};
use crate::types::{Guid, LinkState, PciAddress, VfIndex};

/// The VF as seen from its PF: everything needed to read or change its attributes.
pub struct PfView<'a> {
    /// rtnetlink connection in the host netns.
    pub nl: &'a Netlink,
    /// sysfs.
    pub sysfs: &'a Sysfs,
    /// PF PCI address.
    pub pf: PciAddress,
    /// PF netdev as a link in the host netns, when it has one.
    pub pf_link: Option<Link>,
    /// VF index.
    pub vf: VfIndex,
}

/// Current VF attributes and where they were read.
#[derive(Debug, Clone, Default)]
pub struct VfState {
    /// Link state and its source.
    pub link_state: Option<(LinkState, Via)>,
    /// Node GUID and its source.
    pub node_guid: Option<(Guid, Via)>,
    /// Port GUID and its source.
    pub port_guid: Option<(Guid, Via)>,
}

impl VfState {
    /// The VF's (node, port) GUIDs, given the port GUID its IPoIB netdev's hardware
    /// address holds (`ipoib`: the last 8 of its 20 bytes, `None` when the VF has no
    /// IPoIB netdev in reach).
    ///
    /// The IPoIB address is the truth for the port GUID (the Go plugin reads it there
    /// too). mlx5 reports through `IFLA_VF_IB_{NODE,PORT}_GUID` only what was set over
    /// netlink since the driver loaded (`mlx5_ib_get_vf_guid` in
    /// drivers/infiniband/hw/mlx5/ib_virt.c returns the cached `vfs_ctx`), so a GUID
    /// assigned by firmware, MLNX_OFED sysfs or before a driver reload reads as all-zero
    /// there. So, when `ipoib` is known, a zero read from the PF means "unknown": the port
    /// GUID is `ipoib`, and a node GUID reading zero is taken to be `ipoib` as well (the
    /// plugin always sets both to one value).
    pub fn guids_with_ipoib(&self, ipoib: Option<Guid>) -> (Option<Guid>, Option<Guid>) {
        let known =
            |g: Option<(Guid, Via)>| g.map(|g| g.0).filter(|g| ipoib.is_none() || !g.is_zero());
        (
            known(self.node_guid).or(ipoib),
            ipoib.or(known(self.port_guid)),
        )
    }
}

fn sysfs_kind(k: GuidKind) -> sysfs::GuidKind {
    match k {
        GuidKind::Node => sysfs::GuidKind::Node,
        GuidKind::Port => sysfs::GuidKind::Port,
    }
}

impl<'a> PfView<'a> {
    /// The view of the VF recorded in journal `j`, with its PF netdev looked up by the
    /// name recorded at ADD (absent when the PF has no netdev in this netns any more).
    pub fn for_journal(nl: &'a Netlink, sysfs: &'a Sysfs, j: &crate::journal::Journal) -> Self {
        let pf_link = j
            .pf_netdev
            .as_deref()
            .and_then(|n| nl.link_by_name(n).ok().flatten());
        PfView {
            nl,
            sysfs,
            pf: j.pf,
            pf_link,
            vf: j.vf_index,
        }
    }

    fn netlink_config(&self) -> Option<VfConfig> {
        let pf = self.pf_link.as_ref()?;
        match self.nl.vf_configs(pf.index) {
            Ok(list) => list.into_iter().find(|c| c.vf == self.vf.0),
            Err(e) => {
                log::warn!(
                    "the VF table of PF {} cannot be read over netlink ({e}): the link state and GUIDs of VF {} come from the MLNX_OFED files or stay unknown (journaled as null: DEL then restores link state auto and gives a GUID it could not read the VF's derived GUID)",
                    pf.name,
                    self.vf
                );
                None
            }
        }
    }

    /// Reads link state and GUIDs: PF VF-info over netlink, else the OFED files.
    /// (The IPoIB-address fallback for the port GUID is the caller's: it needs the netdev.)
    pub fn read(&self) -> Result<VfState, CniError> {
        let nl = self.netlink_config();
        let mut st = VfState::default();
        if let Some(c) = &nl {
            st.link_state = c.link_state.map(|s| (s, Via::Netlink));
            st.node_guid = c.node_guid.map(|g| (g, Via::Netlink));
            st.port_guid = c.port_guid.map(|g| (g, Via::Netlink));
        }
        let io = |what: &str, e: std::io::Error| {
            CniError::host(format!(
                "reading {what} of VF {} on PF {}: {e}",
                self.vf, self.pf
            ))
        };
        if st.link_state.is_none() {
            st.link_state = self
                .sysfs
                .read_ofed_policy(self.pf, self.vf)
                .map_err(|e| io("OFED policy", e))?
                .map(|s| (s, Via::Ofed));
        }
        if st.node_guid.is_none() {
            st.node_guid = self
                .sysfs
                .read_ofed_guid(self.pf, self.vf, sysfs::GuidKind::Node)
                .map_err(|e| io("OFED node GUID", e))?
                .map(|g| (g, Via::Ofed));
        }
        if st.port_guid.is_none() {
            st.port_guid = self
                .sysfs
                .read_ofed_guid(self.pf, self.vf, sysfs::GuidKind::Port)
                .map_err(|e| io("OFED port GUID", e))?
                .map(|g| (g, Via::Ofed));
        }
        Ok(st)
    }

    fn has_ofed(&self) -> bool {
        self.sysfs.ofed_dir(self.pf, self.vf).is_some()
    }

    fn unsupported(&self, what: &str, e: &NlError) -> CniError {
        CniError::host(format!(
            "cannot set {what} of VF {} on PF {}: the PF driver does not support it over netlink ({e}) and there is no MLNX_OFED sysfs directory {}/sriov/{}",
            self.vf,
            self.pf,
            self.sysfs.pci_device_dir(self.pf).display(),
            self.vf
        ))
    }

    /// Sets the link state; `prefer` is the mechanism to try first (from the journal).
    /// Returns the mechanism that worked.
    pub fn set_link_state(&self, state: LinkState, prefer: Option<Via>) -> Result<Via, CniError> {
        let via_ofed = || {
            self.sysfs
                .write_ofed_policy(self.pf, self.vf, state)
                .map(|_| Via::Ofed)
                .map_err(|e| {
                    CniError::host(format!(
                        "writing OFED policy {} of VF {}: {e}",
                        state.to_ofed_policy(),
                        self.vf
                    ))
                })
        };
        if prefer == Some(Via::Ofed) && self.has_ofed() {
            return via_ofed();
        }
        let Some(pf) = &self.pf_link else {
            return if self.has_ofed() {
                via_ofed()
            } else {
                Err(CniError::host(format!(
                    "cannot set link state of VF {}: PF {} has no netdev in this network namespace and no MLNX_OFED sriov directory",
                    self.vf, self.pf
                )))
            };
        };
        match self.nl.set_vf_link_state(pf, self.vf, state) {
            Ok(()) => Ok(Via::Netlink),
            Err(e) if e.is_not_supported() && self.has_ofed() => via_ofed(),
            Err(e) if e.is_not_supported() => Err(self.unsupported("link state", &e)),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets one GUID; returns the mechanism that worked.
    pub fn set_guid(
        &self,
        kind: GuidKind,
        guid: Guid,
        prefer: Option<Via>,
    ) -> Result<Via, CniError> {
        let via_ofed = || {
            self.sysfs
                .write_ofed_guid(self.pf, self.vf, sysfs_kind(kind), guid)
                .map(|_| Via::Ofed)
                .map_err(|e| {
                    CniError::host(
                        format!("writing OFED {kind:?} GUID {guid} of VF {}: {e}", self.vf)
                            .to_lowercase(),
                    )
                })
        };
        if prefer == Some(Via::Ofed) && self.has_ofed() {
            return via_ofed();
        }
        let Some(pf) = &self.pf_link else {
            return if self.has_ofed() {
                via_ofed()
            } else {
                Err(CniError::host(format!(
                    "cannot set GUID of VF {}: PF {} has no netdev in this network namespace and no MLNX_OFED sriov directory",
                    self.vf, self.pf
                )))
            };
        };
        match self.nl.set_vf_guid(pf, self.vf, kind, guid) {
            Ok(()) => Ok(Via::Netlink),
            Err(e) if e.is_not_supported() && self.has_ofed() => via_ofed(),
            Err(e) if e.is_not_supported() => Err(self.unsupported("GUID", &e)),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets node then port GUID (separate operations, as `do_setvfinfo()` requires).
    pub fn set_guids(&self, node: Guid, port: Guid, prefer: Option<Via>) -> Result<Via, CniError> {
        let via = self.set_guid(GuidKind::Node, node, prefer)?;
        self.set_guid(GuidKind::Port, port, Some(via))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Guid {
        s.parse().unwrap()
    }

    #[test]
    fn ipoib_address_is_the_port_guid_truth() {
        let zero = g("00:00:00:00:00:00:00:00");
        let fw = g("0c:42:a1:03:00:b1:c2:d3");
        let set = g("02:00:00:00:00:00:00:07");
        let st = |node: Guid, port: Guid| VfState {
            link_state: None,
            node_guid: Some((node, Via::Netlink)),
            port_guid: Some((port, Via::Netlink)),
        };
        // mlx5 after a driver reload: netlink reads zero, the netdev knows the GUID.
        assert_eq!(
            st(zero, zero).guids_with_ipoib(Some(fw)),
            (Some(fw), Some(fw))
        );
        // Netlink and the netdev agree.
        assert_eq!(
            st(set, set).guids_with_ipoib(Some(set)),
            (Some(set), Some(set))
        );
        // Netlink's cached value is stale (changed via OFED sysfs): the netdev wins for
        // the port; the node keeps what the PF says.
        assert_eq!(
            st(set, set).guids_with_ipoib(Some(fw)),
            (Some(set), Some(fw))
        );
        // No netdev in reach (vfio, or not IPoIB): the PF's values, zero included.
        assert_eq!(
            st(zero, zero).guids_with_ipoib(None),
            (Some(zero), Some(zero))
        );
        assert_eq!(VfState::default().guids_with_ipoib(None), (None, None));
        assert_eq!(
            VfState::default().guids_with_ipoib(Some(fw)),
            (Some(fw), Some(fw))
        );
    }
}
