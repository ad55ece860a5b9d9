//! The emulated host: an SR-IOV InfiniBand host without InfiniBand hardware, for
//! integration tests (`mod common;`), and for the demo and bench scripts through
//! `examples/emuhost.rs` (`target/release/examples/emuhost`).
//!
//! An [`EmuHost`] is
//! - a sysfs tree under a root directory (a temp dir by default) laid out as the kernel
//!   lays out `/sys` for a ConnectX PF with VFs (facts.md section 2), every link relative
//!   and resolving through the filesystem; point the plugin at it with
//!   `IB_SRIOV_SYSFS_ROOT=<root>`;
//! - a private "host" network namespace `<prefix>-host` in which veth pairs stand in for
//!   the PF netdev and the VF netdevs: one end carries the netdev name listed in sysfs,
//!   the peer end (`peer-pf`, `peer-vf<N>`) stays in the host netns;
//! - [`EmuHost::run_plugin`], which runs the plugin binary inside that netns with the
//!   environment a container runtime sets.
//!
//! Layout (defaults; see the constants below):
//! ```text
//! root port 0000:ae:00.0  <root>/devices/pci0000:ae/0000:ae:00.0            pcieport
//! PF        0000:af:00.0  .../0000:ae:00.0/0000:af:00.0  netdev ibp175s0f0   mlx5_0  mlx5_core
//!           mlx5_0/ports/1/gids/0 = fe80:0000:0000:0000:0c42:a103:00b1:c2d2 (PF_PORT_GUID)
//! VF N      routing ID 0xaf00 + 2 + N (SR-IOV offset 2, stride 1):
//!           N=0 0000:af:00.2, N=5 0000:af:00.7, N=6 0000:af:01.0, ...
//!           netdev ibp175s0f0v<N>, RDMA mlx5_<N+1>, pkeys/0 = 0xffff, pkeys/1 = 0x8000|(N+1)
//!           driver mlx5_core, or vfio-pci (then no net/ and no infiniband/ entries)
//! OFED      <PF>/sriov/<N>/node = 02:00:00:00:00:01:00:<N>, port = 02:00:00:00:00:02:00:<N>
//!           (hex N), policy = Follow
//! MTU       2044 on the PF and VF netdevs (IPoIB datagram mode)
//! ```
//! Limits of the emulation: the tree is static. Writing `bind`/`unbind` only records the
//! BDF in that regular file; OFED writes change only the file. sysfs `net/` entries do
//! not follow a netdev into another netns by themselves: call [`EmuHost::sync_netdevs`]
//! to make the tree show what the kernel would show. veths have 6-byte MAC addresses,
//! not 20-byte IPoIB addresses, and no VF netlink (GUID, link state) on the PF.
//!
//! Depends only on std and the crate's dependencies (nix, serde_json, tempfile).
#![allow(dead_code)]

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The PCI root complex and root port directory the PF sits behind, relative to the root.
pub const PCI_PARENT: &str = "devices/pci0000:ae/0000:ae:00.0";
/// The root port's address (a PCI device that is neither PF nor VF).
pub const ROOT_PORT_BDF: &str = "0000:ae:00.0";
/// The PF's address.
pub const PF_BDF: &str = "0000:af:00.0";
/// The PF's netdev name (udev path naming: bus 0xaf = 175, slot 0, function 0).
pub const PF_NETDEV: &str = "ibp175s0f0";
/// The host-side peer of the PF veth.
pub const PF_PEER: &str = "peer-pf";
/// The PF's RDMA device.
pub const PF_RDMA: &str = "mlx5_0";
/// The PF's port GUID, in GID 0 of port 1 of its RDMA device
/// (`<PF>/infiniband/mlx5_0/ports/1/gids/0`, as the kernel prints it: eight groups of
/// four hex digits, subnet prefix fe80::/64 then the port GUID).
pub const PF_PORT_GUID: &str = "0c:42:a1:03:00:b1:c2:d2";
/// Driver of the PF and of non-vfio VFs.
pub const MLX5_CORE: &str = "mlx5_core";
/// Driver of vfio VFs.
pub const VFIO_PCI: &str = "vfio-pci";
/// Default MTU of the PF and VF netdevs (IPoIB datagram mode).
pub const DEFAULT_MTU: u32 = 2044;
/// Name of the description file written into the root (also the "this is ours" marker).
pub const MARKER: &str = ".emuhost.json";

/// The second PF's address ([`EmuOptions::pf1_vfs`]).
pub const PF1_BDF: &str = "0000:af:00.1";
/// The second PF's netdev name.
pub const PF1_NETDEV: &str = "ibp175s0f1";
/// The host-side peer of the second PF's veth.
pub const PF1_PEER: &str = "peer-pf1";
/// The second PF's RDMA device.
pub const PF1_RDMA: &str = "mlx5_128";
/// The second PF's port GUID.
pub const PF1_PORT_GUID: &str = "0c:42:a1:03:00:b1:c2:d3";
/// The second PF's SR-IOV offset (its VFs at routing ID 0xaf01 + 0x81 + N, clear of the
/// first PF's).
pub const PF1_VF_OFFSET: u32 = 0x81;
/// The PCI function passed through with vfio-pci ([`EmuOptions::passthrough`]): a PF
/// without SR-IOV, under the same root port.
pub const PASSTHROUGH_BDF: &str = "0000:b0:00.0";

/// Where network namespaces made by `ip netns add` are mounted.
pub const NETNS_DIR: &str = "/var/run/netns";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The PCI address of VF `n` of the PF at 0000:af:00.0 (offset 2, stride 1).
pub fn vf_bdf(n: u32) -> String {
    let rid = 0xaf00 + 2 + n;
    format!(
        "0000:{:02x}:{:02x}.{:x}",
        rid >> 8,
        (rid >> 3) & 0x1f,
        rid & 7
    )
}

/// The PCI address of VF `n` of PF `pf` (0: [`vf_bdf`]; 1: the second PF).
pub fn vf_bdf_on(pf: u32, n: u32) -> String {
    if pf == 0 {
        return vf_bdf(n);
    }
    let rid = 0xaf01 + PF1_VF_OFFSET + n;
    format!(
        "0000:{:02x}:{:02x}.{:x}",
        rid >> 8,
        (rid >> 3) & 0x1f,
        rid & 7
    )
}

/// The netdev name of VF `n` (systemd >= 249 style: PF name + `v<N>`).
pub fn vf_netdev(n: u32) -> String {
    format!("{PF_NETDEV}v{n}")
}

/// The host-side peer of VF `n`'s veth.
pub fn vf_peer(n: u32) -> String {
    format!("peer-vf{n}")
}

/// The RDMA device name of VF `n`.
pub fn vf_rdma(n: u32) -> String {
    format!("mlx5_{}", n + 1)
}

/// The initial OFED node GUID of VF `n` (all-zero with [`EmuOptions::zero_guids`]).
pub fn vf_node_guid(n: u32) -> String {
    format!("02:00:00:00:00:01:00:{:02x}", n & 0xff)
}

/// The initial OFED port GUID of VF `n` (all-zero with [`EmuOptions::zero_guids`]).
pub fn vf_port_guid(n: u32) -> String {
    format!("02:00:00:00:00:02:00:{:02x}", n & 0xff)
}

const ZERO_GUID: &str = "00:00:00:00:00:00:00:00";

/// The GID `fe80::<guid>` as sysfs prints it (`%pI6`: eight groups of four hex digits).
pub fn gid_text(guid: &str) -> String {
    let hex: String = guid.split(':').collect();
    format!(
        "fe80:0000:0000:0000:{}:{}:{}:{}",
        &hex[0..4],
        &hex[4..8],
        &hex[8..12],
        &hex[12..16]
    )
}

/// What to build.
#[derive(Debug, Clone)]
pub struct EmuOptions {
    /// Number of VFs (default 4; at most 127).
    pub vfs: u32,
    /// Indexes of the VFs bound to vfio-pci (default none).
    pub vfio: Vec<u32>,
    /// Whether the MLNX_OFED `<PF>/sriov/<N>/{node,port,policy}` files exist (default yes).
    pub ofed: bool,
    /// Start every OFED GUID at 00:00:00:00:00:00:00:00, as mlx5 reports an unassigned
    /// VF GUID (default no: distinct nonzero GUIDs).
    pub zero_guids: bool,
    /// MTU of the PF and VF netdevs (default 2044).
    pub mtu: u32,
    /// Name prefix of the network namespaces (default `ibemu-<pid>-<counter>`).
    pub prefix: Option<String>,
    /// Root of the sysfs tree: must be absent or empty (default a new temp dir).
    pub root: Option<PathBuf>,
    /// VFs of a second PF ([`PF1_BDF`]; default 0: no second PF). Its VF `n` is
    /// [`vf_bdf_on`]`(1, n)`, netdev `ibp175s0f1v<n>`, peer `peer1-vf<n>`, RDMA
    /// `mlx5_<129+n>`, OFED files as [`EmuOptions::ofed`] says.
    pub pf1_vfs: u32,
    /// Indexes of the second PF's VFs bound to vfio-pci.
    pub pf1_vfio: Vec<u32>,
    /// A PCI function without SR-IOV bound to vfio-pci at [`PASSTHROUGH_BDF`] (PF
    /// passthrough; default no).
    pub passthrough: bool,
}

impl Default for EmuOptions {
    fn default() -> Self {
        EmuOptions {
            vfs: 4,
            vfio: Vec::new(),
            ofed: true,
            zero_guids: false,
            mtu: DEFAULT_MTU,
            prefix: None,
            root: None,
            pf1_vfs: 0,
            pf1_vfio: Vec::new(),
            passthrough: false,
        }
    }
}

/// The emulated PF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmuPf {
    /// PCI address, [`PF_BDF`].
    pub addr: String,
    /// Its real directory, `<root>/devices/pci0000:ae/0000:ae:00.0/0000:af:00.0`.
    pub dir: PathBuf,
    /// Netdev (veth end in the host netns), [`PF_NETDEV`].
    pub netdev: String,
    /// Peer veth end in the host netns, [`PF_PEER`].
    pub peer: String,
    /// RDMA device, [`PF_RDMA`].
    pub rdma: String,
}

/// One emulated VF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmuVf {
    /// N of the PF's `virtfn<N>`.
    pub index: u32,
    /// Which PF: 0 (the first, [`PF_BDF`]) or 1 ([`PF1_BDF`]).
    pub pf: u32,
    /// PCI address ([`vf_bdf`]).
    pub addr: String,
    /// Its real directory under `<root>/devices/...`.
    pub dir: PathBuf,
    /// `mlx5_core` or `vfio-pci`.
    pub driver: String,
    /// Netdev name ([`vf_netdev`]); `None` for vfio VFs.
    pub netdev: Option<String>,
    /// Host-side peer veth ([`vf_peer`]); `None` for vfio VFs.
    pub peer: Option<String>,
    /// RDMA device ([`vf_rdma`]); `None` for vfio VFs.
    pub rdma: Option<String>,
    /// The pkey table of `infiniband/<rdma>/ports/1/pkeys/`; empty for vfio VFs.
    pub pkeys: Vec<u16>,
    /// `<PF dir>/sriov/<N>` when OFED files are emulated.
    pub ofed_dir: Option<PathBuf>,
    /// Initial content (without newline) of `sriov/<N>/node`.
    pub node_guid: Option<String>,
    /// Initial content (without newline) of `sriov/<N>/port`.
    pub port_guid: Option<String>,
}

impl EmuVf {
    /// True when bound to vfio-pci.
    pub fn is_vfio(&self) -> bool {
        self.driver == VFIO_PCI
    }
    /// `<PF>/sriov/<N>/node`.
    pub fn ofed_node(&self) -> Option<PathBuf> {
        self.ofed_dir.as_ref().map(|d| d.join("node"))
    }
    /// `<PF>/sriov/<N>/port`.
    pub fn ofed_port(&self) -> Option<PathBuf> {
        self.ofed_dir.as_ref().map(|d| d.join("port"))
    }
    /// `<PF>/sriov/<N>/policy`.
    pub fn ofed_policy(&self) -> Option<PathBuf> {
        self.ofed_dir.as_ref().map(|d| d.join("policy"))
    }
}

/// One link as `ip -j addr show` reports it, the parts that "the host is unchanged"
/// compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSnapshot {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub ifindex: u32,
    /// Administratively up (`UP` in the flags).
    pub up: bool,
    /// MTU.
    pub mtu: u32,
    /// Hardware address as `ip` prints it.
    pub address: String,
    /// Addresses as `local/prefixlen`, sorted.
    pub addrs: Vec<String>,
}

/// The observable state of the emulated host, for "exactly as before" assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSnapshot {
    /// Every link in the host netns, by ifindex.
    pub links: Vec<LinkSnapshot>,
    /// `(path relative to the root, content)` of every OFED node/port/policy file.
    pub ofed: Vec<(String, String)>,
}

impl HostSnapshot {
    /// The link named `name`, if present.
    pub fn link(&self, name: &str) -> Option<&LinkSnapshot> {
        self.links.iter().find(|l| l.name == name)
    }
}

/// A pod network namespace made by [`EmuHost::new_pod`]; deleted on drop.
#[derive(Debug)]
pub struct Pod {
    /// Namespace name (`<prefix>-pod<k>`).
    pub name: String,
    /// `/var/run/netns/<name>`: what a runtime passes as CNI_NETNS.
    pub path: PathBuf,
}

impl Pod {
    /// The path as a string, for CNI_NETNS.
    pub fn netns(&self) -> &str {
        self.path.to_str().expect("netns path is UTF-8")
    }

    /// True while the namespace is mounted.
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Deletes the namespace (`ip netns del`); Ok when already gone.
    pub fn delete(&self) -> io::Result<()> {
        delete_netns(&self.name)
    }

    /// Runs a command inside the pod netns.
    pub fn exec(&self, args: &[&str]) -> Output {
        exec_in_netns(&self.path, args, &[], None)
    }

    /// Names of the links in the pod netns (including `lo`).
    pub fn links(&self) -> Vec<String> {
        self.link_snapshots().into_iter().map(|l| l.name).collect()
    }

    /// The links in the pod netns with their state.
    pub fn link_snapshots(&self) -> Vec<LinkSnapshot> {
        netns_links(&self.name)
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if self.path.exists() {
            if let Err(e) = self.delete() {
                eprintln!("emuhost: deleting pod netns {}: {e}", self.name);
            }
        }
    }
}

/// The emulated host; see the module docs. Dropping it deletes the host netns (and with
/// it every veth) and the sysfs tree, unless [`EmuHost::keep`] was called.
#[derive(Debug)]
pub struct EmuHost {
    prefix: String,
    root: PathBuf,
    host_netns: String,
    mtu: u32,
    pf: EmuPf,
    vfs: Vec<EmuVf>,
    pf1: Option<EmuPf>,
    passthrough: Option<PathBuf>,
    keep: bool,
    pods: AtomicU32,
}

impl EmuHost {
    /// Builds the host; panics with the reason when it cannot (also when not root:
    /// tests that need the emulated host fail rather than skip).
    pub fn build(opts: EmuOptions) -> EmuHost {
        match EmuHost::try_build(opts) {
            Ok(h) => h,
            Err(e) => panic!("building the emulated host: {e}"),
        }
    }

    /// [`EmuHost::build`] returning the error instead of panicking.
    pub fn try_build(opts: EmuOptions) -> io::Result<EmuHost> {
        if !nix::unistd::geteuid().is_root() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the emulated host needs root (network namespaces, veth); run the tests as root",
            ));
        }
        // The suites' temporary paths through the node policy (tests/common/policy.rs);
        // not for the emuhost example (demo, bench), which keep to the default roots or
        // a private node file.
        #[cfg(test)]
        super::policy::widen_for_tests();
        if opts.vfs > 127 {
            return Err(invalid(format!("{} VFs: at most 127", opts.vfs)));
        }
        if let Some(&bad) = opts.vfio.iter().find(|&&i| i >= opts.vfs) {
            return Err(invalid(format!(
                "vfio VF index {bad} out of range (0..{})",
                opts.vfs
            )));
        }
        let auto_prefix = opts.prefix.is_none();
        let prefix = opts.prefix.clone().unwrap_or_else(|| {
            format!(
                "ibemu-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            )
        });
        if prefix.is_empty() || prefix.contains('/') || prefix.starts_with('.') {
            return Err(invalid(format!("invalid prefix {prefix:?}")));
        }
        let host_netns = format!("{prefix}-host");
        let host_path = Path::new(NETNS_DIR).join(&host_netns);
        if host_path.exists() {
            if auto_prefix {
                // Left over by a dead process that had our pid.
                delete_netns(&host_netns)?;
            } else {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("netns {host_netns} already exists; destroy that host first"),
                ));
            }
        }
        let root = match &opts.root {
            Some(r) => {
                fs::create_dir_all(r)?;
                if fs::read_dir(r)?.next().is_some() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("root {} is not empty", r.display()),
                    ));
                }
                fs::canonicalize(r)?
            }
            None => tempfile::Builder::new()
                .prefix(&format!("{prefix}-sysfs-"))
                .tempdir()?
                .keep()
                .canonicalize()?,
        };

        let parent = root.join(PCI_PARENT);
        let pf = EmuPf {
            addr: PF_BDF.to_string(),
            dir: parent.join(PF_BDF),
            netdev: PF_NETDEV.to_string(),
            peer: PF_PEER.to_string(),
            rdma: PF_RDMA.to_string(),
        };
        let pf1 = (opts.pf1_vfs > 0).then(|| EmuPf {
            addr: PF1_BDF.to_string(),
            dir: parent.join(PF1_BDF),
            netdev: PF1_NETDEV.to_string(),
            peer: PF1_PEER.to_string(),
            rdma: PF1_RDMA.to_string(),
        });
        let pf1_vfs: Vec<EmuVf> = (0..opts.pf1_vfs)
            .map(|n| {
                let vfio = opts.pf1_vfio.contains(&n);
                let addr = vf_bdf_on(1, n);
                let (node, port) = if opts.zero_guids {
                    (ZERO_GUID.to_string(), ZERO_GUID.to_string())
                } else {
                    (
                        format!("02:00:00:00:00:01:01:{:02x}", n & 0xff),
                        format!("02:00:00:00:00:02:01:{:02x}", n & 0xff),
                    )
                };
                EmuVf {
                    index: n,
                    pf: 1,
                    dir: parent.join(&addr),
                    addr,
                    driver: if vfio { VFIO_PCI } else { MLX5_CORE }.to_string(),
                    netdev: (!vfio).then(|| format!("{PF1_NETDEV}v{n}")),
                    peer: (!vfio).then(|| format!("peer1-vf{n}")),
                    rdma: (!vfio).then(|| format!("mlx5_{}", 129 + n)),
                    pkeys: if vfio {
                        Vec::new()
                    } else {
                        vec![0xffff, 0x8000 | (0x41 + n as u16)]
                    },
                    ofed_dir: opts
                        .ofed
                        .then(|| parent.join(PF1_BDF).join("sriov").join(n.to_string())),
                    node_guid: opts.ofed.then_some(node),
                    port_guid: opts.ofed.then_some(port),
                }
            })
            .collect();
        let vfs = (0..opts.vfs)
            .map(|n| {
                let vfio = opts.vfio.contains(&n);
                let addr = vf_bdf(n);
                let (node, port) = if opts.zero_guids {
                    (ZERO_GUID.to_string(), ZERO_GUID.to_string())
                } else {
                    (vf_node_guid(n), vf_port_guid(n))
                };
                EmuVf {
                    index: n,
                    pf: 0,
                    dir: parent.join(&addr),
                    addr,
                    driver: if vfio { VFIO_PCI } else { MLX5_CORE }.to_string(),
                    netdev: (!vfio).then(|| vf_netdev(n)),
                    peer: (!vfio).then(|| vf_peer(n)),
                    rdma: (!vfio).then(|| vf_rdma(n)),
                    pkeys: if vfio {
                        Vec::new()
                    } else {
                        vec![0xffff, 0x8000 | (n as u16 + 1)]
                    },
                    ofed_dir: opts
                        .ofed
                        .then(|| parent.join(PF_BDF).join("sriov").join(n.to_string())),
                    node_guid: opts.ofed.then_some(node),
                    port_guid: opts.ofed.then_some(port),
                }
            })
            .chain(pf1_vfs)
            .collect();
        let passthrough = opts.passthrough.then(|| parent.join(PASSTHROUGH_BDF));
        // From here on, Drop cleans up whatever was made if a later step fails.
        let host = EmuHost {
            prefix,
            root,
            host_netns,
            mtu: opts.mtu,
            pf,
            vfs,
            pf1,
            passthrough,
            keep: false,
            pods: AtomicU32::new(0),
        };
        host.make_tree(opts.vfs)?;
        host.make_netns()?;
        host.sync_netdevs()?;
        fs::write(
            host.root.join(MARKER),
            serde_json::to_string_pretty(&host.describe()).expect("JSON") + "\n",
        )?;
        Ok(host)
    }

    /// Re-opens a host made by `emuhost create` from the description in `<root>/.emuhost.json`.
    /// The returned host is kept (dropping it removes nothing) until [`EmuHost::unkeep`].
    pub fn attach(root: &Path) -> io::Result<EmuHost> {
        let text = fs::read_to_string(root.join(MARKER))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(io::Error::other)?;
        let s = |v: &serde_json::Value, k: &str| -> io::Result<String> {
            v[k].as_str()
                .map(str::to_string)
                .ok_or_else(|| invalid(format!("{MARKER}: missing string {k:?}")))
        };
        let os = |v: &serde_json::Value, k: &str| v[k].as_str().map(str::to_string);
        let pfv = &v["pf"];
        let pf = EmuPf {
            addr: s(pfv, "addr")?,
            dir: PathBuf::from(s(pfv, "dir")?),
            netdev: s(pfv, "netdev")?,
            peer: s(pfv, "peer")?,
            rdma: s(pfv, "rdma")?,
        };
        let mut vfs = Vec::new();
        for x in v["vfs"].as_array().into_iter().flatten() {
            vfs.push(EmuVf {
                index: x["index"].as_u64().unwrap_or_default() as u32,
                pf: x["pf"].as_u64().unwrap_or_default() as u32,
                addr: s(x, "addr")?,
                dir: PathBuf::from(s(x, "dir")?),
                driver: s(x, "driver")?,
                netdev: os(x, "netdev"),
                peer: os(x, "peer"),
                rdma: os(x, "rdma"),
                pkeys: x["pkeys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.as_str())
                    .filter_map(|p| u16::from_str_radix(p.trim_start_matches("0x"), 16).ok())
                    .collect(),
                ofed_dir: os(x, "ofed_dir").map(PathBuf::from),
                node_guid: os(x, "node_guid"),
                port_guid: os(x, "port_guid"),
            });
        }
        let pf1 = match v.get("pf1").filter(|p| p.is_object()) {
            Some(p) => Some(EmuPf {
                addr: s(p, "addr")?,
                dir: PathBuf::from(s(p, "dir")?),
                netdev: s(p, "netdev")?,
                peer: s(p, "peer")?,
                rdma: s(p, "rdma")?,
            }),
            None => None,
        };
        let passthrough = os(&v, "passthrough").map(PathBuf::from);
        Ok(EmuHost {
            pf1,
            passthrough,
            prefix: s(&v, "prefix")?,
            root: PathBuf::from(s(&v, "root")?),
            host_netns: s(&v, "host_netns")?,
            mtu: v["mtu"].as_u64().unwrap_or(u64::from(DEFAULT_MTU)) as u32,
            pf,
            vfs,
            keep: true,
            pods: AtomicU32::new(0),
        })
    }

    /// Keep the netns and the tree when this value is dropped (the CLI's `create`).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Undo [`EmuHost::keep`]: dropping removes everything again.
    pub fn unkeep(&mut self) {
        self.keep = false;
    }

    /// The name prefix of the namespaces.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The sysfs root, for `IB_SRIOV_SYSFS_ROOT`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host netns name (`<prefix>-host`).
    pub fn host_netns(&self) -> &str {
        &self.host_netns
    }

    /// `/var/run/netns/<prefix>-host`.
    pub fn host_netns_path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.host_netns)
    }

    /// The PF.
    pub fn pf(&self) -> &EmuPf {
        &self.pf
    }

    /// All VFs, by index (the first PF's, then the second PF's).
    pub fn vfs(&self) -> &[EmuVf] {
        &self.vfs
    }

    /// VF `n` of the first PF; panics when there is none.
    pub fn vf(&self, n: u32) -> &EmuVf {
        self.vf_on(0, n)
    }

    /// VF `n` of PF `pf` (0 or 1); panics when there is none.
    pub fn vf_on(&self, pf: u32, n: u32) -> &EmuVf {
        self.vfs
            .iter()
            .find(|v| v.pf == pf && v.index == n)
            .unwrap_or_else(|| panic!("the emulated host has no VF {n} on PF {pf}"))
    }

    /// The second PF ([`EmuOptions::pf1_vfs`]), if any.
    pub fn pf1(&self) -> Option<&EmuPf> {
        self.pf1.as_ref()
    }

    /// The directory of the vfio-pci passthrough function ([`EmuOptions::passthrough`]).
    pub fn passthrough_dir(&self) -> Option<&Path> {
        self.passthrough.as_deref()
    }

    /// The first VF bound to mlx5_core.
    pub fn first_netdev_vf(&self) -> &EmuVf {
        self.vfs
            .iter()
            .find(|v| v.pf == 0 && !v.is_vfio())
            .expect("the emulated host has no mlx5_core VF")
    }

    /// The first VF bound to vfio-pci.
    pub fn first_vfio_vf(&self) -> &EmuVf {
        self.vfs
            .iter()
            .find(|v| v.pf == 0 && v.is_vfio())
            .expect("the emulated host has no vfio-pci VF (set EmuOptions::vfio)")
    }

    /// The JSON description printed by `emuhost create` and stored in `<root>/.emuhost.json`.
    pub fn describe(&self) -> serde_json::Value {
        let p = |p: &Path| p.to_string_lossy().into_owned();
        serde_json::json!({
            "prefix": self.prefix,
            "root": p(&self.root),
            "host_netns": self.host_netns,
            "host_netns_path": p(&self.host_netns_path()),
            "mtu": self.mtu,
            "pf": {
                "addr": self.pf.addr,
                "dir": p(&self.pf.dir),
                "netdev": self.pf.netdev,
                "peer": self.pf.peer,
                "rdma": self.pf.rdma,
            },
            "pf1": self.pf1.as_ref().map(|pf| serde_json::json!({
                "addr": pf.addr,
                "dir": p(&pf.dir),
                "netdev": pf.netdev,
                "peer": pf.peer,
                "rdma": pf.rdma,
            })),
            "passthrough": self.passthrough.as_deref().map(p),
            "vfs": self.vfs.iter().map(|v| serde_json::json!({
                "index": v.index,
                "pf": v.pf,
                "addr": v.addr,
                "dir": p(&v.dir),
                "driver": v.driver,
                "netdev": v.netdev,
                "peer": v.peer,
                "rdma": v.rdma,
                "pkeys": v.pkeys.iter().map(|k| format!("0x{k:04x}")).collect::<Vec<_>>(),
                "ofed_dir": v.ofed_dir.as_deref().map(p),
                "node_guid": v.node_guid,
                "port_guid": v.port_guid,
            })).collect::<Vec<_>>(),
        })
    }

    /// Creates a pod netns `<prefix>-pod<k>` (`ip netns add`).
    pub fn new_pod(&self) -> Pod {
        let k = self.pods.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-pod{k}", self.prefix);
        let path = Path::new(NETNS_DIR).join(&name);
        if path.exists() {
            delete_netns(&name).expect("deleting a stale pod netns");
        }
        let out = run(Command::new("ip").args(["netns", "add", &name]));
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            stderr(&out)
        );
        let pod = Pod { name, path };
        let out = pod.exec(&["ip", "link", "set", "lo", "up"]);
        assert!(
            out.status.success(),
            "lo up in {}: {}",
            pod.name,
            stderr(&out)
        );
        pod
    }

    /// Runs the plugin `bin` inside the host netns with the environment a runtime sets:
    /// CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS (omitted when `netns` is empty),
    /// CNI_IFNAME, CNI_PATH (the binary's directory), IB_SRIOV_SYSFS_ROOT=<root>,
    /// IB_SRIOV_TEST_GO_LOCK ([`EmuHost::go_lock_path`]), PATH from this process, then `extra_env` (e.g. CNI_ARGS; overrides the above). Nothing
    /// else is inherited. `stdin_json` is written to its stdin.
    #[allow(clippy::too_many_arguments)]
    pub fn run_plugin(
        &self,
        bin: &Path,
        command: &str,
        container_id: &str,
        netns: &str,
        ifname: &str,
        stdin_json: &str,
        extra_env: &[(&str, &str)],
    ) -> Output {
        let stdin_json = self.node_conf(stdin_json);
        self.plugin_call(
            bin,
            command,
            container_id,
            netns,
            ifname,
            extra_env,
            |env, argv| {
                exec_in_netns(
                    &self.host_netns_path(),
                    argv,
                    env,
                    Some(stdin_json.as_bytes()),
                )
            },
        )
    }

    /// This node's Go plugin node lock (`/var/run/cni/ib-sriov/cni.lock` on a real node),
    /// `<root>/go-lock/cni.lock`, passed as `IB_SRIOV_TEST_GO_LOCK` to every plugin call
    /// (a `failpoints` build takes it; emulated hosts of parallel tests must not share
    /// the machine's).
    pub fn go_lock_path(&self) -> PathBuf {
        self.root.join("go-lock/cni.lock")
    }

    /// The network configuration as this emulated node runs it: an `ib-sriov`
    /// configuration without `goCacheDir` gets `<root>/go-cache`, this host's own
    /// `/var/lib/cni/ib-sriov` (every node has its own, as it has its own /sys: emulated
    /// hosts of parallel tests must not share one). Anything else is passed unchanged.
    pub fn node_conf(&self, stdin_json: &str) -> String {
        match serde_json::from_str::<serde_json::Value>(stdin_json) {
            Ok(mut v)
                if v.get("type").and_then(|t| t.as_str()) == Some("ib-sriov")
                    && v.get("goCacheDir").is_none() =>
            {
                v["goCacheDir"] = serde_json::json!(self.root.join("go-cache"));
                v.to_string()
            }
            _ => stdin_json.to_string(),
        }
    }

    /// [`EmuHost::run_plugin`] without waiting: the child has read its stdin when this
    /// returns (the config is written and the pipe closed), for tests that signal it.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_plugin(
        &self,
        bin: &Path,
        command: &str,
        container_id: &str,
        netns: &str,
        ifname: &str,
        stdin_json: &str,
        extra_env: &[(&str, &str)],
    ) -> std::process::Child {
        let stdin_json = self.node_conf(stdin_json);
        self.plugin_call(
            bin,
            command,
            container_id,
            netns,
            ifname,
            extra_env,
            |env, argv| {
                let mut child = spawn_in_netns(&self.host_netns_path(), argv, env, true);
                let mut pipe = child.stdin.take().expect("piped stdin");
                // A config is far below the pipe buffer: this cannot block.
                pipe.write_all(stdin_json.as_bytes())
                    .expect("writing the config");
                drop(pipe);
                child
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn plugin_call<T>(
        &self,
        bin: &Path,
        command: &str,
        container_id: &str,
        netns: &str,
        ifname: &str,
        extra_env: &[(&str, &str)],
        call: impl FnOnce(&[(&str, &str)], &[&str]) -> T,
    ) -> T {
        let cni_path = bin
            .parent()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let root = self.root.to_string_lossy().into_owned();
        let go_lock = self.go_lock_path().to_string_lossy().into_owned();
        let mut env: Vec<(&str, &str)> = vec![
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", container_id),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", &cni_path),
            ("IB_SRIOV_SYSFS_ROOT", &root),
            ("IB_SRIOV_TEST_GO_LOCK", &go_lock),
        ];
        if !netns.is_empty() {
            env.push(("CNI_NETNS", netns));
        }
        env.extend_from_slice(extra_env);
        let bin = bin.to_string_lossy();
        call(&env, &[&bin])
    }

    /// Runs a command inside the host netns.
    pub fn host_exec(&self, args: &[&str]) -> Output {
        exec_in_netns(&self.host_netns_path(), args, &[], None)
    }

    /// Runs `ip <args>` in the host netns and panics unless it succeeds.
    pub fn host_ip(&self, args: &[&str]) -> Output {
        let mut all = vec!["ip"];
        all.extend_from_slice(args);
        let out = self.host_exec(&all);
        assert!(
            out.status.success(),
            "ip {} in {}: {}",
            args.join(" "),
            self.host_netns,
            stderr(&out)
        );
        out
    }

    /// The links in the host netns.
    pub fn host_links(&self) -> Vec<LinkSnapshot> {
        netns_links(&self.host_netns)
    }

    /// The state of the host: links of the host netns and OFED files.
    pub fn snapshot(&self) -> HostSnapshot {
        let mut ofed = Vec::new();
        for vf in &self.vfs {
            for f in [vf.ofed_node(), vf.ofed_port(), vf.ofed_policy()]
                .into_iter()
                .flatten()
            {
                let rel = f
                    .strip_prefix(&self.root)
                    .unwrap_or(&f)
                    .to_string_lossy()
                    .into_owned();
                let content = fs::read_to_string(&f).unwrap_or_else(|e| format!("<{e}>"));
                ofed.push((rel, content));
            }
        }
        HostSnapshot {
            links: self.host_links(),
            ofed,
        }
    }

    /// Emulates what the kernel does for a physical VF netdev whose pod netns died: it
    /// comes back to the host (`default_device_exit`), down, keeping the name it had in
    /// the pod (`pod_name`) and its ifindex. A veth is destroyed with its netns instead,
    /// so this re-creates VF `n`'s pair exactly as in `orig` (ifindex, MAC, MTU of both
    /// ends; the peer's admin state), the VF end named `pod_name` and down, then syncs
    /// sysfs. Does nothing when the VF netdev was not destroyed (it is in the host, or
    /// still in a live netns after waiting up to 10 s for the netns cleanup). Errors: `ip link add` failing, or `orig` lacking the pair.
    pub fn return_destroyed_vf_netdev(
        &self,
        n: u32,
        pod_name: &str,
        orig: &HostSnapshot,
    ) -> io::Result<()> {
        self.return_destroyed_netdev_of(&self.vf(n).clone(), pod_name, orig)
    }

    /// Waits, up to `max`, until VF `vf`'s veth pair is gone from the host (its VF end
    /// was in a netns just deleted: the kernel frees a dead netns asynchronously, in
    /// `cleanup_net()` work, and the pair goes with it). True when it is gone.
    pub fn wait_pair_gone(&self, vf: &EmuVf, max: std::time::Duration) -> io::Result<bool> {
        let Some(peer) = vf.peer.as_deref() else {
            return Ok(true);
        };
        let deadline = std::time::Instant::now() + max;
        loop {
            let links = self.host_links_json()?;
            if !links.iter().any(|l| l["ifname"].as_str() == Some(peer)) {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// [`EmuHost::return_destroyed_vf_netdev`] for any VF (of either PF).
    pub fn return_destroyed_netdev_of(
        &self,
        vf: &EmuVf,
        pod_name: &str,
        orig: &HostSnapshot,
    ) -> io::Result<()> {
        let Some(peer) = vf.peer.as_deref() else {
            return Ok(());
        };
        // The kernel frees a dead netns asynchronously (cleanup_net work): wait, bounded,
        // for the pair to go. A pair whose VF end is in the host is left alone.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let links = self.host_links_json()?;
            let peer_link = links.iter().find(|l| l["ifname"].as_str() == Some(peer));
            let Some(peer_link) = peer_link else { break };
            let end = peer_link["link"].as_str();
            if end.is_some_and(|e| links.iter().any(|l| l["ifname"].as_str() == Some(e))) {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Ok(()); // still alive: its VF end is in a live netns
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.recreate_pair_of(vf, pod_name, orig)?;
        self.sync_netdevs()
    }

    /// Emulates the VF driver's probe (what a bind does on a real host: the driver
    /// creates the VF's netdev in the initial netns, and udev gives it its predictable
    /// name). While the returned guard lives, a thread polls
    /// `<root>/bus/pci/drivers/<mlx5_core>/bind` every 10 ms; a BDF written there of a VF
    /// still bound when the poll sees it (the kernel's bind probes synchronously, so an
    /// unbind by a test after the write comes after the probe) whose VF netdev is in no
    /// netns any more (its veth peer is gone from the host netns) has
    /// its pair re-created as in `orig` under the VF's original name, down, and the
    /// tree synced ([`EmuHost::recreate_vf_pair`], [`EmuHost::sync_netdevs`]); a VF whose
    /// netdev still exists is left as it is (the GUID-change rebinds of other tests).
    /// Every bind seen is recorded in [`ProbeEmu::binds`] with whether it re-created.
    pub fn probe_on_bind(&self, orig: &HostSnapshot) -> ProbeEmu {
        self.probe_impl(orig, false)
    }

    /// [`EmuHost::probe_on_bind`] that also syncs sysfs after a bind whose VF netdev
    /// still exists (a real probe lists the netdev under `<VF>/net/` wherever it was),
    /// for callers that keep the tree in sync with the netns (tests/explore.rs).
    pub fn probe_on_bind_synced(&self, orig: &HostSnapshot) -> ProbeEmu {
        self.probe_impl(orig, true)
    }

    fn probe_impl(&self, orig: &HostSnapshot, sync_always: bool) -> ProbeEmu {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let binds = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (root, orig) = (self.root.clone(), orig.clone());
        let (stop2, binds2) = (stop.clone(), binds.clone());
        let thread = std::thread::spawn(move || {
            let host = EmuHost::attach(&root).expect("attach the emulated host");
            let bind = root.join("bus/pci/drivers").join(MLX5_CORE).join("bind");
            while !stop2.load(Ordering::Relaxed) {
                let bdf = fs::read_to_string(&bind).unwrap_or_default();
                let bdf = bdf.trim();
                if !bdf.is_empty() {
                    // Held while the bind is handled: whoever sees the netdev it
                    // re-creates sees this record too.
                    let mut seen = binds2.lock().unwrap();
                    let _ = fs::write(&bind, "");
                    let mut recreated = false;
                    // A VF whose driver link is gone was unbound (or removed) by
                    // someone else after this bind was written: on a real host the
                    // bind's synchronous probe came first and that unbind took its
                    // netdev away, so there is nothing to create now.
                    let bound = |v: &EmuVf| fs::symlink_metadata(v.dir.join("driver")).is_ok();
                    if let Some(vf) = host.vfs.iter().find(|v| v.addr == bdf && bound(v)) {
                        let links = host.host_links_json().unwrap_or_default();
                        let peer_here = vf
                            .peer
                            .as_deref()
                            .is_some_and(|p| links.iter().any(|l| l["ifname"].as_str() == Some(p)));
                        if let (false, Some(name)) = (peer_here, vf.netdev.as_deref()) {
                            // udev cannot give the predictable name when another link
                            // holds it: the netdev keeps a kernel name (`ib<N>`).
                            let taken = links.iter().any(|l| l["ifname"].as_str() == Some(name));
                            let kname = format!("ib{}", vf.index + 100 * vf.pf);
                            let name = if taken { kname.as_str() } else { name };
                            host.recreate_pair_of(vf, name, &orig)
                                .and_then(|()| host.sync_netdevs())
                                .expect("re-creating the VF pair");
                            recreated = true;
                        } else if sync_always {
                            let _ = host.sync_netdevs();
                        }
                    }
                    seen.push((bdf.to_string(), recreated));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
        ProbeEmu {
            bind: self
                .root
                .join("bus/pci/drivers")
                .join(MLX5_CORE)
                .join("bind"),
            stop,
            binds,
            thread: Some(thread),
        }
    }

    /// A driver probe that takes `delay`, for the start-up storm benchmark
    /// (`scripts/bench.sh --storm`): a real unbind takes the VF's netdev away at once and
    /// a bind brings it back only when the driver's probe has finished (mlx5: about
    /// 0.2-1 s). The `unbind` and `bind` files of `mlx5_core` become FIFOs, read here in
    /// turn, so the plugin's write of each blocks until this loop takes it: a BDF read
    /// from `unbind` has its `<VF>/net` directory hidden (renamed `.net-probing`) before
    /// `bind` is even opened for reading, and a BDF read from `bind` gets it back after
    /// `delay`. The plugin's wait for the netdev under `<VF>/net/` then lasts the probe.
    /// Runs until the process is killed (the FIFOs then block every later writer:
    /// only for a host used by nothing else). Returns the count of probes served when
    /// `max` (if given) is reached.
    pub fn fifo_probe(&self, delay: std::time::Duration, max: Option<usize>) -> io::Result<usize> {
        let drv = self.root.join("bus/pci/drivers").join(MLX5_CORE);
        let (unbind, bind) = (drv.join("unbind"), drv.join("bind"));
        for f in [&unbind, &bind] {
            let _ = fs::remove_file(f);
            nix::unistd::mkfifo(f.as_path(), nix::sys::stat::Mode::from_bits_truncate(0o600))
                .map_err(io::Error::from)?;
        }
        let take = |p: &Path| -> io::Result<String> {
            // Blocks until a writer opens it; EOF when that writer closes.
            Ok(fs::read_to_string(p)?.trim().to_string())
        };
        let net_dir = |bdf: &str| {
            self.vfs
                .iter()
                .find(|v| v.addr == bdf)
                .map(|v| v.dir.clone())
        };
        let mut served = 0;
        while max.is_none_or(|m| served < m) {
            let gone = take(&unbind)?;
            if let Some(d) = net_dir(&gone) {
                if d.join("net").exists() {
                    fs::rename(d.join("net"), d.join(".net-probing"))?;
                }
            }
            let back = take(&bind)?;
            std::thread::sleep(delay);
            for bdf in [&gone, &back] {
                if let Some(d) = net_dir(bdf) {
                    if d.join(".net-probing").exists() {
                        fs::rename(d.join(".net-probing"), d.join("net"))?;
                    }
                }
            }
            served += 1;
        }
        Ok(served)
    }

    /// Re-creates VF `n`'s veth pair in the host netns as it was in `orig` (ifindex,
    /// MAC and MTU of both ends, the peer's admin state), the VF end named `name` and
    /// down. Does not touch the emulated sysfs (see [`EmuHost::sync_netdevs`]).
    /// Errors: `orig` lacks the pair; panics when `ip link add` fails.
    pub fn recreate_vf_pair(&self, n: u32, name: &str, orig: &HostSnapshot) -> io::Result<()> {
        self.recreate_pair_of(self.vf(n), name, orig)
    }

    /// [`EmuHost::recreate_vf_pair`] for any VF (of either PF).
    pub fn recreate_pair_of(&self, vf: &EmuVf, name: &str, orig: &HostSnapshot) -> io::Result<()> {
        let (Some(dev), Some(peer)) = (vf.netdev.as_deref(), vf.peer.as_deref()) else {
            return Ok(());
        };
        let (Some(d), Some(p)) = (orig.link(dev), orig.link(peer)) else {
            return Err(invalid(format!("snapshot lacks {dev}/{peer}")));
        };
        let (di, dm, pi, pm) = (
            d.ifindex.to_string(),
            d.mtu.to_string(),
            p.ifindex.to_string(),
            p.mtu.to_string(),
        );
        self.host_ip(&[
            "link", "add", "name", name, "index", &di, "address", &d.address, "mtu", &dm, "type",
            "veth", "peer", "name", peer, "index", &pi, "address", &p.address, "mtu", &pm,
        ]);
        if p.up {
            self.host_ip(&["link", "set", peer, "up"]);
        }
        Ok(())
    }

    /// Makes the sysfs `net/` entries (and `class/net/`) show what the kernel would show
    /// from the host netns: a VF's or the PF's netdev is listed, under its current name,
    /// only while its veth end is in the host netns. Call after moving a netdev.
    pub fn sync_netdevs(&self) -> io::Result<()> {
        // One sync at a time in this process: the driver-probe emulation's thread
        // ([`EmuHost::probe_on_bind`]) syncs too, and two rebuilding the same links race.
        let _one = SYNC.lock().unwrap_or_else(|e| e.into_inner());
        let links = self.host_links_json()?;
        self.sync_from_locked(&links)
    }

    /// [`EmuHost::sync_netdevs`] from the host netns' links already read by the caller
    /// (objects with `ip -j link show`'s `ifname`, `ifindex`, `address`, `mtu` and, for
    /// a veth, `link`: its peer's name when the peer is in the same netns), for callers
    /// that read them faster than `ip -n` can (tests/explore.rs, over netlink).
    pub fn sync_netdevs_from(&self, links: &[serde_json::Value]) -> io::Result<()> {
        let _one = SYNC.lock().unwrap_or_else(|e| e.into_inner());
        self.sync_from_locked(links)
    }

    fn sync_from_locked(&self, links: &[serde_json::Value]) -> io::Result<()> {
        let by_name = |n: &str| links.iter().find(|l| l["ifname"].as_str() == Some(n));
        let class_net = self.root.join("class/net");
        for e in fs::read_dir(&class_net)? {
            fs::remove_file(e?.path())?;
        }
        let mut devices: Vec<(&Path, &str)> = vec![(&self.pf.dir, &self.pf.peer)];
        if let Some(pf1) = &self.pf1 {
            devices.push((&pf1.dir, &pf1.peer));
        }
        for vf in &self.vfs {
            if let Some(peer) = &vf.peer {
                devices.push((&vf.dir, peer));
            }
        }
        for (dir, peer) in devices {
            if !dir.exists() {
                continue; // a VF removed by [`EmuHost::remove_vf`]
            }
            let net = dir.join("net");
            if net.exists() {
                fs::remove_dir_all(&net)?;
            }
            fs::create_dir_all(&net)?;
            // The peer names its other end only while that end is in the same netns.
            let Some(name) = by_name(peer).and_then(|p| p["link"].as_str()) else {
                continue;
            };
            let Some(link) = by_name(name) else { continue };
            let d = net.join(name);
            fs::create_dir_all(&d)?;
            fs::write(
                d.join("ifindex"),
                format!("{}\n", link["ifindex"].as_u64().unwrap_or_default()),
            )?;
            fs::write(
                d.join("address"),
                format!("{}\n", link["address"].as_str().unwrap_or_default()),
            )?;
            fs::write(d.join("mtu"), format!("{}\n", link["mtu"]))?;
            self.link(&d.join("device"), dir)?;
            self.link(&class_net.join(name), &d)?;
        }
        Ok(())
    }

    fn host_links_json(&self) -> io::Result<Vec<serde_json::Value>> {
        ip_json(&["-n", &self.host_netns, "-j", "link", "show"])
    }

    /// Creates `link` as a relative symlink to `target` (both under the root), the way
    /// the kernel's links are relative.
    fn link(&self, link: &Path, target: &Path) -> io::Result<()> {
        let rel = relative_to(link.parent().expect("link has a parent"), target);
        symlink(rel, link)
    }

    fn make_tree(&self, numvfs: u32) -> io::Result<()> {
        let r = &self.root;
        for d in ["pcieport", MLX5_CORE, VFIO_PCI] {
            let dir = r.join("bus/pci/drivers").join(d);
            fs::create_dir_all(&dir)?;
            fs::write(dir.join("bind"), "")?;
            fs::write(dir.join("unbind"), "")?;
        }
        for d in ["bus/pci/devices", "class/net", "class/infiniband"] {
            fs::create_dir_all(r.join(d))?;
        }
        // Root port.
        let rp = r.join(PCI_PARENT);
        self.pci_device(&rp, "0x8086", "0x2030", "0x060400", Some("pcieport"))?;

        // PF.
        self.pf_tree(&self.pf, numvfs, 2, PF_PORT_GUID)?;
        if let Some(pf1) = &self.pf1 {
            let n1 = self.vfs.iter().filter(|v| v.pf == 1).count() as u32;
            self.pf_tree(pf1, n1, PF1_VF_OFFSET, PF1_PORT_GUID)?;
        }
        if let Some(pt) = &self.passthrough {
            self.pci_device(pt, "0x15b3", "0x101b", "0x020700", Some(VFIO_PCI))?;
        }
        for vf in &self.vfs {
            self.vf_tree(vf)?;
        }
        Ok(())
    }

    fn pf_tree(&self, pf: &EmuPf, numvfs: u32, offset: u32, port_guid: &str) -> io::Result<()> {
        let dir = &pf.dir;
        self.pci_device(dir, "0x15b3", "0x101b", "0x020700", Some(MLX5_CORE))?;
        let total = numvfs.max(8);
        fs::write(dir.join("sriov_totalvfs"), format!("{total}\n"))?;
        fs::write(dir.join("sriov_numvfs"), format!("{numvfs}\n"))?;
        fs::write(dir.join("sriov_offset"), format!("{offset}\n"))?;
        fs::write(dir.join("sriov_stride"), "1\n")?;
        fs::write(dir.join("sriov_vf_device"), "101c\n")?;
        self.rdma_device(dir, &pf.rdma, &[0xffff])?;
        let gids = dir.join("infiniband").join(&pf.rdma).join("ports/1/gids");
        fs::create_dir_all(&gids)?;
        fs::write(gids.join("0"), format!("{}\n", gid_text(port_guid)))
    }

    fn pf_of(&self, vf: &EmuVf) -> &EmuPf {
        match (&self.pf1, vf.pf) {
            (Some(pf1), 1) => pf1,
            _ => &self.pf,
        }
    }

    /// VF `vf`'s directory, links and OFED files as at creation.
    fn vf_tree(&self, vf: &EmuVf) -> io::Result<()> {
        let pf = &self.pf_of(vf).dir;
        self.pci_device(&vf.dir, "0x15b3", "0x101c", "0x020700", Some(&vf.driver))?;
        self.link(&vf.dir.join("physfn"), pf)?;
        self.link(&pf.join(format!("virtfn{}", vf.index)), &vf.dir)?;
        if let Some(rdma) = &vf.rdma {
            self.rdma_device(&vf.dir, rdma, &vf.pkeys)?;
        }
        if let Some(o) = &vf.ofed_dir {
            fs::create_dir_all(o)?;
            let node = vf.node_guid.as_deref().unwrap_or(ZERO_GUID);
            let port = vf.port_guid.as_deref().unwrap_or(ZERO_GUID);
            fs::write(o.join("node"), format!("{node}\n"))?;
            fs::write(o.join("port"), format!("{port}\n"))?;
            fs::write(o.join("policy"), "Follow\n")?;
        }
        Ok(())
    }

    /// Emulates unbinding VF `vf`'s driver: its `driver` link and the driver's back link
    /// go, and its netdev is torn down wherever it is (its veth pair deleted through the
    /// host-side peer), then sysfs is synced. Ok when already unbound.
    pub fn unbind_vf(&self, vf: &EmuVf) -> io::Result<()> {
        let bdf = vf.dir.file_name().expect("device dir has a name");
        let _ = fs::remove_file(vf.dir.join("driver"));
        let _ = fs::remove_file(self.root.join("bus/pci/drivers").join(&vf.driver).join(bdf));
        if let Some(peer) = &vf.peer {
            let _ = self.host_exec(&["ip", "link", "del", peer]);
        }
        self.sync_netdevs()
    }

    /// Emulates binding VF `vf`'s driver again after [`EmuHost::unbind_vf`] (or after
    /// [`EmuHost::restore_vf`]): the driver links come back and, when its pair is gone,
    /// the netdev is re-created as in `orig` under its original name with its original
    /// admin state. Then sysfs is synced.
    pub fn bind_vf(&self, vf: &EmuVf, orig: &HostSnapshot) -> io::Result<()> {
        let bdf = vf.dir.file_name().expect("device dir has a name");
        let drv_dir = self.root.join("bus/pci/drivers").join(&vf.driver);
        if fs::symlink_metadata(vf.dir.join("driver")).is_err() {
            self.link(&vf.dir.join("driver"), &drv_dir)?;
        }
        if fs::symlink_metadata(drv_dir.join(bdf)).is_err() {
            self.link(&drv_dir.join(bdf), &vf.dir)?;
        }
        if let (Some(name), Some(peer)) = (&vf.netdev, &vf.peer) {
            let links = self.host_links_json()?;
            let here = links
                .iter()
                .any(|l| l["ifname"].as_str() == Some(peer.as_str()));
            if !here {
                // The predictable name held by another link: the kernel name stays.
                let taken = links.iter().any(|l| l["ifname"].as_str() == Some(name));
                let kname = format!("ib{}", vf.index + 100 * vf.pf);
                let now = if taken { kname.as_str() } else { name.as_str() };
                self.recreate_pair_of(vf, now, orig)?;
                if orig.link(name).is_some_and(|l| l.up) {
                    self.host_ip(&["link", "set", now, "up"]);
                }
            }
        }
        self.sync_netdevs()
    }

    /// Emulates lowering `sriov_numvfs` so that VF `vf` no longer exists: its directory
    /// (moved aside), `virtfn<N>` link, `bus/pci/devices` entry, driver back link and
    /// RDMA class link go, its netdev is torn down wherever it is, and the PF's
    /// `sriov_numvfs` drops by one. [`EmuHost::restore_vf`] undoes it.
    pub fn remove_vf(&self, vf: &EmuVf) -> io::Result<()> {
        let pf = &self.pf_of(vf).dir;
        let bdf = vf.dir.file_name().expect("device dir has a name");
        if !vf.dir.exists() {
            return Ok(());
        }
        if let Some(peer) = &vf.peer {
            let _ = self.host_exec(&["ip", "link", "del", peer]);
        }
        let _ = fs::remove_file(pf.join(format!("virtfn{}", vf.index)));
        let _ = fs::remove_file(self.root.join("bus/pci/devices").join(bdf));
        let _ = fs::remove_file(self.root.join("bus/pci/drivers").join(&vf.driver).join(bdf));
        if let Some(rdma) = &vf.rdma {
            let _ = fs::remove_file(self.root.join("class/infiniband").join(rdma));
        }
        if let Some(o) = &vf.ofed_dir {
            let _ = fs::remove_dir_all(o);
        }
        fs::remove_dir_all(&vf.dir)?;
        let n = fs::read_to_string(pf.join("sriov_numvfs"))?;
        let n: u32 = n.trim().parse().unwrap_or(1);
        fs::write(
            pf.join("sriov_numvfs"),
            format!("{}\n", n.saturating_sub(1)),
        )?;
        self.sync_netdevs()
    }

    /// Undoes [`EmuHost::remove_vf`]: the VF is created again as at the start (tree,
    /// OFED files with their initial content, driver bound, netdev as in `orig`).
    pub fn restore_vf(&self, vf: &EmuVf, orig: &HostSnapshot) -> io::Result<()> {
        if vf.dir.join("vendor").exists() {
            return Ok(());
        }
        let pf = &self.pf_of(vf).dir;
        self.vf_tree(vf)?;
        let n = fs::read_to_string(pf.join("sriov_numvfs"))?;
        let n: u32 = n.trim().parse().unwrap_or(0);
        fs::write(pf.join("sriov_numvfs"), format!("{}\n", n + 1))?;
        self.bind_vf(vf, orig)
    }

    /// `<dir>` with vendor/device/class files, the `bus/pci/devices/<BDF>` link, the
    /// `driver` link and the driver's back link.
    fn pci_device(
        &self,
        dir: &Path,
        vendor: &str,
        device: &str,
        class: &str,
        driver: Option<&str>,
    ) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        let bdf = dir.file_name().expect("device dir has a name");
        fs::write(dir.join("vendor"), format!("{vendor}\n"))?;
        fs::write(dir.join("device"), format!("{device}\n"))?;
        fs::write(dir.join("class"), format!("{class}\n"))?;
        self.link(&self.root.join("bus/pci/devices").join(bdf), dir)?;
        if let Some(drv) = driver {
            let drv_dir = self.root.join("bus/pci/drivers").join(drv);
            self.link(&dir.join("driver"), &drv_dir)?;
            self.link(&drv_dir.join(bdf), dir)?;
        }
        Ok(())
    }

    /// `<dev>/infiniband/<name>/ports/1/pkeys/<i>`, its `device` link and the
    /// `class/infiniband/<name>` link.
    fn rdma_device(&self, dev: &Path, name: &str, pkeys: &[u16]) -> io::Result<()> {
        let d = dev.join("infiniband").join(name);
        let pk = d.join("ports/1/pkeys");
        fs::create_dir_all(&pk)?;
        for (i, k) in pkeys.iter().enumerate() {
            fs::write(pk.join(i.to_string()), format!("0x{k:04x}\n"))?;
        }
        fs::write(d.join("ports/1/state"), "4: ACTIVE\n")?;
        self.link(&d.join("device"), dev)?;
        self.link(&self.root.join("class/infiniband").join(name), &d)
    }

    fn make_netns(&self) -> io::Result<()> {
        let out = run(Command::new("ip").args(["netns", "add", &self.host_netns]));
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "ip netns add {}: {}",
                self.host_netns,
                stderr(&out)
            )));
        }
        // No IPv6 link-local addresses on the host's netdevs: they would appear
        // asynchronously (link watch) and make snapshots flaky. Best effort (IPv6 may
        // be absent).
        let _ = self.host_exec(&[
            "sh",
            "-c",
            "echo 1 > /proc/sys/net/ipv6/conf/default/addr_gen_mode",
        ]);
        let mut batch = String::from("link set lo up\n");
        let mut pairs = vec![(self.pf.netdev.as_str(), self.pf.peer.as_str())];
        if let Some(pf1) = &self.pf1 {
            pairs.push((pf1.netdev.as_str(), pf1.peer.as_str()));
        }
        for vf in &self.vfs {
            if let (Some(n), Some(p)) = (&vf.netdev, &vf.peer) {
                pairs.push((n, p));
            }
        }
        for (n, p) in &pairs {
            batch += &format!(
                "link add {n} mtu {} type veth peer name {p} mtu {}\n",
                self.mtu, self.mtu
            );
        }
        for (n, p) in &pairs {
            batch += &format!("link set {p} up\nlink set {n} up\n");
        }
        let mut child = Command::new("ip")
            .args(["-n", &self.host_netns, "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(batch.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "ip -n {} -batch: {}\nbatch:\n{batch}",
                self.host_netns,
                stderr(&out)
            )));
        }
        Ok(())
    }
}

impl Drop for EmuHost {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Err(e) = delete_netns(&self.host_netns) {
            eprintln!("emuhost: deleting {}: {e}", self.host_netns);
        }
        if let Err(e) = fs::remove_dir_all(&self.root) {
            if e.kind() != io::ErrorKind::NotFound {
                eprintln!("emuhost: removing {}: {e}", self.root.display());
            }
        }
    }
}

/// One sync of the emulated sysfs at a time in this process (see
/// [`EmuHost::sync_netdevs`]).
static SYNC: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Deletes a named netns (`ip netns del`); Ok when it does not exist.
pub fn delete_netns(name: &str) -> io::Result<()> {
    if !Path::new(NETNS_DIR).join(name).exists() {
        return Ok(());
    }
    let out = run(Command::new("ip").args(["netns", "del", name]));
    if out.status.success() || !Path::new(NETNS_DIR).join(name).exists() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip netns del {name}: {}",
            stderr(&out)
        )))
    }
}

/// Runs `args` with its network namespace switched to the one mounted at `netns` (setns
/// in the child between fork and exec, so the caller's threads are untouched). With
/// `env` non-empty the environment is exactly PATH plus `env`. Panics when the program
/// cannot be started.
pub fn exec_in_netns(
    netns: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&[u8]>,
) -> Output {
    let (prog, _) = args.split_first().expect("a command");
    let mut child = spawn_in_netns(netns, args, env, stdin.is_some());
    let writer = stdin.map(|data| {
        let mut pipe = child.stdin.take().expect("piped stdin");
        let data = data.to_vec();
        // A separate thread, so a child that writes before reading cannot deadlock us.
        std::thread::spawn(move || {
            // The child may exit without reading: EPIPE is its business.
            let _ = pipe.write_all(&data);
        })
    });
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {prog}: {e}"));
    if let Some(w) = writer {
        let _ = w.join();
    }
    out
}

/// Starts `args` in the netns mounted at `netns` like [`exec_in_netns`] and returns the
/// child without waiting (stdout/stderr piped; stdin piped when `piped_stdin`, else
/// null), for tests that signal a running plugin.
pub fn spawn_in_netns(
    netns: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    piped_stdin: bool,
) -> std::process::Child {
    let (prog, rest) = args.split_first().expect("a command");
    let ns = open_netns(netns);
    let mut cmd = Command::new(prog);
    cmd.args(rest);
    if !env.is_empty() {
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
    }
    cmd.stdin(if piped_stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    exec_in_netns_file(&mut cmd, ns);
    cmd.spawn()
        .unwrap_or_else(|e| panic!("starting {prog} in {}: {e}", netns.display()))
}

/// The network namespace mounted at `netns`, open (O_CLOEXEC); panics naming it when it
/// cannot be opened.
pub fn open_netns(netns: &Path) -> fs::File {
    fs::File::open(netns).unwrap_or_else(|e| panic!("opening netns {}: {e}", netns.display()))
}

/// Makes `cmd` run in network namespace `ns` (an open nsfs file, [`open_netns`]): the
/// child enters it with setns(2) between fork and exec.
pub fn exec_in_netns_file(cmd: &mut Command, ns: fs::File) {
    // SAFETY: the closure runs in the forked child before exec and only calls setns(2),
    // which is async-signal-safe; `ns` is an fd opened (O_CLOEXEC) before the fork.
    unsafe {
        cmd.pre_exec(move || {
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
        });
    }
}

/// A link's addresses from `ip -j addr` as sorted `<address>/<prefix length>` strings.
pub fn link_addrs(l: &serde_json::Value) -> Vec<String> {
    let mut addrs: Vec<String> = l["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or("?"), a["prefixlen"]))
        .collect();
    addrs.sort();
    addrs
}

/// The links of netns `name` with their addresses (`ip -n <name> -j addr show`).
pub fn netns_links(name: &str) -> Vec<LinkSnapshot> {
    let v = ip_json(&["-n", name, "-j", "addr", "show"])
        .unwrap_or_else(|e| panic!("listing links of netns {name}: {e}"));
    let mut links: Vec<LinkSnapshot> = v
        .iter()
        .map(|l| {
            let addrs = link_addrs(l);
            LinkSnapshot {
                name: l["ifname"].as_str().unwrap_or_default().to_string(),
                ifindex: l["ifindex"].as_u64().unwrap_or_default() as u32,
                up: l["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "UP")),
                mtu: l["mtu"].as_u64().unwrap_or_default() as u32,
                address: l["address"].as_str().unwrap_or_default().to_string(),
                addrs,
            }
        })
        .collect();
    links.sort_by_key(|l| l.ifindex);
    links
}

/// Runs `ip <args>` and parses its JSON output.
fn ip_json(args: &[&str]) -> io::Result<Vec<serde_json::Value>> {
    let out = run(Command::new("ip").args(args));
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            stderr(&out)
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(io::Error::other)
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The relative path from directory `from` to `to` (both absolute, no `..`), computed
/// as the kernel does (kernfs_get_target_path): a link to an ancestor climbs one level
/// above it and names it, e.g. `net/<if>/device -> ../../../<BDF>`.
fn relative_to(from: &Path, to: &Path) -> PathBuf {
    let f: Vec<Component> = from.components().collect();
    let t: Vec<Component> = to.components().collect();
    let mut common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    if common == t.len() {
        common -= 1;
    }
    let mut rel = PathBuf::new();
    for _ in common..f.len() {
        rel.push("..");
    }
    for c in &t[common..] {
        rel.push(c);
    }
    rel
}

/// The driver-probe emulation of [`EmuHost::probe_on_bind`]; stopped when dropped.
pub struct ProbeEmu {
    bind: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    binds: std::sync::Arc<std::sync::Mutex<Vec<(String, bool)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProbeEmu {
    /// The binds seen so far: (BDF, whether the VF's netdev was re-created).
    pub fn binds(&self) -> Vec<(String, bool)> {
        self.binds.lock().unwrap().clone()
    }

    /// Returns once every bind written so far has been handled. A kernel's bind probes
    /// before the write returns; this thread sees the write up to a poll later, so a
    /// caller that acts on the host after the plugin exits (unbinding the VF, syncing
    /// the tree its own way) first lets the probe finish, as it would have on a real
    /// host. The thread empties the file while holding `binds` and handles the bind
    /// before releasing it.
    pub fn settle(&self) {
        let t0 = std::time::Instant::now();
        while fs::read_to_string(&self.bind).is_ok_and(|b| !b.trim().is_empty())
            && t0.elapsed() < std::time::Duration::from_secs(5)
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        drop(self.binds.lock().unwrap());
    }
}

impl Drop for ProbeEmu {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
