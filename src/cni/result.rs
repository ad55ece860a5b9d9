//! The CNI result and its wire form for every supported version (SPEC.md "Result";
//! libcni `pkg/types/040`, `pkg/types/100`, and SPEC.md 1.1.0 additions).
//!
//! [`CniOutput`] is the version-independent model (the 1.1.0 superset). It is printed
//! with [`CniOutput::to_json`] in the configuration's `cniVersion`, and read back from
//! a `prevResult` of any supported version with [`CniOutput::from_json`].

use super::error::CniError;
use super::version::{parse_version, Version};
use ipnetwork::IpNetwork;
use serde_json::{json, Map, Value};
use std::net::IpAddr;

/// An interface of the result (`interfaces[]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    /// Interface name (inside the sandbox when `sandbox` is set).
    pub name: String,
    /// Hardware address as colon hex; 20 octets on IPoIB, 6 on Ethernet; may be empty.
    pub mac: String,
    /// MTU in bytes (1.1.0 only).
    pub mtu: Option<u32>,
    /// The netns path when the interface is inside the container; empty for host interfaces.
    pub sandbox: String,
    /// PCI address of the device (1.1.0 only, `pciID`).
    pub pci_id: Option<String>,
}

/// An address of the result (`ips[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with prefix length, e.g. `10.56.217.2/24`.
    pub address: IpNetwork,
    /// Gateway, when the range has one.
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    pub interface: Option<usize>,
}

/// A route of the result (`routes[]`; SPEC.md "Result", the optional `mtu`, `advmss`,
/// `priority`, `table` and `scope` of CNI 1.1.0, libcni `pkg/types/types.go` `Route`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination network.
    pub dst: IpNetwork,
    /// Next hop; `None` means the default gateway of the matching address.
    pub gw: Option<IpAddr>,
    /// Route MTU in bytes (`RTAX_MTU`), 0 or absent: none.
    pub mtu: Option<u32>,
    /// Advertised MSS in bytes (`RTAX_ADVMSS`).
    pub advmss: Option<u32>,
    /// Route metric (`RTA_PRIORITY`); absent or 0: the kernel's default.
    pub priority: Option<u32>,
    /// Routing table id (`RTA_TABLE`); absent: the main table.
    pub table: Option<u32>,
    /// Route scope (`rtm_scope`, include/uapi/linux/rtnetlink.h `rt_scope_t`: 0 universe,
    /// 200 site, 253 link, 254 host).
    pub scope: Option<u8>,
}

impl Route {
    /// A route to `dst` via `gw` with no other attribute.
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }
}

/// The version-independent CNI result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CniOutput {
    /// `interfaces`.
    pub interfaces: Vec<Interface>,
    /// `ips`.
    pub ips: Vec<IpConfig>,
    /// `routes`.
    pub routes: Vec<Route>,
    /// `dns`, passed through unchanged (an object).
    pub dns: Option<Value>,
}

fn ip_family(a: &IpNetwork) -> &'static str {
    if a.is_ipv4() {
        "4"
    } else {
        "6"
    }
}

impl CniOutput {
    /// The result in the wire form of `version`.
    ///
    /// 0.3.0, 0.3.1 and 0.4.0 carry `ips[].version` ("4"/"6"); 1.0.0 drops it;
    /// 1.1.0 adds `interfaces[].mtu` and `interfaces[].pciID`.
    pub fn to_json(&self, version: Version) -> Value {
        let v11 = version >= Version::V1_1_0;
        let legacy = version < Version::V1_0_0;
        let interfaces: Vec<Value> = self
            .interfaces
            .iter()
            .map(|i| {
                let mut o = Map::new();
                o.insert("name".into(), json!(i.name));
                if !i.mac.is_empty() {
                    o.insert("mac".into(), json!(i.mac));
                }
                if v11 {
                    if let Some(m) = i.mtu {
                        o.insert("mtu".into(), json!(m));
                    }
                }
                if !i.sandbox.is_empty() {
                    o.insert("sandbox".into(), json!(i.sandbox));
                }
                if v11 {
                    if let Some(p) = &i.pci_id {
                        o.insert("pciID".into(), json!(p));
                    }
                }
                Value::Object(o)
            })
            .collect();
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut o = Map::new();
                if legacy {
                    o.insert("version".into(), json!(ip_family(&ip.address)));
                }
                if let Some(i) = ip.interface {
                    o.insert("interface".into(), json!(i));
                }
                o.insert("address".into(), json!(ip.address.to_string()));
                if let Some(g) = ip.gateway {
                    o.insert("gateway".into(), json!(g.to_string()));
                }
                Value::Object(o)
            })
            .collect();
        if version <= Version::V0_2_0 {
            return self.to_json_020(version);
        }
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|r| route_json(r, version >= Version::V1_0_0))
            .collect();
        let mut out = Map::new();
        out.insert("cniVersion".into(), json!(version.as_str()));
        if !interfaces.is_empty() {
            out.insert("interfaces".into(), Value::Array(interfaces));
        }
        if !ips.is_empty() {
            out.insert("ips".into(), Value::Array(ips));
        }
        if !routes.is_empty() {
            out.insert("routes".into(), Value::Array(routes));
        }
        out.insert("dns".into(), self.dns.clone().unwrap_or_else(|| json!({})));
        Value::Object(out)
    }

    /// The 0.1.0/0.2.0 form (libcni `pkg/types/020` `Result`, converted as libcni
    /// `pkg/types/040` `convertTo02x` does): the first IPv4 address in `ip4`, the first
    /// IPv6 address in `ip6`, each with its gateway and the routes of its family; no
    /// `interfaces`. A result without addresses (no IPAM) prints only `cniVersion` and
    /// `dns` (libcni refuses to convert it; see docs/design.md "Differences from the Go plugin").
    fn to_json_020(&self, version: Version) -> Value {
        let mut out = Map::new();
        out.insert("cniVersion".into(), json!(version.as_str()));
        for (key, v4) in [("ip4", true), ("ip6", false)] {
            let Some(ip) = self.ips.iter().find(|ip| ip.address.is_ipv4() == v4) else {
                continue;
            };
            let mut o = Map::new();
            o.insert("ip".into(), json!(ip.address.to_string()));
            if let Some(g) = ip.gateway {
                o.insert("gateway".into(), json!(g.to_string()));
            }
            let routes: Vec<Value> = self
                .routes
                .iter()
                .filter(|r| r.dst.is_ipv4() == v4)
                .map(|r| route_json(r, false))
                .collect();
            if !routes.is_empty() {
                o.insert("routes".into(), Value::Array(routes));
            }
            out.insert(key.into(), Value::Object(o));
        }
        out.insert("dns".into(), self.dns.clone().unwrap_or_else(|| json!({})));
        Value::Object(out)
    }

    /// Reads a result of any supported version (0.1.0 to 1.1.0), e.g. a `prevResult` or
    /// a delegated IPAM plugin's output (`ip4`/`ip6` objects for 0.1.0/0.2.0).
    ///
    /// Errors (code 7 for malformed content, naming the field but not the document:
    /// the caller says whose result it is, a `prevResult` or an IPAM plugin's; code 1
    /// for an unsupported `cniVersion`).
    pub fn from_json(v: &Value) -> Result<CniOutput, CniError> {
        let bad = |what: &str| CniError::config(what.to_string());
        let obj = v.as_object().ok_or_else(|| bad("not a JSON object"))?;
        if let Some(ver) = obj.get("cniVersion").and_then(Value::as_str) {
            parse_version(ver)?;
        }
        let mut out = CniOutput::default();
        if let Some(ifs) = obj.get("interfaces") {
            for i in ifs
                .as_array()
                .ok_or_else(|| bad("interfaces is not a list"))?
            {
                let s = |k: &str| i.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                out.interfaces.push(Interface {
                    name: s("name"),
                    mac: s("mac"),
                    mtu: i.get("mtu").and_then(Value::as_u64).map(|m| m as u32),
                    sandbox: s("sandbox"),
                    pci_id: i.get("pciID").and_then(Value::as_str).map(str::to_string),
                });
            }
        }
        if let Some(ips) = obj.get("ips") {
            for ip in ips.as_array().ok_or_else(|| bad("ips is not a list"))? {
                let addr = ip
                    .get("address")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("ips[].address is missing"))?;
                let address: IpNetwork = addr.parse().map_err(|_| {
                    bad(&format!("ips[].address {addr:?} is not an address/prefix"))
                })?;
                let gateway = match ip.get("gateway").and_then(Value::as_str) {
                    Some(g) => Some(
                        g.parse()
                            .map_err(|_| bad(&format!("ips[].gateway {g:?} is not an address")))?,
                    ),
                    None => None,
                };
                let interface = ip
                    .get("interface")
                    .and_then(Value::as_u64)
                    .map(|i| i as usize);
                out.ips.push(IpConfig {
                    address,
                    gateway,
                    interface,
                });
            }
        }
        if let Some(routes) = obj.get("routes") {
            for r in routes
                .as_array()
                .ok_or_else(|| bad("routes is not a list"))?
            {
                out.routes.push(parse_route(r, "routes[]")?);
            }
        }
        // 0.1.0/0.2.0: `ip4`/`ip6` {ip, gateway, routes}.
        for key in ["ip4", "ip6"] {
            let Some(o) = obj.get(key).filter(|o| !o.is_null()) else {
                continue;
            };
            let ip = o
                .get("ip")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&format!("{key}.ip is missing")))?;
            let address: IpNetwork = ip
                .parse()
                .map_err(|_| bad(&format!("{key}.ip {ip:?} is not an address/prefix")))?;
            let gateway = match o.get("gateway").and_then(Value::as_str) {
                Some(g) => Some(
                    g.parse()
                        .map_err(|_| bad(&format!("{key}.gateway {g:?} is not an address")))?,
                ),
                None => None,
            };
            out.ips.push(IpConfig {
                address,
                gateway,
                interface: None,
            });
            if let Some(rs) = o.get("routes") {
                for r in rs
                    .as_array()
                    .ok_or_else(|| bad(&format!("{key}.routes is not a list")))?
                {
                    out.routes.push(parse_route(r, &format!("{key}.routes[]"))?);
                }
            }
        }
        out.dns = obj.get("dns").cloned();
        Ok(out)
    }
}

/// One route object; the CNI 1.1.0 attributes only when `extended` (1.0.0 and later:
/// libcni's `types.Route` carries them for every 1.x result).
fn route_json(r: &Route, extended: bool) -> Value {
    let mut o = Map::new();
    o.insert("dst".into(), json!(r.dst.to_string()));
    if let Some(g) = r.gw {
        o.insert("gw".into(), json!(g.to_string()));
    }
    if extended {
        for (k, v) in [
            ("mtu", r.mtu),
            ("advmss", r.advmss),
            ("priority", r.priority),
            ("table", r.table),
            ("scope", r.scope.map(u32::from)),
        ] {
            if let Some(v) = v {
                o.insert(k.into(), json!(v));
            }
        }
    }
    Value::Object(o)
}

/// Reads one route object (`dst`, `gw`, and the optional 1.1.0 attributes, whatever
/// the result's version: a delegate may send them).
///
/// Errors: code 7 naming `at` and the bad field.
fn parse_route(r: &Value, at: &str) -> Result<Route, CniError> {
    let bad = |what: String| CniError::config(format!("{at}.{what}"));
    let d = r
        .get("dst")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("dst is missing".into()))?;
    let dst = d
        .parse()
        .map_err(|_| bad(format!("dst {d:?} is not a network")))?;
    let gw = match r.get("gw").and_then(Value::as_str) {
        Some(g) => Some(
            g.parse()
                .map_err(|_| bad(format!("gw {g:?} is not an address")))?,
        ),
        None => None,
    };
    let num = |k: &str, max: u64| -> Result<Option<u64>, CniError> {
        match r.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| *n <= max)
                .map(Some)
                .ok_or_else(|| bad(format!("{k} {v} is not an integer in 0..={max}"))),
        }
    };
    Ok(Route {
        dst,
        gw,
        mtu: num("mtu", u32::MAX.into())?.map(|n| n as u32),
        advmss: num("advmss", u32::MAX.into())?.map(|n| n as u32),
        priority: num("priority", u32::MAX.into())?.map(|n| n as u32),
        table: num("table", u32::MAX.into())?.map(|n| n as u32),
        scope: num("scope", u8::MAX.into())?.map(|n| n as u8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CniOutput {
        CniOutput {
            interfaces: vec![Interface {
                name: "net1".into(),
                mac: "00:00:10:49:fe:80:00:00:00:00:00:00:02:00:00:00:00:00:00:01".into(),
                mtu: Some(2044),
                sandbox: "/var/run/netns/pod".into(),
                pci_id: Some("0000:af:00.2".into()),
            }],
            ips: vec![
                IpConfig {
                    address: "10.56.217.2/24".parse().unwrap(),
                    gateway: Some("10.56.217.1".parse().unwrap()),
                    interface: Some(0),
                },
                IpConfig {
                    address: "fd00::2/64".parse().unwrap(),
                    gateway: None,
                    interface: Some(0),
                },
            ],
            routes: vec![Route {
                priority: Some(100),
                table: Some(7),
                scope: Some(0),
                ..Route::new("0.0.0.0/0".parse().unwrap(), None)
            }],
            dns: None,
        }
    }

    #[test]
    fn legacy_versions_carry_ip_version() {
        for v in [Version::V0_3_0, Version::V0_3_1, Version::V0_4_0] {
            let j = sample().to_json(v);
            assert_eq!(j["cniVersion"], v.as_str());
            assert_eq!(j["ips"][0]["version"], "4");
            assert_eq!(j["ips"][1]["version"], "6");
            assert!(j["interfaces"][0].get("mtu").is_none());
            assert!(j["interfaces"][0].get("pciID").is_none());
        }
    }

    #[test]
    fn v1_0_0_drops_ip_version_and_has_no_1_1_fields() {
        let j = sample().to_json(Version::V1_0_0);
        assert!(j["ips"][0].get("version").is_none());
        assert_eq!(j["ips"][0]["address"], "10.56.217.2/24");
        assert_eq!(j["ips"][0]["gateway"], "10.56.217.1");
        assert_eq!(j["ips"][0]["interface"], 0);
        assert!(j["interfaces"][0].get("pciID").is_none());
        assert!(j["interfaces"][0].get("mtu").is_none());
        assert_eq!(j["interfaces"][0]["sandbox"], "/var/run/netns/pod");
    }

    #[test]
    fn v1_1_0_has_pci_id_and_mtu() {
        let j = sample().to_json(Version::V1_1_0);
        assert_eq!(j["interfaces"][0]["pciID"], "0000:af:00.2");
        assert_eq!(j["interfaces"][0]["mtu"], 2044);
        assert!(j["ips"][0].get("version").is_none());
        assert_eq!(j["routes"][0]["dst"], "0.0.0.0/0");
        assert_eq!(j["dns"], json!({}));
    }

    #[test]
    fn round_trip_through_every_version() {
        for v in Version::ALL {
            let back = CniOutput::from_json(&sample().to_json(v)).unwrap();
            let mut expect = sample();
            if v <= Version::V0_2_0 {
                // 0.x.0: one address per family, no interfaces, no route attributes.
                expect.interfaces.clear();
                for ip in &mut expect.ips {
                    ip.interface = None;
                }
                expect.routes[0] = Route::new(expect.routes[0].dst, None);
            } else if v < Version::V1_0_0 {
                expect.routes[0] = Route::new(expect.routes[0].dst, None);
            }
            if v < Version::V1_1_0 && !expect.interfaces.is_empty() {
                expect.interfaces[0].mtu = None;
                expect.interfaces[0].pci_id = None;
            }
            expect.dns = Some(json!({}));
            assert_eq!(back, expect, "{}", v.as_str());
        }
    }

    #[test]
    fn prev_result_errors() {
        assert_eq!(CniOutput::from_json(&json!([])).unwrap_err().code, 7);
        assert_eq!(
            CniOutput::from_json(&json!({"ips": [{"address": "nope"}]}))
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(
            CniOutput::from_json(&json!({"cniVersion": "0.0.9"}))
                .unwrap_err()
                .code,
            1
        );
        assert_eq!(
            CniOutput::from_json(&json!({"routes": [{"dst": "0.0.0.0/0", "scope": 300}]}))
                .unwrap_err()
                .code,
            7
        );
    }

    #[test]
    fn v0_2_0_form_as_libcni_converts_it() {
        let j = sample().to_json(Version::V0_2_0);
        assert_eq!(
            j,
            json!({"cniVersion": "0.2.0",
                "ip4": {"ip": "10.56.217.2/24", "gateway": "10.56.217.1",
                        "routes": [{"dst": "0.0.0.0/0"}]},
                "ip6": {"ip": "fd00::2/64"},
                "dns": {}})
        );
        // host-local's 0.2.0 output, read back as a delegate result.
        let r = CniOutput::from_json(&json!({"cniVersion": "0.2.0",
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1",
                    "routes": [{"dst": "10.0.0.0/8", "gw": "10.1.0.254"}]}}))
        .unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.1.0.5/16");
        assert_eq!(r.ips[0].gateway, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(r.routes[0].gw, Some("10.1.0.254".parse().unwrap()));
        // No IPAM: no ip4/ip6 at all.
        assert_eq!(
            CniOutput::default().to_json(Version::V0_1_0),
            json!({"cniVersion": "0.1.0", "dns": {}})
        );
    }

    #[test]
    fn route_attributes_from_1_0_0_on() {
        let j = sample().to_json(Version::V1_0_0);
        assert_eq!(
            j["routes"][0],
            json!({"dst": "0.0.0.0/0", "priority": 100, "table": 7, "scope": 0})
        );
        assert_eq!(
            sample().to_json(Version::V0_4_0)["routes"][0],
            json!({"dst": "0.0.0.0/0"})
        );
    }
}
