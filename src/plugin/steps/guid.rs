//! Step `Guid`: the VF's node and port GUID, set through the PF
//! (`IFLA_VF_IB_NODE_GUID`/`IFLA_VF_IB_PORT_GUID`, include/uapi/linux/if_link.h) or the
//! MLNX_OFED `sriov/<N>/{node,port}` files, then (mlx5) a driver rebind so the VF comes
//! up with it. The whole window, GUID write to the re-read of the VF's netdev and RDMA
//! device, runs under the node-wide rebind lock (`Ctx::lock_rebind`).

use super::netdev::{fix_name_and_state, netdev_after_rebind, netdev_id, rebind_driver};
use super::{Apply, Host, StepFailure};
use crate::cni::CniError;
use crate::failpoint::hit;
use crate::journal::{Journal, Step, Via};
use crate::plugin::vfattr::PfView;
use crate::plugin::Ctx;
use crate::types::Guid;

/// Sets both GUIDs of the VF to `want` through `via` and, with `rebind`, rebinds its
/// driver, then records the re-created netdev's identity and RDMA device name in `j`
/// (saved without fsync). Errors: the set or the rebind failing; the RDMA device's name
/// changed across the rebind (code 102: the pod already has the old device's files).
pub(super) fn apply(
    cx: &Apply,
    j: &mut Journal,
    want: Guid,
    via: Option<Via>,
    rebind: bool,
) -> Result<(), StepFailure> {
    let ctx = cx.ctx;
    // The whole window, GUID write to re-read, under the node-wide rebind lock.
    let _rebind = match rebind {
        true => Some(ctx.lock_rebind()?),
        false => None,
    };
    let used = cx.view.set_guids(want, want, via)?;
    log::info!("VF {} node and port GUID set to {want} via {used:?}", j.vf);
    hit("add.guid")?;
    if rebind {
        let rdma_before = cx.host.sysfs.rdma_devices(j.vf).unwrap_or_default();
        log::debug!("rebind window of VF {} begins", j.vf);
        rebind_driver(cx.host.sysfs, j.vf)?;
        hit("add.rebind.bound")?;
        let link = netdev_after_rebind(cx.host, j.vf)?;
        let rdma_now = cx.host.sysfs.rdma_devices(j.vf).unwrap_or_default();
        j.set_netdev(netdev_id(&link));
        if let Some(now) = rdma_now.first() {
            for s in j.steps.iter_mut() {
                if let Step::RdmaMove { device } = s {
                    *device = now.clone();
                }
            }
        }
        ctx.store.save(j)?;
        log::debug!("rebind window of VF {} ends", j.vf);
        // The SR-IOV device plugin gave the pod the VF's RDMA device (its
        // /dev/infiniband/uverbsN and rdma_cm) before ADD: a different name now
        // means those files may name another device.
        if !rdma_before.is_empty() && rdma_now != rdma_before {
            return Err(CniError::host(format!(
                    "the RDMA device of VF {} changed across the driver rebind: it was {} and is now {}; the SR-IOV device plugin has already given the pod the old device's files, so the ADD is rolled back",
                    j.vf,
                    rdma_before.join(","),
                    if rdma_now.is_empty() {
                        "absent".to_string()
                    } else {
                        rdma_now.join(",")
                    }
                ))
                .into());
        }
        hit("add.rebind")?;
    }
    Ok(())
}

fn orig_is_unknown(kind: crate::netlink::vf::GuidKind, orig: (Option<Guid>, Option<Guid>)) -> bool {
    match kind {
        crate::netlink::vf::GuidKind::Node => orig.0.is_none(),
        crate::netlink::vf::GuidKind::Port => orig.1.is_none(),
    }
}

/// Restores the original GUIDs (and rebinds so they take effect); nothing, and above
/// all no rebind, when the VF has them already. A GUID ADD could not read (journaled
/// as `null`) is replaced by the VF's derived GUID ([`crate::vfguid::derived_guid`]),
/// not left as the pod's (docs/configuration.md "VF state on a PF of any size").
pub(super) fn undo(
    ctx: &Ctx,
    host: &Host,
    view: &PfView,
    j: &Journal,
    orig: (Option<crate::types::Guid>, Option<crate::types::Guid>),
    via: Option<crate::journal::Via>,
    rebind: bool,
) -> Result<(), CniError> {
    use crate::netlink::vf::GuidKind;
    // Already original (the step never ran, or a previous DEL restored it): no set and,
    // above all, no needless driver rebind.
    if let Ok(st) = view.read() {
        let cur = (st.node_guid.map(|g| g.0), st.port_guid.map(|g| g.0));
        if orig.0.is_some() && cur.0 == orig.0 && (cur.1.is_none() || cur.1 == orig.1) {
            log::debug!("VF {} already has its original GUIDs", j.vf);
            return Ok(());
        }
    }
    // GUID write to rebind under the node-wide rebind lock, as in ADD.
    let _rebind = match rebind {
        true => Some(ctx.lock_rebind()?),
        false => None,
    };
    let mut via = via;
    let mut any = false;
    // A GUID ADD could not read (no route gave the PF's VF table, no OFED file, no IPoIB
    // netdev): the pod's GUID must not stay on the VF (ib-kubernetes hands it to
    // another pod, and two ports with one GUID confuse the subnet manager), so the VF
    // gets its derived GUID (crate::vfguid: unique, stable, outside ib-kubernetes'
    // pool); without a PF port GUID to derive it from, it is left, with a warning.
    let unknown_to = || {
        let ib_addr = view
            .pf_link
            .as_ref()
            .map(|l| l.address.as_slice())
            .filter(|a| a.len() == 20);
        crate::vfguid::pf_port_guid(view.sysfs, view.pf, ib_addr)
            .map(|(pg, _)| crate::vfguid::derived_guid(pg, view.vf))
    };
    for (kind, g) in [(GuidKind::Node, orig.0), (GuidKind::Port, orig.1)] {
        match g.or_else(unknown_to) {
            Some(g) => {
                if orig_is_unknown(kind, orig) {
                    log::warn!(
                        "original {kind:?} GUID of VF {} unknown; giving it its derived GUID {g} instead of leaving the pod's",
                        j.vf
                    );
                }
                via = Some(view.set_guid(kind, g, via)?);
                any = true;
            }
            None => log::warn!(
                "original {kind:?} GUID of VF {} unknown and its PF's port GUID unreadable; not restored",
                j.vf
            ),
        }
    }
    if any {
        log::info!("VF {} GUIDs restored", j.vf);
    }
    // A VF without a driver has nothing to rebind: the GUIDs written through the PF
    // take effect when a driver binds it.
    let has_driver = matches!(host.sysfs.driver(j.vf), Ok(Some(_)));
    if any && rebind && !has_driver {
        log::warn!(
            "VF {} has no driver bound: its restored GUIDs take effect when a driver binds it; no rebind",
            j.vf
        );
    }
    if any && rebind && has_driver {
        rebind_driver(host.sysfs, j.vf)?;
        // The GUID takes effect once the driver is rebound; the netdev the probe
        // re-creates is the driver's (listed under <VF>/net/). If it does not show up,
        // say so and finish.
        match netdev_after_rebind(host, j.vf) {
            Ok(link) => {
                if let Some((_, host_name, host_up, _)) = j.netdev() {
                    fix_name_and_state(host, j.vf, &link, host_name, host_up)?;
                }
            }
            Err(e) => log::warn!("after restoring the GUID of VF {}: {e}", j.vf),
        }
    }
    Ok(())
}
