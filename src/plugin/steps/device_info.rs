//! Step `DeviceInfo`: the Multus device-info file (`runtimeConfig.CNIDeviceInfoFile`,
//! k8snetworkplumbingwg device-info-spec), written by ADD and removed by DEL only while
//! it still holds exactly what ADD wrote.

use crate::cni::{code, CniError};
use crate::failpoint::hit;
use std::path::Path;

/// Writes `content` to `path` (ADD; `content` was filled from the journal's facts and
/// saved before this runs).
pub(super) fn apply(path: &Path, content: &str) -> Result<(), super::StepFailure> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            CniError::new(code::IO_FAILURE, format!("creating {}: {e}", dir.display()))
        })?;
    }
    // Atomic (a reader never sees half a file) but not fsync'd: the file
    // describes a live pod, and a machine crash ends the pod; it normally
    // lives on tmpfs (/var/run/k8s.cni.cncf.io/devinfo) anyway.
    crate::fsutil::replace_nosync(path, content.as_bytes()).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("writing device-info file {}: {e}", path.display()),
        )
    })?;
    log::debug!("wrote device-info file {}", path.display());
    hit("add.device_info")?;
    Ok(())
}

/// Removes the device-info file if it still holds exactly what ADD wrote, and the temp
/// files an ADD killed while writing it left (`.<name>.tmp.<pid>`, ours: the path is
/// this attachment's and its writers hold the VF lock); anything else is left in place.
pub fn undo(path: &Path, content: &str) -> Result<(), CniError> {
    remove_if_ours(path, content, "device-info file", true)
}

/// Removes `path` (and, with `sweep`, its killed writers' temp files) when it is a regular file that
/// holds exactly `content`; a file that differs, or is not a regular file, is logged
/// (naming it as `what`) and left in place. Not fsync'd: a removal lost in a crash
/// leaves the file of a pod that is gone, which the next DEL (its journal stays until
/// the undo is complete) removes again.
///
/// Errors: code 5 (I/O) when the removal itself fails.
pub(super) fn remove_if_ours(
    path: &Path,
    content: &str,
    what: &str,
    sweep: bool,
) -> Result<(), CniError> {
    if sweep {
        crate::fsutil::remove_temps_of(path);
    }
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path);
    let mut f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            log::warn!("{what} {}: {e}; not removing it", path.display());
            return Ok(());
        }
    };
    let is_ours = f
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() == content.len() as u64)
        && {
            // At most one byte past what ADD wrote (a longer file is not ours), into a
            // buffer of that size: the bytes, then end of file, in two reads.
            let want = content.len() as u64 + 1;
            let mut b = Vec::with_capacity(want as usize);
            std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, want), &mut b).is_ok()
                && b == content.as_bytes()
        };
    if !is_ours {
        log::warn!(
            "{} is not the {what} this attachment wrote: left in place",
            path.display()
        );
        return Ok(());
    }
    std::fs::remove_file(path)
        .or_else(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("removing {}: {e}", path.display()),
            )
        })
}
