//! [`DiscoveryError`]: why a sysfs read failed, naming the path and what was found.
//!
//! Kernel sources of the facts it reports: the PCI device directories and links of
//! Documentation/ABI/testing/sysfs-bus-pci (`physfn`, `virtfn<N>`, `sriov_totalvfs`),
//! the netdev directory of Documentation/ABI/testing/sysfs-class-net, and the pkey
//! files of Documentation/ABI/stable/sysfs-class-infiniband.

use crate::types::PciAddress;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

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
