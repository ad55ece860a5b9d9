//! The plugin layer: ADD, DEL and CHECK as transactions over the host adapters.
//! It is the only layer that orders steps, journals them and undoes them.

mod add;
pub use add::no_usable_guid;
mod check;
mod del;
pub mod errors;
pub mod gc;
pub mod go_index;
pub mod rdma;
pub mod rebind_queue;
pub mod status;
pub mod steps;
mod teardown;
mod upgrade;
pub mod vfattr;

pub use add::device_and_mode;

use crate::cni::{code, CniEnv, CniError, Command, Delegate};
use crate::config::NetConf;
use crate::fsutil::{lock_with_timeout, FileLock, LockError};
use crate::ipam::{IpamConfig, IpamError, BUILTIN_TYPE};
use crate::journal::JournalStore;
use crate::sysfs::Sysfs;
use crate::types::PciAddress;
use rebind_queue::{Limits, QueueError, RebindQueue, RebindTurn};
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long to wait for a VF netdev to reappear after a driver rebind.
pub const NETDEV_WAIT: Duration = Duration::from_secs(10);

/// The time bound of ADD (and CHECK, GC), measured from the start of the process (of the call of
/// [`run_with`] when the library runs in-process): the verb begins no driver rebind
/// that could end past it. kubelet gives the runtime 2 min for `StopPodSandbox` (where
/// DEL runs) and 4 min for `RunPodSandbox` (ADD) (`--runtime-request-timeout`, default
/// 2 min, doubled for `RunPodSandbox`: `remoteRuntimeService` in kubelet's CRI client);
/// a runtime that runs the plugin under that request's context has it SIGKILLed then
/// (libcni's `RawExec` uses `exec.CommandContext`), which in the middle of an unbind and
/// bind can leave the VF without a driver. 80 s leaves room for what follows the last
/// rebind (the IPAM lock, bounded by `lockTimeoutMs`, and ADD's IPv6 DAD wait, 10 s), so
/// that ADD ends within 2 min with the default `lockTimeoutMs` (docs/operations.md
/// "Failures and what the plugin does", the worst-case rows). DEL has its own, shorter
/// bound, [`DEL_BUDGET`].
pub const VERB_BUDGET: Duration = Duration::from_secs(80);

/// DEL's time bound, measured like [`VERB_BUDGET`]: every wait of a DEL (the VF lock,
/// the netdev's return from a deleted pod netns, the rebind queue, the IPAM lock, a
/// delegated IPAM plugin) gets at most what is left of it ([`Ctx::bounded`]), and a
/// rebind turn must begin [`REBIND_RESERVE`] before it ends. A DEL that runs out
/// answers code 11 with its journal kept, and the runtime's retry carries on from the
/// steps already undone (each undo checks the current state). 60 s is half of kubelet's
/// runtime request timeout for `StopPodSandbox` (2 min, `--runtime-request-timeout`).
/// What the plugin cannot bound: the kernel's own unbind/bind past
/// [`DRIVER_REBIND_ALLOWANCE`].
pub const DEL_BUDGET: Duration = Duration::from_secs(60);

/// What the driver's unbind and bind are allowed in [`REBIND_RESERVE`] (mlx5 takes
/// 0.2 to 1 s; the kernel call itself is not bounded by the plugin).
pub const DRIVER_REBIND_ALLOWANCE: Duration = Duration::from_secs(5);

/// What a rebind window takes once its turn has begun: the driver's unbind and bind
/// ([`DRIVER_REBIND_ALLOWANCE`]), the wait for the netdev ([`NETDEV_WAIT`]) and the
/// settling of its name (`RENAME_SETTLE` in `steps/netdev.rs`, 5 s): 20 s. A rebind
/// turn must begin by [`VERB_BUDGET`] minus this after the verb's start.
pub const REBIND_RESERVE: Duration =
    Duration::from_secs(DRIVER_REBIND_ALLOWANCE.as_secs() + NETDEV_WAIT.as_secs() + 5);

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
    /// When the verb started: the process start ([`crate::cli::process_start`]), else
    /// the call of [`run_with`]. [`VERB_BUDGET`] counts from here.
    pub started: Instant,
}

/// The IPAM chosen by `ipam.type`.
pub enum Ipam {
    /// The built-in allocator (`ib-sriov-ipam`).
    Builtin(IpamConfig),
    /// Any other type: a delegated IPAM plugin on `CNI_PATH` (host-local, static,
    /// whereabouts, nv-ipam, ...), run per SPEC.md "Plugin Delegation".
    External(Delegate),
}

/// The IPAM of a configuration, parsed before any host change: `None` without `ipam`
/// (`NetConf` already turned an `ipam` without `type` into none); the built-in
/// allocator for `ib-sriov-ipam`; else a delegated plugin found on `cni_path`.
/// Errors (code 7): `dhcp`, a plugin not on `cni_path`, a malformed built-in
/// configuration.
pub fn ipam_for(conf: &NetConf, cni_path: &[String]) -> Result<Option<Ipam>, CniError> {
    let Some(v) = &conf.ipam else {
        return Ok(None);
    };
    let t = v.get("type").and_then(Value::as_str).unwrap_or("");
    if t == BUILTIN_TYPE {
        return IpamConfig::from_json(v)
            .map(|c| Some(Ipam::Builtin(c)))
            .map_err(|e| {
                // A refusal is all the runtime shows: the typos that may explain it go
                // with it (they are also logged as warnings).
                let mut e = ipam_error(e);
                let hints: Vec<&str> = conf
                    .warnings
                    .iter()
                    .filter(|w| w.starts_with("unknown key ipam."))
                    .map(String::as_str)
                    .collect();
                if !hints.is_empty() {
                    e.msg = format!("{} ({})", e.msg, hints.join("; "));
                }
                e
            });
    }
    if t == "dhcp" {
        return Err(CniError::config(
            "ipam type \"dhcp\" is not supported: the dhcp plugin needs a daemon that reaches into the pod netns, which an IB VF cannot serve; use ib-sriov-ipam, host-local, whereabouts or nv-ipam",
        ));
    }
    Delegate::find(t, cni_path).map(|d| Some(Ipam::External(d)))
}

impl Ctx<'_> {
    /// Parses this call's IPAM configuration (see [`ipam_for`]).
    pub fn ipam(&self) -> Result<Option<Ipam>, CniError> {
        ipam_for(self.conf, &self.env.path)
    }

    /// Runs the delegated IPAM plugin with `command`, this invocation's environment and
    /// the network configuration as received (SPEC.md "Plugin Delegation").
    pub fn delegate(&self, d: &Delegate, command: Command) -> Result<Option<Value>, CniError> {
        let stdin = serde_json::to_vec(&self.conf.raw)
            .map_err(|e| CniError::internal(format!("encoding the config: {e}")))?;
        d.run(command, self.env, &stdin)
    }

    /// Takes this process's turn in the node's rebind queue
    /// (`<stateDir>/locks/rebind.queue`, [`rebind_queue`]), and with it the node-wide
    /// flock `<stateDir>/locks/rebind` that older binaries take. Held from the GUID
    /// write through the unbind/bind to the re-read of the VF's netdev and RDMA device,
    /// so no two rebinds on the node overlap: the kernel gives a re-probed VF the lowest
    /// free RDMA device name and `uverbsN` minor, and two overlapping rebinds could swap
    /// them (the Go plugin serializes every ADD and DEL on one node-wide lock for this
    /// reason). Everything else stays per VF. Turns are given in arrival order; an
    /// entry whose process died never blocks the queue.
    ///
    /// Gives up (code 11) when no rebind ahead finished for `lockTimeoutMs`, or when
    /// the turn could not begin [`REBIND_RESERVE`] before the verb's [`VERB_BUDGET`]
    /// ends, or when an older binary holds the node-wide lock for `lockTimeoutMs`.
    /// Errors: code 11 as above, code 5 on I/O.
    pub fn lock_rebind(&self) -> Result<RebindTurn, CniError> {
        let queue = RebindQueue::new(self.store.rebind_queue_dir(), self.store.rebind_lock_path());
        let budget = self.budget();
        let limits = Limits {
            no_progress: self.conf.lock_timeout,
            begin_by: self.started + (budget - REBIND_RESERVE),
        };
        queue.enter(&limits).map_err(|e| match e {
            QueueError::TimeBound { .. } => CniError::try_later(format!(
                "{} keeps within {} s of its start (kubelet's runtime request timeout is 2 min), so a VF rebind must begin within {} s of it: {e}",
                self.env.command.as_str(),
                budget.as_secs(),
                (budget - REBIND_RESERVE).as_secs()
            )),
            e => e.into(),
        })
    }

    /// Takes the per-VF lock (`<stateDir>/locks/<BDF>.lock`), bounded by `lockTimeoutMs`.
    ///
    /// Errors: code 11 on timeout, code 5 on I/O.
    pub fn lock_vf(&self, vf: PciAddress) -> Result<FileLock, CniError> {
        let timeout = self.bounded(self.conf.lock_timeout);
        lock_with_timeout(&self.store.vf_lock_path(vf), timeout).map_err(|e| match e {
            LockError::Timeout(..) => {
                CniError::try_later(format!("VF {vf} is busy: {e}{}", self.bound_note(timeout)))
            }
            LockError::Io(..) => CniError::new(code::IO_FAILURE, e.to_string()),
        })
    }

    /// The verb's time bound: [`DEL_BUDGET`] for DEL, [`VERB_BUDGET`] otherwise.
    pub fn budget(&self) -> Duration {
        if self.env.command == crate::cni::Command::Del {
            DEL_BUDGET
        } else {
            VERB_BUDGET
        }
    }

    /// A wait of up to `want`, cut to what is left of DEL's [`DEL_BUDGET`] (zero once it
    /// is spent); `want` unchanged for the other verbs.
    pub fn bounded(&self, want: Duration) -> Duration {
        if self.env.command != crate::cni::Command::Del {
            return want;
        }
        let left = (self.started + DEL_BUDGET).saturating_duration_since(Instant::now());
        want.min(left)
    }

    /// `""`, or when `waited` was cut by DEL's bound, a sentence saying so for a code-11
    /// message.
    pub fn bound_note(&self, waited: Duration) -> String {
        if waited < self.conf.lock_timeout && self.env.command == crate::cni::Command::Del {
            format!(
                " (DEL keeps within {} s of its start; the journal is kept and the retry goes on from here)",
                DEL_BUDGET.as_secs()
            )
        } else {
            String::new()
        }
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
        store: journal_store(&conf.state_dir),
        rdma,
        started: crate::cli::process_start().unwrap_or_else(Instant::now),
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

/// The journal store of `state_dir`; the default one also reads the journals earlier
/// versions wrote in [`crate::config::LEGACY_STATE_DIR`].
fn journal_store(state_dir: &std::path::Path) -> JournalStore {
    if state_dir == std::path::Path::new(crate::config::DEFAULT_STATE_DIR) {
        JournalStore::with_legacy(state_dir, crate::config::LEGACY_STATE_DIR)
    } else {
        JournalStore::new(state_dir)
    }
}

/// DEL whose configuration does not parse (SPEC.md DEL must succeed for what was never
/// made): the journal of (containerID, ifname) is looked up in the configuration's
/// `stateDir` when the input is JSON with an absolute one, else in the default; with a
/// journal, DEL runs with the configuration ADD received (journaled); without one, ADD
/// made nothing and DEL succeeds, logging why the configuration was refused.
pub fn del_unparsed(env: &CniEnv, stdin: &[u8], err: &CniError) -> Result<(), CniError> {
    let dir = serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| {
            v.get("stateDir")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .filter(|d| std::path::Path::new(d).is_absolute())
        .unwrap_or_else(|| crate::config::DEFAULT_STATE_DIR.to_string());
    let store = journal_store(std::path::Path::new(&dir));
    match store.load(&env.container_id, &env.ifname)? {
        Some(j) => {
            log::warn!(
                "DEL of {}/{}: the configuration is refused ({err}); using the one ADD journaled",
                env.container_id,
                env.ifname
            );
            let raw = serde_json::to_vec(&j.conf)
                .map_err(|e| CniError::internal(format!("encoding the journaled config: {e}")))?;
            let conf = NetConf::parse(&raw)?;
            run(env, &conf).map(|_| ())
        }
        None => {
            log::warn!(
                "DEL of {}/{}: the configuration is refused ({err}) and there is no journal in {dir}: nothing was made, nothing to do",
                env.container_id,
                env.ifname
            );
            Ok(())
        }
    }
}
