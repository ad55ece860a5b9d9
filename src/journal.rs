//! Per-attachment journal: `<stateDir>/<containerID>-<ifname>` (JSON, atomic writes).
//!
//! ADD writes it durably before its first host change, recording the VF, everything
//! needed to restore it (original GUIDs, link state, host netdev name and admin state)
//! and every step it is about to take. DEL and rollback undo every recorded step in
//! reverse; each undo is idempotent and checks the current state first, so a step that
//! was recorded but never ran (a crash or failure before it) is undone harmlessly.
//! One durable write per ADD keeps the fsync cost (the bulk of the plugin's CPU on
//! ext4) low. The journal is deleted only when the undo is complete.

use crate::fsutil::{atomic_write, remove_durable, replace_nosync};
use crate::types::{Guid, LinkState, PciAddress, VfIndex};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// Journal format version.
pub const JOURNAL_VERSION: u32 = 1;

/// How a VF attribute was (or will be) changed, so the undo uses the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// rtnetlink on the PF.
    Netlink,
    /// MLNX_OFED sysfs files `<PF>/sriov/<N>/{node,port,policy}`.
    Ofed,
}

/// A step of ADD, journaled before it changes the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// VF link state set on the PF.
    LinkState,
    /// VF node/port GUID set on the PF.
    Guid,
    /// VF driver unbound and bound again (GUID change takes effect).
    Rebind,
    /// RDMA device moved into the pod netns (before the netdev: moving it re-creates
    /// the IPoIB netdev in the default netns).
    RdmaMove,
    /// Netdev moved into the pod netns (and renamed to CNI_IFNAME there).
    MoveNetdev,
    /// IPAM allocation taken.
    Ipam,
    /// NPWG device-info file written.
    DeviceInfo,
}

/// The journal of one attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// VF netdev name in the host before ADD (restored by DEL).
    pub host_ifname: Option<String>,
    /// Whether that netdev was administratively up before ADD (restored by DEL).
    #[serde(default)]
    pub host_up: bool,
    /// Node GUID before ADD.
    pub orig_node_guid: Option<Guid>,
    /// Port GUID before ADD.
    pub orig_port_guid: Option<Guid>,
    /// GUID set by ADD, if any.
    pub set_guid: Option<Guid>,
    /// How GUIDs are read/written on this host.
    pub guid_via: Option<Via>,
    /// Link state before ADD.
    pub orig_link_state: Option<LinkState>,
    /// Link state set by ADD, if any.
    pub set_link_state: Option<LinkState>,
    /// How link state is read/written on this host.
    pub link_state_via: Option<Via>,
    /// `rdmaIsolation` as configured.
    pub rdma_isolation: Option<bool>,
    /// The VF's RDMA device at ADD.
    pub rdma_device: Option<String>,
    /// `ipam.type`, when IPAM was configured.
    pub ipam_type: Option<String>,
    /// `runtimeConfig.CNIDeviceInfoFile`, when given.
    pub device_info_file: Option<PathBuf>,
    /// Steps ADD takes, in order, recorded before the first of them runs.
    pub steps: Vec<Step>,
    /// True once ADD completed (written without fsync: after a crash it may read
    /// false, which only makes CHECK fail and DEL undo what it would undo anyway).
    pub complete: bool,
}

impl Journal {
    /// True when `step` was begun.
    pub fn has(&self, step: Step) -> bool {
        self.steps.contains(&step)
    }
}

/// The journal directory.
#[derive(Debug, Clone)]
pub struct JournalStore {
    dir: PathBuf,
}

impl JournalStore {
    /// A store rooted at `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalStore { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<containerID>-<ifname>`. Both parts are validated by the CNI layer
    /// (no `/`, not `.`/`..`), so the name stays inside `dir`.
    pub fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}-{ifname}"))
    }

    /// `<dir>/locks/<VF BDF>.lock`: the per-VF lock file.
    pub fn vf_lock_path(&self, vf: PciAddress) -> PathBuf {
        self.dir.join("locks").join(format!("{vf}.lock"))
    }

    /// Writes the journal atomically and durably.
    pub fn save(&self, j: &Journal) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let data = serde_json::to_vec_pretty(j).map_err(io::Error::other)?;
        atomic_write(&self.path(&j.container_id, &j.ifname), &data)
    }

    /// Rewrites the journal atomically but without fsync (see [`Journal::complete`]).
    pub fn save_nosync(&self, j: &Journal) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let data = serde_json::to_vec_pretty(j).map_err(io::Error::other)?;
        replace_nosync(&self.path(&j.container_id, &j.ifname), &data)
    }

    /// Loads a journal; `Ok(None)` when there is none.
    pub fn load(&self, container_id: &str, ifname: &str) -> io::Result<Option<Journal>> {
        Self::load_path(&self.path(container_id, ifname))
    }

    fn load_path(p: &Path) -> io::Result<Option<Journal>> {
        match std::fs::read(p) {
            Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", p.display()))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes a journal; `Ok(false)` when there was none.
    pub fn remove(&self, container_id: &str, ifname: &str) -> io::Result<bool> {
        remove_durable(&self.path(container_id, ifname))
    }

    /// Every readable journal in the store (unreadable ones are logged and skipped).
    pub fn list(&self) -> io::Result<Vec<Journal>> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || !ent.file_type()?.is_file() {
                continue;
            }
            match Self::load_path(&ent.path()) {
                Ok(Some(j)) => out.push(j),
                Ok(None) => {}
                Err(e) => log::warn!("skipping unreadable journal: {e}"),
            }
        }
        Ok(out)
    }

    /// The journal of another attachment that holds `vf`, if any.
    pub fn holder_of(&self, vf: PciAddress, except: (&str, &str)) -> io::Result<Option<Journal>> {
        Ok(self
            .list()?
            .into_iter()
            .find(|j| j.vf == vf && (j.container_id.as_str(), j.ifname.as_str()) != except))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(cid: &str, vf: &str) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            container_id: cid.into(),
            ifname: "net1".into(),
            netns: Some("/var/run/netns/p".into()),
            network: "ib".into(),
            vf: vf.parse().unwrap(),
            pf: "0000:af:00.0".parse().unwrap(),
            vf_index: VfIndex(1),
            pf_netdev: Some("ib0".into()),
            vfio: false,
            host_ifname: Some("ib0v1".into()),
            host_up: true,
            orig_node_guid: Some("02:00:00:00:00:00:00:01".parse().unwrap()),
            orig_port_guid: None,
            set_guid: None,
            guid_via: Some(Via::Ofed),
            orig_link_state: Some(LinkState::Auto),
            set_link_state: Some(LinkState::Enable),
            link_state_via: Some(Via::Netlink),
            rdma_isolation: None,
            rdma_device: Some("mlx5_3".into()),
            ipam_type: None,
            device_info_file: None,
            steps: vec![Step::LinkState, Step::MoveNetdev],
            complete: false,
        }
    }

    #[test]
    fn save_load_list_remove() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path().join("state"));
        assert_eq!(s.load("c1", "net1").unwrap(), None);
        let j = sample("c1", "0000:af:00.2");
        s.save(&j).unwrap();
        assert_eq!(s.load("c1", "net1").unwrap(), Some(j.clone()));
        assert!(s.path("c1", "net1").ends_with("c1-net1"));
        s.save(&sample("c2", "0000:af:00.3")).unwrap();
        assert_eq!(s.list().unwrap().len(), 2);
        let h = s
            .holder_of("0000:af:00.2".parse().unwrap(), ("c9", "net1"))
            .unwrap();
        assert_eq!(h.unwrap().container_id, "c1");
        assert!(s
            .holder_of("0000:af:00.2".parse().unwrap(), ("c1", "net1"))
            .unwrap()
            .is_none());
        assert!(s.remove("c1", "net1").unwrap());
        assert!(!s.remove("c1", "net1").unwrap());
    }

    #[test]
    fn corrupt_journal_is_an_error_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let s = JournalStore::new(d.path());
        std::fs::write(s.path("c1", "net1"), b"{garbage").unwrap();
        assert!(s.load("c1", "net1").is_err());
        assert!(s.list().unwrap().is_empty());
    }
}
