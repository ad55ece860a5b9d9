//! One address range inside a subnet: host-local's `Range`
//! (plugins/ipam/host-local/backend/allocator/range.go).
//!
//! Addresses are handled as `u128` ordinals (IPv4 zero-extended) so that one
//! code path serves both families.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

/// An IP address as a `u128` ordinal (IPv4 addresses are zero-extended).
pub(crate) fn ip_to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Inverse of [`ip_to_u128`]; `v4` selects the family (the value must then
/// fit in 32 bits, which callers guarantee by staying inside a v4 subnet).
pub(crate) fn u128_to_ip(value: u128, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::from(value as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(value))
    }
}

/// host-local's `canonicalizeIP` (range.go): an IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`) is the IPv4 address `a.b.c.d`.
pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// Parse an IP address the way Go's `net.ParseIP` + `canonicalizeIP` do
/// (IPv4-mapped IPv6 becomes IPv4). `what` names the field in the error.
pub(crate) fn parse_ip(what: &str, text: &str) -> Result<IpAddr, String> {
    text.trim()
        .parse::<IpAddr>()
        .map(canonical_ip)
        .map_err(|_| format!("{what} {text:?} is not an IP address"))
}

/// Parse `addr/prefix` CIDR notation like Go's `net.ParseCIDR`: the `/` and a
/// decimal prefix length are required (no netmask form). The address keeps
/// its host bits; callers decide whether they are allowed.
pub(crate) fn parse_cidr(what: &str, text: &str) -> Result<IpNetwork, String> {
    let err = || format!("{what} {text:?} is not in CIDR notation (addr/prefix)");
    let (addr, prefix) = text.trim().split_once('/').ok_or_else(err)?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    let addr: IpAddr = addr.parse().map_err(|_| err())?;
    let prefix: u8 = prefix.parse().map_err(|_| err())?;
    IpNetwork::new(addr, prefix).map_err(|_| err())
}

/// Number of address bits of a family.
fn bits(v4: bool) -> u8 {
    if v4 {
        32
    } else {
        128
    }
}

/// A validated range: every field is canonical and consistent.
///
/// Invariants (checked by [`Range::new`]): `subnet` is a network address (no
/// host bits) with at least 4 addresses (prefix <= bits-2), `range_start`,
/// `range_end` and `gateway` are in `subnet` and of its family, and
/// `range_start <= range_end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The subnet, as its network address and prefix length.
    pub subnet: IpNetwork,
    /// First address of the range, inclusive.
    pub range_start: IpAddr,
    /// Last address of the range, inclusive.
    pub range_end: IpAddr,
    /// The gateway returned with addresses of this range; never allocated.
    pub gateway: IpAddr,
}

impl Range {
    /// Build and validate a range from the JSON strings of one host-local
    /// range object (`subnet`, `rangeStart`, `rangeEnd`, `gateway`); empty
    /// strings count as absent (Go's `net.IP` unmarshals `""` to nil).
    ///
    /// Defaults (host-local range.go `Canonicalize`): `gateway` = subnet+1,
    /// `rangeStart` = subnet+1, `rangeEnd` = last address of the subnet, minus
    /// one for IPv4 (the broadcast).
    ///
    /// Errors (a message naming the offending value): unparsable values, a
    /// subnet too small (/31, /32, /127, /128), host bits set, start/end/
    /// gateway outside the subnet, start after end, and IPv6 ranges touching
    /// the IPv4-mapped block `::ffff:0:0/96` (host-local would name those
    /// files as IPv4 addresses).
    pub fn new(
        subnet: &str,
        range_start: Option<&str>,
        range_end: Option<&str>,
        gateway: Option<&str>,
    ) -> Result<Range, String> {
        let given = parse_cidr("subnet", subnet)?;
        let v4 = given.is_ipv4();
        if let IpAddr::V6(v6) = given.ip() {
            if v6.to_ipv4_mapped().is_some() {
                return Err(format!(
                    "subnet {given} is an IPv4-mapped IPv6 network; write it as IPv4"
                ));
            }
        }
        let prefix = given.prefix();
        if prefix > bits(v4) - 2 {
            return Err(format!("Network {given} too small to allocate from"));
        }
        let network_ip = given.network();
        if network_ip != given.ip() {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {prefix} the network address is {network_ip}"
            ));
        }
        let subnet = IpNetwork::new(network_ip, prefix).map_err(|e| e.to_string())?;
        let net = ip_to_u128(network_ip);
        let host_mask: u128 = if prefix == 0 && !v4 {
            u128::MAX
        } else {
            (1u128 << (bits(v4) - prefix)) - 1
        };
        let last = net | host_mask;
        let first_host = u128_to_ip(net + 1, v4);
        let last_default = u128_to_ip(if v4 { last - 1 } else { last }, v4);

        fn non_empty(s: Option<&str>) -> Option<&str> {
            s.filter(|t| !t.trim().is_empty())
        }
        let in_subnet = |what: &str, ip: IpAddr| -> Result<IpAddr, String> {
            if ip.is_ipv4() != v4 || !subnet.contains(ip) {
                return Err(format!("{what} {ip} not in network {subnet}"));
            }
            Ok(ip)
        };

        let gateway = match non_empty(gateway) {
            Some(t) => in_subnet("gateway", parse_ip("gateway", t)?)?,
            None => first_host,
        };
        let range_start = match non_empty(range_start) {
            Some(t) => in_subnet("rangeStart", parse_ip("rangeStart", t)?)?,
            None => first_host,
        };
        let range_end = match non_empty(range_end) {
            Some(t) => in_subnet("rangeEnd", parse_ip("rangeEnd", t)?)?,
            None => last_default,
        };
        if ip_to_u128(range_start) > ip_to_u128(range_end) {
            return Err(format!(
                "rangeStart {range_start} is after rangeEnd {range_end} in network {subnet}"
            ));
        }
        let r = Range {
            subnet,
            range_start,
            range_end,
            gateway,
        };
        if !v4 {
            let mapped_lo: u128 = 0xffff << 32;
            let mapped_hi = mapped_lo | 0xffff_ffff;
            if r.start() <= mapped_hi && mapped_lo <= r.end() {
                return Err(format!(
                    "range {r} overlaps the IPv4-mapped block ::ffff:0:0/96"
                ));
            }
        }
        Ok(r)
    }

    /// True for an IPv4 range.
    pub fn is_ipv4(&self) -> bool {
        self.subnet.is_ipv4()
    }

    /// First address as an ordinal.
    pub(crate) fn start(&self) -> u128 {
        ip_to_u128(self.range_start)
    }

    /// Last address as an ordinal.
    pub(crate) fn end(&self) -> u128 {
        ip_to_u128(self.range_end)
    }

    /// The subnet's network address as an ordinal.
    pub(crate) fn network(&self) -> u128 {
        ip_to_u128(self.subnet.network())
    }

    /// The IPv4 broadcast address as an ordinal (`None` for IPv6, which has
    /// no broadcast).
    pub(crate) fn broadcast(&self) -> Option<u128> {
        match self.subnet {
            IpNetwork::V4(n) => Some(u128::from(u32::from(n.broadcast()))),
            IpNetwork::V6(_) => None,
        }
    }

    /// host-local `Range.Contains`: same family, inside the subnet and
    /// between `range_start` and `range_end` inclusive. IPv4-mapped IPv6
    /// addresses are canonicalized to IPv4 first.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        if ip.is_ipv4() != self.is_ipv4() || !self.subnet.contains(ip) {
            return false;
        }
        let v = ip_to_u128(ip);
        self.start() <= v && v <= self.end()
    }

    /// host-local `Range.Overlaps`: same family and the `[start, end]`
    /// intervals intersect.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.is_ipv4() == other.is_ipv4()
            && self.start() <= other.end()
            && other.start() <= self.end()
    }

    /// The address with the subnet's prefix length, as returned to the
    /// runtime (host-local returns `IPNet{IP, Subnet.Mask}`).
    pub fn with_prefix(&self, ip: IpAddr) -> IpNetwork {
        IpNetwork::new(ip, self.subnet.prefix()).expect("prefix of a valid subnet")
    }

    /// True when `v` (an ordinal inside this range) is the subnet's network
    /// address or its IPv4 broadcast address: never handed out (host-local
    /// only avoids them through its defaults; we also skip them when a
    /// `rangeStart`/`rangeEnd` includes them explicitly).
    pub(crate) fn is_network_or_broadcast(&self, v: u128) -> bool {
        v == self.network() || Some(v) == self.broadcast()
    }
}

impl fmt::Display for Range {
    /// host-local `Range.String`: `"<rangeStart>-<rangeEnd>"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.range_start, self.range_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn r(subnet: &str, start: Option<&str>, end: Option<&str>, gw: Option<&str>) -> Range {
        Range::new(subnet, start, end, gw).unwrap()
    }

    #[test]
    fn v4_defaults_like_host_local() {
        // range_test.go "should generate sane defaults for ipv4 with a clean prefix"
        let x = r("192.0.2.0/24", None, None, None);
        assert_eq!(x.subnet.to_string(), "192.0.2.0/24");
        assert_eq!(x.range_start, ip("192.0.2.1"));
        assert_eq!(x.range_end, ip("192.0.2.254"));
        assert_eq!(x.gateway, ip("192.0.2.1"));
        let y = r("192.0.2.0/25", None, None, None);
        assert_eq!(y.range_end, ip("192.0.2.126"));
        assert_eq!(y.to_string(), "192.0.2.1-192.0.2.126");
    }

    #[test]
    fn v6_defaults_like_host_local() {
        let x = r("2001:DB8:1::/64", None, None, None);
        assert_eq!(x.range_start, ip("2001:db8:1::1"));
        assert_eq!(x.range_end, ip("2001:db8:1::ffff:ffff:ffff:ffff"));
        assert_eq!(x.gateway, ip("2001:db8:1::1"));
        assert_eq!(x.broadcast(), None);
    }

    #[test]
    fn empty_strings_count_as_absent() {
        let x = r("10.0.0.0/29", Some(""), Some(" "), Some(""));
        assert_eq!(x, r("10.0.0.0/29", None, None, None));
    }

    #[test]
    fn explicit_fields_are_kept_and_canonicalized() {
        let x = r(
            "10.1.2.0/24",
            Some("10.1.2.9"),
            Some("::ffff:10.1.2.20"),
            Some("10.1.2.30"),
        );
        assert_eq!(x.range_start, ip("10.1.2.9"));
        assert_eq!(x.range_end, ip("10.1.2.20"));
        assert_eq!(x.gateway, ip("10.1.2.30"));
    }

    #[test]
    fn rejects_host_bits_with_host_local_message() {
        assert_eq!(
            Range::new("192.0.2.12/24", None, None, None).unwrap_err(),
            "Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0"
        );
        assert_eq!(
            Range::new("2001:db8:24:19ff::/63", None, None, None).unwrap_err(),
            "Network has host bits set. For a subnet mask of length 63 the network address is 2001:db8:24:19fe::"
        );
    }

    #[test]
    fn rejects_too_small_networks() {
        for s in [
            "192.0.2.0/31",
            "192.0.2.0/32",
            "2001:db8::/127",
            "2001:db8::/128",
        ] {
            let e = Range::new(s, None, None, None).unwrap_err();
            assert_eq!(e, format!("Network {s} too small to allocate from"));
        }
        r("192.0.2.0/30", None, None, None);
        r("2001:db8::/126", None, None, None);
    }

    #[test]
    fn rejects_values_outside_the_subnet() {
        let e = Range::new("192.0.2.0/24", Some("192.0.3.0"), None, None).unwrap_err();
        assert_eq!(e, "rangeStart 192.0.3.0 not in network 192.0.2.0/24");
        let e = Range::new("192.0.2.0/24", None, Some("192.0.4.0"), None).unwrap_err();
        assert_eq!(e, "rangeEnd 192.0.4.0 not in network 192.0.2.0/24");
        let e = Range::new("192.0.2.0/24", None, None, Some("192.0.9.1")).unwrap_err();
        assert_eq!(e, "gateway 192.0.9.1 not in network 192.0.2.0/24");
        let e = Range::new("192.0.2.0/24", None, Some("2001:db8::1"), None).unwrap_err();
        assert_eq!(e, "rangeEnd 2001:db8::1 not in network 192.0.2.0/24");
        let e =
            Range::new("192.0.2.0/24", Some("192.0.2.50"), Some("192.0.2.40"), None).unwrap_err();
        assert_eq!(
            e,
            "rangeStart 192.0.2.50 is after rangeEnd 192.0.2.40 in network 192.0.2.0/24"
        );
    }

    #[test]
    fn rejects_unparsable_values() {
        assert!(Range::new("10.0.0.0", None, None, None)
            .unwrap_err()
            .contains("\"10.0.0.0\" is not in CIDR notation"));
        assert!(Range::new("10.0.0.0/255.255.255.0", None, None, None)
            .unwrap_err()
            .contains("CIDR"));
        assert!(Range::new("10.0.0.0/33", None, None, None)
            .unwrap_err()
            .contains("CIDR"));
        assert!(Range::new("10.0.0.0/24", Some("10.0.0.x"), None, None)
            .unwrap_err()
            .contains("rangeStart \"10.0.0.x\" is not an IP address"));
    }

    #[test]
    fn rejects_ipv4_mapped_v6() {
        assert!(Range::new("::ffff:10.0.0.0/120", None, None, None)
            .unwrap_err()
            .contains("IPv4-mapped"));
        assert!(Range::new("::/64", None, None, None)
            .unwrap_err()
            .contains("::ffff:0:0/96"));
        r("::/64", None, Some("::fffe:ffff:ffff"), None);
    }

    #[test]
    fn contains_checks_family_subnet_and_bounds() {
        let x = r(
            "192.168.1.0/24",
            Some("192.168.1.10"),
            Some("192.168.1.20"),
            None,
        );
        assert!(x.contains(ip("192.168.1.10")));
        assert!(x.contains(ip("192.168.1.20")));
        assert!(x.contains(ip("::ffff:192.168.1.15")));
        assert!(!x.contains(ip("192.168.1.9")));
        assert!(!x.contains(ip("192.168.1.21")));
        assert!(!x.contains(ip("192.168.2.15")));
        assert!(!x.contains(ip("2001:db8::15")));
        let y = r(
            "2001:db8:1::/64",
            Some("2001:db8:1::10"),
            Some("2001:db8:1::20"),
            None,
        );
        assert!(y.contains(ip("2001:db8:1::10")));
        assert!(!y.contains(ip("2001:db8:1::21")));
        assert!(!y.contains(ip("192.168.1.15")));
    }

    #[test]
    fn overlaps_table_from_host_local() {
        // range_test.go "Detecting overlap"
        let cases = [
            (
                r("10.0.0.0/24", None, None, None),
                r("10.0.1.0/24", None, None, None),
                false,
            ),
            (
                r("10.0.0.0/24", None, None, None),
                r("::/24", None, Some("::1:0"), None),
                false,
            ),
            (
                r("10.0.0.0/24", None, None, None),
                r("10.0.0.0/24", None, None, None),
                true,
            ),
            (
                r("10.0.0.0/20", None, None, None),
                r("10.0.1.0/24", None, None, None),
                true,
            ),
            (
                r("10.0.0.0/24", None, Some("10.0.0.127"), None),
                r("10.0.0.0/24", Some("10.0.0.128"), None, None),
                false,
            ),
            (
                r("10.0.0.0/24", None, Some("10.0.0.127"), None),
                r("10.0.0.0/24", Some("10.0.0.127"), None, None),
                true,
            ),
        ];
        for (i, (a, b, want)) in cases.iter().enumerate() {
            assert_eq!(a.overlaps(b), *want, "case {i}");
            assert_eq!(b.overlaps(a), *want, "case {i} reversed");
        }
    }

    #[test]
    fn network_and_broadcast_detection() {
        let x = r("10.0.0.0/29", Some("10.0.0.0"), Some("10.0.0.7"), None);
        assert!(x.is_network_or_broadcast(ip_to_u128(ip("10.0.0.0"))));
        assert!(x.is_network_or_broadcast(ip_to_u128(ip("10.0.0.7"))));
        assert!(!x.is_network_or_broadcast(ip_to_u128(ip("10.0.0.6"))));
        let y = r(
            "2001:db8::/126",
            Some("2001:db8::"),
            Some("2001:db8::3"),
            None,
        );
        assert!(y.is_network_or_broadcast(ip_to_u128(ip("2001:db8::"))));
        assert!(!y.is_network_or_broadcast(ip_to_u128(ip("2001:db8::3"))));
    }

    #[test]
    fn with_prefix_uses_subnet_prefix() {
        let x = r("10.0.0.0/29", None, None, None);
        assert_eq!(x.with_prefix(ip("10.0.0.3")).to_string(), "10.0.0.3/29");
    }

    #[test]
    fn ipv6_text_form_matches_go() {
        // Go's net.IP.String implements RFC 5952 (compress the longest run of
        // >= 2 zero groups, leftmost on ties, lower case); the per-IP file
        // names must be byte-identical so O_EXCL excludes host-local too.
        let cases = [
            ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
            ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
            ("2001:0:0:1:0:0:0:1", "2001:0:0:1::1"),
            ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("0:0:0:0:0:0:0:0", "::"),
            ("::1.2.3.4", "::102:304"),
            ("fd00:0:0:0:0:0:0:100", "fd00::100"),
        ];
        for (input, go) in cases {
            assert_eq!(ip(input).to_string(), go, "{input}");
        }
    }
}
