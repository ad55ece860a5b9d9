//! The driver a PCI device is bound to, and driver unbind/bind.
//!
//! Kernel sources: Documentation/ABI/testing/sysfs-bus-pci (`<dev>/driver` link,
//! `/sys/bus/pci/drivers/<name>/bind` and `unbind`, which take a BDF) and
//! Documentation/driver-api/vfio.rst (binding a VF to vfio-pci).

use super::{check_name, with_path, write_existing, Sysfs};
use crate::types::PciAddress;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Driver name of a VF handed to a VM or DPDK through VFIO
/// (basename of `<VF>/driver -> .../bus/pci/drivers/vfio-pci`).
pub const VFIO_PCI_DRIVER: &str = "vfio-pci";

/// Driver name of ConnectX VFs and PFs (`<dev>/driver -> .../bus/pci/drivers/mlx5_core`).
pub const MLX5_CORE_DRIVER: &str = "mlx5_core";

impl Sysfs {
    /// `<root>/bus/pci/drivers/<driver>`; not checked.
    pub fn pci_driver_dir(&self, driver: &str) -> io::Result<PathBuf> {
        check_name(driver, "driver name")?;
        Ok(self.root.join("bus/pci/drivers").join(driver))
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
}

/// Basename of `<dir>/driver`'s target; `None` when there is no such link.
pub(super) fn read_driver(dir: &Path) -> io::Result<Option<String>> {
    match fs::read_link(dir.join("driver")) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
