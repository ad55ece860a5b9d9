//! Domain types that carry meaning: [`Guid`], [`PciAddress`], [`VfIndex`], [`LinkState`].
//!
//! Every type parses from the text form operators and the kernel use and prints it back
//! unchanged, so journals and error messages show what `ip link` and sysfs show.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// An InfiniBand GUID (node or port), 64 bits.
///
/// Text form: eight colon-separated hex octets, `^([0-9a-fA-F]{2}:){7}[0-9a-fA-F]{2}$`
/// (the form of `ip link` and of the MLNX_OFED `sriov/<N>/node` file). The first octet
/// is the most significant byte of the `u64`, which is the value carried in
/// `struct ifla_vf_guid.guid` (include/uapi/linux/if_link.h) as iproute2 sends it.
/// All-zero is not a valid assigned GUID (ib-sriov-cni#66): [`Guid::is_zero`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid(pub u64);

impl Guid {
    /// True for `00:00:00:00:00:00:00:00`, which mlx5 reports for an unassigned VF GUID.
    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }

    /// True for the all-ones GUID `ff:..:ff`, which some firmware reports as "unset".
    pub fn is_all_ones(&self) -> bool {
        self.0 == u64::MAX
    }

    /// A GUID that can be assigned to a VF: neither all-zero nor all-ones.
    pub fn is_assignable(&self) -> bool {
        !self.is_zero() && !self.is_all_ones()
    }

    /// The GUID embedded in an IPoIB hardware address: bytes 12..20 of the 20-byte
    /// address (4 bytes flags+QPN, 8 bytes subnet prefix, 8 bytes port GUID).
    /// Returns `None` when `addr` is not 20 bytes long.
    pub fn from_ipoib_hwaddr(addr: &[u8]) -> Option<Guid> {
        if addr.len() != 20 {
            return None;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&addr[12..20]);
        Some(Guid(u64::from_be_bytes(b)))
    }
}

/// Error from parsing a [`Guid`]; the message names the rejected text and the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuidParseError(pub String);

impl fmt::Display for GuidParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid GUID {:?}: expected eight colon-separated hex octets like 02:00:00:00:00:00:00:01",
            self.0
        )
    }
}

impl std::error::Error for GuidParseError {}

impl FromStr for Guid {
    type Err = GuidParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || GuidParseError(s.to_string());
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 8 {
            return Err(err());
        }
        let mut v: u64 = 0;
        for p in parts {
            if p.len() != 2 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            v = (v << 8) | u64::from(u8::from_str_radix(p, 16).map_err(|_| err())?);
        }
        Ok(Guid(v))
    }
}

impl fmt::Display for Guid {
    /// `aa:bb:cc:dd:ee:ff:00:11`, lower-case (built by [`push_hex_octets`], not by
    /// `{:02x}` eight times: a GUID is formatted into every journal save).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::with_capacity(23);
        push_hex_octets(&mut out, &self.0.to_be_bytes());
        f.write_str(&out)
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({self})")
    }
}

impl Serialize for Guid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Guid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A PCI address in the kernel's sysfs form `DDDD:BB:DD.F` (domain, bus, device,
/// function), e.g. `0000:af:00.2`, as in `/sys/bus/pci/devices/<BDF>`.
///
/// Parsing accepts the short form `BB:DD.F` (domain 0000) and upper-case hex, and
/// normalises to lower case with the domain, so comparisons and file names are stable.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment), 16 bits in practice.
    pub domain: u32,
    /// Bus number, 0..=255.
    pub bus: u8,
    /// Device number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// Error from parsing a [`PciAddress`]; names the rejected text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciParseError(pub String);

impl fmt::Display for PciParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid PCI address {:?}: expected [DDDD:]BB:DD.F in hex like 0000:af:00.2: domain up to 8 digits (default 0000), bus 00-ff, device 00-1f, function 0-7",
            self.0
        )
    }
}

impl std::error::Error for PciParseError {}

impl FromStr for PciAddress {
    type Err = PciParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PciParseError(s.to_string());
        let (head, func) = s.rsplit_once('.').ok_or_else(err)?;
        let parts: Vec<&str> = head.split(':').collect();
        let (dom, bus, dev) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0000", *b, *v),
            _ => return Err(err()),
        };
        let hex = |t: &str, max_len: usize| -> Result<u32, PciParseError> {
            if t.is_empty() || t.len() > max_len || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(err());
            }
            u32::from_str_radix(t, 16).map_err(|_| err())
        };
        let domain = hex(dom, 8)?;
        let bus = hex(bus, 2)?;
        let device = hex(dev, 2)?;
        let function = hex(func, 1)?;
        if device > 0x1f || function > 7 {
            return Err(err());
        }
        Ok(PciAddress {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl fmt::Display for PciAddress {
    /// `DDDD:BB:DD.F` in lower-case hex (the domain at least 4 digits, more when it
    /// needs them), as sysfs names the device. Built by hand, not by `{:0Nx}`: an
    /// address is formatted into every journal save and sysfs path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::with_capacity(12);
        let digits = (8 - self.domain.leading_zeros() as usize / 4).max(4);
        for i in (0..digits).rev() {
            out.push(HEX[((self.domain >> (4 * i)) & 0xf) as usize] as char);
        }
        out.push(':');
        push_hex_octets(&mut out, &[self.bus]);
        out.push(':');
        push_hex_octets(&mut out, &[self.device]);
        out.push('.');
        out.push(HEX[usize::from(self.function & 0xf)] as char);
        f.write_str(&out)
    }
}

impl fmt::Debug for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PciAddress({self})")
    }
}

impl Serialize for PciAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The index N of a VF on its PF, from the PF's `virtfn<N>` sysfs link; the `vf` field
/// of `struct ifla_vf_guid` / `struct ifla_vf_link_state` (include/uapi/linux/if_link.h).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VfIndex(pub u32);

impl fmt::Display for VfIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Administrative VF link state set through the PF.
///
/// Config text (the Go plugin's `link_state` key): `auto`, `enable`, `disable`.
/// Netlink value (`IFLA_VF_LINK_STATE_*`, include/uapi/linux/if_link.h): 0, 1, 2.
/// MLNX_OFED sysfs `sriov/<N>/policy` text: `Follow`, `Up`, `Down`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum LinkState {
    /// Follow the PF's physical link (`IFLA_VF_LINK_STATE_AUTO`, OFED `Follow`).
    Auto,
    /// Forced up (`IFLA_VF_LINK_STATE_ENABLE`, OFED `Up`).
    Enable,
    /// Forced down (`IFLA_VF_LINK_STATE_DISABLE`, OFED `Down`).
    Disable,
}

impl LinkState {
    /// The `IFLA_VF_LINK_STATE_*` value.
    pub fn to_netlink(self) -> u32 {
        match self {
            LinkState::Auto => 0,
            LinkState::Enable => 1,
            LinkState::Disable => 2,
        }
    }

    /// From an `IFLA_VF_LINK_STATE_*` value; `None` for values the uapi does not define.
    pub fn from_netlink(v: u32) -> Option<Self> {
        match v {
            0 => Some(LinkState::Auto),
            1 => Some(LinkState::Enable),
            2 => Some(LinkState::Disable),
            _ => None,
        }
    }

    /// The MLNX_OFED `sriov/<N>/policy` word.
    pub fn to_ofed_policy(self) -> &'static str {
        match self {
            LinkState::Auto => "Follow",
            LinkState::Enable => "Up",
            LinkState::Disable => "Down",
        }
    }

    /// From the MLNX_OFED `sriov/<N>/policy` word (case-insensitive, trailing newline ok).
    pub fn from_ofed_policy(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "follow" => Some(LinkState::Auto),
            "up" => Some(LinkState::Enable),
            "down" => Some(LinkState::Disable),
            _ => None,
        }
    }

    /// The config word (`auto|enable|disable`).
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Auto => "auto",
            LinkState::Enable => "enable",
            LinkState::Disable => "disable",
        }
    }
}

impl fmt::Display for LinkState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LinkState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(LinkState::Auto),
            "enable" => Ok(LinkState::Enable),
            "disable" => Ok(LinkState::Disable),
            other => Err(format!(
                "invalid link_state {other:?}: expected \"auto\", \"enable\" or \"disable\""
            )),
        }
    }
}

impl Serialize for LinkState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LinkState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Formats a hardware address as lower-case colon-separated hex (any length: 6 bytes
/// on Ethernet, 20 on IPoIB), as `ip link` prints it.
pub fn format_hwaddr(addr: &[u8]) -> String {
    let mut out = String::with_capacity(addr.len() * 3);
    push_hex_octets(&mut out, addr);
    out
}

/// Lower-case hex digits.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` to `out` as two lower-case hex digits each, separated by `:`.
fn push_hex_octets(out: &mut String, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xf)] as char);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_formatting_matches_the_format_macros() {
        for v in [
            0u64,
            1,
            0x0200_0000_0000_0001,
            0x1122_3344_5566_7788,
            u64::MAX,
            0xab00_00cd_ef00_0012,
        ] {
            let b = v.to_be_bytes();
            let want = b
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            assert_eq!(Guid(v).to_string(), want);
            assert_eq!(format_hwaddr(&b), want);
        }
        assert_eq!(format_hwaddr(&[]), "");
        for (domain, bus, device, function) in [
            (0u32, 0u8, 0u8, 0u8),
            (0, 0xaf, 0, 2),
            (0x1234, 0xff, 0x1f, 7),
            (0x10000, 1, 2, 3),
            (u32::MAX, 0x0a, 0x1b, 5),
        ] {
            let a = PciAddress {
                domain,
                bus,
                device,
                function,
            };
            assert_eq!(
                a.to_string(),
                format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
            );
        }
    }

    #[test]
    fn guid_round_trip_and_byte_order() {
        let g: Guid = "11:22:33:44:55:66:77:88".parse().unwrap();
        assert_eq!(g.0, 0x1122_3344_5566_7788);
        assert_eq!(g.to_string(), "11:22:33:44:55:66:77:88");
        let upper: Guid = "AA:BB:CC:DD:EE:FF:00:01".parse().unwrap();
        assert_eq!(upper.to_string(), "aa:bb:cc:dd:ee:ff:00:01");
    }

    #[test]
    fn guid_rejects_malformed() {
        for bad in [
            "",
            "11:22:33:44:55:66:77",
            "11:22:33:44:55:66:77:88:99",
            "1:22:33:44:55:66:77:88",
            "11-22-33-44-55-66-77-88",
            "g1:22:33:44:55:66:77:88",
            "11:22:33:44:55:66:77:888",
            " 11:22:33:44:55:66:77:88",
        ] {
            assert!(bad.parse::<Guid>().is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn guid_zero_and_ones_not_assignable() {
        assert!(!"00:00:00:00:00:00:00:00"
            .parse::<Guid>()
            .unwrap()
            .is_assignable());
        assert!(!"ff:ff:ff:ff:ff:ff:ff:ff"
            .parse::<Guid>()
            .unwrap()
            .is_assignable());
        assert!("00:00:00:00:00:00:00:01"
            .parse::<Guid>()
            .unwrap()
            .is_assignable());
    }

    #[test]
    fn guid_from_ipoib_address() {
        // From the background document: ibp60s0's 20-byte address ends in the port GUID.
        let a: Vec<u8> = "00:00:00:6c:fe:80:00:00:00:00:00:00:7c:8c:09:03:00:ae:4c:1c"
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        assert_eq!(
            Guid::from_ipoib_hwaddr(&a).unwrap().to_string(),
            "7c:8c:09:03:00:ae:4c:1c"
        );
        assert_eq!(Guid::from_ipoib_hwaddr(&a[..6]), None);
    }

    #[test]
    fn pci_parse_forms() {
        let p: PciAddress = "0000:AF:00.2".parse().unwrap();
        assert_eq!(p.to_string(), "0000:af:00.2");
        let short: PciAddress = "af:00.2".parse().unwrap();
        assert_eq!(short, p);
        for bad in [
            "",
            "0000:af:00",
            "0000:af:20.0",
            "0000:af:00.8",
            "zz:00.0",
            "0000:af:00.2x",
        ] {
            assert!(bad.parse::<PciAddress>().is_err(), "{bad:?}");
        }
        // The error says what is valid, the function's range included.
        let e = "0000:af:00.8"
            .parse::<PciAddress>()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"0000:af:00.8\"")
                && e.contains("function 0-7")
                && e.contains("device 00-1f"),
            "{e}"
        );
    }

    #[test]
    fn link_state_forms() {
        for (s, nl, ofed) in [
            (LinkState::Auto, 0, "Follow"),
            (LinkState::Enable, 1, "Up"),
            (LinkState::Disable, 2, "Down"),
        ] {
            assert_eq!(LinkState::from_netlink(nl), Some(s));
            assert_eq!(s.to_netlink(), nl);
            assert_eq!(LinkState::from_ofed_policy(&format!("{ofed}\n")), Some(s));
            assert_eq!(s.as_str().parse::<LinkState>().unwrap(), s);
        }
        assert!("up".parse::<LinkState>().is_err());
        assert_eq!(LinkState::from_netlink(3), None);
    }
}
