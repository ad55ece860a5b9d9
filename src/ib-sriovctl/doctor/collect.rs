//! Reads the node for the doctor, read-only: sysfs, `/proc`, rtnetlink and RDMA netlink
//! of the current netns, our journals, the Go plugin's cache and the built-in IPAM
//! stores. No lock is taken, nothing is written. Whatever cannot be read becomes a
//! [`Note`], never an error.

use super::paths::Paths;
use super::report::{Holder, IpamNetwork, Module, Netdev, Node, Pf, Report, Vf};
use crate::journal::{Journal, JournalStore, Step};
use crate::netlink::Netlink;
use crate::rdma::{NetnsMode, RdmaOps};
use crate::sysfs::{GuidKind, Sysfs};
use crate::types::PciAddress;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest `/proc` or sysfs attribute read, in bytes.
const MAX_ATTR: u64 = 4096;

/// Something the doctor could not read or judge from the report alone, for the findings.
#[derive(Debug, Clone)]
pub enum Note {
    /// A file or source could not be read: (subject, what).
    Unreadable(String, String),
    /// A journal that cannot be used: (path, why).
    BadJournal(String, String),
    /// A journal asks for ib-kubernetes GUIDs (`ibKubernetesEnabled`): its VF.
    IbKubernetes(String),
    /// A journal asked for RDMA isolation (`rdmaIsolation: true`) or moved the RDMA
    /// device: its attachment.
    WantsIsolation(String),
    /// A PF's VF table could not be read over rtnetlink by any route (the single
    /// RTM_GETLINK and the link dump): (PF PCI address, netdev, error).
    VfTable(String, String, String),
    /// A journal recorded an original VF attribute as unknown: (attachment, VF, which:
    /// `link state` or `GUID`).
    OriginalUnknown(String, String, &'static str),
    /// A complete journal of this boot and the Go plugin's cache file of its attachment
    /// (what a rollback to the Go plugin needs, [`crate::gocache::render`]): (attachment,
    /// VF, what the file and the host show). Nothing is noted for a file that holds
    /// exactly what ADD wrote.
    GoCache(String, String, GoFile),
    /// A holder source that could not be read, or a record that could not be matched:
    /// not every holder of a VF is accounted for ([`super::holders`]).
    Unaccounted(String),
    /// A runtime's record that an attachment holds a VF ([`super::holders::Claim`]).
    Claim(super::holders::Claim),
    /// What the running kernel showed of the facts the plugin relies on
    /// ([`super::kernel`]), by probe; the findings compare the rest with the release.
    Kernel(super::kernel::Probes),
}

/// What the Go plugin cache file of a complete journal of this boot, and the host, say
/// about a rollback of its attachment to the Go plugin ([`Note::GoCache`]).
#[derive(Debug, Clone)]
pub enum GoFile {
    /// ADD wrote none: a version before `goCacheDir`, `"goCacheDir": ""`, or its name
    /// was another file's (the journal's `go_cache` step is missing or empty).
    None,
    /// The file is gone and the host shows the attachment ended by someone else: the VF
    /// as the Go plugin's DEL leaves it ([`crate::plugin::steps::as_go_left`], the same
    /// reading our DEL makes before it drops such a journal), or held by an attachment
    /// the Go plugin made since. What was found.
    UndoneByGo(String),
    /// The attachment is live (its pod netns is there, or cannot be told gone) and its
    /// file is missing with the VF not as the Go plugin's DEL leaves it, unreadable, or
    /// not the bytes ADD wrote (the journal's `go_cache` step records them): a Go DEL
    /// after a rollback would not undo it.
    Unready {
        /// The file, as the node names it.
        file: String,
        /// What is wrong with it, and what the host shows.
        why: String,
        /// The journal holding the bytes ADD wrote, as the node names it.
        journal: String,
        /// The file is missing (not another file in its place): GC and CHECK rewrite it
        /// (`plugin::steps::heal_go_cache`).
        missing: bool,
    },
}

/// Reads `path`, at most [`MAX_ATTR`] bytes, trimmed; `None` when unreadable.
fn attr(path: &Path) -> Option<String> {
    let b = crate::fsutil::read_regular_bounded(path, MAX_ATTR).ok()?;
    let s = String::from_utf8_lossy(&b).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Collects the report (without findings) and the notes the findings need.
pub fn collect(paths: &Paths) -> (Report, Vec<Note>) {
    let mut notes = Vec::new();
    let sysfs = Sysfs::new(&paths.sys);
    let nl = match Netlink::open() {
        Ok(nl) => Some(nl),
        Err(e) => {
            notes.push(Note::Unreadable("rtnetlink".into(), e.to_string()));
            None
        }
    };
    // The kernel facts a probe can show (one link dump; super::kernel).
    let mut probes = super::kernel::Probes::default();
    if let Some(nl) = nl.as_ref() {
        match nl.links() {
            Ok(links) => probes.0.push((
                "parent-dev",
                super::kernel::probe_parent_dev(&links, &paths.sys),
            )),
            Err(e) => notes.push(Note::Unreadable(
                "rtnetlink link dump".into(),
                e.to_string(),
            )),
        }
    }
    let found = super::holders::discover(paths, &paths.extra_state);
    let journals = journal_list(&found, paths, &mut notes);
    let (by_vf, go) = holders(paths, &journals, &mut notes);
    notes.extend(found.unaccounted.iter().cloned().map(Note::Unaccounted));
    // A runtime's record no journal and no Go cache file answers.
    for c in &found.claims {
        let answered = by_vf
            .get(&c.vf)
            .into_iter()
            .chain(go.get(&c.vf))
            .flatten()
            .any(|h| {
                c.attachment
                    == format!(
                        "{}/{}",
                        h.container_id,
                        h.ifname.as_deref().unwrap_or_default()
                    )
            });
        if !answered {
            notes.push(Note::Claim(c.clone()));
        }
    }
    let mut report = Report {
        holder_sources: found.sources.clone(),
        schema_version: super::report::SCHEMA_VERSION,
        plugin_version: crate::version().to_string(),
        host_root: paths.root.display().to_string(),
        node: node(paths, &mut notes),
        ..Report::default()
    };
    let guid_file = guid_file(paths, &mut report);
    let mut guid_netlink = false;
    let mut guid_ofed = false;
    for pf_addr in sriov_pfs(&sysfs, &mut notes) {
        let mut pf = pf_of(&sysfs, nl.as_ref(), pf_addr);
        let pf_id = crate::vfguid::PfIdentity::read(&sysfs, nl.as_ref(), pf_addr);
        pf.port_guid = pf_id.port_guid.map(|(g, _)| g.to_string());
        let configs = nl
            .as_ref()
            .and_then(|nl| pf_vf_configs(nl, &pf, &mut notes))
            .unwrap_or_default();
        guid_netlink |= configs.iter().any(|c| c.node_guid.is_some());
        let vfs = match sysfs.virtfns(pf_addr) {
            Ok(v) => v,
            Err(e) => {
                notes.push(Note::Unreadable(
                    format!("{pf_addr} virtfn links"),
                    e.to_string(),
                ));
                Vec::new()
            }
        };
        for (index, addr) in vfs {
            let cfg = configs.iter().find(|c| c.vf == index.0);
            let ofed = sysfs.ofed_dir(pf_addr, index).is_some();
            guid_ofed |= ofed;
            let guids =
                crate::vfguid::VfGuids::read(&sysfs, nl.as_ref(), pf_addr, index, addr, &configs);
            let guid = |kind: GuidKind| guids.guid(kind).map(|g| g.to_string());
            let link_state = cfg
                .and_then(|c| c.link_state)
                .or_else(|| sysfs.read_ofed_policy(pf_addr, index).ok().flatten())
                .map(|l| l.to_string());
            // Listed in sysfs and, when rtnetlink answers, present in this netns (a
            // name just renamed or moved away is left out rather than shown stale).
            let ipoib_guid = guids.ipoib().next();
            let netdevs: Vec<Netdev> = guids
                .netdevs
                .iter()
                .filter_map(|(name, l)| match (nl.as_ref(), l) {
                    (Some(_), Some(l)) => Some(Netdev {
                        up: l.up,
                        carrier: l.carrier,
                        name: name.clone(),
                    }),
                    (Some(_), None) => None,
                    (None, _) => Some(Netdev {
                        up: false,
                        carrier: false,
                        name: name.clone(),
                    }),
                })
                .collect();
            let key = addr.to_string();
            let mut hs: Vec<Holder> = by_vf.get(&key).cloned().unwrap_or_default();
            hs.extend(go.get(&key).cloned().unwrap_or_default());
            let in_pod = hs.iter().any(|h| {
                h.source == "journal" && !h.vfio && h.netns_state.as_deref() == Some("alive")
            });
            let (file_guid, file_entry, file_error) =
                match guid_file.as_ref().map(|f| f.lookup(&pf_id, index)) {
                    Some(Ok(Some((g, i)))) => (Some(g.to_string()), Some(i), None),
                    Some(Err(e)) => (None, e.entry, Some(e.msg)),
                    _ => (None, None, None),
                };
            report.vfs.push(Vf {
                pci: key,
                pf: pf_addr.to_string(),
                index: index.0,
                driver: sysfs.driver(addr).ok().flatten(),
                netdev_location: if !netdevs.is_empty() {
                    "in-host"
                } else if in_pod {
                    "in-pod"
                } else {
                    "none"
                }
                .into(),
                netdevs,
                rdma_devices: sysfs.rdma_devices(addr).unwrap_or_default(),
                node_guid: guid(GuidKind::Node),
                port_guid: guid(GuidKind::Port),
                ipoib_guid: ipoib_guid.map(|g| g.to_string()),
                link_state,
                file_guid,
                file_entry,
                file_error,
                derived_guid: pf_id
                    .port_guid
                    .map(|(pg, _)| crate::vfguid::derived_guid(pg, index).to_string()),
                holders: hs,
                pkeys: match sysfs.pkeys(addr) {
                    Ok(Some((_, t))) => t.iter().map(|p| format!("{p:#06x}")).collect(),
                    _ => Vec::new(),
                },
            });
        }
        report.pfs.push(pf);
    }
    if guid_netlink {
        probes.0.push((
            "vf-guid-read",
            super::kernel::Probe::Present("a PF's VF table carries VF GUIDs".into()),
        ));
    }
    notes.push(Note::Kernel(probes));
    report.node.vf_guid_source = if guid_netlink {
        "netlink"
    } else if guid_ofed {
        "mlnx-ofed-sysfs"
    } else {
        "none"
    }
    .into();
    report.attachments = journals.iter().map(|j| attachment(j, &report)).collect();
    report
        .attachments
        .sort_by(|a, b| (&a.vf, &a.attachment).cmp(&(&b.vf, &b.attachment)));
    report.ipam = ipam(paths, &journals, &mut notes);
    // Read-only: the host netns and rtnetlink, for `as_go_left`.
    let host = crate::plugin::steps::Host::open(&sysfs);
    for j in &journals {
        let att = format!("{}/{}", j.container_id, j.ifname);
        if j.conf.get("ibKubernetesEnabled").and_then(|v| v.as_bool()) == Some(true) {
            notes.push(Note::IbKubernetes(j.vf.to_string()));
        }
        for st in &j.steps {
            match st {
                Step::LinkState { orig: None, .. } => notes.push(Note::OriginalUnknown(
                    att.clone(),
                    j.vf.to_string(),
                    "link state",
                )),
                Step::Guid {
                    orig_node: None,
                    origin: None,
                    ..
                }
                | Step::Guid {
                    orig_port: None,
                    origin: None,
                    ..
                } => notes.push(Note::OriginalUnknown(att.clone(), j.vf.to_string(), "GUID")),
                _ => {}
            }
        }
        if j.complete && !crate::boot::is_other(j.boot_id.as_deref()) {
            if let Some(g) = go_file(paths, &found, host.as_ref(), &go, j) {
                notes.push(Note::GoCache(att.clone(), j.vf.to_string(), g));
            }
        }
        // Or its ADD moved the RDMA device (an earlier release did without the key). A
        // vfio attachment journaled with isolation took it from the node file's
        // defaults, which do not apply in vfio mode (ADD refuses a network's own
        // `rdmaIsolation: true` there): it asked for nothing.
        if (j.rdma_isolation == Some(true) && !j.vfio) || j.rdma_device().is_some() {
            notes.push(Note::WantsIsolation(att));
        }
    }
    (report, notes)
}

/// The port GUID attachment `j` runs with, as the doctor shows it (`attachments[].guid`)
/// and the exporter labels it (`port_guid`): the journal's `guid` (what ADD planned:
/// the GUID it set, else the one the VF kept), else `vf_port`, the VF's port GUID as
/// read now ([`crate::vfguid::VfGuids::guid`]: the PF's VF table over rtnetlink,
/// `IFLA_VF_IB_PORT_GUID`, else MLNX_OFED's `<PF>/sriov/<N>/port`), else the GUID of
/// the journal's GUID step (ADD sets node and port to it; journals of earlier versions
/// have no `guid`).
pub(crate) fn attachment_port_guid(
    j: &Journal,
    vf_port: Option<crate::types::Guid>,
) -> Option<crate::types::Guid> {
    j.guid.or(vf_port).or_else(|| set_guid(j))
}

/// The node GUID attachment `j` runs with, as the exporter labels it (`node_guid`):
/// `vf_node`, the VF's node GUID as read now (the doctor's `vfs[].nodeGuid`:
/// `IFLA_VF_IB_NODE_GUID`, else MLNX_OFED's `<PF>/sriov/<N>/node`), else the GUID of
/// the journal's GUID step (ADD sets node and port to it).
pub(crate) fn attachment_node_guid(
    j: &Journal,
    vf_node: Option<crate::types::Guid>,
) -> Option<crate::types::Guid> {
    vf_node.or_else(|| set_guid(j))
}

/// The GUID ADD set on the VF (its journal's GUID step), if it set one.
fn set_guid(j: &Journal) -> Option<crate::types::Guid> {
    j.steps.iter().find_map(|s| match s {
        Step::Guid { want, .. } => Some(*want),
        _ => None,
    })
}

/// The per-attachment view of journal `j`, completed from the VFs and PFs of `r`.
fn attachment(j: &Journal, r: &Report) -> super::report::Attachment {
    let vf = r.vfs.iter().find(|v| v.pci == j.vf.to_string());
    let pf = r.pfs.iter().find(|p| p.pci == j.pf.to_string());
    let pkey = j.conf.get("pkey").and_then(|v| v.as_str()).and_then(|s| {
        let h = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        u32::from_str_radix(h, 16)
            .ok()
            .and_then(|v| u16::try_from(v).ok())
    });
    let table: Vec<u16> = vf
        .map(|v| {
            v.pkeys
                .iter()
                .filter_map(|p| u16::from_str_radix(p.trim_start_matches("0x"), 16).ok())
                .collect()
        })
        .unwrap_or_default();
    let pod = j.pod.as_ref();
    super::report::Attachment {
        pod: pod
            .filter(|p| !p.namespace.is_empty() || !p.name.is_empty())
            .map(|p| format!("{}/{}", p.namespace, p.name)),
        pod_uid: pod.filter(|p| !p.uid.is_empty()).map(|p| p.uid.clone()),
        attachment: format!("{}/{}", j.container_id, j.ifname),
        network: j.network.clone(),
        vf: j.vf.to_string(),
        guid: attachment_port_guid(j, vf.and_then(|v| v.port_guid.as_deref()?.parse().ok()))
            .map(|g| g.to_string()),
        pf_port_guid: j
            .pf_port_guid
            .map(|g| g.to_string())
            .or_else(|| pf.and_then(|p| p.port_guid.clone())),
        pkey: pkey.map(|p| format!("{p:#06x}")),
        pkey_in_table: pkey
            .filter(|_| !table.is_empty())
            .map(|p| table.contains(&p)),
        rdma_device: if j.vfio {
            None
        } else {
            j.rdma_device()
                .map(str::to_string)
                .or_else(|| vf.and_then(|v| v.rdma_devices.first().cloned()))
        },
    }
}

/// Kernel version, boot ID, modules, RDMA netns mode.
fn node(paths: &Paths, notes: &mut Vec<Note>) -> Node {
    let kernel = attr(&paths.root.join("proc/sys/kernel/osrelease"));
    if kernel.is_none() {
        notes.push(Note::Unreadable(
            "proc/sys/kernel/osrelease".into(),
            "unreadable: kernel version unknown".into(),
        ));
    }
    let modules = ["mlx5_core", "mlx5_ib", "ib_ipoib", "ib_uverbs"]
        .iter()
        .map(|m| Module {
            name: m.to_string(),
            loaded: paths.sys.join("module").join(m).is_dir(),
        })
        .collect();
    let rdma_netns_mode = match crate::rdma::RdmaSocket::open().and_then(|mut s| s.netns_mode()) {
        Ok(NetnsMode::Shared) => Some("shared".to_string()),
        Ok(NetnsMode::Exclusive) => Some("exclusive".to_string()),
        Err(e) => {
            notes.push(Note::Unreadable("RDMA netlink".into(), e.to_string()));
            None
        }
    };
    Node {
        kernel,
        boot_id: attr(&paths.root.join("proc/sys/kernel/random/boot_id")),
        modules,
        rdma_netns_mode,
        vf_guid_source: String::new(),
    }
}

/// The operator's GUID file: its state into the report, the parsed file when valid.
fn guid_file(paths: &Paths, report: &mut Report) -> Option<crate::vfguid::GuidFile> {
    let host_path = Path::new("/").join(
        paths
            .guid_file
            .strip_prefix(&paths.root)
            .unwrap_or(&paths.guid_file),
    );
    let (state, f) = match crate::vfguid::GuidFile::load(&paths.guid_file) {
        Ok(None) => ("absent", None),
        Ok(Some(f)) => ("valid", Some(f)),
        Err(e) => {
            report.guid_file.error = Some(match e.entry {
                Some(i) => format!("entry {i}: {}", e.msg),
                None => e.msg,
            });
            ("invalid", None)
        }
    };
    report.guid_file.path = host_path.display().to_string();
    report.guid_file.state = state.into();
    report.guid_file.entries = f.as_ref().map(|f| f.entries.len());
    f
}

/// Every PCI device with `sriov_totalvfs`, sorted ([`Sysfs::sriov_pfs`]).
fn sriov_pfs(sysfs: &Sysfs, notes: &mut Vec<Note>) -> Vec<PciAddress> {
    sysfs.sriov_pfs().unwrap_or_else(|e| {
        notes.push(Note::Unreadable(
            sysfs.pci_devices_dir().display().to_string(),
            e.to_string(),
        ));
        Vec::new()
    })
}

/// The PF's facts; its link layer from `<PF>/net/<n>/type` (ARPHRD_*), else from the
/// hardware address length rtnetlink reports (20 bytes: InfiniBand, 6: Ethernet).
pub(crate) fn pf_of(sysfs: &Sysfs, nl: Option<&Netlink>, addr: PciAddress) -> Pf {
    let dir = sysfs.pci_device_dir(addr);
    let netdevs = sysfs.netdevs(addr).unwrap_or_default();
    let types: Vec<Option<String>> = netdevs
        .iter()
        .map(|n| {
            attr(&dir.join("net").join(n).join("type")).or_else(|| {
                let l = nl?.link_by_name(n).ok()??;
                match l.address.len() {
                    20 => Some("32".to_string()),
                    6 => Some("1".to_string()),
                    _ => None,
                }
            })
        })
        .collect();
    let link_layer = if types.iter().any(|t| t.as_deref() == Some("32")) {
        "InfiniBand"
    } else if types.iter().any(|t| t.as_deref() == Some("1")) {
        "Ethernet"
    } else {
        "unknown"
    };
    Pf {
        pci: addr.to_string(),
        driver: sysfs.driver(addr).ok().flatten(),
        link_layer: link_layer.into(),
        num_vfs: attr(&dir.join("sriov_numvfs")).and_then(|s| s.parse().ok()),
        total_vfs: attr(&dir.join("sriov_totalvfs")).and_then(|s| s.parse().ok()),
        port_guid: None,
        netdevs,
    }
}

/// The PF's VF table over rtnetlink, from its InfiniBand netdev (else its first).
pub(crate) fn pf_vf_configs(
    nl: &Netlink,
    pf: &Pf,
    notes: &mut Vec<Note>,
) -> Option<Vec<crate::netlink::vf::VfConfig>> {
    let mut best = None;
    for n in &pf.netdevs {
        if let Ok(Some(l)) = nl.link_by_name(n) {
            let ib = l.address.len() == 20;
            if best.is_none() || ib {
                best = Some(l);
            }
            if ib {
                break;
            }
        }
    }
    let l = best?;
    match nl.vf_configs(l.index) {
        Ok(v) => Some(v),
        Err(e) => {
            notes.push(Note::VfTable(pf.pci.clone(), l.name.clone(), e.to_string()));
            None
        }
    }
}

/// Our journals: every stateDir found ([`super::holders::discover`]; a directory reached
/// by two paths read once, by identity) and the Go cache dir, where earlier versions
/// journaled. Unreadable ones noted.
pub(crate) fn journal_list(
    found: &super::holders::Found,
    paths: &Paths,
    notes: &mut Vec<Note>,
) -> Vec<Journal> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, (dir, _, _)) in found.state_dirs.iter().enumerate() {
        if let Ok(m) = std::fs::metadata(dir) {
            if !seen.insert((m.dev(), m.ino())) {
                continue;
            }
        }
        let store = if i == 0 {
            JournalStore::with_legacy(dir, &paths.legacy)
        } else {
            JournalStore::new(dir)
        };
        match store.list() {
            Ok((ok, bad)) => {
                for e in bad {
                    let path = match &e {
                        crate::journal::JournalError::Io(p, _)
                        | crate::journal::JournalError::Unreadable(p, _)
                        | crate::journal::JournalError::Exists(p) => p.display().to_string(),
                        crate::journal::JournalError::Mismatch { path, .. } => {
                            path.display().to_string()
                        }
                    };
                    notes.push(Note::Unaccounted(format!("{path}: unusable")));
                    notes.push(Note::BadJournal(path, e.to_string()));
                }
                out.extend(ok);
            }
            Err(e) => notes.push(Note::Unreadable(dir.display().to_string(), e.to_string())),
        }
    }
    out
}

/// What the Go plugin cache file of complete journal `j` (of this boot) and the host say
/// about a rollback of its attachment; `None` when the file holds exactly what ADD wrote.
/// The file is looked for where the node has it (under the host root), else by its name
/// in the Go plugin's directory there. `go`: the Go cache files' holders by VF.
fn go_file(
    paths: &Paths,
    found: &super::holders::Found,
    host: Result<&crate::plugin::steps::Host, &crate::cni::CniError>,
    go: &BTreeMap<String, Vec<Holder>>,
    j: &Journal,
) -> Option<GoFile> {
    let live = netns_state(paths, j) != "gone";
    // A step whose content is empty wrote nothing (another file had the name).
    let Some((p, content)) = j.steps.iter().find_map(|s| match s {
        Step::GoCache { path, content } if !content.is_empty() => Some((path, content)),
        _ => None,
    }) else {
        return live.then_some(GoFile::None);
    };
    let there = |q: &Path| std::fs::symlink_metadata(q).is_ok();
    let at = [
        Some(paths.host(p)),
        p.file_name().map(|n| paths.legacy.join(n)),
    ]
    .into_iter()
    .flatten()
    .find(|q| there(q));
    let file = p.display().to_string();
    let name = JournalStore::file_name(&j.container_id, &j.ifname);
    let journal = found
        .state_dirs
        .iter()
        .find(|(d, _, _)| there(&d.join(&name)))
        .map(|(_, n, _)| Path::new(n).join(&name).display().to_string())
        .unwrap_or_else(|| format!("<stateDir>/{name}"));
    let unready = |why: String, missing: bool| {
        live.then(|| GoFile::Unready {
            file: file.clone(),
            why,
            journal: journal.clone(),
            missing,
        })
    };
    let Some(at) = at else {
        // Gone: what that means is read from the host, as our DEL reads it.
        let vf = j.vf.to_string();
        if let Some(h) = go
            .get(&vf)
            .into_iter()
            .flatten()
            .find(|h| h.source == "go-cache")
        {
            return Some(GoFile::UndoneByGo(format!(
                "VF {vf} is held by an attachment the Go plugin made since ({}/{})",
                h.container_id,
                h.ifname.as_deref().unwrap_or("?")
            )));
        }
        let read = host
            .map_err(|e| e.to_string())
            .and_then(|h| crate::plugin::steps::as_go_left(h, j).map_err(|e| e.to_string()));
        return match read {
            Ok(crate::plugin::steps::GoneFile::AsGoLeavesIt(found)) => {
                Some(GoFile::UndoneByGo(found))
            }
            Ok(crate::plugin::steps::GoneFile::NotUndone(found)) => unready(
                format!("is missing, and the VF is not as the Go plugin's DEL leaves it: {found}"),
                true,
            ),
            Err(e) => unready(
                format!("is missing, and whether the Go plugin's DEL undid the attachment cannot be read: {e}"),
                true,
            ),
        };
    };
    let why = match crate::fsutil::read_regular_bounded(&at, crate::gocache::MAX_GO_CACHE_BYTES) {
        Err(e) => format!("cannot be read: {e}"),
        Ok(b) if b == content.as_bytes() => return None,
        Ok(b) => match crate::gocache::parse(&b, at.clone()) {
            Err(crate::gocache::GoCacheError::Invalid(_, e)) => {
                format!("is not the one our ADD wrote: {e}")
            }
            Err(e) => format!("is not the one our ADD wrote: {e}"),
            Ok(g) if g.vf != j.vf => format!(
                "is not the one our ADD wrote: it records VF {} (the Go plugin's DEL would act on that VF)",
                g.vf
            ),
            Ok(g) if g.ours.is_none() => {
                "is not the one our ADD wrote: the Go plugin wrote it (no x-ib-sriov key)".to_string()
            }
            Ok(g) if g.pod_name.as_deref().unwrap_or_default()
                != if j.vfio { "" } else { j.ifname.as_str() } =>
            {
                format!(
                    "is not the one our ADD wrote: it records the pod interface {:?}, another attachment's",
                    g.pod_name.as_deref().unwrap_or_default()
                )
            }
            Ok(_) => "is not the one our ADD wrote: its content differs from the journal's copy".to_string(),
        },
    };
    unready(why, false)
}

/// Whether the journal's pod netns still exists and is the one ADD recorded.
fn netns_state(paths: &Paths, j: &Journal) -> &'static str {
    let Some(p) = j.netns.as_deref().filter(|p| !p.is_empty()) else {
        return "unknown";
    };
    match crate::netns::NetNs::open(paths.host(Path::new(p))) {
        Ok(ns) => match j.netns_id {
            Some(id) if crate::plugin::steps::ns_id(&ns).ok() != Some(id) => "gone",
            _ => "alive",
        },
        Err(e) if e.is_gone() => "gone",
        Err(_) => "unknown",
    }
}

/// Holders by VF PCI address: from our journals and from the Go cache files.
fn holders(
    paths: &Paths,
    journals: &[Journal],
    notes: &mut Vec<Note>,
) -> (BTreeMap<String, Vec<Holder>>, BTreeMap<String, Vec<Holder>>) {
    let mut ours: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
    for j in journals {
        let ips = j
            .steps
            .iter()
            .flat_map(|s| match s {
                Step::Ipam { ips, .. } => ips.iter().map(|ip| ip.to_string()).collect(),
                _ => Vec::new(),
            })
            .collect();
        ours.entry(j.vf.to_string()).or_default().push(Holder {
            source: "journal".into(),
            container_id: j.container_id.clone(),
            ifname: Some(j.ifname.clone()),
            netns: j.netns.clone(),
            netns_state: Some(netns_state(paths, j).into()),
            network: j.network.clone(),
            ips,
            complete: Some(j.complete),
            vfio: j.vfio,
        });
    }
    let mut go: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(&paths.legacy) {
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.') && !n.contains(':') && n != "locks" && n != "vfs")
            .collect();
        names.sort();
        for name in names {
            let p = paths.legacy.join(&name);
            match crate::fsutil::read_regular_bounded(&p, 1 << 20)
                .map_err(|e| e.to_string())
                .and_then(|b| crate::gocache::parse(&b, p.clone()).map_err(|e| e.to_string()))
            {
                // Our ADD's copy for a rollback to the Go plugin: the journal speaks
                // for the attachment while it exists.
                Ok(g)
                    if g.ours.is_some()
                        && ours.get(&g.vf.to_string()).is_some_and(|hs| {
                            hs.iter().any(|h| {
                                name == format!(
                                    "{}-{}",
                                    h.container_id,
                                    h.ifname.as_deref().unwrap_or_default()
                                )
                            })
                        }) => {}
                Ok(g) => go.entry(g.vf.to_string()).or_default().push(Holder {
                    source: if g.ours.is_some() {
                        "go-cache-by-ib-sriov".into()
                    } else {
                        "go-cache".into()
                    },
                    // The file is `<containerID>-<ifname>` (Go's SaveNetConf).
                    container_id: g
                        .pod_name
                        .as_deref()
                        .and_then(|i| name.strip_suffix(&format!("-{i}")))
                        .unwrap_or(&name)
                        .to_string(),
                    ifname: g.pod_name.clone(),
                    netns: None,
                    netns_state: None,
                    network: g.network.clone(),
                    ips: Vec::new(),
                    complete: None,
                    vfio: g.vfio,
                }),
                Err(e) => {
                    notes.push(Note::Unaccounted(format!("{}: unusable", p.display())));
                    notes.push(Note::BadJournal(p.display().to_string(), e));
                }
            }
        }
    }
    (ours, go)
}

/// The built-in IPAM stores: those our journals' configurations name, and every
/// directory under the default data dir with a `boot_id` marker (only ours writes it).
pub(crate) fn ipam(paths: &Paths, journals: &[Journal], notes: &mut Vec<Note>) -> Vec<IpamNetwork> {
    use crate::ipam::{DiskStore, IpamConfig, BOOT_MARKER_FILE};
    let mut stores: BTreeMap<(PathBuf, String), Option<IpamConfig>> = BTreeMap::new();
    for j in journals {
        let Some(ipam) = j.conf.get("ipam") else {
            continue;
        };
        if !crate::ipam::is_builtin(ipam) {
            continue;
        }
        if let Ok(c) = IpamConfig::from_json(ipam) {
            let dir = paths.host(c.data_dir());
            stores.insert((dir, j.network.clone()), Some(c));
        }
    }
    if let Ok(rd) = std::fs::read_dir(&paths.networks) {
        for e in rd.filter_map(|e| e.ok()) {
            if e.path().join(BOOT_MARKER_FILE).exists() {
                let name = e.file_name().to_string_lossy().into_owned();
                stores.entry((paths.networks.clone(), name)).or_insert(None);
            }
        }
    }
    let held: std::collections::HashSet<(String, String)> = journals
        .iter()
        .map(|j| (j.container_id.clone(), j.ifname.clone()))
        .collect();
    // One store reached through two paths (a symlinked or bind-mounted dataDir) is
    // listed once: the same directory by identity (device and inode), else by its
    // canonical path. Those a configuration names first: they know the range.
    let mut stores: Vec<_> = stores.into_iter().collect();
    stores.sort_by_key(|(_, conf)| conf.is_none());
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for ((dir, network), conf) in stores {
        let at = dir.join(&network);
        let id = match std::fs::metadata(&at) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino(), PathBuf::new())
            }
            Err(_) => (0, 0, std::fs::canonicalize(&at).unwrap_or(at)),
        };
        if !seen.insert(id) {
            continue;
        }
        let store = DiskStore::new(&dir, &network);
        let records = match store.scan() {
            Ok(r) => r,
            Err(e) => {
                notes.push(Note::Unreadable(
                    store.dir().display().to_string(),
                    e.to_string(),
                ));
                Vec::new()
            }
        };
        let mut orphans: Vec<String> = records
            .iter()
            .filter(|r| !held.contains(&(r.container_id.clone(), r.ifname.clone())))
            .map(|r| format!("{} {}/{}", r.ip, r.container_id, r.ifname))
            .collect();
        orphans.sort();
        out.push(IpamNetwork {
            dir: store.dir().display().to_string(),
            network,
            range: conf.as_ref().map(|c| {
                c.ranges
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
            allocated: records.len(),
            total: conf
                .as_ref()
                .map(|c| c.ranges.iter().map(|r| r.allocatable_count()).sum()),
            boot: store.boot_marker().ok().flatten().flatten(),
            orphans,
        });
    }
    out
}
