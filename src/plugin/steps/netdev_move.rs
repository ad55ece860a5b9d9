//! Step `MoveNetdev`: the VF's netdev, moved from the host netns into the pod netns as
//! `CNI_IFNAME` and set up (one `RTM_NEWLINK` with `IFLA_NET_NS_FD` and `IFLA_IFNAME`),
//! and brought back under its original name and admin state on undo, by identity.

use super::netdev::{
    find_in_host, find_in_pod, fix_name_and_state, netdev_after_rebind, rebind_driver, same_device,
    EEXIST, FALLBACK_NAME_PATTERN,
};
use super::{Apply, Host, PodNs, StepFailure};
use crate::cni::{CniError, Interface};
use crate::failpoint::hit;
use crate::journal::{Journal, NetdevId, Step};
use crate::netlink::LinkEvents;
use crate::plugin::Ctx;
use crate::types::format_hwaddr;
use std::time::{Duration, Instant};

/// How long DEL waits for a VF netdev to come back to the host after its netns died
/// (the kernel returns physical netdevs to init_net from the netns cleanup work, which
/// can take seconds on a busy node). Past it DEL re-creates the netdev by rebinding the
/// VF's driver (`recover_by_rebind`).
pub const RETURN_WAIT: Duration = Duration::from_secs(5);

/// Moves the recorded netdev into the pod (ADD) and records its pod ifindex in step `i`
/// of `j` (saved with the completion).
pub(super) fn apply(
    cx: &mut Apply,
    j: &mut Journal,
    i: usize,
    netdev: &NetdevId,
) -> Result<(), StepFailure> {
    // The built-in IPAM claim stays after the move, in this thread: claimed
    // in a second thread while the move waited in the kernel, it cost 3-4 ms
    // of wall time and 0.6-1.3 ms of CPU more per ADD+DEL cycle in same-run
    // A/B runs of scripts/bench.sh on tmpfs, and was no faster on ext4.
    let pod_ifindex = move_in(cx, j, netdev)?;
    hit("add.move")?;
    // Written with the completion (one journal write fewer per ADD: a file
    // creation costs ~1 ms of system time on ext4 here). Lost in a crash, the
    // undo finds the netdev in the pod by its recorded identity instead.
    if let Some(Step::MoveNetdev { pod_ifindex: p, .. }) = j.steps.get_mut(i) {
        *p = Some(pod_ifindex);
    }
    Ok(())
}

/// Moves the VF netdev into the pod as CNI_IFNAME and sets it up; returns its pod
/// ifindex. The netdev is proved by identity before the move and found by identity
/// after it. `EEXIST` (CNI_IFNAME taken in the pod, maybe after the kernel moved the
/// device under its host name: move and rename are not atomic in `do_setlink()`) is
/// code 4; the rollback finds the device wherever it is.
fn move_in(cx: &mut Apply, j: &Journal, id: &NetdevId) -> Result<u32, StepFailure> {
    let (host, env) = (cx.host, cx.ctx.env);
    let vf = j.vf.to_string();
    let link = host
        .nl
        .link_by_index(id.ifindex)?
        .filter(|l| same_device(l, id, &vf))
        .ok_or_else(|| {
            CniError::host(format!(
                "the netdev of VF {vf} (ifindex {}, {}) is not in the host any more",
                id.ifindex, id.hwaddr
            ))
        })?;
    if link.up {
        host.nl.set_down(link.index)?;
    }
    let pod_nl = cx.pod.nl()?;
    match host
        .nl
        .move_to_netns_named(link.index, cx.pod.ns.fd(), &env.ifname)
    {
        Ok(()) => {}
        Err(e) if e.errno == EEXIST => {
            return Err(CniError::env(format!(
                "CNI_IFNAME {} already exists in network namespace {}",
                env.ifname,
                cx.pod.ns.path().display()
            ))
            .into())
        }
        Err(e) => return Err(e.into()),
    }
    // By the name it was given (free in the pod until this move), proved by identity;
    // else every pod link searched for that identity.
    let by_name = pod_nl
        .link_by_name(&env.ifname)?
        .filter(|l| same_device(l, id, &vf));
    let pl = match by_name {
        Some(l) => Some(l),
        None => find_in_pod(pod_nl, id, None, &vf)?,
    }
    .filter(|l| l.name == env.ifname)
    .ok_or_else(|| {
        CniError::host(format!(
            "the netdev of VF {vf} is not {} in the pod after the move",
            env.ifname
        ))
    })?;
    pod_nl.set_up(pl.index)?;
    log::info!(
        "moved {} (VF {vf}) into {} as {} (ifindex {})",
        link.name,
        cx.pod.ns.path().display(),
        env.ifname,
        pl.index
    );
    cx.out.interfaces.push(Interface {
        name: env.ifname.clone(),
        sandbox: env.netns.clone().unwrap_or_default(),
        pci_id: Some(vf),
        mac: format_hwaddr(&pl.address),
        mtu: pl.mtu,
    });
    Ok(pl.index)
}

/// Brings the VF netdev back to the host under its original name and admin state,
/// proving its identity first. With the pod netns gone, waits (bounded by
/// `host.return_wait`) for the kernel to return it; one that did not come back
/// (destroyed with the netns, as netdevs with `rtnl_link_ops` but no `netns_refund` are
/// by `default_device_exit_net()` in net/core/dev.c; deleted in the pod before it died,
/// or on the host) is re-created by [`recover_by_rebind`].
///
/// Errors: a live pod whose netdev is neither in it nor in the host (code 102); a
/// netlink failure; the rebind lock not taken in time (code 11): the journal stays and
/// DEL can be retried.
#[allow(clippy::too_many_arguments)]
pub(super) fn undo(
    ctx: &Ctx,
    host: &Host,
    j: &Journal,
    id: &NetdevId,
    host_name: &str,
    host_up: bool,
    pod_ifindex: Option<u32>,
    pod: &PodNs,
) -> Result<(), CniError> {
    let vf = j.vf.to_string();
    // The name the netdev was moved back under, when the move gave it `host_name`.
    let mut moved_as = None;
    if let PodNs::Live(p) = pod {
        let pnl = p.nl()?;
        if let Some(l) = find_in_pod(pnl, id, pod_ifindex, &vf)? {
            if l.up {
                pnl.set_down(l.index)?;
            }
            match pnl.move_to_netns_named(l.index, host.ns.fd(), host_name) {
                Ok(()) => moved_as = Some(host_name),
                Err(e) if e.errno == EEXIST => {
                    // Either nothing moved (its pod name and the original name are both
                    // taken in the host), or it moved under its pod name and the rename
                    // failed (move and rename are not atomic in `do_setlink()`): then the
                    // host lookup below finds it and gives it the fallback name.
                    let still_here = pnl
                        .link_by_index(l.index)?
                        .is_some_and(|x| same_device(&x, id, &vf));
                    if still_here {
                        log::warn!(
                            "{host_name} and {} are taken in the host; returning VF {vf} as {FALLBACK_NAME_PATTERN}",
                            l.name
                        );
                        pnl.move_to_netns_named(l.index, host.ns.fd(), FALLBACK_NAME_PATTERN)?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
            log::info!("moved {} (VF {vf}) back to the host", l.name);
        }
    }
    // Just moved back as `host_name`: found by that name, proved by identity (a udev
    // rename since, or another link given the name, falls to the full lookup).
    if let Some(n) = moved_as {
        if let Some(l) = host.nl.link_by_name(n)?.filter(|l| same_device(l, id, &vf)) {
            return fix_name_and_state(host, j.vf, &l, host_name, host_up);
        }
    }
    let wait = match pod {
        PodNs::Gone => ctx.bounded(host.return_wait),
        PodNs::Live(_) => Duration::ZERO,
    };
    if let Some(l) = wait_in_host(host, j, id, wait)? {
        return fix_name_and_state(host, j.vf, &l, host_name, host_up);
    }
    if let PodNs::Live(p) = pod {
        // A VF without a driver, or one that no longer exists, has no netdev anywhere:
        // nothing of the attachment is left on it, whatever the pod does.
        match host.sysfs.driver(j.vf) {
            Ok(Some(_)) => {}
            Ok(None) => {
                log::warn!(
                    "VF {vf}: its netdev is neither in the pod netns nor in the host, and it has no driver bound, so it has no netdev: nothing of {}/{} is left on it",
                    j.container_id,
                    j.ifname
                );
                return Ok(());
            }
            Err(e) => {
                log::warn!(
                    "VF {vf}: its netdev is neither in the pod netns nor in the host, and the VF itself is gone ({e}): nothing of {}/{} is left on it",
                    j.container_id,
                    j.ifname
                );
                return Ok(());
            }
        }
        // Not recovered by a rebind: the netdev may live on in a netns the pod moved
        // it to (another pod's, even), and the pod can still give it back.
        return Err(CniError::host(format!(
            "the netdev of VF {vf} ({}) is neither in the pod netns {} nor in the host: the pod may have moved it to another network namespace; the journal is kept and DEL completes once it is back, or once the pod netns is gone",
            id.hwaddr,
            p.ns.path().display()
        )));
    }
    let why = format!(
        "its netdev ({}) did not come back to the host within {} ms of the pod netns' end (destroyed with it, or deleted)",
        id.hwaddr,
        wait.as_millis()
    );
    recover_by_rebind(ctx, host, j, id, host_name, host_up, &why)
}

/// Looks for the VF's netdev in the host, waiting up to `wait` for it: woken by the
/// kernel's link notifications (subscribed before the first look, so a return cannot
/// slip between a look and the wait), not by a timer.
fn wait_in_host(
    host: &Host,
    j: &Journal,
    id: &NetdevId,
    wait: Duration,
) -> Result<Option<crate::netlink::Link>, CniError> {
    let mut events = if wait.is_zero() {
        None
    } else {
        Some(LinkEvents::subscribe()?)
    };
    let deadline = Instant::now() + wait;
    loop {
        if let Some(l) = find_in_host(host, j.vf, Some(id))? {
            return Ok(Some(l));
        }
        match events.as_mut() {
            Some(ev) if Instant::now() < deadline => {
                ev.wait(deadline);
            }
            _ => return Ok(None),
        }
    }
}

/// Re-creates the netdev of VF `j.vf` in the host by rebinding the VF's driver (sysfs
/// `/sys/bus/pci/drivers/<driver>/{unbind,bind}`: the unbind tears the netdev down
/// wherever it is, the probe creates it in the initial netns), under the node-wide
/// rebind lock, then gives it its original name and admin state. Bounded: the rebind
/// lock's `lockTimeoutMs`, the writes, and [`crate::plugin::NETDEV_WAIT`] for the netdev.
///
/// Nothing of the attachment is left on a VF that has no driver, that no longer exists
/// (`sriov_numvfs` changed), whose rebind fails or whose driver brings no netdev back in
/// time: each is logged and the undo goes on (`Ok`), so DEL and GC finish.
///
/// Errors: the rebind lock not taken in time (code 11), a netlink failure naming the
/// re-created netdev (code 102).
fn recover_by_rebind(
    ctx: &Ctx,
    host: &Host,
    j: &Journal,
    id: &NetdevId,
    host_name: &str,
    host_up: bool,
    why: &str,
) -> Result<(), CniError> {
    let vf = j.vf;
    let driver = match host.sysfs.driver(vf) {
        Ok(Some(d)) => d,
        Ok(None) => {
            log::warn!("VF {vf}: {why}; it has no driver bound, so no netdev can come back: nothing of {}/{} is left on it", j.container_id, j.ifname);
            return Ok(());
        }
        Err(e) => {
            log::warn!(
                "VF {vf}: {why}; the VF itself is gone ({e}): nothing of {}/{} is left on it",
                j.container_id,
                j.ifname
            );
            return Ok(());
        }
    };
    let _rebind = ctx.lock_rebind()?;
    // It may have come back while the lock was awaited.
    if let Some(l) = find_in_host(host, vf, Some(id))? {
        return fix_name_and_state(host, vf, &l, host_name, host_up);
    }
    log::warn!("VF {vf}: {why}; re-creating it: recovery rebind of VF {vf} ({driver})");
    hit("del.recovery_rebind")?;
    let rdma_before = super::guid::rdma_name_before_del_rebind(host, j);
    if let Err(e) = rebind_driver(host.sysfs, vf) {
        log::warn!(
            "recovery rebind of VF {vf} failed: {e}; nothing of {}/{} is left on it",
            j.container_id,
            j.ifname
        );
        return Ok(());
    }
    let back = netdev_after_rebind(host, vf);
    super::guid::rename_back_after_del_rebind(ctx, host, vf, rdma_before.as_deref());
    match back {
        Ok(l) => {
            fix_name_and_state(host, vf, &l, host_name, host_up)?;
            log::info!("recovery rebind of VF {vf}: its netdev is back in the host");
            Ok(())
        }
        Err(e) => {
            log::warn!(
                "recovery rebind of VF {vf}: the driver brought no netdev back ({e}); nothing of {}/{} is left on it",
                j.container_id,
                j.ifname
            );
            Ok(())
        }
    }
}
