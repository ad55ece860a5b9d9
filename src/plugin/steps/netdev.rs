//! The VF's netdev in the host, found and named by identity, and the driver rebind that
//! re-creates it: shared by the steps that move it (`netdev_move`), re-create it
//! (`guid`, `rdma_move`) and by the recovery of a netdev that never came back.

use super::Host;
use crate::cni::CniError;
use crate::journal::NetdevId;
use crate::netlink::{Link, Netlink, ENODEV};
use crate::plugin::NETDEV_WAIT;
use crate::sysfs::Sysfs;
use crate::types::{format_hwaddr, PciAddress};
use nix::errno::Errno;
use std::time::{Duration, Instant};

/// Name pattern for a returning netdev whose original name is taken in the host; the
/// kernel replaces `%d` with the first free number (`dev_alloc_name()`).
pub const FALLBACK_NAME_PATTERN: &str = "ibvf%d";

/// `EEXIST` as an rtnetlink error number.
pub(super) const EEXIST: Option<i32> = Some(Errno::EEXIST as i32);

/// Error numbers as rtnetlink returns them (positive).
mod libc_errno {
    use nix::errno::Errno;
    pub const EINVAL: i32 = Errno::EINVAL as i32;
    pub const ENOENT: i32 = Errno::ENOENT as i32;
}

/// ifindex: the same hardware address, and the VF as parent device when the kernel
/// reports parents (a link without a parent is then virtual, never the VF).
pub(super) fn same_device(l: &Link, id: &NetdevId, vf: &str) -> bool {
    format_hwaddr(&l.address) == id.hwaddr
        && match (&id.parent, &l.parent_dev) {
            (Some(_), Some(p)) | (None, Some(p)) => p == vf,
            (Some(_), None) => false,
            (None, None) => true,
        }
}

/// The identity of a link, as recorded in the journal.
pub fn netdev_id(l: &Link) -> NetdevId {
    NetdevId {
        ifindex: l.index,
        hwaddr: format_hwaddr(&l.address),
        parent: l.parent_dev.clone(),
    }
}

/// The VF's netdev in the pod, by identity: the recorded pod ifindex with the recorded
/// address, else the one link with that address (and parent). Several candidates (a
/// pod that copied the address) are ambiguous: none is touched.
pub(super) fn find_in_pod(
    nl: &Netlink,
    id: &NetdevId,
    pod_ifindex: Option<u32>,
    vf: &str,
) -> Result<Option<Link>, CniError> {
    if let Some(ix) = pod_ifindex {
        if let Some(l) = nl.link_by_index(ix)? {
            if same_device(&l, id, vf) {
                return Ok(Some(l));
            }
        }
    }
    let mut found: Vec<Link> = nl
        .links()?
        .into_iter()
        .filter(|l| same_device(l, id, vf))
        .collect();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        n => {
            log::warn!(
                "{n} links in the pod carry the identity of VF {vf} ({}): {:?}; touching none",
                id.hwaddr,
                found.iter().map(|l| &l.name).collect::<Vec<_>>()
            );
            Ok(None)
        }
    }
}

/// The VF's netdev in the host netns: listed by the kernel under `<VF>/net/`, else the
/// link whose parent device is the VF and that still has the recorded address or
/// ifindex, else the one link with the recorded identity ([`same_device`]) at any
/// ifindex. One link dump.
pub fn find_in_host(
    host: &Host,
    vf: PciAddress,
    id: Option<&NetdevId>,
) -> Result<Option<Link>, CniError> {
    if let Some(l) = listed_in_host(host, vf, id)? {
        return Ok(Some(l));
    }
    let Some(id) = id else { return Ok(None) };
    let vfs = vf.to_string();
    let links = host.nl.links()?;
    if let Some(l) = links
        .iter()
        .find(|l| l.parent_dev.as_deref() == Some(vfs.as_str()))
    {
        if l.index == id.ifindex || format_hwaddr(&l.address) == id.hwaddr {
            return Ok(Some(l.clone()));
        }
    }
    // By the recorded identity (address, and parent when either side has one), at any
    // ifindex: moving a netdev into a netns where its ifindex is taken gives it a new
    // one ("If there is an ifindex conflict assign a new one",
    // `__dev_change_net_namespace()` in net/core/dev.c). Several candidates: the one
    // with the recorded ifindex, else none (ambiguous, touched by nobody).
    let mut same: Vec<&crate::netlink::Link> =
        links.iter().filter(|l| same_device(l, id, &vfs)).collect();
    if same.len() > 1 {
        same.retain(|l| id.ifindex != 0 && l.index == id.ifindex);
    }
    Ok(match same.as_slice() {
        [l] => Some((*l).clone()),
        _ => None,
    })
}

/// The netdev the kernel lists under `<VF>/net/` (the VF's own, in the host netns), as
/// a link, looked up by the ifindex listed with it (`<VF>/net/<name>/ifindex`). udev
/// may rename it between the sysfs read and the netlink lookup (a netdev re-created by
/// a rebind or an RDMA device move comes up as `ib%d` and is renamed asynchronously),
/// and another link may take the old name: the ifindex stays. A listing that no longer
/// holds is looked up again by its parent device (`IFLA_PARENT_DEV_NAME`), which no
/// rename changes. While the kernel replaces the
/// VF's netdev (one being destroyed, its successor created), two are listed: the one
/// with the identity `id` when given, else the newest (highest ifindex: the kernel
/// hands out ifindexes in increasing order, `dev_index_reserve()` in net/core/dev.c).
pub(super) fn listed_in_host(
    host: &Host,
    vf: PciAddress,
    id: Option<&NetdevId>,
) -> Result<Option<Link>, CniError> {
    let names = host.sysfs.netdevs(vf).unwrap_or_default();
    if names.is_empty() {
        return Ok(None);
    }
    // Each listed netdev by the ifindex the kernel lists with it, not by its name: the
    // name may have moved to another link since (a rename, then another netdev given
    // that name), the ifindex cannot. The link is the VF's own when its parent device
    // is the VF or, for a netdev that reports none, when it still has the name or the
    // address listed with that ifindex.
    let mut found = Vec::new();
    for n in &names {
        let Ok(Some(ix)) = host.sysfs.netdev_ifindex(vf, n) else {
            continue; // renamed or gone since the listing
        };
        let Some(l) = host.nl.link_by_index(ix)? else {
            continue;
        };
        let own = match l.parent_dev.as_deref() {
            Some(p) => p == vf.to_string(),
            None => {
                l.name == *n
                    || host
                        .sysfs
                        .netdev_address(vf, n)
                        .is_ok_and(|a| a.as_deref() == Some(format_hwaddr(&l.address).as_str()))
            }
        };
        if own {
            found.push(l);
        }
    }
    if found.is_empty() {
        let vfs = vf.to_string();
        found = host
            .nl
            .links()?
            .into_iter()
            .filter(|l| l.parent_dev.as_deref() == Some(vfs.as_str()))
            .collect();
    }
    let by_id = id.and_then(|id| {
        found
            .iter()
            .position(|l| l.index == id.ifindex || format_hwaddr(&l.address) == id.hwaddr)
    });
    let pick = by_id.or_else(|| (0..found.len()).max_by_key(|&i| found[i].index));
    Ok(pick.map(|i| found.swap_remove(i)))
}

/// How long a rename back to the original name waits for the VF's netdevs to settle
/// when another netdev of the same VF holds that name: one being destroyed while its
/// successor is created (the ipoib ULP re-creating the IPoIB netdev when the RDMA device
/// returns from a dead netns, `ipoib_remove_one()`/`ipoib_add_one()` in
/// drivers/infiniband/ulp/ipoib/ipoib_main.c), with udev naming both.
pub const RENAME_SETTLE: Duration = Duration::from_secs(5);

// A rebind window (driver unbind/bind, NETDEV_WAIT, RENAME_SETTLE) fits in the reserve
// the verb's time bound keeps for it (crate::plugin::REBIND_RESERVE).
const _: () = assert!(
    crate::plugin::DRIVER_REBIND_ALLOWANCE.as_secs()
        + NETDEV_WAIT.as_secs()
        + RENAME_SETTLE.as_secs()
        <= crate::plugin::REBIND_RESERVE.as_secs()
);

/// True when `l` is a netdev of VF `vf` itself: its parent device
/// (`IFLA_PARENT_DEV_NAME`) is the VF, or the kernel lists it under `<VF>/net/`.
fn is_own_netdev(host: &Host, vf: PciAddress, l: &Link) -> bool {
    l.parent_dev.as_deref() == Some(vf.to_string().as_str())
        || host
            .sysfs
            .netdevs(vf)
            .is_ok_and(|names| names.contains(&l.name))
}

/// Gives the VF's netdev in the host its original name and admin state, settling the
/// name by identity:
/// - the name already held by this very link (udev renamed it first) is done;
/// - the name held by another netdev of the same VF (one the kernel is destroying while
///   it creates its successor) is waited for, up to [`RENAME_SETTLE`], re-finding the
///   VF's netdev whenever the one being renamed vanished (`ENODEV`): past the bound the
///   netdev keeps the name it has, logged;
/// - the name held by a foreign link gives the netdev [`FALLBACK_NAME_PATTERN`] instead
///   (the kernel picks the first free `ibvf<N>`, `dev_alloc_name()` in net/core/dev.c).
///
/// Errors: a netlink failure other than `EEXIST`/`ENODEV` on the rename, or on the
/// admin-state change (code 102).
pub(super) fn fix_name_and_state(
    host: &Host,
    vf: PciAddress,
    link: &Link,
    orig: &str,
    up: bool,
) -> Result<(), CniError> {
    let nl = &host.nl;
    let mut link = link.clone();
    let deadline = Instant::now() + RENAME_SETTLE;
    while link.name != orig {
        let was_up = link.up;
        let renamed = match was_up {
            true => nl.set_down(link.index),
            false => Ok(()),
        }
        .and_then(|()| {
            link.up = false;
            rename_over_own_altname(nl, &link, orig)
        });
        let err = match renamed {
            Ok(()) => {
                log::info!("renamed {} back to {orig}", link.name);
                link.name = orig.to_string();
                break;
            }
            Err(e) if e.errno == EEXIST || e.errno == Some(ENODEV) => e,
            Err(e) => return Err(e.into()),
        };
        let holder = nl.link_by_name(orig)?;
        let Some(now) = nl.link_by_index(link.index)? else {
            // The netdev being renamed is gone (destroyed and re-created): its
            // successor is the VF's netdev now.
            let Some(next) = listed_in_host(host, vf, None)? else {
                log::warn!("the netdev of VF {vf} vanished while it was being renamed to {orig}; none is left to name");
                return Ok(());
            };
            log::info!(
                "the netdev of VF {vf} was re-created while being renamed ({}, ifindex {} -> {}, ifindex {})",
                link.name,
                link.index,
                next.name,
                next.index
            );
            link = next;
            if Instant::now() >= deadline {
                break;
            }
            continue;
        };
        link = now;
        match holder {
            Some(h) if h.index == link.index => break, // udev named it first
            // The holder left: retry (bounded, in case the name keeps reading as free).
            None if Instant::now() < deadline => {}
            None => {
                log::warn!(
                    "renaming {} to {orig} keeps failing ({err}) though no link holds the name; it keeps its name",
                    link.name
                );
                break;
            }
            Some(h) if is_own_netdev(host, vf, &h) => {
                if Instant::now() >= deadline {
                    log::warn!(
                        "{orig} is still held by {} (ifindex {}), another netdev of VF {vf}, after {} s; {} keeps its name",
                        h.name,
                        h.index,
                        RENAME_SETTLE.as_secs(),
                        link.name
                    );
                    break;
                }
                log::debug!(
                    "{orig} is held by ifindex {}, another netdev of VF {vf} ({err}); waiting for the kernel to settle",
                    h.index
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            Some(h) => {
                nl.rename(link.index, FALLBACK_NAME_PATTERN)?;
                let now = nl.link_by_index(link.index)?.map(|l| l.name);
                log::warn!(
                    "cannot rename {} back to {orig}: the name is taken in the host by {} (ifindex {}); it is {} now",
                    link.name,
                    h.name,
                    h.index,
                    now.as_deref().unwrap_or("?")
                );
                break;
            }
        }
    }
    if up && !link.up {
        nl.set_up(link.index)?;
    } else if !up && link.up {
        nl.set_down(link.index)?;
    }
    Ok(())
}

/// Renames `link` to `name`. When the name is taken by an alternative name of this very
/// link, that altname is deleted first (`RTM_DELLINKPROP`) and the rename retried: udev's
/// `AlternativeNamesPolicy` gives a VF netdev that returns from a deleted pod netns
/// under its pod name (a rename udev does not undo: the name is no longer the kernel's)
/// its predictable name as an altname, which is the original name, and the kernel
/// refuses a name any link of the netns holds, altnames included (`netdev_name_in_use()`
/// in net/core/dev.c). An altname of another link is left alone (`EEXIST` stays), and
/// so is one that moved to another link before it could be deleted.
fn rename_over_own_altname(
    nl: &Netlink,
    link: &Link,
    name: &str,
) -> Result<(), crate::netlink::NlError> {
    match nl.rename(link.index, name) {
        Err(e) if e.errno == EEXIST => {
            let now = nl.link_by_index(link.index)?;
            if !now.is_some_and(|l| l.altnames.iter().any(|a| a == name)) {
                return Err(e);
            }
            match nl.del_altname(link.index, name) {
                Ok(()) => {}
                // Between the look and the delete the altname went to another netdev
                // (`EINVAL`: "a name belonging to another device",
                // `netdev_name_node_alt_destroy()` in net/core/dev.c; udev naming the
                // successor of a netdev a rebind is destroying), or is gone (`ENOENT`),
                // or the link is (`ENODEV`): the name is held elsewhere now, which the
                // caller settles by identity, as for any `EEXIST`.
                Err(d)
                    if matches!(
                        d.errno,
                        Some(libc_errno::EINVAL | libc_errno::ENOENT | ENODEV)
                    ) =>
                {
                    log::debug!("{d}; {name} is held by another netdev now");
                    return Err(e);
                }
                Err(d) => return Err(d),
            }
            log::info!(
                "deleted altname {name} of {} (ifindex {}) to give it back its name",
                link.name,
                link.index
            );
            nl.rename(link.index, name)
        }
        r => r,
    }
}

/// Writes the VF address to its driver's `unbind`, then `bind` (sysfs
/// `/sys/bus/pci/drivers/<driver>/{unbind,bind}`), so a new GUID takes effect (mlx5).
pub fn rebind_driver(sysfs: &Sysfs, vf: PciAddress) -> Result<(), CniError> {
    let driver = sysfs
        .driver(vf)
        .map_err(|e| CniError::host(format!("reading driver of VF {vf}: {e}")))?
        .ok_or_else(|| CniError::host(format!("VF {vf} has no driver bound; cannot rebind")))?;
    sysfs
        .unbind(vf, &driver)
        .map_err(|e| CniError::host(format!("unbinding VF {vf} from {driver}: {e}")))?;
    sysfs
        .bind(vf, &driver)
        .map_err(|e| CniError::host(format!("binding VF {vf} to {driver}: {e}")))?;
    log::info!("rebound VF {vf} ({driver})");
    Ok(())
}

/// Waits (bounded by [`NETDEV_WAIT`]) for the VF's netdev to reappear under
/// `<VF>/net/` after a rebind or an RDMA device move re-created it, and returns it
/// (never looked up by its old name: the re-created netdev may have another,
/// ib-sriov-cni#217, and udev may rename it meanwhile). A name listed in sysfs that
/// rtnetlink does not know yet (or any more: renamed, or a predecessor on its way out)
/// is looked for again until the bound.
///
/// Errors: no netdev listed in time (code 102, with what `<VF>/net/` held), or one
/// listed but never found over rtnetlink (code 102).
pub fn netdev_after_rebind(host: &Host, vf: PciAddress) -> Result<Link, CniError> {
    let deadline = Instant::now() + NETDEV_WAIT;
    loop {
        let name = host
            .sysfs
            .wait_for_netdev(vf, deadline.saturating_duration_since(Instant::now()))?;
        if let Some(link) = listed_in_host(host, vf, None)? {
            log::info!(
                "VF {vf} netdev {} ifindex {} (re-created)",
                link.name,
                link.index
            );
            return Ok(link);
        }
        if Instant::now() >= deadline {
            return Err(CniError::host(format!(
                "netdev {name} of VF {vf} listed in sysfs but not found over rtnetlink within {} ms of its re-creation",
                NETDEV_WAIT.as_millis()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
