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
pub mod rdma;
pub mod sysfs;
pub mod types;
pub mod vfguid;
