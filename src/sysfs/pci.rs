//! PCI topology and VF discovery: which PF a VF belongs to, its index, and every PF.
//!
//! Kernel sources: Documentation/ABI/testing/sysfs-bus-pci (`sriov_totalvfs`,
//! `sriov_numvfs`, `sriov_offset`, `sriov_stride`) and drivers/pci/iov.c, which creates
//! those attributes on every SR-IOV PF and the `<VF>/physfn` and `<PF>/virtfn<N>` links
//! (`pci_iov_sysfs_link()`: `virtfn<N>` is the relative link `../<VF BDF>`).

use super::driver::{read_driver, VFIO_PCI_DRIVER};
use super::netdev::pick_pf_netdev;
use super::rdma::read_pkeys;
use super::{list_dir, pci_address_of_dir, with_path, DiscoveryError, Sysfs};
use crate::types::{PciAddress, VfIndex};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

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

impl Sysfs {
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
}

/// `(N, <dir>/virtfn<N>)` for every `virtfn<N>` entry of a PF directory, sorted by N.
pub(super) fn virtfn_links(pf_dir: &Path) -> io::Result<Vec<(VfIndex, PathBuf)>> {
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
pub(super) fn vf_index_by_routing_id(
    pf_dir: &Path,
    pf: PciAddress,
    vf: PciAddress,
) -> Option<VfIndex> {
    let num = |f: &str| -> Option<i64> {
        crate::fsutil::read_text(&pf_dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
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
