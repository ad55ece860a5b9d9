//! `ib-sriov-ipam` as an IPAM plugin of its own (CNI SPEC.md "Plugin Delegation"): the
//! executable started under the file name [`crate::ipam::BUILTIN_TYPE`] (a copy, hard
//! link or symlink of `ib-sriov` with that name, see [`invoked_as_ipam`]) runs the
//! built-in allocator ([`crate::ipam`]) for the plugin that delegated to it: the Go
//! ib-sriov-cni after a rollback, host-device, or any other main plugin. The same
//! allocator, the same store (host-local's `<dataDir>/<name>/<ip>` holding
//! `containerID\r\nifname`), the same boot marker (the first allocation of a boot frees
//! the records of earlier boots) as the in-process use by the `ib-sriov` plugin, so a
//! network can move between the two without losing or doubling an allocation.
//!
//! Input: the whole network configuration on stdin; read are `cniVersion`, `name` (the
//! store's directory), the `ipam` object (host-local's schema, [`IpamConfig`]),
//! `lockTimeoutMs` (the ib-sriov key, default 20 s), `logLevel` and `logFile`, and for
//! CHECK `prevResult`, for GC `cni.dev/valid-attachments`. Everything else (the main
//! plugin's own keys) is ignored.
//!
//! Verbs:
//! - ADD: one address per range set for (CNI_CONTAINERID, CNI_IFNAME), or the ones the
//!   pair already holds; prints `ips` (with `gateway`, without `interface`: the caller
//!   sets it) and the configured `routes`; never `interfaces`.
//! - DEL: releases every record of the pair; idempotent. It needs only `name` and
//!   `ipam.dataDir`, so a range edited since ADD does not keep DEL from releasing; a
//!   configuration under which nothing can have been allocated (no `ipam`, an invalid
//!   `name` or `dataDir`) succeeds doing nothing.
//! - CHECK: the pair holds at least one address, and every address of `prevResult`
//!   inside the configured ranges is held by it (code 104 otherwise).
//! - GC (cniVersion 1.1.0): releases every record of the network whose holder is not
//!   in `cni.dev/valid-attachments`.
//! - STATUS (cniVersion 1.1.0): the network's directory is writable and every range set
//!   has a free address (code 50 otherwise).
//! - VERSION: the supported versions, as `ib-sriov`.
//!
//! Errors: code 7 for a bad configuration, 11 for a busy store lock, 103 for an
//! exhausted range or an I/O failure ([`crate::plugin::ipam_error`], as the plugin maps
//! them in process), 1 for an unsupported `cniVersion`, 4 for a bad environment.
//!
//! Delegation loop: this mode never runs the ib-sriov plugin's logic and never execs a
//! plugin, so it cannot recurse; it therefore ignores
//! [`crate::cni::exec::DELEGATED_ENV`] (which `ib-sriov` sets for the IPAM plugins it
//! execs: an `ib-sriov-ipam` started so still just allocates).

use crate::cni::{
    code, parse_version, version_reply, CniEnv, CniError, CniOutput, Command, IpConfig, Route,
    Version,
};
use crate::config::DEFAULT_LOCK_TIMEOUT_MS;
use crate::ipam::{validate_data_dir, validate_network_name, IpamConfig, IpamError, BUILTIN_TYPE};
use crate::plugin::ipam_error;
use crate::policy::{PathKey, Verdict};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Whether the executable was started under the file name `ib-sriov-ipam` (`argv[0]`'s
/// last component, as runtimes and libcni's `invoke` set it to the path they exec).
pub fn invoked_as_ipam() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|a0| is_ipam_name(Path::new(&a0)))
}

/// Whether `argv0` names the IPAM plugin: its file name is exactly
/// [`BUILTIN_TYPE`].
pub fn is_ipam_name(argv0: &Path) -> bool {
    argv0.file_name().is_some_and(|n| n == BUILTIN_TYPE)
}

/// What the IPAM plugin reads of the network configuration.
struct IpamNetConf {
    cni_version: Version,
    name: String,
    lock_timeout: Duration,
    raw: Value,
}

fn parse_common(stdin: &[u8]) -> Result<IpamNetConf, CniError> {
    let raw: Value = serde_json::from_slice(stdin).map_err(|e| {
        CniError::new(
            code::DECODE_FAILURE,
            format!("the network configuration is not JSON: {e}"),
        )
    })?;
    if !raw.is_object() {
        return Err(CniError::config(
            "the network configuration must be a JSON object",
        ));
    }
    let cni_version = match raw.get("cniVersion") {
        Some(Value::String(v)) => parse_version(v)?,
        None | Some(Value::Null) => return Err(CniError::config("cniVersion is missing")),
        Some(other) => {
            return Err(CniError::config(format!(
                "cniVersion must be a string, got {other}"
            )))
        }
    };
    let name = match raw.get("name") {
        Some(Value::String(n)) => n.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => {
            return Err(CniError::config(format!(
                "name must be a string, got {other}"
            )))
        }
    };
    let lock_timeout = match raw.get("lockTimeoutMs") {
        None | Some(Value::Null) => DEFAULT_LOCK_TIMEOUT_MS,
        Some(v) => match v.as_u64() {
            Some(ms) if (1..=600_000).contains(&ms) => ms,
            _ => {
                return Err(CniError::config(format!(
                    "lockTimeoutMs must be an integer from 1 to 600000, got {v}"
                )))
            }
        },
    };
    Ok(IpamNetConf {
        cni_version,
        name,
        lock_timeout: Duration::from_millis(lock_timeout),
        raw,
    })
}

impl IpamNetConf {
    /// The `ipam` object, parsed and validated (code 7 when absent or invalid).
    fn ipam(&self) -> Result<IpamConfig, CniError> {
        let v = self
            .raw
            .get("ipam")
            .ok_or_else(|| CniError::config("the network configuration has no \"ipam\""))?;
        IpamConfig::from_json(v).map_err(ipam_error)
    }

    /// `ipam.dataDir` alone (what DEL needs), or `None` when the configuration cannot
    /// have allocated anything (no `ipam` object, a `dataDir` ADD refuses).
    fn data_dir(&self) -> Result<PathBuf, IpamError> {
        let ipam = self
            .raw
            .get("ipam")
            .filter(|v| v.is_object())
            .ok_or_else(|| IpamError::InvalidConfig("no \"ipam\" object".into()))?;
        let d = ipam.get("dataDir");
        validate_data_dir(d)?;
        Ok(match d.and_then(Value::as_str).filter(|s| !s.is_empty()) {
            Some(s) => PathBuf::from(s),
            None => PathBuf::from(crate::ipam::DEFAULT_DATA_DIR),
        })
    }

    fn needs_1_1(&self, verb: &str) -> Result<(), CniError> {
        self.cni_version
            .require(Version::V1_1_0, &format!("{verb} needs cniVersion 1.1.0"))
    }
}

/// Sets up logging as the plugin does (`logLevel`, `logFile` of the network
/// configuration, `file` when the node policy allows it; stderr or the journal
/// otherwise), prefixed `ib-sriov-ipam <VERB> ...`.
fn init_logging(env: &CniEnv, raw: &Value, file: Option<&Path>) {
    let level = raw
        .get("logLevel")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .and_then(|s| crate::config::parse_level(s).ok())
        .unwrap_or(log::LevelFilter::Info);
    let network = raw.get("name").and_then(Value::as_str).unwrap_or("");
    crate::process::init_call_log(
        level,
        file,
        &format!("{BUILTIN_TYPE} "),
        env,
        &[("CNI_NETWORK", network)],
    );
}

/// Runs one CNI command of the IPAM plugin with the process environment; returns what
/// goes on stdout (`None` for nothing).
pub fn run(stdin: &[u8]) -> Result<Option<Value>, CniError> {
    let env = match CniEnv::from_process() {
        Ok(env) => env,
        // DEL with an environment ADD refuses: ADD allocated nothing.
        Err(_) if std::env::var("CNI_COMMAND").is_ok_and(|c| c == "DEL") => return Ok(None),
        Err(e) => return Err(e),
    };
    if env.command == Command::Version {
        return Ok(Some(version_reply(
            crate::config::sniff_version(stdin).as_deref(),
        )));
    }
    let conf = match parse_common(stdin) {
        Ok(c) => c,
        // DEL of a configuration ADD refuses: nothing was allocated under it.
        Err(e) if env.command == Command::Del => {
            crate::logging::to_stderr(&format!(
                "{BUILTIN_TYPE} DEL: the configuration is refused ({e}); nothing was allocated under it, nothing to do"
            ));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    // The node policy ([`crate::policy`]) for the two paths this plugin opens.
    let screened = crate::policy::screen(
        &conf.raw,
        Path::new(crate::policy::HOST_ROOT),
        &[PathKey::LogFile, PathKey::IpamDataDir],
    );
    init_logging(&env, &conf.raw, screened.log_file.as_deref());
    for w in &screened.warnings {
        log::warn!("{w}");
    }
    if screened.verdict(env.command, "ipam.dataDir")? == Verdict::NothingTouched {
        return Ok(None);
    }
    if matches!(env.command, Command::Add | Command::Del | Command::Gc) {
        crate::process::hold_termination_signals();
    }
    let r = run_conf(&env, &conf);
    match &r {
        Ok(_) => log::info!("{} succeeded", env.command.as_str()),
        Err(e) => log::error!("{} failed: {e}", env.command.as_str()),
    }
    r
}

fn run_conf(env: &CniEnv, conf: &IpamNetConf) -> Result<Option<Value>, CniError> {
    let (cid, ifname) = (env.container_id.as_str(), env.ifname.as_str());
    match env.command {
        Command::Version => Ok(Some(version_reply(Some(conf.cni_version.as_str())))),
        Command::Add => {
            let ipam = conf.ipam()?;
            let a = ipam
                .allocate(&conf.name, cid, ifname, conf.lock_timeout)
                .map_err(ipam_error)?;
            let out = CniOutput {
                interfaces: Vec::new(),
                ips: a
                    .ips
                    .iter()
                    .map(|ip| IpConfig {
                        address: ip.address,
                        gateway: ip.gateway,
                        interface: None,
                    })
                    .collect(),
                routes: a.routes.iter().map(|r| Route::new(r.dst, r.gw)).collect(),
                dns: None,
            };
            Ok(Some(out.to_json(conf.cni_version)))
        }
        Command::Del => {
            let data_dir = match conf
                .data_dir()
                .and_then(|d| validate_network_name(&conf.name).map(|_| d))
            {
                Ok(d) => d,
                Err(e) => {
                    log::warn!(
                        "DEL: the configuration is refused ({e}); nothing was allocated under it, nothing to do"
                    );
                    return Ok(None);
                }
            };
            // Release needs no range: a range edited since ADD still releases.
            let store_only = IpamConfig {
                ipam_type: BUILTIN_TYPE.to_string(),
                ranges: Vec::new(),
                routes: Vec::new(),
                data_dir,
            };
            let n = store_only
                .release(&conf.name, cid, ifname, conf.lock_timeout)
                .map_err(ipam_error)?;
            log::info!("released {n} address(es) of {cid}/{ifname}");
            Ok(None)
        }
        Command::Check => {
            let ipam = conf.ipam()?;
            let held = ipam.lookup(&conf.name, cid, ifname).map_err(ipam_error)?;
            if held.is_empty() {
                return Err(CniError::new(
                    code::CHECK_FAILED,
                    format!(
                        "{cid}/{ifname} holds no address in IPAM network {} ({})",
                        conf.name,
                        ipam.data_dir().join(&conf.name).display()
                    ),
                ));
            }
            let prev = match conf.raw.get("prevResult").filter(|v| !v.is_null()) {
                Some(v) => Some(CniOutput::from_json(v).map_err(|e| CniError {
                    msg: format!("prevResult: {}", e.msg),
                    ..e
                })?),
                None => None,
            };
            for ip in prev.iter().flat_map(|p| &p.ips) {
                let a = ip.address.ip();
                if ipam.ranges.iter().any(|s| s.contains(a)) && !held.contains(&a) {
                    return Err(CniError::new(
                        code::CHECK_FAILED,
                        format!(
                            "address {a} of prevResult is not allocated to {cid}/{ifname} in IPAM network {}",
                            conf.name
                        ),
                    ));
                }
            }
            Ok(None)
        }
        Command::Gc => {
            conf.needs_1_1("GC")?;
            let valid = crate::plugin::gc::valid_attachments(&conf.raw)?;
            let ipam = conf.ipam()?;
            let keep = |c: &str, i: &str| {
                valid
                    .iter()
                    .any(|(vc, vi)| vc == c && (i.is_empty() || vi == i))
            };
            let gone = ipam
                .release_unless(&conf.name, keep, conf.lock_timeout)
                .map_err(ipam_error)?;
            log::info!(
                "GC: released {} address(es) of network {} ({} valid attachment(s))",
                gone.len(),
                conf.name,
                valid.len()
            );
            Ok(None)
        }
        Command::Status => {
            conf.needs_1_1("STATUS")?;
            let ipam = conf.ipam()?;
            validate_network_name(&conf.name).map_err(ipam_error)?;
            crate::plugin::status::builtin_store_status(&ipam, &conf.name)?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_is_on_the_exact_file_name() {
        for yes in [
            "ib-sriov-ipam",
            "/opt/cni/bin/ib-sriov-ipam",
            "./ib-sriov-ipam",
        ] {
            assert!(is_ipam_name(Path::new(yes)), "{yes}");
        }
        for no in [
            "ib-sriov",
            "/opt/cni/bin/ib-sriov",
            "/x/ib-sriov-ipam/ib-sriov",
            "ib-sriov-ipam.old",
            ".ib-sriov-ipam.tmp.1.0",
            "",
        ] {
            assert!(!is_ipam_name(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn common_config_errors_carry_cni_codes() {
        let code_of = |s: &str| parse_common(s.as_bytes()).err().map(|e| e.code);
        assert_eq!(code_of("not json"), Some(code::DECODE_FAILURE));
        assert_eq!(code_of("[]"), Some(code::INVALID_CONFIG));
        assert_eq!(code_of(r#"{"name":"n"}"#), Some(code::INVALID_CONFIG));
        assert_eq!(
            code_of(r#"{"cniVersion":"9.9.9","name":"n"}"#),
            Some(code::INCOMPATIBLE_VERSION)
        );
        assert_eq!(
            code_of(r#"{"cniVersion":"1.0.0","name":"n","lockTimeoutMs":0}"#),
            Some(code::INVALID_CONFIG)
        );
        let c = parse_common(br#"{"cniVersion":"1.0.0","name":"n","lockTimeoutMs":250}"#).unwrap();
        assert_eq!(c.lock_timeout, Duration::from_millis(250));
        assert_eq!(c.ipam().unwrap_err().code, code::INVALID_CONFIG);
        assert!(c.data_dir().is_err());
        let c = parse_common(
            br#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"ib-sriov-ipam","dataDir":"rel"}}"#,
        )
        .unwrap();
        assert!(matches!(c.data_dir(), Err(IpamError::InvalidConfig(_))));
        let c = parse_common(br#"{"cniVersion":"1.0.0","name":"n","ipam":{}}"#).unwrap();
        assert_eq!(
            c.data_dir().unwrap(),
            Path::new(crate::ipam::DEFAULT_DATA_DIR)
        );
    }
}
