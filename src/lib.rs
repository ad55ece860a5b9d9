//! `ib-sriov`: a CNI plugin that attaches InfiniBand SR-IOV virtual functions to pods.
//!
//! Layers (see docs/design.md, "How it fits together"):
//! - [`cni`]: the protocol (environment, versions, results, errors); knows nothing of VFs.
//! - [`config`]: the network configuration of this plugin, validated up front.
//! - host adapters: [`sysfs`] (PCI/SR-IOV topology), [`netlink`] (links, addresses,
//!   routes, VF settings), [`rdma`] (RDMA devices), [`nlsock`] (the netlink socket
//!   under both), [`netns`], [`ipam`] (built-in allocator), [`journal`], [`fsutil`]
//!   (atomic writes, bounded locks); they know nothing of CNI.
//! - [`plugin`]: the only place that orders steps, journals them and undoes them.
//! - [`cli`]: the CNI binary's entry (`ib-sriov`, `ib-sriov-ipam`); the node tools
//!   (doctor, exporter, top) are the crate `ib-sriovctl` (src/ib-sriovctl), which this
//!   library does not link.

pub mod boot;
pub mod callmetrics;
pub mod cli;
pub mod cni;
pub mod config;
pub mod failpoint;
pub mod fsutil;
pub mod gocache;
pub mod ipam;
pub mod ipam_plugin;
pub mod journal;
pub mod logging;
pub mod netlink;
pub mod netns;
pub mod nlsock;
pub mod plugin;
pub mod policy;
pub mod process;
pub mod rdma;
pub mod sysfs;
pub mod types;
pub mod vfguid;
pub mod watchdog;

/// The version this build calls itself (`ib-sriov --version`, the doctor report, the Go
/// cache files' writer), fixed by `build.rs`: a release says `X.Y.Z` (scripts/release.sh
/// builds it from the tag `vX.Y.Z`, which must equal Cargo.toml's version, and passes it
/// as `IB_SRIOV_VERSION`); a snapshot of release.sh `X.Y.Z-dev.g<commit>`; every other
/// build, a plain `cargo build` of a checkout included, `X.Y.Z-dev+g<commit>` (12 hex),
/// or `X.Y.Z-dev` when built without git and without `IB_SRIOV_COMMIT`.
pub fn version() -> &'static str {
    env!("IB_SRIOV_BUILD_VERSION")
}
