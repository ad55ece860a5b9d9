//! The transaction's steps: for every [`Step`] of the journal, one module holds its
//! `apply` (ADD) and its `undo` (rollback, DEL, GC) side by side (`link_state`, `guid`,
//! `rdma_move`, `device_info`, `netdev_move`, `ipam` with `addresses`, `go_cache`); this module
//! dispatches to them in plan order ([`apply`]) and in reverse ([`undo`]), and holds the
//! host adapters they share: one rtnetlink connection per namespace per call ([`Host`],
//! [`Pod`]), opened once and passed down (the pattern of containers/netavark
//! `core_utils.rs`). `netdev` finds and names the VF's netdev by identity and rebinds
//! the VF's driver.
//!
//! Identity, not names: before a netdev is moved, renamed or set, it is proved to be the
//! VF's ([`crate::journal::NetdevId`]: ifindex, hardware address, parent device). In the pod it is looked
//! up by identity wherever the pod renamed it, and a link that fails the check is left
//! where it is and named in the log. In the host, the VF's netdev is the one the kernel
//! lists under `<VF>/net/` (sysfs shows only the host netns' devices), or the one whose
//! `IFLA_PARENT_DEV_NAME` is the VF, or the recorded ifindex with the recorded address.
//!
//! Undo order: the VF steps in reverse; the IPAM allocation last (written once, here),
//! and only when the netdev has left the pod (or the pod netns is gone), so a released
//! address is never still configured in a live pod. A netdev that is nowhere (destroyed
//! with its pod netns, deleted) is re-created by rebinding the VF's driver
//! (`netdev_move::recover_by_rebind`); only when that cannot even start (the rebind lock
//! busy past `lockTimeoutMs`) are the remaining VF steps (RDMA device, GUID and rebind,
//! link state) left for a retry, with the journal.

mod addresses;
mod device_info;
mod go_cache;
mod guid;
mod ipam;
mod link_state;
mod netdev;
mod netdev_move;
mod rdma_move;

pub use addresses::DAD_WAIT;
pub use device_info::undo as remove_device_info;
pub use go_cache::{
    as_go_left, file_gone, heal as heal_go_cache, missing_file as missing_go_cache, GoneFile,
};
pub use ipam::{release as release_ipam, release_with};
pub use netdev::{
    find_in_host, netdev_after_rebind, netdev_id, rebind_driver, FALLBACK_NAME_PATTERN,
};
pub use netdev_move::RETURN_WAIT;

use super::vfattr::PfView;
use super::{errors::ErrorList, Ctx, Ipam};
use crate::cni::{CniError, CniOutput};
use crate::failpoint::hit;
use crate::journal::{Journal, NsId, Step};
use crate::netlink::Netlink;
use crate::netns::NetNs;
use crate::sysfs::Sysfs;
use std::cell::OnceCell;
use std::time::Duration;

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

/// Runs step `i` of `j` (ADD), through the step's own module. Facts learnt on the way
/// (a netdev's identity after a rebind, its pod ifindex) are written into `j` and saved
/// without fsync.
pub fn apply(cx: &mut Apply, j: &mut Journal, i: usize) -> Result<(), StepFailure> {
    match j.steps[i].clone() {
        Step::LinkState { want, via, .. } => link_state::apply(cx, j, want, via),
        Step::Guid {
            want, via, rebind, ..
        } => guid::apply(cx, j, want, via, rebind),
        Step::RdmaMove { device } => rdma_move::apply(cx, j, &device),
        Step::DeviceInfo { path, content } => device_info::apply(&path, &content),
        Step::MoveNetdev { netdev, .. } => netdev_move::apply(cx, j, i, &netdev),
        Step::Ipam { .. } => ipam::apply(cx, j, i),
        Step::GoCache { .. } => go_cache::apply(cx, j, i),
    }
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
    // A VF whose PCI device is gone (`sriov_numvfs` changed under the pod) took its
    // netdev, RDMA device and PF-side attributes with it: nothing of it to restore.
    let vf_gone =
        matches!(host.sysfs.driver(j.vf), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    if vf_gone && !held_by_other {
        log::warn!(
            "VF {} of {}/{} no longer exists (its PF's sriov_numvfs changed): nothing of it to restore",
            j.vf,
            j.container_id,
            j.ifname
        );
    }
    let mut netdev_out = true;
    // The PF view (one rtnetlink lookup of the PF netdev) only for the VF-attribute
    // steps that need it.
    let view = OnceCell::new();
    let view = || view.get_or_init(|| PfView::for_journal(&host.nl, host.sysfs, j));
    for s in steps.iter().rev() {
        let r = match s {
            // Both after the loop: IPAM once the netdev is out; the Go cache file last.
            Step::Ipam { .. } | Step::GoCache { .. } => continue,
            Step::DeviceInfo { path, content } => device_info::undo(path, content),
            _ if held_by_other || !netdev_out || vf_gone => continue,
            Step::MoveNetdev {
                netdev,
                host_name,
                host_up,
                pod_ifindex,
            } => {
                let r =
                    netdev_move::undo(ctx, host, j, netdev, host_name, *host_up, *pod_ifindex, pod);
                netdev_out = r.is_ok();
                r
            }
            Step::RdmaMove { device } => rdma_move::undo(ctx, host, j, device, pod),
            Step::Guid {
                want,
                origin: Some(origin),
                ..
            } => {
                log::info!(
                    "VF {} keeps GUID {want} ({origin}): it had no GUID before, and restoring that would need a rebind and break the VF again",
                    j.vf
                );
                Ok(())
            }
            Step::Guid {
                orig_node,
                orig_port,
                via,
                rebind,
                ..
            } => guid::undo(
                ctx,
                host,
                view(),
                j,
                (*orig_node, *orig_port),
                *via,
                *rebind,
            ),
            Step::LinkState { orig, via, .. } => link_state::undo(view(), j, *orig, *via),
        };
        errs.check(r.and_then(|_| hit(&format!("del.{}", s.kind()))));
    }
    if with_ipam && steps.iter().any(|s| matches!(s, Step::Ipam { .. })) {
        if netdev_out {
            errs.check(ipam::release(ctx, j));
        } else {
            log::warn!(
                "the IP of {}/{} is kept: its netdev is not out of the pod",
                j.container_id,
                j.ifname
            );
        }
    }
    // The Go cache file goes last, once everything else is undone, so that a complete
    // journal without it (a crash of ours right after its removal, or the Go plugin's
    // DEL after a rollback) finds the VF restored: the teardown then reads the host
    // (`as_go_left`) and drops the journal only when nothing of the attachment is left.
    if errs.is_empty() {
        for s in steps {
            if let Step::GoCache { path, content } = s {
                errs.check(
                    go_cache::undo(ctx.store.dir(), path, content)
                        .and_then(|_| hit("del.go_cache")),
                );
            }
        }
    }
    errs
}
