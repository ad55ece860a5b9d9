//! STATUS (CNI SPEC.md 1.1.0 "STATUS: Check plugin status"): succeed when an ADD could
//! succeed now, else code 50 ("the plugin is not available") with the reason.
//!
//! Checked, without touching any VF: the journal directory (`stateDir`) is writable;
//! the IPAM is usable (built-in: its network directory is writable and every range set
//! has a free address; delegated: the plugin's own STATUS succeeds, its error passed on);
//! with `rdmaIsolation: true`, the RDMA subsystem exists and is in exclusive netns mode.

use super::rdma::SHARED_MODE_FIX;
use super::{Ctx, Ipam};
use crate::cni::{code, CniError, Command, Version};
use crate::rdma::NetnsMode;
use std::io::Write;
use std::path::Path;

fn unavailable(msg: impl Into<String>) -> CniError {
    CniError::new(code::PLUGIN_NOT_AVAILABLE, msg)
}

/// Creates `dir` if needed and a probe file in it (`O_CREAT|O_EXCL`), then removes it.
/// Errors: the I/O error, naming the directory.
pub fn probe_writable(dir: &Path) -> Result<(), String> {
    let probe = dir.join(format!(".ib-sriov-status.{}", crate::fsutil::pid()));
    let r = std::fs::create_dir_all(dir).and_then(|_| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)?;
        f.write_all(b"probe")
    });
    let _ = std::fs::remove_file(&probe);
    r.map_err(|e| format!("{} is not writable: {e}", dir.display()))
}

/// STATUS of the built-in IPAM store of network `name` (also `ib-sriov-ipam`'s STATUS,
/// [`crate::ipam_plugin`]): its directory `<dataDir>/<name>` is writable
/// ([`probe_writable`]) and every range set has a free address.
///
/// Errors: code 50 naming the store or the exhausted range set.
pub fn builtin_store_status(c: &crate::ipam::IpamConfig, name: &str) -> Result<(), CniError> {
    probe_writable(&c.data_dir().join(name))
        .map_err(|e| unavailable(format!("IPAM store: {e}")))?;
    let free = c
        .free_counts(name)
        .map_err(|e| unavailable(format!("IPAM store: {}", e.message())))?;
    if let Some(i) = free.iter().position(|n| *n == 0) {
        return Err(unavailable(format!(
            "IPAM address pool of network {name} is exhausted: range set {i} has no free address"
        )));
    }
    log::debug!("IPAM network {name}: free addresses per range set {free:?}");
    Ok(())
}

pub(super) fn status(ctx: &Ctx) -> Result<(), CniError> {
    let conf = ctx.conf;
    conf.cni_version
        .require(Version::V1_1_0, "STATUS needs cniVersion 1.1.0")?;
    probe_writable(&conf.state_dir).map_err(|e| unavailable(format!("journal directory: {e}")))?;
    match ctx.ipam().map_err(|e| unavailable(e.msg))? {
        Some(Ipam::Builtin(c)) => builtin_store_status(&c, &conf.name)?,
        Some(Ipam::External(d)) => {
            // A delegate older than 1.1.0 has no STATUS: found and runnable is all
            // that can be said (its VERSION answered).
            let supported = d
                .supports(ctx.env, "1.1.0")
                .map_err(|e| unavailable(e.msg).with_details(e.details))?;
            if supported {
                ctx.delegate(&d, Command::Status)
                    .map_err(|e| match e.code {
                        code::PLUGIN_NOT_AVAILABLE | code::LIMITED_CONNECTIVITY => e,
                        _ => unavailable(e.msg).with_details(e.details),
                    })?;
            } else {
                log::debug!(
                    "ipam plugin {} does not support CNI 1.1.0 (no STATUS); it answered VERSION",
                    d.plugin_type
                );
            }
        }
        None => {}
    }
    if conf.rdma_isolation == Some(true) {
        let mode = ctx
            .rdma
            .open()
            .and_then(|mut s| s.netns_mode())
            .map_err(|e| unavailable(format!("rdmaIsolation is true but {e}")))?;
        if mode == NetnsMode::Shared {
            return Err(unavailable(format!(
                "rdmaIsolation is true but the RDMA subsystem is in shared netns mode: {SHARED_MODE_FIX}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_writable_creates_the_dir_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("a/b");
        probe_writable(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A path under a regular file cannot be a directory (ENOTDIR), even for root.
        std::fs::write(d.path().join("file"), "x").unwrap();
        let e = probe_writable(&d.path().join("file/sub")).unwrap_err();
        assert!(e.contains("not writable"), "{e}");
    }
}
