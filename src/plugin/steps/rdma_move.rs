//! Step `RdmaMove`: the VF's RDMA device, moved into the pod netns with
//! `RDMA_NLDEV_CMD_SET` + `RDMA_NLDEV_NET_NS_FD` (include/uapi/rdma/rdma_netlink.h) when
//! the RDMA subsystem is in exclusive netns mode, and back on undo.

use super::netdev::{
    find_in_host, fix_name_and_state, netdev_after_rebind, netdev_id, same_device,
};
use super::{Apply, Host, PodNs, StepFailure};
use crate::cni::CniError;
use crate::failpoint::hit;
use crate::journal::Journal;
use crate::plugin::Ctx;
use crate::types::format_hwaddr;

/// Moves `device` into the pod (ADD), then records the netdev the move re-created.
pub(super) fn apply(cx: &Apply, j: &mut Journal, device: &str) -> Result<(), StepFailure> {
    crate::plugin::rdma::move_in(cx.ctx, device, &cx.pod.ns)?;
    hit("add.rdma")?;
    netdev_after_rdma_move(cx, j)
}

/// After the RDMA device moved into the pod: the netdev the journal will move. Moving
/// an RDMA device to another netns disables and re-enables it, which removes and
/// re-adds every ib_client: the ipoib ULP destroys the VF's IPoIB netdev and creates a
/// new one in the initial netns (new ifindex, new QPN in its hardware address; `ib%d`
/// until udev renames it). `rdma_dev_change_netns()` in drivers/infiniband/core/device.c,
/// `ipoib_add_one()` in drivers/infiniband/ulp/ipoib/ipoib_main.c; the Go plugin moves the
/// RDMA device first for that reason. The recorded netdev still in the host (a driver
/// without that behaviour) is kept; otherwise the kernel's netdev of the VF is taken
/// (listed under `<VF>/net/`, waited for up to [`crate::plugin::NETDEV_WAIT`]) and recorded.
fn netdev_after_rdma_move(cx: &Apply, j: &mut Journal) -> Result<(), StepFailure> {
    let Some(id) = j.netdev().map(|(id, ..)| id.clone()) else {
        return Ok(());
    };
    let vf = j.vf.to_string();
    if cx
        .host
        .nl
        .link_by_index(id.ifindex)?
        .is_some_and(|l| same_device(&l, &id, &vf))
    {
        return Ok(());
    }
    let link = netdev_after_rebind(cx.host, j.vf)?;
    log::info!(
        "the RDMA device move re-created the netdev of VF {vf}: {} (ifindex {}, {}) replaces ifindex {}",
        link.name,
        link.index,
        format_hwaddr(&link.address),
        id.ifindex
    );
    j.set_netdev(netdev_id(&link));
    cx.ctx.store.save(j)?;
    Ok(())
}

/// Moves `device` back to the host netns (with the pod netns gone, the kernel has
/// already), then gives the IPoIB netdev the move re-created its original name and state.
pub(super) fn undo(
    ctx: &Ctx,
    host: &Host,
    j: &Journal,
    device: &str,
    pod: &PodNs,
) -> Result<(), CniError> {
    // With the pod netns gone the kernel has returned the device already.
    let PodNs::Live(p) = pod else { return Ok(()) };
    if crate::plugin::rdma::move_out(ctx, device, &p.ns, j.vf, j.vf_index.0)? {
        // Moving the RDMA device re-creates the IPoIB netdev in the host: give it its
        // original name and state again.
        if let Some((_, host_name, host_up, _)) = j.netdev() {
            if let Some(l) = find_in_host(host, j.vf, None)? {
                fix_name_and_state(host, j.vf, &l, host_name, host_up)?;
            }
        }
    }
    Ok(())
}
