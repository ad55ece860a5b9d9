//! Step `Ipam`: the pod's addresses, from the built-in allocator (`ib-sriov-ipam`) or a
//! delegated IPAM plugin (SPEC.md "Plugin Delegation"), configured on the moved netdev
//! (`addresses`), and released on undo only once the netdev has left the pod.

use super::addresses::configure_iface;
use super::{Apply, StepFailure};
use crate::cni::exec::DELEGATE_TIMEOUT;
use crate::cni::{code, CniError, CniOutput, Command, IpConfig, Route};
use crate::config::NetConf;
use crate::failpoint::hit;
use crate::journal::{Journal, Step};
use crate::plugin::{Ctx, Ipam, ADD_BUDGET, ROLLBACK_RESERVE};
use serde_json::Value;

/// Allocates (or delegates ADD), configures the addresses and routes in the pod and
/// puts them in the result (ADD); the built-in allocation is recorded in step `i`.
pub(super) fn apply(cx: &mut Apply, j: &mut Journal, i: usize) -> Result<(), StepFailure> {
    let (ctx, env, conf) = (cx.ctx, cx.ctx.env, cx.ctx.conf);
    let Some(ipam) = cx.ipam else { return Ok(()) };
    let (ips, routes) = match ipam {
        Ipam::Builtin(c) => {
            let a = c
                .allocate_new(
                    &conf.name,
                    &env.container_id,
                    &env.ifname,
                    ctx.bounded(conf.lock_timeout),
                )
                .map_err(|e| StepFailure {
                    error: crate::plugin::ipam_error(e),
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
                    // not keep a journal that every later DEL would fail on. Also after
                    // an ADD killed at its deadline (it may have allocated before it
                    // stalled). It gets what is left before the rollback's own reserve
                    // (ADD's time bound, crate::plugin::ADD_BUDGET): at least
                    // CLEANUP_RESERVE.
                    let until = ctx.started + (ADD_BUDGET - ROLLBACK_RESERVE);
                    let limit = DELEGATE_TIMEOUT.min(ctx.left_until(until));
                    if let Err(de) = ctx.delegate_within(d, Command::Del, limit) {
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

/// Releases the IPAM allocation of `j` with the IPAM configuration ADD received.
pub fn release(ctx: &Ctx, j: &Journal) -> Result<(), CniError> {
    let raw = serde_json::to_vec(&j.conf)
        .map_err(|e| CniError::internal(format!("encoding the journaled config: {e}")))?;
    // The call's own parse when the journaled configuration is the call's (`prevResult`
    // aside: the journal has none): the usual DEL, spared a second parse.
    let parsed;
    let conf = if same_but_prev_result(&j.conf, &ctx.conf.raw) {
        ctx.conf
    } else {
        parsed = NetConf::parse(&raw)?;
        &parsed
    };
    let ipam = crate::plugin::ipam_for(conf, &ctx.env.path)?;
    let known: &[std::net::IpAddr] = j
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Ipam { ips, .. } => Some(ips.as_slice()),
            _ => None,
        })
        .unwrap_or_default();
    release_with(ctx, ipam, conf, &raw, (&j.container_id, &j.ifname), known)
}

/// Whether two network configurations (JSON objects) are equal but for `prevResult`.
fn same_but_prev_result(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return false;
    };
    let keys =
        |o: &'_ serde_json::Map<String, Value>| o.len() - usize::from(o.contains_key("prevResult"));
    keys(a) == keys(b)
        && a.iter()
            .filter(|(k, _)| *k != "prevResult")
            .all(|(k, v)| b.get(k) == Some(v))
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
                .release_known(
                    &conf.name,
                    cid,
                    ifname,
                    known,
                    ctx.bounded(conf.lock_timeout),
                )
                .map_err(crate::plugin::ipam_error)?;
            if n > 0 {
                log::info!("released {n} address(es) of {cid}/{ifname}");
            }
        }
        Some(Ipam::External(d)) => {
            match d.run_within(Command::Del, ctx.env, raw, ctx.bounded(DELEGATE_TIMEOUT)) {
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
            }
        }
        None => {}
    }
    hit("del.ipam")
}

#[cfg(test)]
mod tests {
    use super::same_but_prev_result;
    use serde_json::json;

    #[test]
    fn configurations_equal_but_for_prev_result() {
        let a = json!({"name": "n", "ipam": {"type": "t"}});
        let with_prev = json!({"name": "n", "ipam": {"type": "t"}, "prevResult": {"ips": []}});
        assert!(same_but_prev_result(&a, &with_prev));
        assert!(same_but_prev_result(&with_prev, &a));
        assert!(same_but_prev_result(&a, &a));
        assert!(!same_but_prev_result(
            &a,
            &json!({"name": "n", "ipam": {"type": "u"}})
        ));
        assert!(!same_but_prev_result(&a, &json!({"name": "n"})));
        assert!(!same_but_prev_result(
            &a,
            &json!({"name": "n", "ipam": {"type": "t"}, "x": 1})
        ));
        assert!(!same_but_prev_result(
            &json!({"name": "n", "prevResult": 1, "x": 2}),
            &json!({"name": "n", "y": 2})
        ));
        assert!(!same_but_prev_result(&json!([1]), &json!([1])));
    }
}
