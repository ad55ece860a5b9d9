//! ADD: validate everything, lock the VF, journal, then link state, GUID (+ rebind),
//! netdev move, IPAM and addresses; any failure undoes every begun step in reverse.

use super::del::{undo, NsState};
use super::vfattr::PfView;
use super::{ipam_error, Ctx, Ipam, NETDEV_WAIT};
use crate::cni::{code, CniError, CniOutput, Command, Interface, IpConfig, Route};
use crate::failpoint::hit;
use crate::journal::{Journal, Step, JOURNAL_VERSION};
use crate::netlink::{Link, Netlink, EEXIST};
use crate::netns::NetNs;
use crate::types::{format_hwaddr, Guid};
use serde_json::Value;

/// What validation found, carried into the steps.
struct Plan {
    rdma: Option<String>,
    vfio: bool,
    ipam: Option<Ipam>,
    pod_ns: NetNs,
    host_link: Option<Link>,
    set_guid: Option<Guid>,
    set_link_state: Option<crate::types::LinkState>,
}

pub(super) fn add(ctx: &Ctx) -> Result<Value, CniError> {
    let (conf, env) = (ctx.conf, ctx.env);
    let vf_addr = conf.validate_for_add()?;
    let ipam = ctx.ipam()?;

    // A journal left by an interrupted ADD of this same attachment: undo it first.
    match ctx.store.load(&env.container_id, &env.ifname) {
        Ok(Some(stale)) => {
            log::warn!(
                "found the journal of an unfinished or repeated ADD for {}/{} (VF {}); undoing it first",
                env.container_id, env.ifname, stale.vf
            );
            super::del::teardown(ctx, &stale)?;
        }
        Ok(None) => {}
        Err(e) => {
            return Err(CniError::new(
                code::IO_FAILURE,
                format!("reading journal: {e}"),
            ))
        }
    }

    let dev = ctx
        .sysfs
        .discover_vf(vf_addr)
        .map_err(|e| CniError::config(e.to_string()))?;
    let vfio = match conf.vfio_pci_mode {
        Some(true) => true,
        Some(false) if dev.is_vfio() => {
            return Err(CniError::config(format!(
                "VF {vf_addr} is bound to vfio-pci; set vfioPciMode: true or bind it to mlx5_core"
            )))
        }
        Some(false) => false,
        None => dev.is_vfio(),
    };
    let netns_path = env.netns.as_deref().unwrap_or_default();
    let pod_ns = NetNs::open(netns_path)
        .map_err(|e| CniError::new(code::UNKNOWN_CONTAINER, format!("CNI_NETNS: {e}")))?;
    let host_ns = NetNs::current().map_err(|e| CniError::host(e.to_string()))?;
    if pod_ns.same_as(&host_ns) {
        return Err(CniError::env(format!(
            "CNI_NETNS {netns_path} is the plugin's own (host) network namespace"
        )));
    }
    let host_nl = Netlink::open().map_err(|e| CniError::host(e.to_string()))?;

    let _lock = ctx.lock_vf(vf_addr)?;
    match ctx
        .store
        .holder_of(vf_addr, (&env.container_id, &env.ifname))
    {
        Ok(Some(j)) => {
            return Err(CniError::new(
                code::DEVICE_BUSY,
                format!(
                    "VF {vf_addr} is already attached to container {} as {} (network {}); DEL that attachment first",
                    j.container_id, j.ifname, j.network
                ),
            ))
        }
        Ok(None) => {}
        Err(e) => return Err(CniError::new(code::IO_FAILURE, format!("reading journals: {e}"))),
    }

    let mut host_link = None;
    if !vfio {
        let pod_nl = Netlink::open_in(&pod_ns).map_err(|e| CniError::host(e.to_string()))?;
        if pod_nl
            .link_by_name(&env.ifname)
            .map_err(|e| CniError::host(e.to_string()))?
            .is_some()
        {
            return Err(CniError::env(format!(
                "CNI_IFNAME {} already exists in network namespace {netns_path}",
                env.ifname
            )));
        }
        let name = dev.netdev.clone().ok_or_else(|| {
            CniError::config(format!(
                "VF {vf_addr} has no netdev in the host network namespace ({}/net is empty): it may be attached to another pod, or its driver is not loaded",
                ctx.sysfs.pci_device_dir(vf_addr).display()
            ))
        })?;
        let l = host_nl
            .link_by_name(&name)
            .map_err(|e| CniError::host(e.to_string()))?
            .ok_or_else(|| {
                CniError::config(format!(
                    "netdev {name} of VF {vf_addr} (from sysfs) is not in the plugin's network namespace"
                ))
            })?;
        host_link = Some(l);
    } else if ipam.is_some() {
        log::warn!("VF {vf_addr} is in vfio mode: it has no netdev, so ipam is ignored");
    }

    // Original state, read before anything changes.
    let pf_link = match &dev.pf_netdev {
        Some(n) => host_nl
            .link_by_name(n)
            .map_err(|e| CniError::host(e.to_string()))?,
        None => None,
    };
    let view = PfView {
        nl: &host_nl,
        sysfs: &ctx.sysfs,
        pf: dev.pf,
        pf_link,
        vf: dev.vf_index,
    };
    let st = view.read().map_err(CniError::host)?;
    let ipoib_guid = host_link
        .as_ref()
        .and_then(|l| Guid::from_ipoib_hwaddr(&l.address));
    let orig_node = st.node_guid.map(|g| g.0);
    let orig_port = st.port_guid.map(|g| g.0).or(ipoib_guid);

    let set_guid = match conf.guid {
        Some((g, src)) => {
            if orig_node == Some(g) && orig_port == Some(g) {
                log::info!("VF {vf_addr} already has GUID {g} ({src:?}); no change");
                None
            } else {
                Some(g)
            }
        }
        None => {
            match orig_port.or(orig_node) {
                Some(g) if g.is_assignable() => log::info!("VF {vf_addr} keeps its GUID {g}"),
                Some(g) => {
                    return Err(CniError::config(format!(
                        "VF {vf_addr} has GUID {g}, which is not a usable GUID, and none was given: set runtimeConfig.infinibandGUID (capability infinibandGUID), args.cni.guid or guid"
                    )))
                }
                None => log::warn!(
                    "the GUID of VF {vf_addr} cannot be read (no netlink VF info, no OFED node file, not IPoIB); keeping whatever it has"
                ),
            }
            None
        }
    };
    let orig_ls = st.link_state.map(|s| s.0);
    let set_link_state = conf.link_state.filter(|want| orig_ls != Some(*want));

    let rdma_dev = super::rdma::plan(ctx, &dev, vfio)?;

    if let Some(pk) = conf.pkey {
        if !dev.pkeys.is_empty() && !dev.pkeys.iter().any(|p| p & 0x7fff == pk & 0x7fff) {
            log::warn!(
                "pkey {pk:#06x} is not (yet) in the pkey table of VF {vf_addr}; ib-kubernetes programs it through the subnet manager"
            );
        }
    }

    let mut j = Journal {
        version: JOURNAL_VERSION,
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        network: conf.name.clone(),
        vf: vf_addr,
        pf: dev.pf,
        vf_index: dev.vf_index,
        pf_netdev: dev.pf_netdev.clone(),
        vfio,
        host_ifname: host_link.as_ref().map(|l| l.name.clone()),
        host_up: host_link.as_ref().is_some_and(|l| l.up),
        orig_node_guid: orig_node,
        orig_port_guid: orig_port,
        set_guid,
        guid_via: st.node_guid.map(|g| g.1),
        orig_link_state: orig_ls,
        set_link_state,
        link_state_via: st.link_state.map(|s| s.1),
        rdma_isolation: conf.rdma_isolation,
        rdma_device: rdma_dev
            .clone()
            .or_else(|| dev.rdma_devices.first().cloned()),
        ipam_type: conf
            .ipam
            .as_ref()
            .and_then(|v| v.get("type"))
            .and_then(Value::as_str)
            .map(str::to_string),
        device_info_file: conf.device_info_file.clone(),
        steps: Vec::new(),
        complete: false,
    };
    // The plan, journaled durably before the first change.
    if set_link_state.is_some() {
        j.steps.push(Step::LinkState);
    }
    if set_guid.is_some() {
        j.steps.push(Step::Guid);
        if !vfio {
            j.steps.push(Step::Rebind);
        }
    }
    if rdma_dev.is_some() {
        j.steps.push(Step::RdmaMove);
    }
    if conf.device_info_file.is_some() {
        j.steps.push(Step::DeviceInfo);
    }
    if !vfio {
        j.steps.push(Step::MoveNetdev);
        if ipam.is_some() {
            j.steps.push(Step::Ipam);
        }
    }
    save(ctx, &j)?;

    let plan = Plan {
        rdma: rdma_dev,
        vfio,
        ipam,
        pod_ns,
        host_link,
        set_guid,
        set_link_state,
    };
    match steps(ctx, &mut j, &plan, &host_nl, &view) {
        Ok(out) => Ok(out.to_json(conf.cni_version)),
        Err(e) => {
            log::error!("ADD failed: {e}; rolling back");
            let errs = undo(ctx, &j, &NsState::Open(&plan.pod_ns), true);
            if errs.is_empty() {
                if let Err(re) = ctx.store.remove(&j.container_id, &j.ifname) {
                    return Err(e.with_details(format!("removing journal: {re}")));
                }
                Err(e)
            } else {
                let details = format!(
                    "rollback incomplete (the journal is kept for DEL): {}",
                    errs.join("; ")
                );
                Err(e.with_details(details))
            }
        }
    }
}

fn save(ctx: &Ctx, j: &Journal) -> Result<(), CniError> {
    ctx.store.save(j).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!(
                "writing journal {}: {e}",
                ctx.store.path(&j.container_id, &j.ifname).display()
            ),
        )
    })
}

fn steps(
    ctx: &Ctx,
    j: &mut Journal,
    plan: &Plan,
    host_nl: &Netlink,
    view: &PfView,
) -> Result<CniOutput, CniError> {
    let (conf, env) = (ctx.conf, ctx.env);
    hit("add.journal")?;

    if let Some(ls) = plan.set_link_state {
        let via = view
            .set_link_state(ls, j.link_state_via)
            .map_err(CniError::host)?;
        log::info!("VF {} link state set to {ls} via {via:?}", j.vf);
        hit("add.link_state")?;
    }

    let mut netdev = plan.host_link.clone();
    if let Some(g) = plan.set_guid {
        let via = view.set_guids(g, g, j.guid_via).map_err(CniError::host)?;
        log::info!("VF {} node and port GUID set to {g} via {via:?}", j.vf);
        hit("add.guid")?;
        if !plan.vfio {
            netdev = Some(rebind(ctx, host_nl, j)?);
            hit("add.rebind")?;
        }
    }

    if let Some(planned) = &plan.rdma {
        // A rebind re-creates the RDMA device: find it again by PCI address.
        let now = ctx
            .sysfs
            .rdma_devices(j.vf)
            .ok()
            .and_then(|v| v.into_iter().next())
            .unwrap_or_else(|| planned.clone());
        if &now != planned {
            log::warn!(
                "RDMA device of VF {} is now {now} (was {planned}) after the driver rebind: the SR-IOV device plugin mapped the old name",
                j.vf
            );
            j.rdma_device = Some(now.clone());
            save(ctx, j)?;
        }
        super::rdma::move_in(ctx, &now, &plan.pod_ns)?;
        hit("add.rdma")?;
    }

    if let Some(path) = &conf.device_info_file {
        let info = super::rdma::device_info_json(
            &j.vf.to_string(),
            j.rdma_device.as_deref().filter(|_| !plan.vfio),
            &j.pf.to_string(),
        );
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                CniError::new(code::IO_FAILURE, format!("creating {}: {e}", dir.display()))
            })?;
        }
        crate::fsutil::atomic_write(path, info.to_string().as_bytes()).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("writing device-info file {}: {e}", path.display()),
            )
        })?;
        log::info!("wrote device-info file {}", path.display());
        hit("add.device_info")?;
    }

    let mut out = CniOutput::default();
    let mut iface = Interface {
        name: env.ifname.clone(),
        sandbox: env.netns.clone().unwrap_or_default(),
        pci_id: Some(j.vf.to_string()),
        ..Default::default()
    };
    if plan.vfio {
        iface.name = j.vf.to_string();
        iface.sandbox = String::new();
        out.interfaces.push(iface);
        finish(ctx, j)?;
        return Ok(out);
    }

    let link = netdev.ok_or_else(|| CniError::internal("non-vfio VF without a netdev"))?;
    if link.up {
        host_nl
            .set_down(link.index)
            .map_err(|e| CniError::host(e.to_string()))?;
    }
    host_nl
        .move_to_netns_named(link.index, plan.pod_ns.fd(), &env.ifname)
        .map_err(|e| {
            if e.errno == Some(EEXIST) {
                CniError::env(format!(
                    "CNI_IFNAME {} already exists in network namespace {}",
                    env.ifname,
                    plan.pod_ns.path().display()
                ))
            } else {
                CniError::host(e.to_string())
            }
        })?;
    hit("add.move")?;
    let pod_nl = Netlink::open_in(&plan.pod_ns).map_err(|e| CniError::host(e.to_string()))?;
    let pl = pod_nl
        .link_by_name(&env.ifname)
        .map_err(|e| CniError::host(e.to_string()))?
        .ok_or_else(|| {
            CniError::host(format!(
                "{} vanished after the move into the pod",
                env.ifname
            ))
        })?;
    pod_nl
        .set_up(pl.index)
        .map_err(|e| CniError::host(e.to_string()))?;
    log::info!(
        "moved {} (VF {}) into {} as {}",
        link.name,
        j.vf,
        plan.pod_ns.path().display(),
        env.ifname
    );
    iface.mac = format_hwaddr(&pl.address);
    iface.mtu = pl.mtu;
    out.interfaces.push(iface);

    if let Some(ipam) = &plan.ipam {
        let (ips, routes) = match ipam {
            Ipam::Builtin(c) => {
                let a = match c.allocate(
                    &conf.name,
                    &env.container_id,
                    &env.ifname,
                    conf.lock_timeout,
                ) {
                    Ok(a) => a,
                    Err(e) => {
                        // A failed allocate releases what it created itself: the rollback
                        // has no IPAM step to undo (and must not wait again for a lock
                        // that just timed out). The durable journal keeps the step, so
                        // a DEL after a crash still releases.
                        j.steps.retain(|s| *s != Step::Ipam);
                        return Err(ipam_error(e));
                    }
                };
                let ips: Vec<IpConfig> = a
                    .ips
                    .iter()
                    .map(|ip| IpConfig {
                        address: ip.address,
                        gateway: ip.gateway,
                        interface: Some(0),
                    })
                    .collect();
                let routes: Vec<Route> = a
                    .routes
                    .iter()
                    .map(|r| Route {
                        dst: r.dst,
                        gw: r.gw,
                    })
                    .collect();
                (ips, routes)
            }
            Ipam::External(d) => {
                let v = ctx.delegate(d, Command::Add)?.ok_or_else(|| {
                    CniError::new(
                        code::IPAM_FAILURE,
                        format!("ipam plugin {} ADD printed no result", d.plugin_type),
                    )
                })?;
                let r = CniOutput::from_json(&v).map_err(|e| {
                    CniError::new(
                        code::IPAM_FAILURE,
                        format!(
                            "ipam plugin {} ADD result is not a CNI result: {}",
                            d.plugin_type, e.msg
                        ),
                    )
                })?;
                if r.ips.is_empty() {
                    log::warn!("ipam plugin {} returned no addresses", d.plugin_type);
                }
                // Every address goes on our one interface (SPEC.md: IPAM results carry
                // no interfaces; the calling plugin sets `interface`).
                let ips = r
                    .ips
                    .into_iter()
                    .map(|ip| IpConfig {
                        interface: Some(0),
                        ..ip
                    })
                    .collect();
                out.dns = r.dns;
                (ips, r.routes)
            }
        };
        hit("add.ipam")?;
        configure_addresses(&pod_nl, pl.index, &ips, &routes)?;
        hit("add.addresses")?;
        out.ips = ips;
        out.routes = routes;
    }
    finish(ctx, j)?;
    Ok(out)
}

fn finish(ctx: &Ctx, j: &mut Journal) -> Result<(), CniError> {
    hit("add.complete")?;
    j.complete = true;
    ctx.store.save_nosync(j).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!(
                "writing journal {}: {e}",
                ctx.store.path(&j.container_id, &j.ifname).display()
            ),
        )
    })
}

/// Unbinds and binds the VF's driver so a new GUID takes effect (mlx5), then finds the
/// re-created netdev by PCI address (its ifindex and maybe its name are new).
pub(super) fn rebind(ctx: &Ctx, host_nl: &Netlink, j: &Journal) -> Result<Link, CniError> {
    rebind_driver(ctx, j)?;
    find_netdev_after_rebind(ctx, host_nl, j)
}

/// Writes the VF address to its driver's `unbind`, then `bind` (sysfs
/// `/sys/bus/pci/drivers/<driver>/{unbind,bind}`).
pub(super) fn rebind_driver(ctx: &Ctx, j: &Journal) -> Result<(), CniError> {
    let driver = ctx
        .sysfs
        .driver(j.vf)
        .map_err(|e| CniError::host(format!("reading driver of VF {}: {e}", j.vf)))?
        .ok_or_else(|| CniError::host(format!("VF {} has no driver bound; cannot rebind", j.vf)))?;
    ctx.sysfs
        .unbind(j.vf, &driver)
        .map_err(|e| CniError::host(format!("unbinding VF {} from {driver}: {e}", j.vf)))?;
    ctx.sysfs
        .bind(j.vf, &driver)
        .map_err(|e| CniError::host(format!("binding VF {} to {driver}: {e}", j.vf)))?;
    log::info!("rebound VF {} ({driver})", j.vf);
    Ok(())
}

/// Waits (bounded by [`NETDEV_WAIT`]) for the VF's netdev to reappear under
/// `<VF>/net/` and returns it as a link (never looked up by its old name: the rebind
/// may rename it, ib-sriov-cni#217).
pub(super) fn find_netdev_after_rebind(
    ctx: &Ctx,
    host_nl: &Netlink,
    j: &Journal,
) -> Result<Link, CniError> {
    let name = ctx
        .sysfs
        .wait_for_netdev(j.vf, NETDEV_WAIT)
        .map_err(|e| CniError::host(e.to_string()))?;
    let link = host_nl
        .link_by_name(&name)
        .map_err(|e| CniError::host(e.to_string()))?
        .ok_or_else(|| {
            CniError::host(format!(
                "netdev {name} of VF {} not found after rebind",
                j.vf
            ))
        })?;
    if Some(&name) != j.host_ifname.as_ref() {
        log::warn!(
            "VF {} netdev is {name} after the driver rebind (was {:?})",
            j.vf,
            j.host_ifname
        );
    }
    log::info!(
        "VF {} netdev {name} ifindex {} after rebind",
        j.vf,
        link.index
    );
    Ok(link)
}

/// Adds the addresses and routes in the pod (libcni `ipam.ConfigureIface` semantics:
/// a route without `gw` uses the gateway of the first address of its family).
fn configure_addresses(
    nl: &Netlink,
    index: u32,
    ips: &[IpConfig],
    routes: &[Route],
) -> Result<(), CniError> {
    for ip in ips {
        nl.add_address(index, ip.address)
            .map_err(|e| CniError::host(e.to_string()))?;
    }
    for r in routes {
        let gw = r.gw.or_else(|| {
            ips.iter()
                .filter(|ip| ip.address.is_ipv4() == r.dst.is_ipv4())
                .find_map(|ip| ip.gateway)
        });
        nl.add_route(index, r.dst, gw)
            .map_err(|e| CniError::host(e.to_string()))?;
    }
    Ok(())
}
