//! A PCI device's netdevs: its `net/` directory, waiting for a netdev after a bind, and
//! the netdev attributes the plugin reads (`ifindex`, `address`, `type`, `device`).
//!
//! Kernel sources: Documentation/ABI/testing/sysfs-class-net (`ifindex`, `address`,
//! `type`; `/sys/class/net/<if>/device` links to the parent device) and
//! include/uapi/linux/if_arp.h (ARPHRD_INFINIBAND = 32). Entries under `net/` are per
//! network namespace (net/core/net-sysfs.c `net_namespace()` tagging).

use super::{check_name, list_dir, pci_address_of_dir, read_optional, read_parsed, with_path};
use super::{DiscoveryError, Sysfs};
use crate::types::PciAddress;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

impl Sysfs {
    /// Netdev names currently under `<root>/bus/pci/devices/<addr>/net/`, sorted; empty
    /// when the directory is absent or empty (netdev in another netns, vfio-pci, unbound).
    /// Fails with `NotFound` when the PCI device itself does not exist.
    pub fn netdevs(&self, addr: PciAddress) -> io::Result<Vec<String>> {
        let dir = self.existing_device_dir(addr)?.join("net");
        list_dir(&dir).map_err(|e| with_path(&dir, e))
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
        let path = self.netdev_attr(addr, ifname, "ifindex")?;
        read_parsed(path, "a decimal interface index", |t| t.trim().parse().ok())
    }

    /// The hardware address of netdev `ifname` of the device, as the kernel prints it in
    /// `<root>/bus/pci/devices/<addr>/net/<ifname>/address` (lower-case hex bytes joined
    /// by `:`, 20 bytes for IPoIB; Documentation/ABI/testing/sysfs-class-net); `None`
    /// when that netdev is not listed.
    pub fn netdev_address(&self, addr: PciAddress, ifname: &str) -> io::Result<Option<String>> {
        let path = self.netdev_attr(addr, ifname, "address")?;
        Ok(read_optional(&path)?.map(|t| t.trim().to_string()))
    }

    /// `<root>/bus/pci/devices/<addr>/net/<ifname>/<attr>`, not checked. Errors: the
    /// name invalid (`InvalidInput`), the device missing (`NotFound`).
    fn netdev_attr(&self, addr: PciAddress, ifname: &str, attr: &str) -> io::Result<PathBuf> {
        check_name(ifname, "interface name")?;
        Ok(self
            .existing_device_dir(addr)?
            .join("net")
            .join(ifname)
            .join(attr))
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
}

/// The PF netdev to reach the VFs through, from the names under `<PF>/net/` (sorted):
/// the only one, or, when the PF has several, the first InfiniBand one
/// (`<PF>/net/<name>/type` reads 32, ARPHRD_INFINIBAND in include/uapi/linux/if_arp.h):
/// the kernel accepts VF GUIDs only on an InfiniBand PF netdev (`do_setvfinfo()` in
/// net/core/rtnetlink.c). `None` when the PF has no netdev in this netns.
pub(super) fn pick_pf_netdev(net_dir: &Path, names: Vec<String>) -> Option<String> {
    if names.len() > 1 {
        let ib = names.iter().find(|n| {
            crate::fsutil::read_text(&net_dir.join(n).join("type")).is_ok_and(|t| t.trim() == "32")
        });
        if let Some(n) = ib {
            return Some(n.clone());
        }
    }
    names.into_iter().next()
}
