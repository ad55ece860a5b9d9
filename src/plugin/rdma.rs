//! RDMA device isolation: moving the VF's RDMA device into the pod netns and back
//! (facts: RDMA netlink `RDMA_NLDEV_CMD_SET` + `RDMA_NLDEV_NET_NS_FD`, exclusive netns
//! mode required; the device is looked up in the netns of the socket and of the calling
//! thread, so the move back runs inside the pod netns with the host netns fd).
//!
//! The kernel is reached through [`RdmaProvider`], so the orchestration can be tested
//! against [`crate::rdma::MemoryRdma`] where the kernel has no RDMA subsystem.

use super::Ctx;
use crate::cni::CniError;
use crate::netns::NetNs;
use crate::rdma::{NetnsMode, RdmaError, RdmaOps, RdmaSocket};
use crate::sysfs::VfDevice;

/// Opens an RDMA netlink handle in the calling thread's current network namespace.
pub trait RdmaProvider {
    /// A handle bound to the caller's current netns.
    /// Errors: [`RdmaError::NoSubsystem`] when the kernel has no ib_core.
    fn open(&self) -> Result<Box<dyn RdmaOps>, RdmaError>;
}

/// The real kernel: an `AF_NETLINK`/`NETLINK_RDMA` socket ([`RdmaSocket`]).
pub struct KernelRdma;

impl RdmaProvider for KernelRdma {
    fn open(&self) -> Result<Box<dyn RdmaOps>, RdmaError> {
        Ok(Box::new(RdmaSocket::open()?))
    }
}

#[cfg(any(test, feature = "test-doubles"))]
impl RdmaProvider for crate::rdma::MemoryRdma {
    fn open(&self) -> Result<Box<dyn RdmaOps>, RdmaError> {
        let here = crate::rdma::NetnsKey::of_path("/proc/thread-self/ns/net")?;
        Ok(Box::new(self.in_netns(here)))
    }
}

/// What shared mode means for the operator.
pub const SHARED_MODE_FIX: &str =
    "set `rdma system set netns exclusive` (or load ib_core with netns_mode=0 so it holds across reboots)";

/// Decides, before any host change, whether ADD moves an RDMA device and which one.
///
/// `rdmaIsolation: true` (given, or from the node file's `defaults`) requires exclusive
/// mode and exactly one RDMA device under `<VF>/infiniband/` (else code 7 saying what to
/// do); `false` and absent never move it, as the Go ib-sriov-cni does
/// (k8snetworkplumbingwg/ib-sriov-cni 543060d, `cmd/ib-sriov-cni/main.go`: the device
/// moves only `if netConf.RdmaIsolation`, a `bool` that is false when the key is absent,
/// `pkg/types/types.go`), so rdma-cni chained after this plugin finds the device in the
/// host as it does under Go. A device in vfio mode has no RDMA device to move: a network
/// that sets `rdmaIsolation: true` is refused (code 7), one that takes it from the node
/// file's defaults ([`isolation_from_node`]) is attached without a move, since the node
/// default describes the node's netdev VFs (the Go plugin skips the move in vfio mode
/// too: `doVFConfig` returns before it, same file).
pub(super) fn plan(ctx: &Ctx, dev: &VfDevice, vfio: bool) -> Result<Option<String>, CniError> {
    plan_for(ctx.conf, ctx.rdma, &ctx.sysfs, dev, vfio)
}

/// Whether `conf`'s `rdmaIsolation` came from the node file's defaults
/// ([`crate::policy::NodeDefaults::apply`]): set, while the configuration as received
/// (`conf.raw`) does not give the key.
pub fn isolation_from_node(conf: &crate::config::NetConf) -> bool {
    conf.rdma_isolation.is_some() && conf.raw.get("rdmaIsolation").is_none()
}

/// [`plan`] from its parts: the configuration (the node file's defaults applied), the
/// RDMA netlink provider and sysfs. The one check of ADD that `ib-sriov doctor` runs
/// too: with `--conf`, and for the node file's defaults on every VF of the node.
///
/// Errors: as [`plan`].
pub fn plan_for(
    conf: &crate::config::NetConf,
    rdma: &dyn RdmaProvider,
    sysfs: &crate::sysfs::Sysfs,
    dev: &VfDevice,
    vfio: bool,
) -> Result<Option<String>, CniError> {
    if conf.rdma_isolation != Some(true) {
        return Ok(None);
    }
    if vfio && isolation_from_node(conf) {
        log::info!(
            "{} is in vfio mode: the node default rdmaIsolation does not apply (no RDMA device moves with a VF in vfio mode)",
            dev.addr
        );
        return Ok(None);
    }
    if vfio {
        return Err(CniError::config(format!(
            "rdmaIsolation is true but VF {} is in vfio mode and has no RDMA device",
            dev.addr
        )));
    }
    match rdma.open().and_then(|mut s| s.netns_mode()) {
        Err(e) => {
            return Err(CniError::config(format!(
                "rdmaIsolation is true but the RDMA netns mode cannot be read: {e}"
            )))
        }
        Ok(NetnsMode::Shared) => {
            return Err(CniError::config(format!(
                "rdmaIsolation is true but the RDMA subsystem is in shared netns mode: {SHARED_MODE_FIX}"
            )))
        }
        Ok(NetnsMode::Exclusive) => {}
    }
    match dev.rdma_devices.as_slice() {
        [one] => Ok(Some(one.clone())),
        found => Err(CniError::config(format!(
            "VF {} must have exactly one RDMA device under {}/infiniband to isolate, found {found:?}",
            dev.addr,
            sysfs.pci_device_dir(dev.addr).display()
        ))),
    }
}

fn rdma_err(what: &str, e: RdmaError) -> CniError {
    CniError::host(format!("{what}: {e}"))
}

/// Renames the VF's RDMA device `now` back to `before` in the current (host) netns, after
/// a driver rebind gave its new device another name (kernels whose `assign_name` counts
/// only the initial netns' devices, docs/design.md "Kernel facts"). Identity first: `now`
/// must be the only device under `<VF>/infiniband/` (sysfs, read by the caller) and is
/// looked up by name over RDMA netlink for its index; the rename goes by that index
/// (`RDMA_NLDEV_CMD_SET` + `DEV_INDEX` + `DEV_NAME`), and afterwards the same index must
/// carry `before` and the VF's sysfs directory must list `before`. Errors (code 102): not
/// found, the kernel's refusal (`EEXIST` when `before` is taken), or the check failing.
pub(super) fn rename_back(
    ctx: &Ctx,
    vf: crate::types::PciAddress,
    now: &str,
    before: &str,
) -> Result<u32, CniError> {
    let mut s = ctx
        .rdma
        .open()
        .map_err(|e| rdma_err("opening RDMA netlink", e))?;
    let d = s
        .device_by_name(now)
        .map_err(|e| rdma_err(&format!("looking up RDMA device {now}"), e))?
        .ok_or_else(|| {
            CniError::host(format!(
                "RDMA device {now} of VF {vf} is not visible over RDMA netlink in the host netns"
            ))
        })?;
    s.rename(d.index, before).map_err(|e| {
        rdma_err(
            &format!(
                "renaming RDMA device {now} (index {}) of VF {vf} back to {before}",
                d.index
            ),
            e,
        )
    })?;
    let named = s
        .device_by_index(d.index)
        .map_err(|e| rdma_err(&format!("looking up RDMA device index {}", d.index), e))?
        .map(|d| d.name);
    let listed = ctx.sysfs.rdma_devices(vf).unwrap_or_default();
    if named.as_deref() != Some(before) || listed != [before.to_string()] {
        return Err(CniError::host(format!(
            "after renaming RDMA device index {} of VF {vf} to {before}, netlink names it {} and the VF's sysfs lists {}",
            d.index,
            named.as_deref().unwrap_or("nothing"),
            listed.join(",")
        )));
    }
    log::info!(
        "renamed RDMA device {now} (index {}) of VF {vf} back to {before}, its name before the driver rebind",
        d.index
    );
    Ok(d.index)
}

/// Moves RDMA device `name` from the current (host) netns into `pod`.
pub(super) fn move_in(ctx: &Ctx, name: &str, pod: &NetNs) -> Result<(), CniError> {
    let mut s = ctx
        .rdma
        .open()
        .map_err(|e| rdma_err("opening RDMA netlink", e))?;
    let d = match s
        .device_by_name(name)
        .map_err(|e| rdma_err(&format!("looking up RDMA device {name}"), e))?
    {
        Some(d) => d,
        None => {
            let all = s.list_devices().unwrap_or_default();
            return Err(CniError::host(format!(
                "RDMA device {name} is not in the host network namespace (it has: {})",
                all.iter()
                    .map(|d| format!("{} (index {})", d.name, d.index))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    if let Err(e) = s.move_to_netns(d.index, pod.fd()) {
        let e = crate::rdma::refine_move_error(s.as_mut(), d.index, e);
        return Err(rdma_err(
            &format!("moving RDMA device {name} into {}", pod.path().display()),
            e,
        ));
    }
    log::info!("moved RDMA device {name} into {}", pod.path().display());
    Ok(())
}

/// What one attempt of [`move_out`] found.
enum Out {
    /// No device of that name (and index, when given) in the pod.
    Absent,
    /// Moved to the host netns.
    Moved,
    /// The host netns has a device of that name (`EEXIST`); the pod's device has this
    /// index.
    Taken(u32),
}

/// One attempt from inside `pod`: the device named `name` (with index `index`, when
/// given: the device found by the first attempt), renamed `rename_to` first when given,
/// moved to `host`. A refused move after a rename renames it back (best effort).
fn try_out(
    ctx: &Ctx,
    name: &str,
    pod: &NetNs,
    host: &NetNs,
    index: Option<u32>,
    rename_to: Option<&str>,
) -> Result<Out, CniError> {
    pod.run_in(|| -> Result<Out, CniError> {
        let mut s = match ctx.rdma.open() {
            Ok(s) => s,
            Err(RdmaError::NoSubsystem) => return Ok(Out::Absent),
            Err(e) => return Err(rdma_err("opening RDMA netlink in the pod", e)),
        };
        let Some(d) = s
            .device_by_name(name)
            .map_err(|e| rdma_err(&format!("looking up RDMA device {name} in the pod"), e))?
        else {
            return Ok(Out::Absent);
        };
        if index.is_some_and(|i| i != d.index) {
            log::warn!(
                "RDMA device {name} in {} is now index {}, not the index {} found before: not ours, left alone",
                pod.path().display(),
                d.index,
                index.unwrap_or_default()
            );
            return Ok(Out::Absent);
        }
        if let Some(to) = rename_to {
            s.rename(d.index, to).map_err(|e| {
                rdma_err(
                    &format!("renaming RDMA device {name} (index {}) to {to} in the pod", d.index),
                    e,
                )
            })?;
        }
        match s.move_to_netns(d.index, host.fd()) {
            Ok(()) => Ok(Out::Moved),
            Err(e) if e.errno() == Some(crate::rdma::errno::EEXIST) && rename_to.is_none() => {
                Ok(Out::Taken(d.index))
            }
            Err(e) => {
                let shown = rename_to.unwrap_or(name);
                if rename_to.is_some() {
                    if let Err(e2) = s.rename(d.index, name) {
                        log::warn!("renaming RDMA device index {} back to {name} in the pod: {e2}", d.index);
                    }
                }
                Err(rdma_err(&format!("moving RDMA device {shown} back to the host"), e))
            }
        }
    })
    .map_err(CniError::from)?
}

/// The name under which [`move_out`] brings an RDMA device home when its own name is
/// taken in the host netns: `<name>_r<vf_index>`, with `name` cut so the whole stays
/// within `IB_DEVICE_NAME_MAX` (64 bytes with the NUL, include/rdma/ib_verbs.h).
pub(crate) fn fallback_name(name: &str, vf_index: u32) -> String {
    let suffix = format!("_r{vf_index}");
    let mut keep = name.len().min(63usize.saturating_sub(suffix.len()));
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{suffix}", &name[..keep])
}

/// Moves RDMA device `name` of VF `vf` (index `vf_index` on its PF) from `pod` back to
/// the current (host) netns, from a socket opened inside the pod. `Ok(false)` when it is
/// not in the pod (never moved, or back).
///
/// On kernels that name RDMA devices per netns (7.3: a new device takes the lowest
/// free name counting only the initial netns' devices, docs/design.md "Kernel facts"),
/// the host may hold a device of the same name (`EEXIST`): another VF's device, from
/// a rebind whose rename back has not run yet. Then the node-wide rebind lock
/// (`Ctx::lock_rebind`) is taken, so that rebind finishes, and the move is retried
/// once with the same device (same name and index in the pod); if the name is still
/// taken, the device is renamed [`fallback_name`] in the pod and moved home under it,
/// logged with both names (the device is the VF's either way; its next rebind names it
/// afresh). Errors (code 102): netlink failures other than that `EEXIST`; code 11 when
/// the rebind lock is not had in time.
pub(super) fn move_out(
    ctx: &Ctx,
    name: &str,
    pod: &NetNs,
    vf: crate::types::PciAddress,
    vf_index: u32,
) -> Result<bool, CniError> {
    let host = NetNs::current()?;
    let index = match try_out(ctx, name, pod, &host, None, None)? {
        Out::Absent => return Ok(false),
        Out::Moved => {
            log::info!(
                "moved RDMA device {name} back from {}",
                pod.path().display()
            );
            return Ok(true);
        }
        Out::Taken(i) => i,
    };
    log::warn!(
        "RDMA device {name} (index {index}) of VF {vf}: the host netns has a device of that name (a rebind between the kernel's naming and its rename back?); retrying under the node-wide rebind lock"
    );
    let _rebind = ctx.lock_rebind()?;
    match try_out(ctx, name, pod, &host, Some(index), None)? {
        Out::Absent => return Ok(false),
        Out::Moved => {
            log::info!(
                "moved RDMA device {name} back from {} (second attempt)",
                pod.path().display()
            );
            return Ok(true);
        }
        Out::Taken(_) => {}
    }
    let holder = ctx
        .rdma
        .open()
        .and_then(|mut s| s.device_by_name(name))
        .ok()
        .flatten()
        .map(|d| format!("index {}", d.index))
        .unwrap_or_else(|| "a device".to_string());
    let alt = fallback_name(name, vf_index);
    match try_out(ctx, name, pod, &host, Some(index), Some(&alt))? {
        Out::Moved => {
            log::warn!(
                "RDMA device {name} (index {index}) of VF {vf}: the host netns' {name} is {holder}, not ours; renamed it {alt} in {} and moved it back to the host as {alt}",
                pod.path().display()
            );
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// True when RDMA device `name` is visible inside `pod` (for CHECK).
pub(super) fn in_pod(ctx: &Ctx, name: &str, pod: &NetNs) -> Result<bool, CniError> {
    pod.run_in(|| -> Result<bool, CniError> {
        let mut s = ctx
            .rdma
            .open()
            .map_err(|e| rdma_err("opening RDMA netlink in the pod", e))?;
        Ok(s.device_by_name(name)
            .map_err(|e| rdma_err("looking up the RDMA device", e))?
            .is_some())
    })
    .map_err(CniError::from)?
}

/// The NPWG device-info file (device-info spec 1.1.0) for a VF.
pub fn device_info_json(vf: &str, rdma: Option<&str>, pf: &str) -> serde_json::Value {
    let mut pci = serde_json::json!({ "pci-address": vf, "pf-pci-address": pf });
    if let Some(r) = rdma {
        pci["rdma-device"] = serde_json::Value::String(r.to_string());
    }
    serde_json::json!({ "type": "pci", "version": "1.1.0", "pci": pci })
}

#[cfg(test)]
mod fallback_name_tests {
    use super::fallback_name;

    #[test]
    fn suffix_is_the_vf_index_and_the_name_fits_ib_device_name_max() {
        assert_eq!(fallback_name("ibvf_0", 0), "ibvf_0_r0");
        assert_eq!(fallback_name("mlx5_3", 127), "mlx5_3_r127");
        let long = "x".repeat(63);
        let f = fallback_name(&long, 126);
        assert_eq!(f.len(), 63, "{f}");
        assert!(f.ends_with("_r126"), "{f}");
    }
}
