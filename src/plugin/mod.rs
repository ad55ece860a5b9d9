//! The plugin layer: ADD, DEL and CHECK as transactions over the host adapters.
//! It is the only layer that orders steps, journals them and undoes them.

mod add;
mod check;
mod del;
pub mod gc;
pub mod rdma;
pub mod status;
pub mod vfattr;

use crate::cni::{code, CniEnv, CniError, Command, Delegate};
use crate::config::NetConf;
use crate::fsutil::{lock_with_timeout, FileLock, LockError};
use crate::ipam::{IpamConfig, IpamError, BUILTIN_TYPE};
use crate::journal::JournalStore;
use crate::sysfs::Sysfs;
use crate::types::PciAddress;
use serde_json::Value;
use std::time::Duration;

/// How long to wait for a VF netdev to reappear after a driver rebind.
pub const NETDEV_WAIT: Duration = Duration::from_secs(10);

/// Everything one invocation needs.
pub struct Ctx<'a> {
    /// The CNI environment.
    pub env: &'a CniEnv,
    /// The validated configuration.
    pub conf: &'a NetConf,
    /// sysfs (root from `IB_SRIOV_SYSFS_ROOT`, default `/sys`).
    pub sysfs: Sysfs,
    /// Journals and locks.
    pub store: JournalStore,
    /// RDMA netlink access (the kernel, or an in-memory double in tests).
    pub rdma: &'a dyn rdma::RdmaProvider,
}

/// The IPAM chosen by `ipam.type`.
pub enum Ipam {
    /// The built-in allocator (`ib-sriov-ipam`).
    Builtin(IpamConfig),
    /// Any other type: a delegated IPAM plugin on `CNI_PATH` (host-local, static,
    /// whereabouts, nv-ipam, ...), run per SPEC.md "Plugin Delegation".
    External(Delegate),
}

impl Ctx<'_> {
    /// Parses the IPAM configuration (before any host change).
    pub fn ipam(&self) -> Result<Option<Ipam>, CniError> {
        let Some(v) = &self.conf.ipam else {
            return Ok(None);
        };
        let t = v.get("type").and_then(Value::as_str).unwrap_or("");
        if t == BUILTIN_TYPE {
            return IpamConfig::from_json(v)
                .map(|c| Some(Ipam::Builtin(c)))
                .map_err(ipam_error);
        }
        if t == "dhcp" {
            return Err(CniError::config(
                "ipam type \"dhcp\" is not supported: the dhcp plugin needs a daemon that reaches into the pod netns, which an IB VF cannot serve; use ib-sriov-ipam, host-local, whereabouts or nv-ipam",
            ));
        }
        if t.is_empty() {
            return Err(CniError::config(
                "ipam.type is missing: use \"ib-sriov-ipam\" (built in) or the name of an IPAM plugin on CNI_PATH",
            ));
        }
        Delegate::find(t, &self.env.path).map(|d| Some(Ipam::External(d)))
    }

    /// Runs the delegated IPAM plugin with `command`, this invocation's environment and
    /// the network configuration as received (SPEC.md "Plugin Delegation").
    pub fn delegate(&self, d: &Delegate, command: Command) -> Result<Option<Value>, CniError> {
        let stdin = serde_json::to_vec(&self.conf.raw)
            .map_err(|e| CniError::internal(format!("encoding the config: {e}")))?;
        d.run(command, self.env, &stdin)
    }

    /// Takes the per-VF lock (`<stateDir>/locks/<BDF>.lock`), bounded by `lockTimeoutMs`.
    pub fn lock_vf(&self, vf: PciAddress) -> Result<FileLock, CniError> {
        lock_with_timeout(&self.store.vf_lock_path(vf), self.conf.lock_timeout).map_err(|e| match e
        {
            LockError::Timeout(..) => CniError::try_later(format!("VF {vf} is busy: {e}")),
            LockError::Io(..) => CniError::new(code::IO_FAILURE, e.to_string()),
        })
    }
}

/// Maps an IPAM error to its CNI code: busy lock -> 11, bad config -> 7, else 103.
pub fn ipam_error(e: IpamError) -> CniError {
    match &e {
        IpamError::Busy(_) => CniError::try_later(e.to_string()),
        IpamError::InvalidConfig(_) => CniError::config(e.to_string()),
        _ => CniError::new(code::IPAM_FAILURE, e.to_string()),
    }
}

/// Runs one CNI command against the real host (sysfs from `IB_SRIOV_SYSFS_ROOT` or
/// `/sys`, the kernel's RDMA netlink) and returns what goes on stdout (`None` for none).
pub fn run(env: &CniEnv, conf: &NetConf) -> Result<Option<Value>, CniError> {
    run_with(env, conf, Sysfs::from_env(), &rdma::KernelRdma)
}

/// [`run`] with an explicit sysfs root and RDMA provider (in-process tests use
/// [`crate::rdma::MemoryRdma`] where the kernel has no RDMA subsystem).
pub fn run_with(
    env: &CniEnv,
    conf: &NetConf,
    sysfs: Sysfs,
    rdma: &dyn rdma::RdmaProvider,
) -> Result<Option<Value>, CniError> {
    let ctx = Ctx {
        env,
        conf,
        sysfs,
        store: JournalStore::new(&conf.state_dir),
        rdma,
    };
    match env.command {
        Command::Add => add::add(&ctx).map(Some),
        Command::Del => del::del(&ctx).map(|_| None),
        Command::Check => check::check(&ctx).map(|_| None),
        Command::Gc => gc::gc(&ctx).map(|_| None),
        Command::Status => status::status(&ctx).map(|_| None),
        Command::Version => Ok(Some(crate::cni::version_reply(Some(
            conf.cni_version.as_str(),
        )))),
    }
}
