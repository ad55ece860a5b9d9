//! PCI / SR-IOV topology of the host, read from sysfs, and the few sysfs writes the
//! plugin makes (driver unbind/bind, MLNX_OFED per-VF GUID and policy files).
//!
//! Every path is taken relative to a root: `/sys` by default, or the directory named by
//! the environment variable [`SYSFS_ROOT_ENV`] (`IB_SRIOV_SYSFS_ROOT`), which tests point
//! at an emulated tree laid out as the kernel lays out `/sys` (facts.md section 2):
//!
//! ```text
//! <root>/bus/pci/devices/<BDF> -> ../../../devices/pci0000:ae/0000:ae:00.0/<BDF>
//! <PF>/sriov_totalvfs, sriov_numvfs, virtfn<N> -> ../<VF BDF>, net/<if>/, sriov/<N>/
//! <VF>/physfn -> ../<PF BDF>, net/<if>/, infiniband/<dev>/ports/1/pkeys/<i>
//! <dev>/driver -> ../../../../bus/pci/drivers/<name>
//! <root>/bus/pci/drivers/<name>/{bind,unbind}
//! <root>/class/net/<if> -> ../../devices/.../<BDF>/net/<if>   (<if>/device -> the PCI dir)
//! ```
//!
//! Links are always resolved through the filesystem (`fs::canonicalize`, `fs::read_link`)
//! and never by matching absolute `/sys/...` strings, so the same code reads a real
//! kernel's sysfs and an emulated tree under a temporary directory.
//!
//! sysfs `net/` entries are per network namespace: a VF netdev that was moved into a pod
//! no longer appears under `<VF>/net/` as seen from the host. A VF rebind destroys and
//! re-creates its netdev and RDMA device, possibly under a new name (udev renames it
//! shortly after it appears), so callers re-discover a VF by PCI address, never by an old
//! netdev name (ib-sriov-cni#217, #51/#52).

use crate::types::{Guid, LinkState, PciAddress, VfIndex};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Environment variable naming the sysfs root to use instead of `/sys` (tests and the
/// emulated host set it to a temporary tree).
pub const SYSFS_ROOT_ENV: &str = "IB_SRIOV_SYSFS_ROOT";

/// The sysfs root used when [`SYSFS_ROOT_ENV`] is unset or empty.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

/// Driver name of a VF handed to a VM or DPDK through VFIO
/// (basename of `<VF>/driver -> .../bus/pci/drivers/vfio-pci`).
pub const VFIO_PCI_DRIVER: &str = "vfio-pci";

/// Driver name of ConnectX VFs and PFs (`<dev>/driver -> .../bus/pci/drivers/mlx5_core`).
pub const MLX5_CORE_DRIVER: &str = "mlx5_core";

/// Handle on a sysfs tree rooted at [`Sysfs::root`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

/// Which MLNX_OFED per-VF GUID file: `<PF>/sriov/<N>/node` or `<PF>/sriov/<N>/port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuidKind {
    /// The VF node GUID, file `<PF>/sriov/<N>/node`.
    Node,
    /// The VF port GUID, file `<PF>/sriov/<N>/port`.
    Port,
}

impl GuidKind {
    /// The file name under `<PF>/sriov/<N>/`: `node` or `port`.
    pub fn file_name(self) -> &'static str {
        match self {
            GuidKind::Node => "node",
            GuidKind::Port => "port",
        }
    }
}

impl fmt::Display for GuidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_name())
    }
}

/// Everything sysfs tells about one VF, as found by [`Sysfs::discover_vf`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfDevice {
    /// The VF's PCI address (`<root>/bus/pci/devices/<addr>`).
    pub addr: PciAddress,
    /// The PF's PCI address: basename of the resolved `<VF>/physfn` link.
    pub pf: PciAddress,
    /// N of the PF's `virtfn<N>` link that resolves to the VF's directory.
    pub vf_index: VfIndex,
    /// First entry (sorted by name) of `<PF>/net/`, the PF netdev; `None` when empty.
    pub pf_netdev: Option<String>,
    /// The single entry of `<VF>/net/`; `None` when the directory is empty or absent (the
    /// netdev is in another netns, or the VF is bound to vfio-pci or unbound).
    pub netdev: Option<String>,
    /// Basename of the `<VF>/driver` link target (`mlx5_core`, `vfio-pci`, ...); `None`
    /// when the VF is bound to no driver.
    pub driver: Option<String>,
    /// Entries of `<VF>/infiniband/` (sorted), the VF's RDMA devices (one on mlx5).
    pub rdma_devices: Vec<String>,
    /// Values of `<VF>/infiniband/<first rdma dev>/ports/1/pkeys/<i>` ("0xffff"), in
    /// numeric order of `i`, unfiltered (unused table entries read 0x0000 on real
    /// hardware); empty when the directory is absent.
    pub pkeys: Vec<u16>,
}

impl VfDevice {
    /// True when the VF is bound to vfio-pci (basename of `<VF>/driver`).
    pub fn is_vfio(&self) -> bool {
        self.driver.as_deref() == Some(VFIO_PCI_DRIVER)
    }
}

/// Why a VF could not be discovered; every message names the address and what was found.
#[derive(Debug)]
pub enum DiscoveryError {
    /// `<root>/bus/pci/devices/<addr>` does not exist.
    NotFound {
        /// The address looked up.
        addr: PciAddress,
        /// `<root>/bus/pci/devices`.
        devices_dir: PathBuf,
    },
    /// The device is an SR-IOV PF (it has `sriov_totalvfs` and no `physfn` link).
    IsPf {
        /// The PF's address.
        addr: PciAddress,
    },
    /// The device exists but is not an SR-IOV VF (no `physfn`, no `sriov_totalvfs`).
    NotVf {
        /// The device's address.
        addr: PciAddress,
        /// Its sysfs directory.
        dir: PathBuf,
    },
    /// A link does not resolve to a PCI device directory (dangling, or its target's
    /// basename is not a PCI address).
    BadLink {
        /// The link.
        link: PathBuf,
        /// What it points at, as read (`None` when unreadable).
        target: Option<PathBuf>,
    },
    /// No `virtfn<N>` link of the PF resolves to the VF.
    NotListed {
        /// The VF's address.
        vf: PciAddress,
        /// Its PF's address (from `physfn`).
        pf: PciAddress,
    },
    /// `<VF>/net/` holds more than one netdev, so "the VF's netdev" is ambiguous.
    AmbiguousNetdev {
        /// The VF's address.
        addr: PciAddress,
        /// `<VF>/net`.
        dir: PathBuf,
        /// The names found.
        names: Vec<String>,
    },
    /// [`Sysfs::wait_for_netdev`] gave up.
    Timeout {
        /// `<VF>/net`.
        dir: PathBuf,
        /// How long it waited.
        waited: Duration,
        /// The names present at the last look (several, or none).
        found: Vec<String>,
    },
    /// A sysfs file holds text that does not parse.
    Malformed {
        /// The file.
        path: PathBuf,
        /// Its content.
        content: String,
        /// What was expected.
        expected: &'static str,
    },
    /// Reading a sysfs entry failed.
    Io {
        /// The entry.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoveryError::NotFound { addr, devices_dir } => write!(
                f,
                "PCI device {addr} not found under {}",
                devices_dir.display()
            ),
            DiscoveryError::IsPf { addr } => write!(
                f,
                "{addr} is a PF (it has sriov_totalvfs and no physfn link); deviceID must name a VF"
            ),
            DiscoveryError::NotVf { addr, dir } => write!(
                f,
                "{addr} is not an SR-IOV VF: {} has no physfn link and no sriov_totalvfs",
                dir.display()
            ),
            DiscoveryError::BadLink { link, target } => match target {
                Some(t) => write!(
                    f,
                    "link {} -> {} does not resolve to a PCI device directory",
                    link.display(),
                    t.display()
                ),
                None => write!(f, "{} is not a readable link", link.display()),
            },
            DiscoveryError::NotListed { vf, pf } => {
                write!(f, "VF {vf} is not listed as a virtfnN of its PF {pf}")
            }
            DiscoveryError::AmbiguousNetdev { addr, dir, names } => write!(
                f,
                "VF {addr} has {} netdevs under {} ({}); expected at most one",
                names.len(),
                dir.display(),
                names.join(", ")
            ),
            DiscoveryError::Timeout { dir, waited, found } => {
                write!(
                    f,
                    "timed out after {waited:?} waiting for a netdev under {}",
                    dir.display()
                )?;
                if found.len() > 1 {
                    write!(f, " (found {}, expected exactly one)", found.join(", "))?;
                }
                Ok(())
            }
            DiscoveryError::Malformed {
                path,
                content,
                expected,
            } => write!(
                f,
                "{} holds {:?}; expected {expected}",
                path.display(),
                content
            ),
            DiscoveryError::Io { path, source } => {
                write!(f, "reading {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for DiscoveryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DiscoveryError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<DiscoveryError> for io::Error {
    fn from(e: DiscoveryError) -> io::Error {
        let kind = match &e {
            DiscoveryError::NotFound { .. } => io::ErrorKind::NotFound,
            DiscoveryError::Io { source, .. } => source.kind(),
            DiscoveryError::Timeout { .. } => io::ErrorKind::TimedOut,
            DiscoveryError::Malformed { .. } => io::ErrorKind::InvalidData,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    }
}

impl Sysfs {
    /// A handle on the sysfs tree at `root` (normally `/sys`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    /// The tree named by `$IB_SRIOV_SYSFS_ROOT` ([`SYSFS_ROOT_ENV`]) when set and
    /// non-empty, else `/sys`.
    pub fn from_env() -> Self {
        match std::env::var_os(SYSFS_ROOT_ENV) {
            Some(v) if !v.is_empty() => Sysfs::new(v),
            _ => Sysfs::new(DEFAULT_SYSFS_ROOT),
        }
    }

    /// The root directory (`/sys` on a real host).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/bus/pci/devices`.
    pub fn pci_devices_dir(&self) -> PathBuf {
        self.root.join("bus/pci/devices")
    }

    /// `<root>/bus/pci/devices/<BDF>` (a link into `<root>/devices/...`); not checked.
    pub fn pci_device_dir(&self, addr: PciAddress) -> PathBuf {
        self.pci_devices_dir().join(addr.to_string())
    }

    /// `<root>/bus/pci/drivers/<driver>`; not checked.
    pub fn pci_driver_dir(&self, driver: &str) -> io::Result<PathBuf> {
        check_name(driver, "driver name")?;
        Ok(self.root.join("bus/pci/drivers").join(driver))
    }

    /// `<root>/bus/pci/devices/<BDF>` when it exists (following the link).
    fn existing_device_dir(&self, addr: PciAddress) -> Result<PathBuf, DiscoveryError> {
        let dir = self.pci_device_dir(addr);
        match fs::metadata(&dir) {
            Ok(m) if m.is_dir() => Ok(dir),
            Ok(_) => Err(DiscoveryError::NotFound {
                addr,
                devices_dir: self.pci_devices_dir(),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(DiscoveryError::NotFound {
                addr,
                devices_dir: self.pci_devices_dir(),
            }),
            Err(source) => Err(DiscoveryError::Io { path: dir, source }),
        }
    }

    /// Full discovery of a VF from its PCI address: checks
    /// `<root>/bus/pci/devices/<addr>` exists and has a `physfn` link (a PF has
    /// `sriov_totalvfs` instead), resolves the PF from `physfn`, finds the VF index by
    /// scanning the PF's `virtfn<N>` links for the one resolving to the VF, and reads
    /// `<PF>/net/`, `<VF>/net/`, `<VF>/driver`, `<VF>/infiniband/` and
    /// `<VF>/infiniband/<dev>/ports/1/pkeys/<i>`.
    pub fn discover_vf(&self, addr: PciAddress) -> Result<VfDevice, DiscoveryError> {
        let dir = self.existing_device_dir(addr)?;
        let physfn = dir.join("physfn");
        let pf_dir = match fs::canonicalize(&physfn) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if fs::symlink_metadata(&physfn).is_ok() {
                    return Err(DiscoveryError::BadLink {
                        target: fs::read_link(&physfn).ok(),
                        link: physfn,
                    });
                }
                return Err(if dir.join("sriov_totalvfs").exists() {
                    DiscoveryError::IsPf { addr }
                } else {
                    DiscoveryError::NotVf { addr, dir }
                });
            }
            Err(source) => {
                return Err(DiscoveryError::Io {
                    path: physfn,
                    source,
                })
            }
        };
        let pf = pci_address_of_dir(&pf_dir).ok_or_else(|| DiscoveryError::BadLink {
            target: fs::read_link(&physfn).ok(),
            link: physfn.clone(),
        })?;
        // `<PF>/virtfn<N>` is a relative link to the VF's sibling directory
        // (`../0000:af:00.2`, drivers/pci/iov.c `pci_iov_sysfs_link()`): its last
        // component names the VF, so one readlink per link is enough (resolving each
        // link costs ~9 readlinks and grows with the VF index).
        let vf_name = addr.to_string();
        let names_vf = |link: &Path| {
            fs::read_link(link).is_ok_and(|t| t.file_name().is_some_and(|n| n == vf_name.as_str()))
        };
        // The index by the SR-IOV routing-ID rule, proven by one readlink of its
        // `virtfn<N>`; the scan of every `virtfn<N>` only when that fails (a kernel
        // without `sriov_offset`/`sriov_stride`), so the cost does not grow with N.
        if let Some(n) = vf_index_by_routing_id(&pf_dir, pf, addr) {
            if names_vf(&pf_dir.join(format!("virtfn{}", n.0))) {
                return self.finish_discovery(addr, dir, pf, pf_dir, n);
            }
        }
        let vf_index = virtfn_links(&pf_dir)
            .map_err(|source| DiscoveryError::Io {
                path: pf_dir.clone(),
                source,
            })?
            .into_iter()
            .find(|(_, link)| names_vf(link))
            .map(|(n, _)| n)
            .ok_or(DiscoveryError::NotListed { vf: addr, pf })?;
        self.finish_discovery(addr, dir, pf, pf_dir, vf_index)
    }

    /// The rest of [`Sysfs::discover_vf`] once the VF's PF and index are known.
    fn finish_discovery(
        &self,
        addr: PciAddress,
        dir: PathBuf,
        pf: PciAddress,
        pf_dir: PathBuf,
        vf_index: VfIndex,
    ) -> Result<VfDevice, DiscoveryError> {
        let pf_netdevs = list_dir(&pf_dir.join("net")).map_err(|source| DiscoveryError::Io {
            path: pf_dir.join("net"),
            source,
        })?;
        let pf_netdev = pick_pf_netdev(&pf_dir.join("net"), pf_netdevs);

        let net_dir = dir.join("net");
        let mut names = list_dir(&net_dir).map_err(|source| DiscoveryError::Io {
            path: net_dir.clone(),
            source,
        })?;
        let netdev = match names.len() {
            0 => None,
            1 => names.pop(),
            _ => {
                return Err(DiscoveryError::AmbiguousNetdev {
                    addr,
                    dir: net_dir,
                    names,
                })
            }
        };

        let driver = read_driver(&dir).map_err(|source| DiscoveryError::Io {
            path: dir.join("driver"),
            source,
        })?;
        let ib_dir = dir.join("infiniband");
        let rdma_devices = list_dir(&ib_dir).map_err(|source| DiscoveryError::Io {
            path: ib_dir.clone(),
            source,
        })?;
        let pkeys = match rdma_devices.first() {
            Some(dev) => read_pkeys(&ib_dir.join(dev).join("ports/1/pkeys"))?,
            None => Vec::new(),
        };
        Ok(VfDevice {
            addr,
            pf,
            vf_index,
            pf_netdev,
            netdev,
            driver,
            rdma_devices,
            pkeys,
        })
    }

    /// Netdev names currently under `<root>/bus/pci/devices/<addr>/net/`, sorted; empty
    /// when the directory is absent or empty (netdev in another netns, vfio-pci, unbound).
    /// Fails with `NotFound` when the PCI device itself does not exist.
    pub fn netdevs(&self, addr: PciAddress) -> io::Result<Vec<String>> {
        let dir = self.existing_device_dir(addr)?.join("net");
        list_dir(&dir).map_err(|e| with_path(&dir, e))
    }

    /// RDMA device names under `<root>/bus/pci/devices/<addr>/infiniband/`, sorted;
    /// empty when absent. Fails with `NotFound` when the PCI device does not exist.
    pub fn rdma_devices(&self, addr: PciAddress) -> io::Result<Vec<String>> {
        let dir = self.existing_device_dir(addr)?.join("infiniband");
        list_dir(&dir).map_err(|e| with_path(&dir, e))
    }

    /// The pkey table of port 1 of the VF's (first) RDMA device, read now:
    /// `<root>/bus/pci/devices/<addr>/infiniband/<dev>/ports/1/pkeys/<i>` ("0xffff", the
    /// kernel's `show_port_pkey`, Documentation/ABI/stable/sysfs-class-infiniband), in
    /// numeric order of `i`, with the device's name; `None` when the VF has no RDMA
    /// device. Errors: the device directory missing, an unreadable or malformed entry.
    pub fn pkeys(&self, addr: PciAddress) -> Result<Option<(String, Vec<u16>)>, DiscoveryError> {
        let ib_dir = self.existing_device_dir(addr)?.join("infiniband");
        let devs = list_dir(&ib_dir).map_err(|source| DiscoveryError::Io {
            path: ib_dir.clone(),
            source,
        })?;
        let Some(dev) = devs.into_iter().next() else {
            return Ok(None);
        };
        let table = read_pkeys(&ib_dir.join(&dev).join("ports/1/pkeys"))?;
        Ok(Some((dev, table)))
    }

    /// Driver name: basename of the `<root>/bus/pci/devices/<addr>/driver` link target;
    /// `None` when the device is bound to no driver. Fails with `NotFound` when the PCI
    /// device does not exist.
    pub fn driver(&self, addr: PciAddress) -> io::Result<Option<String>> {
        let dir = self.existing_device_dir(addr)?;
        read_driver(&dir).map_err(|e| with_path(&dir.join("driver"), e))
    }

    /// Unbinds the device from `driver`: writes the BDF to
    /// `<root>/bus/pci/drivers/<driver>/unbind` (the kernel answers ENODEV when the
    /// device is not bound to that driver).
    pub fn unbind(&self, addr: PciAddress, driver: &str) -> io::Result<()> {
        let path = self.pci_driver_dir(driver)?.join("unbind");
        write_existing(&path, &addr.to_string())
    }

    /// Binds the device to `driver`: writes the BDF to
    /// `<root>/bus/pci/drivers/<driver>/bind`. The netdev and RDMA device are created
    /// asynchronously afterwards: follow with [`Sysfs::wait_for_netdev`].
    pub fn bind(&self, addr: PciAddress, driver: &str) -> io::Result<()> {
        let path = self.pci_driver_dir(driver)?.join("bind");
        write_existing(&path, &addr.to_string())
    }

    /// Polls `<root>/bus/pci/devices/<addr>/net/` until exactly one netdev is listed, and
    /// returns its name. The name may still change (udev renames new netdevs): pin the
    /// device by its `ifindex` ([`Sysfs::netdev_ifindex`]) right away. Fails at once when
    /// the PCI device does not exist, and with [`DiscoveryError::Timeout`] after
    /// `timeout`.
    pub fn wait_for_netdev(
        &self,
        addr: PciAddress,
        timeout: Duration,
    ) -> Result<String, DiscoveryError> {
        let start = Instant::now();
        let dir = self.pci_device_dir(addr).join("net");
        // Polled: sysfs directories raise no inotify events for entries the kernel adds.
        // The pause grows from 2 ms to at most 10 ms, so a netdev is seen within 10 ms of
        // its creation: the wait runs inside the node's rebind queue, where every
        // millisecond past the probe delays every rebind queued behind it.
        let mut pause = Duration::from_millis(2);
        loop {
            self.existing_device_dir(addr)?;
            let mut names = list_dir(&dir).map_err(|source| DiscoveryError::Io {
                path: dir.clone(),
                source,
            })?;
            if names.len() == 1 {
                return Ok(names.remove(0));
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(DiscoveryError::Timeout {
                    dir,
                    waited: timeout,
                    found: names,
                });
            }
            std::thread::sleep(pause.min(timeout - elapsed));
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// The interface index of netdev `ifname` of the device, from
    /// `<root>/bus/pci/devices/<addr>/net/<ifname>/ifindex`; `None` when that netdev is
    /// not listed. Stable across renames, unlike the name.
    pub fn netdev_ifindex(&self, addr: PciAddress, ifname: &str) -> io::Result<Option<u32>> {
        check_name(ifname, "interface name")?;
        let path = self
            .existing_device_dir(addr)?
            .join("net")
            .join(ifname)
            .join("ifindex");
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        text.trim().parse().map(Some).map_err(|_| {
            io::Error::from(DiscoveryError::Malformed {
                path,
                content: text,
                expected: "a decimal interface index",
            })
        })
    }

    /// The hardware address of netdev `ifname` of the device, as the kernel prints it in
    /// `<root>/bus/pci/devices/<addr>/net/<ifname>/address` (lower-case hex bytes joined
    /// by `:`, 20 bytes for IPoIB; Documentation/ABI/testing/sysfs-class-net); `None`
    /// when that netdev is not listed.
    pub fn netdev_address(&self, addr: PciAddress, ifname: &str) -> io::Result<Option<String>> {
        check_name(ifname, "interface name")?;
        let path = self
            .existing_device_dir(addr)?
            .join("net")
            .join(ifname)
            .join("address");
        Ok(read_optional(&path)?.map(|t| t.trim().to_string()))
    }

    /// The PCI device owning netdev `ifname` as seen in this root: resolves
    /// `<root>/class/net/<ifname>/device`; `None` when the netdev is not listed (another
    /// netns) or has no PCI parent (virtual devices have no `device` link).
    pub fn netdev_pci_address(&self, ifname: &str) -> io::Result<Option<PciAddress>> {
        check_name(ifname, "interface name")?;
        let link = self.root.join("class/net").join(ifname).join("device");
        match fs::canonicalize(&link) {
            Ok(dir) => Ok(pci_address_of_dir(&dir)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(with_path(&link, e)),
        }
    }

    /// Every PCI device with SR-IOV capability (a `sriov_totalvfs` attribute, which the
    /// kernel creates for each PF: drivers/pci/iov.c), by address, sorted.
    ///
    /// Errors: `<root>/bus/pci/devices` unreadable.
    pub fn sriov_pfs(&self) -> io::Result<Vec<PciAddress>> {
        let dir = self.pci_devices_dir();
        let mut v: Vec<PciAddress> = fs::read_dir(&dir)
            .map_err(|e| with_path(&dir, e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join("sriov_totalvfs").exists())
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        v.sort();
        Ok(v)
    }

    /// The VFs of a PF: every `<root>/bus/pci/devices/<pf>/virtfn<N>` link resolved to
    /// its PCI address, sorted by N.
    pub fn virtfns(&self, pf: PciAddress) -> io::Result<Vec<(VfIndex, PciAddress)>> {
        let dir = self.existing_device_dir(pf)?;
        let mut out = Vec::new();
        for (n, link) in virtfn_links(&dir).map_err(|e| with_path(&dir, e))? {
            let target = fs::canonicalize(&link).map_err(|e| with_path(&link, e))?;
            let addr = pci_address_of_dir(&target).ok_or_else(|| {
                io::Error::from(DiscoveryError::BadLink {
                    target: fs::read_link(&link).ok(),
                    link: link.clone(),
                })
            })?;
            out.push((n, addr));
        }
        Ok(out)
    }

    /// MLNX_OFED per-VF directory `<root>/bus/pci/devices/<pf>/sriov/<N>/` when it exists
    /// (only with the MLNX_OFED mlx5 driver; inbox kernels use netlink on the PF).
    pub fn ofed_dir(&self, pf: PciAddress, vf: VfIndex) -> Option<PathBuf> {
        let dir = self.pci_device_dir(pf).join("sriov").join(vf.to_string());
        dir.is_dir().then_some(dir)
    }

    /// The VF GUID from `<PF>/sriov/<N>/node` or `.../port` (MLNX_OFED), text
    /// `11:22:33:44:55:66:77:88`; `None` when the directory or file is absent.
    pub fn read_ofed_guid(
        &self,
        pf: PciAddress,
        vf: VfIndex,
        kind: GuidKind,
    ) -> io::Result<Option<Guid>> {
        let Some(dir) = self.ofed_dir(pf, vf) else {
            return Ok(None);
        };
        let path = dir.join(kind.file_name());
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        text.trim().parse().map(Some).map_err(|_| {
            io::Error::from(DiscoveryError::Malformed {
                path,
                content: text,
                expected: "a GUID like 11:22:33:44:55:66:77:88",
            })
        })
    }

    /// Writes the VF GUID to `<PF>/sriov/<N>/node` or `.../port` (MLNX_OFED) as
    /// `11:22:33:44:55:66:77:88\n`. Fails with `NotFound` when the file does not exist
    /// (never creates it). mlx5 applies it only after a VF unbind/bind.
    pub fn write_ofed_guid(
        &self,
        pf: PciAddress,
        vf: VfIndex,
        kind: GuidKind,
        guid: Guid,
    ) -> io::Result<()> {
        let path = self.ofed_file(pf, vf, kind.file_name());
        write_existing(&path, &format!("{guid}\n"))
    }

    /// The VF link policy from `<PF>/sriov/<N>/policy` (MLNX_OFED): `Follow`, `Up` or
    /// `Down`; `None` when the directory or file is absent.
    pub fn read_ofed_policy(&self, pf: PciAddress, vf: VfIndex) -> io::Result<Option<LinkState>> {
        let Some(dir) = self.ofed_dir(pf, vf) else {
            return Ok(None);
        };
        let path = dir.join("policy");
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        LinkState::from_ofed_policy(&text).map(Some).ok_or_else(|| {
            io::Error::from(DiscoveryError::Malformed {
                path,
                content: text,
                expected: "Follow, Up or Down",
            })
        })
    }

    /// Writes the VF link policy (`Follow`, `Up`, `Down` and a newline) to
    /// `<PF>/sriov/<N>/policy` (MLNX_OFED). Fails with `NotFound` when the file does not
    /// exist (never creates it).
    pub fn write_ofed_policy(
        &self,
        pf: PciAddress,
        vf: VfIndex,
        state: LinkState,
    ) -> io::Result<()> {
        let path = self.ofed_file(pf, vf, "policy");
        write_existing(&path, &format!("{}\n", state.to_ofed_policy()))
    }

    fn ofed_file(&self, pf: PciAddress, vf: VfIndex, name: &str) -> PathBuf {
        self.pci_device_dir(pf)
            .join("sriov")
            .join(vf.to_string())
            .join(name)
    }
}

/// Rejects names that would escape the directory they are joined to.
fn check_name(name: &str, what: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid {what} {name:?}"),
        ));
    }
    Ok(())
}

/// The PF netdev to reach the VFs through, from the names under `<PF>/net/` (sorted):
/// the only one, or, when the PF has several, the first InfiniBand one
/// (`<PF>/net/<name>/type` reads 32, ARPHRD_INFINIBAND in include/uapi/linux/if_arp.h):
/// the kernel accepts VF GUIDs only on an InfiniBand PF netdev (`do_setvfinfo()` in
/// net/core/rtnetlink.c). `None` when the PF has no netdev in this netns.
fn pick_pf_netdev(net_dir: &Path, names: Vec<String>) -> Option<String> {
    if names.len() > 1 {
        let ib = names.iter().find(|n| {
            fs::read_to_string(net_dir.join(n).join("type")).is_ok_and(|t| t.trim() == "32")
        });
        if let Some(n) = ib {
            return Some(n.clone());
        }
    }
    names.into_iter().next()
}

/// Prefixes an I/O error with the path it concerns, keeping its kind.
fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Sorted entry names of `dir`; empty when it does not exist.
fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in rd {
        match entry {
            Ok(entry) => names.push(entry.file_name().to_string_lossy().into_owned()),
            // The directory can vanish while we read it (netdev leaving, VF unbinding).
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(e),
        }
    }
    names.sort();
    Ok(names)
}

/// The content of a file; `None` when it does not exist.
fn read_optional(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(with_path(path, e)),
    }
}

/// Writes `text` to an existing file (sysfs attributes cannot be created).
fn write_existing(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| with_path(path, e))?;
    f.write_all(text.as_bytes()).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {:?} to {}: {e}", text.trim_end(), path.display()),
        )
    })
}

/// Basename of `<dir>/driver`'s target; `None` when there is no such link.
fn read_driver(dir: &Path) -> io::Result<Option<String>> {
    match fs::read_link(dir.join("driver")) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The PCI address a (resolved) device directory is named after.
fn pci_address_of_dir(dir: &Path) -> Option<PciAddress> {
    dir.file_name()?.to_str()?.parse().ok()
}

/// `(N, <dir>/virtfn<N>)` for every `virtfn<N>` entry of a PF directory, sorted by N.
fn virtfn_links(pf_dir: &Path) -> io::Result<Vec<(VfIndex, PathBuf)>> {
    let mut out = Vec::new();
    for name in list_dir(pf_dir)? {
        if let Some(n) = name.strip_prefix("virtfn") {
            if let Ok(n) = n.parse::<u32>() {
                out.push((VfIndex(n), pf_dir.join(&name)));
            }
        }
    }
    out.sort_by_key(|(n, _)| *n);
    Ok(out)
}

/// The index of VF `vf` of PF `pf` by the SR-IOV rule (PCI Express Base Specification,
/// "First VF Offset" and "VF Stride": VF N's routing ID is the PF's plus
/// `offset + N * stride`), with the two values the kernel exposes as
/// `<PF>/sriov_offset` and `<PF>/sriov_stride` (drivers/pci/iov.c). A routing ID is
/// bus << 8 | device << 3 | function. `None` when a file is missing or the arithmetic
/// does not land on an index (another domain, below the offset, off the stride).
fn vf_index_by_routing_id(pf_dir: &Path, pf: PciAddress, vf: PciAddress) -> Option<VfIndex> {
    let num =
        |f: &str| -> Option<i64> { fs::read_to_string(pf_dir.join(f)).ok()?.trim().parse().ok() };
    let (offset, stride) = (num("sriov_offset")?, num("sriov_stride")?);
    let rid = |a: PciAddress| {
        (i64::from(a.bus) << 8) | (i64::from(a.device) << 3) | i64::from(a.function)
    };
    let d = rid(vf) - rid(pf) - offset;
    if vf.domain != pf.domain || stride <= 0 || d < 0 || d % stride != 0 {
        return None;
    }
    u32::try_from(d / stride).ok().map(VfIndex)
}

/// The pkey table of an RDMA port: `<pkeys dir>/<i>` files ("0xffff"), in numeric order
/// of `i`; empty when the directory is absent.
fn read_pkeys(dir: &Path) -> Result<Vec<u16>, DiscoveryError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DiscoveryError::Io { path, source }
    };
    let mut entries: Vec<(u32, String)> = list_dir(dir)
        .map_err(io_err(dir))?
        .into_iter()
        .filter_map(|n| n.parse::<u32>().ok().map(|i| (i, n)))
        .collect();
    entries.sort();
    let mut pkeys = Vec::with_capacity(entries.len());
    for (_, name) in entries {
        let path = dir.join(&name);
        let text = fs::read_to_string(&path).map_err(io_err(&path))?;
        let t = text.trim();
        let hex = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        let v = u16::from_str_radix(hex, 16).map_err(|_| DiscoveryError::Malformed {
            path: path.clone(),
            content: text.clone(),
            expected: "a 16-bit hex pkey like 0xffff",
        })?;
        pkeys.push(v);
    }
    Ok(pkeys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn pci(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    /// A sysfs tree laid out as the kernel does (facts.md section 2): PF 0000:af:00.0
    /// behind root port 0000:ae:00.0, VFs 0000:af:00.2.. as virtfn0.., all links relative.
    struct Tree {
        _tmp: tempfile::TempDir,
        root: PathBuf,
    }

    const PARENT: &str = "devices/pci0000:ae/0000:ae:00.0";
    const PF: &str = "0000:af:00.0";

    fn vf_bdf(n: u32) -> String {
        format!("0000:af:00.{}", n + 2)
    }

    impl Tree {
        fn new(vfs: u32) -> Tree {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().to_path_buf();
            let t = Tree { _tmp: tmp, root };
            for d in ["mlx5_core", "vfio-pci"] {
                let dir = t.root.join("bus/pci/drivers").join(d);
                fs::create_dir_all(&dir).unwrap();
                fs::write(dir.join("bind"), "").unwrap();
                fs::write(dir.join("unbind"), "").unwrap();
            }
            fs::create_dir_all(t.root.join("class/net")).unwrap();
            t.device(PF, "mlx5_core");
            let pf = t.dev(PF);
            fs::write(pf.join("sriov_totalvfs"), "8\n").unwrap();
            fs::write(pf.join("sriov_numvfs"), format!("{vfs}\n")).unwrap();
            t.netdev(PF, "ibp175s0f0");
            for n in 0..vfs {
                let b = vf_bdf(n);
                t.device(&b, "mlx5_core");
                symlink(format!("../{PF}"), t.dev(&b).join("physfn")).unwrap();
                symlink(format!("../{b}"), pf.join(format!("virtfn{n}"))).unwrap();
                t.netdev(&b, &format!("ibp175s0f0v{n}"));
                let pk = t
                    .dev(&b)
                    .join(format!("infiniband/mlx5_{}/ports/1/pkeys", n + 1));
                fs::create_dir_all(&pk).unwrap();
                // Written out of lexical order on purpose: 10 sorts before 2 as text.
                for (i, v) in [(0, "0xffff"), (2, "0x0000"), (10, "0x8001"), (1, "0x7fff")] {
                    fs::write(pk.join(i.to_string()), format!("{v}\n")).unwrap();
                }
                let o = pf.join(format!("sriov/{n}"));
                fs::create_dir_all(&o).unwrap();
                fs::write(o.join("node"), format!("02:00:00:00:00:01:00:{n:02x}\n")).unwrap();
                fs::write(o.join("port"), format!("02:00:00:00:00:02:00:{n:02x}\n")).unwrap();
                fs::write(o.join("policy"), "Follow\n").unwrap();
            }
            t
        }

        fn dev(&self, bdf: &str) -> PathBuf {
            self.root.join(PARENT).join(bdf)
        }

        fn device(&self, bdf: &str, driver: &str) {
            let d = self.dev(bdf);
            fs::create_dir_all(&d).unwrap();
            let devices = self.root.join("bus/pci/devices");
            fs::create_dir_all(&devices).unwrap();
            symlink(format!("../../../{PARENT}/{bdf}"), devices.join(bdf)).unwrap();
            self.set_driver(bdf, Some(driver));
        }

        fn set_driver(&self, bdf: &str, driver: Option<&str>) {
            let link = self.dev(bdf).join("driver");
            let _ = fs::remove_file(&link);
            if let Some(driver) = driver {
                // <root>/devices/pci0000:ae/0000:ae:00.0/<bdf>: four levels up to <root>.
                symlink(format!("../../../../bus/pci/drivers/{driver}"), link).unwrap();
            }
        }

        fn netdev(&self, bdf: &str, name: &str) {
            let d = self.dev(bdf).join("net").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("ifindex"), "42\n").unwrap();
            symlink(format!("../../../{bdf}"), d.join("device")).unwrap();
            symlink(
                format!("../../{PARENT}/{bdf}/net/{name}"),
                self.root.join("class/net").join(name),
            )
            .unwrap();
        }

        fn sysfs(&self) -> Sysfs {
            Sysfs::new(&self.root)
        }
    }

    /// With `sriov_offset`/`sriov_stride` the index comes from the routing ID and one
    /// readlink (a bogus earlier `virtfn1` naming the same VF, which the scan would take,
    /// is never looked at); a wrong offset falls back to the scan.
    #[test]
    fn vf_index_by_routing_id_then_by_scan() {
        let t = Tree::new(5);
        let pf = t.dev(PF);
        fs::write(pf.join("sriov_offset"), "2\n").unwrap();
        fs::write(pf.join("sriov_stride"), "1\n").unwrap();
        fs::remove_file(pf.join("virtfn1")).unwrap();
        symlink(format!("../{}", vf_bdf(3)), pf.join("virtfn1")).unwrap();
        let vf = t.sysfs().discover_vf(pci(&vf_bdf(3))).unwrap();
        assert_eq!(vf.vf_index, VfIndex(3));
        assert_eq!(vf.netdev.as_deref(), Some("ibp175s0f0v3"));
        assert_eq!(vf.pkeys, vec![0xffff, 0x7fff, 0x0000, 0x8001]);
        // Off by one: the routing ID names virtfn4, which is another VF: the scan decides
        // (and finds the bogus virtfn1 first, as before this rule existed).
        fs::write(pf.join("sriov_offset"), "1\n").unwrap();
        assert_eq!(
            t.sysfs().discover_vf(pci(&vf_bdf(3))).unwrap().vf_index,
            VfIndex(1)
        );
        // At offset 1, routing ID 0xaf07 is index 6.
        assert_eq!(
            vf_index_by_routing_id(&pf, pci(PF), pci("0000:af:00.7")),
            Some(VfIndex(6))
        );
        fs::write(pf.join("sriov_stride"), "0\n").unwrap();
        assert_eq!(vf_index_by_routing_id(&pf, pci(PF), pci(&vf_bdf(3))), None);
        fs::write(pf.join("sriov_stride"), "1\n").unwrap();
        fs::write(pf.join("sriov_offset"), "2\n").unwrap();
        // A VF on the next device number: 0000:af:01.0 is routing ID 0xaf08, index 6.
        assert_eq!(
            vf_index_by_routing_id(&pf, pci(PF), pci("0000:af:01.0")),
            Some(VfIndex(6))
        );
        assert_eq!(
            vf_index_by_routing_id(&pf, pci(PF), pci("0001:af:00.3")),
            None
        );
        assert_eq!(
            vf_index_by_routing_id(&pf, pci(PF), pci("0000:af:00.1")),
            None
        );
    }

    #[test]
    fn discovers_a_vf() {
        let t = Tree::new(3);
        let vf = t.sysfs().discover_vf(pci("0000:af:00.3")).unwrap();
        assert_eq!(
            vf,
            VfDevice {
                addr: pci("0000:af:00.3"),
                pf: pci(PF),
                vf_index: VfIndex(1),
                pf_netdev: Some("ibp175s0f0".into()),
                netdev: Some("ibp175s0f0v1".into()),
                driver: Some("mlx5_core".into()),
                rdma_devices: vec!["mlx5_2".into()],
                pkeys: vec![0xffff, 0x7fff, 0x0000, 0x8001],
            }
        );
        assert!(!vf.is_vfio());
    }

    #[test]
    fn index_comes_from_virtfn_links_not_from_the_address() {
        let t = Tree::new(3);
        let pf = t.dev(PF);
        // Swap virtfn0 and virtfn2.
        fs::remove_file(pf.join("virtfn0")).unwrap();
        fs::remove_file(pf.join("virtfn2")).unwrap();
        symlink(format!("../{}", vf_bdf(2)), pf.join("virtfn0")).unwrap();
        symlink(format!("../{}", vf_bdf(0)), pf.join("virtfn2")).unwrap();
        let vf = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap();
        assert_eq!(vf.vf_index, VfIndex(2));
    }

    #[test]
    fn vfio_vf_without_netdev_or_rdma() {
        let t = Tree::new(2);
        let b = vf_bdf(1);
        fs::remove_dir_all(t.dev(&b).join("net")).unwrap();
        fs::remove_dir_all(t.dev(&b).join("infiniband")).unwrap();
        t.set_driver(&b, Some("vfio-pci"));
        let vf = t.sysfs().discover_vf(pci(&b)).unwrap();
        assert!(vf.is_vfio());
        assert_eq!(vf.driver.as_deref(), Some("vfio-pci"));
        assert_eq!(vf.netdev, None);
        assert!(vf.rdma_devices.is_empty());
        assert!(vf.pkeys.is_empty());
        assert_eq!(vf.vf_index, VfIndex(1));
    }

    #[test]
    fn pf_netdev_prefers_the_infiniband_one() {
        let d = tempfile::tempdir().unwrap();
        let net = d.path();
        for (n, ty) in [("enp1s0", "1"), ("ibpf0", "32"), ("zz0", "1")] {
            fs::create_dir_all(net.join(n)).unwrap();
            fs::write(net.join(n).join("type"), format!("{ty}\n")).unwrap();
        }
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            pick_pf_netdev(net, names(&["enp1s0", "ibpf0", "zz0"])).as_deref(),
            Some("ibpf0")
        );
        // One netdev: taken whatever its type; none InfiniBand: the first; none: None.
        assert_eq!(pick_pf_netdev(net, names(&["zz0"])).as_deref(), Some("zz0"));
        assert_eq!(
            pick_pf_netdev(net, names(&["enp1s0", "zz0"])).as_deref(),
            Some("enp1s0")
        );
        assert_eq!(pick_pf_netdev(net, Vec::new()), None);
    }

    #[test]
    fn unbound_vf_and_empty_net_dir() {
        let t = Tree::new(1);
        let b = vf_bdf(0);
        t.set_driver(&b, None);
        fs::remove_dir_all(t.dev(&b).join("net/ibp175s0f0v0")).unwrap();
        let s = t.sysfs();
        let vf = s.discover_vf(pci(&b)).unwrap();
        assert_eq!(vf.driver, None);
        assert_eq!(vf.netdev, None);
        assert_eq!(s.driver(pci(&b)).unwrap(), None);
        assert!(s.netdevs(pci(&b)).unwrap().is_empty());
    }

    #[test]
    fn unknown_address_is_not_found() {
        let t = Tree::new(1);
        let e = t.sysfs().discover_vf(pci("0000:af:03.7")).unwrap_err();
        assert!(matches!(e, DiscoveryError::NotFound { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "PCI device 0000:af:03.7 not found under {}/bus/pci/devices",
                t.root.display()
            )
        );
        let io = t.sysfs().netdevs(pci("0000:af:03.7")).unwrap_err();
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
        assert!(t.sysfs().driver(pci("0000:af:03.7")).is_err());
        assert!(t.sysfs().rdma_devices(pci("0000:af:03.7")).is_err());
    }

    #[test]
    fn pf_is_rejected() {
        let t = Tree::new(1);
        let e = t.sysfs().discover_vf(pci(PF)).unwrap_err();
        assert!(matches!(e, DiscoveryError::IsPf { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "0000:af:00.0 is a PF (it has sriov_totalvfs and no physfn link); deviceID must name a VF"
        );
    }

    #[test]
    fn plain_device_is_not_a_vf() {
        let t = Tree::new(1);
        t.device("0000:af:00.1", "mlx5_core");
        let e = t.sysfs().discover_vf(pci("0000:af:00.1")).unwrap_err();
        assert!(matches!(e, DiscoveryError::NotVf { .. }), "{e:?}");
        assert!(e
            .to_string()
            .starts_with("0000:af:00.1 is not an SR-IOV VF"));
    }

    #[test]
    fn vf_missing_from_virtfn_links() {
        let t = Tree::new(2);
        fs::remove_file(t.dev(PF).join("virtfn0")).unwrap();
        let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
        assert!(matches!(e, DiscoveryError::NotListed { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "VF 0000:af:00.2 is not listed as a virtfnN of its PF 0000:af:00.0"
        );
    }

    #[test]
    fn dangling_physfn() {
        let t = Tree::new(1);
        let link = t.dev(&vf_bdf(0)).join("physfn");
        fs::remove_file(&link).unwrap();
        symlink("../0000:af:00.7", &link).unwrap();
        let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
        assert!(matches!(e, DiscoveryError::BadLink { .. }), "{e:?}");
        assert!(e.to_string().contains("-> ../0000:af:00.7"), "{e}");
    }

    #[test]
    fn physfn_to_a_non_pci_directory() {
        let t = Tree::new(1);
        let link = t.dev(&vf_bdf(0)).join("physfn");
        fs::remove_file(&link).unwrap();
        // ../.. is devices/pci0000:ae: a directory, but not named like a PCI device.
        symlink("../..", &link).unwrap();
        let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
        assert!(matches!(e, DiscoveryError::BadLink { .. }), "{e:?}");
    }

    #[test]
    fn two_netdevs_are_ambiguous() {
        let t = Tree::new(1);
        t.netdev(&vf_bdf(0), "ibp175s0f0v0.8001");
        let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
        assert!(matches!(e, DiscoveryError::AmbiguousNetdev { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("(ibp175s0f0v0, ibp175s0f0v0.8001); expected at most one"),
            "{e}"
        );
    }

    #[test]
    fn malformed_pkey() {
        let t = Tree::new(1);
        let p = t.dev(&vf_bdf(0)).join("infiniband/mlx5_1/ports/1/pkeys/1");
        fs::write(&p, "junk\n").unwrap();
        let e = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap_err();
        assert!(matches!(e, DiscoveryError::Malformed { .. }), "{e:?}");
        assert!(e.to_string().contains("\"junk\\n\""), "{e}");
    }

    #[test]
    fn pf_without_netdev() {
        let t = Tree::new(1);
        fs::remove_dir_all(t.dev(PF).join("net")).unwrap();
        let vf = t.sysfs().discover_vf(pci(&vf_bdf(0))).unwrap();
        assert_eq!(vf.pf_netdev, None);
    }

    #[test]
    fn wait_for_netdev_returns_the_single_name() {
        let t = Tree::new(1);
        let s = t.sysfs();
        let name = s
            .wait_for_netdev(pci(&vf_bdf(0)), Duration::from_millis(10))
            .unwrap();
        assert_eq!(name, "ibp175s0f0v0");
        assert_eq!(s.netdev_ifindex(pci(&vf_bdf(0)), &name).unwrap(), Some(42));
        assert_eq!(s.netdev_ifindex(pci(&vf_bdf(0)), "nope").unwrap(), None);
    }

    #[test]
    fn wait_for_netdev_sees_a_late_netdev() {
        let t = Tree::new(1);
        let b = vf_bdf(0);
        fs::remove_dir_all(t.dev(&b).join("net")).unwrap();
        fs::remove_file(t.root.join("class/net/ibp175s0f0v0")).unwrap();
        let dir = t.dev(&b).join("net/ib0");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            fs::create_dir_all(dir).unwrap();
        });
        let name = t
            .sysfs()
            .wait_for_netdev(pci(&b), Duration::from_secs(5))
            .unwrap();
        writer.join().unwrap();
        assert_eq!(name, "ib0");
    }

    #[test]
    fn wait_for_netdev_times_out() {
        let t = Tree::new(1);
        let b = vf_bdf(0);
        fs::remove_dir_all(t.dev(&b).join("net")).unwrap();
        let start = Instant::now();
        let e = t
            .sysfs()
            .wait_for_netdev(pci(&b), Duration::from_millis(60))
            .unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(60));
        assert!(matches!(e, DiscoveryError::Timeout { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "timed out after 60ms waiting for a netdev under {}/bus/pci/devices/0000:af:00.2/net",
                t.root.display()
            )
        );
    }

    #[test]
    fn wait_for_netdev_times_out_on_two() {
        let t = Tree::new(1);
        t.netdev(&vf_bdf(0), "ib1");
        let e = t
            .sysfs()
            .wait_for_netdev(pci(&vf_bdf(0)), Duration::from_millis(20))
            .unwrap_err();
        assert!(
            e.to_string()
                .ends_with("(found ib1, ibp175s0f0v0, expected exactly one)"),
            "{e}"
        );
    }

    #[test]
    fn wait_for_netdev_on_missing_device_fails_at_once() {
        let t = Tree::new(1);
        let start = Instant::now();
        let e = t
            .sysfs()
            .wait_for_netdev(pci("0000:af:03.7"), Duration::from_secs(5))
            .unwrap_err();
        assert!(matches!(e, DiscoveryError::NotFound { .. }), "{e:?}");
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn unbind_and_bind_write_the_bdf() {
        let t = Tree::new(1);
        let s = t.sysfs();
        let a = pci(&vf_bdf(0));
        s.unbind(a, "mlx5_core").unwrap();
        s.bind(a, "vfio-pci").unwrap();
        let drivers = t.root.join("bus/pci/drivers");
        assert_eq!(
            fs::read_to_string(drivers.join("mlx5_core/unbind")).unwrap(),
            "0000:af:00.2"
        );
        assert_eq!(
            fs::read_to_string(drivers.join("vfio-pci/bind")).unwrap(),
            "0000:af:00.2"
        );
        let e = s.bind(a, "no-such-driver").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("no-such-driver/bind"), "{e}");
        assert!(!drivers.join("no-such-driver").exists());
        let e = s.bind(a, "../../x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn ofed_guid_and_policy_round_trip() {
        let t = Tree::new(2);
        let s = t.sysfs();
        let pf = pci(PF);
        assert!(s.ofed_dir(pf, VfIndex(1)).is_some());
        assert_eq!(s.ofed_dir(pf, VfIndex(7)), None);
        assert_eq!(
            s.read_ofed_guid(pf, VfIndex(1), GuidKind::Node).unwrap(),
            Some("02:00:00:00:00:01:00:01".parse().unwrap())
        );
        assert_eq!(
            s.read_ofed_guid(pf, VfIndex(1), GuidKind::Port).unwrap(),
            Some("02:00:00:00:00:02:00:01".parse().unwrap())
        );
        let g: Guid = "11:22:33:44:55:66:77:88".parse().unwrap();
        s.write_ofed_guid(pf, VfIndex(1), GuidKind::Port, g)
            .unwrap();
        assert_eq!(
            s.read_ofed_guid(pf, VfIndex(1), GuidKind::Port).unwrap(),
            Some(g)
        );
        assert_eq!(
            fs::read_to_string(t.dev(PF).join("sriov/1/port")).unwrap(),
            "11:22:33:44:55:66:77:88\n"
        );
        assert_eq!(
            s.read_ofed_policy(pf, VfIndex(0)).unwrap(),
            Some(LinkState::Auto)
        );
        s.write_ofed_policy(pf, VfIndex(0), LinkState::Disable)
            .unwrap();
        assert_eq!(
            fs::read_to_string(t.dev(PF).join("sriov/0/policy")).unwrap(),
            "Down\n"
        );
        assert_eq!(
            s.read_ofed_policy(pf, VfIndex(0)).unwrap(),
            Some(LinkState::Disable)
        );
    }

    #[test]
    fn ofed_absent() {
        let t = Tree::new(1);
        let s = t.sysfs();
        let pf = pci(PF);
        fs::remove_file(t.dev(PF).join("sriov/0/port")).unwrap();
        assert_eq!(
            s.read_ofed_guid(pf, VfIndex(0), GuidKind::Port).unwrap(),
            None
        );
        let e = s
            .write_ofed_guid(pf, VfIndex(0), GuidKind::Port, Guid(1))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!t.dev(PF).join("sriov/0/port").exists(), "must not create");
        fs::remove_dir_all(t.dev(PF).join("sriov")).unwrap();
        assert_eq!(s.ofed_dir(pf, VfIndex(0)), None);
        assert_eq!(
            s.read_ofed_guid(pf, VfIndex(0), GuidKind::Node).unwrap(),
            None
        );
        assert_eq!(s.read_ofed_policy(pf, VfIndex(0)).unwrap(), None);
        assert!(s
            .write_ofed_policy(pf, VfIndex(0), LinkState::Enable)
            .is_err());
    }

    #[test]
    fn ofed_malformed() {
        let t = Tree::new(1);
        let s = t.sysfs();
        fs::write(t.dev(PF).join("sriov/0/node"), "zz\n").unwrap();
        fs::write(t.dev(PF).join("sriov/0/policy"), "Sideways\n").unwrap();
        let e = s
            .read_ofed_guid(pci(PF), VfIndex(0), GuidKind::Node)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(
            e.to_string().contains("sriov/0/node holds \"zz\\n\""),
            "{e}"
        );
        let e = s.read_ofed_policy(pci(PF), VfIndex(0)).unwrap_err();
        assert!(e.to_string().contains("Follow, Up or Down"), "{e}");
    }

    #[test]
    fn netdev_owner_and_virtfns() {
        let t = Tree::new(3);
        let s = t.sysfs();
        assert_eq!(
            s.netdev_pci_address("ibp175s0f0v2").unwrap(),
            Some(pci("0000:af:00.4"))
        );
        assert_eq!(s.netdev_pci_address("ibp175s0f0").unwrap(), Some(pci(PF)));
        assert_eq!(s.netdev_pci_address("eth9").unwrap(), None);
        assert!(s.netdev_pci_address("../x").is_err());
        assert_eq!(
            s.virtfns(pci(PF)).unwrap(),
            vec![
                (VfIndex(0), pci("0000:af:00.2")),
                (VfIndex(1), pci("0000:af:00.3")),
                (VfIndex(2), pci("0000:af:00.4")),
            ]
        );
        assert_eq!(s.rdma_devices(pci("0000:af:00.4")).unwrap(), vec!["mlx5_3"]);
        assert_eq!(
            s.driver(pci("0000:af:00.4")).unwrap().as_deref(),
            Some("mlx5_core")
        );
    }

    #[test]
    fn root_from_env_and_default() {
        // Only this test touches the variable.
        std::env::set_var(SYSFS_ROOT_ENV, "/tmp/x");
        assert_eq!(Sysfs::from_env().root(), Path::new("/tmp/x"));
        std::env::set_var(SYSFS_ROOT_ENV, "");
        assert_eq!(Sysfs::from_env().root(), Path::new("/sys"));
        std::env::remove_var(SYSFS_ROOT_ENV);
        assert_eq!(Sysfs::from_env().root(), Path::new("/sys"));
        assert_eq!(
            Sysfs::new("/sys").pci_device_dir(pci("af:00.2")),
            Path::new("/sys/bus/pci/devices/0000:af:00.2")
        );
    }

    #[test]
    fn works_on_this_machines_sysfs() {
        // The same code on a real kernel's /sys: every PCI device either discovers as a
        // VF or is rejected with a typed error; nothing panics.
        let s = Sysfs::new("/sys");
        let Ok(rd) = fs::read_dir("/sys/bus/pci/devices") else {
            return;
        };
        for e in rd.flatten() {
            let Ok(addr) = e.file_name().to_string_lossy().parse::<PciAddress>() else {
                continue;
            };
            match s.discover_vf(addr) {
                Ok(vf) => assert_eq!(vf.addr, addr),
                Err(DiscoveryError::IsPf { .. } | DiscoveryError::NotVf { .. }) => {}
                Err(e) => panic!("{addr}: {e}"),
            }
            s.driver(addr).unwrap();
        }
    }
}
