//! Step `GoCache`: the Go ib-sriov-cni's cache file of the attachment
//! (`<goCacheDir>/<containerID>-<ifname>`, [`crate::gocache::render`]), written as the last
//! step of ADD (where the Go plugin's `cmdAdd` writes it) so that a node rolled back to
//! the Go plugin can DEL the attachment. Removed by DEL after every other undo, while it
//! still holds exactly what ADD wrote. Its absence from a complete journal proves
//! nothing by itself: the host is read to tell a Go DEL's work from an admin's `rm`
//! ([`file_gone`], [`as_go_left`]).

use super::Apply;
use crate::cni::{code, CniError};
use crate::failpoint::hit;
use crate::gocache::{GoFacts, GO_DEFAULT_GUID};
use crate::journal::{Journal, Step};
use crate::types::{Guid, LinkState};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Fills the step's content from the journal's facts as they are now (a rebind may have
/// renamed the RDMA device), saves the journal, then writes the file: directory 0700,
/// file 0600 (as `utils.SaveNetConf`), created atomically and never over another file,
/// not fsync'd (a machine crash ends the pods it describes). A file already there with
/// other content belongs to another attachment (the Go plugin's `<containerID>-<ifname>`
/// is not injective: `(pod-x, net1)` and `(pod, x-net1)` share it) or to the Go plugin:
/// it is left alone, the step's content is emptied (so DEL neither removes that file nor
/// takes its absence for a rollback), and a warning says this attachment cannot be
/// rolled back without draining.
pub(super) fn apply(cx: &mut Apply, j: &mut Journal, i: usize) -> Result<(), super::StepFailure> {
    let content = render(cx.ctx, j);
    let Some(Step::GoCache { path, content: c }) = j.steps.get_mut(i) else {
        return Ok(());
    };
    *c = content.clone();
    let path = path.clone();
    cx.ctx.store.save(j)?;
    let io = |e: std::io::Error| {
        CniError::new(
            code::IO_FAILURE,
            format!("writing the Go plugin cache file {}: {e}", path.display()),
        )
    };
    // A name the Go plugin could not have written either (its ADD fails on it), or a
    // file that is not this attachment's.
    let why = if path.file_name().is_some_and(|n| n.len() > NAME_MAX) {
        format!("its name is longer than {NAME_MAX} bytes")
    } else if !super::super::go_index::creating(cx.ctx.store.dir(), &path, || {
        write_new(&path, &content)
    })
    .map_err(io)?
    {
        "another file has its name (another attachment's, or the Go plugin's): left alone"
            .to_string()
    } else {
        log::debug!("wrote the Go plugin cache file {}", path.display());
        return Ok(hit("add.go_cache")?);
    };
    log::warn!(
        "the Go plugin cache file {} of {}/{} was not written: {why}; this attachment cannot be rolled back to the Go plugin without deleting its pod first",
        path.display(),
        j.container_id,
        j.ifname
    );
    if let Some(Step::GoCache { content: c, .. }) = j.steps.get_mut(i) {
        c.clear();
    }
    cx.ctx.store.save(j)?;
    Ok(())
}

/// Creates `path` holding `content` unless something else is there: `Ok(true)` when it
/// holds `content` now (written, or already by an earlier run of this ADD), `Ok(false)`
/// when another file is there.
fn write_new(path: &Path, content: &str) -> std::io::Result<bool> {
    // link(2) never replaces (a file already there, ours from an earlier run of this ADD
    // or another's, is compared below): of two writers of one name, one wins.
    let r = match link_anonymous(path, content) {
        Some(r) => r,
        None => {
            let tmp = write_temp(path, content)?;
            let r = std::fs::hard_link(&tmp, path);
            let _ = std::fs::remove_file(&tmp);
            r
        }
    };
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(
            crate::fsutil::read_regular_bounded(path, crate::gocache::MAX_GO_CACHE_BYTES)
                .is_ok_and(|b| b == content.as_bytes()),
        ),
        Err(e) => Err(e),
    }
}

/// Writes `content` into an unnamed file in `path`'s directory (`O_TMPFILE`, its
/// directory made 0700 when missing) and links it as `path` (`linkat(2)` with
/// `AT_EMPTY_PATH`): the file appears whole, and a writer killed before the link leaves
/// nothing behind (no temp name for DEL to sweep). `None` when the filesystem or the
/// kernel cannot (`O_TMPFILE` refused, `linkat` not permitted): the caller then writes
/// a named temp file ([`write_temp`]).
fn link_anonymous(path: &Path, content: &str) -> Option<std::io::Result<()>> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_TMPFILE | nix::libc::O_CLOEXEC)
            .open(dir)
    };
    let mut f = in_private_dir(dir, open).ok()?;
    if let Err(e) = f.write_all(content.as_bytes()) {
        return Some(Err(e));
    }
    use std::os::fd::AsRawFd;
    let to = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: linkat on an fd this function owns and two NUL-terminated strings.
    let rc = unsafe {
        nix::libc::linkat(
            f.as_raw_fd(),
            c"".as_ptr(),
            nix::libc::AT_FDCWD,
            to.as_ptr(),
            nix::libc::AT_EMPTY_PATH,
        )
    };
    if rc == 0 {
        return Some(Ok(()));
    }
    match std::io::Error::last_os_error() {
        e if e.kind() == std::io::ErrorKind::AlreadyExists => Some(Err(e)),
        _ => None,
    }
}

/// Runs `open` (a creation in `dir`); when `dir` is missing, makes it (0700, as
/// `utils.SaveNetConf`, with its parents) and runs `open` once more: no mkdir and stat
/// at every ADD.
fn in_private_dir<T>(dir: &Path, open: impl Fn() -> std::io::Result<T>) -> std::io::Result<T> {
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| open()),
        r => r,
    }
}

/// Whether a writer of this step may have left a named temp file in `dir`: only where
/// `O_TMPFILE` is missing ([`link_anonymous`]; ext4, xfs, btrfs and tmpfs have it since
/// Linux 3.11-3.15).
fn named_temps_possible(dir: &Path) -> bool {
    !crate::plugin::go_index::common_fs(dir)
}

/// Longest file name, in bytes (NAME_MAX, linux/limits.h).
const NAME_MAX: usize = 255;

/// `content` in a new 0600 temp file beside `path` (its directory created 0700), named
/// `.<name>.tmp.<pid>` (swept with the file by [`undo`]) or, when that is too long,
/// `.ib-sriov-go-cache.tmp.<pid>`.
fn write_temp(path: &Path, content: &str) -> std::io::Result<std::path::PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let pid = crate::fsutil::pid();
    let tmp = match format!(".{name}.tmp.{pid}") {
        t if t.len() <= NAME_MAX => dir.join(t),
        _ => dir.join(format!(".ib-sriov-go-cache.tmp.{pid}")),
    };
    let _ = std::fs::remove_file(&tmp);
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC).bits())
            .open(&tmp)
    };
    let r = in_private_dir(dir, open).and_then(|mut f| f.write_all(content.as_bytes()));
    match r {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
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

/// Removes the file while it holds exactly what ADD wrote (after every other undo),
/// keeping the Go cache directory's index true (`plugin::go_index`).
pub(super) fn undo(state_dir: &Path, path: &Path, content: &str) -> Result<(), CniError> {
    super::super::go_index::removing(state_dir, path, || {
        // No listing of the directory (one file per attachment) for temp files where
        // the writer leaves none.
        let sweep = path.parent().is_some_and(named_temps_possible);
        super::device_info::remove_if_ours(path, content, "Go plugin cache file", sweep)
    })
}

/// The journal's Go cache file when it is gone although ADD wrote it: the journal is
/// complete (ADD wrote the file, at its end) and nothing is at the path. What that
/// means is read from the host, never from the absence ([`as_go_left`]): the Go
/// plugin's DEL removes the file only after a DEL that returned no error, and ours only
/// once every other undo is done, but an admin's `rm`, or a Go DEL that returned early,
/// leaves the same absence.
pub fn file_gone(j: &Journal) -> Option<&Path> {
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

/// What the host shows of the VF of a journal whose Go cache file is gone.
#[derive(Debug)]
pub enum GoneFile {
    /// As the Go plugin's DEL leaves it (nothing of the attachment left on the VF); the
    /// text says what was found.
    AsGoLeavesIt(String),
    /// Something of the attachment is still on the VF (or the VF cannot be read): the
    /// text says what.
    NotUndone(String),
}

/// Reads the VF of `j` (its Go cache file gone) and says whether the host shows it as
/// the Go plugin's DEL leaves it (k8snetworkplumbingwg/ib-sriov-cni 543060da,
/// `cmd/ib-sriov-cni/main.go` `cmdDel`/`handleVFCleanup`, `pkg/sriov/sriov.go`
/// `ReleaseVF`/`ResetVFConfig`): the netdev, found by the VF's identity (its
/// `<VF>/net/` entry, parent device, recorded ifindex and address), in the host netns
/// under its name from before ADD (`ReleaseVF` renames it to `HostIFNames` and moves it
/// out; not the pod's name, nor the `dev<ifindex>` the kernel gives a netdev it returns
/// from a dead netns when the name is taken); the GUID no longer the one ADD set (`ResetVFConfig` sets `HostIFGUID`) and
/// the link state no longer the one ADD set (`ResetVFConfig` sets `auto`). A fact
/// that Go's DEL would not change (ADD set `auto`, the GUID Go restores is the one ADD
/// set, the host name was CNI_IFNAME already, a GUID the VF got from the operator's
/// file or `deriveGuid`) tells nothing and is not compared. Go's DEL returns early,
/// with success and its file removed, when the pod netns is gone (`ns.GetNS` failing
/// with `NSPathNotExistErr`): it then leaves the netdev wherever the kernel put it (none
/// for an IPoIB netdev destroyed with the netns; `net1` in the host when returned) with
/// the pod's GUID and link state, which this tells apart.
///
/// Errors: rtnetlink or sysfs failing while looking for the netdev (the caller keeps
/// the journal). A GUID or link state that cannot be read is reported as
/// [`GoneFile::NotUndone`]: the caller's own undo checks state before it acts. Whether
/// another attachment holds the VF is the caller's to check first.
pub fn as_go_left(host: &super::Host, j: &Journal) -> Result<GoneFile, CniError> {
    let mut found = Vec::new();
    // The port GUID in the IPoIB address of the netdev in the host (20 bytes only).
    let mut ipoib = None;
    if !j.vfio {
        let Some((id, host_name, ..)) = j.netdev() else {
            return Ok(GoneFile::NotUndone("the journal records no netdev".into()));
        };
        let Some(l) = super::find_in_host(host, j.vf, Some(id))? else {
            return Ok(GoneFile::NotUndone(format!(
                "VF {} has no netdev in the host network namespace (destroyed with the pod netns, or still in the pod)",
                j.vf
            )));
        };
        if l.name == j.ifname && host_name != j.ifname {
            return Ok(GoneFile::NotUndone(format!(
                "its netdev is in the host under the pod's name {} (ifindex {}), not {host_name}",
                l.name, l.index
            )));
        }
        // Go's DEL renames it to HostIFNames before the move (and again after its
        // rebind): any other name is the kernel's (`dev<ifindex>` when it returned the
        // netdev of a dead netns whose name was taken) or another DEL's fallback.
        if l.name != host_name {
            return Ok(GoneFile::NotUndone(format!(
                "its netdev is in the host as {} (ifindex {}), not under its name {host_name}",
                l.name, l.index
            )));
        }
        found.push(format!(
            "netdev {} (ifindex {}) in the host",
            l.name, l.index
        ));
        ipoib = Guid::from_ipoib_hwaddr(&l.address);
    }
    let view = crate::plugin::vfattr::PfView::for_journal(&host.nl, host.sysfs, j);
    let mut st = None;
    let mut read = || -> Result<crate::plugin::vfattr::VfState, String> {
        if st.is_none() {
            st = Some(view.read().map_err(|e| e.to_string()));
        }
        st.clone().expect("read above")
    };
    for s in &j.steps {
        match s {
            Step::Guid {
                want,
                orig_node,
                orig_port,
                origin: None,
                ..
            } => {
                let go_sets = if j.vfio {
                    Some(Guid(u64::MAX))
                } else {
                    orig_port
                        .or(*orig_node)
                        .map(|g| if g.is_zero() { Guid(u64::MAX) } else { g })
                };
                if go_sets.is_none_or(|g| g == *want) {
                    continue;
                }
                let now = match read() {
                    Ok(st) => st.guids_with_ipoib(ipoib).1,
                    Err(e) => return Ok(GoneFile::NotUndone(format!("its GUID: {e}"))),
                };
                match now {
                    Some(g) if g == *want => {
                        return Ok(GoneFile::NotUndone(format!(
                            "VF {} still has the pod's GUID {want}",
                            j.vf
                        )))
                    }
                    Some(g) => found.push(format!("GUID {g}")),
                    None => {
                        return Ok(GoneFile::NotUndone(format!(
                            "the GUID of VF {} cannot be read",
                            j.vf
                        )))
                    }
                }
            }
            Step::LinkState { want, .. } if *want != LinkState::Auto => {
                match read().map(|st| st.link_state.map(|s| s.0)) {
                    Ok(Some(now)) if now == *want => {
                        return Ok(GoneFile::NotUndone(format!(
                            "VF {} still has the pod's link state {want}",
                            j.vf
                        )))
                    }
                    Ok(Some(now)) => found.push(format!("link state {now}")),
                    Ok(None) => {
                        return Ok(GoneFile::NotUndone(format!(
                            "the link state of VF {} cannot be read",
                            j.vf
                        )))
                    }
                    Err(e) => return Ok(GoneFile::NotUndone(format!("its link state: {e}"))),
                }
            }
            _ => {}
        }
    }
    if found.is_empty() {
        found.push("nothing of the attachment on it".into());
    }
    Ok(GoneFile::AsGoLeavesIt(found.join(", ")))
}

/// The Go plugin cache file of `j` when it is missing (nothing at its path) although
/// ADD wrote it: the journal is complete, of this boot, and its `go_cache` step holds
/// what ADD wrote. A cheap `lstat`, for the callers to decide whether to take the VF
/// lock and [`heal`].
pub fn missing_file(j: &Journal) -> Option<&Path> {
    if crate::boot::is_other(j.boot_id.as_deref()) {
        return None;
    }
    file_gone(j)
}

/// Rewrites the missing Go plugin cache file of a live attachment (an admin's `rm`, a
/// cleanup of `/var/lib/cni`), so a rollback to the Go plugin can still DEL it: the
/// bytes ADD wrote, from the journal's `go_cache` step, by the same write ADD uses
/// (created whole through a link, never over a file: one that appeared since is left
/// alone), recorded in the Go cache directory's index. Called by GC for an attachment
/// the runtime lists as valid and by CHECK once the attachment checked out, each with
/// the VF lock held and `j` read under it (a DEL of ours removes the file and then the
/// journal under that lock, so the file never outlives the journal through this).
///
/// Written only when the host proves the attachment live by identity, never by names:
/// the pod netns at the journal's path is the one ADD recorded (`netnsId`: device and
/// inode), and, unless in vfio mode, the VF's netdev is in it (its parent device is the
/// VF, or its hardware address the one journaled). A file whose absence the Go plugin's
/// DEL explains (the VF back in the host) is never written again: its netdev is not in
/// the pod. `Ok(Some(path))` when written, `Ok(None)` when nothing was to be done or
/// the attachment could not be proved live (logged at debug).
///
/// Errors: rtnetlink in the pod netns, or the write (code 11, naming the file).
pub fn heal(ctx: &crate::plugin::Ctx, j: &Journal) -> Result<Option<std::path::PathBuf>, CniError> {
    let Some(path) = missing_file(j).map(Path::to_path_buf) else {
        return Ok(None);
    };
    let Some(content) = j.steps.iter().find_map(|s| match s {
        Step::GoCache { content, .. } if !content.is_empty() => Some(content),
        _ => None,
    }) else {
        return Ok(None);
    };
    let att = format!("{}/{}", j.container_id, j.ifname);
    let not_live = |why: String| {
        log::debug!(
            "the Go plugin cache file {} of {att} is missing, and is not rewritten: {why}",
            path.display()
        );
        Ok(None)
    };
    let (Some(netns), Some(want)) = (j.netns.as_deref().filter(|n| !n.is_empty()), j.netns_id)
    else {
        return not_live("the journal records no pod netns identity".into());
    };
    let ns = match crate::netns::NetNs::open(netns) {
        Ok(ns) => ns,
        Err(e) => return not_live(format!("pod netns: {e}")),
    };
    if super::ns_id(&ns)? != want {
        return not_live(format!("{netns} is not the netns ADD attached the VF to"));
    }
    if !j.vfio {
        let Some((id, ..)) = j.netdev() else {
            return not_live("the journal records no netdev".into());
        };
        let vf = j.vf.to_string();
        let nl = crate::netlink::Netlink::open_in(&ns)?;
        let in_pod = nl.links()?.into_iter().any(|l| match &l.parent_dev {
            Some(p) => *p == vf,
            None => !id.hwaddr.is_empty() && crate::types::format_hwaddr(&l.address) == id.hwaddr,
        });
        if !in_pod {
            return not_live(format!("the netdev of VF {vf} is not in {netns}"));
        }
    }
    let written =
        super::super::go_index::creating(ctx.store.dir(), &path, || write_new(&path, content))
            .map_err(|e| {
                CniError::new(
                    code::IO_FAILURE,
                    format!("rewriting the Go plugin cache file {}: {e}", path.display()),
                )
            })?;
    if !written {
        log::warn!(
            "the Go plugin cache file {} of {att} was missing, and another file has its name now: left alone; this attachment cannot be rolled back to the Go plugin without deleting its pod first",
            path.display()
        );
        return Ok(None);
    }
    log::warn!(
        "the Go plugin cache file {} of {att} (VF {}) was missing while its pod lives (removed by hand?): rewrote it from the journal, so a rollback to the Go plugin can still DEL this pod",
        path.display(),
        j.vf
    );
    Ok(Some(path))
}
