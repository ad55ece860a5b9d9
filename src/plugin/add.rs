//! ADD: validate every input, lock the VF, settle an interrupted ADD of the same
//! attachment, check the VF is free, read its original state, journal the plan (typed
//! steps, `journal::Step`), then run the steps in order (`steps::apply`); any failure
//! undoes every begun step in reverse (`steps::undo`).

use super::steps::{self, ns_id, Apply, Host, Pod, PodNs};
use super::vfattr::{PfView, VfState};
use super::{Ctx, Ipam};
use crate::cni::{code, CniError, CniOutput, Interface};
use crate::failpoint::hit;
use crate::fsutil::FileLock;
use crate::journal::{Journal, NetdevId, NsId, Step, JOURNAL_VERSION};
use crate::netlink::Link;
use crate::netns::NetNs;
use crate::sysfs::VfDevice;
use crate::types::{Guid, PciAddress};
use crate::vfguid::GuidOrigin;
use serde_json::Value;

/// ADD, as its phases (docs/design.md "How it fits together" lists them by these
/// names): [`resolve_device`], [`take_vf`], [`clear_dead_holder`], [`find_vf_netdev`],
/// [`read_originals`], [`choose_guid`], [`plan`], [`journal_plan`], [`run_steps`],
/// [`finish`]; on a failure after the plan is journaled, [`roll_back`].
pub(super) fn add(ctx: &Ctx) -> Result<Value, CniError> {
    let r = resolve_device(ctx)?;
    let host = r.host;
    let _lock = take_vf(ctx, &host, r.vf_addr)?;
    let known_id = clear_dead_holder(ctx, &host, r.vf_addr)?;
    let pod = Pod::new(r.pod_ns);
    let host_link = find_vf_netdev(ctx, &host, &pod, r.vf_addr, r.vfio, known_id.as_ref())?;
    let orig = read_originals(ctx, &host, &r.dev, r.is_pf, host_link.as_ref())?;
    let set_guid = choose_guid(ctx, &host, &r.dev, r.is_pf, &orig)?;
    let planned = Planned {
        vfio: r.vfio,
        is_pf: r.is_pf,
        pod_id: r.pod_id,
        rdma_dev: r.rdma_dev,
        has_ipam: r.ipam.is_some(),
    };
    let mut j = plan(ctx, &r.dev, planned, &orig, set_guid, host_link.as_ref());
    journal_plan(ctx, &j)?;
    let pod_guid = j.guid;
    let mut cx = Apply {
        ctx,
        host: &host,
        pod: &pod,
        view: orig.view,
        ipam: r.ipam.as_ref(),
        out: CniOutput::default(),
    };
    let (begun, mut failure) = run_steps(&mut cx, &mut j, pod_guid);
    if failure.is_none() {
        failure = finish(ctx, &mut j, &mut cx.out).err();
    }
    let out = std::mem::take(&mut cx.out);
    drop(cx);
    match failure {
        None => Ok(out.to_json(ctx.conf.cni_version)),
        Some(e) => Err(roll_back(ctx, &host, &j, pod, begun, e)),
    }
}

/// What [`resolve_device`] found: the inputs every later phase works from.
struct Resolved<'a> {
    /// The VF's PCI address (`deviceID`).
    vf_addr: PciAddress,
    /// The IPAM to allocate from, when the network has one.
    ipam: Option<Ipam>,
    /// The device as sysfs describes it.
    dev: VfDevice,
    /// The device is a vfio-pci PF passed through whole.
    is_pf: bool,
    /// vfio mode: the device is bound to vfio-pci.
    vfio: bool,
    /// The pod's netns (`CNI_NETNS`), open.
    pod_ns: NetNs,
    /// The host adapters.
    host: Host<'a>,
    /// The pod netns' identity (nsfs device and inode).
    pod_id: NsId,
    /// The RDMA device to move into the pod, when RDMA isolation applies.
    rdma_dev: Option<String>,
}

/// Phase "resolve the device": every input, checked before anything changes on the
/// host: the configuration ([`crate::config::NetConf::validate_for_add`]), the IPAM,
/// the device and its mode ([`device_and_mode`]), `CNI_NETNS` (not the host's own),
/// the device-info path, the pkey wait ([`check_pkey_wait`]) and the RDMA plan;
/// logs [`device_warnings`].
///
/// Errors: code 7 (configuration, device), 3 (`CNI_NETNS` unopenable), 4 (environment).
fn resolve_device<'a>(ctx: &'a Ctx) -> Result<Resolved<'a>, CniError> {
    let conf = ctx.conf;
    let vf_addr = conf.validate_for_add()?;
    let ipam = ctx.ipam()?;
    let (dev, is_pf, vfio) = device_and_mode(&ctx.sysfs, conf, vf_addr)?;
    let netns_path = ctx.env.netns.as_deref().unwrap_or_default();
    let pod_ns = NetNs::open(netns_path)
        .map_err(|e| CniError::new(code::UNKNOWN_CONTAINER, format!("CNI_NETNS: {e}")))?;
    let host = Host::open(&ctx.sysfs)?;
    if pod_ns.same_as(&host.ns) {
        return Err(CniError::env(format!(
            "CNI_NETNS {netns_path} is the plugin's own (host) network namespace"
        )));
    }
    let pod_id = ns_id(&pod_ns)?;
    if let Some(p) = &conf.device_info_file {
        check_device_info_path(p)?;
    }
    check_pkey_wait(&ctx.sysfs, conf, &dev, is_pf, vfio)?;
    let rdma_dev = super::rdma::plan(ctx, &dev, vfio)?;
    for w in device_warnings(conf, &dev, is_pf, vfio) {
        log::warn!("{w}");
    }
    Ok(Resolved {
        vf_addr,
        ipam,
        dev,
        is_pf,
        vfio,
        pod_ns,
        host,
        pod_id,
        rdma_dev,
    })
}

/// Phase "take the VF": its lock (held until ADD returns), then an earlier ADD of this
/// attachment settled ([`settle_earlier_add`]).
///
/// Errors: code 11 when the lock is not had within `lockTimeoutMs`; those of
/// [`settle_earlier_add`].
fn take_vf(ctx: &Ctx, host: &Host, vf_addr: PciAddress) -> Result<FileLock, CniError> {
    let lock = ctx.lock_vf(vf_addr)?;
    settle_earlier_add(ctx, host, vf_addr)?;
    Ok(lock)
}

/// An earlier ADD of this attachment: finished -> refused (the runtime must DEL first,
/// SPEC.md "ADD"); unfinished -> undone first, but only once its writer is provably
/// gone: an ADD holds its VF's lock from before its journal exists until it has
/// finished or rolled back, so the journal is read again under that lock (an ADD of the
/// same attachment still running on another VF -- a runtime retrying -- is waited for,
/// bounded by lockTimeoutMs, and then found finished or gone).
///
/// Errors: code 4 (attachment exists), 11 (another ADD of it is running).
fn settle_earlier_add(ctx: &Ctx, host: &Host, vf_addr: PciAddress) -> Result<(), CniError> {
    let env = ctx.env;
    let Some(seen) = ctx.store.load(&env.container_id, &env.ifname)? else {
        return Ok(());
    };
    let exists = |j: &Journal| {
        CniError::env(format!(
            "attachment {}/{} already exists (VF {}, network {}): DEL it first",
            env.container_id, env.ifname, j.vf, j.network
        ))
    };
    if seen.complete {
        return Err(exists(&seen));
    }
    let other_lock = if seen.vf != vf_addr {
        Some(ctx.lock_vf(seen.vf)?)
    } else {
        None
    };
    match ctx.store.load(&env.container_id, &env.ifname)? {
        None => {} // that ADD failed and rolled back meanwhile
        Some(j) if j.complete => return Err(exists(&j)),
        Some(j) if j.vf != seen.vf => {
            return Err(CniError::try_later(format!(
                "another ADD of {}/{} is running (VF {}): retry",
                env.container_id, env.ifname, j.vf
            )))
        }
        Some(stale) => {
            log::warn!(
                "found the journal of an interrupted ADD of {}/{} (VF {}, its writer is gone: its VF lock is ours); undoing it first",
                env.container_id,
                env.ifname,
                stale.vf
            );
            super::teardown::teardown_locked(ctx, host, &stale, None, true)?;
        }
    }
    drop(other_lock);
    Ok(())
}

/// Phase "clear what a dead attachment left": the VF is free. An attachment of ours
/// whose pod netns is gone (the runtime has not sent DEL yet, or its DEL failed while
/// the kernel was returning the VF) is torn down now; so is the VF state of one the Go
/// plugin made (a node upgraded with pods running) once its netdev is back in the host
/// (or, in vfio mode, since the device plugin handed the VF out again). Returns the
/// identity of the netdev a torn-down attachment of ours had, to find it again.
///
/// Errors: code 10 (device busy) when a live attachment holds the VF; those of the
/// teardown (code 11 when the VF is not back yet).
fn clear_dead_holder(
    ctx: &Ctx,
    host: &Host,
    vf_addr: PciAddress,
) -> Result<Option<NetdevId>, CniError> {
    let env = ctx.env;
    match ctx.store.holder(vf_addr, (&env.container_id, &env.ifname))? {
        Some(Ok(j)) if matches!(steps::resolve_pod(&j, None)?, PodNs::Gone) => {
            log::warn!(
                "VF {vf_addr} is held by {}/{}, whose network namespace is gone: restoring it first",
                j.container_id,
                j.ifname
            );
            super::teardown::teardown_locked(ctx, host, &j, None, true)?;
            Ok(j.netdev().map(|(id, ..)| id.clone()))
        }
        Some(Ok(j)) => Err(CniError::new(
            code::DEVICE_BUSY,
            format!(
                "VF {vf_addr} is already attached to container {} as {} (network {}); DEL that attachment first",
                j.container_id, j.ifname, j.network
            ),
        )),
        Some(Err(e)) => Err(CniError::new(
            code::DEVICE_BUSY,
            format!("VF {vf_addr} is held by an attachment whose {e}"),
        )),
        None => {
            if let Some(go) = super::go_dirs::holder_of(ctx, vf_addr) {
                let in_host = go.vfio || steps::find_in_host(host, vf_addr, None)?.is_some();
                if !in_host {
                    let by = if go.ours.is_some() {
                        "by an attachment of ib-sriov whose journal was lost (its stateDir emptied; the rollback file its ADD wrote remains"
                    } else {
                        "by the Go ib-sriov-cni ("
                    };
                    return Err(CniError::new(
                        code::DEVICE_BUSY,
                        format!(
                            "VF {vf_addr} is attached {by}{}) and its netdev is not in the host: DEL that attachment first",
                            go.path.display()
                        ),
                    ));
                }
                super::upgrade::finish_dead(ctx, host, &go)?;
            }
            Ok(None)
        }
    }
}

/// Phase "find the VF's netdev": `CNI_IFNAME` is free in the pod, the VF's netdev is
/// in the host (found by `known` identity first, else by PCI address), and the
/// device-info file does not exist yet. `None` in vfio mode (no netdev).
///
/// Errors: code 4 (`CNI_IFNAME` taken), 7 (no netdev in the host, device-info file
/// present).
fn find_vf_netdev(
    ctx: &Ctx,
    host: &Host,
    pod: &Pod,
    vf_addr: PciAddress,
    vfio: bool,
    known: Option<&NetdevId>,
) -> Result<Option<Link>, CniError> {
    let mut host_link = None;
    if !vfio {
        let ifname = &ctx.env.ifname;
        if pod.nl()?.link_by_name(ifname)?.is_some() {
            return Err(CniError::env(format!(
                "CNI_IFNAME {ifname} already exists in network namespace {}",
                ctx.env.netns.as_deref().unwrap_or_default()
            )));
        }
        let l = steps::find_in_host(host, vf_addr, known)?.ok_or_else(|| {
            CniError::config(format!(
                "VF {vf_addr} has no netdev in the host network namespace ({}/net is empty): it may be attached to another pod, or its driver is not loaded",
                ctx.sysfs.pci_device_dir(vf_addr).display()
            ))
        })?;
        host_link = Some(l);
    }
    if let Some(p) = &ctx.conf.device_info_file {
        if std::fs::symlink_metadata(p).is_ok() {
            return Err(CniError::config(format!(
                "runtimeConfig.CNIDeviceInfoFile {} already exists and was not written by this attachment; it is neither overwritten nor removed",
                p.display()
            )));
        }
    }
    Ok(host_link)
}

/// The VF's state before ADD changes anything, from [`read_originals`].
struct Originals<'a> {
    /// The VF through its PF (the steps set its attributes through it).
    view: PfView<'a>,
    /// Link state and GUIDs as the PF reports them (empty for a PF passed through).
    st: VfState,
    /// The PF's port GUID, from its IPoIB hardware address.
    pf_port_guid: Option<Guid>,
    /// The VF's node GUID ([`VfState::guids_with_ipoib`]).
    node: Option<Guid>,
    /// The VF's port GUID, likewise.
    port: Option<Guid>,
}

/// Phase "read the originals": the VF's link state and GUIDs through its PF
/// ([`PfView::read`]), the IPoIB port GUID of its host netdev, and the PF's port GUID
/// (from the PF link read here: no extra read on ADD's path).
///
/// Errors: code 11/999 from rtnetlink or sysfs reads.
fn read_originals<'a>(
    ctx: &'a Ctx,
    host: &'a Host,
    dev: &VfDevice,
    is_pf: bool,
    host_link: Option<&Link>,
) -> Result<Originals<'a>, CniError> {
    let pf_link = match &dev.pf_netdev {
        Some(n) => host.nl.link_by_name(n)?,
        None => None,
    };
    let pf_port_guid = pf_link
        .as_ref()
        .and_then(|l| Guid::from_ipoib_hwaddr(&l.address));
    let view = PfView {
        nl: &host.nl,
        sysfs: &ctx.sysfs,
        pf: dev.pf,
        pf_link,
        vf: dev.vf_index,
    };
    let st = if is_pf {
        VfState::default()
    } else {
        view.read()?
    };
    let ipoib_guid = host_link.and_then(|l| Guid::from_ipoib_hwaddr(&l.address));
    let (node, port) = st.guids_with_ipoib(ipoib_guid);
    if let (Some(nl), Some(ip)) = (st.port_guid.map(|g| g.0), ipoib_guid) {
        if nl != ip {
            log::info!(
                "VF {}: the PF reports port GUID {nl}, its IPoIB address says {ip}; using {ip}",
                dev.addr
            );
        }
    }
    Ok(Originals {
        view,
        st,
        pf_port_guid,
        node,
        port,
    })
}

/// Phase "choose the GUID": the GUID ADD sets, with where it came from when ADD chose
/// it; `None` when the VF keeps its own: the given GUID (`runtimeConfig` or
/// `args.cni.guid`) unless the VF has it already; else the VF's own when assignable;
/// else [`fallback_guid`]. A PF passed through gets none.
///
/// Errors: those of [`fallback_guid`] (code 7).
fn choose_guid(
    ctx: &Ctx,
    host: &Host,
    dev: &VfDevice,
    is_pf: bool,
    orig: &Originals,
) -> Result<Option<(Guid, Option<GuidOrigin>)>, CniError> {
    let vf_addr = dev.addr;
    Ok(match ctx.conf.guid {
        Some(_) if is_pf => None,
        Some((g, src)) => {
            if orig.node == Some(g) && orig.port == Some(g) {
                log::info!("VF {vf_addr} already has GUID {g} ({src:?}); no change");
                None
            } else {
                Some((g, None))
            }
        }
        None if is_pf => None,
        None => match orig.port.or(orig.node) {
            Some(g) if g.is_assignable() => {
                log::info!("VF {vf_addr} keeps its GUID {g}");
                None
            }
            // All-zero, all-ones or unreadable: the operator's GUID file, else (opted
            // in) the derived GUID (crate::vfguid).
            cur => {
                fallback_guid(ctx, host, dev, &orig.view, cur)?.map(|f| (f.guid, Some(f.origin)))
            }
        },
    })
}

/// The facts of [`resolve_device`] that [`plan`] journals.
struct Planned {
    /// vfio mode.
    vfio: bool,
    /// A PF passed through (no link state, no GUID).
    is_pf: bool,
    /// The pod netns' identity.
    pod_id: NsId,
    /// The RDMA device to move, when RDMA isolation applies.
    rdma_dev: Option<String>,
    /// The network has an IPAM.
    has_ipam: bool,
}

/// Phase "plan the steps": the journal of this attachment, not yet written: its typed
/// steps ([`plan_steps`]) and the facts DEL needs (netns identity, PF, VF index, the
/// configuration without `prevResult`, the pod's GUID and the PF's port GUID).
fn plan(
    ctx: &Ctx,
    dev: &VfDevice,
    mut p: Planned,
    orig: &Originals,
    set_guid: Option<(Guid, Option<GuidOrigin>)>,
    host_link: Option<&Link>,
) -> Journal {
    let (conf, env) = (ctx.conf, ctx.env);
    // The GUID the subnet manager must put into the partition: the one ADD sets, else
    // the VF's own (for pkeyWaitMs' message).
    let pod_guid = set_guid
        .as_ref()
        .map(|(g, _)| *g)
        .or(orig.port)
        .or(orig.node);
    let steps = plan_steps(ctx, &mut p, orig, set_guid, host_link);
    let Planned { vfio, pod_id, .. } = p;
    let mut raw = conf.raw.clone();
    if let Some(o) = raw.as_object_mut() {
        o.remove("prevResult");
    }
    Journal {
        version: JOURNAL_VERSION,
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        netns_id: Some(pod_id),
        network: conf.name.clone(),
        vf: dev.addr,
        pf: dev.pf,
        vf_index: dev.vf_index,
        pf_netdev: dev.pf_netdev.clone(),
        vfio,
        rdma_isolation: conf.rdma_isolation,
        conf: raw,
        steps,
        complete: false,
        boot_id: crate::boot::id().map(str::to_string),
        rdma_devices: if vfio {
            Vec::new()
        } else {
            dev.rdma_devices.clone()
        },
        pod: crate::journal::PodRef::from_args(&env.args),
        guid: pod_guid,
        pf_port_guid: orig.pf_port_guid,
    }
}

/// The typed steps of [`plan`], in the order they run, each only when it changes
/// something: link state, GUID, RDMA move, device-info file, netdev move, IPAM (with a
/// netdev only), Go cache file. Takes the RDMA device out of `p` (moved into its step).
fn plan_steps(
    ctx: &Ctx,
    p: &mut Planned,
    orig: &Originals,
    set_guid: Option<(Guid, Option<GuidOrigin>)>,
    host_link: Option<&Link>,
) -> Vec<Step> {
    let (conf, env) = (ctx.conf, ctx.env);
    let st = &orig.st;
    let orig_ls = st.link_state.map(|s| s.0);
    let mut steps = Vec::new();
    let want_ls = conf.link_state.filter(|_| !p.is_pf);
    if let Some(want) = want_ls.filter(|want| orig_ls != Some(*want)) {
        steps.push(Step::LinkState {
            orig: orig_ls,
            want,
            via: st.link_state.map(|s| s.1),
        });
    }
    if let Some((want, origin)) = set_guid {
        steps.push(Step::Guid {
            orig_node: orig.node,
            orig_port: orig.port,
            want,
            via: st.node_guid.map(|g| g.1),
            rebind: !p.vfio,
            origin,
        });
    }
    if let Some(device) = p.rdma_dev.take() {
        steps.push(Step::RdmaMove { device });
    }
    if let Some(path) = &conf.device_info_file {
        steps.push(Step::DeviceInfo {
            path: path.clone(),
            content: String::new(), // filled by the step from the journal's facts
        });
    }
    if let Some(l) = host_link {
        steps.push(Step::MoveNetdev {
            netdev: steps::netdev_id(l),
            host_name: l.name.clone(),
            host_up: l.up,
            pod_ifindex: None,
        });
        if p.has_ipam {
            steps.push(Step::Ipam {
                ipam_type: conf
                    .ipam
                    .as_ref()
                    .and_then(|v| v.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                ips: Vec::new(),
            });
        }
    }
    if let Some(dir) = &conf.go_cache_dir {
        steps.push(Step::GoCache {
            path: crate::gocache::path(dir, &env.container_id, &env.ifname),
            content: String::new(), // filled by the step from the journal's facts
        });
    }
    steps
}

/// Phase "journal the plan": the holder link, then the plan, durable before the first
/// change. The holder link first: a link whose journal does not exist (yet) is stale,
/// so a crash between the two leaves the VF free, and every journal has its link, so
/// finding a VF's holder never lists the journals. The plan is created, never replaced:
/// an ADD of the same attachment that journaled its plan since [`settle_earlier_add`]
/// looked (on another VF) keeps it, and this one changes nothing (code 11) but for its
/// holder link, which it takes back.
fn journal_plan(ctx: &Ctx, j: &Journal) -> Result<(), CniError> {
    let (vf, c, i) = (j.vf, &j.container_id, &j.ifname);
    ctx.store.set_holder(vf, c, i)?;
    match ctx.store.create(j) {
        Ok(()) => Ok(()),
        Err(e @ crate::journal::JournalError::Exists(_)) => {
            ctx.store.remove_holder(vf, c, i)?;
            Err(CniError::try_later(e.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Phase "run the steps": each journaled step in order ([`steps::apply`]), with the
/// partition wait (`pkeyWaitMs`, [`wait_for_pkey`]) once the VF has its GUID (after the
/// link state and GUID steps, which come first) and before anything moves into the pod.
/// Returns how many steps began (those [`roll_back`] undoes) and the first failure.
fn run_steps(cx: &mut Apply, j: &mut Journal, pod_guid: Option<Guid>) -> (usize, Option<CniError>) {
    let ctx = cx.ctx;
    let vf_addr = j.vf;
    let mut begun = 0;
    let mut failure = hit("add.journal").err();
    let mut pkey_wait = ctx.conf.pkey_wait.zip(ctx.conf.pkey);
    if failure.is_none() {
        for i in 0..j.steps.len() {
            if let Some((bound, pkey)) = pkey_wait
                .filter(|_| !matches!(j.steps[i], Step::LinkState { .. } | Step::Guid { .. }))
            {
                pkey_wait = None;
                if let Err(e) = wait_for_pkey(ctx, vf_addr, pod_guid, pkey, bound) {
                    begun = i;
                    failure = Some(e);
                    break;
                }
            }
            begun = i + 1;
            let r = match j.steps[i] {
                Step::DeviceInfo { .. } => fill_device_info(ctx, j, i).map_err(Into::into),
                _ => Ok(()),
            }
            .and_then(|_| steps::apply(cx, j, i));
            if let Err(f) = r {
                if !f.undo_self {
                    begun = i;
                }
                failure = Some(f.error);
                break;
            }
        }
    }
    if let Some((bound, pkey)) = pkey_wait.filter(|_| failure.is_none()) {
        failure = wait_for_pkey(ctx, vf_addr, pod_guid, pkey, bound).err();
    }
    (begun, failure)
}

/// Phase "roll back" (on a failure after [`journal_plan`]): undoes the first `begun`
/// steps in reverse ([`steps::undo`]); when all undid, removes the journal and the
/// holder link. Returns ADD's error `e`, with the rollback's failures as details (the
/// journal is then kept for DEL). From here the waits get what is left of ADD's whole
/// bound (ADD_BUDGET).
fn roll_back(ctx: &Ctx, host: &Host, j: &Journal, pod: Pod, begun: usize, e: CniError) -> CniError {
    log::error!("ADD failed: {e}; rolling back");
    ctx.rolling_back.set(true);
    let errs = steps::undo(ctx, host, j, &PodNs::Live(pod), begun, true);
    if errs.is_empty() {
        if let Err(re) = ctx
            .store
            .remove(&j.container_id, &j.ifname)
            .and_then(|_| ctx.store.remove_holder(j.vf, &j.container_id, &j.ifname))
        {
            return e.with_details(format!("removing journal: {re}"));
        }
        e
    } else {
        let details = errs
            .0
            .iter()
            .map(|u| u.msg.clone())
            .collect::<Vec<_>>()
            .join("; ");
        e.with_details(format!(
            "rollback incomplete (the journal is kept for DEL): {details}"
        ))
    }
}

/// ADD's answer (code 7) for VF `vf` whose GUID `g` is not usable (all-zero or
/// all-ones) when no GUID was given and neither `guidFile` nor `deriveGuid` gives one;
/// `ib-sriov doctor --conf` gives the same.
pub fn no_usable_guid(
    vf: crate::types::PciAddress,
    g: Guid,
    guid_file: &std::path::Path,
) -> CniError {
    CniError::config(format!(
        "VF {vf} has GUID {g}, which is not a usable GUID, and none was given: give the pod one (runtimeConfig.infinibandGUID, capability infinibandGUID, or args.cni.guid), list the VF's PF in the SR-IOV operator's GUID file {} (guidFile), or set \"deriveGuid\": true in the network to derive a stable GUID from the PF's port GUID",
        guid_file.display()
    ))
}

/// The GUID for VF `dev`, whose current GUID `cur` is all-zero, all-ones or unreadable
/// (`None`), when none was given (docs/configuration.md "VFs without a GUID"): the operator's GUID file
/// (`guidFile`), else with `deriveGuid` the derived GUID, checked against every other VF
/// GUID on the node. `Ok(None)` (keep what the VF has, with a warning) when the GUID is
/// unreadable and neither applies.
///
/// Errors, code 7: a malformed GUID file or a VF index past its entry's list or range;
/// `deriveGuid` without a readable PF port GUID; a derived GUID another VF already has;
/// a zero or all-ones GUID with neither way out, naming both.
fn fallback_guid(
    ctx: &Ctx,
    host: &Host,
    dev: &crate::sysfs::VfDevice,
    view: &PfView,
    cur: Option<Guid>,
) -> Result<Option<crate::vfguid::Fallback>, CniError> {
    use crate::vfguid::{self, GuidOrigin, PfIdentity};
    let conf = ctx.conf;
    let vf_addr = dev.addr;
    // ibKubernetesEnabled without a GUID never gets here (validate_for_add: code 11);
    // ib-kubernetes owns the GUIDs of its networks.
    if conf.ib_kubernetes_enabled {
        return Ok(None);
    }
    let mut pf = PfIdentity::read(&ctx.sysfs, Some(&host.nl), dev.pf);
    if let Some(l) = &view.pf_link {
        if !pf.hwaddrs.contains(&l.address) {
            pf.hwaddrs.push(l.address.clone());
        }
    }
    let found = vfguid::choose(&conf.guid_file, conf.derive_guid, &pf, dev.vf_index)
        .map_err(|e| CniError::config(format!("VF {vf_addr} has no usable GUID: {e}")))?;
    let Some(f) = found else {
        return match cur {
            Some(g) => Err(no_usable_guid(vf_addr, g, &conf.guid_file)),
            None => {
                log::warn!(
                    "the GUID of VF {vf_addr} cannot be read (no netlink VF info, no OFED node file, not IPoIB); keeping whatever it has"
                );
                Ok(None)
            }
        };
    };
    if let GuidOrigin::Derived { .. } = f.origin {
        if let Some((other, _)) = vfguid::node_vf_guids(&ctx.sysfs, &host.nl, vf_addr)
            .into_iter()
            .find(|(_, g)| *g == f.guid)
        {
            return Err(CniError::config(format!(
                "the GUID derived for VF {vf_addr}, {}, is already the GUID of VF {other}: give the pod a GUID (runtimeConfig.infinibandGUID or args.cni.guid) or list the VF in the SR-IOV operator's GUID file {}",
                f.guid,
                conf.guid_file.display()
            )));
        }
    }
    log::info!(
        "VF {vf_addr} has {}; it gets GUID {} from {}, kept on the VF after DEL",
        match cur {
            Some(g) => format!("GUID {g}"),
            None => "no readable GUID".to_string(),
        },
        f.guid,
        f.origin
    );
    Ok(Some(f))
}

/// Before any change (also what `ib-sriov doctor --conf` checks): `pkeyWaitMs` needs
/// a pkey table to wait on, the one of port 1 of the VF's RDMA device
/// (`<VF>/infiniband/<dev>/ports/1/pkeys`). `dev`, `is_pf`, `vfio` as
/// [`device_and_mode`] gives them.
///
/// Errors: code 7 with `pkeyWaitMs` set on a device in vfio mode, a PF passed through,
/// or a VF without an RDMA device.
pub fn check_pkey_wait(
    sysfs: &crate::sysfs::Sysfs,
    conf: &crate::config::NetConf,
    dev: &crate::sysfs::VfDevice,
    is_pf: bool,
    vfio: bool,
) -> Result<(), CniError> {
    let Some(w) = conf.pkey_wait else {
        return Ok(());
    };
    if !(vfio || is_pf || dev.rdma_devices.is_empty()) {
        return Ok(());
    }
    let addr = dev.addr;
    Err(CniError::config(format!(
        "pkeyWaitMs {} needs the pkey table of {addr}'s RDMA port ({}/infiniband/<dev>/ports/1/pkeys), and {addr} has none ({}): drop pkeyWaitMs for this network",
        w.as_millis(),
        sysfs.pci_device_dir(addr).display(),
        if vfio {
            "vfio mode"
        } else if is_pf {
            "a PF passed through"
        } else {
            "no RDMA device"
        }
    )))
}

/// How often [`wait_for_pkey`] reads the pkey table again.
const PKEY_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Partition readiness (`pkeyWaitMs`): waits until `pkey` (all 16 bits, so full or
/// limited membership as configured) is in the pkey table of port 1 of VF `vf`'s RDMA
/// device (`<VF>/infiniband/<dev>/ports/1/pkeys/<i>`, [`crate::sysfs::Sysfs::pkeys`]),
/// read at once and then every 20 ms, for at most `bound` and never past ADD's forward
/// deadline ([`super::add_forward_deadline`]). The subnet manager writes that table
/// once it has added the port's GUID (`guid`, for the message) to the partition.
///
/// Errors: code 11 (try again later) past the bound, naming the pkey, the GUID and the
/// table as last read; an unreadable table is read again until the bound, and then
/// named in the error.
fn wait_for_pkey(
    ctx: &Ctx,
    vf: crate::types::PciAddress,
    guid: Option<Guid>,
    pkey: u16,
    bound: std::time::Duration,
) -> Result<(), CniError> {
    let start = std::time::Instant::now();
    let deadline = (start + bound).min(super::add_forward_deadline(ctx.started));
    let show = |t: &[u16]| {
        t.iter()
            .map(|p| format!("{p:#06x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    loop {
        let last = match ctx.sysfs.pkeys(vf) {
            Ok(Some((dev, table))) => {
                if table.contains(&pkey) {
                    log::info!(
                        "pkey {pkey:#06x} is in the pkey table of VF {vf} ({dev} port 1) after {} ms",
                        start.elapsed().as_millis()
                    );
                    return Ok(());
                }
                format!("{dev} port 1 has [{}]", show(&table))
            }
            Ok(None) => format!("{vf} has no RDMA device now"),
            Err(e) => format!("reading it: {e}"),
        };
        let now = std::time::Instant::now();
        if now >= deadline {
            return Err(CniError::try_later(format!(
                "pkey {pkey:#06x} is not in the pkey table of VF {vf} after {} ms (pkeyWaitMs {}; {last}): the subnet manager has not yet added GUID {} to partition {:#06x} as a {} member; ADD is rolled back, retry",
                start.elapsed().as_millis(),
                bound.as_millis(),
                guid.map(|g| g.to_string()).unwrap_or_else(|| "(unknown)".into()),
                pkey & 0x7fff,
                if pkey & 0x8000 != 0 { "full" } else { "limited" }
            )));
        }
        std::thread::sleep(PKEY_POLL.min(deadline - now));
    }
}

/// The warnings ADD logs about configuration `conf` on device `dev` (`is_pf`, `vfio`
/// as [`device_and_mode`] gives them) before it changes anything; `doctor --conf`
/// reports the same list, so the two cannot drift. In this order:
/// - vfio mode with an `ipam` (ignored: a vfio device has no netdev);
/// - a PF passed through with a GUID or `link_state` (ignored: they apply to VFs);
/// - a `pkey` whose base key (the low 15 bits) is 0, which no partition uses;
/// - a `pkey` not in the VF's pkey table (`<VF>/infiniband/<dev>/ports/1/pkeys/*`,
///   [`crate::sysfs::VfDevice::pkeys`]), when the table was read and `pkeyWaitMs` is
///   not set: ib-kubernetes programs it through the subnet manager, so it may come
///   later.
pub fn device_warnings(
    conf: &crate::config::NetConf,
    dev: &crate::sysfs::VfDevice,
    is_pf: bool,
    vfio: bool,
) -> Vec<String> {
    let addr = dev.addr;
    let mut out = Vec::new();
    if vfio && conf.ipam.is_some() {
        out.push(format!(
            "{addr} is in vfio mode: it has no netdev, so ipam is ignored"
        ));
    }
    if is_pf && (conf.guid.is_some() || conf.link_state.is_some()) {
        out.push(format!(
            "{addr} is a PF passed through with vfio-pci: GUID and link_state apply to VFs only and are ignored (the PF has its own GUID)"
        ));
    }
    if let Some(pk) = conf.pkey {
        if pk & 0x7fff == 0 {
            out.push(format!(
                "pkey {pk:#06x} has base key 0, which no partition uses; ib-kubernetes programs the pod's real pkey through the subnet manager"
            ));
        }
        // With pkeyWaitMs ADD waits for it instead (exact 16 bits).
        if conf.pkey_wait.is_none()
            && !dev.pkeys.is_empty()
            && !dev.pkeys.iter().any(|p| p & 0x7fff == pk & 0x7fff)
        {
            out.push(format!(
                "pkey {pk:#06x} is not (yet) in the pkey table of VF {addr}; ib-kubernetes programs it through the subnet manager"
            ));
        }
    }
    out
}

/// The device ADD would attach and its mode, read from sysfs before any change (also
/// what `ib-sriov doctor --conf` checks): the VF at `vf_addr`, or a PF (any PCI
/// function without SR-IOV) passed through with vfio-pci ([`pf_passthrough`]); whether
/// it is such a PF; whether it is in vfio mode. vfio mode follows the driver, as in the
/// Go plugin (543060da, cmd/ib-sriov-cni/main.go `handleVfioPciDetection`):
/// `vfioPciMode: true` requires vfio-pci; otherwise a device bound to vfio-pci is in
/// vfio mode whatever the key says (auto-detect).
///
/// Errors: code 7 for a device that does not exist, is not a VF and not a vfio-pci PF,
/// or contradicts `vfioPciMode`.
pub fn device_and_mode(
    sysfs: &crate::sysfs::Sysfs,
    conf: &crate::config::NetConf,
    vf_addr: crate::types::PciAddress,
) -> Result<(crate::sysfs::VfDevice, bool, bool), CniError> {
    let (dev, is_pf) = match sysfs.discover_vf(vf_addr) {
        Ok(dev) => (dev, false),
        Err(
            crate::sysfs::DiscoveryError::IsPf { .. } | crate::sysfs::DiscoveryError::NotVf { .. },
        ) => (pf_passthrough(sysfs, vf_addr)?, true),
        Err(e) => return Err(CniError::config(e.to_string())),
    };
    let vfio = match (conf.vfio_pci_mode, dev.is_vfio()) {
        (Some(true), false) => {
            return Err(CniError::config(format!(
                "vfioPciMode is true but {vf_addr} is bound to {}, not vfio-pci: bind it to vfio-pci or drop vfioPciMode",
                dev.driver.as_deref().unwrap_or("no driver")
            )))
        }
        (Some(false), true) => {
            log::info!("{vf_addr} is bound to vfio-pci: vfio mode (vfioPciMode false is overridden by the driver, as in the Go plugin)");
            true
        }
        (_, v) => v,
    };
    Ok((dev, is_pf, vfio))
}

/// A vfio device's result entry, then completion: `complete` written without fsync.
/// The entry is `CNI_IFNAME` with the pod netns as `sandbox` (and the PCI address as
/// `pciID` in 1.1.0), as the Go plugin's result (543060da, cmd/ib-sriov-cni/main.go
/// `cmdAdd`): Multus' network-status and KubeVirt key on that name.
fn finish(ctx: &Ctx, j: &mut Journal, out: &mut CniOutput) -> Result<(), CniError> {
    if j.vfio {
        out.interfaces.push(Interface {
            name: j.ifname.clone(),
            sandbox: j.netns.clone().unwrap_or_default(),
            pci_id: Some(j.vf.to_string()),
            ..Default::default()
        });
    }
    hit("add.complete")?;
    j.complete = true;
    ctx.store.save(j)?;
    Ok(())
}

/// A device that is not an SR-IOV VF (a PF, or a PCI function without SR-IOV), as the
/// Go plugin accepts it since 2026-03: passed through to the pod only when bound to
/// vfio-pci (KubeVirt, DPDK); nothing to move, no GUID or link state to set (those are
/// VF attributes set through the PF). Described as a VF of itself, index 0, so the
/// journal, the holder link and DEL treat it like a vfio VF with an empty plan.
///
/// Errors: code 7 when it is not bound to vfio-pci (the plugin moves VF netdevs only;
/// a PF netdev is the node's).
fn pf_passthrough(
    sysfs: &crate::sysfs::Sysfs,
    addr: crate::types::PciAddress,
) -> Result<crate::sysfs::VfDevice, CniError> {
    let driver = sysfs
        .driver(addr)
        .map_err(|e| CniError::config(format!("reading the driver of {addr}: {e}")))?;
    if driver.as_deref() != Some(crate::sysfs::VFIO_PCI_DRIVER) {
        return Err(CniError::config(format!(
            "{addr} is not an SR-IOV VF (no physfn link): a PF can only be passed through bound to vfio-pci with vfioPciMode (it is bound to {})",
            driver.as_deref().unwrap_or("no driver")
        )));
    }
    log::info!("{addr} is a PF bound to vfio-pci: PF passthrough (vfio mode)");
    Ok(crate::sysfs::VfDevice {
        addr,
        pf: addr,
        vf_index: crate::types::VfIndex(0),
        pf_netdev: None,
        netdev: None,
        driver,
        rdma_devices: Vec::new(),
        pkeys: Vec::new(),
    })
}

/// The device-info content, from the journal's facts as they are when the step runs (a
/// rebind may have renamed the RDMA device), recorded before the file is written.
fn fill_device_info(ctx: &Ctx, j: &mut Journal, i: usize) -> Result<(), CniError> {
    let rdma = if j.vfio {
        None
    } else {
        j.rdma_device().map(str::to_string).or_else(|| {
            ctx.sysfs
                .rdma_devices(j.vf)
                .ok()
                .and_then(|v| v.into_iter().next())
        })
    };
    let content =
        super::rdma::device_info_json(&j.vf.to_string(), rdma.as_deref(), &j.pf.to_string())
            .to_string();
    if let Some(Step::DeviceInfo { content: c, .. }) = j.steps.get_mut(i) {
        *c = content;
    }
    ctx.store.save(j)?;
    Ok(())
}

/// Before any change: the device-info path must be absolute and, if something is there,
/// a regular file (a directory, FIFO or symlink there is an error: the plugin never
/// writes through or removes what it did not create).
fn check_device_info_path(p: &std::path::Path) -> Result<(), CniError> {
    if !p.is_absolute() || p.file_name().is_none() {
        return Err(CniError::config(format!(
            "runtimeConfig.CNIDeviceInfoFile {} must be an absolute file path",
            p.display()
        )));
    }
    match std::fs::symlink_metadata(p) {
        Ok(m) if !m.is_file() => Err(CniError::config(format!(
            "runtimeConfig.CNIDeviceInfoFile {} exists and is not a regular file",
            p.display()
        ))),
        _ => Ok(()),
    }
}
