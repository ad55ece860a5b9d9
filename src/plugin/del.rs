//! DEL (best effort, idempotent) and the undo shared with ADD's rollback.
//!
//! Every journaled VF step is undone in reverse, then the IPAM allocation is released,
//! then the journal is removed (only when all undo steps are done or moot, so a failed
//! DEL can be retried). IPAM is released by container ID and ifname whatever else failed
//! or was missing (SPEC.md DEL; the Go peer leaked IPs on an empty CNI_NETNS). The order
//! means a DEL killed half way never leaves a released address configured in a live pod,
//! nor an allocation without its journal.

use super::add::{find_netdev_after_rebind, rebind_driver};
use super::vfattr::PfView;
use super::{ipam_error, Ctx, Ipam};
use crate::cni::{code, CniError, Command};
use crate::failpoint::hit;
use crate::journal::{Journal, Step};
use crate::netlink::{Link, Netlink, EEXIST};
use crate::netns::NetNs;
use crate::sysfs::Sysfs;
use crate::types::LinkState;
use std::time::{Duration, Instant};

/// Name pattern for a returning netdev whose original name is taken in the host; the
/// kernel replaces `%d` with the first free number (`dev_alloc_name()`).
pub const FALLBACK_NAME_PATTERN: &str = "ibvf%d";

/// How long DEL waits for a VF netdev to come back to the host after its netns died
/// (the kernel returns physical netdevs to init_net from the netns cleanup work).
pub const RETURN_WAIT: Duration = Duration::from_secs(2);

/// The pod netns as DEL finds it.
pub(super) enum NsState<'a> {
    /// Open and live.
    Open(&'a NetNs),
    /// Gone (missing, empty CNI_NETNS, or a stale mount).
    Gone,
}

pub(super) fn del(ctx: &Ctx) -> Result<(), CniError> {
    let env = ctx.env;
    let mut errs: Vec<CniError> = Vec::new();

    // 1. The VF, from the journal, then its journaled IPAM step, then the journal.
    let mut ipam_done = false;
    match ctx.store.load(&env.container_id, &env.ifname) {
        Ok(Some(j)) => match teardown_with(ctx, &j, env.netns.as_deref(), true) {
            Ok(()) => ipam_done = j.has(Step::Ipam),
            Err(e) => errs.push(e),
        },
        Ok(None) => {
            log::info!(
                "no journal for {}/{}: nothing recorded to restore",
                env.container_id,
                env.ifname
            );
            if let Err(e) = without_journal(ctx) {
                errs.push(CniError::host(e));
            }
            // An ADD killed before its first journal write was renamed into place left
            // only the temp file: remove it with the (absent) journal.
            if let Err(e) = ctx.store.remove(&env.container_id, &env.ifname) {
                log::warn!("removing journal temp files: {e}");
            }
        }
        Err(e) => errs.push(CniError::new(
            code::IO_FAILURE,
            format!("reading journal: {e}"),
        )),
    }
    // 2. IPAM, always, unless step 1 released it: even without netns or journal, and
    // even when step 1 failed (no leak; the runtime retries DEL for the rest). After the
    // VF steps, so a DEL killed half way never leaves a released address in a live pod.
    let ipam = if ipam_done { Ok(None) } else { ctx.ipam() };
    match ipam {
        Ok(Some(Ipam::Builtin(c))) => {
            match c.release(
                &ctx.conf.name,
                &env.container_id,
                &env.ifname,
                ctx.conf.lock_timeout,
            ) {
                Ok(n) => log::info!(
                    "released {n} address(es) of {}/{}",
                    env.container_id,
                    env.ifname
                ),
                Err(e) => errs.push(ipam_error(e)),
            }
        }
        Ok(Some(Ipam::External(d))) => {
            if let Err(e) = ctx.delegate(&d, Command::Del) {
                errs.push(e);
            }
        }
        Ok(None) => {}
        Err(e) => errs.push(e),
    }
    if !ipam_done {
        if let Err(e) = hit("del.ipam") {
            errs.push(e);
        }
    }

    combine(
        errs,
        format!(
            "DEL of {}/{} did not complete; it is safe to retry",
            env.container_id, env.ifname
        ),
    )
}

/// Folds the errors of a best-effort sweep into one: none -> Ok; one -> itself; several
/// -> code 11 when every one is a "try again later" (a lock timeout), else code 102;
/// `msg` heads the combined error and every message and detail goes into `details`.
pub(super) fn combine(errs: Vec<CniError>, msg: String) -> Result<(), CniError> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.into_iter().next().expect("one error")),
        _ => {
            let code = if errs.iter().all(|e| e.code == code::TRY_AGAIN_LATER) {
                code::TRY_AGAIN_LATER
            } else {
                code::HOST_OPERATION
            };
            let details: Vec<String> = errs
                .iter()
                .map(|e| {
                    if e.details.is_empty() {
                        e.msg.clone()
                    } else {
                        format!("{} ({})", e.msg, e.details)
                    }
                })
                .collect();
            Err(CniError::new(code, msg).with_details(details.join("; ")))
        }
    }
}

/// Undoes a journaled attachment whose netns is the one recorded in the journal
/// (used by ADD for a stale journal of the same attachment).
pub(super) fn teardown(ctx: &Ctx, j: &Journal) -> Result<(), CniError> {
    teardown_with(ctx, j, j.netns.as_deref(), true)
}

/// Undoes `j` with the pod netns at `netns` (`None`: gone) and removes the journal.
/// `release_ipam`: also release the journaled IPAM step, after the VF steps and before
/// the journal goes (GC releases IPAM itself, for every unlisted attachment at once).
pub(super) fn teardown_with(
    ctx: &Ctx,
    j: &Journal,
    netns: Option<&str>,
    release_ipam: bool,
) -> Result<(), CniError> {
    let _lock = ctx.lock_vf(j.vf)?;
    let opened = match netns {
        None => None,
        Some(p) => match NetNs::open(p) {
            Ok(ns) => Some(ns),
            Err(e) if e.is_gone() => {
                log::info!("{e}: its VF netdev is returned to the host by the kernel");
                None
            }
            Err(e) => return Err(CniError::host(e.to_string())),
        },
    };
    let state = match &opened {
        Some(ns) => NsState::Open(ns),
        None => NsState::Gone,
    };
    let errs = undo(ctx, j, &state, release_ipam);
    if !errs.is_empty() {
        return Err(CniError::host(format!(
            "restoring VF {} of {}/{} did not complete",
            j.vf, j.container_id, j.ifname
        ))
        .with_details(errs.join("; ")));
    }
    hit("del.journal")?;
    ctx.store
        .remove(&j.container_id, &j.ifname)
        .map_err(|e| CniError::new(code::IO_FAILURE, format!("removing journal: {e}")))?;
    Ok(())
}

/// Undoes every begun step of `j` in reverse order; returns the errors (empty = done).
/// The IPAM step is undone only when `release_ipam`.
pub(super) fn undo(ctx: &Ctx, j: &Journal, ns: &NsState, release_ipam: bool) -> Vec<String> {
    let mut errs = undo_vf(ctx, j, ns);
    // IPAM last, whatever happened to the VF: the address is released only once the
    // netdev has left the pod (or could not), and before the journal goes, so no
    // allocation ever outlives both its journal and its attachment.
    if release_ipam && j.has(Step::Ipam) {
        let r = match ctx.ipam() {
            Ok(Some(Ipam::Builtin(c))) => c
                .release(
                    &j.network,
                    &j.container_id,
                    &j.ifname,
                    ctx.conf.lock_timeout,
                )
                .map(|_| ())
                .map_err(ipam_error),
            Ok(Some(Ipam::External(d))) => ctx.delegate(&d, Command::Del).map(|_| ()),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = r.and_then(|_| hit("del.ipam")) {
            errs.push(e.msg);
        }
    }
    errs
}

/// The VF part of [`undo`]: device-info file, netdev, RDMA device, GUID, link state.
fn undo_vf(ctx: &Ctx, j: &Journal, ns: &NsState) -> Vec<String> {
    let mut errs = Vec::new();
    let mut check = |r: Result<(), CniError>| {
        if let Err(e) = r {
            errs.push(e.msg);
        }
    };

    if j.has(Step::DeviceInfo) {
        if let Some(p) = &j.device_info_file {
            check(
                crate::fsutil::remove_durable(p)
                    .map(|_| ())
                    .map_err(|e| CniError::host(format!("removing {}: {e}", p.display()))),
            );
        }
    }

    // The VF itself: leave it alone if a newer attachment holds it (sriov-cni#313).
    match ctx.store.holder_of(j.vf, (&j.container_id, &j.ifname)) {
        Ok(Some(other)) => {
            log::warn!(
                "VF {} is now held by {}/{}; not touching it",
                j.vf,
                other.container_id,
                other.ifname
            );
            return errs;
        }
        Ok(None) => {}
        Err(e) => {
            errs.push(format!("reading journals: {e}"));
            return errs;
        }
    }
    let host_nl = match Netlink::open() {
        Ok(n) => n,
        Err(e) => {
            errs.push(e.to_string());
            return errs;
        }
    };
    if j.has(Step::MoveNetdev) && !j.vfio {
        check(return_netdev(&host_nl, &ctx.sysfs, j, ns));
        check(hit("del.move"));
    }
    if j.has(Step::RdmaMove) {
        if let (NsState::Open(pod), Some(name)) = (ns, j.rdma_device.as_deref()) {
            match super::rdma::move_out(ctx, name, pod) {
                Ok(true) if j.has(Step::MoveNetdev) => {
                    // Moving the RDMA device re-creates the IPoIB netdev in the default
                    // netns: make sure it carries its original name and state again.
                    check(return_netdev(&host_nl, &ctx.sysfs, j, &NsState::Gone));
                }
                Ok(_) => {}
                Err(e) => check(Err(e)),
            }
        }
        // With the pod netns gone the kernel has returned the device already.
        check(hit("del.rdma"));
    }
    let view = PfView::for_journal(&host_nl, &ctx.sysfs, j);
    if j.has(Step::Guid) {
        check(restore_guid(ctx, &host_nl, &view, j));
        check(hit("del.guid"));
    }
    if j.has(Step::LinkState) {
        let want = j.orig_link_state.unwrap_or_else(|| {
            log::warn!("original link state of VF {} unknown; restoring auto", j.vf);
            LinkState::Auto
        });
        // Already original (the set never happened, e.g. the driver refused it, or a
        // previous DEL restored it): no set, which such a driver would refuse as well.
        let current = view.read().ok().and_then(|st| st.link_state).map(|s| s.0);
        if current == Some(want) {
            log::info!("VF {} link state is already {want}", j.vf);
        } else {
            check(
                view.set_link_state(want, j.link_state_via)
                    .map(|_| log::info!("VF {} link state restored to {want}", j.vf))
                    .map_err(CniError::host),
            );
        }
        check(hit("del.link_state"));
    }
    errs
}

fn nl_err(e: crate::netlink::NlError) -> CniError {
    CniError::host(e.to_string())
}

/// Brings the VF netdev back to the host under its original name and admin state.
///
/// In the host the netdev is found by its original name, else by its parent device
/// (`IFLA_PARENT_DEV_NAME`, kernel >= 5.14), else by the VF's sysfs `net/` directory
/// (a netdev the kernel returned from a dead netns keeps the name it had in the pod).
fn return_netdev(
    host_nl: &Netlink,
    sysfs: &Sysfs,
    j: &Journal,
    ns: &NsState,
) -> Result<(), CniError> {
    let orig = j
        .host_ifname
        .clone()
        .ok_or_else(|| CniError::internal("journal has no host netdev name"))?;
    let vf = j.vf.to_string();
    if let NsState::Open(pod) = ns {
        let pod_nl = Netlink::open_in(pod).map_err(nl_err)?;
        let found = match pod_nl.link_by_name(&j.ifname).map_err(nl_err)? {
            Some(l) if l.parent_dev.as_deref().is_none_or(|p| p == vf) => Some(l),
            _ => pod_nl.link_by_parent(&vf).map_err(nl_err)?,
        };
        if let Some(l) = found {
            let host_ns = NetNs::current().map_err(|e| CniError::host(e.to_string()))?;
            if l.up {
                pod_nl.set_down(l.index).map_err(nl_err)?;
            }
            match pod_nl.move_to_netns_named(l.index, host_ns.fd(), &orig) {
                Ok(()) => {}
                Err(e) if e.errno == Some(EEXIST) => {
                    log::warn!(
                        "{orig} is taken in the host; returning VF {vf} as {FALLBACK_NAME_PATTERN}"
                    );
                    pod_nl
                        .move_to_netns_named(l.index, host_ns.fd(), FALLBACK_NAME_PATTERN)
                        .map_err(nl_err)?;
                }
                Err(e) => return Err(nl_err(e)),
            }
            log::info!("moved {} (VF {vf}) back to the host as {orig}", j.ifname);
        }
    }
    // Now (or already) in the host: make sure of its name and admin state.
    let deadline = Instant::now()
        + match ns {
            NsState::Gone => RETURN_WAIT,
            NsState::Open(_) => Duration::ZERO,
        };
    let link = loop {
        let mut l = match host_nl.link_by_name(&orig).map_err(nl_err)? {
            Some(l) => Some(l),
            None => host_nl.link_by_parent(&vf).map_err(nl_err)?,
        };
        if l.is_none() {
            if let Some(name) = sysfs.netdevs(j.vf).ok().and_then(|v| v.into_iter().next()) {
                l = host_nl.link_by_name(&name).map_err(nl_err)?;
            }
        }
        if l.is_some() || Instant::now() >= deadline {
            break l;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let Some(link) = link else {
        log::warn!(
            "VF {vf} netdev ({orig}) is neither in the pod nor in the host; it was destroyed with its namespace or is elsewhere: nothing to return"
        );
        return Ok(());
    };
    fix_name_and_state(host_nl, &link, &orig, j.host_up)
}

fn fix_name_and_state(nl: &Netlink, link: &Link, orig: &str, up: bool) -> Result<(), CniError> {
    let mut is_up = link.up;
    if link.name != orig {
        if is_up {
            nl.set_down(link.index).map_err(nl_err)?;
            is_up = false;
        }
        match nl.rename(link.index, orig) {
            Ok(()) => log::info!("renamed {} back to {orig}", link.name),
            Err(e) if e.errno == Some(EEXIST) => {
                log::warn!(
                    "cannot rename {} back to {orig}: the name is taken",
                    link.name
                )
            }
            Err(e) => return Err(nl_err(e)),
        }
    }
    if up && !is_up {
        nl.set_up(link.index).map_err(nl_err)?;
    } else if !up && is_up {
        nl.set_down(link.index).map_err(nl_err)?;
    }
    Ok(())
}

fn restore_guid(ctx: &Ctx, host_nl: &Netlink, view: &PfView, j: &Journal) -> Result<(), CniError> {
    use crate::netlink::vf::GuidKind;
    // Already original (the step never ran, or a previous DEL restored it): no set and,
    // above all, no needless driver rebind.
    if let Ok(st) = view.read() {
        let cur = (st.node_guid.map(|g| g.0), st.port_guid.map(|g| g.0));
        if cur.0 == j.orig_node_guid && (cur.1.is_none() || cur.1 == j.orig_port_guid) {
            log::info!("VF {} already has its original GUIDs", j.vf);
            return Ok(());
        }
    }
    let mut via = j.guid_via;
    let mut any = false;
    for (kind, g) in [
        (GuidKind::Node, j.orig_node_guid),
        (GuidKind::Port, j.orig_port_guid),
    ] {
        match g {
            Some(g) => {
                via = Some(view.set_guid(kind, g, via).map_err(CniError::host)?);
                any = true;
            }
            None => log::warn!(
                "original {kind:?} GUID of VF {} unknown; not restored",
                j.vf
            ),
        }
    }
    if any {
        log::info!("VF {} GUIDs restored", j.vf);
    }
    if any && !j.vfio && j.has(Step::Rebind) {
        rebind_driver(ctx, j)?;
        // The GUID is restored once the driver is rebound; the netdev the probe
        // re-creates is the driver's. If it does not show up, say so and finish.
        match find_netdev_after_rebind(ctx, host_nl, j) {
            Ok(link) => {
                if let Some(orig) = &j.host_ifname {
                    fix_name_and_state(host_nl, &link, orig, j.host_up)?;
                }
            }
            Err(e) => log::warn!("after restoring the GUID of VF {}: {e}", j.vf),
        }
    }
    Ok(())
}

/// DEL without a journal: nothing recorded to restore, but a VF netdev named CNI_IFNAME
/// (or whose parent is the configured VF) still in a live pod netns is returned to the host.
fn without_journal(ctx: &Ctx) -> Result<(), String> {
    let Some(path) = ctx.env.netns.as_deref() else {
        return Ok(());
    };
    let Some(vf) = ctx.conf.device_id else {
        return Ok(());
    };
    let pod = match NetNs::open(path) {
        Ok(ns) => ns,
        Err(e) if e.is_gone() => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let _lock = ctx.lock_vf(vf).map_err(|e| e.msg)?;
    let pod_nl = Netlink::open_in(&pod).map_err(|e| e.to_string())?;
    let vfs = vf.to_string();
    let found = match pod_nl
        .link_by_name(&ctx.env.ifname)
        .map_err(|e| e.to_string())?
    {
        Some(l) if l.parent_dev.as_deref().is_none_or(|p| p == vfs) => Some(l),
        _ => pod_nl.link_by_parent(&vfs).map_err(|e| e.to_string())?,
    };
    let Some(l) = found else { return Ok(()) };
    let host_ns = NetNs::current().map_err(|e| e.to_string())?;
    if l.up {
        pod_nl.set_down(l.index).map_err(|e| e.to_string())?;
    }
    let name = ctx
        .sysfs
        .netdevs(vf)
        .ok()
        .and_then(|v| v.into_iter().next())
        .unwrap_or_else(|| l.name.clone());
    match pod_nl.move_to_netns_named(l.index, host_ns.fd(), &name) {
        Ok(()) => {}
        Err(e) if e.errno == Some(EEXIST) => pod_nl
            .move_to_netns_named(l.index, host_ns.fd(), FALLBACK_NAME_PATTERN)
            .map_err(|e| e.to_string())?,
        Err(e) => return Err(e.to_string()),
    }
    log::info!(
        "moved {} (VF {vf}) back to the host without a journal",
        l.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_keeps_one_error_and_folds_several_by_code() {
        assert_eq!(combine(vec![], "m".into()), Ok(()));
        let busy = CniError::try_later("lock busy");
        assert_eq!(combine(vec![busy.clone()], "m".into()), Err(busy.clone()));
        let e = combine(vec![busy.clone(), busy.clone()], "sweep".into()).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (code::TRY_AGAIN_LATER, "sweep"));
        assert_eq!(e.details, "lock busy; lock busy");
        let host = CniError::host("netlink").with_details("EBUSY");
        let e = combine(vec![busy, host], "sweep".into()).unwrap_err();
        assert_eq!(e.code, code::HOST_OPERATION);
        assert_eq!(e.details, "lock busy; netlink (EBUSY)");
    }
}
