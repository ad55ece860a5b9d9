//! `ib-sriov`: a CNI plugin that attaches InfiniBand SR-IOV virtual functions to pods.
//!
//! Layers (see docs/design.md, "How it fits together"):
//! - [`cni`]: the protocol (environment, versions, results, errors); knows nothing of VFs.
//! - [`config`]: the network configuration of this plugin, validated up front.
//! - host adapters: [`sysfs`] (PCI/SR-IOV topology), [`netlink`] (links, addresses,
//!   routes, VF settings), [`netns`], [`ipam`] (built-in allocator), [`journal`],
//!   [`fsutil`] (atomic writes, bounded locks); they know nothing of CNI.
//! - [`plugin`]: the only place that orders steps, journals them and undoes them.

pub mod boot;
pub mod cli;
pub mod cni;
pub mod config;
pub mod doctor;
pub mod failpoint;
pub mod fsutil;
pub mod gocache;
pub mod ipam;
pub mod ipam_plugin;
pub mod journal;
pub mod logging;
pub mod netlink;
pub mod netns;
pub mod plugin;
pub mod policy;
pub mod rdma;
pub mod sysfs;
pub mod types;
pub mod vfguid;

/// The version this build calls itself (`ib-sriov --version`, the doctor report):
/// `IB_SRIOV_VERSION` at build time when set and not empty, else Cargo's package version.
/// Only `scripts/release.sh --snapshot` sets it (`X.Y.Z-dev.g<commit>`, so a snapshot is
/// never mistaken for release X.Y.Z); a release is built from a tag `vX.Y.Z` that
/// release.sh requires to equal Cargo.toml's version, so releases and plain builds use
/// `CARGO_PKG_VERSION`.
pub fn version() -> &'static str {
    match option_env!("IB_SRIOV_VERSION") {
        Some(v) if !v.is_empty() => v,
        _ => env!("CARGO_PKG_VERSION"),
    }
}
