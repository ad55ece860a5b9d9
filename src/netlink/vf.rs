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
    ///
    /// The reply is about 1.5 KB plus 233 bytes per VF with this mask (31,144 bytes at 127
    /// VFs in the lab; 336 bytes per VF, 44,212 at 127, without `SKIP_STATS`). Kernels whose
    /// `rtnl_vfinfo_size()` (net/core/rtnetlink.c) does not count
    /// `IFLA_VF_IB_NODE_GUID`/`IFLA_VF_IB_PORT_GUID` allocate the single reply
    /// (`nlmsg_new(if_nlmsg_size())` in `rtnl_getlink()`) too small for an IB PF with
    /// many VFs and answer `EMSGSIZE` (sriov-network-operator #1021, #1025, #1026,
    /// RHEL-145522). A dump of the same links sizes its buffer as at least the largest
    /// `recvmsg` the socket has made (`netlink_dump()` in net/netlink/af_netlink.c uses
    /// `max_recvmsg_len`, up to 32 KB), so it can carry the PF's message where the single
    /// reply cannot (vishvananda/netlink #1059). On `EMSGSIZE` this reads the link dump
    /// with the same mask and keeps the PF's message ([`Netlink::vf_configs_by_dump`]).
    ///
    /// Errors: the single request's, other than `EMSGSIZE`; with `EMSGSIZE`, the dump's
    /// (naming both). The caller records what stays unknown.
    pub fn vf_configs(&self, pf_index: u32) -> Result<Vec<VfConfig>, NlError> {
        match self.vf_configs_by_get(pf_index) {
            Err(e) if e.errno == Some(nix::libc::EMSGSIZE) => {
                log::debug!(
                    "the kernel's reply with the VF table of PF link {pf_index} does not fit its own buffer ({e}); reading it from a link dump"
                );
                self.vf_configs_by_dump(pf_index).map_err(|d| NlError {
                    op: format!("{}; then {}", e.op, d.op),
                    errno: d.errno,
                    msg: format!("{} (single request), {} (dump)", e.msg, d.msg),
                })
            }
            r => r,
        }
    }

    /// The VF table from the single RTM_GETLINK of the PF.
    pub fn vf_configs_by_get(&self, pf_index: u32) -> Result<Vec<VfConfig>, NlError> {
        let op = || format!("get VF info of PF link {pf_index}");
        if let Some(errno) = crate::failpoint::errno_at("netlink.vf_get") {
            return Err(NlError::injected(op(), errno));
        }
        let mut m = super::get_message(&[LinkExtentMask::Vf]);
        m.header.index = pf_index;
        let mut out = Vec::new();
        self.query.links(&op, m, false, |m| out = vf_table(&m))?;
        Ok(out)
    }

    /// The VF table from a dump of every link in the namespace with
    /// `RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS`, keeping only the PF's message (a link
    /// dump cannot be filtered by ifindex: `rtnl_dump_ifinfo()` refuses `ifi_index` under
    /// strict checking and ignores it otherwise). Empty when the PF is not in the dump.
    pub fn vf_configs_by_dump(&self, pf_index: u32) -> Result<Vec<VfConfig>, NlError> {
        let op = || format!("dump links for the VF info of PF link {pf_index}");
        if let Some(errno) = crate::failpoint::errno_at("netlink.vf_dump") {
            return Err(NlError::injected(op(), errno));
        }
        let mut out = Vec::new();
        self.query
            .links(&op, super::get_message(&[LinkExtentMask::Vf]), true, |m| {
                if m.header.index == pf_index {
                    out = vf_table(&m);
                }
            })?;
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

/// The VF entries of one link message's `IFLA_VFINFO_LIST`.
fn vf_table(msg: &LinkMessage) -> Vec<VfConfig> {
    let mut out = Vec::new();
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
    out
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
