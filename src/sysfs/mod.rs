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
//!
//! One file per concern, each naming its kernel sources:
//!
//! - [`pci`]: PCI topology and VF discovery (`physfn`, `virtfn<N>`, `sriov_*`);
//! - [`driver`]: the bound driver and driver unbind/bind;
//! - [`netdev`]: a device's `net/` directory and its netdevs' attributes;
//! - [`rdma`]: a device's `infiniband/` directory and port pkey tables;
//! - [`ofed`]: the MLNX_OFED per-VF `sriov/<N>/` files;
//! - [`error`]: [`DiscoveryError`], shared by all of them.
//!
//! The public API is this module's: every item is re-exported here, so callers name
//! `crate::sysfs::Sysfs`, `crate::sysfs::VfDevice` and so on whatever file holds it.

mod driver;
mod error;
mod netdev;
mod ofed;
mod pci;
mod rdma;
#[cfg(test)]
mod tests;

pub use driver::{MLX5_CORE_DRIVER, VFIO_PCI_DRIVER};
pub use error::DiscoveryError;
pub use ofed::GuidKind;
pub use pci::VfDevice;

use crate::types::PciAddress;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Environment variable naming the sysfs root to use instead of `/sys` (tests and the
/// emulated host set it to a temporary tree).
pub const SYSFS_ROOT_ENV: &str = "IB_SRIOV_SYSFS_ROOT";

/// The sysfs root used when [`SYSFS_ROOT_ENV`] is unset or empty.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

/// Handle on a sysfs tree rooted at [`Sysfs::root`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
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

    /// `<root>/bus/pci/devices/<BDF>` when it exists (following the link).
    pub(super) fn existing_device_dir(&self, addr: PciAddress) -> Result<PathBuf, DiscoveryError> {
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
}

/// Rejects names that would escape the directory they are joined to.
pub(super) fn check_name(name: &str, what: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid {what} {name:?}"),
        ));
    }
    Ok(())
}

/// Prefixes an I/O error with the path it concerns, keeping its kind.
pub(super) fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The PCI address a (resolved) device directory is named after: the last component of
/// `<root>/devices/.../<BDF>` parsed as a BDF (`dddd:bb:dd.f`); `None` when it is not one.
/// Shared by [`pci`] (a PF's or VF's directory) and [`netdev`] (a netdev's `device`).
pub(super) fn pci_address_of_dir(dir: &Path) -> Option<PciAddress> {
    dir.file_name()?.to_str()?.parse().ok()
}

/// Sorted entry names of `dir`; empty when it does not exist.
pub(super) fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
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

/// The content of a file; `None` when it does not exist (`ENOENT`, or `ENOTDIR`: a
/// component of its path is not a directory).
pub(super) fn read_optional(path: &Path) -> io::Result<Option<String>> {
    match crate::fsutil::read_text(path) {
        Ok(s) => Ok(Some(s)),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
        {
            Ok(None)
        }
        Err(e) => Err(with_path(path, e)),
    }
}

/// The content of `path` as `parse` reads it; `None` when the file does not exist.
/// Errors: the file unreadable, or `parse` refusing it (`InvalidData`, naming
/// `expected`, the path and the content).
pub(super) fn read_parsed<T>(
    path: PathBuf,
    expected: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> io::Result<Option<T>> {
    let Some(text) = read_optional(&path)? else {
        return Ok(None);
    };
    match parse(&text) {
        Some(v) => Ok(Some(v)),
        None => Err(io::Error::from(DiscoveryError::Malformed {
            path,
            content: text,
            expected,
        })),
    }
}

/// Writes `text` to an existing file (sysfs attributes cannot be created).
pub(super) fn write_existing(path: &Path, text: &str) -> io::Result<()> {
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
