//! The plugin layer: ADD, DEL and CHECK as transactions over the host adapters.
//! It is the only layer that orders steps, journals them and undoes them.

mod add;
pub use add::no_usable_guid;
mod check;
mod del;
pub mod errors;
pub mod gc;
mod go_dirs;
pub mod go_index;
pub mod rdma;
pub mod rebind_queue;
pub mod status;
pub mod steps;
mod teardown;
mod upgrade;
pub mod vfattr;

pub use add::{check_pkey_wait, device_and_mode, device_warnings};

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

/// The rebind bound of ADD (and CHECK, GC), measured from the start of the process (of
/// the call of [`run_with`] when the library runs in-process): the verb begins no
/// driver rebind of its forward steps later than this minus [`REBIND_RESERVE`] (60 s),
/// so a rebind never ends past 80 s. kubelet gives the runtime 2 min for
/// `StopPodSandbox` (where DEL runs) and 4 min for `RunPodSandbox` (ADD)
/// (`--runtime-request-timeout`, default 2 min, doubled for `RunPodSandbox`:
/// `remoteRuntimeService` in kubelet's CRI client); a runtime that runs the plugin
/// under that request's context has it SIGKILLed then (libcni's `RawExec` uses
/// `exec.CommandContext`), which in the middle of an unbind and bind can leave the VF
/// without a driver. ADD's whole bound, rollback included, is [`ADD_BUDGET`]; DEL has
/// its own, shorter bound, [`DEL_BUDGET`].
pub const VERB_BUDGET: Duration = Duration::from_secs(80);

/// ADD's time bound: an ADD ends, or fails with its rollback done, within 220 s of its
/// start (measured like [`VERB_BUDGET`]), whatever a delegated IPAM plugin does, under
/// kubelet's 4 min (240 s) for `RunPodSandbox`. ADD is deadline-driven:
/// - its forward steps end their waits (the VF lock, the built-in IPAM's lock, the
///   delegated IPAM's ADD) by [`add_forward_deadline`] (150 s: this minus
///   [`ROLLBACK_RESERVE`] and [`CLEANUP_RESERVE`]); their rebinds begin by 60 s
///   ([`VERB_BUDGET`]); what follows the IPAM is the IPv6 DAD wait (10 s at most);
/// - the delegated IPAM's DEL after its failed or killed ADD gets what is left before
///   this minus [`ROLLBACK_RESERVE`] (at least [`CLEANUP_RESERVE`]);
/// - the rollback's waits get what is left of this, and its rebind turns begin by this
///   minus [`REBIND_RESERVE`]; its own IPAM release (a delegate's DEL, after the host
///   side is undone) is killed when this ends, leaving the journal to DEL.
///
/// Every delegate call is also capped at [`crate::cni::exec::DELEGATE_TIMEOUT`] (120
/// s). What the plugin cannot bound: the kernel's own unbind/bind past
/// [`DRIVER_REBIND_ALLOWANCE`].
pub const ADD_BUDGET: Duration = Duration::from_secs(220);

/// What ADD keeps at the end of [`ADD_BUDGET`] for the host side of a rollback, after
/// every delegate call: a rebind window ([`REBIND_RESERVE`], 20 s) and 20 s for its
/// turn, the moves back and the link state.
pub const ROLLBACK_RESERVE: Duration = Duration::from_secs(40);

/// What ADD keeps, before [`ROLLBACK_RESERVE`], for the delegated IPAM's DEL that
/// cleans up after a failed or killed delegate ADD: 30 s (whereabouts and nv-ipam
/// answer in well under a second when their API server does).
pub const CLEANUP_RESERVE: Duration = Duration::from_secs(30);

/// The instant by which ADD's forward steps end their waits, for an ADD that started
/// at `started`: [`ADD_BUDGET`] minus [`ROLLBACK_RESERVE`] and [`CLEANUP_RESERVE`]
/// after it (150 s).
pub fn add_forward_deadline(started: Instant) -> Instant {
    started + (ADD_BUDGET - ROLLBACK_RESERVE - CLEANUP_RESERVE)
}

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
    /// When the verb started: the process start ([`crate::process::process_start`]), else
    /// the call of [`run_with`]. [`VERB_BUDGET`] counts from here.
    pub started: Instant,
    /// Set by ADD when it begins its rollback: from then on its waits are cut to
    /// [`ADD_BUDGET`] rather than [`add_forward_deadline`], and its rebind turns may
    /// begin up to [`REBIND_RESERVE`] before [`ADD_BUDGET`] ends.
    pub rolling_back: std::cell::Cell<bool>,
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
    /// the network configuration as received (SPEC.md "Plugin Delegation"), killing it
    /// after [`crate::cni::exec::DELEGATE_TIMEOUT`] cut to what is left of the verb's
    /// bound ([`Ctx::bounded`]).
    ///
    /// Errors: the delegate's; code 11 when it was killed, or when no time is left.
    pub fn delegate(&self, d: &Delegate, command: Command) -> Result<Option<Value>, CniError> {
        self.delegate_within(d, command, self.bounded(crate::cni::exec::DELEGATE_TIMEOUT))
    }

    /// [`Ctx::delegate`] with `limit` instead; not started when `limit` is zero (code
    /// 11, naming the verb's bound).
    pub fn delegate_within(
        &self,
        d: &Delegate,
        command: Command,
        limit: Duration,
    ) -> Result<Option<Value>, CniError> {
        if limit.is_zero() {
            return Err(CniError::try_later(format!(
                "ipam plugin {} {} not started: no time is left{}",
                d.plugin_type,
                command.as_str(),
                self.bound_note(limit)
            )));
        }
        let stdin = serde_json::to_vec(&self.conf.raw)
            .map_err(|e| CniError::internal(format!("encoding the config: {e}")))?;
        d.run_within(command, self.env, &stdin, limit)
    }

    /// What is left until `at` (zero once it passed).
    pub fn left_until(&self, at: Instant) -> Duration {
        at.saturating_duration_since(Instant::now())
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
        let queue = RebindQueue::new(self.store.rebind_queue_dir(), self.store.rebind_lock_path())
            .with_go_lock(crate::gocache::go_lock_path());
        let (budget, why) = self.rebind_budget();
        let limits = Limits {
            no_progress: self.conf.lock_timeout,
            begin_by: self.started + (budget - REBIND_RESERVE),
        };
        queue.enter(&limits).map_err(|e| match e {
            QueueError::TimeBound { .. } => CniError::try_later(format!(
                "{} keeps {why}, so a VF rebind must begin within {} s of it: {e}",
                self.env.command.as_str(),
                (budget - REBIND_RESERVE).as_secs()
            )),
            e => e.into(),
        })
    }

    /// By when after the verb's start a rebind window must end, and why, for messages:
    /// [`DEL_BUDGET`] for DEL, [`ADD_BUDGET`] for ADD's rollback, [`VERB_BUDGET`]
    /// otherwise.
    fn rebind_budget(&self) -> (Duration, String) {
        match self.env.command {
            Command::Del => (
                DEL_BUDGET,
                format!(
                    "within {} s of its start (kubelet's runtime request timeout is 2 min)",
                    DEL_BUDGET.as_secs()
                ),
            ),
            Command::Add if self.rolling_back.get() => (
                ADD_BUDGET,
                format!(
                    "its rollback within {} s of its start (kubelet's RunPodSandbox timeout is 4 min)",
                    ADD_BUDGET.as_secs()
                ),
            ),
            _ => (
                VERB_BUDGET,
                format!(
                    "its VF rebinds within {} s of its start, leaving room for its IPAM and a rollback",
                    VERB_BUDGET.as_secs()
                ),
            ),
        }
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

    /// The instant by which the verb's current waits must end: [`DEL_BUDGET`] after
    /// the start for DEL; for ADD [`add_forward_deadline`], or [`ADD_BUDGET`] after the
    /// start once it is rolling back; none for the other verbs.
    pub fn deadline(&self) -> Option<Instant> {
        match self.env.command {
            Command::Del => Some(self.started + DEL_BUDGET),
            Command::Add if self.rolling_back.get() => Some(self.started + ADD_BUDGET),
            Command::Add => Some(add_forward_deadline(self.started)),
            _ => None,
        }
    }

    /// A wait of up to `want`, cut to what is left until [`Ctx::deadline`] (zero once
    /// it passed); `want` unchanged for verbs without one.
    pub fn bounded(&self, want: Duration) -> Duration {
        match self.deadline() {
            Some(d) => want.min(self.left_until(d)),
            None => want,
        }
    }

    /// `""`, or when `waited` was cut by the verb's bound ([`Ctx::deadline`]) below
    /// `lockTimeoutMs`, a sentence saying so for a code-11 message.
    pub fn bound_note(&self, waited: Duration) -> String {
        if waited >= self.conf.lock_timeout {
            return String::new();
        }
        match self.env.command {
            Command::Del => format!(
                " (DEL keeps within {} s of its start; the journal is kept and the retry goes on from here)",
                DEL_BUDGET.as_secs()
            ),
            Command::Add => format!(
                " (ADD ends within {} s of its start, rollback included; its forward steps end their waits by {} s)",
                ADD_BUDGET.as_secs(),
                (ADD_BUDGET - ROLLBACK_RESERVE - CLEANUP_RESERVE).as_secs()
            ),
            _ => String::new(),
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
        started: crate::process::process_start().unwrap_or_else(Instant::now),
        rolling_back: std::cell::Cell::new(false),
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
                "DEL of {}/{}: the configuration is refused ({err}) and there is no journal in {dir}: nothing left to undo",
                env.container_id,
                env.ifname
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::exec::DELEGATE_TIMEOUT;

    /// A state dir, an ADD configuration with `lock_ms` as `lockTimeoutMs`, and an ADD
    /// environment.
    fn add_parts(lock_ms: u64) -> (tempfile::TempDir, NetConf, CniEnv) {
        let d = tempfile::tempdir().unwrap();
        let conf = NetConf::parse(
            serde_json::json!({
                "cniVersion": "1.0.0", "name": "ibnet", "type": "ib-sriov",
                "deviceID": "0000:af:00.2", "stateDir": d.path(), "lockTimeoutMs": lock_ms
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let vars: std::collections::HashMap<String, String> = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/var/run/netns/x"),
            ("CNI_IFNAME", "net1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        (d, conf, CniEnv::from_map(&vars).unwrap())
    }

    /// A Ctx `t` s into its verb (its start `t` s ago), rolling back or not.
    fn ctx_at<'a>(
        dir: &std::path::Path,
        conf: &'a NetConf,
        env: &'a CniEnv,
        t: u64,
        rolling: bool,
    ) -> Ctx<'a> {
        Ctx {
            env,
            conf,
            sysfs: Sysfs::new(dir),
            store: JournalStore::new(dir),
            rdma: &rdma::KernelRdma,
            started: Instant::now() - Duration::from_secs(t),
            rolling_back: std::cell::Cell::new(rolling),
        }
    }

    /// ADD's schedule, for a delegated IPAM whose ADD and DEL both run until killed,
    /// started at every second `t` of ADD's life (after whatever came before it: the
    /// VF lock, a rebind): the delegate ADD ends by 150 s, its cleanup DEL by 180 s with
    /// at least 30 s of its own when the ADD started by 150 s, the rollback's rebind
    /// turn may begin until 200 s and its window ends by 220 s, and the rollback's IPAM
    /// release ends by 220 s: the whole ADD within [`ADD_BUDGET`], under kubelet's
    /// 240 s. Each figure is what the real [`Ctx`] gives at that instant (its start
    /// moved into the past).
    #[test]
    fn add_ends_within_its_budget_whatever_the_delegate_does() {
        let (d, conf, env) = add_parts(600_000);
        let at = |t: u64, rolling: bool| ctx_at(d.path(), &conf, &env, t, rolling);
        let secs = |x: Duration| (x.as_millis() as u64).div_ceil(1000);
        let add_limit = |t| secs(at(t, false).bounded(DELEGATE_TIMEOUT));
        let cleanup_limit = |t| {
            let c = at(t, false);
            secs(DELEGATE_TIMEOUT.min(c.left_until(c.started + (ADD_BUDGET - ROLLBACK_RESERVE))))
        };
        assert_eq!(add_limit(0), 120, "the delegate's own cap");
        assert_eq!(add_limit(100), 50);
        assert_eq!(add_limit(150), 0);
        assert_eq!(cleanup_limit(120), 60);
        for t in 0..=220u64 {
            let t1 = t + add_limit(t);
            assert!(t1 <= 150.max(t), "t={t}: the delegate ADD ends at {t1}");
            let c = cleanup_limit(t1);
            if t <= 150 {
                assert!(c >= 30, "t={t}: the cleanup DEL gets only {c} s");
            }
            let t2 = t1 + c;
            assert!(t2 <= 180.max(t1), "t={t}: the cleanup DEL ends at {t2}");
            // The rollback: its rebind may begin until 200 s and lasts 20 s at most.
            let r = at(t2, true);
            let (budget, _) = r.rebind_budget();
            assert_eq!(budget - REBIND_RESERVE, Duration::from_secs(200));
            // Worst case: it waits its turn until the last instant, then takes the
            // whole window; past that instant it is refused (code 11, journal kept).
            let begin_by = budget.as_secs() - REBIND_RESERVE.as_secs();
            let t3 = match t2 <= begin_by {
                true => begin_by + REBIND_RESERVE.as_secs(),
                false => t2,
            };
            assert!(t3 <= 220, "t={t}: the rollback's rebind ends at {t3}");
            // Its IPAM release and VF-lock-style waits: what is left of 220 s.
            let release = secs(at(t3, true).bounded(DELEGATE_TIMEOUT));
            assert!(t3 + release <= 220, "t={t}: the release ends past 220 s");
            assert_eq!(
                secs(at(t2, true).bounded(conf.lock_timeout)),
                220u64.saturating_sub(t2)
            );
        }
        assert!(
            ADD_BUDGET < Duration::from_secs(240),
            "kubelet's RunPodSandbox timeout"
        );
    }

    /// The rollback's rebind turn (ADD rolling back) may begin until 200 s into ADD; a
    /// forward one only until 60 s; both refusals are code 11 naming their bound.
    #[test]
    fn add_rollback_rebinds_until_200_s_forward_ones_until_60_s() {
        let (d, conf, env) = add_parts(200);
        let at = |t: u64, rolling: bool| ctx_at(d.path(), &conf, &env, t, rolling);
        drop(at(58, false).lock_rebind().unwrap());
        let e = at(61, false).lock_rebind().unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN_LATER);
        assert!(e.msg.contains("within 60 s"), "{}", e.msg);
        drop(at(198, true).lock_rebind().unwrap());
        let e = at(201, true).lock_rebind().unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN_LATER);
        assert!(
            e.msg.contains("rollback within 220 s") && e.msg.contains("within 200 s"),
            "{}",
            e.msg
        );
    }
}
