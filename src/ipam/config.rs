//! Parsing and validation of the `ipam` object: host-local's schema
//! (plugins/ipam/host-local/backend/allocator/config.go `IPAMConfig`,
//! `LoadIPAMConfig`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use serde::Deserialize;

use super::disk::DEFAULT_DATA_DIR;
use super::error::IpamError;
use super::range::{parse_cidr, parse_ip, Range};
use super::range_set::RangeSet;

/// One range object as written in JSON (`{subnet, rangeStart, rangeEnd,
/// gateway}`); unknown keys are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRange {
    /// `subnet`: CIDR, network address (required for a range).
    subnet: Option<String>,
    /// `rangeStart`: first address, inclusive.
    range_start: Option<String>,
    /// `rangeEnd`: last address, inclusive.
    range_end: Option<String>,
    /// `gateway`: returned with addresses, never allocated.
    gateway: Option<String>,
}

/// One route object (`{dst, gw}`); unknown keys (mtu, priority, ...) are
/// ignored.
#[derive(Debug, Deserialize)]
struct RawRoute {
    /// `dst`: destination CIDR (required).
    dst: Option<String>,
    /// `gw`: next hop (optional).
    gw: Option<String>,
}

/// The `ipam` object as written in JSON.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIpam {
    /// `type`.
    #[serde(rename = "type")]
    ipam_type: Option<String>,
    /// Legacy top-level `subnet`/`rangeStart`/`rangeEnd`/`gateway`.
    #[serde(flatten)]
    legacy: RawRange,
    /// `ranges`: list of range sets.
    ranges: Option<Vec<Vec<RawRange>>>,
    /// `routes`.
    routes: Option<Vec<RawRoute>>,
    /// `dataDir`.
    data_dir: Option<String>,
}

/// A route returned with every allocation (CNI `types.Route`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// Destination network, as written (host bits are kept, like Go's
    /// `types.ParseCIDR`).
    pub dst: IpNetwork,
    /// Next hop; `None` means "the interface's gateway / on-link" as the
    /// consumer decides.
    pub gw: Option<IpAddr>,
}

/// The parsed, validated and normalised `ipam` configuration.
///
/// `ranges[i]` is range set `i`: an attachment gets one address from each,
/// and `last_reserved_ip.<i>` is its round-robin cursor on disk. A legacy
/// top-level `subnet` becomes range set 0, before the `ranges` entries
/// (host-local `LoadIPAMConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamConfig {
    /// The `type` key as written (the caller dispatches on it; this module
    /// does not insist on [`super::BUILTIN_TYPE`]). Empty when absent.
    pub ipam_type: String,
    /// The range sets, non-empty, validated, non-overlapping.
    pub ranges: Vec<RangeSet>,
    /// Routes to return with each allocation, in configuration order.
    pub routes: Vec<RouteConfig>,
    /// `dataDir`, default `/var/lib/cni/networks` (also when `""`).
    pub data_dir: PathBuf,
}

/// The rule for a non-empty `dataDir`: an absolute path without NUL. A relative one
/// would be resolved against whatever directory the runtime started the plugin in
/// (host-local accepts it; we do not).
fn check_data_dir(d: &str) -> Result<(), IpamError> {
    if d.contains('\0') {
        return Err(invalid(format!("dataDir {d:?} contains NUL")));
    }
    if !d.starts_with('/') {
        return Err(invalid(format!("dataDir {d:?} must be an absolute path")));
    }
    Ok(())
}

/// Checks the `dataDir` value of an `ipam` object alone (`None`, JSON null and `""`
/// mean the default [`DEFAULT_DATA_DIR`]), so the network configuration can refuse a
/// bad one for every verb at parse time; [`IpamConfig::from_json`] applies the same rule.
///
/// Errors: [`IpamError::InvalidConfig`] naming the value when it is not a string, is
/// relative or contains NUL.
pub fn validate_data_dir(v: Option<&serde_json::Value>) -> Result<(), IpamError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(serde_json::Value::String(d)) if d.is_empty() => Ok(()),
        Some(serde_json::Value::String(d)) => check_data_dir(d),
        Some(other) => Err(invalid(format!("dataDir must be a string, got {other}"))),
    }
}

/// Shorthand for [`IpamError::InvalidConfig`].
fn invalid(msg: String) -> IpamError {
    IpamError::InvalidConfig(msg)
}

/// Validate one raw range object (`subnet` is required).
fn range_from_raw(raw: &RawRange) -> Result<Range, String> {
    let subnet = raw
        .subnet
        .as_deref()
        .ok_or_else(|| "range has no \"subnet\"".to_string())?;
    Range::new(
        subnet,
        raw.range_start.as_deref(),
        raw.range_end.as_deref(),
        raw.gateway.as_deref(),
    )
}

impl RawIpam {
    /// What [`IpamConfig::from_json`] logs as warnings: top-level
    /// `rangeStart`/`rangeEnd`/`gateway` without a top-level `subnet` are ignored, as
    /// host-local ignores them.
    fn warnings(&self) -> Vec<String> {
        let l = &self.legacy;
        let no_subnet = l.subnet.as_deref().is_none_or(str::is_empty);
        if no_subnet && (l.range_start.is_some() || l.range_end.is_some() || l.gateway.is_some()) {
            vec!["ipam: top-level rangeStart/rangeEnd/gateway ignored without a top-level subnet (as host-local does)".into()]
        } else {
            Vec::new()
        }
    }
}

/// The warnings [`IpamConfig::from_json`] logs for the built-in IPAM configuration
/// `ipam` (empty when it cannot be parsed: then it is refused instead), for
/// `doctor --conf` to report what ADD would log.
pub fn warnings(ipam: &serde_json::Value) -> Vec<String> {
    serde_json::from_value::<RawIpam>(ipam.clone())
        .map(|r| r.warnings())
        .unwrap_or_default()
}

/// Phase "decode" of [`IpamConfig::from_json`]: a JSON object whose keys have their
/// JSON types. Nothing else can be checked without it.
fn decode(ipam: &serde_json::Value) -> Result<RawIpam, IpamError> {
    if !ipam.is_object() {
        return Err(invalid(format!(
            "\"ipam\" must be a JSON object, got {ipam}"
        )));
    }
    serde_json::from_value(ipam.clone()).map_err(|e| invalid(format!("cannot parse \"ipam\": {e}")))
}

/// The raw range sets: the legacy top-level range (when `subnet` is given) first, then
/// `ranges`.
fn raw_sets(raw: &mut RawIpam) -> Vec<Vec<RawRange>> {
    let mut sets: Vec<Vec<RawRange>> = Vec::new();
    if raw.legacy.subnet.as_deref().is_some_and(|s| !s.is_empty()) {
        sets.push(vec![std::mem::take(&mut raw.legacy)]);
    }
    sets.extend(raw.ranges.take().unwrap_or_default());
    sets
}

/// Phase "ranges": range set `i` (each range valid, one family, no overlap within).
fn range_set(i: usize, raw_set: &[RawRange]) -> Result<RangeSet, IpamError> {
    raw_set
        .iter()
        .map(range_from_raw)
        .collect::<Result<Vec<_>, _>>()
        .and_then(RangeSet::new)
        .map_err(|e| invalid(format!("invalid range set {i}: {e}")))
}

/// Phase "overlaps": each pair of the (valid) range sets `sets`, with their indices, that
/// overlaps.
fn overlaps(sets: &[(usize, RangeSet)]) -> impl Iterator<Item = IpamError> + '_ {
    sets.iter().enumerate().flat_map(move |(n, (i, a))| {
        sets[n + 1..]
            .iter()
            .filter(|(_, b)| a.overlaps(b))
            .map(move |(j, b)| {
                invalid(format!(
                    "range set {i} ({a}) overlaps with range set {j} ({b})"
                ))
            })
    })
}

/// Phase "routes": route `i` (a `dst` CIDR, an optional `gw` address).
fn route(i: usize, r: &RawRoute) -> Result<RouteConfig, IpamError> {
    let dst = r
        .dst
        .as_deref()
        .ok_or_else(|| invalid(format!("route {i}: missing \"dst\"")))?;
    let dst = parse_cidr("dst", dst).map_err(|e| invalid(format!("route {i}: {e}")))?;
    let gw = match r.gw.as_deref().filter(|g| !g.trim().is_empty()) {
        Some(g) => Some(parse_ip("gw", g).map_err(|e| invalid(format!("route {i}: {e}")))?),
        None => None,
    };
    Ok(RouteConfig { dst, gw })
}

/// Phase "dataDir": the default [`DEFAULT_DATA_DIR`] when absent or `""`, else
/// [`check_data_dir`].
fn data_dir(raw: &RawIpam) -> Result<PathBuf, IpamError> {
    match raw.data_dir.as_deref() {
        None | Some("") => Ok(PathBuf::from(DEFAULT_DATA_DIR)),
        Some(d) => check_data_dir(d).map(|()| PathBuf::from(d)),
    }
}

/// Every error [`IpamConfig::from_json`] finds in `ipam`, not only the first it
/// answers (the first here): each range set, each overlap of two valid sets, each
/// route and `dataDir`, by the same phases, for `doctor --conf`.
pub fn errors(ipam: &serde_json::Value) -> Vec<IpamError> {
    let mut raw = match decode(ipam) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let mut out = Vec::new();
    let sets = raw_sets(&mut raw);
    if sets.is_empty() {
        out.push(invalid("no IP ranges specified".to_string()));
    }
    let mut valid = Vec::new();
    for (i, s) in sets.iter().enumerate() {
        match range_set(i, s) {
            Ok(set) => valid.push((i, set)),
            Err(e) => out.push(e),
        }
    }
    out.extend(overlaps(&valid));
    for (i, r) in raw.routes.iter().flatten().enumerate() {
        out.extend(route(i, r).err());
    }
    out.extend(data_dir(&raw).err());
    out
}

impl IpamConfig {
    /// Parse and validate the `ipam` object of a network config.
    ///
    /// Accepts host-local's keys: `type`, `ranges` (a list of range sets,
    /// each a list of `{subnet, rangeStart, rangeEnd, gateway}`), the legacy
    /// top-level `subnet`/`rangeStart`/`rangeEnd`/`gateway` (one range set,
    /// prepended to `ranges`, only considered when `subnet` is present, as in
    /// host-local), `routes` (`[{dst, gw}]`) and `dataDir`. Unknown keys are
    /// ignored. IPv4 and IPv6.
    ///
    /// Checked in phases (decode, ranges, overlaps, routes, dataDir), stopping at
    /// the first error; [`errors`] runs them all.
    ///
    /// Errors ([`IpamError::InvalidConfig`], messages follow host-local's
    /// config.go/range.go/range_set.go wording and name the offending value):
    /// not a JSON object or wrong JSON types; `"no IP ranges specified"`;
    /// `"invalid range set <i>: ..."` for a bad subnet (unparsable, host bits
    /// set, too small), a `rangeStart`/`rangeEnd`/`gateway` outside its
    /// subnet (host-local does not check the gateway; we do),
    /// `rangeStart > rangeEnd` (host-local reports it as "not in network"),
    /// mixed families or overlapping ranges within the set;
    /// `"range set <i> (...) overlaps with range set <j> (...)"`;
    /// `"route <i>: ..."` for a missing/invalid `dst` or invalid `gw`.
    pub fn from_json(ipam: &serde_json::Value) -> Result<IpamConfig, IpamError> {
        let mut raw = decode(ipam)?;
        for w in raw.warnings() {
            log::warn!("{w}");
        }
        let sets = raw_sets(&mut raw);
        if sets.is_empty() {
            return Err(invalid("no IP ranges specified".to_string()));
        }
        let mut ranges = Vec::with_capacity(sets.len());
        for (i, s) in sets.iter().enumerate() {
            ranges.push((i, range_set(i, s)?));
        }
        if let Some(e) = overlaps(&ranges).next() {
            return Err(e);
        }
        let routes = raw
            .routes
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| route(i, r))
            .collect::<Result<Vec<_>, _>>()?;
        let data_dir = data_dir(&raw)?;
        Ok(IpamConfig {
            ipam_type: raw.ipam_type.unwrap_or_default(),
            ranges: ranges.into_iter().map(|(_, s)| s).collect(),
            routes,
            data_dir,
        })
    }

    /// The data directory (`dataDir`); network directories live below it.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn err(v: serde_json::Value) -> String {
        match IpamConfig::from_json(&v) {
            Err(IpamError::InvalidConfig(m)) => m,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn parses_old_style_config() {
        // config_test.go "Should parse an old-style config"
        let c = IpamConfig::from_json(&json!({
            "type": "ib-sriov-ipam",
            "subnet": "10.1.2.0/24",
            "rangeStart": "10.1.2.9",
            "rangeEnd": "10.1.2.20",
            "gateway": "10.1.2.30",
            "somethingElse": {"ignored": true}
        }))
        .unwrap();
        assert_eq!(c.ipam_type, "ib-sriov-ipam");
        assert_eq!(c.ranges.len(), 1);
        let r = &c.ranges[0].ranges[0];
        assert_eq!(r.subnet.to_string(), "10.1.2.0/24");
        assert_eq!(r.range_start, ip("10.1.2.9"));
        assert_eq!(r.range_end, ip("10.1.2.20"));
        assert_eq!(r.gateway, ip("10.1.2.30"));
        assert_eq!(c.data_dir(), Path::new("/var/lib/cni/networks"));
        assert!(c.routes.is_empty());
    }

    #[test]
    fn parses_new_style_config_with_defaults() {
        // config_test.go "Should parse a new-style config"
        let c = IpamConfig::from_json(&json!({
            "type": "ib-sriov-ipam",
            "ranges": [
                [
                    {"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9",
                     "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"},
                    {"subnet": "10.1.4.0/24"}
                ],
                [{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9",
                  "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}]
            ],
            "dataDir": "/run/my-ipam"
        }))
        .unwrap();
        assert_eq!(c.ranges.len(), 2);
        let second = &c.ranges[0].ranges[1];
        assert_eq!(second.range_start, ip("10.1.4.1"));
        assert_eq!(second.range_end, ip("10.1.4.254"));
        assert_eq!(second.gateway, ip("10.1.4.1"));
        assert_eq!(c.ranges[1].ranges[0].range_end, ip("11.1.2.20"));
        assert_eq!(c.data_dir(), Path::new("/run/my-ipam"));
    }

    #[test]
    fn legacy_range_is_prepended_and_empty_data_dir_defaults() {
        let c = IpamConfig::from_json(&json!({
            "subnet": "10.0.0.0/24",
            "ranges": [[{"subnet": "2001:db8::/64"}]],
            "dataDir": ""
        }))
        .unwrap();
        assert!(c.ranges[0].is_ipv4());
        assert!(!c.ranges[1].is_ipv4());
        assert_eq!(
            c.ranges[1].ranges[0].range_end,
            ip("2001:db8::ffff:ffff:ffff:ffff")
        );
        assert_eq!(c.data_dir(), Path::new(DEFAULT_DATA_DIR));
        assert_eq!(c.ipam_type, "");
    }

    #[test]
    fn parses_ipv6_and_routes() {
        let c = IpamConfig::from_json(&json!({
            "type": "ib-sriov-ipam",
            "ranges": [[{"subnet": "fd00:1::/120", "rangeStart": "fd00:1::10",
                         "rangeEnd": "fd00:1::20", "gateway": "fd00:1::fe"}]],
            "routes": [
                {"dst": "0.0.0.0/0"},
                {"dst": "192.168.0.0/16", "gw": "10.1.2.1", "priority": 5},
                {"dst": "::/0", "gw": "fd00:1::fe"}
            ]
        }))
        .unwrap();
        let r = &c.ranges[0].ranges[0];
        assert_eq!(r.gateway, ip("fd00:1::fe"));
        assert_eq!(c.routes.len(), 3);
        assert_eq!(c.routes[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(c.routes[0].gw, None);
        assert_eq!(c.routes[1].gw, Some(ip("10.1.2.1")));
        assert_eq!(c.routes[2].dst.to_string(), "::/0");
    }

    #[test]
    fn rejects_missing_ranges() {
        assert_eq!(
            err(json!({"type": "ib-sriov-ipam"})),
            "no IP ranges specified"
        );
        assert_eq!(err(json!({"ranges": []})), "no IP ranges specified");
        assert_eq!(
            err(json!({"ranges": [[]]})),
            "invalid range set 0: empty range set"
        );
        assert!(err(json!({"ranges": [[{"rangeStart": "10.0.0.1"}]]})).contains("no \"subnet\""));
        assert!(err(json!("nope")).contains("must be a JSON object"));
        assert!(err(json!({"ranges": "10.0.0.0/24"})).starts_with("cannot parse \"ipam\""));
    }

    #[test]
    fn rejects_bad_ranges_naming_the_value() {
        assert_eq!(
            err(json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.5/24"}]]})),
            "invalid range set 1: Network has host bits set. For a subnet mask of length 24 the network address is 10.0.0.0"
        );
        assert_eq!(
            err(json!({"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.1"})),
            "invalid range set 0: rangeStart 10.0.1.1 not in network 10.0.0.0/24"
        );
        assert_eq!(
            err(json!({"subnet": "10.0.0.0/24", "gateway": "10.0.1.1"})),
            "invalid range set 0: gateway 10.0.1.1 not in network 10.0.0.0/24"
        );
        assert_eq!(
            err(json!({"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.8"})),
            "invalid range set 0: rangeStart 10.0.0.9 is after rangeEnd 10.0.0.8 in network 10.0.0.0/24"
        );
        assert_eq!(
            err(json!({"subnet": "10.0.0.0/31"})),
            "invalid range set 0: Network 10.0.0.0/31 too small to allocate from"
        );
    }

    #[test]
    fn rejects_overlap_within_and_across_sets() {
        // config_test.go "Should detect overlap within rangeset"
        assert_eq!(
            err(json!({"ranges": [[{"subnet": "10.1.0.0/22"}, {"subnet": "10.1.2.0/24"}]]})),
            "invalid range set 0: subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap"
        );
        // config_test.go "Should detect overlap between rangesets"
        assert_eq!(
            err(json!({"ranges": [
                [{"subnet": "10.1.0.0/24"}, {"subnet": "10.2.0.0/24"}],
                [{"subnet": "10.3.0.0/24"}, {"subnet": "10.4.0.0/24"}],
                [{"subnet": "10.1.0.0/24"}]
            ]})),
            "range set 0 (10.1.0.1-10.1.0.254,10.2.0.1-10.2.0.254) overlaps with range set 2 (10.1.0.1-10.1.0.254)"
        );
        // The legacy subnet is range set 0.
        assert!(
            err(json!({"subnet": "10.0.0.0/24", "ranges": [[{"subnet": "10.0.0.0/25"}]]}))
                .starts_with("range set 0 (10.0.0.1-10.0.0.254) overlaps with range set 1")
        );
        // Same subnet, disjoint ranges: fine.
        IpamConfig::from_json(&json!({"ranges": [
            [{"subnet": "10.0.0.0/24", "rangeEnd": "10.0.0.127"}],
            [{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.128"}]
        ]}))
        .unwrap();
    }

    #[test]
    fn rejects_mixed_families_in_a_set() {
        // config_test.go "should error on rangesets with different families"
        assert!(
            err(json!({"ranges": [[{"subnet": "192.168.0.0/24"}, {"subnet": "fd00::/64"}]]}))
                .starts_with("invalid range set 0: mixed address families")
        );
    }

    #[test]
    fn rejects_bad_routes() {
        let base = |routes: serde_json::Value| json!({"subnet": "10.0.0.0/24", "routes": routes});
        assert_eq!(
            err(base(json!([{"gw": "10.0.0.1"}]))),
            "route 0: missing \"dst\""
        );
        assert!(
            err(base(json!([{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0"}])))
                .starts_with("route 1: dst \"10.9.0.0\" is not in CIDR notation")
        );
        assert_eq!(
            err(base(json!([{"dst": "0.0.0.0/0", "gw": "x"}]))),
            "route 0: gw \"x\" is not an IP address"
        );
    }

    #[test]
    fn data_dir_must_be_absolute() {
        for bad in ["data", "./data", "../x", "a\0b"] {
            let m = err(json!({"subnet": "10.0.0.0/24", "dataDir": bad}));
            assert!(m.contains("dataDir"), "{bad:?}: {m}");
            assert!(validate_data_dir(Some(&json!(bad))).is_err(), "{bad:?}");
        }
        assert!(validate_data_dir(Some(&json!(5))).is_err());
        validate_data_dir(None).unwrap();
        validate_data_dir(Some(&json!(""))).unwrap();
        validate_data_dir(Some(&json!("/var/lib/x"))).unwrap();
    }

    #[test]
    fn errors_lists_every_bad_value_the_first_being_from_jsons() {
        let v = json!({
            "type": "ib-sriov-ipam",
            "ranges": [
                [{"subnet": "10.0.0.0/24", "rangeStart": "10.9.0.1"}],
                [{"subnet": "10.1.0.0/24"}],
                [{"subnet": "10.1.0.0/25"}]
            ],
            "routes": [{"dst": "nope"}, {"dst": "10.0.0.0/8"}, {}],
            "dataDir": "rel"
        });
        let all: Vec<String> = errors(&v).iter().map(|e| e.to_string()).collect();
        assert_eq!(all[0], IpamConfig::from_json(&v).unwrap_err().to_string());
        assert!(all[0].contains("invalid range set 0"), "{all:?}");
        assert!(
            all[1].contains("range set 1 (") && all[1].contains("overlaps with range set 2"),
            "{all:?}"
        );
        assert!(
            all[2].starts_with("invalid IPAM config: route 0:"),
            "{all:?}"
        );
        assert!(all[3].contains("route 2: missing \"dst\""), "{all:?}");
        assert!(
            all[4].contains("dataDir \"rel\" must be an absolute path"),
            "{all:?}"
        );
        assert_eq!(all.len(), 5, "{all:?}");
        assert!(errors(&json!({"subnet": "10.0.0.0/24"})).is_empty());
        assert_eq!(errors(&json!([1])).len(), 1);
        assert_eq!(
            errors(&json!({"dataDir": "x"}))
                .iter()
                .map(|e| e.message().to_string())
                .collect::<Vec<_>>(),
            [
                "no IP ranges specified",
                "dataDir \"x\" must be an absolute path"
            ]
        );
    }
}
