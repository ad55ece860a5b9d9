//! CHECK (SPEC.md "CHECK"): the attachment exists and is as configured.

use super::steps::{find_in_host, ns_id, Host, Pod};
use super::vfattr::PfView;
use super::{ipam_error, Ctx, Ipam};
use crate::cni::{code, CniError, Command, Version};
use crate::netlink::Netlink;
use crate::netns::NetNs;
use crate::types::format_hwaddr;

fn fail(msg: impl Into<String>) -> CniError {
    CniError::new(code::CHECK_FAILED, msg)
}

/// CHECK; once the attachment checked out (its pod netns and netdev proven the
/// journal's), a missing Go plugin cache file of it is rewritten from the journal under
/// the VF lock ([`super::gc::heal_one`]); a failure of that is logged, never CHECK's
/// answer.
pub(super) fn check(ctx: &Ctx) -> Result<(), CniError> {
    if let Some(j) = check_attachment(ctx)? {
        super::gc::heal_one(ctx, j, "CHECK");
    }
    Ok(())
}

/// CHECK proper: `Ok(Some(journal))` when the attachment is ours and checked out,
/// `Ok(None)` for one the Go plugin made.
fn check_attachment(ctx: &Ctx) -> Result<Option<crate::journal::Journal>, CniError> {
    let (conf, env) = (ctx.conf, ctx.env);
    conf.cni_version
        .require(Version::V0_4_0, "CHECK needs cniVersion 0.4.0 or later")?;
    let prev = conf
        .prev_result
        .as_ref()
        .ok_or_else(|| CniError::config("CHECK needs prevResult (the result of ADD)"))?;
    let ipam = ctx.ipam()?;
    let id = format!("{}/{}", env.container_id, env.ifname);
    let Some(j) = ctx.store.load(&env.container_id, &env.ifname)? else {
        // A cache file our own ADD wrote speaks for nothing without its journal.
        if let Some(go) = super::upgrade::find(ctx)?.filter(|g| g.ours.is_none()) {
            return super::upgrade::check(ctx, &go).map(|()| None);
        }
        return Err(fail(format!(
            "no attachment {id}: no journal in {}",
            ctx.store.dir().display()
        )));
    };
    if !j.complete {
        return Err(fail(format!("the ADD of {id} did not complete")));
    }
    if let Some(d) = conf.device_id {
        if d != j.vf {
            return Err(fail(format!(
                "{id} holds VF {}, but the config names {d}",
                j.vf
            )));
        }
    }
    let netns = env.netns.as_deref().unwrap_or_default();
    let ns = NetNs::open(netns).map_err(|e| fail(format!("{id}: {e}")))?;
    if j.netns_id.is_some_and(|want| Ok(want) != ns_id(&ns)) {
        return Err(fail(format!(
            "{id}: {netns} is not the network namespace ADD attached the VF to"
        )));
    }
    let pod = Pod::new(ns);

    if let Some((nid, _, _, pod_ifindex)) = j.netdev() {
        let nl = pod.nl()?;
        let Some(link) = nl.link_by_name(&env.ifname)? else {
            return Err(fail(netdev_gone(ctx, &j, &pod, netns)?));
        };
        if Some(link.index) != pod_ifindex || format_hwaddr(&link.address) != nid.hwaddr {
            return Err(fail(format!(
                "{} in {netns} is not the netdev of VF {} (ifindex {}, address {}; expected ifindex {:?}, address {})",
                env.ifname,
                j.vf,
                link.index,
                format_hwaddr(&link.address),
                pod_ifindex,
                nid.hwaddr
            )));
        }
        if !link.up {
            return Err(fail(format!("{} in {netns} is down", env.ifname)));
        }
        let have = nl.addresses(link.index)?;
        for ip in &prev.ips {
            if !have.contains(&ip.address) {
                return Err(fail(format!(
                    "address {} of prevResult is not on {} in {netns}",
                    ip.address, env.ifname
                )));
            }
        }
    }
    if let Some(name) = j.rdma_device() {
        if !super::rdma::in_pod(ctx, name, &pod.ns)? {
            return Err(fail(format!(
                "RDMA device {name} of VF {} is not in {netns}",
                j.vf
            )));
        }
    }
    // Only what ADD allocated is checked: a vfio attachment runs no IPAM (ADD ignores
    // `ipam`), so its delegate has nothing to find.
    let allocated = j
        .steps
        .iter()
        .any(|s| matches!(s, crate::journal::Step::Ipam { .. }));
    let ipam = if allocated { ipam } else { None };
    if let Some(Ipam::External(d)) = &ipam {
        ctx.delegate(d, Command::Check)?;
    }
    if let Some(Ipam::Builtin(c)) = &ipam {
        let held = c
            .lookup(&conf.name, &env.container_id, &env.ifname)
            .map_err(ipam_error)?;
        for ip in &prev.ips {
            if !held.contains(&ip.address.ip()) {
                return Err(fail(format!(
                    "address {} of prevResult is not allocated to {id} in IPAM network {}",
                    ip.address.ip(),
                    conf.name
                )));
            }
        }
    }

    if j.vf == j.pf {
        // PF passthrough: no VF attributes were set.
        return Ok(Some(j));
    }
    let host_nl = Netlink::open()?;
    let view = PfView::for_journal(&host_nl, &ctx.sysfs, &j);
    let st = view.read()?;
    if let (Some(want), Some((have, _))) = (conf.link_state, st.link_state) {
        if want != have {
            return Err(fail(format!(
                "VF {} link state is {have}, configured {want}",
                j.vf
            )));
        }
    }
    if let Some((want, _)) = conf.guid {
        for (what, have) in [("node", st.node_guid), ("port", st.port_guid)] {
            if let Some((g, _)) = have {
                if g != want {
                    return Err(fail(format!(
                        "VF {} {what} GUID is {g}, configured {want}",
                        j.vf
                    )));
                }
            }
        }
    }
    Ok(Some(j))
}

/// CHECK's answer when the pod has no `CNI_IFNAME`: where the VF's netdev is instead.
/// When it is in the host and an RDMA device of the VF (listed in the journal at ADD)
/// that this plugin did not move is in the pod, another plugin moved it (rdma-cni
/// chained after this one), and the kernel re-created the IPoIB netdev in the host:
/// moving an RDMA device to another netns disables and re-enables it, so ib_core
/// removes and re-adds its clients, and the ipoib ULP re-creates its netdev in the
/// initial netns (`rdma_dev_change_netns()` in drivers/infiniband/core/device.c).
///
/// Errors: opening the host's rtnetlink.
fn netdev_gone(
    ctx: &Ctx,
    j: &crate::journal::Journal,
    pod: &Pod,
    netns: &str,
) -> Result<String, CniError> {
    let ifname = &ctx.env.ifname;
    let host = Host::open(&ctx.sysfs)?;
    let Some(l) = find_in_host(&host, j.vf, None)? else {
        return Ok(format!("{ifname} does not exist in {netns}"));
    };
    let moved_by_other = j
        .rdma_devices
        .iter()
        .filter(|_| j.rdma_device().is_none())
        .find(|r| super::rdma::in_pod(ctx, r, &pod.ns).unwrap_or(false));
    Ok(match moved_by_other {
        Some(r) => format!(
            "{ifname} is gone from {netns}: RDMA device {r} of VF {} was moved into {netns} by another plugin (rdma-cni chained after ib-sriov), and an RDMA device move makes the kernel recreate the IPoIB netdev in the host network namespace, where it now is as {}: the pod has the RDMA device but no IPoIB. To give pods both, remove rdma from the chain and set rdmaIsolation: true (or the node default, docs/configuration.md \"RDMA device isolation\"); DEL restores the VF either way",
            j.vf, l.name
        ),
        None => format!(
            "{ifname} does not exist in {netns}: the netdev of VF {} is {} in the host network namespace (an RDMA device move recreates the IPoIB netdev there)",
            j.vf, l.name
        ),
    })
}
