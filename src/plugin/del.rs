//! DEL (best effort, idempotent): with a journal, every step it records is undone
//! (`steps::undo`: the VF steps in reverse, then the IPAM allocation, which is released
//! only once the netdev has left the pod), then the journal is removed; a failed step
//! keeps the journal so DEL can be retried. Without a journal nothing was made by ADD:
//! no device is moved (whatever the pod has under CNI_IFNAME is the pod's), and the IPAM
//! allocation of (containerID, ifname) is released when the configuration allows it
//! (SPEC.md DEL; the Go peer leaked IPs on an empty CNI_NETNS). An unusable IPAM
//! configuration then only logs: DEL of something never made succeeds. An attachment the
//! Go ib-sriov-cni made (its cache file, no journal) is undone as its DEL would
//! (`upgrade`). A cache file our own ADD wrote for a rollback, left without its journal,
//! is read by the boot it records: written in another boot (a reboot emptied /run and
//! ended what it describes) it is removed and never acted on; written in this boot (the
//! journal was lost: `stateDir` emptied while pods ran) it is undone as the Go plugin's
//! DEL would, since the host may still hold what it describes. A file that is not a Go
//! cache at all is skipped with a warning (`upgrade::find_for_del`).

use super::steps::{release_with, Host};
use super::teardown::{load_locked, teardown_locked};
use super::Ctx;
use crate::cni::CniError;

pub(super) fn del(ctx: &Ctx) -> Result<(), CniError> {
    let env = ctx.env;
    match load_locked(ctx, (&env.container_id, &env.ifname), None)? {
        Some((j, _lock)) => {
            let host = Host::open(&ctx.sysfs)?;
            teardown_locked(ctx, &host, &j, env.netns.as_deref(), true)
        }
        None => {
            let done = match super::upgrade::find_for_del(ctx)? {
                Some(go) if go.ours.is_none() => super::upgrade::del(ctx, go)?,
                Some(go) if go.ours_this_boot() => {
                    // The journal is gone but not the boot (a `stateDir` emptied while
                    // pods ran): the host may still hold what the file describes.
                    log::warn!(
                        "no journal for {}/{}, but {} was written by our ADD in this boot: the journal was lost (stateDir emptied?); undoing the attachment from that file, as the Go plugin's DEL would",
                        env.container_id,
                        env.ifname,
                        go.path.display()
                    );
                    super::upgrade::del(ctx, go)?
                }
                Some(go) => {
                    super::upgrade::drop_ours(&go)?;
                    false
                }
                None => false,
            };
            if done {
                return Ok(());
            }
            log::info!(
                "no journal for {}/{}: nothing left to undo (an earlier DEL undid it, or ADD made nothing)",
                env.container_id,
                env.ifname
            );
            // An ADD killed before its journal was renamed into place left only the
            // temp file: remove it with the (absent) journal.
            if let Err(e) = ctx.store.remove(&env.container_id, &env.ifname) {
                log::warn!("removing journal temp files: {e}");
            }
            release_without_journal(ctx)
        }
    }
}

/// IPAM of an attachment without a journal: released with DEL's own configuration when
/// it is usable; an unusable one (dhcp, a plugin missing from CNI_PATH, a malformed
/// range) cannot have allocated anything through this plugin, so it is only logged, as
/// is a delegate's failing DEL.
fn release_without_journal(ctx: &Ctx) -> Result<(), CniError> {
    let env = ctx.env;
    let ipam = match ctx.ipam() {
        Ok(i) => i,
        Err(e) => {
            log::warn!(
                "DEL of {}/{}: the IPAM configuration is unusable ({e}); nothing to release",
                env.container_id,
                env.ifname
            );
            return Ok(());
        }
    };
    let raw = serde_json::to_vec(&ctx.conf.raw)
        .map_err(|e| CniError::internal(format!("encoding the config: {e}")))?;
    let delegated = matches!(ipam, Some(super::Ipam::External(_)));
    match release_with(
        ctx,
        ipam,
        ctx.conf,
        &raw,
        (&env.container_id, &env.ifname),
        &[],
    ) {
        // Without a journal this plugin never ran the delegate's ADD for the pair (the
        // journal is written first): its DEL is a courtesy, and a delegate failing it
        // (host-local on a malformed subnet: code 999) must not fail the DEL of
        // something never made. The Go plugin does not call it at all without a cache.
        Err(e) if delegated => {
            log::warn!(
                "DEL of {}/{}: the ipam plugin's DEL failed ({e}); nothing was allocated through this plugin",
                env.container_id,
                env.ifname
            );
            Ok(())
        }
        r => r,
    }
}
