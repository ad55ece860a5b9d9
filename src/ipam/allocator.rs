//! The allocator: host-local's `IPAllocator` (backend/allocator/allocator.go)
//! and the per-range-set loop and rollback of its `cmdAdd`/`cmdDel`
//! (plugins/ipam/host-local/main.go), over the disk store.
//!
//! Differences from host-local, all deliberate:
//! * One exclusive lock is held for the whole call (host-local locks per
//!   range set), so a multi-family allocation is atomic w.r.t. other
//!   allocators, ours and host-local's.
//! * An existing allocation of the same (container ID, ifname) in a range set
//!   is returned; host-local errors with "duplicate allocation is not
//!   allowed". Same lookup (`GetByID`: exact or legacy content match).
//! * On failure only the files created in this call are removed; host-local
//!   calls `ReleaseByID` which also drops pre-existing allocations.
//! * The network/broadcast addresses and every gateway of the set are never
//!   handed out, even when `rangeStart`/`rangeEnd` include them.
//! * Release only considers files named by an IP address (host-local walks
//!   every file, so a container ID equal to an IP string could match
//!   `last_reserved_ip.*`).

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use ipnetwork::IpNetwork;

use super::config::{IpamConfig, RouteConfig};
use super::disk::{DiskStore, Holder, Record};
use super::error::IpamError;
use super::lock::LockMode;
use super::names::{validate_container_id, validate_ifname, validate_network_name};
use super::RangeSet;

/// Lock timeout used by the read-only queries ([`IpamConfig::lookup`],
/// [`IpamConfig::list`], [`IpamConfig::free_counts`]), which take the lock
/// shared so they never see a per-IP file between its creation and its write.
pub const QUERY_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The result of [`IpamConfig::allocate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// One address per range set, in range-set order (`ips[i]` comes from
    /// `IpamConfig::ranges[i]`).
    pub ips: Vec<AllocatedIp>,
    /// The configured routes (host-local returns `ipamConf.Routes` as is).
    pub routes: Vec<RouteConfig>,
}

/// One allocated address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedIp {
    /// The address with its subnet's prefix length (e.g. `10.0.0.2/24`).
    pub address: IpNetwork,
    /// The gateway of the range the address came from. host-local always
    /// fills it (default subnet+1), so this is `Some` for our allocations.
    pub gateway: Option<IpAddr>,
}

/// Validate the three caller-supplied names.
/// The reboot leak of host-local (containernetworking/plugins#697 and #252: the runtime
/// never sends DEL for pods that died with the node, so their records outlive the
/// reboot until the range is exhausted), closed: under the network's exclusive lock,
/// before an allocation, the store's boot marker ([`DiskStore::boot_marker`]) is
/// compared with the running boot ([`crate::boot::id`]):
/// - the same boot: nothing to do (one small read per allocation);
/// - another boot: every record last written before this boot started
///   ([`crate::boot::boot_time`], by the record's modification time) is freed, logged
///   with how many; records written in this boot (by host-local sharing the store)
///   stay; then the marker names this boot;
/// - no marker (a store of host-local or of an earlier version, whose records may hold
///   live pods of this very boot), an unreadable one, or an unknown running boot:
///   nothing is freed and the marker is written (when the boot is known).
///
/// Writes are not fsync'd ([`DiskStore::set_boot_marker`] says why). A wall clock
/// stepped forward after boot (`btime` follows it) could make a record written before
/// the step look older than the boot: only records written before the first
/// allocation after a reboot are compared at all, which on a node are those of pods
/// that died with the earlier boot.
///
/// Errors: [`IpamError::Io`] naming the marker or a record that could not be removed.
fn free_earlier_boots(store: &DiskStore, network: &str) -> Result<(), IpamError> {
    let Some(now) = crate::boot::id() else {
        return Ok(());
    };
    let marker = store.boot_marker()?;
    match &marker {
        Some(Some(m)) if m == now => return Ok(()),
        Some(Some(other)) => {
            let Some(booted) = crate::boot::boot_time() else {
                log::warn!("network {network}: the store's allocations are of boot {other}, but the boot time is unreadable: none freed");
                return store.set_boot_marker(now);
            };
            let mut freed = 0;
            for r in store.scan()? {
                let path = store.ip_path(r.ip);
                let older = std::fs::symlink_metadata(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < booted);
                if older && store.remove(r.ip)? {
                    freed += 1;
                }
            }
            log::warn!(
                "network {network}: first allocation since a reboot (the store's allocations are of boot {other}): freed {freed} allocation(s) of earlier boots"
            );
        }
        Some(None) => log::warn!(
            "network {network}: the boot marker in {} is unreadable; no allocation freed, marker rewritten",
            store.dir().display()
        ),
        None => log::debug!(
            "network {network}: no boot marker yet in {}: allocations of unknown boot are kept",
            store.dir().display()
        ),
    }
    store.set_boot_marker(now)
}

fn validate_attachment(network: &str, container_id: &str, ifname: &str) -> Result<(), IpamError> {
    validate_network_name(network)?;
    validate_container_id(container_id)?;
    validate_ifname(ifname)
}

/// The records host-local's `GetByID` returns: exact matches and legacy
/// (container-ID-only) matches, in address order.
fn held_by<'a>(records: &'a [Record], container_id: &str, ifname: &str) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.matches(container_id, ifname) || r.matches_legacy(container_id))
        .collect()
}

impl IpamConfig {
    /// The store of `network` under this config's `dataDir`.
    fn store(&self, network: &str) -> DiskStore {
        DiskStore::new(self.data_dir(), network)
    }

    /// Allocate (or return the existing allocation of) (container_id, ifname).
    ///
    /// Under the exclusive lock `<dataDir>/<network>/lock` (waiting at most
    /// `lock_timeout`), for each range set `i` in order: if the attachment
    /// already holds an address in the set (file content
    /// `"<cid>\r\n<ifname>"`, or a legacy file containing only `<cid>`), that
    /// address is returned; otherwise candidates are tried round robin
    /// starting after `last_reserved_ip.<i>`, skipping the addresses the scan found
    /// held, each claimed with link(2) and never partially written (the loop
    /// `allocate_new` uses too, [`DiskStore::reserve_first`]), and
    /// `last_reserved_ip.<i>` is updated. The directory is not fsynced (see
    /// [`IpamConfig::allocate_new`]).
    ///
    /// Errors: [`IpamError::InvalidConfig`] for an unsafe network name,
    /// container ID or interface name (checked before any file access);
    /// [`IpamError::Busy`] when the lock is not obtained in time;
    /// [`IpamError::Exhausted`] naming the network and range set when a set
    /// has no free address; [`IpamError::Io`] naming the path otherwise. On
    /// any error the addresses created by this call are released again.
    pub fn allocate(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
        lock_timeout: Duration,
    ) -> Result<Allocation, IpamError> {
        validate_attachment(network, container_id, ifname)?;
        let store = self.store(network);
        store.ensure_dir()?;
        let _lock = store.lock(LockMode::Exclusive, lock_timeout)?;
        store.remove_stale_temp_files();
        free_earlier_boots(&store, network)?;
        let records = store.scan()?;
        let held: HashSet<IpAddr> = records.iter().map(|r| r.ip).collect();
        let mine = held_by(&records, container_id, ifname);

        // Prefer an exact match over a legacy one, lowest address first.
        let existing = |idx: usize, set: &RangeSet| {
            let rec = mine
                .iter()
                .filter(|r| set.contains(r.ip))
                .min_by_key(|r| (!r.matches(container_id, ifname), r.ip))?;
            let (_, range) = set.range_for(rec.ip).expect("contained");
            log::info!(
                "network {network}: {container_id}/{ifname} already holds {} in range set {idx}",
                rec.ip
            );
            Some(AllocatedIp {
                address: range.with_prefix(rec.ip),
                gateway: Some(range.gateway),
            })
        };
        self.claim(&store, network, (container_id, ifname), existing, &held)
    }

    /// Allocates a new address per range set for (container_id, ifname) without reading
    /// the store: what ADD uses, in time independent of how many allocations the
    /// network holds. Under the exclusive lock, for each range set, candidates are
    /// probed round robin from `last_reserved_ip.<i>` with link(2)
    /// ([`DiskStore::reserve_first`]: an address held by anyone, host-local included,
    /// answers EEXIST and the next is tried), and `last_reserved_ip.<i>` is updated.
    ///
    /// Durability: nothing is fsynced, neither the record nor the directory. A process
    /// crash loses nothing (the page cache survives it, and a record is linked in only
    /// with its content). What a machine crash can do, and why each outcome is safe:
    /// - the name is lost: the address is free again, and its pod died in that crash
    ///   with every other netns of the node, so nothing is handed out twice;
    /// - the name survives without its content (ext4 commits names in its journal
    ///   within 5 s, data on writeback): a remnant naming nobody
    ///   ([`super::disk::is_remnant`]), which DEL's release, the next full release and
    ///   GC free, where an fsync would have cost a journal commit per ADD (1.3-2 ms of
    ///   wall on a journaled ext4 here, `scripts/bench.sh`).
    ///
    /// Unlike [`IpamConfig::allocate`] it does not look for an address the pair
    /// already holds: ADD runs only for a pair that holds none (the runtime DELs
    /// before re-adding, and a stale journal of the pair is torn down, releasing its
    /// addresses, before ADD goes on). An address another process holds is never
    /// taken whatever the store's state, so records written or removed behind its back
    /// (host-local on the same store) cannot make it hand out a held address.
    ///
    /// Errors: as [`IpamConfig::allocate`]; on any error the addresses created by this
    /// call are released again.
    pub fn allocate_new(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
        lock_timeout: Duration,
    ) -> Result<Allocation, IpamError> {
        validate_attachment(network, container_id, ifname)?;
        let store = self.store(network);
        store.ensure_dir()?;
        let _lock = store.lock(LockMode::Exclusive, lock_timeout)?;
        free_earlier_boots(&store, network)?;
        self.claim(
            &store,
            network,
            (container_id, ifname),
            |_, _| None,
            &HashSet::new(),
        )
    }

    /// The claiming loop of [`IpamConfig::allocate`] and [`IpamConfig::allocate_new`],
    /// under the caller's exclusive lock: for each range set `i`, the address
    /// `existing(i, set)` returns, else the first free candidate round robin from
    /// `last_reserved_ip.<i>` ([`super::RangeSet::iter`]) not in `held` (addresses
    /// known taken, skipped without a syscall), claimed with link(2)
    /// ([`DiskStore::reserve_first`]), and `last_reserved_ip.<i>` updated; the directory
    /// is not fsynced ([`IpamConfig::allocate_new`] says why). On any error the
    /// addresses claimed by this call are removed again.
    fn claim(
        &self,
        store: &DiskStore,
        network: &str,
        (container_id, ifname): (&str, &str),
        existing: impl Fn(usize, &RangeSet) -> Option<AllocatedIp>,
        held: &HashSet<IpAddr>,
    ) -> Result<Allocation, IpamError> {
        let mut created: Vec<IpAddr> = Vec::new();
        let mut ips = Vec::with_capacity(self.ranges.len());
        let mut failure = None;
        for (idx, set) in self.ranges.iter().enumerate() {
            if let Some(ip) = existing(idx, set) {
                ips.push(ip);
                continue;
            }
            let step = (|| -> Result<Option<AllocatedIp>, IpamError> {
                let candidates = set
                    .iter(store.last_reserved_ip(idx)?)
                    .filter(|(_, ip)| !held.contains(ip));
                let Some((ridx, ip)) = store.reserve_first(candidates, container_id, ifname)?
                else {
                    return Ok(None);
                };
                created.push(ip);
                store.set_last_reserved_ip(idx, ip)?;
                let range = &set.ranges[ridx];
                Ok(Some(AllocatedIp {
                    address: range.with_prefix(ip),
                    gateway: Some(range.gateway),
                }))
            })();
            match step {
                Ok(Some(ip)) => {
                    log::info!(
                        "network {network}: allocated {} to {container_id}/{ifname} from range set {idx}",
                        ip.address
                    );
                    ips.push(ip);
                }
                Ok(None) => {
                    failure = Some(IpamError::Exhausted(format!(
                        "network {network} ({}): no IP addresses available in range set {idx}: {set}",
                        store.dir().display()
                    )));
                    break;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(f) = failure {
            for ip in &created {
                if let Err(e) = store.remove(*ip) {
                    log::warn!("network {network}: rollback of {ip} failed: {e}");
                }
            }
            log::warn!("network {network}: allocation for {container_id}/{ifname} failed: {f}");
            return Err(f);
        }
        // No fsync: see `allocate_new`'s "Durability".
        Ok(Allocation {
            ips,
            routes: self.routes.clone(),
        })
    }

    /// Releases the addresses `known` (what the attachment's journal recorded at ADD)
    /// when each is still held by exactly (container_id, ifname), or is a remnant naming
    /// nobody (what a machine crash leaves of this attachment's own claim,
    /// [`super::disk::is_remnant`]), without reading the rest of the store: a record gone
    /// or now naming someone else (host-local released and re-allocated it behind our
    /// back) is left alone. Falls back to [`IpamConfig::release`] (every record read)
    /// when `known` is empty: a journal written before addresses were recorded, or a
    /// crash between the allocation and the journal update.
    ///
    /// Not fsynced: a release lost in a machine crash brings back a record naming an
    /// attachment that died in it or before it. The journal is removed only after the
    /// release (`teardown::teardown_locked`), and ext4, XFS and btrfs commit metadata in
    /// order, so there the journal comes back with the record and the next ADD of that
    /// VF, or GC, undoes it again and releases the address; on any filesystem GC
    /// (SPEC.md "GC": every record of an attachment not in `cni.dev/valid-attachments`)
    /// frees it. host-local's release is not fsynced either. The directory fsync cost a
    /// journal commit per DEL (1.4-2 ms of wall on a journaled ext4 here).
    ///
    /// Returns the number of records removed. Errors: as [`IpamConfig::release`].
    pub fn release_known(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
        known: &[IpAddr],
        lock_timeout: Duration,
    ) -> Result<usize, IpamError> {
        if known.is_empty() {
            return self.release(network, container_id, ifname, lock_timeout);
        }
        validate_attachment(network, container_id, ifname)?;
        let store = self.store(network);
        if !store.exists() {
            return Ok(0);
        }
        let _lock = store.lock(LockMode::Exclusive, lock_timeout)?;
        let mut removed = 0;
        for ip in known {
            let what = match store.holder_of(*ip, container_id, ifname)? {
                Holder::This => "",
                Holder::Remnant => " (a remnant naming nobody)",
                Holder::Absent | Holder::Other => {
                    log::info!(
                        "network {network}: {ip} is no longer held by {container_id}/{ifname}; left alone"
                    );
                    continue;
                }
            };
            if store.remove(*ip)? {
                removed += 1;
                log::info!("network {network}: released {ip} of {container_id}/{ifname}{what}");
            }
        }
        Ok(removed)
    }

    /// Release every address held by (container_id, ifname); Ok(0) when none.
    /// Idempotent.
    ///
    /// host-local `Store.ReleaseByID` (backend/disk/backend.go): remove every
    /// per-IP file of the network (whatever range set, even ones no longer
    /// configured) whose trimmed content is `"<cid>\r\n<ifname>"`; only when
    /// none matched, remove the legacy files whose content is just `<cid>`.
    /// Unlike host-local it also frees every remnant naming nobody
    /// ([`super::disk::is_remnant`]), which no DEL could match. Not fsynced
    /// ([`IpamConfig::release_known`] says why).
    /// Runs under the exclusive lock. A missing network directory means
    /// nothing to release (it is not created).
    ///
    /// Returns the number of files removed. Errors: `InvalidConfig` (unsafe
    /// names), `Busy` (lock timeout), `Io` naming the paths that could not be
    /// removed (after trying all of them).
    pub fn release(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
        lock_timeout: Duration,
    ) -> Result<usize, IpamError> {
        validate_attachment(network, container_id, ifname)?;
        let store = self.store(network);
        if !store.exists() {
            return Ok(0);
        }
        let _lock = store.lock(LockMode::Exclusive, lock_timeout)?;
        let records = store.scan()?;
        let mut victims: Vec<IpAddr> = records
            .iter()
            .filter(|r| r.matches(container_id, ifname))
            .map(|r| r.ip)
            .collect();
        if victims.is_empty() {
            victims = records
                .iter()
                .filter(|r| r.matches_legacy(container_id))
                .map(|r| r.ip)
                .collect();
        }
        let remnants = records.iter().filter(|r| r.is_remnant()).map(|r| r.ip);
        let mut removed = 0;
        let mut errors = Vec::new();
        for (ip, remnant) in victims
            .into_iter()
            .map(|ip| (ip, false))
            .chain(remnants.map(|ip| (ip, true)))
        {
            match store.remove(ip) {
                Ok(true) if remnant => {
                    removed += 1;
                    log::info!("network {network}: freed {ip}, a remnant naming nobody");
                }
                Ok(true) => {
                    removed += 1;
                    log::info!("network {network}: released {ip} of {container_id}/{ifname}");
                }
                Ok(false) => {}
                Err(e) => errors.push(e.message().to_string()),
            }
        }
        if errors.is_empty() {
            Ok(removed)
        } else {
            Err(IpamError::Io(errors.join("; ")))
        }
    }

    /// GC (SPEC.md "GC"): under the exclusive lock, removes every allocation of the
    /// network whose holder `keep(container_id, ifname)` rejects (`ifname` is empty for
    /// legacy container-ID-only files), and every remnant naming nobody
    /// ([`super::disk::is_remnant`]) whatever `keep` says. Scanning and removing under
    /// one lock means an allocation made concurrently is either seen and judged, or not
    /// seen at all. Not fsynced: a release lost in a machine crash is redone by the
    /// next GC, its holder being no more valid then.
    ///
    /// Returns the released `(ip, container_id, ifname)` in address order. A missing
    /// network directory releases nothing. Errors: `InvalidConfig` (unsafe network name),
    /// `Busy` (lock timeout), `Io` naming the files that could not be removed (after
    /// trying all of them).
    pub fn release_unless(
        &self,
        network: &str,
        keep: impl Fn(&str, &str) -> bool,
        lock_timeout: Duration,
    ) -> Result<Vec<(IpAddr, String, String)>, IpamError> {
        validate_network_name(network)?;
        let store = self.store(network);
        if !store.exists() {
            return Ok(Vec::new());
        }
        let _lock = store.lock(LockMode::Exclusive, lock_timeout)?;
        let mut released = Vec::new();
        let mut errors = Vec::new();
        for r in store.scan()? {
            if !r.is_remnant() && keep(&r.container_id, &r.ifname) {
                continue;
            }
            match store.remove(r.ip) {
                Ok(true) if r.is_remnant() => {
                    log::info!(
                        "network {network}: GC freed {}, a remnant naming nobody",
                        r.ip
                    );
                    released.push((r.ip, r.container_id, r.ifname));
                }
                Ok(true) => {
                    log::info!(
                        "network {network}: GC released {} of {}/{}",
                        r.ip,
                        r.container_id,
                        r.ifname
                    );
                    released.push((r.ip, r.container_id, r.ifname));
                }
                Ok(false) => {}
                Err(e) => errors.push(e.message().to_string()),
            }
        }
        if errors.is_empty() {
            Ok(released)
        } else {
            Err(IpamError::Io(errors.join("; ")))
        }
    }

    /// Addresses currently held by (container_id, ifname) (for CHECK), in
    /// address order: host-local `GetByID`/`FindByID` semantics (exact
    /// content match, or legacy content equal to the container ID), over the
    /// whole network directory. Empty when the directory does not exist.
    ///
    /// Takes the lock shared for at most [`QUERY_LOCK_TIMEOUT`]. Errors:
    /// `InvalidConfig`, `Busy`, `Io`.
    pub fn lookup(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Vec<IpAddr>, IpamError> {
        validate_attachment(network, container_id, ifname)?;
        let records = self.read_records(network)?;
        Ok(held_by(&records, container_id, ifname)
            .into_iter()
            .map(|r| r.ip)
            .collect())
    }

    /// Every allocation of the network (for GC): `(ip, container_id,
    /// ifname)` in address order, from every per-IP file (whatever range it
    /// belongs to). Legacy files yield an empty ifname. Empty when the
    /// directory does not exist.
    ///
    /// Takes the lock shared for at most [`QUERY_LOCK_TIMEOUT`]. Errors:
    /// `InvalidConfig` (unsafe network name), `Busy`, `Io`.
    pub fn list(&self, network: &str) -> Result<Vec<(IpAddr, String, String)>, IpamError> {
        validate_network_name(network)?;
        Ok(self
            .read_records(network)?
            .into_iter()
            .map(|r| (r.ip, r.container_id, r.ifname))
            .collect())
    }

    /// Number of free addresses per range set (for STATUS): for each range
    /// set, the allocatable addresses (range sizes minus network, IPv4
    /// broadcast and gateways) minus those with a per-IP file. Saturates at
    /// `u128::MAX`.
    ///
    /// Takes the lock shared for at most [`QUERY_LOCK_TIMEOUT`]. Errors:
    /// `InvalidConfig` (unsafe network name), `Busy`, `Io`.
    pub fn free_counts(&self, network: &str) -> Result<Vec<u128>, IpamError> {
        validate_network_name(network)?;
        let records = self.read_records(network)?;
        Ok(self
            .ranges
            .iter()
            .map(|set| {
                let used = records
                    .iter()
                    .filter(|r| set.allocatable_range(r.ip).is_some())
                    .count() as u128;
                set.allocatable_count().saturating_sub(used)
            })
            .collect())
    }

    /// All records of the network under a shared lock; empty without
    /// creating anything when the directory does not exist.
    fn read_records(&self, network: &str) -> Result<Vec<Record>, IpamError> {
        let store = self.store(network);
        if !store.exists() {
            return Ok(Vec::new());
        }
        let _lock = store.lock(LockMode::Shared, QUERY_LOCK_TIMEOUT)?;
        store.scan()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs;
    use std::path::Path;

    const T: Duration = Duration::from_secs(5);
    const NET: &str = "ibnet";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Config with `ipam` (a JSON object) plus `dataDir` pointing into `dir`.
    fn config(dir: &Path, mut ipam: serde_json::Value) -> IpamConfig {
        ipam["type"] = json!("ib-sriov-ipam");
        ipam["dataDir"] = json!(dir.join("data").to_str().unwrap());
        IpamConfig::from_json(&ipam).unwrap()
    }

    fn net_dir(c: &IpamConfig) -> std::path::PathBuf {
        c.data_dir().join(NET)
    }

    fn read(c: &IpamConfig, name: &str) -> String {
        fs::read_to_string(net_dir(c).join(name)).unwrap()
    }

    fn addrs(a: &Allocation) -> Vec<String> {
        a.ips.iter().map(|i| i.address.to_string()).collect()
    }

    fn ip_files(c: &IpamConfig) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(net_dir(c))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.parse::<IpAddr>().is_ok())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn first_allocation_skips_network_and_gateway_and_writes_host_local_files() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"subnet": "10.0.0.0/29", "routes": [{"dst": "0.0.0.0/0"}]}),
        );
        let a = c.allocate(NET, "cid1", "net1", T).unwrap();
        assert_eq!(addrs(&a), ["10.0.0.2/29"]);
        assert_eq!(a.ips[0].gateway, Some(ip("10.0.0.1")));
        assert_eq!(a.routes, c.routes);
        // Byte-exact host-local format.
        assert_eq!(
            fs::read(net_dir(&c).join("10.0.0.2")).unwrap(),
            b"cid1\r\nnet1"
        );
        assert_eq!(
            fs::read(net_dir(&c).join("last_reserved_ip.0")).unwrap(),
            b"10.0.0.2"
        );
        assert!(net_dir(&c).join("lock").is_file());
        let mut names: Vec<String> = fs::read_dir(net_dir(&c))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        // host-local's files, and our boot marker (not an address: host-local skips it).
        assert_eq!(names, ["10.0.0.2", "boot_id", "last_reserved_ip.0", "lock"]);
        assert_eq!(
            fs::read_to_string(net_dir(&c).join("boot_id"))
                .unwrap()
                .trim(),
            crate::boot::id().unwrap()
        );
    }

    /// The boot marker: a store without one keeps every record (they may hold live pods
    /// of this boot) and gets one; a store marked with another boot loses, at the next
    /// allocation, every record written before this boot began, and keeps the ones
    /// written since; a store of this boot is left alone.
    #[test]
    fn allocations_of_earlier_boots_are_freed_at_the_first_allocation_of_a_boot() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"type": "ib-sriov-ipam", "subnet": "10.0.0.0/24"}),
        );
        let dir = net_dir(&c);
        fs::create_dir_all(&dir).unwrap();
        let old = crate::boot::boot_time().unwrap() - Duration::from_secs(3600);
        let write = |ip: &str, owner: &str, when: Option<std::time::SystemTime>| {
            fs::write(dir.join(ip), format!("{owner}\r\nnet1")).unwrap();
            if let Some(t) = when {
                fs::File::options()
                    .write(true)
                    .open(dir.join(ip))
                    .unwrap()
                    .set_modified(t)
                    .unwrap();
            }
        };
        // No marker: nothing freed, marker written.
        write("10.0.0.50", "before-marker", Some(old));
        c.allocate_new(NET, "a", "net1", T).unwrap();
        assert!(dir.join("10.0.0.50").exists());
        let now = crate::boot::id().unwrap();
        assert_eq!(fs::read_to_string(dir.join("boot_id")).unwrap().trim(), now);
        // Another boot's marker: records older than this boot go, newer ones stay.
        fs::write(
            dir.join("boot_id"),
            "0badb007-0000-4000-8000-000000000002\n",
        )
        .unwrap();
        write("10.0.0.51", "died-with-the-boot", Some(old));
        write("10.0.0.52", "host-local-this-boot", None);
        c.allocate_new(NET, "b", "net1", T).unwrap();
        assert!(!dir.join("10.0.0.50").exists());
        assert!(!dir.join("10.0.0.51").exists());
        assert!(dir.join("10.0.0.52").exists());

        assert_eq!(fs::read_to_string(dir.join("boot_id")).unwrap().trim(), now);
        // This boot's marker: nothing freed.
        write("10.0.0.53", "old-but-marker-current", Some(old));
        c.allocate_new(NET, "c", "net1", T).unwrap();
        assert!(dir.join("10.0.0.53").exists());
        // A torn marker: nothing freed, rewritten.
        fs::write(dir.join("boot_id"), "garbage").unwrap();
        c.allocate_new(NET, "d", "net1", T).unwrap();
        assert!(dir.join("10.0.0.53").exists());
        assert_eq!(fs::read_to_string(dir.join("boot_id")).unwrap().trim(), now);
    }

    #[test]
    fn round_robin_after_release() {
        // allocator_test.go "should allocate in a round-robin fashion"
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "192.168.1.0/29"}));
        assert_eq!(
            addrs(&c.allocate(NET, "ID", "eth0", T).unwrap()),
            ["192.168.1.2/29"]
        );
        assert_eq!(c.release(NET, "ID", "eth0", T).unwrap(), 1);
        assert_eq!(
            addrs(&c.allocate(NET, "ID", "eth0", T).unwrap()),
            ["192.168.1.3/29"]
        );
    }

    #[test]
    fn round_robin_starts_after_last_reserved_ip_and_wraps() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/29"}));
        fs::create_dir_all(net_dir(&c)).unwrap();
        fs::write(net_dir(&c).join("last_reserved_ip.0"), "10.0.0.5").unwrap();
        assert_eq!(
            addrs(&c.allocate(NET, "a", "eth0", T).unwrap()),
            ["10.0.0.6/29"]
        );
        assert_eq!(read(&c, "last_reserved_ip.0"), "10.0.0.6");
        // Wraps to the start, skipping the gateway .1.
        assert_eq!(
            addrs(&c.allocate(NET, "b", "eth0", T).unwrap()),
            ["10.0.0.2/29"]
        );
        assert_eq!(
            addrs(&c.allocate(NET, "c", "eth0", T).unwrap()),
            ["10.0.0.3/29"]
        );
    }

    #[test]
    fn round_robin_table_from_host_local() {
        // allocator_test.go "should allocate ips in round robin": (subnets,
        // held, lastIP, expected)
        type Case<'a> = (&'a [&'a str], &'a [&'a str], Option<&'a str>, &'a str);
        let cases: &[Case] = &[
            (&["10.0.0.0/29"], &[], None, "10.0.0.2"),
            (&["2001:db8:1::0/64"], &[], None, "2001:db8:1::2"),
            (&["10.0.0.0/30"], &[], None, "10.0.0.2"),
            (&["10.0.0.0/29"], &["10.0.0.2"], None, "10.0.0.3"),
            (&["10.0.0.0/29"], &[], Some("10.0.0.5"), "10.0.0.6"),
            (
                &["10.0.0.0/29"],
                &["10.0.0.4", "10.0.0.5"],
                Some("10.0.0.3"),
                "10.0.0.6",
            ),
            (
                &["10.0.0.0/29"],
                &["10.0.0.6"],
                Some("10.0.0.5"),
                "10.0.0.2",
            ),
            (
                &["10.0.0.0/29"],
                &["10.0.0.2"],
                Some("10.0.0.128"),
                "10.0.0.3",
            ),
            (
                &["10.0.0.0/29"],
                &["10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"],
                Some("10.0.0.3"),
                "10.0.0.3",
            ),
            (&["10.0.0.0/30", "10.0.1.0/30"], &[], None, "10.0.0.2"),
            (
                &["10.0.0.0/30", "10.0.1.0/30"],
                &[],
                Some("10.0.0.2"),
                "10.0.1.2",
            ),
            (
                &["10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"],
                &[],
                Some("10.0.2.2"),
                "10.0.0.2",
            ),
        ];
        for (i, (subnets, held, last, want)) in cases.iter().enumerate() {
            let d = tempfile::tempdir().unwrap();
            let set: Vec<_> = subnets.iter().map(|s| json!({"subnet": s})).collect();
            let c = config(d.path(), json!({"ranges": [set]}));
            fs::create_dir_all(net_dir(&c)).unwrap();
            for h in *held {
                fs::write(net_dir(&c).join(h), "id").unwrap();
            }
            if let Some(l) = last {
                fs::write(net_dir(&c).join("last_reserved_ip.0"), l).unwrap();
            }
            let a = c.allocate(NET, "ID", "eth0", T).unwrap();
            assert_eq!(a.ips[0].address.ip().to_string(), *want, "case {i}");
        }
    }

    #[test]
    fn never_allocates_broadcast_then_reports_exhaustion() {
        // allocator_test.go "should not allocate the broadcast address"
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "192.168.1.0/29"}));
        for i in 2..7 {
            let a = c.allocate(NET, &format!("ID{i}"), "eth0", T).unwrap();
            assert_eq!(addrs(&a), [format!("192.168.1.{i}/29")]);
        }
        let e = c.allocate(NET, "ID8", "eth0", T).unwrap_err();
        match &e {
            IpamError::Exhausted(m) => {
                assert!(m.contains("network ibnet"), "{m}");
                assert!(
                    m.contains("no IP addresses available in range set 0: 192.168.1.1-192.168.1.6"),
                    "{m}"
                );
            }
            other => panic!("expected Exhausted, got {other:?}"),
        }
        assert_eq!(ip_files(&c).len(), 5);
        assert_eq!(c.free_counts(NET).unwrap(), [0]);
    }

    #[test]
    fn explicit_network_and_broadcast_in_range_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"subnet": "10.9.0.0/30", "rangeStart": "10.9.0.0", "rangeEnd": "10.9.0.3"}),
        );
        assert_eq!(
            addrs(&c.allocate(NET, "a", "eth0", T).unwrap()),
            ["10.9.0.2/30"]
        );
        assert!(matches!(
            c.allocate(NET, "b", "eth0", T),
            Err(IpamError::Exhausted(_))
        ));
    }

    /// allocate_new reads no record: it probes from the hint with link(2), so an address
    /// written behind its back (host-local on the same store, here a plain file) is
    /// skipped, the hint advances, the files are host-local's, and exhaustion is found
    /// after probing every candidate.
    #[test]
    fn allocate_new_probes_from_the_hint_and_skips_foreign_records() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/29"}));
        let a = c.allocate_new(NET, "a", "net1", T).unwrap();
        assert_eq!(addrs(&a), ["10.0.0.2/29"]);
        // host-local takes .3 and .4 behind our back.
        for (ip, who) in [("10.0.0.3", "hl-x"), ("10.0.0.4", "hl-y")] {
            std::fs::write(net_dir(&c).join(ip), format!("{who}\r\neth0")).unwrap();
        }
        let b = c.allocate_new(NET, "b", "net1", T).unwrap();
        assert_eq!(addrs(&b), ["10.0.0.5/29"]);
        assert_eq!(read(&c, "10.0.0.5"), "b\r\nnet1");
        assert_eq!(read(&c, "last_reserved_ip.0"), "10.0.0.5");
        let c2 = c.allocate_new(NET, "c", "net1", T).unwrap();
        assert_eq!(addrs(&c2), ["10.0.0.6/29"]);
        // .1 is the gateway, .7 the broadcast: the /29 is full now.
        let e = c.allocate_new(NET, "d", "net1", T).unwrap_err();
        assert!(matches!(e, IpamError::Exhausted(_)), "{e}");
        assert!(
            ip_files(&c).iter().all(|f| !f.starts_with(".reserve")),
            "temp file removed"
        );
        // Wraps to a freed address.
        c.release_known(NET, "a", "net1", &[ip("10.0.0.2")], T)
            .unwrap();
        assert_eq!(
            addrs(&c.allocate_new(NET, "d", "net1", T).unwrap()),
            ["10.0.0.2/29"]
        );
    }

    /// release_known removes exactly the known records still held by the pair: one
    /// host-local released and gave to someone else behind our back stays; a missing
    /// one is fine; nothing else is read. With nothing known it reads the store.
    #[test]
    fn release_known_leaves_records_that_changed_hands() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/120"}]]}),
        );
        let a = c.allocate_new(NET, "a", "net1", T).unwrap();
        assert_eq!(addrs(&a), ["10.0.0.2/24", "fd00::2/120"]);
        // host-local released 10.0.0.2 and handed it to "z".
        std::fs::write(net_dir(&c).join("10.0.0.2"), "z\r\neth0").unwrap();
        let known = [ip("10.0.0.2"), ip("fd00::2"), ip("10.0.0.9")];
        assert_eq!(c.release_known(NET, "a", "net1", &known, T).unwrap(), 1);
        assert_eq!(read(&c, "10.0.0.2"), "z\r\neth0");
        assert_eq!(ip_files(&c), ["10.0.0.2"]);
        // Nothing known: the full read finds the pair's records.
        let b = c.allocate_new(NET, "b", "net1", T).unwrap();
        assert_eq!(c.release_known(NET, "b", "net1", &[], T).unwrap(), 2);
        assert!(c.lookup(NET, "b", "net1").unwrap().is_empty());
        let _ = b;
    }

    /// What a machine crash leaves of a claim whose name reached the disk before its
    /// content (no fsync, see `allocate_new`): a record naming nobody. DEL's release of
    /// the journaled address frees it; so does the full release (nothing known), which
    /// also frees other remnants, and GC, whatever its keep says. A record naming
    /// someone, a legacy one included, is never taken for a remnant.
    #[test]
    fn remnants_naming_nobody_are_freed_by_release_and_gc() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/24"}));
        let remnant = |name: &str, bytes: &[u8]| fs::write(net_dir(&c).join(name), bytes).unwrap();
        let a = c.allocate_new(NET, "a", "net1", T).unwrap();
        assert_eq!(addrs(&a), ["10.0.0.2/24"]);
        // The crash: a's record is there but empty. A record for someone else stays.
        remnant("10.0.0.2", b"");
        remnant("10.0.0.7", b"z\r\neth0");
        assert_eq!(
            c.release_known(NET, "a", "net1", &[ip("10.0.0.2")], T)
                .unwrap(),
            1
        );
        assert_eq!(ip_files(&c), ["10.0.0.7"]);
        // The next claim gets the address back (round robin wraps to it eventually; a
        // one-address pool makes that the next claim).
        let one = config(d.path(), json!({"subnet": "10.0.0.0/30"}));
        remnant("10.0.0.2", b"");
        assert!(
            one.allocate_new(NET, "b", "net1", T).is_err(),
            "a remnant holds its name"
        );
        assert_eq!(one.release(NET, "b", "net1", T).unwrap(), 1);
        assert_eq!(
            addrs(&one.allocate_new(NET, "b", "net1", T).unwrap()),
            ["10.0.0.2/30"]
        );
        assert_eq!(read(&c, "10.0.0.2"), "b\r\nnet1");
        // Whitespace and NUL bytes (XFS can leave the latter) name nobody either; a
        // legacy container-ID-only record names someone.
        remnant("10.0.0.20", b" \r\n\t");
        remnant("10.0.0.21", b"\0\0\0\0");
        remnant("10.0.0.22", b"legacy");
        let gone = c.release_unless(NET, |_, _| true, T).unwrap();
        let gone: Vec<IpAddr> = gone.into_iter().map(|(ip, ..)| ip).collect();
        assert_eq!(gone, [ip("10.0.0.20"), ip("10.0.0.21")]);
        assert_eq!(ip_files(&c), ["10.0.0.2", "10.0.0.22", "10.0.0.7"]);
    }

    #[test]
    fn allocate_is_idempotent_per_attachment() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/120"}]]}),
        );
        let a1 = c.allocate(NET, "cid", "net1", T).unwrap();
        let a2 = c.allocate(NET, "cid", "net1", T).unwrap();
        assert_eq!(a1, a2);
        assert_eq!(addrs(&a1), ["10.0.0.2/24", "fd00::2/120"]);
        assert_eq!(ip_files(&c), ["10.0.0.2", "fd00::2"]);
        // The cursor did not move for the repeated call.
        assert_eq!(read(&c, "last_reserved_ip.0"), "10.0.0.2");
        assert_eq!(read(&c, "last_reserved_ip.1"), "fd00::2");
        // Another interface of the same container is another attachment.
        let b = c.allocate(NET, "cid", "net2", T).unwrap();
        assert_eq!(addrs(&b), ["10.0.0.3/24", "fd00::3/120"]);
        assert_eq!(read(&c, "fd00::3"), "cid\r\nnet2");
        assert_eq!(
            c.lookup(NET, "cid", "net1").unwrap(),
            [ip("10.0.0.2"), ip("fd00::2")]
        );
        assert_eq!(
            c.lookup(NET, "cid", "net2").unwrap(),
            [ip("10.0.0.3"), ip("fd00::3")]
        );
        assert!(c.lookup(NET, "cid", "net3").unwrap().is_empty());
    }

    #[test]
    fn partial_existing_allocation_is_completed_not_duplicated() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/120"}]]}),
        );
        fs::create_dir_all(net_dir(&c)).unwrap();
        fs::write(net_dir(&c).join("10.0.0.77"), "cid\r\nnet1").unwrap();
        let a = c.allocate(NET, "cid", "net1", T).unwrap();
        assert_eq!(addrs(&a), ["10.0.0.77/24", "fd00::2/120"]);
        assert_eq!(ip_files(&c), ["10.0.0.77", "fd00::2"]);
    }

    #[test]
    fn release_is_idempotent_and_removes_every_file_of_the_attachment() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/120"}]]}),
        );
        c.allocate(NET, "cid", "net1", T).unwrap();
        c.allocate(NET, "other", "net1", T).unwrap();
        // A leftover from a range no longer configured is released too.
        fs::write(net_dir(&c).join("192.168.7.7"), "cid\r\nnet1").unwrap();
        assert_eq!(c.release(NET, "cid", "net1", T).unwrap(), 3);
        assert_eq!(c.release(NET, "cid", "net1", T).unwrap(), 0);
        assert_eq!(ip_files(&c), ["10.0.0.3", "fd00::3"]);
        assert_eq!(read(&c, "10.0.0.3"), "other\r\nnet1");
        // Cursor files and the lock are untouched.
        assert!(net_dir(&c).join("last_reserved_ip.0").exists());
        assert!(net_dir(&c).join("lock").exists());
    }

    #[test]
    fn release_unless_keeps_exactly_what_the_predicate_keeps() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/24"}));
        assert!(c.release_unless(NET, |_, _| false, T).unwrap().is_empty());
        c.allocate(NET, "a", "net1", T).unwrap();
        c.allocate(NET, "b", "net1", T).unwrap();
        c.allocate(NET, "b", "net2", T).unwrap();
        fs::write(net_dir(&c).join("10.0.0.50"), "legacy").unwrap();
        let gone = c
            .release_unless(NET, |cid, ifn| cid == "b" && ifn == "net2", T)
            .unwrap();
        assert_eq!(
            gone,
            [
                (ip("10.0.0.2"), "a".into(), "net1".into()),
                (ip("10.0.0.3"), "b".into(), "net1".into()),
                (ip("10.0.0.50"), "legacy".into(), String::new()),
            ]
        );
        assert_eq!(ip_files(&c), ["10.0.0.4"]);
        assert_eq!(read(&c, "10.0.0.4"), "b\r\nnet2");
        // Everything released with an empty keep set; then nothing left to do.
        assert_eq!(c.release_unless(NET, |_, _| false, T).unwrap().len(), 1);
        assert!(ip_files(&c).is_empty());
        assert!(c.release_unless(NET, |_, _| false, T).unwrap().is_empty());
    }

    #[test]
    fn release_of_unknown_network_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/24"}));
        assert_eq!(c.release("never-used", "cid", "net1", T).unwrap(), 0);
        assert!(!c.data_dir().exists());
        assert!(c.lookup("never-used", "cid", "net1").unwrap().is_empty());
        assert!(c.list("never-used").unwrap().is_empty());
        assert_eq!(c.free_counts("never-used").unwrap(), [253]);
        assert!(!c.data_dir().exists());
    }

    #[test]
    fn legacy_container_only_files_follow_host_local() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/24"}));
        fs::create_dir_all(net_dir(&c)).unwrap();
        fs::write(net_dir(&c).join("10.0.0.50"), "oldcid").unwrap();
        // GetByID matches legacy content: lookup and allocate see it.
        assert_eq!(c.lookup(NET, "oldcid", "eth0").unwrap(), [ip("10.0.0.50")]);
        assert_eq!(
            addrs(&c.allocate(NET, "oldcid", "eth0", T).unwrap()),
            ["10.0.0.50/24"]
        );
        assert_eq!(
            c.list(NET).unwrap(),
            [(ip("10.0.0.50"), "oldcid".into(), String::new())]
        );
        // ReleaseByID: no exact match, so the legacy file goes.
        assert_eq!(c.release(NET, "oldcid", "eth0", T).unwrap(), 1);
        assert!(ip_files(&c).is_empty());

        // With an exact match present, legacy files are kept (host-local
        // only falls back when nothing matched exactly).
        fs::write(net_dir(&c).join("10.0.0.50"), "cid2").unwrap();
        fs::write(net_dir(&c).join("10.0.0.51"), "cid2\r\neth0").unwrap();
        assert_eq!(c.release(NET, "cid2", "eth0", T).unwrap(), 1);
        assert_eq!(ip_files(&c), ["10.0.0.50"]);
        assert_eq!(c.release(NET, "cid2", "eth0", T).unwrap(), 1);
        assert!(ip_files(&c).is_empty());
    }

    #[test]
    fn addresses_held_by_host_local_are_respected() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/29"}));
        fs::create_dir_all(net_dir(&c)).unwrap();
        // As host-local writes them: its own container, its cursor.
        fs::write(net_dir(&c).join("10.0.0.2"), "hl-cid\r\neth0").unwrap();
        fs::write(net_dir(&c).join("10.0.0.3"), "hl-cid2\r\neth0").unwrap();
        fs::write(net_dir(&c).join("last_reserved_ip.0"), "10.0.0.3").unwrap();
        assert_eq!(
            addrs(&c.allocate(NET, "ours", "net1", T).unwrap()),
            ["10.0.0.4/29"]
        );
        assert_eq!(c.free_counts(NET).unwrap(), [2]);
        let l = c.list(NET).unwrap();
        assert_eq!(
            l,
            [
                (ip("10.0.0.2"), "hl-cid".into(), "eth0".into()),
                (ip("10.0.0.3"), "hl-cid2".into(), "eth0".into()),
                (ip("10.0.0.4"), "ours".into(), "net1".into()),
            ]
        );
    }

    #[test]
    fn failure_in_a_later_range_set_rolls_back_only_this_call() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"ranges": [
                [{"subnet": "10.0.0.0/24"}],
                [{"subnet": "10.1.0.0/24"}],
                [{"subnet": "fd00::/126"}]
            ]}),
        );
        fs::create_dir_all(net_dir(&c)).unwrap();
        // The attachment already holds an address in set 1; set 2 is full.
        fs::write(net_dir(&c).join("10.1.0.9"), "cid\r\nnet1").unwrap();
        fs::write(net_dir(&c).join("fd00::2"), "x\r\neth0").unwrap();
        fs::write(net_dir(&c).join("fd00::3"), "y\r\neth0").unwrap();
        let e = c.allocate(NET, "cid", "net1", T).unwrap_err();
        assert!(
            matches!(&e, IpamError::Exhausted(m) if m.contains("range set 2: fd00::1-fd00::3")),
            "{e:?}"
        );
        // 10.0.0.2 (taken by this call) is gone again; 10.1.0.9 (held
        // before) stays.
        assert_eq!(ip_files(&c), ["10.1.0.9", "fd00::2", "fd00::3"]);
        assert_eq!(c.lookup(NET, "cid", "net1").unwrap(), [ip("10.1.0.9")]);
    }

    #[test]
    fn unsafe_names_are_rejected_before_any_file_access() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/24"}));
        for (net, cid, ifn) in [
            ("../escape", "cid", "eth0"),
            ("..", "cid", "eth0"),
            (".", "cid", "eth0"),
            ("a/b", "cid", "eth0"),
            ("a\0b", "cid", "eth0"),
            ("", "cid", "eth0"),
            (NET, "../../etc/passwd", "eth0"),
            (NET, "..", "eth0"),
            (NET, "cid\r\nx", "eth0"),
            (NET, "", "eth0"),
            (NET, "cid", "eth0\r\nx"),
            (NET, "cid", "averyveryverylongifname"),
            (NET, "cid", ""),
        ] {
            let bad = |r: Result<(), IpamError>| {
                assert!(
                    matches!(r, Err(IpamError::InvalidConfig(_))),
                    "{net:?} {cid:?} {ifn:?}"
                )
            };
            bad(c.allocate(net, cid, ifn, T).map(|_| ()));
            bad(c.release(net, cid, ifn, T).map(|_| ()));
            bad(c.lookup(net, cid, ifn).map(|_| ()));
        }
        assert!(matches!(c.list("../x"), Err(IpamError::InvalidConfig(_))));
        assert!(matches!(
            c.free_counts("a/b"),
            Err(IpamError::InvalidConfig(_))
        ));
        assert!(!c.data_dir().exists(), "nothing may be created");
        assert!(!d.path().join("escape").exists());
    }

    #[test]
    fn lock_timeout_returns_busy_and_touches_nothing() {
        let d = tempfile::tempdir().unwrap();
        let c = config(d.path(), json!({"subnet": "10.0.0.0/24"}));
        c.allocate(NET, "first", "eth0", T).unwrap();
        // Hold the flock through another open file description, as a
        // concurrent host-local (or our) process would.
        let holder = fs::File::open(net_dir(&c).join("lock")).unwrap();
        holder.lock().unwrap();
        let t = Duration::from_millis(100);
        let e = c.allocate(NET, "second", "eth0", t).unwrap_err();
        assert!(
            matches!(&e, IpamError::Busy(m) if m.contains("ibnet/lock")),
            "{e:?}"
        );
        assert_eq!(e.cni_code(), 11);
        assert!(matches!(
            c.release(NET, "first", "eth0", t),
            Err(IpamError::Busy(_))
        ));
        assert_eq!(ip_files(&c), ["10.0.0.2"]);
        holder.unlock().unwrap();
        assert_eq!(
            addrs(&c.allocate(NET, "second", "eth0", t).unwrap()),
            ["10.0.0.3/24"]
        );
        assert_eq!(c.release(NET, "first", "eth0", t).unwrap(), 1);
    }

    #[test]
    fn free_counts_per_range_set() {
        let d = tempfile::tempdir().unwrap();
        let c = config(
            d.path(),
            json!({"ranges": [
                [{"subnet": "10.0.0.0/29"}, {"subnet": "10.0.1.0/30"}],
                [{"subnet": "fd00::/120", "rangeStart": "fd00::10", "rangeEnd": "fd00::1f"}]
            ]}),
        );
        // 5 + 1 v4 (gateways .1 skipped), 16 v6 (gateway fd00::1 outside).
        assert_eq!(c.free_counts(NET).unwrap(), [6, 16]);
        c.allocate(NET, "a", "eth0", T).unwrap();
        c.allocate(NET, "b", "eth0", T).unwrap();
        assert_eq!(c.free_counts(NET).unwrap(), [4, 14]);
        // Files outside every range do not count.
        fs::write(net_dir(&c).join("10.0.9.9"), "z\r\neth0").unwrap();
        assert_eq!(c.free_counts(NET).unwrap(), [4, 14]);
        c.release(NET, "a", "eth0", T).unwrap();
        assert_eq!(c.free_counts(NET).unwrap(), [5, 15]);
    }
}
