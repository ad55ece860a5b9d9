//! The journal-driven teardown of one attachment, shared by DEL, GC, ADD (an
//! interrupted ADD of the same attachment, or a VF whose holder's pod is gone) and the
//! upgrade path (an attachment converted from the Go plugin's cache).

use super::steps::{resolve_pod, undo, GoneFile, Host};
use super::Ctx;
use crate::cni::CniError;
use crate::failpoint::hit;
use crate::fsutil::FileLock;
use crate::journal::Journal;

/// Undoes `j` (its VF lock held by the caller) with the pod netns found from `netns`
/// or the journal (identity-checked), and removes the journal when everything is done.
/// `release_ipam`: also release the journaled IPAM allocation (GC releases IPAM itself,
/// for every unlisted attachment at once). Errors keep their codes: code 11 when every
/// failure is transient (a lock timeout, a VF netdev not yet returned by the kernel).
pub(super) fn teardown_locked(
    ctx: &Ctx,
    host: &Host,
    j: &Journal,
    netns: Option<&str>,
    release_ipam: bool,
) -> Result<(), CniError> {
    if crate::boot::is_other(j.boot_id.as_deref()) {
        log::warn!(
            "the journal of {}/{} (VF {}) was written in another boot ({}): the reboot ended what it describes; releasing its IPAM allocation and dropping it without touching the VF",
            j.container_id,
            j.ifname,
            j.vf,
            j.boot_id.as_deref().unwrap_or("?")
        );
        return drop_untouched(ctx, j, release_ipam);
    }
    if let Some(p) = super::steps::file_gone(j) {
        if gone_file_done(ctx, host, j, p)? {
            return drop_untouched(ctx, j, release_ipam);
        }
    }
    let pod = resolve_pod(j, netns)?;
    let errs = undo(ctx, host, j, &pod, j.steps.len(), release_ipam);
    if !errs.is_empty() {
        return errs.into_result(format!(
            "restoring VF {} of {}/{} did not complete; the journal is kept and DEL can be retried",
            j.vf, j.container_id, j.ifname
        ));
    }
    hit("del.journal")?;
    ctx.store.remove(&j.container_id, &j.ifname)?;
    // Nothing of the attachment stays in the store: its holder link goes with it.
    ctx.store.remove_holder(j.vf, &j.container_id, &j.ifname)?;
    Ok(())
}

/// The journal of (containerID, ifname) read under its VF's lock: loaded, its VF locked
/// (bounded by `lockTimeoutMs`), then read again, so what is undone is what the last
/// writer left (an ADD still running when DEL or GC first looked writes the netdev's
/// new identity and its completion before it lets the lock go). `Ok(None)` when there
/// is none (any more). `first`: a journal already read (GC's listing), else it is
/// loaded here.
///
/// Errors: the journal unreadable (code 5), the lock busy past its bound (code 11), the
/// journal naming another VF at every one of three reads (code 11: ADDs of the
/// attachment keep replacing it).
pub(super) fn load_locked(
    ctx: &Ctx,
    (cid, ifname): (&str, &str),
    first: Option<Journal>,
) -> Result<Option<(Journal, FileLock)>, CniError> {
    let mut j = match first {
        Some(j) => j,
        None => match ctx.store.load(cid, ifname)? {
            Some(j) => j,
            None => return Ok(None),
        },
    };
    for _ in 0..3 {
        let lock = ctx.lock_vf(j.vf)?;
        match ctx.store.load(cid, ifname)? {
            None => return Ok(None),
            Some(now) if now.vf == j.vf => return Ok(Some((now, lock))),
            Some(now) => j = now,
        }
    }
    Err(CniError::try_later(format!(
        "the journal of {cid}/{ifname} names another VF at every read (now {}): ADDs of this attachment are running; retry",
        j.vf
    )))
}

/// A complete journal whose Go cache file is gone (at `path`): `Ok(true)` when the
/// host shows that someone else ended the attachment, so the journal is dropped without
/// touching the VF: the Go plugin's DEL after a rollback left the VF as it leaves it
/// (`steps::as_go_left`), or an attachment the Go plugin made since holds the VF (its
/// cache file names it: `go_dirs::holder_of`). `Ok(false)`: something of the attachment
/// is still on the VF (no netdev, the netdev still in the pod, the pod's name, GUID or
/// link state): the caller runs its own undo, which checks each step's state (the
/// recovery rebind, name, GUID, link state, IPAM); a newer attachment of ours holding
/// the VF is left alone by that undo too. Either way the log says the file was gone
/// and what was found. Errors: reading the host (the journal is kept).
fn gone_file_done(
    ctx: &Ctx,
    host: &Host,
    j: &Journal,
    path: &std::path::Path,
) -> Result<bool, CniError> {
    let (cid, ifname, vf, path) = (&j.container_id, &j.ifname, j.vf, path.display());
    if let Some(go) = super::go_dirs::holder_of(ctx, vf) {
        log::warn!(
            "the Go plugin cache file {path} of {cid}/{ifname} is gone and VF {vf} is held by an attachment the Go ib-sriov-cni made since ({}): dropping the journal without touching the VF",
            go.path.display()
        );
        return Ok(true);
    }
    match super::steps::as_go_left(host, j)? {
        GoneFile::AsGoLeavesIt(found) => {
            log::warn!(
                "the Go plugin cache file {path} of {cid}/{ifname} is gone and VF {vf} is as the Go ib-sriov-cni's DEL leaves it ({found}): it was undone (by the Go plugin after a rollback, or by an earlier DEL of ours); dropping the journal without touching the VF"
            );
            Ok(true)
        }
        GoneFile::NotUndone(found) => {
            log::warn!(
                "the Go plugin cache file {path} of {cid}/{ifname} is gone, but VF {vf} is not as the Go ib-sriov-cni's DEL leaves it: {found}; undoing the attachment from its journal"
            );
            Ok(false)
        }
    }
}

/// A journal whose attachment someone else ended: written in another boot (an on-disk
/// `stateDir` that outlived a reboot: the pod netns, the moves, the PF-side VF settings
/// ended with that boot), or undone by the Go plugin's DEL after a rollback (its cache
/// file gone and the host showing the VF as Go's DEL leaves it: [`gone_file_done`]). The VF is
/// not touched (it may be another pod's by now); the device-info file ADD wrote is
/// removed while it holds what ADD wrote; the IPAM allocation is released (when
/// `release_ipam`; GC releases IPAM itself; a release already done is a no-op), then
/// the journal and its holder link are removed. Errors: the release failing (the
/// journal stays for a retry), or removing the files.
fn drop_untouched(ctx: &Ctx, j: &Journal, release_ipam: bool) -> Result<(), CniError> {
    // Our device-info file is not the VF's: removed while it holds what ADD wrote (a
    // DEL of ours killed between its netdev and device-info undos left it).
    for s in &j.steps {
        if let crate::journal::Step::DeviceInfo { path, content } = s {
            super::steps::remove_device_info(path, content)?;
        }
    }
    let has_ipam = j
        .steps
        .iter()
        .any(|s| matches!(s, crate::journal::Step::Ipam { .. }));
    if release_ipam && has_ipam {
        super::steps::release_ipam(ctx, j)?;
    }
    ctx.store.remove(&j.container_id, &j.ifname)?;
    ctx.store.remove_holder(j.vf, &j.container_id, &j.ifname)?;
    Ok(())
}
