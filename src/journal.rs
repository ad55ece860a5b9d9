//! Per-attachment journal: one JSON file per (containerID, ifname) in `stateDir`, and a
//! per-VF holder link naming the journal that holds the VF.
//!
//! ADD writes the journal before its first host change: the VF, the pod netns
//! (path and nsfs identity), the configuration as received (so DEL can release the IPAM
//! allocation with ADD's own IPAM configuration, whatever DEL is given), and the plan: the
//! typed [`Step`]s it is about to take, each carrying what its undo needs (original and
//! wanted state, the mechanism used, the identity of what it touches). DEL, GC and
//! rollback undo the begun steps in reverse (`plugin::steps`); each undo checks the
//! current state first, so a step that was recorded but never ran is undone harmlessly.
//! The journal is deleted only when the undo is complete.
//!
//! File names ([`JournalStore::file_name`]) are injective over every valid
//! (containerID, ifname) pair: `<containerID>:<ifname>` (neither part can contain `:`:
//! CNI SPEC.md restricts container IDs to alphanumerics, `_`, `.`, `-`, and the kernel's
//! `dev_valid_name()` refuses `:` in interface names), or, when that would be longer than
//! [`PLAIN_NAME_MAX`] bytes, `<first 64 bytes of containerID>:#<SHA-256 hex>`, whose part
//! after the `:` (65 bytes) cannot be an interface name (at most 15 bytes). A loaded
//! journal is checked to be the one asked for ([`JournalError::Mismatch`]).
//!
//! Holder links: `<stateDir>/vfs/<VF BDF>` is a symlink whose target is the file name of
//! the journal holding the VF, so finding a VF's holder reads one link and one journal.
//! Written under the per-VF lock before the journal, and removed after it by the last DEL
//! ([`JournalStore::remove_holder`]): a link whose journal does not exist, or names
//! another VF, is stale (free VF).
//!
//! Lifetime: a journal describes kernel state (netns and RDMA moves, PF-side VF GUIDs
//! and link state), all of which a reboot ends, so it lives as long as that state does:
//! in `/run/ib-sriov` by default (tmpfs on systemd nodes, emptied at boot), written
//! without fsync (a killed process loses nothing, the page cache keeps its writes; a
//! power loss takes the journal and everything it describes), and stamped with the
//! boot it was written in ([`Journal::boot_id`]): one from another boot (an on-disk
//! `stateDir`) is stale, and DEL and GC drop it without touching the VF. Journals of
//! earlier versions in the old default `/var/lib/cni/ib-sriov` are still read, removed
//! and counted as holders ([`JournalStore::with_legacy`]), never written there.

use crate::fsutil::{create_new, replace_nosync};
use crate::types::{Guid, LinkState, PciAddress, VfIndex};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io;
use std::path::{Path, PathBuf};

/// Journal format version. Version 1 (file `<containerID>-<ifname>`, flat fields) was
/// never released; such files are neither read nor touched.
pub const JOURNAL_VERSION: u32 = 2;

/// Longest plain journal file name `<containerID>:<ifname>`, in bytes; longer pairs use
/// the hashed form. NAME_MAX is 255 and the temp file of an atomic write adds
/// `.`, `.tmp.` and a pid (at most 10 digits) to the name.
pub const PLAIN_NAME_MAX: usize = 200;

/// Largest journal file read, in bytes (a journal is a few KiB: the configuration as
/// received, bounded by the plugin's stdin bound, plus the steps).
pub const MAX_JOURNAL_BYTES: u64 = 8 << 20;

/// How a VF attribute was (or will be) changed, so the undo uses the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// rtnetlink on the PF.
    Netlink,
    /// MLNX_OFED sysfs files `<PF>/sriov/<N>/{node,port,policy}`.
    Ofed,
}

/// The identity of a netdev, recorded before the plugin moves it and proved before the
/// plugin moves, renames or sets it again. A pod may rename, replace or re-create its
/// interfaces; it cannot give another link this identity: the ifindex is taken while the
/// VF exists in that namespace, the hardware address of an IPoIB VF (20 bytes, holding
/// the port GUID) cannot be set on a virtual link, and the parent device
/// (`IFLA_PARENT_DEV_NAME`, Linux 5.14+) of a VF netdev is its PCI address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetdevId {
    /// ifindex in the host netns when recorded.
    pub ifindex: u32,
    /// `IFLA_ADDRESS`, lowercase hex with `:` separators.
    pub hwaddr: String,
    /// `IFLA_PARENT_DEV_NAME` when the kernel reported one (the VF's PCI address).
    pub parent: Option<String>,
}

/// The identity of a namespace file: `st_dev` and `st_ino` of its nsfs inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// A step of ADD, journaled (with everything its undo needs) before it changes the
/// host. ADD runs them in the recorded order; undo walks the begun ones in reverse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// VF link state set on the PF.
    LinkState {
        /// Link state before ADD (`None`: unreadable; undo restores `auto`).
        orig: Option<LinkState>,
        /// Link state ADD sets.
        want: LinkState,
        /// Mechanism (read or used); the undo tries it first.
        via: Option<Via>,
    },
    /// VF node and port GUID set on the PF, then (with a netdev) the driver rebound so
    /// the GUID takes effect.
    Guid {
        /// Node GUID before ADD.
        orig_node: Option<Guid>,
        /// Port GUID before ADD.
        orig_port: Option<Guid>,
        /// GUID ADD sets (node and port).
        want: Guid,
        /// Mechanism (read or used); the undo tries it first.
        via: Option<Via>,
        /// Whether the driver is rebound (non-vfio VFs).
        rebind: bool,
        /// Set when `want` came from the operator's GUID file or was derived, because the
        /// VF had no GUID ([`crate::vfguid`]): such a GUID belongs to the VF, not to the
        /// attachment, so the undo leaves it (restoring all-zero would cost a rebind and
        /// break the VF again). Absent in journals of earlier versions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<crate::vfguid::GuidOrigin>,
    },
    /// RDMA device moved into the pod netns (before the netdev: moving it re-creates
    /// the IPoIB netdev in the default netns).
    RdmaMove {
        /// The RDMA device's name (updated if a rebind renamed it, before the move).
        device: String,
    },
    /// NPWG device-info file written.
    DeviceInfo {
        /// The file (absolute).
        path: PathBuf,
        /// Exactly what ADD writes: DEL removes the file only while it still holds this
        /// (a file the plugin did not write is never removed).
        content: String,
    },
    /// Netdev moved into the pod netns and named CNI_IFNAME there.
    MoveNetdev {
        /// The netdev's identity (updated after a rebind, before the move).
        netdev: NetdevId,
        /// Its name in the host before ADD (restored by DEL).
        host_name: String,
        /// Whether it was administratively up before ADD (restored by DEL).
        host_up: bool,
        /// Its ifindex in the pod, recorded right after the move (the kernel keeps the
        /// ifindex unless the pod netns uses it).
        pod_ifindex: Option<u32>,
    },
    /// The Go ib-sriov-cni's cache file of the attachment written (the last step of
    /// ADD), so a node rolled back to the Go plugin can DEL the attachment
    /// ([`crate::gocache::render`]). Removed by DEL only after every other undo is done,
    /// and only while it still holds exactly `content`. A complete journal whose file
    /// is gone is dropped without touching the VF only when the host shows the VF as
    /// the Go plugin's DEL leaves it, or held by a Go attachment since
    /// (`plugin::steps::as_go_left`); otherwise DEL undoes it from the journal.
    GoCache {
        /// The file (`<goCacheDir>/<containerID>-<ifname>`).
        path: PathBuf,
        /// Exactly what ADD writes (filled from the journal's facts, saved before the
        /// file is written).
        content: String,
    },
    /// IPAM allocation taken (built-in or delegated), configured in the pod.
    Ipam {
        /// `ipam.type`.
        ipam_type: String,
        /// The built-in allocator's addresses, recorded (without fsync) right after
        /// the allocation, so the undo releases exactly them without reading the
        /// store; empty for a delegate, or when the process died before recording
        /// them (the undo then reads the store).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ips: Vec<std::net::IpAddr>,
    },
}

impl Step {
    /// The step's kind, for logs and fail points: `link_state`, `guid`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            Step::LinkState { .. } => "link_state",
            Step::Guid { .. } => "guid",
            Step::RdmaMove { .. } => "rdma",
            Step::DeviceInfo { .. } => "device_info",
            Step::MoveNetdev { .. } => "move",
            Step::Ipam { .. } => "ipam",
            Step::GoCache { .. } => "go_cache",
        }
    }
}

/// The journal of one attachment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// [`JOURNAL_VERSION`].
    pub version: u32,
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// CNI_IFNAME.
    pub ifname: String,
    /// CNI_NETNS at ADD.
    pub netns: Option<String>,
    /// Identity of that namespace at ADD: DEL, GC and CHECK act in a namespace only when
    /// it is this one (a path can be re-used by a new namespace).
    pub netns_id: Option<NsId>,
    /// Network name (config `name`).
    pub network: String,
    /// VF PCI address.
    pub vf: PciAddress,
    /// PF PCI address.
    pub pf: PciAddress,
    /// VF index on the PF.
    pub vf_index: VfIndex,
    /// PF netdev name at ADD.
    pub pf_netdev: Option<String>,
    /// vfio mode: no netdev, no IP.
    pub vfio: bool,
    /// `rdmaIsolation` as configured.
    pub rdma_isolation: Option<bool>,
    /// The network configuration ADD received (without `prevResult`): DEL, GC and
    /// rollback release IPAM with it.
    pub conf: serde_json::Value,
    /// The plan: steps ADD takes, in order, recorded before the first of them runs.
    pub steps: Vec<Step>,
    /// True once ADD completed (after a process kill it may read false, which only
    /// makes CHECK fail and DEL undo what it would undo anyway).
    pub complete: bool,
    /// The boot the journal was written in (`/proc/sys/kernel/random/boot_id`,
    /// [`crate::boot::id`]); absent in journals of earlier versions (then taken as
    /// this boot's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The VF's RDMA devices listed under `<VF>/infiniband/` at ADD, moved by this
    /// plugin or not: CHECK names the one another plugin (rdma-cni chained after this
    /// one) moved into the pod. Empty in journals of earlier versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdma_devices: Vec<String>,
    /// The pod the attachment belongs to, from CNI_ARGS `K8S_POD_NAMESPACE`,
    /// `K8S_POD_NAME` and `K8S_POD_UID` at ADD (set by Multus, the kubelet's CNI
    /// callers and dra-driver-sriov; absent for cnitool or a runtime that sends none):
    /// doctor and the exporter label the attachment with it. Absent in journals of
    /// earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    /// The VF's port GUID for this attachment, as ADD planned it: the GUID it sets, else
    /// the one the VF kept (`aa:bb:...`); what a subnet manager's partition must list.
    /// Informational (undo uses the GUID step's originals). Absent when unreadable, in
    /// vfio mode without a GUID, and in journals of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guid: Option<crate::types::Guid>,
    /// The PF's port GUID at ADD, from its IPoIB netdev's hardware address (bytes 12..20
    /// of the 20-byte address, include/linux/if_infiniband.h `INFINIBAND_ALEN`): the PF
    /// GUID an SM policy names (ib-sriov-cni #206). Informational. Absent when the PF has
    /// no IPoIB netdev in the host, and in journals of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pf_port_guid: Option<crate::types::Guid>,
}

/// A Kubernetes pod as CNI_ARGS name it (keys `K8S_POD_NAMESPACE`, `K8S_POD_NAME`,
/// `K8S_POD_UID`; containernetworking/cni `pkg/types` `CommonArgs` and Multus'
/// `K8sArgs`). Informational only: nothing the plugin undoes depends on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    /// `K8S_POD_NAMESPACE`, empty when not sent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `K8S_POD_NAME`, empty when not sent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `K8S_POD_UID`, empty when not sent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl PodRef {
    /// The pod CNI_ARGS name; `None` when none of the three keys is set (or all are
    /// empty).
    pub fn from_args(args: &crate::cni::args::CniArgs) -> Option<PodRef> {
        let get = |k: &str| args.get(k).unwrap_or("").to_string();
        let p = PodRef {
            namespace: get("K8S_POD_NAMESPACE"),
            name: get("K8S_POD_NAME"),
            uid: get("K8S_POD_UID"),
        };
        (!p.namespace.is_empty() || !p.name.is_empty() || !p.uid.is_empty()).then_some(p)
    }
}

impl Journal {
    /// The RDMA device moved into the pod, if that step was planned.
    pub fn rdma_device(&self) -> Option<&str> {
        self.steps.iter().find_map(|s| match s {
            Step::RdmaMove { device } => Some(device.as_str()),
            _ => None,
        })
    }

    /// The netdev step, if planned.
    pub fn netdev(&self) -> Option<(&NetdevId, &str, bool, Option<u32>)> {
        self.steps.iter().find_map(|s| match s {
            Step::MoveNetdev {
                netdev,
                host_name,
                host_up,
                pod_ifindex,
            } => Some((netdev, host_name.as_str(), *host_up, *pod_ifindex)),
            _ => None,
        })
    }

    /// Records `id` as the identity of the netdev the MoveNetdev step moves (a driver
    /// rebind or an RDMA device move re-created it); nothing when there is no such step.
    pub fn set_netdev(&mut self, id: NetdevId) {
        for s in self.steps.iter_mut() {
            if let Step::MoveNetdev { netdev, .. } = s {
                *netdev = id.clone();
            }
        }
    }
}

/// Why a journal could not be used.
#[derive(Debug)]
pub enum JournalError {
    /// Reading or writing failed.
    Io(PathBuf, io::Error),
    /// The file is not a journal of this version (corrupt, truncated, foreign).
    Unreadable(PathBuf, String),
    /// The file is a journal of another attachment (a planted or renamed file).
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The attachment it names.
        found: (String, String),
    },
    /// A journal was created for the attachment by another invocation after this one
    /// looked ([`JournalStore::create`]): an ADD of the same attachment is running.
    Exists(PathBuf),
}

impl std::fmt::Display for JournalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalError::Io(p, e) => write!(f, "journal {}: {e}", p.display()),
            JournalError::Unreadable(p, e) => write!(
                f,
                "journal {} is unreadable ({e}); check the VF it names and the pod, then move the file aside",
                p.display()
            ),
            JournalError::Mismatch { path, found } => write!(
                f,
                "journal {} belongs to {}/{}, not to the attachment asked for",
                path.display(),
                found.0,
                found.1
            ),
            JournalError::Exists(p) => write!(
                f,
                "journal {} was created by another invocation meanwhile: an ADD of the same attachment is running",
                p.display()
            ),
        }
    }
}

impl std::error::Error for JournalError {}

/// The journal directory.
#[derive(Debug, Clone)]
pub struct JournalStore {
    dir: PathBuf,
    /// A directory of older journals, read but never written ([`JournalStore::with_legacy`]).
    legacy: Option<PathBuf>,
}

impl JournalStore {
    /// A store rooted at `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalStore {
            dir: dir.into(),
            legacy: None,
        }
    }

    /// A store rooted at `dir` that also reads the journals and holder links of
    /// `legacy` (the previous default stateDir, `/var/lib/cni/ib-sriov`, where earlier
    /// versions journaled): a journal there is loaded, listed, counted as its VF's
    /// holder and removed like one in `dir`; everything new is written to `dir`.
    pub fn with_legacy(dir: impl Into<PathBuf>, legacy: impl Into<PathBuf>) -> Self {
        let (dir, legacy) = (dir.into(), legacy.into());
        JournalStore {
            legacy: (legacy != dir).then_some(legacy),
            dir,
        }
    }

    /// `dir`, then the legacy directory if any.
    fn dirs(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.dir.as_path()).chain(self.legacy.as_deref())
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The journal file name of (containerID, ifname): see the module docs. Both parts
    /// are validated by the CNI layer before they get here.
    pub fn file_name(container_id: &str, ifname: &str) -> String {
        let plain = format!("{container_id}:{ifname}");
        if plain.len() <= PLAIN_NAME_MAX {
            return plain;
        }
        let mut h = Sha256::new();
        h.update(container_id.as_bytes());
        h.update([0u8]);
        h.update(ifname.as_bytes());
        let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let mut cut = 64.min(container_id.len());
        while !container_id.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}:#{hex}", &container_id[..cut])
    }

    /// `<dir>/<file_name>`.
    pub fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(Self::file_name(container_id, ifname))
    }

    /// `<dir>/locks/<VF BDF>.lock`: the per-VF lock file.
    pub fn vf_lock_path(&self, vf: PciAddress) -> PathBuf {
        self.dir.join("locks").join(format!("{vf}.lock"))
    }

    /// `<dir>/locks/rebind`: the node-wide lock held across every driver rebind (the
    /// kernel hands out RDMA device names and `uverbsN` numbers on bind, so parallel
    /// rebinds could swap them between VFs). Taken by the first of the rebind queue
    /// ([`Self::rebind_queue_dir`]), and alone by versions before the queue.
    pub fn rebind_lock_path(&self) -> PathBuf {
        self.dir.join("locks").join("rebind")
    }

    /// `<dir>/locks/rebind.queue`: the node's rebind queue, one entry per process
    /// waiting for or holding its rebind turn ([`crate::plugin::rebind_queue`]).
    pub fn rebind_queue_dir(&self) -> PathBuf {
        self.dir.join("locks").join("rebind.queue")
    }

    /// `<dir>/vfs/<VF BDF>`: the VF's holder link.
    pub fn holder_link_path(&self, vf: PciAddress) -> PathBuf {
        self.dir.join("vfs").join(vf.to_string())
    }

    fn io(&self, p: &Path) -> impl Fn(io::Error) -> JournalError + '_ {
        let p = p.to_path_buf();
        move |e| JournalError::Io(p.clone(), e)
    }

    /// Rewrites the journal atomically (readers see the old or the new content, never a
    /// mix), without fsync: for facts learnt while a step runs (a netdev's new identity
    /// after a rebind, its pod ifindex, completion). A killed process loses nothing (the
    /// page cache keeps the write); a machine crash ends every pod netns, RDMA move and
    /// PF-side VF setting the journal describes, and the boot stamp makes a journal that
    /// survives it (an on-disk `stateDir`) stale.
    pub fn save(&self, j: &Journal) -> Result<(), JournalError> {
        let path = self.path(&j.container_id, &j.ifname);
        let data = to_json(j).map_err(|e| JournalError::Io(path.clone(), e))?;
        crate::fsutil::in_dir(Some(&self.dir), || replace_nosync(&path, &data)).map_err(
            |(dir, e)| JournalError::Io(if dir { self.dir.clone() } else { path.clone() }, e),
        )
    }

    /// Writes the journal of a new attachment (ADD's plan) atomically, before its first
    /// host change, only if the attachment has none ([`crate::fsutil::create_new`];
    /// not fsync'd, as [`JournalStore::save`] says why): of two ADDs of one
    /// (containerID, ifname) racing on two VFs, only one journals its plan, so neither
    /// overwrites the other's (which would leave that one's VF in the pod with no
    /// journal). An empty file there (what a machine crash can leave of an unsynced
    /// write, read as absent by [`JournalStore::load`]) is replaced.
    ///
    /// Errors: [`JournalError::Exists`] when a journal appeared since the caller looked;
    /// I/O errors naming the file.
    pub fn create(&self, j: &Journal) -> Result<(), JournalError> {
        let path = self.path(&j.container_id, &j.ifname);
        let data = to_json(j).map_err(|e| JournalError::Io(path.clone(), e))?;
        match crate::fsutil::in_dir(Some(&self.dir), || create_new(&path, &data, false)) {
            Ok(()) => Ok(()),
            Err((false, e)) if e.kind() == io::ErrorKind::AlreadyExists => {
                match Self::load_path(&path)? {
                    None => self.save(j),
                    Some(_) => Err(JournalError::Exists(path)),
                }
            }
            Err((true, e)) => Err(JournalError::Io(self.dir.clone(), e)),
            Err((false, e)) => Err(JournalError::Io(path, e)),
        }
    }

    /// Loads the journal of (containerID, ifname); `Ok(None)` when there is none, or when
    /// the file is empty (a plan a machine crash cut short, [`crate::fsutil::is_unwritten`]).
    /// The file is opened without following a symlink, must be a regular file, is read
    /// up to [`MAX_JOURNAL_BYTES`], and must name this very attachment.
    pub fn load(&self, container_id: &str, ifname: &str) -> Result<Option<Journal>, JournalError> {
        let name = Self::file_name(container_id, ifname);
        for dir in self.dirs() {
            let path = dir.join(&name);
            let Some(j) = Self::load_path_memo(&path)? else {
                continue;
            };
            if j.container_id != container_id || j.ifname != ifname {
                return Err(JournalError::Mismatch {
                    path,
                    found: (j.container_id, j.ifname),
                });
            }
            return Ok(Some(j));
        }
        Ok(None)
    }

    fn load_path(p: &Path) -> Result<Option<Journal>, JournalError> {
        match Self::read_path(p)? {
            Some(b) => Self::parse(p, &b).map(Some),
            None => Ok(None),
        }
    }

    /// [`JournalStore::load_path`] for [`JournalStore::load`], which DEL calls twice on
    /// one file (to find the VF to lock, then under that lock): the file is read every
    /// time, and when it holds the very bytes this process parsed last, that parse is
    /// returned instead of parsing them again (a parse is a function of the bytes).
    fn load_path_memo(p: &Path) -> Result<Option<Journal>, JournalError> {
        /// The last journal parsed by `load`: its path, its bytes and the parse.
        type Last = Option<(PathBuf, Vec<u8>, Journal)>;
        static LAST: std::sync::Mutex<Last> = std::sync::Mutex::new(None);
        let Some(b) = Self::read_path(p)? else {
            return Ok(None);
        };
        let mut last = LAST
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((lp, lb, lj)) = last.as_ref() {
            if lp == p && *lb == b {
                return Ok(Some(lj.clone()));
            }
        }
        let j = Self::parse(p, &b)?;
        *last = Some((p.to_path_buf(), b, j.clone()));
        Ok(Some(j))
    }

    /// The bytes of the journal file `p`: `None` when there is none or it is empty (see
    /// [`JournalStore::load`]).
    fn read_path(p: &Path) -> Result<Option<Vec<u8>>, JournalError> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_flags())
            .open(p);
        let f = match f {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(JournalError::Io(p.to_path_buf(), e)),
        };
        let md = f
            .metadata()
            .map_err(|e| JournalError::Io(p.to_path_buf(), e))?;
        if !md.is_file() {
            return Err(JournalError::Unreadable(
                p.to_path_buf(),
                "not a regular file".into(),
            ));
        }
        // Sized from the fstat above (one byte past it, to see end of file): two reads
        // of a journal instead of a probe and one per doubling of the buffer.
        let mut b = Vec::with_capacity(md.len().min(MAX_JOURNAL_BYTES) as usize + 1);
        f.take(MAX_JOURNAL_BYTES + 1)
            .read_to_end(&mut b)
            .map_err(|e| JournalError::Io(p.to_path_buf(), e))?;
        if b.len() as u64 > MAX_JOURNAL_BYTES {
            return Err(JournalError::Unreadable(
                p.to_path_buf(),
                format!("larger than {MAX_JOURNAL_BYTES} bytes"),
            ));
        }
        if crate::fsutil::is_unwritten(&b) {
            // A plan whose first write a machine crash cut short, on an on-disk stateDir
            // (written without fsync, the name can reach the disk before the data): the
            // host changes it describes died with that boot anyway.
            log::warn!(
                "{} is empty: its plan never reached the disk (machine crash); treated as absent",
                p.display()
            );
            return Ok(None);
        }
        Ok(Some(b))
    }

    /// The journal file `p` holding `b`.
    ///
    /// Errors: not a journal, or another version than [`JOURNAL_VERSION`].
    fn parse(p: &Path, b: &[u8]) -> Result<Journal, JournalError> {
        let j: Journal = serde_json::from_slice(b)
            .map_err(|e| JournalError::Unreadable(p.to_path_buf(), e.to_string()))?;
        if j.version != JOURNAL_VERSION {
            return Err(JournalError::Unreadable(
                p.to_path_buf(),
                format!("journal version {}, expected {JOURNAL_VERSION}", j.version),
            ));
        }
        Ok(j)
    }

    /// Removes the journal of (containerID, ifname); `Ok(false)` when there was none.
    /// Temp files of killed writers are left to GC ([`JournalStore::sweep_temps`]).
    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<bool, JournalError> {
        let name = Self::file_name(container_id, ifname);
        let mut removed = false;
        // Not fsync'd (no directory fsync): a removal lost in a machine crash brings
        // back a journal of another boot, which DEL and GC drop without touching the VF.
        for dir in self.dirs() {
            let p = dir.join(&name);
            match std::fs::remove_file(&p) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(JournalError::Io(p, e)),
            }
        }
        Ok(removed)
    }

    /// Removes the temp files (`.<journal>.tmp.<pid>`) that writers killed mid-write
    /// left, when older than `age` (no live writer keeps one that long: a write takes
    /// milliseconds). One pass over the directory, for GC; DEL does not list the
    /// directory (its cost must not grow with the number of attachments), and the
    /// files are harmless meanwhile: no reader opens names starting with `.`.
    /// Returns how many were removed; errors are skipped (best effort).
    pub fn sweep_temps(&self, age: std::time::Duration) -> usize {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = std::time::SystemTime::now();
        let mut n = 0;
        for ent in rd.flatten() {
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with('.') && name.contains(".tmp.")) {
                continue;
            }
            let old = ent
                .metadata()
                .ok()
                .filter(|m| m.is_file())
                .and_then(|m| m.modified().ok())
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|d| d >= age);
            if old && std::fs::remove_file(ent.path()).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// Every journal in the store: the readable ones, and the errors of the others.
    /// Entries that are not journals (`locks`, `vfs`, temp files starting with `.`,
    /// names without `:`, such as the Go plugin's cache files) are not read.
    pub fn list(&self) -> Result<(Vec<Journal>, Vec<JournalError>), JournalError> {
        let (mut ok, mut bad) = (Vec::new(), Vec::new());
        let mut seen = std::collections::HashSet::new();
        for dir in self.dirs() {
            self.list_dir(dir, &mut seen, &mut ok, &mut bad)?;
        }
        Ok((ok, bad))
    }

    /// The journals of one directory (names in `seen` skipped and added), for
    /// [`JournalStore::list`].
    fn list_dir(
        &self,
        dir: &Path,
        seen: &mut std::collections::HashSet<String>,
        ok: &mut Vec<Journal>,
        bad: &mut Vec<JournalError>,
    ) -> Result<(), JournalError> {
        let rd = match std::fs::read_dir(dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(JournalError::Io(dir.to_path_buf(), e)),
        };
        for ent in rd {
            let ent = ent.map_err(self.io(dir))?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || !name.contains(':') || !seen.insert(name.to_string()) {
                continue;
            }
            match Self::load_path(&ent.path()) {
                Ok(Some(j)) if Self::file_name(&j.container_id, &j.ifname) == name => ok.push(j),
                Ok(Some(j)) => bad.push(JournalError::Mismatch {
                    path: ent.path(),
                    found: (j.container_id, j.ifname),
                }),
                Ok(None) => {}
                Err(e) => bad.push(e),
            }
        }
        Ok(())
    }

    /// Records that the journal of (containerID, ifname) holds `vf`: the holder link
    /// `vfs/<BDF>` -> journal file name, replacing a stale one. Call with the VF lock
    /// held, before the journal is saved. Not fsync'd: after a machine crash every pod
    /// netns is gone, so a journal whose link was lost holds nothing alive; the next
    /// ADD of the VF writes its own link, which keeps the old journal's undo off the
    /// VF (see [`JournalStore::holder`]).
    pub fn set_holder(
        &self,
        vf: PciAddress,
        container_id: &str,
        ifname: &str,
    ) -> Result<(), JournalError> {
        let link = self.holder_link_path(vf);
        let dir = link.parent().expect("has a parent");
        std::fs::create_dir_all(dir).map_err(self.io(dir))?;
        // Temp links of writers killed before their rename (`.<BDF>.tmp.<pid>`): the VF
        // lock the caller holds serializes every writer of this link.
        crate::fsutil::remove_temps_of(&link);
        let tmp = dir.join(format!(".{vf}.tmp.{}", crate::fsutil::pid()));
        std::os::unix::fs::symlink(Self::file_name(container_id, ifname), &tmp)
            .map_err(self.io(&tmp))?;
        std::fs::rename(&tmp, &link).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            JournalError::Io(link.clone(), e)
        })
    }

    /// Removes the holder link of `vf` when it names the journal of (containerID,
    /// ifname), so nothing of an attachment is left in the store after its last DEL;
    /// a link naming another attachment (a newer holder) stays. Call with the VF lock
    /// held, after the journal is removed (a link without its journal is stale, never
    /// the other way round). Not fsync'd: a removal lost in a crash leaves a stale link.
    /// Returns whether a link was removed.
    ///
    /// Errors: reading or removing the link, naming it.
    pub fn remove_holder(
        &self,
        vf: PciAddress,
        container_id: &str,
        ifname: &str,
    ) -> Result<bool, JournalError> {
        let mine = Self::file_name(container_id, ifname);
        let mut removed = false;
        for dir in self.dirs() {
            let link = dir.join("vfs").join(vf.to_string());
            match std::fs::read_link(&link) {
                Ok(t) if t.as_os_str() == mine.as_str() => match std::fs::remove_file(&link) {
                    Ok(()) => removed = true,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(JournalError::Io(link, e)),
                },
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // EINVAL: not a symlink (nothing this store wrote); left alone.
                Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {}
                Err(e) => return Err(JournalError::Io(link, e)),
            }
        }
        Ok(removed)
    }

    /// The attachment holding `vf` other than `except`, from the holder link: its
    /// journal (`Ok(Some(Ok(j)))`), or the error reading it (`Ok(Some(Err(e)))`: an
    /// unreadable journal still holds the VF). `Ok(None)` when no live journal holds it,
    /// including when the VF has no holder link: ADD writes the link before the journal
    /// (`plugin::add`), so no journal exists without its link. One readlink and at most
    /// one journal read, whatever the number of attachments.
    pub fn holder(
        &self,
        vf: PciAddress,
        except: (&str, &str),
    ) -> Result<Option<Result<Journal, JournalError>>, JournalError> {
        let mine = Self::file_name(except.0, except.1);
        for dir in self.dirs() {
            let link = dir.join("vfs").join(vf.to_string());
            match std::fs::read_link(&link) {
                Ok(target) => {
                    let name = target.to_string_lossy().into_owned();
                    if name == mine || name.contains('/') || name.starts_with('.') {
                        continue;
                    }
                    match Self::load_path(&dir.join(&name)) {
                        Ok(Some(j)) if j.vf == vf => return Ok(Some(Ok(j))),
                        Ok(Some(_)) | Ok(None) => {} // stale link
                        Err(e) => return Ok(Some(Err(e))),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(JournalError::Io(link, e)),
            }
        }
        Ok(None)
    }
}

/// `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`: a planted symlink or FIFO at a journal path
/// is refused or read without blocking (then rejected as not a regular file).
fn libc_flags() -> i32 {
    use nix::fcntl::OFlag;
    (OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits()
}

/// `j` as the journal file holds it (compact JSON on one line, as ADD writes it three
/// times: 2 % fewer instructions per ADD than pretty-printed; `jq .` shows it
/// indented), into a buffer sized for a typical journal (1-2 KiB) so that it is not
/// regrown on the way.
fn to_json(j: &Journal) -> io::Result<Vec<u8>> {
    let mut data = Vec::with_capacity(4096);
    serde_json::to_writer(&mut data, j).map_err(io::Error::other)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pod_from_cni_args() {
        use crate::cni::args::CniArgs;
        let a =
            CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p-0;K8S_POD_UID=u-1");
        let p = PodRef::from_args(&a).unwrap();
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str(), p.uid.as_str()),
            ("ns", "p-0", "u-1")
        );
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"namespace": "ns", "name": "p-0", "uid": "u-1"})
        );
        assert_eq!(PodRef::from_args(&CniArgs::parse("IgnoreUnknown=1")), None);
        assert_eq!(PodRef::from_args(&CniArgs::parse("K8S_POD_NAME=")), None);
    }

    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample(cid: &str, vf: &str) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            container_id: cid.into(),
            ifname: "net1".into(),
            netns: Some("/var/run/netns/p".into()),
            netns_id: Some(NsId {
                dev: 4,
                ino: 4026532000,
            }),
            network: "ib".into(),
            vf: vf.parse().unwrap(),
            pf: "0000:af:00.0".parse().unwrap(),
            vf_index: VfIndex(1),
            pf_netdev: Some("ib0".into()),
            vfio: false,
            rdma_isolation: None,
            conf: serde_json::json!({"name": "ib"}),
            steps: vec![
                Step::LinkState {
                    orig: Some(LinkState::Auto),
                    want: LinkState::Enable,
                    via: Some(Via::Netlink),
                },
                Step::MoveNetdev {
                    netdev: NetdevId {
                        ifindex: 7,
                        hwaddr: "02:00:00:00:00:01".into(),
                        parent: None,
                    },
                    host_name: "ib0v1".into(),
                    host_up: true,
                    pod_ifindex: None,
                },
            ],
            complete: false,
            boot_id: None,
            rdma_devices: Vec::new(),
            pod: None,
            guid: None,
            pf_port_guid: None,
        }
    }

    /// GC's sweep removes only temp files of killed writers that are old enough;
    /// journals and fresh temp files stay.
    #[test]
    fn sweep_removes_only_old_temp_files() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        s.save(&sample("c1", "0000:af:00.2")).unwrap();
        let old = d.path().join(".c9:net1.tmp.4242");
        let fresh = d.path().join(".c8:net1.tmp.4243");
        std::fs::write(&old, "{").unwrap();
        std::fs::write(&fresh, "{").unwrap();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        assert_eq!(s.sweep_temps(std::time::Duration::from_secs(600)), 1);
        assert!(!old.exists() && fresh.exists());
        assert!(s.load("c1", "net1").unwrap().is_some());
    }

    /// The attachment's GUID and the PF port GUID are saved and read back as
    /// `guid`/`pfPortGuid`; a journal of an earlier version, without them, still reads
    /// (both `None`) and is written without them.
    #[test]
    fn guid_and_pf_port_guid_round_trip_and_are_optional() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        let mut j = sample("c1", "0000:af:00.2");
        j.guid = Some("02:00:00:00:00:00:41:01".parse().unwrap());
        j.pf_port_guid = Some("0c:42:a1:03:00:b1:c2:d2".parse().unwrap());
        s.save(&j).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join("c1:net1")).unwrap()).unwrap();
        assert_eq!(v["guid"], "02:00:00:00:00:00:41:01");
        assert_eq!(v["pfPortGuid"], "0c:42:a1:03:00:b1:c2:d2");
        assert_eq!(s.load("c1", "net1").unwrap().unwrap(), j);
        let old = sample("c2", "0000:af:00.3");
        s.save(&old).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join("c2:net1")).unwrap()).unwrap();
        assert!(
            v.get("guid").is_none() && v.get("pfPortGuid").is_none(),
            "{v}"
        );
        let back = s.load("c2", "net1").unwrap().unwrap();
        assert_eq!((back.guid, back.pf_port_guid), (None, None));
    }

    #[test]
    fn save_load_list_remove_and_holders() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path().join("state"));
        assert!(s.load("c1", "net1").unwrap().is_none());
        let j = sample("c1", "0000:af:00.2");
        s.save(&j).unwrap();
        assert_eq!(s.load("c1", "net1").unwrap(), Some(j.clone()));
        assert!(s.path("c1", "net1").ends_with("c1:net1"));
        s.save(&sample("c2", "0000:af:00.3")).unwrap();
        assert_eq!(s.list().unwrap().0.len(), 2);
        let vf = "0000:af:00.2".parse().unwrap();
        // No link: nothing holds the VF (ADD writes the link before the journal, so
        // the journals are never listed to find a holder).
        assert!(s.holder(vf, ("c9", "net1")).unwrap().is_none());
        s.set_holder(vf, "c1", "net1").unwrap();
        let h = s.holder(vf, ("c9", "net1")).unwrap().unwrap().unwrap();
        assert_eq!(h.container_id, "c1");
        assert!(s.holder(vf, ("c1", "net1")).unwrap().is_none());
        // An unreadable journal still holds its VF.
        std::fs::write(s.path("c1", "net1"), b"{garbage").unwrap();
        assert!(matches!(
            s.holder(vf, ("c9", "net1")).unwrap(),
            Some(Err(JournalError::Unreadable(..)))
        ));
        assert!(s.remove("c1", "net1").unwrap());
        assert!(!s.remove("c1", "net1").unwrap());
        // A stale link (journal gone) holds nothing; so does a link to a journal of
        // another VF (the name was re-used).
        assert!(s.holder(vf, ("c9", "net1")).unwrap().is_none());
        s.save(&sample("c1", "0000:af:00.4")).unwrap();
        assert!(s.holder(vf, ("c9", "net1")).unwrap().is_none());
    }

    /// The default store also reads the old default directory: a journal there is
    /// loaded, listed, holds its VF and is removed like one of the store's own; new
    /// journals and links go to the store's directory only.
    #[test]
    fn the_legacy_directory_is_read_and_cleaned_but_never_written() {
        let d = tempfile::tempdir().unwrap();
        let (new, old) = (d.path().join("run"), d.path().join("var"));
        let legacy = JournalStore::new(&old);
        let j = sample("c1", "0000:af:00.2");
        legacy.save(&j).unwrap();
        let vf = "0000:af:00.2".parse().unwrap();
        legacy.set_holder(vf, "c1", "net1").unwrap();
        let s = JournalStore::with_legacy(&new, &old);
        assert_eq!(s.load("c1", "net1").unwrap(), Some(j.clone()));
        s.save(&sample("c2", "0000:af:00.3")).unwrap();
        assert!(new.join("c2:net1").is_file() && !old.join("c2:net1").exists());
        assert_eq!(s.list().unwrap().0.len(), 2);
        let h = s.holder(vf, ("c9", "net1")).unwrap().unwrap().unwrap();
        assert_eq!(h.container_id, "c1");
        assert!(s.remove("c1", "net1").unwrap());
        assert!(s.remove_holder(vf, "c1", "net1").unwrap());
        assert!(!old.join("c1:net1").exists() && !old.join("vfs").join("0000:af:00.2").exists());
        assert!(s.holder(vf, ("c9", "net1")).unwrap().is_none());
        assert!(JournalStore::with_legacy(&new, &new).legacy.is_none());
    }

    /// `create` refuses to replace a journal (racing ADDs of one attachment), but
    /// replaces the empty file a crash can leave; `remove_holder` removes only the link
    /// that names the attachment.
    #[test]
    fn create_never_replaces_and_holders_go_with_their_journal() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        let a = sample("c1", "0000:af:00.2");
        s.create(&a).unwrap();
        let b = sample("c1", "0000:af:00.3");
        assert!(matches!(s.create(&b), Err(JournalError::Exists(_))));
        assert_eq!(s.load("c1", "net1").unwrap(), Some(a.clone()));
        std::fs::write(s.path("c1", "net1"), b"").unwrap();
        s.create(&b).unwrap();
        assert_eq!(s.load("c1", "net1").unwrap(), Some(b));
        let vf = "0000:af:00.3".parse().unwrap();
        s.set_holder(vf, "c2", "net1").unwrap();
        assert!(!s.remove_holder(vf, "c1", "net1").unwrap(), "names another");
        s.set_holder(vf, "c1", "net1").unwrap();
        assert!(s.remove_holder(vf, "c1", "net1").unwrap());
        assert!(!s.holder_link_path(vf).exists());
        assert!(!s.remove_holder(vf, "c1", "net1").unwrap());
    }

    /// The state a machine crash can leave on an on-disk stateDir after a plan's first
    /// write (no fsync: the name may reach the disk before the data): an empty file
    /// under the journal's name.
    /// It reads as no journal everywhere (load, list, holder) and the next save
    /// replaces it.
    #[test]
    fn an_empty_journal_is_a_plan_that_never_reached_the_disk() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        let vf = "0000:af:00.2".parse().unwrap();
        s.set_holder(vf, "c1", "net1").unwrap();
        std::fs::write(s.path("c1", "net1"), b"").unwrap();
        assert!(s.load("c1", "net1").unwrap().is_none());
        assert!(s.holder(vf, ("c9", "net1")).unwrap().is_none());
        let (ok, bad) = s.list().unwrap();
        assert!(ok.is_empty() && bad.is_empty(), "{ok:?} {bad:?}");
        let j = sample("c1", "0000:af:00.2");
        s.save(&j).unwrap();
        assert_eq!(s.load("c1", "net1").unwrap(), Some(j));
        assert!(s.remove("c1", "net1").unwrap());
    }

    #[test]
    fn a_journal_of_another_attachment_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        s.save(&sample("c1", "0000:af:00.2")).unwrap();
        std::fs::rename(s.path("c1", "net1"), s.path("c2", "net1")).unwrap();
        assert!(matches!(
            s.load("c2", "net1"),
            Err(JournalError::Mismatch { .. })
        ));
        let (ok, bad) = s.list().unwrap();
        assert!(ok.is_empty() && bad.len() == 1);
    }

    #[test]
    fn corrupt_fifo_and_symlink_journals_are_errors_not_hangs() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        std::fs::write(s.path("c1", "net1"), b"{garbage").unwrap();
        assert!(matches!(
            s.load("c1", "net1"),
            Err(JournalError::Unreadable(..))
        ));
        nix::unistd::mkfifo(&s.path("c2", "net1"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            s.load("c2", "net1"),
            Err(JournalError::Unreadable(..))
        ));
        std::os::unix::fs::symlink("/etc/hostname", s.path("c3", "net1")).unwrap();
        assert!(matches!(s.load("c3", "net1"), Err(JournalError::Io(..))));
        let (ok, bad) = s.list().unwrap();
        assert!(ok.is_empty() && bad.len() == 3, "{bad:?}");
    }

    /// Valid container IDs (CNI SPEC.md: alphanumerics, `_`, `.`, `-`; at most 255
    /// bytes here) and interface names (the kernel's `dev_valid_name()`: 1..=15 bytes,
    /// no `/`, `:`, whitespace, not `.`/`..`).
    fn valid_cid() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9][A-Za-z0-9_.-]{0,20}",
            "[A-Za-z0-9][A-Za-z0-9_.-]{150,254}",
        ]
    }
    fn valid_ifname() -> impl Strategy<Value = String> {
        "[!-9;-~]{1,15}".prop_filter("not . or ..", |s| s != "." && s != ".." && !s.contains('/'))
    }

    proptest! {
        #[test]
        fn file_names_are_injective_and_fit(
            a in (valid_cid(), valid_ifname()),
            b in (valid_cid(), valid_ifname()),
        ) {
            let (na, nb) = (JournalStore::file_name(&a.0, &a.1), JournalStore::file_name(&b.0, &b.1));
            prop_assert!(na.len() <= PLAIN_NAME_MAX.max(64 + 2 + 64));
            prop_assert!(!na.contains('/') && !na.starts_with('.'));
            prop_assert_eq!(na == nb, a == b, "{:?} {:?} -> {} {}", a, b, na, nb);
        }

        #[test]
        fn names_differing_only_at_the_dash_differ(
            x in "[a-z0-9]{1,10}", y in "[a-z0-9]{1,10}",
        ) {
            // The version-1 collision: (x-y, net1) vs (x, y-net1).
            let a = JournalStore::file_name(&format!("{x}-{y}"), "net1");
            let b = JournalStore::file_name(&x, &format!("{y}-net1"));
            prop_assert_ne!(a, b);
        }
    }

    #[test]
    fn long_container_ids_use_the_hashed_form() {
        let cid = "a".repeat(255);
        let n = JournalStore::file_name(&cid, "net1");
        assert!(n.len() <= 130 && n.contains(":#"), "{n}");
        assert_ne!(n, JournalStore::file_name(&cid, "net2"));
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        let mut j = sample(&cid, "0000:af:00.2");
        j.container_id = cid.clone();
        s.save(&j).unwrap();
        assert_eq!(s.load(&cid, "net1").unwrap().unwrap().container_id, cid);
        assert_eq!(s.list().unwrap().0.len(), 1);
    }
}
