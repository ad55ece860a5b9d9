//! VF configuration through the PF (RTM_SETLINK / RTM_GETLINK on the PF netdev):
//! `IFLA_VFINFO_LIST` > `IFLA_VF_INFO` > `IFLA_VF_LINK_STATE`, `IFLA_VF_IB_NODE_GUID`,
//! `IFLA_VF_IB_PORT_GUID` (include/uapi/linux/if_link.h).
//!
//! The kernel's `do_setvfinfo()` (net/core/rtnetlink.c) returns right after the first
//! IB GUID attribute it handles, so node GUID, port GUID and link state each go in a
//! message of their own. `struct ifla_vf_guid` is 16 bytes on 64-bit (4 bytes padding
//! after `vf`); netlink-packet-route >= 0.34 encodes it so.

use super::{Link, Netlink, NlError};
use crate::types::{Guid, LinkState, VfIndex};
use futures::TryStreamExt;
use netlink_packet_route::link::{
    LinkAttribute, LinkExtentMask, LinkMessage, LinkVfInfo, VfInfo, VfInfoGuid, VfInfoLinkState,
    VfLinkState,
};

/// Which IB GUID of a VF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuidKind {
    /// `IFLA_VF_IB_NODE_GUID` (10).
    Node,
    /// `IFLA_VF_IB_PORT_GUID` (11).
    Port,
}

/// One VF's state as the PF reports it with `RTEXT_FILTER_VF`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VfConfig {
    /// VF index.
    pub vf: u32,
    /// `IFLA_VF_LINK_STATE`, when reported.
    pub link_state: Option<LinkState>,
    /// `IFLA_VF_IB_NODE_GUID`, when the driver implements `ndo_get_vf_guid`.
    pub node_guid: Option<Guid>,
    /// `IFLA_VF_IB_PORT_GUID`, likewise.
    pub port_guid: Option<Guid>,
}

/// Builds the RTM_SETLINK message that sets one VF attribute on PF `pf_index`.
/// Exposed for byte-level tests of the layout.
pub fn vf_set_message(pf_index: u32, info: VfInfo) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = pf_index;
    m.attributes
        .push(LinkAttribute::VfInfoList(vec![LinkVfInfo(vec![info])]));
    m
}

impl Netlink {
    /// The VF table of the PF (`IFLA_VFINFO_LIST` of RTM_GETLINK with
    /// `IFLA_EXT_MASK = RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS`). Empty when the PF
    /// reports no VFs (e.g. a veth on the emulated host). `RTEXT_FILTER_SKIP_STATS`
    /// leaves out `IFLA_VF_STATS` (net/core/rtnetlink.c `rtnl_fill_vfinfo()`), which the
    /// kernel otherwise gathers through `ndo_get_vf_stats` for every VF of the PF at
    /// every request (an IPoIB PF: `ipoib_get_vf_stats()` calls `ib_get_vf_stats()`,
    /// which mlx5 answers with a firmware query of the VF's vport counters).
    pub fn vf_configs(&self, pf_index: u32) -> Result<Vec<VfConfig>, NlError> {
        let mut req = std::pin::pin!(self
            .get_request(&[LinkExtentMask::Vf])
            .match_index(pf_index)
            .execute());
        let msg = self
            .runtime()
            .block_on(req.try_next())
            .map_err(|e| NlError::new(format!("get VF info of PF link {pf_index}"), e))?;
        let mut out = Vec::new();
        let Some(msg) = msg else { return Ok(out) };
        for a in &msg.attributes {
            if let LinkAttribute::VfInfoList(list) = a {
                for LinkVfInfo(infos) in list {
                    let mut c = VfConfig::default();
                    let mut have_index = false;
                    for i in infos {
                        match i {
                            VfInfo::Mac(m) => {
                                c.vf = m.vf_id;
                                have_index = true;
                            }
                            VfInfo::LinkState(s) => {
                                c.vf = s.vf_id;
                                have_index = true;
                                c.link_state = LinkState::from_netlink(u32::from(s.state));
                            }
                            VfInfo::IbNodeGuid(g) => c.node_guid = Some(Guid(g.guid)),
                            VfInfo::IbPortGuid(g) => c.port_guid = Some(Guid(g.guid)),
                            _ => {}
                        }
                    }
                    if have_index {
                        out.push(c);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Sets `IFLA_VF_LINK_STATE` of VF `vf` on PF `pf`.
    /// `EOPNOTSUPP` when the PF driver has no `ndo_set_vf_link_state`.
    pub fn set_vf_link_state(
        &self,
        pf: &Link,
        vf: VfIndex,
        state: LinkState,
    ) -> Result<(), NlError> {
        let info = VfInfo::LinkState(VfInfoLinkState::new(
            vf.0,
            VfLinkState::from(state.to_netlink()),
        ));
        self.set(
            format!("set link state of VF {vf} on PF {} to {state}", pf.name),
            vf_set_message(pf.index, info),
        )
    }

    /// Sets the node or port GUID of VF `vf` on PF `pf` (one attribute per message).
    /// `EOPNOTSUPP` when the PF driver has no `ndo_set_vf_guid`.
    pub fn set_vf_guid(
        &self,
        pf: &Link,
        vf: VfIndex,
        kind: GuidKind,
        guid: Guid,
    ) -> Result<(), NlError> {
        let g = VfInfoGuid::new(vf.0, guid.0);
        let info = match kind {
            GuidKind::Node => VfInfo::IbNodeGuid(g),
            GuidKind::Port => VfInfo::IbPortGuid(g),
        };
        self.set(
            format!("set {kind:?} GUID of VF {vf} on PF {} to {guid}", pf.name).to_lowercase(),
            vf_set_message(pf.index, info),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    /// The GUID attribute must be `struct ifla_vf_guid` = {u32 vf; u32 pad; u64 guid}:
    /// 16 bytes of payload (the old 12-byte layout is rejected by the kernel's policy).
    #[test]
    fn vf_guid_attribute_is_16_bytes_with_padding() {
        let m = vf_set_message(
            7,
            VfInfo::IbNodeGuid(VfInfoGuid::new(3, 0x1122_3344_5566_7788)),
        );
        let mut buf = vec![0u8; m.buffer_len()];
        m.emit(&mut buf);
        // ifinfomsg is 16 bytes; then IFLA_VFINFO_LIST(22) > IFLA_VF_INFO(1) > IFLA_VF_IB_NODE_GUID(10).
        let attrs = &buf[16..];
        assert_eq!(u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3fff, 22);
        let info = &attrs[4..];
        assert_eq!(u16::from_ne_bytes([info[2], info[3]]) & 0x3fff, 1);
        let guid = &info[4..];
        assert_eq!(u16::from_ne_bytes([guid[0], guid[1]]), 4 + 16, "nla_len");
        assert_eq!(
            u16::from_ne_bytes([guid[2], guid[3]]),
            10,
            "IFLA_VF_IB_NODE_GUID"
        );
        let payload = &guid[4..20];
        assert_eq!(&payload[0..4], &3u32.to_ne_bytes());
        assert_eq!(&payload[4..8], &[0, 0, 0, 0]);
        assert_eq!(&payload[8..16], &0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(
            u32::from_ne_bytes(buf[4..8].try_into().unwrap()),
            7,
            "ifi_index"
        );
    }

    #[test]
    fn vf_link_state_attribute_layout() {
        let m = vf_set_message(
            2,
            VfInfo::LinkState(VfInfoLinkState::new(1, VfLinkState::from(2))),
        );
        let mut buf = vec![0u8; m.buffer_len()];
        m.emit(&mut buf);
        let ls = &buf[16 + 4 + 4..];
        assert_eq!(u16::from_ne_bytes([ls[0], ls[1]]), 4 + 8);
        assert_eq!(u16::from_ne_bytes([ls[2], ls[3]]), 5, "IFLA_VF_LINK_STATE");
        assert_eq!(&ls[4..8], &1u32.to_ne_bytes());
        assert_eq!(&ls[8..12], &2u32.to_ne_bytes());
    }
}
