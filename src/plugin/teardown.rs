//! The journal-driven teardown of one attachment, shared by DEL, GC, ADD (an
//! interrupted ADD of the same attachment, or a VF whose holder's pod is gone) and the
//! upgrade path (an attachment converted from the Go plugin's cache).

use super::steps::{resolve_pod, undo, Host};
use super::Ctx;
use crate::cni::CniError;
use crate::failpoint::hit;
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
    Ok(())
}
