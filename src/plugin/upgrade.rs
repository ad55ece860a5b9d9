//! Attachments made by the Go ib-sriov-cni before the binary was swapped in place: DEL
//! and CHECK of a (containerID, ifname) that has a Go cache file and no journal of ours
//! ([`crate::gocache`]).
//!
//! DEL converts the cache into a journal of ours that undoes what Go's DEL undoes
//! (k8snetworkplumbingwg/ib-sriov-cni 543060da, `cmd/ib-sriov-cni/main.go` `cmdDel`,
//! `pkg/sriov/sriov.go` `ReleaseVF`/`ResetVFConfig`), saves that journal durably, removes
//! the Go file, and then runs the ordinary journal-driven teardown, so a crash at any
//! point leaves either the Go file or our journal for the next DEL:
//! - the IPAM allocation, released with the DEL call's own configuration (Go keeps only
//!   `ipam.type`), unless in vfio mode;
//! - the VF netdev, back to the host under `HostIFNames`, left down (as Go leaves it);
//!   a cache file of an earlier boot leaves the VF's netdev of this boot its name (the
//!   one its ADD moved died with that boot);
//! - the RDMA device, back to the host (`rdmaIsolation`);
//! - the node and port GUID set to `HostIFGUID` (all-ones when it read all-zero) and the
//!   driver rebound (not in vfio mode), when ADD set a GUID;
//! - the VF link state set to `auto` when `link_state` was configured.
//!
//! Differences, all deliberate: a pod netns that is gone does not skip the VF reset (Go
//! returns at once and leaves the pod's GUID on the VF); the netdev is proved to be the
//! VF's before it is moved (its parent device, and the GUID ADD set in its IPoIB address)
//! where Go takes whatever has the name; an empty `CNI_NETNS` does not skip the work.

use super::go_dirs::dirs;
use super::steps::{ns_id, Host};
use super::teardown::teardown_locked;
use super::Ctx;
use crate::cni::CniError;
use crate::gocache::{self, GoAttachment};
use crate::journal::{Journal, NetdevId, Step, JOURNAL_VERSION};
use crate::netlink::Netlink;
use crate::netns::NetNs;
use crate::types::{format_hwaddr, Guid, LinkState, VfIndex};

/// The Go cache of the call's attachment, if any.
///
/// Errors: code 11 (I/O) or 7 (content) naming the file; the file is left in place.
pub(super) fn find(ctx: &Ctx) -> Result<Option<GoAttachment>, CniError> {
    find_with(ctx, false)
}

/// [`find`] for DEL: a file that is not a Go cache (corrupted, truncated, an admin's)
/// says nothing about the VF, so it is skipped with a warning and left in place, and
/// DEL goes on as without it (the Go plugin's `cmdDel` likewise returns success when
/// `config.LoadConfFromCache` fails, k8snetworkplumbingwg/ib-sriov-cni 543060da
/// `cmd/ib-sriov-cni/main.go`). Errors: code 11 (I/O) naming the file.
pub(super) fn find_for_del(ctx: &Ctx) -> Result<Option<GoAttachment>, CniError> {
    find_with(ctx, true)
}

fn find_with(ctx: &Ctx, skip_invalid: bool) -> Result<Option<GoAttachment>, CniError> {
    for dir in dirs(ctx) {
        match gocache::load(&dir, &ctx.env.container_id, &ctx.env.ifname) {
            Ok(Some(a)) => return Ok(Some(a)),
            Ok(None) => {}
            Err(e @ gocache::GoCacheError::Io(..)) => {
                return Err(CniError::new(crate::cni::code::IO_FAILURE, e.to_string()))
            }
            Err(e) if skip_invalid => log::warn!(
                "{e}: it is not acted on (nothing in it can be trusted) and is left in place; if the Go ib-sriov-cni attached this pod, its VF is not restored by this DEL (ib-sriov doctor shows the VF)"
            ),
            Err(e) => return Err(CniError::config(e.to_string())),
        }
    }
    Ok(None)
}

/// DEL of an attachment the Go plugin made. `Ok(true)` when done; `Ok(false)` when the
/// VF is held by a newer attachment of ours (the Go pod ended and the device plugin gave
/// the VF to another pod first): the VF is not touched, the cache file is removed, and
/// the caller releases the IPAM allocation as for a DEL without a journal.
///
/// Errors: as the journal-driven teardown (`teardown::teardown_locked`); the journal made
/// from the cache is kept for a retry.
pub(super) fn del(ctx: &Ctx, go: GoAttachment) -> Result<bool, CniError> {
    let env = ctx.env;
    let host = Host::open(&ctx.sysfs)?;
    let _lock = ctx.lock_vf(go.vf)?;
    match ctx.store.holder(go.vf, (&env.container_id, &env.ifname))? {
        Some(Ok(other)) => {
            log::warn!(
                "{}/{} was attached by the Go ib-sriov-cni ({}), but VF {} is now held by {}/{}: not touching the VF; removing the cache file",
                env.container_id,
                env.ifname,
                go.path.display(),
                go.vf,
                other.container_id,
                other.ifname
            );
            drop_ours(&go)?;
            return Ok(false);
        }
        Some(Err(e)) => return Err(e.into()),
        None => {}
    }
    log::info!(
        "{}/{} was attached by the Go ib-sriov-cni ({}): undoing it as the Go plugin's DEL would",
        env.container_id,
        env.ifname,
        go.path.display()
    );
    let j = journal_from(ctx, &host, &go)?;
    ctx.store.set_holder(j.vf, &j.container_id, &j.ifname)?;
    ctx.store.save(&j)?;
    // Durable: our journal now stands for the attachment; a Go cache coming back
    // after a crash would make a later DEL undo it a second time from stale facts.
    crate::fsutil::remove_durable(&go.path).map_err(|e| {
        CniError::new(
            crate::cni::code::IO_FAILURE,
            format!("removing Go plugin cache {}: {e}", go.path.display()),
        )
    })?;
    teardown_locked(ctx, &host, &j, env.netns.as_deref(), true).map(|()| true)
}

/// A cache file our own ADD wrote (for a rollback to the Go plugin) found by a DEL with
/// no journal of ours: whatever boot wrote it, the journal is what our DEL acts on, and
/// without one the attachment is not ours to undo from the file (after a reboot there
/// is nothing left to undo). The file is removed; the caller releases the IPAM
/// allocation as for any DEL without a journal.
///
/// Errors: code 5 when the file cannot be removed.
pub(super) fn drop_ours(go: &GoAttachment) -> Result<(), CniError> {
    if let Some(boot) = &go.ours {
        log::warn!(
            "{} was written by an ADD of ours (boot {}) whose journal is gone: removing it without acting on it",
            go.path.display(),
            boot.as_deref().unwrap_or("?")
        );
    }
    crate::fsutil::remove_durable(&go.path)
        .map(|_| ())
        .map_err(|e| {
            CniError::new(
                crate::cni::code::IO_FAILURE,
                format!("removing {}: {e}", go.path.display()),
            )
        })
}

/// Finishes what the DEL of the Go plugin's attachment `go` would do to its VF, for an
/// ADD that found the VF held by it with its pod gone (the VF's netdev back in the
/// host, or a vfio VF the device plugin handed out again): the netdev back under its
/// name, RDMA device, GUID and link state as the Go DEL leaves them; then the cache
/// file is removed. Its IPAM allocation is left to its own DEL (which, finding no
/// cache, releases it with its own configuration). Crash-safe: the file goes last and
/// every undo checks the current state.
///
/// Errors: an undo failing (the file stays for a retry), the file not removable.
pub(super) fn finish_dead(ctx: &Ctx, host: &Host, go: &GoAttachment) -> Result<(), CniError> {
    let name = go
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ifname = go.pod_name.clone().unwrap_or_default();
    let cid = name
        .strip_suffix(&format!("-{ifname}"))
        .unwrap_or(&name)
        .to_string();
    log::warn!(
        "VF {} is held by {cid}/{ifname}, attached by the Go ib-sriov-cni ({}), whose pod is gone: undoing that attachment's VF state first, as its DEL would",
        go.vf,
        go.path.display()
    );
    let j = journal_for(ctx, host, go, (&cid, &ifname), None)?;
    let errs = super::steps::undo(
        ctx,
        host,
        &j,
        &super::steps::PodNs::Gone,
        j.steps.len(),
        false,
    );
    if !errs.is_empty() {
        return errs.into_result(format!(
            "restoring VF {} from the Go plugin's attachment {} did not complete; the cache file is kept",
            go.vf,
            go.path.display()
        ));
    }
    crate::fsutil::remove_durable(&go.path)
        .map(|_| ())
        .map_err(|e| {
            CniError::new(
                crate::cni::code::IO_FAILURE,
                format!("removing {}: {e}", go.path.display()),
            )
        })
}

/// CHECK of an attachment the Go plugin made (Go's own CHECK succeeds without looking):
/// the pod netns opens and, unless in vfio mode, the VF netdev is in it under
/// `CNI_IFNAME`, proved by parent device where the kernel reports one.
///
/// Errors: code 104 naming what is missing.
pub(super) fn check(ctx: &Ctx, go: &GoAttachment) -> Result<(), CniError> {
    let fail = |m: String| CniError::new(crate::cni::code::CHECK_FAILED, m);
    let netns = ctx.env.netns.as_deref().unwrap_or_default();
    let ns = NetNs::open(netns).map_err(|e| fail(format!("{e}")))?;
    if go.vfio {
        return Ok(());
    }
    let nl = Netlink::open_in(&ns)?;
    match pod_netdev(&nl, &ctx.env.ifname, go)? {
        Some(_) => Ok(()),
        None => Err(fail(format!(
            "{} in {netns} is not the netdev of VF {} (attached by the Go plugin)",
            ctx.env.ifname, go.vf
        ))),
    }
}

/// The VF netdev in the pod under `name`, when it can be the VF's: its parent device is
/// the VF (Linux 5.14+ reports it), or, without a parent, its 20-byte IPoIB address
/// ends with the GUID ADD set; with neither to check (no parent reported, no GUID set),
/// the name is all the Go cache offers and is taken, with a log line saying so.
fn pod_netdev(
    nl: &Netlink,
    name: &str,
    go: &GoAttachment,
) -> Result<Option<crate::netlink::Link>, CniError> {
    let Some(l) = nl.link_by_name(name)? else {
        return Ok(None);
    };
    let vf = go.vf.to_string();
    let ok = match &l.parent_dev {
        Some(p) => *p == vf,
        None => match (Guid::from_ipoib_hwaddr(&l.address), go.applied_guid) {
            (Some(have), Some(want)) => have == want,
            _ => {
                log::warn!(
                    "{name} in the pod: the kernel reports no parent device and the Go cache records no GUID to compare; taken by name as the VF's netdev"
                );
                true
            }
        },
    };
    if ok {
        Ok(Some(l))
    } else {
        log::warn!(
            "{name} in the pod is not the netdev of VF {vf} (parent {:?}, address {}): not touched",
            l.parent_dev,
            format_hwaddr(&l.address)
        );
        Ok(None)
    }
}

/// The journal that undoes what the Go plugin's ADD did, in our step order (undone in
/// reverse: IPAM, netdev, RDMA device, GUID, link state).
fn journal_from(ctx: &Ctx, host: &Host, go: &GoAttachment) -> Result<Journal, CniError> {
    let env = ctx.env;
    journal_for(
        ctx,
        host,
        go,
        (&env.container_id, &env.ifname),
        env.netns.as_deref(),
    )
}

/// [`journal_from`] for the attachment `(cid, ifname)` with pod netns `netns` (`None`:
/// gone or unknown).
///
/// The netdev goes back under `HostIFNames`, except when the cache file is of an
/// earlier boot ([`GoAttachment::of_earlier_boot`]) and no live pod holds the VF's
/// netdev: the netdev that ADD moved died with that boot, and the VF's netdev in the
/// host now is this boot's, named by this host (at boot, by udev, by an admin); it keeps
/// that name (and is left down, as Go leaves it). The Go plugin's own DEL never renames
/// a netdev in the host: it renames only the one it finds in the pod netns under
/// `CNI_IFNAME`, and returns at once when that netns is gone (`cmdDel`, `ReleaseVF`,
/// k8snetworkplumbingwg/ib-sriov-cni 543060da `cmd/ib-sriov-cni/main.go`,
/// `pkg/sriov/sriov.go`).
fn journal_for(
    ctx: &Ctx,
    host: &Host,
    go: &GoAttachment,
    (cid, ifname): (&str, &str),
    netns: Option<&str>,
) -> Result<Journal, CniError> {
    let dev = ctx.sysfs.discover_vf(go.vf).ok();
    let pf = dev.as_ref().map(|d| d.pf).unwrap_or(go.vf);
    let vf_index = dev
        .as_ref()
        .map(|d| d.vf_index)
        .or(go.vf_index.map(VfIndex))
        .unwrap_or(VfIndex(0));
    // The pod netns as DEL names it (Go records none): identity taken now, so a retry
    // acts only in this same namespace.
    let (netns_id, pod_link) = match netns.map(NetNs::open) {
        Some(Ok(ns)) => {
            let id = ns_id(&ns)?;
            let link = if go.vfio {
                None
            } else {
                let nl = Netlink::open_in(&ns)?;
                let name = go.pod_name.as_deref().unwrap_or(ifname);
                pod_netdev(&nl, name, go)?
            };
            (Some(id), link)
        }
        Some(Err(e)) => {
            log::info!("pod netns: {e}");
            (None, None)
        }
        None => (None, None),
    };
    let mut steps = Vec::new();
    if let Some(want) = go.link_state {
        // Go's ResetVFConfig sets `auto` whatever the state was before ADD.
        steps.push(Step::LinkState {
            orig: Some(LinkState::Auto),
            want,
            via: None,
        });
    }
    if let Some(g) = go.restore_guid {
        steps.push(Step::Guid {
            orig_node: Some(g),
            orig_port: Some(g),
            want: go.applied_guid.unwrap_or(g),
            via: None,
            rebind: !go.vfio,
            origin: None,
        });
    }
    if let Some(device) = &go.rdma_device {
        steps.push(Step::RdmaMove {
            device: device.clone(),
        });
    }
    if !go.vfio {
        let netdev = match &pod_link {
            Some(l) => NetdevId {
                ifindex: 0,
                hwaddr: format_hwaddr(&l.address),
                parent: l.parent_dev.clone(),
            },
            // Unknown in the pod (gone with the netns, or not provable): found in the
            // host under <VF>/net/ once the kernel returns it.
            None => NetdevId {
                ifindex: 0,
                hwaddr: String::new(),
                parent: Some(go.vf.to_string()),
            },
        };
        let mut host_name = go.host_name.clone().unwrap_or_else(|| ifname.to_string());
        if pod_link.is_none() && go.of_earlier_boot() {
            if let Some(l) = super::steps::find_in_host(host, go.vf, None)? {
                if l.name != host_name {
                    log::info!(
                        "{} was written before this boot: the netdev that attachment moved died with its boot; {} (ifindex {}), the netdev of VF {} in this boot, keeps its name (not {host_name})",
                        go.path.display(),
                        l.name,
                        l.index,
                        go.vf
                    );
                }
                host_name = l.name;
            }
        }
        steps.push(Step::MoveNetdev {
            netdev,
            host_name,
            host_up: false,
            pod_ifindex: pod_link.as_ref().map(|l| l.index),
        });
        if let Some(t) = &go.ipam_type {
            steps.push(Step::Ipam {
                ipam_type: t.clone(),
                ips: Vec::new(),
            });
        }
    }
    let mut conf = ctx.conf.raw.clone();
    if let Some(o) = conf.as_object_mut() {
        o.remove("prevResult");
    }
    Ok(Journal {
        version: JOURNAL_VERSION,
        container_id: cid.to_string(),
        ifname: ifname.to_string(),
        netns: netns.map(str::to_string),
        netns_id,
        network: if go.network.is_empty() {
            ctx.conf.name.clone()
        } else {
            go.network.clone()
        },
        vf: go.vf,
        pf,
        vf_index,
        pf_netdev: go.pf_netdev.clone().or(dev.and_then(|d| d.pf_netdev)),
        vfio: go.vfio,
        rdma_isolation: go.rdma_device.as_ref().map(|_| true),
        conf,
        steps,
        complete: true,
        // The Go cache records no boot: taken as this boot's, as the Go plugin would.
        boot_id: None,
        rdma_devices: go.rdma_device.iter().cloned().collect(),
        // The Go cache does not record the pod.
        pod: None,
        guid: None,
        pf_port_guid: None,
    })
}
