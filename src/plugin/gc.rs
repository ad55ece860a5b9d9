//! GC (CNI SPEC.md 1.1.0 "GC: Clean up any stale resources"): release whatever this
//! network holds for attachments the runtime no longer lists.
//!
//! Input: `cni.dev/valid-attachments` (libcni also sends the older spelling
//! `cni.dev/attachments`, issue containernetworking/cni#1101), an array of
//! `{"containerID", "ifname"}`. For every journal of this network (`name`) whose
//! attachment is not listed, the VF is restored exactly as DEL would (netdev back from
//! the recorded netns if it is still alive, else taken as returned by the kernel; GUID
//! and link state restored; never when another attachment's journal holds the VF), then
//! the journal is removed. A listed attachment whose Go plugin cache file is missing
//! gets it back from its journal when the host proves it live (`steps::heal_go_cache`).
//! Every built-in IPAM allocation of the network held by an
//! unlisted attachment is released; a delegated IPAM plugin gets GC itself. Errors do
//! not stop the sweep; they are all reported in one error (see `errors::ErrorList::into_result`: code 11
//! when every failure was a lock timeout, else 102, each failure in `details`).

use super::errors::ErrorList;
use super::steps::Host;
use super::{ipam_error, teardown, Ctx, Ipam};
use crate::cni::{CniError, Command, Version};
use crate::config::NetConf;
use crate::failpoint::hit;
use crate::journal::Journal;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

/// The keys GC reads its list from, current one first.
pub const VALID_ATTACHMENTS_KEYS: [&str; 2] = ["cni.dev/valid-attachments", "cni.dev/attachments"];

/// The attachments the runtime still holds: `(containerID, ifname)` pairs.
///
/// Errors (code 7): neither key present (an absent list is not taken as "nothing is
/// valid": that would release every attachment on a malformed request), not an array,
/// or an entry without string `containerID` and `ifname`.
pub fn valid_attachments(conf: &Value) -> Result<HashSet<(String, String)>, CniError> {
    let list = VALID_ATTACHMENTS_KEYS
        .iter()
        .find_map(|k| conf.get(*k))
        .ok_or_else(|| {
            CniError::config(format!(
                "GC needs {} (the list of valid attachments; an empty list releases everything)",
                VALID_ATTACHMENTS_KEYS[0]
            ))
        })?;
    let arr = list.as_array().ok_or_else(|| {
        CniError::config(format!("{} must be an array", VALID_ATTACHMENTS_KEYS[0]))
    })?;
    arr.iter()
        .map(|a| {
            let field = |k: &str| a.get(k).and_then(Value::as_str).map(str::to_string);
            match (field("containerID"), field("ifname")) {
                (Some(c), Some(i)) => Ok((c, i)),
                _ => Err(CniError::config(format!(
                    "{} entry {a} needs string containerID and ifname",
                    VALID_ATTACHMENTS_KEYS[0]
                ))),
            }
        })
        .collect()
}

/// GC, as its phases (docs/design.md "How it fits together" lists them by these
/// names): [`check_version`], [`valid_attachments`], [`sweep_temps`],
/// [`list_journals`], [`open_host`], [`restore_stale`], [`release_ipam`], [`finish`].
/// The first two (and the IPAM's configuration) refuse the call; from [`sweep_temps`]
/// on nothing stops the sweep: each phase adds its failures to one [`ErrorList`], which
/// [`finish`] reports.
pub(super) fn gc(ctx: &Ctx) -> Result<(), CniError> {
    check_version(ctx.conf)?;
    let valid = valid_attachments(&ctx.conf.raw)?;
    let ipam = ctx.ipam()?;
    let mut errs = ErrorList(Vec::new());
    sweep_temps(ctx);
    let journals = list_journals(ctx, &mut errs);
    let restored = if journals.is_empty() {
        0
    } else {
        match open_host(ctx) {
            Ok(host) => restore_stale(ctx, &host, journals, &valid, &mut errs),
            Err(e) => {
                errs.0.push(e);
                0
            }
        }
    };
    release_ipam(ctx, ipam.as_ref(), &valid, &mut errs);
    finish(ctx, valid.len(), restored, errs)
}

/// Phase "check the version": GC exists from CNI 1.1.0 on.
///
/// Errors: code 1 (incompatible version) for a `cniVersion` below 1.1.0.
fn check_version(conf: &NetConf) -> Result<(), CniError> {
    conf.cni_version
        .require(Version::V1_1_0, "GC needs cniVersion 1.1.0")
}

/// Phase "sweep the temp files": in the spirit of the stale journals, the temp files of
/// journal writers killed long ago (over 10 minutes) are removed. Never fails.
fn sweep_temps(ctx: &Ctx) {
    let swept = ctx.store.sweep_temps(Duration::from_secs(600));
    if swept > 0 {
        log::info!("GC: removed {swept} temp file(s) of killed journal writers");
    }
}

/// Phase "list the journals": every readable journal of the stateDir, of any network
/// (the unreadable ones are logged and left alone). Empty, with the error in `errs`,
/// when the stateDir cannot be listed.
fn list_journals(ctx: &Ctx, errs: &mut ErrorList) -> Vec<Journal> {
    match ctx.store.list() {
        Ok((journals, unreadable)) => {
            for e in unreadable {
                log::warn!("GC: {e}");
            }
            journals
        }
        Err(e) => {
            errs.0.push(e.into());
            Vec::new()
        }
    }
}

/// Phase "open the host": the host adapters, opened only when there are journals.
/// No waiting for a netdev the kernel has not returned yet: one that is not in the host
/// is re-created at once by the recovery rebind (`steps::netdev_move`), so the pass
/// never stalls on one VF.
///
/// Errors: those of [`Host::open`]; then no journal is restored.
fn open_host<'a>(ctx: &'a Ctx) -> Result<Host<'a>, CniError> {
    let h = Host::open(&ctx.sysfs)?;
    Ok(Host {
        return_wait: Duration::ZERO,
        ..h
    })
}

/// Phase "restore the stale attachments": every journal of this network (`name`) whose
/// attachment is not in `valid` is torn down as DEL would ([`restore_one`]), without
/// releasing its IPAM allocation ([`release_ipam`] does that for the whole network);
/// every one in `valid` gets its missing Go plugin cache file back ([`heal_one`]).
/// A failure is added to `errs` with the attachment and VF in its message, and the
/// sweep goes on. Returns how many were restored.
fn restore_stale(
    ctx: &Ctx,
    host: &Host,
    journals: Vec<Journal>,
    valid: &HashSet<(String, String)>,
    errs: &mut ErrorList,
) -> u64 {
    let mut restored = 0;
    for j in journals {
        if j.network != ctx.conf.name {
            continue;
        }
        if valid.contains(&(j.container_id.clone(), j.ifname.clone())) {
            heal_one(ctx, j, "GC");
            continue;
        }
        log::info!(
            "GC: {}/{} (VF {}) is not a valid attachment: restoring",
            j.container_id,
            j.ifname,
            j.vf
        );
        let (cid, ifname, vf) = (j.container_id.clone(), j.ifname.clone(), j.vf);
        match restore_one(ctx, host, j) {
            Ok(()) => restored += 1,
            Err(e) => errs.0.push(CniError {
                msg: format!("{cid}/{ifname} (VF {vf}): {}", e.msg),
                ..e
            }),
        }
    }
    restored
}

/// One stale attachment: its journal read again under the VF lock
/// ([`teardown::load_locked`]; gone by then is done), then torn down and removed
/// ([`teardown::teardown_locked`], IPAM left to [`release_ipam`]).
///
/// Errors: those of the lock, the journal read and the teardown; then the fail point
/// `gc.journal`.
fn restore_one(ctx: &Ctx, host: &Host, j: Journal) -> Result<(), CniError> {
    let (cid, ifname) = (j.container_id.clone(), j.ifname.clone());
    if let Some((j, _lock)) = teardown::load_locked(ctx, (&cid, &ifname), Some(j))? {
        teardown::teardown_locked(ctx, host, &j, None, false)?;
    }
    hit("gc.journal")
}

/// A live attachment whose Go plugin cache file is missing (an admin's `rm` while its
/// pod runs): the file is rewritten from the journal, read again under the VF lock,
/// when the host proves the attachment live ([`super::steps::heal_go_cache`]), so a
/// rollback to the Go plugin can still DEL it. Called by GC for each valid attachment
/// of its network and by CHECK once the attachment checked out (`verb` names the
/// caller in the log). One `lstat` when nothing is missing. A failure is logged, never
/// the verb's answer (it only keeps a rollback possible).
pub(super) fn heal_one(ctx: &Ctx, j: Journal, verb: &str) {
    if super::steps::missing_go_cache(&j).is_none() {
        return;
    }
    let (cid, ifname) = (j.container_id.clone(), j.ifname.clone());
    let healed = teardown::load_locked(ctx, (&cid, &ifname), Some(j))
        .and_then(|l| l.map_or(Ok(None), |(j, _lock)| super::steps::heal_go_cache(ctx, &j)));
    if let Err(e) = healed {
        log::warn!(
            "{verb} of {cid}/{ifname}: its missing Go plugin cache file was not rewritten: {e}"
        );
    }
}

/// Phase "release the IPAM": the built-in allocator releases every allocation of the
/// network that no attachment of `valid` owns (one that records no ifname is owned by
/// its containerID alone); a delegated IPAM plugin gets GC itself when it speaks CNI
/// 1.1.0, else its allocations are its own. Failures go to `errs`.
fn release_ipam(
    ctx: &Ctx,
    ipam: Option<&Ipam>,
    valid: &HashSet<(String, String)>,
    errs: &mut ErrorList,
) {
    let conf = ctx.conf;
    match ipam {
        Some(Ipam::Builtin(c)) => {
            let keep = |cid: &str, ifname: &str| {
                valid
                    .iter()
                    .any(|(vc, vi)| vc == cid && (ifname.is_empty() || vi == ifname))
            };
            match c.release_unless(&conf.name, keep, conf.lock_timeout) {
                Ok(gone) => log::info!(
                    "GC: released {} address(es) of network {}",
                    gone.len(),
                    conf.name
                ),
                Err(e) => errs.0.push(ipam_error(e)),
            }
        }
        Some(Ipam::External(d)) => match d.supports(ctx.env, "1.1.0") {
            Ok(true) => {
                errs.check(ctx.delegate(d, Command::Gc));
            }
            Ok(false) => log::debug!(
                "GC: ipam plugin {} does not support CNI 1.1.0 (no GC); its allocations are its own",
                d.plugin_type
            ),
            Err(e) => errs.0.push(e),
        },
        None => {}
    }
}

/// Phase "finish": the summary logged, the count of restored attachments recorded for
/// the exporter (`ib_sriov_gc_removed_attachments_total`; never fails GC), and every
/// failure of the sweep folded into one result ([`ErrorList::into_result`]: one error
/// as itself; several under the code they share, so 11 when every one was a lock
/// timeout, else 102, each failure in `details`).
fn finish(ctx: &Ctx, valid: usize, restored: u64, errs: ErrorList) -> Result<(), CniError> {
    let name = &ctx.conf.name;
    log::info!(
        "GC of network {name}: {valid} valid attachment(s), {restored} stale attachment(s) restored, {} error(s)",
        errs.0.len()
    );
    crate::callmetrics::record_gc_removed(restored);
    errs.into_result(format!(
        "GC of network {name} did not complete; it is safe to retry"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::code;
    use serde_json::json;

    #[test]
    fn reads_either_key_and_rejects_malformed_lists() {
        let v = valid_attachments(&json!({"cni.dev/valid-attachments": [
            {"containerID": "a", "ifname": "net1"}, {"containerID": "b", "ifname": "net2"}
        ]}))
        .unwrap();
        assert_eq!(v.len(), 2);
        assert!(v.contains(&("b".into(), "net2".into())));
        let old = valid_attachments(
            &json!({"cni.dev/attachments": [{"containerID": "a", "ifname": "net1"}]}),
        )
        .unwrap();
        assert!(old.contains(&("a".into(), "net1".into())));
        assert!(valid_attachments(&json!({"cni.dev/valid-attachments": []}))
            .unwrap()
            .is_empty());
        for bad in [
            json!({}),
            json!({"cni.dev/valid-attachments": {}}),
            json!({"cni.dev/valid-attachments": [{"containerID": "a"}]}),
            json!({"cni.dev/valid-attachments": [{"containerID": 1, "ifname": "x"}]}),
        ] {
            assert_eq!(
                valid_attachments(&bad).unwrap_err().code,
                code::INVALID_CONFIG,
                "{bad}"
            );
        }
    }
}
