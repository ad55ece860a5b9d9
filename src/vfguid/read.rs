//! One reader of a VF's GUIDs, source by source: the VF table of its PF over rtnetlink,
//! the MLNX_OFED per-VF files and the VF's IPoIB netdevs. ADD's clash check
//! ([`super::node_vf_guids`]) and `ib-sriov doctor` (src/ib-sriovctl/doctor/collect.rs) both read
//! through [`VfGuids::read`] and only shape the answer differently.

use crate::netlink::vf::VfConfig;
use crate::netlink::{Link, Netlink};
use crate::sysfs::{GuidKind, Sysfs};
use crate::types::{Guid, PciAddress, VfIndex};

/// What the node shows now of one VF's GUIDs, from each source; nothing is filtered
/// (an all-zero GUID is reported as read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VfGuids {
    /// `IFLA_VF_IB_NODE_GUID` of the VF in its PF's VF table (rtnetlink,
    /// include/uapi/linux/if_link.h); `None` when the table has no entry or no value.
    pub netlink_node: Option<Guid>,
    /// `IFLA_VF_IB_PORT_GUID`, likewise.
    pub netlink_port: Option<Guid>,
    /// `<PF>/sriov/<N>/node` (MLNX_OFED, [`Sysfs::read_ofed_guid`]); `None` when absent
    /// or unreadable.
    pub ofed_node: Option<Guid>,
    /// `<PF>/sriov/<N>/port`, likewise.
    pub ofed_port: Option<Guid>,
    /// The VF's netdevs listed under `<VF>/net/` ([`Sysfs::netdevs`]; none when the VF
    /// or its directory is unreadable), each with its link as rtnetlink shows it in this
    /// netns: `None` when no rtnetlink handle was given or the name is not (or no
    /// longer) a link here.
    pub netdevs: Vec<(String, Option<Link>)>,
}

impl VfGuids {
    /// Reads VF `vf`, index `index` of PF `pf`: its entry of `table` (the PF's VF table,
    /// `Netlink::vf_configs`, read once per PF by the caller), its two MLNX_OFED files
    /// and, through `nl` when given, the links of its netdevs. Never fails: an
    /// unreadable source reads as absent.
    pub fn read(
        sysfs: &Sysfs,
        nl: Option<&Netlink>,
        pf: PciAddress,
        index: VfIndex,
        vf: PciAddress,
        table: &[VfConfig],
    ) -> VfGuids {
        let cfg = table.iter().find(|c| c.vf == index.0);
        let ofed = |kind| sysfs.read_ofed_guid(pf, index, kind).ok().flatten();
        VfGuids {
            netlink_node: cfg.and_then(|c| c.node_guid),
            netlink_port: cfg.and_then(|c| c.port_guid),
            ofed_node: ofed(GuidKind::Node),
            ofed_port: ofed(GuidKind::Port),
            netdevs: sysfs
                .netdevs(vf)
                .unwrap_or_default()
                .into_iter()
                .map(|n| {
                    let l = nl.and_then(|nl| nl.link_by_name(&n).ok().flatten());
                    (n, l)
                })
                .collect(),
        }
    }

    /// [`VfGuids::read`] without the netdevs: only what [`VfGuids::guid`] answers from,
    /// the VF's entry of `table` (its PF's VF table, `IFLA_VF_IB_NODE_GUID` /
    /// `IFLA_VF_IB_PORT_GUID`) and the MLNX_OFED files `<PF>/sriov/<N>/{node,port}`. Each
    /// file is read only when the table has no value of its kind. For the exporter's
    /// `node_guid` and `port_guid` labels, the same reading the doctor makes.
    pub fn read_ids(sysfs: &Sysfs, pf: PciAddress, index: VfIndex, table: &[VfConfig]) -> VfGuids {
        let cfg = table.iter().find(|c| c.vf == index.0);
        let ofed = |kind| sysfs.read_ofed_guid(pf, index, kind).ok().flatten();
        let netlink_node = cfg.and_then(|c| c.node_guid);
        let netlink_port = cfg.and_then(|c| c.port_guid);
        VfGuids {
            netlink_node,
            netlink_port,
            ofed_node: netlink_node
                .is_none()
                .then(|| ofed(GuidKind::Node))
                .flatten(),
            ofed_port: netlink_port
                .is_none()
                .then(|| ofed(GuidKind::Port))
                .flatten(),
            netdevs: Vec::new(),
        }
    }

    /// The node GUID (`kind` Node) or port GUID (Port): rtnetlink's value, else the
    /// MLNX_OFED file's.
    pub fn guid(&self, kind: GuidKind) -> Option<Guid> {
        match kind {
            GuidKind::Node => self.netlink_node.or(self.ofed_node),
            GuidKind::Port => self.netlink_port.or(self.ofed_port),
        }
    }

    /// The port GUIDs in the hardware addresses of the VF's IPoIB netdevs (bytes 12..20
    /// of the 20-byte address, [`Guid::from_ipoib_hwaddr`]), in `netdevs` order.
    pub fn ipoib(&self) -> impl Iterator<Item = Guid> + '_ {
        self.netdevs
            .iter()
            .filter_map(|(_, l)| Guid::from_ipoib_hwaddr(&l.as_ref()?.address))
    }

    /// Every GUID read, in this order: rtnetlink node and port, MLNX_OFED node and port,
    /// then [`VfGuids::ipoib`]; duplicates kept.
    pub fn all(&self) -> impl Iterator<Item = Guid> + '_ {
        [
            self.netlink_node,
            self.netlink_port,
            self.ofed_node,
            self.ofed_port,
        ]
        .into_iter()
        .flatten()
        .chain(self.ipoib())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(b: u8) -> Guid {
        Guid(u64::from_be_bytes([b; 8]))
    }

    #[test]
    fn netlink_wins_over_ofed_and_all_keeps_the_source_order() {
        let mut hw = vec![0u8; 20];
        hw[12..].copy_from_slice(&[9; 8]);
        let link = Link {
            index: 7,
            name: "ib1".into(),
            up: true,
            carrier: true,
            mtu: None,
            address: hw,
            parent_dev: None,
            altnames: Vec::new(),
        };
        let v = VfGuids {
            netlink_node: Some(g(1)),
            netlink_port: None,
            ofed_node: Some(g(3)),
            ofed_port: Some(g(4)),
            netdevs: vec![("ib0".into(), None), ("ib1".into(), Some(link))],
        };
        assert_eq!(v.guid(GuidKind::Node), Some(g(1)));
        assert_eq!(v.guid(GuidKind::Port), Some(g(4)));
        assert_eq!(v.ipoib().collect::<Vec<_>>(), vec![g(9)]);
        assert_eq!(v.all().collect::<Vec<_>>(), vec![g(1), g(3), g(4), g(9)]);
        assert_eq!(VfGuids::default().all().count(), 0);
    }
}
