//! Named fail points for fault-injection tests (cargo feature `failpoints`; compiled out
//! of normal builds, where [`hit`] is an empty inline function).
//!
//! With the feature, `IB_SRIOV_FAILPOINTS="add.move=error,del.guid=kill"` makes the named
//! point return an error (`error`), kill the process with SIGKILL (`kill`) or pause it
//! (`sleep<ms>`, e.g. `sleep500`, for signal tests) or block it for ever in a `read(2)`
//! that never returns (`block`: a pipe whose write end the process itself holds, for
//! the verb's hard time bound, [`crate::watchdog`]), so tests can check the rollback of
//! every step and the recovery after a crash at every step.

use crate::cni::CniError;

/// Environment variable listing active fail points: `name=action[,name=action...]`.
pub const FAILPOINTS_ENV: &str = "IB_SRIOV_FAILPOINTS";

/// Evaluates fail point `name`: `Err` when it is set to `error`; never returns when it is
/// set to `kill`; `Ok(())` otherwise (always, without the `failpoints` feature).
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> Result<(), CniError> {
    let Ok(spec) = std::env::var(FAILPOINTS_ENV) else {
        return Ok(());
    };
    for item in spec.split(',') {
        if let Some((n, action)) = item.split_once('=') {
            if n == name {
                match action {
                    "error" => {
                        return Err(CniError::host(format!(
                            "injected failure at fail point {name}"
                        )))
                    }
                    "kill" => {
                        log::warn!("fail point {name}: killing the process");
                        let _ = nix::sys::signal::kill(
                            nix::unistd::getpid(),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                        std::process::abort();
                    }
                    "block" => {
                        log::warn!("fail point {name}: blocking in read(2) for ever");
                        if let Ok((r, _w)) = nix::unistd::pipe() {
                            let mut b = [0u8; 1];
                            loop {
                                // Never returns data nor end of file: `_w` stays open.
                                let _ = nix::unistd::read(&r, &mut b);
                            }
                        }
                    }
                    other => {
                        if let Some(ms) = other.strip_prefix("sleep") {
                            let ms: u64 = ms.parse().unwrap_or(1000);
                            log::warn!("fail point {name}: sleeping {ms} ms");
                            std::thread::sleep(std::time::Duration::from_millis(ms));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The errno fail point `name` injects, for a kernel answer no test host can produce
/// (an `RTM_GETLINK` reply too large for the kernel's own size estimate, `EMSGSIZE`):
/// `IB_SRIOV_FAILPOINTS="netlink.vf_get=errno90"` makes `errno_at("netlink.vf_get")`
/// return `Some(90)`. `None` when unset (always, without the `failpoints` feature).
#[cfg(feature = "failpoints")]
pub fn errno_at(name: &str) -> Option<i32> {
    let spec = std::env::var(FAILPOINTS_ENV).ok()?;
    spec.split(',').find_map(|item| {
        let (n, action) = item.split_once('=')?;
        (n == name).then(|| action.strip_prefix("errno")?.parse().ok())?
    })
}

/// The value fail point `name` is set to (`name=VALUE`), for a fact no test host has:
/// `IB_SRIOV_FAILPOINTS="doctor.rdma_netns_mode=exclusive"` makes the doctor judge
/// `--conf` as on a node whose RDMA subsystem is in exclusive netns mode (the test
/// machine has no RDMA subsystem). `None` when unset (always, without the `failpoints`
/// feature).
#[cfg(feature = "failpoints")]
pub fn value_at(name: &str) -> Option<String> {
    let spec = std::env::var(FAILPOINTS_ENV).ok()?;
    spec.split(',').find_map(|item| {
        let (n, v) = item.split_once('=')?;
        (n == name).then(|| v.to_string())
    })
}

/// Without the `failpoints` feature value fail points give nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn value_at(_name: &str) -> Option<String> {
    None
}

/// Without the `failpoints` feature errno fail points inject nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn errno_at(_name: &str) -> Option<i32> {
    None
}

/// Without the `failpoints` feature fail points do nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) -> Result<(), CniError> {
    Ok(())
}
