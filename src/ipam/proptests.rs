//! Property tests: random range sets and random allocate/release sequences,
//! checked against a simple model and a brute-force enumeration of each
//! range set.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::json;

use super::range::{ip_to_u128, u128_to_ip};
use super::{IpamConfig, IpamError};

const NET: &str = "propnet";
const T: Duration = Duration::from_secs(10);

/// One generated range: subnet k of the family, prefix, start/end offsets
/// into the subnet, optional gateway offset.
#[derive(Debug, Clone)]
struct GenRange {
    v4: bool,
    k: u8,
    prefix: u8,
    start: u32,
    end: u32,
    gw: Option<u32>,
}

impl GenRange {
    fn base(&self) -> u128 {
        if self.v4 {
            // 10.k.0.0
            (10u128 << 24) | (u128::from(self.k) << 16)
        } else {
            // fd00:k::
            (0xfd00u128 << 112) | (u128::from(self.k) << 96)
        }
    }

    fn addr(&self, off: u32) -> IpAddr {
        u128_to_ip(self.base() + u128::from(off), self.v4)
    }

    fn json(&self) -> serde_json::Value {
        let mut j = json!({
            "subnet": format!("{}/{}", self.addr(0), self.prefix),
            "rangeStart": self.addr(self.start).to_string(),
            "rangeEnd": self.addr(self.end).to_string(),
        });
        if let Some(g) = self.gw {
            j["gateway"] = json!(self.addr(g).to_string());
        }
        j
    }

    /// Gateway as configured or defaulted (subnet + 1).
    fn gateway(&self) -> IpAddr {
        self.addr(self.gw.unwrap_or(1))
    }

    fn size(&self) -> u32 {
        1 << ((if self.v4 { 32 } else { 128 }) - u32::from(self.prefix))
    }
}

fn gen_range(v4: bool, k: u8) -> impl Strategy<Value = GenRange> {
    let prefixes = if v4 { 27u8..=30 } else { 123u8..=126 };
    prefixes.prop_flat_map(move |prefix| {
        let size: u32 = 1 << ((if v4 { 32 } else { 128 }) - u32::from(prefix));
        (0..size, 0..size, proptest::option::of(0..size)).prop_map(move |(a, b, gw)| GenRange {
            v4,
            k,
            prefix,
            start: a.min(b),
            end: a.max(b),
            gw,
        })
    })
}

/// One or two range sets: a v4 set of 1-2 ranges (distinct subnets), and
/// optionally a v6 set of 1-2 ranges.
fn gen_sets() -> impl Strategy<Value = Vec<Vec<GenRange>>> {
    let v4 = prop_oneof![
        gen_range(true, 0).prop_map(|r| vec![r]),
        (gen_range(true, 0), gen_range(true, 1)).prop_map(|(a, b)| vec![a, b]),
    ];
    let v6 = proptest::option::of(prop_oneof![
        gen_range(false, 0).prop_map(|r| vec![r]),
        (gen_range(false, 0), gen_range(false, 1)).prop_map(|(a, b)| vec![a, b]),
    ]);
    (v4, v6).prop_map(|(a, b)| {
        let mut sets = vec![a];
        sets.extend(b);
        sets
    })
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(u8, u8),
    Release(u8, u8),
}

fn gen_ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (0u8..6, 0u8..2).prop_map(|(c, i)| Op::Alloc(c, i)),
            1 => (0u8..6, 0u8..2).prop_map(|(c, i)| Op::Release(c, i)),
        ],
        1..40,
    )
}

/// Brute force: every address of the set that may be handed out (inside a
/// range, not the network, not the IPv4 broadcast, not a gateway of the set).
fn allocatable(set: &[GenRange]) -> BTreeSet<IpAddr> {
    let gateways: BTreeSet<IpAddr> = set.iter().map(GenRange::gateway).collect();
    let mut out = BTreeSet::new();
    for r in set {
        for off in r.start..=r.end {
            let a = r.addr(off);
            let is_net = off == 0;
            let is_bcast = r.v4 && off == r.size() - 1;
            if !is_net && !is_bcast && !gateways.contains(&a) {
                out.insert(a);
            }
        }
    }
    out
}

fn names(c: u8, i: u8) -> (String, String) {
    (format!("container-{c}"), format!("net{i}"))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_allocate_release_sequences_keep_invariants(sets in gen_sets(), ops in gen_ops()) {
        let dir = tempfile::tempdir().unwrap();
        let ranges: Vec<Vec<serde_json::Value>> =
            sets.iter().map(|s| s.iter().map(GenRange::json).collect()).collect();
        let cfg = IpamConfig::from_json(&json!({
            "type": "ib-sriov-ipam",
            "ranges": ranges,
            "dataDir": dir.path().to_str().unwrap(),
        }))
        .unwrap();
        let pools: Vec<BTreeSet<IpAddr>> = sets.iter().map(|s| allocatable(s)).collect();
        let mut model: HashMap<(u8, u8), Vec<IpAddr>> = HashMap::new();

        for op in &ops {
            match *op {
                Op::Alloc(c, i) => {
                    let (cid, ifn) = names(c, i);
                    let res = cfg.allocate(NET, &cid, &ifn, T);
                    if let Some(held) = model.get(&(c, i)) {
                        let got: Vec<IpAddr> =
                            res.unwrap().ips.iter().map(|a| a.address.ip()).collect();
                        prop_assert_eq!(&got, held, "idempotent allocate");
                        continue;
                    }
                    let full = pools.iter().enumerate().any(|(s, pool)| {
                        model.values().filter(|v| pool.contains(&v[s])).count() >= pool.len()
                    });
                    if full {
                        prop_assert!(matches!(res, Err(IpamError::Exhausted(_))), "{:?}", res);
                        continue;
                    }
                    let alloc = res.unwrap();
                    prop_assert_eq!(alloc.ips.len(), sets.len());
                    let mut got = Vec::new();
                    for (s, a) in alloc.ips.iter().enumerate() {
                        let ip = a.address.ip();
                        prop_assert!(pools[s].contains(&ip), "{} not allocatable in set {}", ip, s);
                        // Prefix and gateway are those of the range it came from.
                        let r = sets[s]
                            .iter()
                            .find(|r| (r.start..=r.end).any(|o| r.addr(o) == ip))
                            .unwrap();
                        prop_assert_eq!(a.address.prefix(), r.prefix);
                        prop_assert_eq!(a.gateway, Some(r.gateway()));
                        for other in model.values() {
                            prop_assert!(!other.contains(&ip), "{} held twice", ip);
                        }
                        got.push(ip);
                    }
                    model.insert((c, i), got);
                }
                Op::Release(c, i) => {
                    let (cid, ifn) = names(c, i);
                    let want = model.remove(&(c, i)).map_or(0, |v| v.len());
                    prop_assert_eq!(cfg.release(NET, &cid, &ifn, T).unwrap(), want);
                }
            }

            // The disk is exactly the model.
            let mut on_disk = cfg.list(NET).unwrap();
            on_disk.sort();
            let mut expect: Vec<(IpAddr, String, String)> = model
                .iter()
                .flat_map(|(&(c, i), ips)| {
                    let (cid, ifn) = names(c, i);
                    ips.iter().map(move |ip| (*ip, cid.clone(), ifn.clone()))
                })
                .collect();
            expect.sort();
            prop_assert_eq!(&on_disk, &expect);
            let distinct: BTreeSet<IpAddr> = expect.iter().map(|e| e.0).collect();
            prop_assert_eq!(distinct.len(), expect.len());
            // Free counts agree with the brute-force pools.
            let free: Vec<u128> = pools
                .iter()
                .map(|p| (p.len() - p.iter().filter(|a| distinct.contains(a)).count()) as u128)
                .collect();
            prop_assert_eq!(cfg.free_counts(NET).unwrap(), free);
        }

        // Release everything, then a fresh attachment can allocate (when
        // every set has at least one allocatable address).
        for &(c, i) in model.keys() {
            let (cid, ifn) = names(c, i);
            prop_assert!(cfg.release(NET, &cid, &ifn, T).unwrap() > 0);
        }
        prop_assert!(cfg.list(NET).unwrap().is_empty());
        let res = cfg.allocate(NET, "fresh", "net9", T);
        if pools.iter().all(|p| !p.is_empty()) {
            let a = res.unwrap();
            for (s, ip) in a.ips.iter().enumerate() {
                prop_assert!(pools[s].contains(&ip.address.ip()));
            }
        } else {
            prop_assert!(matches!(res, Err(IpamError::Exhausted(_))), "{:?}", res);
        }
    }

    #[test]
    fn iteration_visits_each_allocatable_address_once(
        sets in gen_sets(),
        last_off in 0u32..64,
    ) {
        let ranges: Vec<Vec<serde_json::Value>> =
            sets.iter().map(|s| s.iter().map(GenRange::json).collect()).collect();
        let cfg = IpamConfig::from_json(&json!({"ranges": ranges})).unwrap();
        for (s, set) in cfg.ranges.iter().enumerate() {
            let pool = allocatable(&sets[s]);
            // Any starting cursor, inside or outside the set.
            let last = u128_to_ip(ip_to_u128(sets[s][0].addr(0)) + u128::from(last_off), sets[s][0].v4);
            let seen: Vec<IpAddr> = set.iter(Some(last)).map(|(_, a)| a).collect();
            let uniq: BTreeSet<IpAddr> = seen.iter().copied().collect();
            prop_assert_eq!(uniq.len(), seen.len(), "duplicates in {:?}", seen);
            prop_assert_eq!(&uniq, &pool);
            prop_assert_eq!(set.allocatable_count(), pool.len() as u128);
            // Round robin: when the cursor is an address of the set, the
            // first candidate is the next allocatable address after it
            // (wrapping), and the cursor itself comes last if allocatable.
            if set.contains(last) && !seen.is_empty() {
                let after: Vec<&IpAddr> = pool.range((std::ops::Bound::Excluded(last), std::ops::Bound::Unbounded)).collect();
                let expected_first = after.first().copied().or(pool.iter().next()).unwrap();
                // Ranges are generated in ascending address order.
                prop_assert_eq!(&seen[0], expected_first);
                if pool.contains(&last) {
                    prop_assert_eq!(seen.last().unwrap(), &last);
                }
            }
        }
    }
}
