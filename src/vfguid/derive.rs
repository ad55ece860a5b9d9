//! A stable GUID for a VF, derived from its PF's port GUID and its index.
//!
//! `GUID = [0x06] ++ SHA-256("ib-sriov/derived-vf-guid/v1" ++ pf_port_guid ++ vf_index)[0..7]`
//! with the PF port GUID as 8 bytes big-endian and the VF index as 4 bytes big-endian.
//!
//! - Byte 0 is [`DERIVED_GUID_BYTE0`]: the locally administered bit (0x02) set and the
//!   group bit (0x01) clear, as for a locally administered EUI-64 (IEEE "Guidelines for
//!   Use of EUI, OUI, and CID"), and not 0x02, so a derived GUID never falls in
//!   ib-kubernetes' default pool `02:00:00:00:00:00:00:00`-`02:FF:FF:FF:FF:FF:FF:FF`.
//!   It is never all-zero or all-ones.
//! - The PF's port GUID is burnt into the adapter, so the GUID is the same across
//!   reboots, driver reloads and `sriov_numvfs` changes, and differs between VFs and
//!   between PFs (a 56-bit hash).

use crate::sysfs::Sysfs;
use crate::types::{Guid, PciAddress, VfIndex};
use sha2::{Digest, Sha256};

/// The first byte of every derived GUID.
pub const DERIVED_GUID_BYTE0: u8 = 0x06;

/// The hash input's fixed label (27 ASCII bytes). A new rule gets a new label.
pub const DERIVATION_LABEL: &[u8] = b"ib-sriov/derived-vf-guid/v1";

/// The derived GUID of VF `vf` of the PF whose port GUID is `pf_port_guid` (module docs).
pub fn derived_guid(pf_port_guid: Guid, vf: VfIndex) -> Guid {
    let mut h = Sha256::new();
    h.update(DERIVATION_LABEL);
    h.update(pf_port_guid.0.to_be_bytes());
    h.update(vf.0.to_be_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b[0] = DERIVED_GUID_BYTE0;
    b[1..].copy_from_slice(&d[..7]);
    Guid(u64::from_be_bytes(b))
}

/// Where a PF's port GUID was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortGuidSource {
    /// `<PF>/infiniband/<dev>/ports/1/gids/0`: GID index 0 of an InfiniBand port is the
    /// subnet prefix and the port GUID (`show_port_gid`, drivers/infiniband/core/sysfs.c,
    /// which prints the 16 bytes as eight groups of four hex digits, `%pI6`).
    Gid0,
    /// The PF IPoIB netdev's 20-byte hardware address: 4 bytes flags and QPN, then the
    /// port's GID, whose last 8 bytes are the port GUID (RFC 4391 section 9.1.1).
    IpoibAddress,
}

/// Parses a GID as sysfs prints it (`fe80:0000:0000:0000:0c42:a103:00b1:c2d2`) and
/// returns its interface ID (the last 64 bits).
pub fn gid_interface_id(s: &str) -> Option<Guid> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8
        || !groups
            .iter()
            .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return None;
    }
    let mut v = 0u64;
    for g in &groups[4..] {
        v = (v << 16) | u64::from(u16::from_str_radix(g, 16).ok()?);
    }
    Some(Guid(v))
}

/// The port GUID of PF `pf`: from GID 0 of port 1 of its first RDMA device
/// (`<PF>/infiniband/<dev>/ports/1/gids/0`), else from its IPoIB netdev's hardware
/// address `ipoib_addr` (20 bytes; bytes 12..20). `None` when neither gives an
/// assignable GUID (a ConnectX PF has one port per PCI function, port 1).
pub fn pf_port_guid(
    sysfs: &Sysfs,
    pf: PciAddress,
    ipoib_addr: Option<&[u8]>,
) -> Option<(Guid, PortGuidSource)> {
    let from_gid = sysfs.rdma_devices(pf).ok().and_then(|devs| {
        let dev = devs.first()?;
        let p = sysfs
            .pci_device_dir(pf)
            .join("infiniband")
            .join(dev)
            .join("ports/1/gids/0");
        let b = crate::fsutil::read_regular_bounded(&p, 256).ok()?;
        gid_interface_id(&String::from_utf8_lossy(&b))
    });
    if let Some(g) = from_gid.filter(Guid::is_assignable) {
        return Some((g, PortGuidSource::Gid0));
    }
    ipoib_addr
        .and_then(Guid::from_ipoib_hwaddr)
        .filter(Guid::is_assignable)
        .map(|g| (g, PortGuidSource::IpoibAddress))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_rule_is_pinned() {
        // Computed outside this code, with Python's hashlib:
        // sha256(b"ib-sriov/derived-vf-guid/v1" + bytes.fromhex("0c42a10300b1c2d2")
        //        + (N).to_bytes(4, "big")), then 0x06 and the first 7 bytes.
        let pg: Guid = "0c:42:a1:03:00:b1:c2:d2".parse().unwrap();
        assert_eq!(
            derived_guid(pg, VfIndex(0)).to_string(),
            "06:8c:b0:f8:f3:57:75:c0"
        );
        assert_eq!(
            derived_guid(pg, VfIndex(5)).to_string(),
            "06:e7:ac:f7:9d:6e:0c:a2"
        );
        assert_eq!(DERIVATION_LABEL.len(), 27);
    }

    #[test]
    fn distinct_for_127_vfs_of_8_pfs_and_never_reserved_or_in_the_ib_kubernetes_pool() {
        let mut seen = HashSet::new();
        for p in 0..8u64 {
            let pg = Guid(0x0c42_a103_00b1_c200 + p * 2);
            for v in 0..127 {
                let g = derived_guid(pg, VfIndex(v));
                assert!(g.is_assignable());
                let b0 = g.0.to_be_bytes()[0];
                assert_eq!(b0, 0x06);
                assert_eq!(b0 & 0x02, 0x02, "locally administered");
                assert_eq!(b0 & 0x01, 0, "unicast");
                assert!(seen.insert(g), "{g} twice");
                // Stable: the same inputs give the same GUID.
                assert_eq!(derived_guid(pg, VfIndex(v)), g);
            }
        }
    }

    #[test]
    fn gid_text() {
        assert_eq!(
            gid_interface_id("fe80:0000:0000:0000:0c42:a103:00b1:c2d2\n"),
            Some("0c:42:a1:03:00:b1:c2:d2".parse().unwrap())
        );
        assert_eq!(gid_interface_id("fe80::c42:a103:b1:c2d2"), None);
        assert_eq!(gid_interface_id(""), None);
    }
}
