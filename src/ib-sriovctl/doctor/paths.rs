//! Where the doctor reads, all under one host root: sysfs, the stateDirs, the Go
//! plugin's cache, the built-in IPAM stores, the operator's GUID file and the CNI
//! plugin directories. Named by what reads the node ([`super::collect`],
//! [`super::holders`], [`super::node_defaults`]) and by the exporter and `top`.

use std::path::{Path, PathBuf};

/// Where the doctor reads, all under one host root.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The host root (`/`, or `--host-root`).
    pub root: PathBuf,
    /// `<root>/sys`, or `$IB_SRIOV_SYSFS_ROOT` without `--host-root`.
    pub sys: PathBuf,
    /// Each `--state-dir`, as the node names it; read besides the default
    /// `/run/ib-sriov` and every stateDir the CNI configurations name
    /// ([`super::holders::discover`]).
    pub extra_state: Vec<PathBuf>,
    /// The Go plugin's cache, also where earlier versions of ours journaled:
    /// `<root>/var/lib/cni/ib-sriov`.
    pub legacy: PathBuf,
    /// The default built-in IPAM data dir: `<root>/var/lib/cni/networks`.
    pub networks: PathBuf,
    /// The operator's VF GUID file: `<root>/etc/sriov-operator/infiniband/guids`.
    pub guid_file: PathBuf,
    /// Where `--conf` looks for delegated IPAM plugins, as the runtime's `CNI_PATH`
    /// would, as the node names the directories (each read under the root): what the
    /// node's runtime configuration says ([`super::cnipath::of_node`]), or `--cni-path`.
    pub cni_path: super::cnipath::CniPath,
}

impl Paths {
    /// The paths under `root`; `sys` overridden when given.
    pub fn under(root: &Path, sys: Option<PathBuf>) -> Paths {
        Paths {
            root: root.to_path_buf(),
            sys: sys.unwrap_or_else(|| root.join("sys")),
            extra_state: Vec::new(),
            legacy: root.join("var/lib/cni/ib-sriov"),
            networks: root.join("var/lib/cni/networks"),
            guid_file: root.join(
                crate::vfguid::DEFAULT_GUID_FILE
                    .strip_prefix('/')
                    .unwrap_or_default(),
            ),
            cni_path: super::cnipath::of_node(root),
        }
    }

    /// A host path (absolute, as recorded in a journal) under the root.
    pub fn host(&self, p: &Path) -> PathBuf {
        self.root.join(p.strip_prefix("/").unwrap_or(p))
    }
}
