//! GC (CNI SPEC.md 1.1.0 "GC: Clean up any stale resources"): release whatever this
//! network holds for attachments the runtime no longer lists.
//!
//! Input: `cni.dev/valid-attachments` (libcni also sends the older spelling
//! `cni.dev/attachments`, issue containernetworking/cni#1101), an array of
//! `{"containerID", "ifname"}`. For every journal of this network (`name`) whose
//! attachment is not listed, the VF is restored exactly as DEL would (netdev back from
//! the recorded netns if it is still alive, else taken as returned by the kernel; GUID
//! and link state restored; never when another attachment's journal holds the VF), then
//! the journal is removed. Every built-in IPAM allocation of the network held by an
//! unlisted attachment is released; a delegated IPAM plugin gets GC itself. Errors do
//! not stop the sweep; they are all reported in one error (see `errors::ErrorList::into_result`: code 11
//! when every failure was a lock timeout, else 102, each failure in `details`).

use super::errors::ErrorList;
use super::steps::Host;
use super::{ipam_error, teardown, Ctx, Ipam};
use crate::cni::{code, CniError, Command, Version};
use crate::failpoint::hit;
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

pub(super) fn gc(ctx: &Ctx) -> Result<(), CniError> {
    let conf = ctx.conf;
    if conf.cni_version < Version::V1_1_0 {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "GC needs cniVersion 1.1.0, got {}",
                conf.cni_version.as_str()
            ),
        ));
    }
    let valid = valid_attachments(&conf.raw)?;
    let ipam = ctx.ipam()?;
    let mut errs: Vec<CniError> = Vec::new();

    // 1. Journals of this network that no valid attachment owns (and, in the same
    // spirit, the temp files of journal writers killed long ago).
    let swept = ctx.store.sweep_temps(Duration::from_secs(600));
    if swept > 0 {
        log::info!("GC: removed {swept} temp file(s) of killed journal writers");
    }
    let mut restored = 0;
    match ctx.store.list() {
        Ok((journals, unreadable)) => {
            for e in unreadable {
                log::warn!("GC: {e}");
            }
            let host = if journals.is_empty() {
                None
            } else {
                match Host::open(&ctx.sysfs) {
                    // No waiting for a netdev the kernel has not returned yet: one that
                    // is not in the host is re-created at once by the recovery rebind
                    // (`steps::netdev_move`), so the pass never stalls on one VF.
                    Ok(h) => Some(Host {
                        return_wait: Duration::ZERO,
                        ..h
                    }),
                    Err(e) => {
                        errs.push(e);
                        None
                    }
                }
            };
            for j in journals {
                let Some(host) = &host else { break };
                if j.network != conf.name
                    || valid.contains(&(j.container_id.clone(), j.ifname.clone()))
                {
                    continue;
                }
                log::info!(
                    "GC: {}/{} (VF {}) is not a valid attachment: restoring",
                    j.container_id,
                    j.ifname,
                    j.vf
                );
                let (cid, ifname, vf) = (j.container_id.clone(), j.ifname.clone(), j.vf);
                let r = teardown::load_locked(ctx, (&cid, &ifname), Some(j)).and_then(|held| {
                    if let Some((j, _lock)) = held {
                        teardown::teardown_locked(ctx, host, &j, None, false)?;
                    }
                    hit("gc.journal")
                });
                match r {
                    Ok(()) => restored += 1,
                    Err(e) => errs.push(CniError {
                        msg: format!("{cid}/{ifname} (VF {vf}): {}", e.msg),
                        ..e
                    }),
                }
            }
        }
        Err(e) => errs.push(e.into()),
    }

    // 2. IPAM.
    match &ipam {
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
                Err(e) => errs.push(ipam_error(e)),
            }
        }
        Some(Ipam::External(d)) => match d.supports(ctx.env, "1.1.0") {
            Ok(true) => {
                if let Err(e) = ctx.delegate(d, Command::Gc) {
                    errs.push(e);
                }
            }
            Ok(false) => log::debug!(
                "GC: ipam plugin {} does not support CNI 1.1.0 (no GC); its allocations are its own",
                d.plugin_type
            ),
            Err(e) => errs.push(e),
        },
        None => {}
    }
    log::info!(
        "GC of network {}: {} valid attachment(s), {restored} stale attachment(s) restored, {} error(s)",
        conf.name,
        valid.len(),
        errs.len()
    );
    // For the exporter (`ib_sriov_gc_removed_attachments_total`); never fails GC.
    crate::callmetrics::record_gc_removed(restored);
    ErrorList(errs).into_result(format!(
        "GC of network {} did not complete; it is safe to retry",
        conf.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
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
