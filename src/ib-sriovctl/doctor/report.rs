//! The doctor's view of a node: what it prints, as serde types. This is the `--json`
//! schema (docs/operations.md "Diagnosing a node"); [`SCHEMA_VERSION`] changes whenever a field is
//! removed or changes meaning (added fields keep it).

use serde::Serialize;

/// Version of the `--json` document. 1: this layout.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything `ib-sriov doctor` reports.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The plugin's version ([`crate::version`]).
    pub plugin_version: String,
    /// The host root everything was read under (`/` without `--host-root`).
    pub host_root: String,
    /// Kernel and subsystem facts.
    pub node: Node,
    /// SR-IOV PFs (every PCI device with `sriov_totalvfs`), by PCI address.
    pub pfs: Vec<Pf>,
    /// Their VFs, by PF then VF index.
    pub vfs: Vec<Vf>,
    /// The attachments of ours (one per journal), with the InfiniBand facts an admin
    /// puts into partitions and subnet-manager policies, by VF then attachment.
    pub attachments: Vec<Attachment>,
    /// Where holders of VFs were looked for: the stateDirs (the default, each
    /// `--state-dir`, each one a CNI configuration names), the Go cache dir, and the
    /// directories searched for configurations and runtime records
    /// ([`super::holders`]).
    pub holder_sources: Vec<super::holders::HolderSource>,
    /// Built-in IPAM networks (from journals and `boot_id` markers), by data dir and name.
    pub ipam: Vec<IpamNetwork>,
    /// The SR-IOV operator's VF GUID file the fallback GUIDs are read from.
    pub guid_file: GuidFileState,
    /// The node file (`/etc/ib-sriov/node.json`, [`crate::policy`]): path roots and
    /// the defaults it gives networks that lack a key.
    pub node_file: NodeFileState,
    /// `--conf` validation results, one per ib-sriov configuration in the file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conf: Vec<ConfCheck>,
    /// What is wrong, most severe first.
    pub findings: Vec<Finding>,
}

/// Kernel and subsystem facts.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// `/proc/sys/kernel/osrelease`; `None` when unreadable.
    pub kernel: Option<String>,
    /// `/proc/sys/kernel/random/boot_id`; `None` when unreadable.
    pub boot_id: Option<String>,
    /// Per module name (`mlx5_core`, `mlx5_ib`, `ib_ipoib`, `ib_uverbs`): loaded
    /// (`/sys/module/<name>` exists: loaded, or built in with parameters).
    pub modules: Vec<Module>,
    /// RDMA subsystem netns mode (`RDMA_NLDEV_CMD_SYS_GET`): `shared`, `exclusive`, or
    /// `None` when the RDMA netlink family did not answer.
    pub rdma_netns_mode: Option<String>,
    /// Where VF GUIDs are read: `netlink` (`IFLA_VF_IB_NODE_GUID` in the PF's
    /// `IFLA_VFINFO_LIST`), `mlnx-ofed-sysfs` (`<PF>/sriov/<N>/node`), or `none`.
    pub vf_guid_source: String,
}

/// One kernel module's presence.
#[derive(Debug, Serialize)]
pub struct Module {
    /// Module name.
    pub name: String,
    /// `/sys/module/<name>` exists.
    pub loaded: bool,
}

/// One SR-IOV PF.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pf {
    /// PCI address.
    pub pci: String,
    /// Netdev names under `<PF>/net/` (in this netns).
    pub netdevs: Vec<String>,
    /// Bound driver, or `None`.
    pub driver: Option<String>,
    /// `InfiniBand` when a netdev of the PF has `type` 32 (ARPHRD_INFINIBAND,
    /// include/uapi/linux/if_arp.h), `Ethernet` for type 1, else `unknown`.
    pub link_layer: String,
    /// `sriov_numvfs`.
    pub num_vfs: Option<u32>,
    /// `sriov_totalvfs`.
    pub total_vfs: Option<u32>,
    /// The PF's port GUID, which derived VF GUIDs are made from
    /// ([`crate::vfguid::pf_port_guid`]: `<PF>/infiniband/<dev>/ports/1/gids/0`, else the
    /// PF IPoIB netdev's address), or `None`.
    pub port_guid: Option<String>,
}

/// The operator's VF GUID file (docs/configuration.md "VFs without a GUID").
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuidFileState {
    /// The file, as a host path (`/etc/sriov-operator/infiniband/guids` or `--guid-file`).
    pub path: String,
    /// `absent`, `valid` or `invalid`.
    pub state: String,
    /// Number of entries, when valid.
    pub entries: Option<usize>,
    /// Why it is invalid.
    pub error: Option<String>,
}

/// The node file ([`crate::policy::NODE_FILE`], read under the host root).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFileState {
    /// The file, as a host path (`/etc/ib-sriov/node.json`).
    pub path: String,
    /// `absent` (the built-in path roots, no defaults), `valid` or `invalid`.
    pub state: String,
    /// Its `defaults` ([`crate::policy::NodeDefaults`]), when valid: the value of a
    /// network key the node supplies when a configuration lacks it.
    pub defaults: crate::policy::NodeDefaults,
    /// Why it is invalid.
    pub error: Option<String>,
}

/// One VF.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Vf {
    /// PCI address.
    pub pci: String,
    /// Its PF's PCI address.
    pub pf: String,
    /// N of the PF's `virtfn<N>`.
    pub index: u32,
    /// Bound driver (`mlx5_core`, `vfio-pci`, ...) or `None`.
    pub driver: Option<String>,
    /// Its netdevs in this (the host) netns, with admin and carrier state.
    pub netdevs: Vec<Netdev>,
    /// `in-host`, `in-pod` (a holder's journal moved it), or `none`.
    pub netdev_location: String,
    /// RDMA devices under `<VF>/infiniband/` (in this netns).
    pub rdma_devices: Vec<String>,
    /// Node GUID as the PF reports it (netlink or MLNX_OFED sysfs), `aa:bb:...`.
    pub node_guid: Option<String>,
    /// Port GUID, likewise.
    pub port_guid: Option<String>,
    /// The port GUID in the hardware address of its IPoIB netdev in the host, when it
    /// has one there (the truth on mlx5, whose PF reports zero for a GUID it did not set).
    pub ipoib_guid: Option<String>,
    /// Link-state policy as the PF reports it: `auto`, `enable`, `disable`.
    pub link_state: Option<String>,
    /// The GUID the operator's GUID file gives this VF, when an entry names its PF.
    pub file_guid: Option<String>,
    /// That entry's index in the file.
    pub file_entry: Option<usize>,
    /// Why the file gives it none though an entry names its PF (index past the end).
    pub file_error: Option<String>,
    /// The GUID `deriveGuid` gives it ([`crate::vfguid::derived_guid`]), when the PF's
    /// port GUID is known.
    pub derived_guid: Option<String>,
    /// Who holds it.
    pub holders: Vec<Holder>,
    /// The pkey table of port 1 of its RDMA device in this netns
    /// (`<VF>/infiniband/<dev>/ports/1/pkeys/<i>`, in index order, `0x....`); empty
    /// without an RDMA device here or when unreadable.
    pub pkeys: Vec<String>,
}

/// One attachment of ours, from its journal (docs/operations.md "Diagnosing a node").
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// The pod as CNI_ARGS named it at ADD: `K8S_POD_NAMESPACE/K8S_POD_NAME`; `None`
    /// when the runtime sent neither.
    pub pod: Option<String>,
    /// `K8S_POD_UID`, when sent.
    pub pod_uid: Option<String>,
    /// `CNI_CONTAINERID/CNI_IFNAME`.
    pub attachment: String,
    /// Network name.
    pub network: String,
    /// The VF's PCI address.
    pub vf: String,
    /// The VF's port GUID for this attachment: the journal's (set or kept at ADD), else
    /// the VF's current port GUID, else the GUID of the journal's GUID step
    /// (`doctor::collect::attachment_port_guid`; the exporter's `port_guid` label).
    pub guid: Option<String>,
    /// Its PF's port GUID: the journal's (read at ADD), else the PF's now.
    pub pf_port_guid: Option<String>,
    /// The network's `pkey` (`0x....`), when set.
    pub pkey: Option<String>,
    /// Whether that pkey (all 16 bits) is in the VF's pkey table ([`Vf::pkeys`]);
    /// `None` without a pkey or a readable table.
    pub pkey_in_table: Option<bool>,
    /// The VF's RDMA device: the one ADD moved into the pod, else the VF's in this
    /// netns; `None` in vfio mode or without one.
    pub rdma_device: Option<String>,
}

/// A netdev of a VF in the host netns.
#[derive(Debug, Serialize)]
pub struct Netdev {
    /// Name.
    pub name: String,
    /// IFF_UP.
    pub up: bool,
    /// IFF_LOWER_UP (carrier).
    pub carrier: bool,
}

/// An attachment holding a VF.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// `journal` (ours) or `go-cache` (the Go ib-sriov-cni's cache file).
    pub source: String,
    /// CNI_CONTAINERID (journal), or the Go cache file name (`<containerID>-<ifname>`).
    pub container_id: String,
    /// CNI_IFNAME (journal only).
    pub ifname: Option<String>,
    /// The pod netns path recorded at ADD.
    pub netns: Option<String>,
    /// `alive`, `gone` or `unknown` (journal only).
    pub netns_state: Option<String>,
    /// Network name.
    pub network: String,
    /// Addresses recorded by the built-in IPAM.
    pub ips: Vec<String>,
    /// ADD completed.
    pub complete: Option<bool>,
    /// vfio-pci mode.
    pub vfio: bool,
}

/// A built-in IPAM network store.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamNetwork {
    /// `<dataDir>/<network>`.
    pub dir: String,
    /// Network name.
    pub network: String,
    /// host-local's range-set text (`start-end,...`), when a journal's configuration
    /// names this store.
    pub range: Option<String>,
    /// Address records.
    pub allocated: usize,
    /// Allocatable addresses, when the range is known.
    pub total: Option<u128>,
    /// The `boot_id` marker's boot, when present.
    pub boot: Option<String>,
    /// Records whose (containerID, ifname) holds no journal: `ip containerID/ifname`.
    pub orphans: Vec<String>,
}

/// `--conf` validation of one ib-sriov network configuration.
#[derive(Debug, Serialize)]
pub struct ConfCheck {
    /// The configuration's `name`, or `?`.
    pub name: String,
    /// The NetworkAttachmentDefinition it is the `spec.config` of (`namespace/name`);
    /// absent for a node's file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nad: Option<String>,
    /// Valid as ADD would parse it.
    pub ok: bool,
    /// The error ADD would answer (CNI code and message), when not valid.
    pub error: Option<String>,
}

/// Severity of a finding: `error` makes the exit status 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something blocks or will block attachments.
    Error,
    /// Something stale or suspicious that does not block by itself.
    Warning,
    /// A partial view or a fact worth knowing.
    Info,
}

impl Severity {
    /// `error`, `warning`, `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// One thing wrong, with its fix.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// Stable identifier (docs/operations.md "Diagnosing a node" lists them), e.g. `netns-gone`.
    pub code: String,
    /// What it is about: a VF's PCI address, a journal, a path.
    pub subject: String,
    /// What is wrong.
    pub message: String,
    /// The fix, in one line.
    pub fix: String,
}
