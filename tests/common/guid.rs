//! The derived VF GUID computed from the rule of docs/configuration.md ("VFs without a GUID"), on its own,
//! not by the plugin's code: the tests compare what the plugin sets and shows with it.

use sha2::{Digest, Sha256};

/// `06 ‖ SHA-256("ib-sriov/derived-vf-guid/v1" ‖ PF port GUID (8 bytes, big-endian) ‖ VF
/// index (u32, big-endian))[0..7]`, as eight colon-separated lowercase hex octets.
/// `pf_port_guid` is in the same text form.
pub fn derived_guid(pf_port_guid: &str, vf: u32) -> String {
    let pg: Vec<u8> = pf_port_guid
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("a GUID octet"))
        .collect();
    assert_eq!(pg.len(), 8, "{pf_port_guid}");
    let mut h = Sha256::new();
    h.update(b"ib-sriov/derived-vf-guid/v1");
    h.update(&pg);
    h.update(vf.to_be_bytes());
    let d = h.finalize();
    std::iter::once(0x06u8)
        .chain(d[..7].iter().copied())
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
