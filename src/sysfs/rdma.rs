//! A PCI device's RDMA devices (`infiniband/`) and the pkey table of their port 1.
//!
//! Kernel sources: Documentation/ABI/stable/sysfs-class-infiniband
//! (`ports/<N>/pkeys/<i>`, printed by `show_port_pkey` in
//! drivers/infiniband/core/sysfs.c as `0x%04x`).

use super::{list_dir, with_path, DiscoveryError, Sysfs};
use crate::types::PciAddress;
use std::io;
use std::path::Path;

impl Sysfs {
    /// RDMA device names under `<root>/bus/pci/devices/<addr>/infiniband/`, sorted;
    /// empty when absent. Fails with `NotFound` when the PCI device does not exist.
    pub fn rdma_devices(&self, addr: PciAddress) -> io::Result<Vec<String>> {
        let dir = self.existing_device_dir(addr)?.join("infiniband");
        list_dir(&dir).map_err(|e| with_path(&dir, e))
    }

    /// The `dev` numbers ("231:193", `MAJOR:MINOR` as the driver core prints
    /// `/sys/.../dev`) of the PCI device's uverbs char devices,
    /// `<root>/bus/pci/devices/<addr>/infiniband_verbs/uverbs<N>/dev` (ib_uverbs'
    /// class device, parented to the PCI device; Documentation/ABI/stable/sysfs-class-infiniband
    /// "/sys/class/infiniband_verbs/uverbs<N>"), sorted; empty when absent. These are what
    /// the pod's `/dev/infiniband/uverbs<N>` files point at. Fails with `NotFound` when
    /// the PCI device does not exist.
    pub fn uverbs_devs(&self, addr: PciAddress) -> io::Result<Vec<String>> {
        let dir = self.existing_device_dir(addr)?.join("infiniband_verbs");
        let mut out = Vec::new();
        for n in list_dir(&dir).map_err(|e| with_path(&dir, e))? {
            let path = dir.join(&n).join("dev");
            match crate::fsutil::read_text(&path) {
                Ok(t) => out.push(t.trim().to_string()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(with_path(&path, e)),
            }
        }
        out.sort();
        Ok(out)
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
}

/// The pkey table of an RDMA port: `<pkeys dir>/<i>` files ("0xffff"), in numeric order
/// of `i`; empty when the directory is absent.
pub(super) fn read_pkeys(dir: &Path) -> Result<Vec<u16>, DiscoveryError> {
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
        let text = crate::fsutil::read_text(&path).map_err(io_err(&path))?;
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
