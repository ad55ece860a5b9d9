//! A range set: the ranges one address per attachment is taken from, and the
//! round-robin iteration over them. Mirrors host-local's `RangeSet`
//! (backend/allocator/range_set.go) and `RangeIter` (backend/allocator/allocator.go).

use std::fmt;
use std::net::IpAddr;

use super::range::{canonical_ip, ip_to_u128, u128_to_ip, Range};

/// A validated, non-empty list of non-overlapping ranges of one address
/// family. An attachment gets exactly one address per range set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    /// The ranges, in configuration order (iteration order).
    pub ranges: Vec<Range>,
}

impl RangeSet {
    /// Validate a set of ranges (host-local range_set.go `Canonicalize`).
    ///
    /// Errors: `"empty range set"`, `"mixed address families"` (naming the
    /// ranges), `"subnets <a> and <b> overlap"` (ranges as `start-end`).
    pub fn new(ranges: Vec<Range>) -> Result<RangeSet, String> {
        let first = ranges
            .first()
            .ok_or_else(|| "empty range set".to_string())?;
        if let Some(other) = ranges.iter().find(|r| r.is_ipv4() != first.is_ipv4()) {
            return Err(format!(
                "mixed address families: {} ({}) and {} ({})",
                first, first.subnet, other, other.subnet
            ));
        }
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                if a.overlaps(b) {
                    return Err(format!("subnets {a} and {b} overlap"));
                }
            }
        }
        Ok(RangeSet { ranges })
    }

    /// True for an IPv4 range set.
    pub fn is_ipv4(&self) -> bool {
        self.ranges[0].is_ipv4()
    }

    /// host-local `RangeSet.RangeFor`: the index and range containing `ip`.
    pub fn range_for(&self, ip: IpAddr) -> Option<(usize, &Range)> {
        let ip = canonical_ip(ip);
        self.ranges.iter().enumerate().find(|(_, r)| r.contains(ip))
    }

    /// host-local `RangeSet.Contains`: some range of the set contains `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_some()
    }

    /// host-local `RangeSet.Overlaps`: any range of `self` overlaps any range
    /// of `other`.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.ranges
            .iter()
            .any(|a| other.ranges.iter().any(|b| a.overlaps(b)))
    }

    /// True when `v` (an ordinal of this set's family) is the gateway of any
    /// range of the set. host-local skips only the current range's gateway;
    /// we skip every gateway of the set, a superset that can only avoid
    /// handing out a router's address.
    fn is_gateway(&self, v: u128) -> bool {
        self.ranges.iter().any(|r| ip_to_u128(r.gateway) == v)
    }

    /// Whether the ordinal `v`, known to be inside range `idx`, may be handed
    /// out: not the subnet's network address, not the IPv4 broadcast, not a
    /// gateway of the set.
    fn allocatable_at(&self, idx: usize, v: u128) -> bool {
        !self.ranges[idx].is_network_or_broadcast(v) && !self.is_gateway(v)
    }

    /// The range index of `ip` when `ip` is an address this set hands out
    /// (inside a range and not network/broadcast/gateway), else `None`.
    pub fn allocatable_range(&self, ip: IpAddr) -> Option<usize> {
        let (idx, _) = self.range_for(ip)?;
        self.allocatable_at(idx, ip_to_u128(canonical_ip(ip)))
            .then_some(idx)
    }

    /// How many addresses the set can hand out in total (saturating at
    /// `u128::MAX`).
    pub fn allocatable_count(&self) -> u128 {
        let mut total: u128 = 0;
        for (idx, r) in self.ranges.iter().enumerate() {
            // Distinct excluded ordinals inside this range.
            let mut excluded: Vec<u128> =
                self.ranges.iter().map(|x| ip_to_u128(x.gateway)).collect();
            excluded.push(r.network());
            excluded.extend(r.broadcast());
            excluded.retain(|&v| r.start() <= v && v <= r.end());
            excluded.sort_unstable();
            excluded.dedup();
            debug_assert!(excluded.iter().all(|&v| !self.allocatable_at(idx, v)));
            // size = end - start + 1; computed without overflowing at 2^128.
            let span = r.end() - r.start();
            let n = match excluded.len() as u128 {
                0 => span.saturating_add(1),
                k => span - (k - 1),
            };
            total = total.saturating_add(n);
        }
        total
    }

    /// The round-robin iterator of host-local's `IPAllocator.GetIter`:
    /// when `last_reserved` lies in the set, iteration starts right after it
    /// (in its range), continues to the end of that range, then through the
    /// following ranges, wrapping to the first, and ends with
    /// `last_reserved` itself; otherwise it starts at the first range's
    /// `rangeStart`. Every address is visited at most once; addresses that are
    /// not allocatable (see [`RangeSet::allocatable_range`]) are skipped.
    pub fn iter(&self, last_reserved: Option<IpAddr>) -> RangeIter<'_> {
        let mut it = RangeIter {
            set: self,
            idx: 0,
            cur: None,
            start: None,
            done: false,
        };
        if let Some(last) = last_reserved {
            if let Some((idx, _)) = self.range_for(last) {
                it.idx = idx;
                it.cur = Some(ip_to_u128(canonical_ip(last)));
            }
        }
        it
    }
}

impl fmt::Display for RangeSet {
    /// host-local `RangeSet.String`: ranges as `start-end`, comma separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Candidate addresses of a [`RangeSet`] in round-robin order, each with the
/// index of its range. See [`RangeSet::iter`].
pub struct RangeIter<'a> {
    /// The set iterated over.
    set: &'a RangeSet,
    /// Index of the current range.
    idx: usize,
    /// Current position; `None` before the first step of a fresh start.
    cur: Option<u128>,
    /// First position visited; reaching it again ends the iteration.
    start: Option<u128>,
    /// Set once the iteration has come full circle.
    done: bool,
}

impl Iterator for RangeIter<'_> {
    type Item = (usize, IpAddr);

    fn next(&mut self) -> Option<(usize, IpAddr)> {
        let ranges = &self.set.ranges;
        if self.done {
            return None;
        }
        loop {
            let v = match self.cur {
                None => {
                    let v = ranges[self.idx].start();
                    self.start = Some(v);
                    v
                }
                Some(cur) => {
                    let v = if cur == ranges[self.idx].end() {
                        self.idx = (self.idx + 1) % ranges.len();
                        ranges[self.idx].start()
                    } else {
                        cur + 1
                    };
                    match self.start {
                        None => self.start = Some(v),
                        Some(s) if s == v => {
                            // Looped back to where we started: done.
                            self.done = true;
                            return None;
                        }
                        Some(_) => {}
                    }
                    v
                }
            };
            self.cur = Some(v);
            if self.set.allocatable_at(self.idx, v) {
                return Some((self.idx, u128_to_ip(v, self.set.is_ipv4())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    type Spec<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);

    fn set(specs: &[Spec]) -> RangeSet {
        RangeSet::new(
            specs
                .iter()
                .map(|(s, a, b, g)| Range::new(s, *a, *b, *g).unwrap())
                .collect(),
        )
        .unwrap()
    }

    fn simple(subnets: &[&str]) -> RangeSet {
        set(&subnets
            .iter()
            .map(|s| (*s, None, None, None))
            .collect::<Vec<_>>())
    }

    fn ips(it: RangeIter<'_>) -> Vec<String> {
        it.map(|(_, a)| a.to_string()).collect()
    }

    #[test]
    fn loops_from_the_beginning() {
        // allocator_test.go "should loop correctly from the beginning"
        let s = simple(&["192.168.1.0/29"]);
        assert_eq!(
            ips(s.iter(None)),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
    }

    #[test]
    fn loops_from_the_end() {
        let s = simple(&["192.168.1.0/29"]);
        assert_eq!(
            ips(s.iter(Some(ip("192.168.1.6")))),
            [
                "192.168.1.2",
                "192.168.1.3",
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6"
            ]
        );
    }

    #[test]
    fn loops_from_the_middle_and_wraps() {
        let s = simple(&["192.168.1.0/29"]);
        assert_eq!(
            ips(s.iter(Some(ip("192.168.1.3")))),
            [
                "192.168.1.4",
                "192.168.1.5",
                "192.168.1.6",
                "192.168.1.2",
                "192.168.1.3"
            ]
        );
    }

    #[test]
    fn last_reserved_outside_the_set_starts_fresh() {
        let s = simple(&["10.0.0.0/29"]);
        assert_eq!(ips(s.iter(Some(ip("10.0.0.128"))))[0], "10.0.0.2");
        assert_eq!(ips(s.iter(Some(ip("2001:db8::5"))))[0], "10.0.0.2");
    }

    #[test]
    fn advances_and_rolls_over_ranges() {
        // allocator_test.go "advance to next subnet" / "Roll to start subnet"
        let s = simple(&["10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"]);
        assert_eq!(ips(s.iter(None)), ["10.0.0.2", "10.0.1.2", "10.0.2.2"]);
        assert_eq!(ips(s.iter(Some(ip("10.0.0.2"))))[0], "10.0.1.2");
        assert_eq!(ips(s.iter(Some(ip("10.0.2.2"))))[0], "10.0.0.2");
    }

    #[test]
    fn skips_network_broadcast_and_gateway_even_when_explicit() {
        // host-local's multi-range test sets rangeStart to the network
        // address (and would hand it out); we skip it, and the broadcast.
        let s = set(&[
            (
                "192.168.1.0/30",
                Some("192.168.1.0"),
                Some("192.168.1.3"),
                None,
            ),
            (
                "192.168.2.0/30",
                Some("192.168.2.0"),
                Some("192.168.2.3"),
                Some("192.168.2.2"),
            ),
        ]);
        assert_eq!(ips(s.iter(None)), ["192.168.1.2", "192.168.2.1"]);
        assert_eq!(s.allocatable_count(), 2);
        assert_eq!(s.allocatable_range(ip("192.168.1.2")), Some(0));
        assert_eq!(s.allocatable_range(ip("192.168.2.1")), Some(1));
        for bad in [
            "192.168.1.0",
            "192.168.1.1",
            "192.168.1.3",
            "192.168.2.2",
            "192.168.3.1",
        ] {
            assert_eq!(s.allocatable_range(ip(bad)), None, "{bad}");
        }
    }

    #[test]
    fn gateway_of_another_range_in_the_set_is_skipped() {
        let s = set(&[
            (
                "10.0.0.0/24",
                Some("10.0.0.10"),
                Some("10.0.0.12"),
                Some("10.0.0.1"),
            ),
            (
                "10.0.0.0/24",
                Some("10.0.0.20"),
                Some("10.0.0.21"),
                Some("10.0.0.11"),
            ),
        ]);
        assert_eq!(
            ips(s.iter(None)),
            ["10.0.0.10", "10.0.0.12", "10.0.0.20", "10.0.0.21"]
        );
        assert_eq!(s.allocatable_count(), 4);
    }

    #[test]
    fn only_excluded_addresses_yields_nothing() {
        let s = set(&[("10.0.0.0/30", Some("10.0.0.1"), Some("10.0.0.1"), None)]);
        assert_eq!(ips(s.iter(None)), Vec::<String>::new());
        assert_eq!(ips(s.iter(Some(ip("10.0.0.1")))), Vec::<String>::new());
        assert_eq!(s.allocatable_count(), 0);
        let mut it = s.iter(None);
        assert!(it.next().is_none());
        assert!(it.next().is_none());
    }

    #[test]
    fn v6_iteration_and_counts() {
        let s = simple(&["2001:db8:1::/126"]);
        // v6 has no broadcast: ::3 is allocatable; ::1 is the gateway.
        assert_eq!(ips(s.iter(None)), ["2001:db8:1::2", "2001:db8:1::3"]);
        assert_eq!(s.allocatable_count(), 2);
        let big = simple(&["2001:db8:1::/64"]);
        assert_eq!(big.allocatable_count(), (1u128 << 64) - 2);
        let first: Vec<String> = big.iter(None).take(2).map(|(_, a)| a.to_string()).collect();
        assert_eq!(first, ["2001:db8:1::2", "2001:db8:1::3"]);
    }

    #[test]
    fn counts_match_iteration_for_small_sets() {
        for s in [
            simple(&["10.0.0.0/29"]),
            simple(&["10.0.0.0/30", "10.0.1.0/28"]),
            set(&[(
                "10.0.0.0/28",
                Some("10.0.0.0"),
                Some("10.0.0.15"),
                Some("10.0.0.7"),
            )]),
        ] {
            assert_eq!(s.iter(None).count() as u128, s.allocatable_count(), "{s}");
        }
    }

    #[test]
    fn validation_errors() {
        assert_eq!(RangeSet::new(vec![]).unwrap_err(), "empty range set");
        let a = Range::new("10.0.0.0/24", None, None, None).unwrap();
        let b = Range::new("2001:db8::/64", None, None, None).unwrap();
        assert!(RangeSet::new(vec![a.clone(), b])
            .unwrap_err()
            .starts_with("mixed address families"));
        // config_test.go "Should detect overlap within rangeset"
        let c = Range::new("10.1.0.0/22", None, None, None).unwrap();
        let d = Range::new("10.1.2.0/24", None, None, None).unwrap();
        assert_eq!(
            RangeSet::new(vec![c, d]).unwrap_err(),
            "subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap"
        );
    }

    #[test]
    fn set_contains_and_display() {
        let s = simple(&["10.0.0.0/30", "10.0.1.0/30"]);
        assert!(s.contains(ip("10.0.1.2")));
        assert!(!s.contains(ip("10.0.2.2")));
        assert_eq!(s.range_for(ip("10.0.1.1")).map(|(i, _)| i), Some(1));
        assert_eq!(s.to_string(), "10.0.0.1-10.0.0.2,10.0.1.1-10.0.1.2");
        assert!(s.overlaps(&simple(&["10.0.1.0/29"])));
        assert!(!s.overlaps(&simple(&["10.0.2.0/29"])));
    }
}
