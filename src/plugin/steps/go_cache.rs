//! Step `GoCache`: the Go ib-sriov-cni's cache file of the attachment
//! (`<goCacheDir>/<containerID>-<ifname>`, [`crate::gocache::render`]), written as the last
//! step of ADD (where the Go plugin's `cmdAdd` writes it) so that a node rolled back to
//! the Go plugin can DEL the attachment. Removed by DEL after every other undo, while it
//! still holds exactly what ADD wrote; its absence from a complete journal means the Go
//! plugin's DEL undid the attachment ([`undone_by_go`]).

use super::Apply;
use crate::cni::{code, CniError};
use crate::failpoint::hit;
use crate::gocache::{GoFacts, GO_DEFAULT_GUID};
use crate::journal::{Journal, Step};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Fills the step's content from the journal's facts as they are now (a rebind may have
/// renamed the RDMA device), saves the journal, then writes the file: directory 0700,
/// file 0600 (as `utils.SaveNetConf`), replaced atomically, not fsync'd (a machine crash
/// ends the pods it describes; DEL then finds it from another boot by its marker).
pub(super) fn apply(cx: &mut Apply, j: &mut Journal, i: usize) -> Result<(), super::StepFailure> {
    let content = render(cx.ctx, j);
    let Some(Step::GoCache { path, content: c }) = j.steps.get_mut(i) else {
        return Ok(());
    };
    *c = content.clone();
    let path = path.clone();
    cx.ctx.store.save(j)?;
    write(&path, &content).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("writing the Go plugin cache file {}: {e}", path.display()),
        )
    })?;
    log::debug!("wrote the Go plugin cache file {}", path.display());
    hit("add.go_cache")?;
    Ok(())
}

fn write(path: &Path, content: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let r = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC).bits())
            .open(&tmp)?;
        f.write_all(content.as_bytes())?;
        std::fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// What the Go plugin's ADD would have cached for this attachment, from the call's
/// configuration and the journal's facts.
fn render(ctx: &crate::plugin::Ctx, j: &Journal) -> String {
    let netdev = j.netdev();
    let host_if_guid = match ctx.conf.guid {
        None => String::new(),
        Some(_) if j.vfio => GO_DEFAULT_GUID.to_string(),
        // The port GUID before ADD, as Go reads it (the IPoIB address's last 8 bytes);
        // no Guid step means the VF already had the pod's GUID.
        Some((g, _)) => j
            .steps
            .iter()
            .find_map(|s| match s {
                Step::Guid {
                    orig_node,
                    orig_port,
                    origin: None,
                    ..
                } => Some(orig_port.or(*orig_node)),
                _ => None,
            })
            .unwrap_or(Some(g))
            .map(|g| g.to_string())
            .unwrap_or_default(),
    };
    let facts = GoFacts {
        vf: j.vf,
        vf_index: j.vf_index.0,
        master: j.pf_netdev.as_deref().unwrap_or_default(),
        host_ifname: netdev.map(|n| n.1).unwrap_or_default(),
        cont_ifname: if j.vfio { "" } else { &j.ifname },
        host_if_guid,
        vfio: j.vfio,
        rdma_device: j.rdma_device(),
        boot_id: j.boot_id.as_deref(),
    };
    crate::gocache::render(&ctx.conf.raw, &facts)
}

/// Removes the file while it holds exactly what ADD wrote (after every other undo).
pub(super) fn undo(path: &Path, content: &str) -> Result<(), CniError> {
    super::device_info::remove_if_ours(path, content, "Go plugin cache file")
}

/// The journal's Go cache file when the attachment was undone by the Go plugin's DEL:
/// the journal is complete (ADD wrote the file, at its end) and the file is gone. Go's
/// `cmdDel` removes it only after a successful DEL (`utils.CleanCachedNetConf` in a
/// deferred `err == nil` branch), and ours only once every other undo is done.
pub fn undone_by_go(j: &Journal) -> Option<&Path> {
    if !j.complete {
        return None;
    }
    j.steps.iter().find_map(|s| match s {
        Step::GoCache { path, content } if !content.is_empty() => {
            match std::fs::symlink_metadata(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(path.as_path()),
                _ => None,
            }
        }
        _ => None,
    })
}
