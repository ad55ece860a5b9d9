//! The VF's netdev in the host, found and named by identity, and the driver rebind that
//! re-creates it: shared by the steps that move it (`netdev_move`), re-create it
//! (`guid`, `rdma_move`) and by the recovery of a netdev that never came back.

use super::Host;
use crate::cni::CniError;
use crate::journal::NetdevId;
use crate::netlink::{Link, Netlink};
use crate::plugin::NETDEV_WAIT;
use crate::sysfs::Sysfs;
use crate::types::{format_hwaddr, PciAddress};
use nix::errno::Errno;

/// Name pattern for a returning netdev whose original name is taken in the host; the
/// kernel replaces `%d` with the first free number (`dev_alloc_name()`).
pub const FALLBACK_NAME_PATTERN: &str = "ibvf%d";

/// `EEXIST` as an rtnetlink error number.
pub(super) const EEXIST: Option<i32> = Some(Errno::EEXIST as i32);

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
/// ifindex, else the recorded ifindex with the recorded address.
pub fn find_in_host(
    host: &Host,
    vf: PciAddress,
    id: Option<&NetdevId>,
) -> Result<Option<Link>, CniError> {
    if let Some(l) = listed_in_host(host, vf)? {
        return Ok(Some(l));
    }
    let Some(id) = id else { return Ok(None) };
    let vfs = vf.to_string();
    if let Some(l) = host.nl.link_by_parent(&vfs)? {
        if l.index == id.ifindex || format_hwaddr(&l.address) == id.hwaddr {
            return Ok(Some(l));
        }
    }
    // ifindex 0: not recorded (an attachment converted from the Go plugin's cache).
    if id.ifindex != 0 {
        if let Some(l) = host.nl.link_by_index(id.ifindex)? {
            if same_device(&l, id, &vfs) {
                return Ok(Some(l));
            }
        }
    }
    Ok(None)
}

/// The netdev the kernel lists under `<VF>/net/` (the VF's own, in the host netns), as
/// a link. udev may rename it between the sysfs read and the netlink lookup (a netdev
/// re-created by a rebind or an RDMA device move comes up as `ib%d` and is renamed
/// asynchronously): a name that vanished is looked up again by its parent device
/// (`IFLA_PARENT_DEV_NAME`), which no rename changes.
pub(super) fn listed_in_host(host: &Host, vf: PciAddress) -> Result<Option<Link>, CniError> {
    let names = host.sysfs.netdevs(vf).unwrap_or_default();
    for n in &names {
        if let Some(l) = host.nl.link_by_name(n)? {
            return Ok(Some(l));
        }
    }
    if names.is_empty() {
        return Ok(None);
    }
    Ok(host.nl.link_by_parent(&vf.to_string())?)
}

/// Gives the VF's netdev in the host its original name and admin state. When the name
/// is taken in the host (EEXIST), the netdev gets [`FALLBACK_NAME_PATTERN`] instead.
pub(super) fn fix_name_and_state(
    nl: &Netlink,
    link: &Link,
    orig: &str,
    up: bool,
) -> Result<(), CniError> {
    let mut is_up = link.up;
    if link.name != orig {
        if is_up {
            nl.set_down(link.index)?;
            is_up = false;
        }
        match rename_over_own_altname(nl, link, orig) {
            Ok(()) => log::info!("renamed {} back to {orig}", link.name),
            Err(e) if e.errno == EEXIST => {
                nl.rename(link.index, FALLBACK_NAME_PATTERN)?;
                let now = nl.link_by_index(link.index)?.map(|l| l.name);
                log::warn!(
                    "cannot rename {} back to {orig}: the name is taken in the host; it is {} now",
                    link.name,
                    now.as_deref().unwrap_or("?")
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    if up && !is_up {
        nl.set_up(link.index)?;
    } else if !up && is_up {
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
/// in net/core/dev.c). An altname of another link is left alone (`EEXIST` stays).
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
            nl.del_altname(link.index, name)?;
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
/// ib-sriov-cni#217, and udev may rename it meanwhile).
pub fn netdev_after_rebind(host: &Host, vf: PciAddress) -> Result<Link, CniError> {
    let name = host.sysfs.wait_for_netdev(vf, NETDEV_WAIT)?;
    let link = listed_in_host(host, vf)?.ok_or_else(|| {
        CniError::host(format!(
            "netdev {name} of VF {vf} not found after it was re-created"
        ))
    })?;
    log::info!(
        "VF {vf} netdev {} ifindex {} (re-created)",
        link.name,
        link.index
    );
    Ok(link)
}
