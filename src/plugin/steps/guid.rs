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
/// (saved without fsync). When the rebind gave the VF's RDMA device another name but the
/// same uverbs char device, the device is renamed back ([`after_rebind`],
/// [`crate::plugin::rdma::rename_back`]). Errors (code 102): the set or the rebind
/// failing; the uverbs char device changed, or the rename back failed (the pod already
/// has the old device's files).
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
        let uverbs_before = cx.host.sysfs.uverbs_devs(j.vf).unwrap_or_default();
        log::debug!("rebind window of VF {} begins", j.vf);
        rebind_driver(cx.host.sysfs, j.vf)?;
        hit("add.rebind.bound")?;
        let link = netdev_after_rebind(cx.host, j.vf)?;
        let rdma_now = cx.host.sysfs.rdma_devices(j.vf).unwrap_or_default();
        let uverbs_now = cx.host.sysfs.uverbs_devs(j.vf).unwrap_or_default();
        j.set_netdev(netdev_id(&link));
        if let Some(now) = rdma_now.first() {
            set_rdma_move_device(j, now);
        }
        ctx.store.save(j)?;
        match after_rebind(
            &j.vf.to_string(),
            (&rdma_before, &uverbs_before),
            (&rdma_now, &uverbs_now),
        ) {
            AfterRebind::Keep => {}
            AfterRebind::Refuse(why) => return Err(CniError::host(why).into()),
            AfterRebind::Rename { now, before } => {
                // Restores the state before ADD (the name the device plugin and the pod
                // may know): no undo of its own; the journal's RdmaMove step names the
                // final device.
                crate::plugin::rdma::rename_back(ctx, j.vf, &now, &before).map_err(|e| {
                    CniError::host(format!(
                        "the RDMA device of VF {} was {before} before the driver rebind and is {now} after it (same uverbs char device {}); renaming it back failed, so the ADD is rolled back: {e}",
                        j.vf,
                        uverbs_now.join(",")
                    ))
                })?;
                set_rdma_move_device(j, &before);
                ctx.store.save(j)?;
            }
        }
        log::debug!("rebind window of VF {} ends", j.vf);
        hit("add.rebind")?;
    }
    Ok(())
}

/// Points the journal's `RdmaMove` step (if any) at RDMA device `name`.
fn set_rdma_move_device(j: &mut Journal, name: &str) {
    for s in j.steps.iter_mut() {
        if let Step::RdmaMove { device } = s {
            *device = name.to_string();
        }
    }
}

/// What ADD does about the VF's RDMA device once its driver is rebound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterRebind {
    /// Same name (or no RDMA device before): nothing to do.
    Keep,
    /// The same uverbs char device under another name: rename `now` back to `before`.
    Rename {
        /// The name the kernel gave the new device.
        now: String,
        /// The name before the rebind.
        before: String,
    },
    /// Roll the ADD back (code 102): the message says what changed.
    Refuse(String),
}

/// Decides [`AfterRebind`] for VF `vf` from its RDMA device names
/// (`<VF>/infiniband/`, sorted) and uverbs `dev` numbers
/// (`<VF>/infiniband_verbs/uverbs<N>/dev`, "MAJOR:MINOR", sorted) before and after the
/// rebind. The SR-IOV device plugin gave the pod the VF's `/dev/infiniband/uverbs<N>`
/// (and `rdma_cm`) before ADD, so the uverbs char device must be the same; the name
/// (what RDMA netlink and the device plugin's env may name) is restored by a rename
/// when it is the only thing that changed (kernel 7.3 names a new device after the
/// initial netns' devices only: docs/design.md "Kernel facts").
pub(crate) fn after_rebind(
    vf: &str,
    before: (&[String], &[String]),
    now: (&[String], &[String]),
) -> AfterRebind {
    let (names_before, uverbs_before) = before;
    let (names_now, uverbs_now) = now;
    let list = |v: &[String]| match v.is_empty() {
        true => "absent".to_string(),
        false => v.join(","),
    };
    if names_before.is_empty() || names_now == names_before && uverbs_now == uverbs_before {
        return AfterRebind::Keep;
    }
    if uverbs_now != uverbs_before {
        return AfterRebind::Refuse(format!(
            "the uverbs char device of VF {vf} changed across the driver rebind: it was {} and is now {} (RDMA device {} -> {}); the SR-IOV device plugin has already given the pod the old device's files, so the ADD is rolled back",
            list(uverbs_before),
            list(uverbs_now),
            list(names_before),
            list(names_now)
        ));
    }
    match (names_before, names_now) {
        ([b], [n]) => AfterRebind::Rename {
            now: n.clone(),
            before: b.clone(),
        },
        _ => AfterRebind::Refuse(format!(
            "the RDMA device of VF {vf} changed across the driver rebind: it was {} and is now {}; the SR-IOV device plugin has already given the pod the old device's files, so the ADD is rolled back",
            list(names_before),
            list(names_now)
        )),
    }
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
        let rdma_before = rdma_name_before_del_rebind(host, j);
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
        rename_back_after_del_rebind(ctx, host, j.vf, rdma_before.as_deref());
    }
    Ok(())
}

/// The RDMA device name DEL restores after it rebinds VF `j.vf`: the journal's
/// `RdmaMove` device (its name before ADD, also when the move home had to use another
/// name or the device is still in the pod netns, whose devices the host's sysfs does not
/// list), else the one device under `<VF>/infiniband/` in the host; `None` (nothing to
/// restore) otherwise.
pub(super) fn rdma_name_before_del_rebind(host: &Host, j: &Journal) -> Option<String> {
    let journaled = j.steps.iter().find_map(|s| match s {
        Step::RdmaMove { device } => Some(device.clone()),
        _ => None,
    });
    journaled.or_else(
        || match host.sysfs.rdma_devices(j.vf).unwrap_or_default().as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        },
    )
}

/// What DEL renames after a rebind: `Some((now, before))` when the VF has exactly one
/// RDMA device `now` (`<VF>/infiniband/`) and it is not `before`. Unlike ADD
/// ([`after_rebind`]) the uverbs char device is not compared: the pod is going away.
pub(crate) fn del_rename(before: Option<&str>, now: &[String]) -> Option<(String, String)> {
    match (before, now) {
        (Some(b), [n]) if n != b => Some((n.clone(), b.to_string())),
        _ => None,
    }
}

/// After a DEL rebind of VF `vf` (GUID restore, recovery rebind): renames its new RDMA
/// device back to `before` ([`crate::plugin::rdma::rename_back`]), as ADD does, so the
/// name does not stay taken in the host while another pod's device of that name waits
/// to come home (kernel 7.3 names a new device after the initial netns' devices only:
/// docs/design.md "Kernel facts"). A failure is logged as a warning: DEL goes on (the
/// device is the VF's either way).
pub(super) fn rename_back_after_del_rebind(
    ctx: &Ctx,
    host: &Host,
    vf: crate::types::PciAddress,
    before: Option<&str>,
) {
    let now = host.sysfs.rdma_devices(vf).unwrap_or_default();
    if let Some((now, before)) = del_rename(before, &now) {
        if let Err(e) = crate::plugin::rdma::rename_back(ctx, vf, &now, &before) {
            log::warn!(
                "the driver rebind named the RDMA device of VF {vf} {now} (it was {before}); renaming it back failed, left as {now}: {e}"
            );
        }
    }
}

#[cfg(test)]
mod del_rename_tests {
    use super::del_rename;

    #[test]
    fn a_new_name_is_renamed_back_the_same_or_none_is_kept() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            del_rename(Some("ibvf_55"), &v(&["ibvf_0"])),
            Some(("ibvf_0".into(), "ibvf_55".into()))
        );
        assert_eq!(del_rename(Some("ibvf_55"), &v(&["ibvf_55"])), None);
        assert_eq!(del_rename(None, &v(&["ibvf_0"])), None);
        assert_eq!(del_rename(Some("ibvf_55"), &[]), None);
        assert_eq!(del_rename(Some("ibvf_55"), &v(&["a", "b"])), None);
    }
}

#[cfg(test)]
mod after_rebind_tests {
    use super::{after_rebind, AfterRebind};

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    /// Kernel 7.3 on the lab: VF 1's device was ibvf_1, the rebind names it ibvf_0
    /// (VF 0's ibvf_0 is in a pod's netns), same uverbs char device: rename back.
    #[test]
    fn new_name_same_uverbs_is_renamed_back() {
        let d = after_rebind(
            "0000:00:04.2",
            (&v(&["ibvf_1"]), &v(&["231:193"])),
            (&v(&["ibvf_0"]), &v(&["231:193"])),
        );
        assert_eq!(
            d,
            AfterRebind::Rename {
                now: "ibvf_0".into(),
                before: "ibvf_1".into()
            }
        );
    }

    #[test]
    fn same_name_same_uverbs_is_kept() {
        let d = after_rebind(
            "0000:00:04.2",
            (&v(&["mlx5_3"]), &v(&["231:195"])),
            (&v(&["mlx5_3"]), &v(&["231:195"])),
        );
        assert_eq!(d, AfterRebind::Keep);
        // No RDMA device before (e.g. no ib_core): nothing to keep equal.
        let d = after_rebind("0000:00:04.2", (&[], &[]), (&v(&["mlx5_3"]), &[]));
        assert_eq!(d, AfterRebind::Keep);
    }

    #[test]
    fn changed_uverbs_is_refused_even_with_the_same_name() {
        for now in [v(&["ibvf_1"]), v(&["ibvf_0"])] {
            let AfterRebind::Refuse(why) = after_rebind(
                "0000:00:04.2",
                (&v(&["ibvf_1"]), &v(&["231:193"])),
                (&now, &v(&["231:194"])),
            ) else {
                panic!("a changed uverbs char device must be refused");
            };
            assert!(why.contains("uverbs char device"), "{why}");
            assert!(why.contains("231:193") && why.contains("231:194"), "{why}");
        }
    }

    #[test]
    fn vanished_device_is_refused() {
        let AfterRebind::Refuse(why) = after_rebind(
            "0000:00:04.2",
            (&v(&["ibvf_1"]), &v(&["231:193"])),
            (&[], &[]),
        ) else {
            panic!("a vanished device must be refused");
        };
        assert!(why.contains("absent"), "{why}");
        // Two devices where one was: no single device to rename.
        let d = after_rebind(
            "0000:00:04.2",
            (&v(&["a"]), &v(&["231:1"])),
            (&v(&["b", "c"]), &v(&["231:1"])),
        );
        assert!(matches!(d, AfterRebind::Refuse(_)), "{d:?}");
    }
}
