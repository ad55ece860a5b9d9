//! The transaction's steps: for every [`Step`] of the journal, its `apply` (ADD) and its
//! `undo` (rollback, DEL, GC) side by side, and the host adapters they share: one
//! rtnetlink connection per namespace per call ([`Host`], [`Pod`]), opened once and passed
//! down (the pattern of containers/netavark `core_utils.rs`).
//!
//! Identity, not names: before a netdev is moved, renamed or set, it is proved to be the
//! VF's ([`NetdevId`]: ifindex, hardware address, parent device). In the pod it is looked
//! up by identity wherever the pod renamed it, and a link that fails the check is left
//! where it is and named in the log. In the host, the VF's netdev is the one the kernel
//! lists under `<VF>/net/` (sysfs shows only the host netns' devices), or the one whose
//! `IFLA_PARENT_DEV_NAME` is the VF, or the recorded ifindex with the recorded address.
//!
//! Undo order: the VF steps in reverse; the IPAM allocation last (written once, here),
//! and only when the netdev has left the pod (or the pod netns is gone), so a released
//! address is never still configured in a live pod. After a netdev that cannot be
//! brought back, the remaining VF steps (RDMA device, GUID and rebind, link state) are
//! not undone: the journal stays for a retry.

use super::vfattr::PfView;
use super::{errors::ErrorList, Ctx, Ipam, NETDEV_WAIT};
use crate::cni::{code, CniError, CniOutput, Command, Interface, IpConfig, Route};
use crate::config::NetConf;
use crate::failpoint::hit;
use crate::journal::{Journal, NetdevId, NsId, Step};
use crate::netlink::{Link, LinkEvents, Netlink};
use crate::netns::NetNs;
use crate::sysfs::Sysfs;
use crate::types::{format_hwaddr, LinkState, PciAddress};
use nix::errno::Errno;
use std::cell::OnceCell;
use std::time::{Duration, Instant};

/// Name pattern for a returning netdev whose original name is taken in the host; the
/// kernel replaces `%d` with the first free number (`dev_alloc_name()`).
pub const FALLBACK_NAME_PATTERN: &str = "ibvf%d";

/// How long DEL waits for a VF netdev to come back to the host after its netns died
/// (the kernel returns physical netdevs to init_net from the netns cleanup work, which
/// can take seconds on a busy node). Past it DEL keeps the journal and answers code 11.
pub const RETURN_WAIT: Duration = Duration::from_secs(5);

const EEXIST: Option<i32> = Some(Errno::EEXIST as i32);

/// The host side of one call: the plugin's own netns and one rtnetlink connection in it.
pub struct Host<'a> {
    /// sysfs.
    pub sysfs: &'a Sysfs,
    /// The host (the plugin's current) network namespace.
    pub ns: NetNs,
    /// rtnetlink in the host netns.
    pub nl: Netlink,
    /// How long an undo waits for a VF netdev the kernel has not yet returned from a
    /// deleted pod netns: [`RETURN_WAIT`] for DEL; zero for GC, which keeps the journal
    /// for its next run rather than stall the whole pass on one VF.
    pub return_wait: Duration,
}

impl<'a> Host<'a> {
    /// Opens the host netns and its rtnetlink connection.
    pub fn open(sysfs: &'a Sysfs) -> Result<Host<'a>, CniError> {
        Ok(Host {
            sysfs,
            ns: NetNs::current()?,
            nl: Netlink::open()?,
            return_wait: RETURN_WAIT,
        })
    }
}

/// A live pod network namespace and its rtnetlink connection, opened on first use.
pub struct Pod {
    /// The namespace.
    pub ns: NetNs,
    nl: OnceCell<Netlink>,
}

impl Pod {
    /// Wraps an open namespace.
    pub fn new(ns: NetNs) -> Pod {
        Pod {
            ns,
            nl: OnceCell::new(),
        }
    }

    /// rtnetlink with its socket in the pod netns (opened once).
    pub fn nl(&self) -> Result<&Netlink, CniError> {
        if let Some(n) = self.nl.get() {
            return Ok(n);
        }
        let n = Netlink::open_in(&self.ns)?;
        Ok(self.nl.get_or_init(|| n))
    }
}

/// The pod netns as an undo finds it.
pub enum PodNs {
    /// The attachment's namespace, live (its identity is the recorded one).
    Live(Pod),
    /// Gone: deleted, a stale mount, or a path now naming another namespace.
    Gone,
}

/// The nsfs identity of an open namespace.
pub fn ns_id(ns: &NetNs) -> Result<NsId, CniError> {
    let st = nix::sys::stat::fstat(ns.fd())
        .map_err(|e| CniError::host(format!("fstat {}: {e}", ns.path().display())))?;
    Ok(NsId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// Finds the attachment's pod netns: CNI_NETNS when given, else the path ADD recorded
/// (a DEL with an empty CNI_NETNS while the pod lives still finds it), each used only
/// when it is the very namespace ADD recorded (same nsfs inode).
pub fn resolve_pod(j: &Journal, given: Option<&str>) -> Result<PodNs, CniError> {
    let mut paths: Vec<&str> = given.into_iter().collect();
    if let Some(p) = j.netns.as_deref() {
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    for p in paths {
        match NetNs::open(p) {
            Ok(ns) => {
                let id = ns_id(&ns)?;
                if j.netns_id.is_none_or(|want| want == id) {
                    return Ok(PodNs::Live(Pod::new(ns)));
                }
                log::warn!(
                    "{p} is not the network namespace of {}/{} (another namespace now has that path): not acting in it",
                    j.container_id,
                    j.ifname
                );
            }
            Err(e) if e.is_gone() => log::info!("{e}"),
            Err(e @ crate::netns::NetnsError::NotNetwork(..)) => {
                log::warn!("{e}: not the pod's network namespace")
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(PodNs::Gone)
}

/// True when `l` carries identity `id` as far as it can be checked without the
/// ifindex: the same hardware address, and the VF as parent device when the kernel
/// reports parents (a link without a parent is then virtual, never the VF).
fn same_device(l: &Link, id: &NetdevId, vf: &str) -> bool {
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
fn find_in_pod(
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
fn listed_in_host(host: &Host, vf: PciAddress) -> Result<Option<Link>, CniError> {
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
fn fix_name_and_state(nl: &Netlink, link: &Link, orig: &str, up: bool) -> Result<(), CniError> {
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

/// What ADD's steps need besides the journal.
pub struct Apply<'a> {
    /// The call.
    pub ctx: &'a Ctx<'a>,
    /// Host adapters.
    pub host: &'a Host<'a>,
    /// The pod.
    pub pod: &'a Pod,
    /// The VF through its PF.
    pub view: PfView<'a>,
    /// The IPAM to allocate from.
    pub ipam: Option<&'a Ipam>,
    /// The result being built.
    pub out: CniOutput,
}

/// A step that failed: its error, and whether its own partial work still needs undoing
/// (a failed built-in allocate releases what it created itself, and undoing it again
/// would wait once more on the lock that just timed out).
pub struct StepFailure {
    /// The error.
    pub error: CniError,
    /// Undo this step too.
    pub undo_self: bool,
}

impl From<CniError> for StepFailure {
    fn from(error: CniError) -> Self {
        StepFailure {
            error,
            undo_self: true,
        }
    }
}

impl From<crate::journal::JournalError> for StepFailure {
    fn from(e: crate::journal::JournalError) -> Self {
        CniError::from(e).into()
    }
}

impl From<crate::netlink::NlError> for StepFailure {
    fn from(e: crate::netlink::NlError) -> Self {
        CniError::from(e).into()
    }
}

/// Runs step `i` of `j` (ADD). Facts learnt on the way (a netdev's identity after a
/// rebind, its pod ifindex) are written into `j` and saved without fsync.
pub fn apply(cx: &mut Apply, j: &mut Journal, i: usize) -> Result<(), StepFailure> {
    let ctx = cx.ctx;
    match j.steps[i].clone() {
        Step::LinkState { want, via, .. } => {
            let used = cx.view.set_link_state(want, via)?;
            log::info!("VF {} link state set to {want} via {used:?}", j.vf);
            hit("add.link_state")?;
        }
        Step::Guid {
            want, via, rebind, ..
        } => {
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
                ctx.store.save_nosync(j)?;
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
        }
        Step::RdmaMove { device } => {
            super::rdma::move_in(ctx, &device, &cx.pod.ns)?;
            hit("add.rdma")?;
            netdev_after_rdma_move(cx, j)?;
        }
        Step::DeviceInfo { path, content } => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    CniError::new(code::IO_FAILURE, format!("creating {}: {e}", dir.display()))
                })?;
            }
            // Atomic (a reader never sees half a file) but not fsync'd: the file
            // describes a live pod, and a machine crash ends the pod; it normally
            // lives on tmpfs (/var/run/k8s.cni.cncf.io/devinfo) anyway.
            crate::fsutil::replace_nosync(&path, content.as_bytes()).map_err(|e| {
                CniError::new(
                    code::IO_FAILURE,
                    format!("writing device-info file {}: {e}", path.display()),
                )
            })?;
            log::info!("wrote device-info file {}", path.display());
            hit("add.device_info")?;
        }
        Step::MoveNetdev { netdev, .. } => {
            // The built-in IPAM claim stays after the move, in this thread: claimed
            // in a second thread while the move waited in the kernel, it cost 3-4 ms
            // of wall time and 0.6-1.3 ms of CPU more per ADD+DEL cycle in same-run
            // A/B runs of scripts/bench.sh on tmpfs, and was no faster on ext4.
            let pod_ifindex = move_in(cx, j, &netdev)?;
            hit("add.move")?;
            // Written with the completion (one journal write fewer per ADD: a file
            // creation costs ~1 ms of system time on ext4 here). Lost in a crash, the
            // undo finds the netdev in the pod by its recorded identity instead.
            if let Some(Step::MoveNetdev { pod_ifindex: p, .. }) = j.steps.get_mut(i) {
                *p = Some(pod_ifindex);
            }
        }
        Step::Ipam { .. } => ipam_apply(cx, j, i)?,
    }
    Ok(())
}

/// After the RDMA device moved into the pod: the netdev the journal will move. Moving
/// an RDMA device to another netns disables and re-enables it, which removes and
/// re-adds every ib_client: the ipoib ULP destroys the VF's IPoIB netdev and creates a
/// new one in the initial netns (new ifindex, new QPN in its hardware address; `ib%d`
/// until udev renames it). `rdma_dev_change_netns()` in drivers/infiniband/core/device.c,
/// `ipoib_add_one()` in drivers/infiniband/ulp/ipoib/ipoib_main.c; the Go plugin moves the
/// RDMA device first for that reason. The recorded netdev still in the host (a driver
/// without that behaviour) is kept; otherwise the kernel's netdev of the VF is taken
/// (listed under `<VF>/net/`, waited for up to [`NETDEV_WAIT`]) and recorded.
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
    cx.ctx.store.save_nosync(j)?;
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
    let pl = find_in_pod(pod_nl, id, None, &vf)?
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

fn ipam_apply(cx: &mut Apply, j: &mut Journal, i: usize) -> Result<(), StepFailure> {
    let (ctx, env, conf) = (cx.ctx, cx.ctx.env, cx.ctx.conf);
    let Some(ipam) = cx.ipam else { return Ok(()) };
    let (ips, routes) = match ipam {
        Ipam::Builtin(c) => {
            let a = c
                .allocate_new(
                    &conf.name,
                    &env.container_id,
                    &env.ifname,
                    conf.lock_timeout,
                )
                .map_err(|e| StepFailure {
                    error: super::ipam_error(e),
                    undo_self: false,
                })?;
            let ips: Vec<IpConfig> = a
                .ips
                .iter()
                .map(|ip| IpConfig {
                    address: ip.address,
                    gateway: ip.gateway,
                    interface: Some(0),
                })
                .collect();
            let routes: Vec<Route> = a.routes.iter().map(|r| Route::new(r.dst, r.gw)).collect();
            // Written with the completion (or the rollback's undo uses it from memory);
            // lost in a crash, the release reads the store instead.
            if let Some(Step::Ipam { ips: rec, .. }) = j.steps.get_mut(i) {
                *rec = a.ips.iter().map(|ip| ip.address.ip()).collect();
            }
            (ips, routes)
        }
        Ipam::External(d) => {
            let v = match ctx.delegate(d, Command::Add) {
                Ok(v) => v,
                Err(error) => {
                    // The delegate answered ADD with an error, so it holds nothing
                    // (SPEC.md: a failed ADD leaves nothing behind). Its DEL is still
                    // called, as cleanup, but its failure (a delegate refusing the
                    // configuration refuses DEL too) is only logged: the rollback must
                    // not keep a journal that every later DEL would fail on.
                    if let Err(de) = ctx.delegate(d, Command::Del) {
                        log::warn!(
                            "ipam plugin {} DEL after its failed ADD: {de}",
                            d.plugin_type
                        );
                    }
                    return Err(StepFailure {
                        error,
                        undo_self: false,
                    });
                }
            };
            let v = v.ok_or_else(|| {
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
                // As the Go plugin (cmd/ib-sriov-cni/main.go: "IPAM plugin returned
                // missing IP config"); the rollback calls the delegate's DEL.
                return Err(CniError::new(
                    code::IPAM_FAILURE,
                    format!("ipam plugin {} returned no IP address", d.plugin_type),
                )
                .into());
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
            cx.out.dns = r.dns;
            (ips, r.routes)
        }
    };
    hit("add.ipam")?;
    // The pod ifindex the move found (no second lookup), else by name.
    let moved = j.steps.iter().find_map(|s| match s {
        Step::MoveNetdev { pod_ifindex, .. } => *pod_ifindex,
        _ => None,
    });
    let index = match moved {
        Some(index) => index,
        None => cx
            .pod
            .nl()?
            .link_by_name(&env.ifname)?
            .map(|l| l.index)
            .ok_or_else(|| CniError::host(format!("{} vanished from the pod", env.ifname)))?,
    };
    configure_iface(cx.pod, &env.ifname, index, &ips, &routes)?;
    hit("add.addresses")?;
    cx.out.ips = ips;
    cx.out.routes = routes;
    Ok(())
}

/// Bound on IPv6 duplicate address detection (containernetworking/plugins
/// `ipam.ConfigureIface` waits 10 s in `ip.SettleAddresses`).
pub const DAD_WAIT: Duration = Duration::from_secs(5);

/// Configures the interface as containernetworking/plugins `pkg/ipam/ipam_linux.go`
/// `ConfigureIface` does (what the Go plugin calls):
/// 1. before the first IPv6 address, `net.ipv6.conf.{lo,<ifname>}.disable_ipv6` is set to
///    0 in the pod netns when it is not 0 already (a netns created with IPv6 disabled
///    would refuse the address), and `net.ipv6.conf.<ifname>.keep_addr_on_down` to 1.
///    No undo: the interface's IPv6 settings go with it when it leaves the pod, and `lo`
///    belongs to the pod;
/// 2. every address is added;
/// 3. IPv6 duplicate address detection is waited for (bounded by [`DAD_WAIT`]; an
///    address that failed DAD is an error), so the pod never starts on a tentative
///    address it cannot bind (Go waits only when an IPv6 gateway is set);
/// 4. every route is added with `RouteAddEcmp` semantics ([`Netlink::add_route`]: beside an
///    existing route to the same destination, e.g. the pod's default route on `eth0` or
///    another rail's route), with its `priority`, `table`, `scope`, `mtu` and `advmss`;
///    a route without `gw` takes the gateway of the first address of its family.
///
/// Errors: code 11 (`IO_FAILURE` class host error) naming the failed address or route.
fn configure_iface(
    pod: &Pod,
    ifname: &str,
    index: u32,
    ips: &[IpConfig],
    routes: &[Route],
) -> Result<(), CniError> {
    let nl = pod.nl()?;
    let has_ipv6 = ips.iter().any(|ip| ip.address.is_ipv6());
    if has_ipv6 {
        pod.ns
            .run_in(|| enable_ipv6(ifname))
            .map_err(|e| CniError::host(format!("entering the pod netns: {e}")))??;
    }
    for ip in ips {
        nl.add_address(index, ip.address)?;
    }
    if has_ipv6 {
        settle_addresses(nl, ifname, index, DAD_WAIT)?;
    }
    for r in routes {
        let gw = r.gw.or_else(|| {
            ips.iter()
                .filter(|ip| ip.address.is_ipv4() == r.dst.is_ipv4())
                .find_map(|ip| ip.gateway)
        });
        nl.add_route(index, &Route { gw, ..r.clone() })?;
    }
    Ok(())
}

/// Sets `/proc/sys/net/ipv6/conf/{lo,<ifname>}/disable_ipv6` to 0 where it is not, then
/// `/proc/sys/net/ipv6/conf/<ifname>/keep_addr_on_down` to 1, in the calling thread's
/// netns (containernetworking/plugins v1.9.1 `ConfigureIface`). An unreadable
/// `disable_ipv6` is left alone, as there.
///
/// Errors: code 11 naming the sysctl that could not be written.
fn enable_ipv6(ifname: &str) -> Result<(), CniError> {
    for dev in ["lo", ifname] {
        let path = format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6");
        match std::fs::read_to_string(&path) {
            Ok(v) if v.trim() == "0" => {}
            Ok(_) => std::fs::write(&path, "0")
                .map_err(|e| CniError::host(format!("enabling IPv6 on {dev} ({path}): {e}")))?,
            Err(_) => {}
        }
    }
    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/keep_addr_on_down");
    std::fs::write(&path, "1").map_err(|e| CniError::host(format!("setting {path} to 1: {e}")))
}

/// Waits until no IPv6 address of the link is tentative (`IFA_F_TENTATIVE`), polling
/// every 50 ms as `ip.SettleAddresses` does, up to `bound`.
///
/// Errors: code 11 when an address failed DAD (`IFA_F_DADFAILED`: another node on the
/// fabric has it) or when an address is still tentative after `bound`.
fn settle_addresses(
    nl: &Netlink,
    ifname: &str,
    index: u32,
    bound: Duration,
) -> Result<(), CniError> {
    const IFA_F_DADFAILED: u32 = 0x08;
    const IFA_F_TENTATIVE: u32 = 0x40;
    let deadline = Instant::now() + bound;
    loop {
        let addrs = nl.addresses_with_flags(index)?;
        if let Some((a, _)) = addrs
            .iter()
            .find(|(a, f)| a.is_ipv6() && f & IFA_F_DADFAILED != 0)
        {
            return Err(CniError::host(format!(
                "IPv6 address {a} on {ifname} failed duplicate address detection: another host has it"
            )));
        }
        let Some((a, _)) = addrs
            .iter()
            .find(|(a, f)| a.is_ipv6() && f & IFA_F_TENTATIVE != 0)
        else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(CniError::host(format!(
                "IPv6 address {a} on {ifname} is still tentative (duplicate address detection) after {} s",
                bound.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
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

/// Releases the IPAM allocation of `j` with the IPAM configuration ADD received.
pub fn release_ipam(ctx: &Ctx, j: &Journal) -> Result<(), CniError> {
    let raw = serde_json::to_vec(&j.conf)
        .map_err(|e| CniError::internal(format!("encoding the journaled config: {e}")))?;
    let conf = NetConf::parse(&raw)?;
    let ipam = super::ipam_for(&conf, &ctx.env.path)?;
    let known: &[std::net::IpAddr] = j
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Ipam { ips, .. } => Some(ips.as_slice()),
            _ => None,
        })
        .unwrap_or_default();
    release_with(ctx, ipam, &conf, &raw, (&j.container_id, &j.ifname), known)
}

/// Releases what `ipam` (parsed from `conf`, whose JSON `raw` is the delegate's stdin)
/// holds for (containerID, ifname): the built-in allocator's records of the pair (the
/// `known` addresses the journal recorded, without reading the store; every record
/// read when none is known), or the delegate's DEL. A delegate's DEL that fails with code 1 or 7 (it refuses the
/// configuration, so a retry cannot succeed) is logged and counts as done.
///
/// Errors: the built-in allocator's (code 11 for a lock timeout), or the delegate's.
pub fn release_with(
    ctx: &Ctx,
    ipam: Option<Ipam>,
    conf: &NetConf,
    raw: &[u8],
    (cid, ifname): (&str, &str),
    known: &[std::net::IpAddr],
) -> Result<(), CniError> {
    match ipam {
        Some(Ipam::Builtin(c)) => {
            let n = c
                .release_known(&conf.name, cid, ifname, known, conf.lock_timeout)
                .map_err(super::ipam_error)?;
            if n > 0 {
                log::info!("released {n} address(es) of {cid}/{ifname}");
            }
        }
        Some(Ipam::External(d)) => match d.run(Command::Del, ctx.env, raw) {
            Ok(_) => {}
            // A delegate that refuses this configuration itself (code 1: the cniVersion;
            // code 7: the configuration) refuses every retry the same way: a kept
            // journal would fail every DEL for ever and leave the pod Terminating. It
            // cannot have allocated under a configuration it refuses (or, for an ADD
            // that failed in it, it answered ADD with an error), so its allocation, if
            // any, is its own business; the Go plugin ignores the DEL error of an ADD
            // rollback likewise (cmd/ib-sriov-cni/main.go `runIPAMPlugin`).
            Err(e) if matches!(e.code, code::INCOMPATIBLE_VERSION | code::INVALID_CONFIG) => {
                log::warn!(
                    "ipam plugin {} refuses DEL of {cid}/{ifname} permanently ({e}); not retried",
                    d.plugin_type
                );
            }
            Err(e) => return Err(e),
        },
        None => {}
    }
    hit("del.ipam")
}

/// Undoes the first `upto` steps of `j` in reverse (all of them for DEL and GC: each
/// undo checks the current state, so a step recorded but never run is harmless), with
/// the pod netns as `pod`; IPAM last when `with_ipam`. Returns every error.
pub fn undo(
    ctx: &Ctx,
    host: &Host,
    j: &Journal,
    pod: &PodNs,
    upto: usize,
    with_ipam: bool,
) -> ErrorList {
    let mut errs = ErrorList::default();
    let steps = &j.steps[..upto.min(j.steps.len())];
    // The VF itself: left alone when a newer attachment holds it (sriov-cni#313).
    let held_by_other = match ctx.store.holder(j.vf, (&j.container_id, &j.ifname)) {
        Ok(Some(Ok(other))) => {
            log::warn!(
                "VF {} is now held by {}/{}; not touching it",
                j.vf,
                other.container_id,
                other.ifname
            );
            true
        }
        Ok(Some(Err(e))) => {
            errs.0.push(e.into());
            return errs;
        }
        Ok(None) => false,
        Err(e) => {
            errs.0.push(e.into());
            return errs;
        }
    };
    let mut netdev_out = true;
    // The PF view (one rtnetlink lookup of the PF netdev) only for the VF-attribute
    // steps that need it.
    let view = OnceCell::new();
    let view = || view.get_or_init(|| PfView::for_journal(&host.nl, host.sysfs, j));
    for s in steps.iter().rev() {
        let r = match s {
            Step::Ipam { .. } => continue,
            Step::DeviceInfo { path, content } => undo_device_info(path, content),
            _ if held_by_other || !netdev_out => continue,
            Step::MoveNetdev {
                netdev,
                host_name,
                host_up,
                pod_ifindex,
            } => {
                let r = undo_move(host, j, netdev, host_name, *host_up, *pod_ifindex, pod);
                netdev_out = r.is_ok();
                r
            }
            Step::RdmaMove { device } => undo_rdma(ctx, host, j, device, pod),
            Step::Guid {
                orig_node,
                orig_port,
                via,
                rebind,
                ..
            } => undo_guid(
                ctx,
                host,
                view(),
                j,
                (*orig_node, *orig_port),
                *via,
                *rebind,
            ),
            Step::LinkState { orig, via, .. } => undo_link_state(view(), j, *orig, *via),
        };
        errs.check(r.and_then(|_| hit(&format!("del.{}", s.kind()))));
    }
    if with_ipam && steps.iter().any(|s| matches!(s, Step::Ipam { .. })) {
        if netdev_out {
            errs.check(release_ipam(ctx, j));
        } else {
            log::warn!(
                "the IP of {}/{} is kept: its netdev is not out of the pod",
                j.container_id,
                j.ifname
            );
        }
    }
    errs
}

/// Brings the VF netdev back to the host under its original name and admin state,
/// proving its identity first; waits (bounded) for the kernel to return it when the pod
/// netns is gone. Errors: not found in the live pod nor in the host (the pod moved it
/// elsewhere), or not returned in time (code 11): the journal stays.
fn undo_move(
    host: &Host,
    j: &Journal,
    id: &NetdevId,
    host_name: &str,
    host_up: bool,
    pod_ifindex: Option<u32>,
    pod: &PodNs,
) -> Result<(), CniError> {
    let vf = j.vf.to_string();
    let return_wait = host.return_wait;
    if let PodNs::Live(p) = pod {
        let pnl = p.nl()?;
        if let Some(l) = find_in_pod(pnl, id, pod_ifindex, &vf)? {
            if l.up {
                pnl.set_down(l.index)?;
            }
            match pnl.move_to_netns_named(l.index, host.ns.fd(), host_name) {
                Ok(()) => {}
                Err(e) if e.errno == EEXIST => {
                    // Either nothing moved (its pod name and the original name are both
                    // taken in the host), or it moved under its pod name and the rename
                    // failed (move and rename are not atomic in `do_setlink()`).
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
    let wait = match pod {
        PodNs::Gone => return_wait,
        PodNs::Live(_) => Duration::ZERO,
    };
    // Woken by the kernel's link notifications (subscribed before the first look, so
    // the return cannot slip between a look and the wait), not by a timer.
    let mut events = if wait.is_zero() {
        None
    } else {
        Some(LinkEvents::subscribe()?)
    };
    let deadline = Instant::now() + wait;
    loop {
        if let Some(l) = find_in_host(host, j.vf, Some(id))? {
            return fix_name_and_state(&host.nl, &l, host_name, host_up);
        }
        match events.as_mut() {
            Some(ev) if Instant::now() < deadline => {
                ev.wait(deadline);
            }
            _ => break,
        }
    }
    match pod {
        PodNs::Live(p) => Err(CniError::host(format!(
            "the netdev of VF {vf} ({}) is neither in the pod netns {} nor in the host: the pod may have moved it to another network namespace; the journal is kept and DEL completes once it is back",
            id.hwaddr,
            p.ns.path().display()
        ))),
        PodNs::Gone => {
            if host.sysfs.driver(j.vf).ok().flatten().is_none() {
                log::warn!("VF {vf} has no driver bound: no netdev can come back to the host");
                return Ok(());
            }
            Err(CniError::try_later(format!(
                "the kernel has not returned the netdev of VF {vf} from the deleted pod netns within {} s (netns cleanup is slow under load); the journal is kept: retry DEL",
                return_wait.as_secs()
            )))
        }
    }
}

/// Removes the device-info file if it still holds exactly what ADD wrote, and the temp
/// files an ADD killed while writing it left (`.<name>.tmp.<pid>`, ours: the path is
/// this attachment's and its writers hold the VF lock); anything else is left in place.
fn undo_device_info(path: &std::path::Path, content: &str) -> Result<(), CniError> {
    crate::fsutil::remove_temps_of(path);
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path);
    let mut f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            log::warn!("device-info file {}: {e}; not removing it", path.display());
            return Ok(());
        }
    };
    let is_ours = f
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() == content.len() as u64)
        && {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut f, &mut s).is_ok() && s == content
        };
    if !is_ours {
        log::warn!(
            "{} is not the device-info file this attachment wrote: left in place",
            path.display()
        );
        return Ok(());
    }
    // Not fsync'd: a removal lost in a crash leaves the file of a pod that is gone,
    // which the next DEL (its journal stays until the undo is complete) removes again.
    std::fs::remove_file(path)
        .or_else(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("removing {}: {e}", path.display()),
            )
        })
}

fn undo_rdma(
    ctx: &Ctx,
    host: &Host,
    j: &Journal,
    device: &str,
    pod: &PodNs,
) -> Result<(), CniError> {
    // With the pod netns gone the kernel has returned the device already.
    let PodNs::Live(p) = pod else { return Ok(()) };
    if super::rdma::move_out(ctx, device, &p.ns)? {
        // Moving the RDMA device re-creates the IPoIB netdev in the host: give it its
        // original name and state again.
        if let Some((_, host_name, host_up, _)) = j.netdev() {
            if let Some(l) = find_in_host(host, j.vf, None)? {
                fix_name_and_state(&host.nl, &l, host_name, host_up)?;
            }
        }
    }
    Ok(())
}

fn undo_guid(
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
        if cur.0 == orig.0 && (cur.1.is_none() || cur.1 == orig.1) {
            log::info!("VF {} already has its original GUIDs", j.vf);
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
    for (kind, g) in [(GuidKind::Node, orig.0), (GuidKind::Port, orig.1)] {
        match g {
            Some(g) => {
                via = Some(view.set_guid(kind, g, via)?);
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
    if any && rebind {
        rebind_driver(host.sysfs, j.vf)?;
        // The GUID takes effect once the driver is rebound; the netdev the probe
        // re-creates is the driver's (listed under <VF>/net/). If it does not show up,
        // say so and finish.
        match netdev_after_rebind(host, j.vf) {
            Ok(link) => {
                if let Some((_, host_name, host_up, _)) = j.netdev() {
                    fix_name_and_state(&host.nl, &link, host_name, host_up)?;
                }
            }
            Err(e) => log::warn!("after restoring the GUID of VF {}: {e}", j.vf),
        }
    }
    Ok(())
}

fn undo_link_state(
    view: &PfView,
    j: &Journal,
    orig: Option<LinkState>,
    via: Option<crate::journal::Via>,
) -> Result<(), CniError> {
    let want = orig.unwrap_or_else(|| {
        log::warn!("original link state of VF {} unknown; restoring auto", j.vf);
        LinkState::Auto
    });
    // Already original (the set never happened, e.g. the driver refused it, or a
    // previous DEL restored it): no set, which such a driver would refuse as well.
    let current = view.read().ok().and_then(|st| st.link_state).map(|s| s.0);
    if current == Some(want) {
        log::info!("VF {} link state is already {want}", j.vf);
        return Ok(());
    }
    view.set_link_state(want, via)?;
    log::info!("VF {} link state restored to {want}", j.vf);
    Ok(())
}
