//! The network configuration of an `ib-sriov` attachment: the Go ib-sriov-cni's keys
//! (k8snetworkplumbingwg/ib-sriov-cni `pkg/types/types.go`) plus this plugin's own
//! (`logLevel`, `logFile`, `stateDir`), parsed and validated before the host is touched.
//!
//! Every key is documented in docs/configuration.md, "Configuration reference".
//!
//! Parsing needs no host access: a path key is checked here only for its form (absolute,
//! no NUL). Where paths may point on the node is the node policy's business
//! ([`crate::policy`]), applied to the configuration as received before the log is
//! opened and before the first change to the host ([`crate::cli`]).

use crate::cni::{parse_version, CniError, CniOutput, Command, Version};
use crate::types::{Guid, LinkState, PciAddress};
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;

/// Default directory of per-attachment journals and per-VF locks: `/run` is a tmpfs on
/// every systemd node (systemd's file-hierarchy(7)), emptied at boot exactly when the
/// kernel state the journals describe (netns and RDMA moves, VF GUIDs and link state)
/// is gone.
pub const DEFAULT_STATE_DIR: &str = "/run/ib-sriov";

/// The default stateDir of earlier versions (and the Go plugin's cache directory): its
/// journals are still read when `stateDir` is the default
/// ([`crate::journal::JournalStore::with_legacy`]).
pub const LEGACY_STATE_DIR: &str = "/var/lib/cni/ib-sriov";

/// Default bound on waiting for a lock, in milliseconds.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 20_000;

/// The largest `pkeyWaitMs`, in milliseconds (60 s): the wait is one of ADD's forward
/// waits, which end within `crate::plugin::add_forward_deadline` (150 s after ADD
/// starts), and the kubelet's RunPodSandbox retries an ADD that answered code 11.
pub const MAX_PKEY_WAIT_MS: u64 = 60_000;

/// The `args.cni` key ib-kubernetes sets once it has configured the pod's GUID/pkey.
pub const IB_K8S_APP_KEY: &str = "mellanox.infiniband.app";

/// `runtimeConfig` as Multus/libcni fill it from the plugin's declared capabilities.
#[derive(Debug, Default, Deserialize)]
struct RawRuntimeConfig {
    /// Capability `infinibandGUID`.
    #[serde(rename = "infinibandGUID")]
    infiniband_guid: Option<Value>,
    /// Capability `deviceID` (Multus, from the device plugin).
    #[serde(rename = "deviceID")]
    device_id: Option<Value>,
    /// Capability `CNIDeviceInfoFile` (Multus device-info spec).
    #[serde(rename = "CNIDeviceInfoFile")]
    device_info_file: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawConf {
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
    name: Option<String>,
    #[serde(rename = "type")]
    plugin_type: Option<String>,
    #[serde(rename = "deviceID")]
    device_id: Option<Value>,
    #[serde(rename = "pciBusID")]
    pci_bus_id: Option<Value>,
    guid: Option<Value>,
    pkey: Option<Value>,
    link_state: Option<Value>,
    #[serde(rename = "rdmaIsolation")]
    rdma_isolation: Option<Value>,
    #[serde(rename = "ibKubernetesEnabled")]
    ib_kubernetes_enabled: Option<Value>,
    #[serde(rename = "vfioPciMode")]
    vfio_pci_mode: Option<Value>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntimeConfig>,
    args: Option<Value>,
    ipam: Option<Value>,
    #[serde(rename = "logLevel")]
    log_level: Option<String>,
    #[serde(rename = "logFile")]
    log_file: Option<String>,
    #[serde(rename = "stateDir")]
    state_dir: Option<String>,
    #[serde(rename = "prevResult")]
    prev_result: Option<Value>,
    #[serde(rename = "lockTimeoutMs")]
    lock_timeout_ms: Option<Value>,
    #[serde(rename = "pkeyWaitMs")]
    pkey_wait_ms: Option<Value>,
    #[serde(rename = "guidFile")]
    guid_file: Option<Value>,
    #[serde(rename = "deriveGuid")]
    derive_guid: Option<Value>,
    #[serde(rename = "goCacheDir")]
    go_cache_dir: Option<Value>,
}

/// Where the effective GUID came from (journaled and logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuidSource {
    /// `runtimeConfig.infinibandGUID` (capability `infinibandGUID`).
    RuntimeConfig,
    /// `args.cni.guid` (ib-kubernetes' pod annotation, passed by Multus).
    ArgsCni,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct NetConf {
    /// `cniVersion`: the version results and errors are printed in.
    pub cni_version: Version,
    /// `name`: the network name (also the IPAM store's directory name).
    pub name: String,
    /// The VF's PCI address: `runtimeConfig.deviceID`, else `deviceID`, else `pciBusID`.
    pub device_id: Option<PciAddress>,
    /// The GUID to give the VF (node and port), by precedence; see [`GuidSource`].
    pub guid: Option<(Guid, GuidSource)>,
    /// `pkey` (e.g. `"0x8001"`): recorded and checked against the VF's pkey table;
    /// ib-kubernetes programs it through the subnet manager.
    pub pkey: Option<u16>,
    /// `pkeyWaitMs` (opt-in partition readiness): how long ADD waits, after setting the
    /// VF's GUID and before moving anything into the pod, until [`NetConf::pkey`] (all 16
    /// bits: full membership `0x8000|key` or limited `key`, as written) is in the VF
    /// port's pkey table (`<VF>/infiniband/<dev>/ports/1/pkeys/<i>`); past it ADD fails
    /// with code 11 and rolls back. 1 to [`MAX_PKEY_WAIT_MS`] ms; requires `pkey`.
    /// `None`: no wait (a warning when the pkey is not in the table).
    pub pkey_wait: Option<std::time::Duration>,
    /// `link_state`: `auto|enable|disable`; `None` leaves the VF's link state alone.
    pub link_state: Option<LinkState>,
    /// `rdmaIsolation`: `Some(true)` requires exclusive RDMA netns mode and moves the
    /// VF's RDMA device into the pod; `Some(false)` and `None` never move it (as the Go
    /// plugin). The node file's `defaults` may fill `None` ([`crate::policy::NodeDefaults`]).
    pub rdma_isolation: Option<bool>,
    /// `ibKubernetesEnabled`: ADD waits (code 11) for ib-kubernetes' annotation.
    pub ib_kubernetes_enabled: bool,
    /// `args.cni["mellanox.infiniband.app"] == "configured"`.
    pub ib_kubernetes_configured: bool,
    /// `vfioPciMode`: `None` means "auto" (vfio mode when the VF is bound to vfio-pci).
    pub vfio_pci_mode: Option<bool>,
    /// `runtimeConfig.CNIDeviceInfoFile`: where to write the NPWG device-info file.
    pub device_info_file: Option<PathBuf>,
    /// `ipam` object, if any (validated by the IPAM layer).
    pub ipam: Option<Value>,
    /// `logLevel`: error|warn|info|debug|trace (default info).
    pub log_level: log::LevelFilter,
    /// `logFile`: append log records here; stderr when absent or unusable (as given: the
    /// node policy, [`crate::policy::screen`], and [`crate::logging::init`] decide).
    pub log_file: Option<PathBuf>,
    /// `stateDir`: journals and VF locks (default [`DEFAULT_STATE_DIR`]).
    pub state_dir: PathBuf,
    /// `goCacheDir`: where ADD also writes the Go ib-sriov-cni's cache file of the
    /// attachment, so a node rolled back to the Go plugin can DEL it (default
    /// [`crate::gocache::GO_CACHE_DIR`], the Go plugin's fixed directory; `""` writes
    /// none). Go caches are also read from here.
    pub go_cache_dir: Option<PathBuf>,
    /// `prevResult`, read in any supported version; decoded only when the verb is CHECK
    /// (SPEC.md: only CHECK uses it; ADD and DEL may receive one and must not fail on
    /// it). For the other verbs it is `None` and the value stays, undecoded, in
    /// [`NetConf::raw`] (forwarded to delegated plugins as received).
    pub prev_result: Option<CniOutput>,
    /// `lockTimeoutMs`: how long to wait for the per-VF and IPAM locks before giving up
    /// with code 11 (default [`DEFAULT_LOCK_TIMEOUT_MS`]).
    pub lock_timeout: std::time::Duration,
    /// `guidFile`: the SR-IOV network operator's static VF GUID file, read when a VF
    /// has no GUID and none is given (default [`crate::vfguid::DEFAULT_GUID_FILE`];
    /// absolute). See [`crate::vfguid`].
    pub guid_file: PathBuf,
    /// `deriveGuid`: a VF with no GUID, none given and none in `guidFile` gets the GUID
    /// derived from its PF's port GUID and its index ([`crate::vfguid::derived_guid`])
    /// instead of failing ADD (default false).
    pub derive_guid: bool,
    /// The whole configuration as received (forwarded to delegated plugins).
    pub raw: Value,
    /// What parsing tolerated but the user should know (an ignored top-level `guid`,
    /// conflicting device IDs); logged as warnings once the log is open.
    pub warnings: Vec<String>,
}

/// The top-level keys this plugin reads ([`NetConf`]; docs/configuration.md "Configuration reference").
pub const KNOWN_KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "deviceID",
    "pciBusID",
    "guid",
    "pkey",
    "link_state",
    "rdmaIsolation",
    "ibKubernetesEnabled",
    "vfioPciMode",
    "runtimeConfig",
    "args",
    "ipam",
    "logLevel",
    "logFile",
    "stateDir",
    "prevResult",
    "lockTimeoutMs",
    "pkeyWaitMs",
    "guidFile",
    "deriveGuid",
    "goCacheDir",
];

/// Top-level keys other components put into a plugin's configuration, which this
/// plugin does not read and which are not typos: `capabilities` (declared to the
/// runtime, CNI CONVENTIONS.md), `dns` (CNI SPEC.md network configuration),
/// `cniVersions`, `disableCheck`, `disableGC` (conflist keys libcni may pass along).
pub const QUIET_KEYS: &[&str] = &[
    "capabilities",
    "dns",
    "cniVersions",
    "disableCheck",
    "disableGC",
];

/// The built-in IPAM's keys (host-local's format, docs/configuration.md "Built-in IPAM").
pub const BUILTIN_IPAM_KEYS: &[&str] = &[
    "type",
    "subnet",
    "rangeStart",
    "rangeEnd",
    "gateway",
    "ranges",
    "routes",
    "dataDir",
];

/// Edit distance of two short ASCII keys, compared case-insensitively: insertions,
/// deletions, substitutions and transpositions of neighbours each count 1 (the optimal
/// string alignment distance).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<u8> = a.bytes().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<u8> = b.bytes().map(|c| c.to_ascii_lowercase()).collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The known key `key` is most likely a typo of: within 2 edits (1 for keys of up to 4
/// characters), the closest first.
pub fn near_miss<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = if key.len() <= 4 { 1 } else { 2 };
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The warnings for the keys of `raw` (a network configuration) that nothing reads: an
/// unknown top-level key (with the known key it is a near miss of, if any) and, for the
/// built-in IPAM, an unknown `ipam` key. Keys other components add
/// ([`QUIET_KEYS`]) are quiet. Each warning names the key and says it is ignored.
pub fn unknown_keys(raw: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut check =
        |obj: &serde_json::Map<String, Value>, known: &[&str], quiet: &[&str], at: &str| {
            for k in obj.keys() {
                if known.contains(&k.as_str()) || quiet.contains(&k.as_str()) {
                    continue;
                }
                out.push(match near_miss(k, known) {
                    Some(m) => format!("unknown key {at}{k:?} is ignored: did you mean {at}{m}?"),
                    None => format!("unknown key {at}{k:?} is ignored"),
                });
            }
        };
    if let Some(o) = raw.as_object() {
        check(o, KNOWN_KEYS, QUIET_KEYS, "");
        if let Some(ipam) = o.get("ipam").filter(|v| crate::ipam::is_builtin(v)) {
            if let Some(io) = ipam.as_object() {
                check(io, BUILTIN_IPAM_KEYS, &[], "ipam.");
            }
        }
    }
    out
}

/// Reads just `cniVersion` from stdin bytes, for error replies before full parsing.
/// Only that key is materialised (the rest is skipped by serde, not built into a tree),
/// so this costs no more memory than the input. `None` when stdin is not a JSON object
/// or `cniVersion` is not a string.
pub fn sniff_version(stdin: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct OnlyVersion {
        #[serde(rename = "cniVersion")]
        cni_version: Option<Value>,
    }
    match serde_json::from_slice::<OnlyVersion>(stdin)
        .ok()?
        .cni_version?
    {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// Checks the network `name`: it names the built-in IPAM store's directory
/// `<dataDir>/<name>` (docs/configuration.md "Built-in IPAM"), so it must be one safe path component:
/// non-empty, at most 255 bytes (`NAME_MAX`), not `.` or `..`, without `/`, NUL or any
/// control character (rules of [`crate::ipam::validate_network_name`]). Checked for every
/// verb at parse time, before anything touches the filesystem (STATUS and GC included).
///
/// Errors: code 7 naming the value.
pub fn validate_name(name: &str) -> Result<(), CniError> {
    crate::ipam::validate_network_name(name).map_err(|e| {
        CniError::config(format!(
            "name: {} (the network name is used as a directory name)",
            e.message()
        ))
    })
}

fn opt_bool(v: &Option<Value>, key: &str) -> Result<Option<bool>, CniError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(CniError::config(format!(
            "{key} must be true or false, got {other}"
        ))),
    }
}

fn opt_str<'a>(v: &'a Option<Value>, key: &str) -> Result<Option<&'a str>, CniError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(CniError::config(format!(
            "{key} must be a string, got {other}"
        ))),
    }
}

fn parse_guid(s: &str, key: &str) -> Result<Guid, CniError> {
    let g: Guid = s
        .parse()
        .map_err(|e| CniError::config(format!("{key}: {e}")))?;
    if !g.is_assignable() {
        return Err(CniError::config(format!(
            "{key}: GUID {g} cannot be assigned to a VF (all-zero and all-ones GUIDs are reserved)"
        )));
    }
    Ok(g)
}

/// A partition key: hex with an optional `0x`, up to 8 digits (the Go plugin passes
/// the string through unchecked, and configs carry forms like `0x00000005`), whose value
/// fits 16 bits. A base key of 0 (`0x8000`, `0x0000`) is accepted: ADD warns about it.
fn parse_pkey(s: &str) -> Result<u16, CniError> {
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let v = if hex.is_empty() || hex.len() > 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        None
    } else {
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(|v| u16::try_from(v).ok())
    };
    v.ok_or_else(|| {
        CniError::config(format!(
            "pkey {s:?} is invalid: expected a 16-bit hex partition key like \"0x8001\""
        ))
    })
}

pub(crate) fn parse_level(s: &str) -> Result<log::LevelFilter, CniError> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "off" | "none" => log::LevelFilter::Off,
        "error" | "panic" | "fatal" => log::LevelFilter::Error,
        "warn" | "warning" => log::LevelFilter::Warn,
        "info" => log::LevelFilter::Info,
        // `verbose` (a level name other CNI plugins' loggers use) is debug: every step,
        // not trace's hundreds of lines per call.
        "debug" | "verbose" => log::LevelFilter::Debug,
        "trace" => log::LevelFilter::Trace,
        _ => {
            return Err(CniError::config(format!(
                "logLevel {s:?} is invalid: expected error, warn, info, debug or trace"
            )))
        }
    })
}

/// Where a parse's errors go. The verbs stop at the first ([`NetConf::parse_for`]: the
/// runtime is told one error); `doctor --conf` runs every phase and keeps every error
/// ([`NetConf::check_all`]), a key that fails taking its default so that the phases
/// after it still run.
struct Errors {
    /// Keep going after an error (`doctor --conf`) instead of stopping at the first.
    collect: bool,
    /// The errors so far, each with the key it is about (`""` for the whole input).
    list: Vec<(String, CniError)>,
}

/// A phase stopped the parse; its error is the last of [`Errors::list`].
struct Stop;

impl Errors {
    /// `r`'s value; on an error, the error recorded and then [`Stop`], or, when
    /// collecting, `fallback()` in place of the value.
    fn take_or<T>(
        &mut self,
        key: &str,
        r: Result<T, CniError>,
        fallback: impl FnOnce() -> T,
    ) -> Result<T, Stop> {
        match r {
            Ok(v) => Ok(v),
            Err(e) if self.collect => {
                self.list.push((key.to_string(), e));
                Ok(fallback())
            }
            Err(e) => Err(self.stop(key, e)),
        }
    }

    /// [`Errors::take_or`] with the type's default (`None`, `false`) as the fallback.
    fn take<T: Default>(&mut self, key: &str, r: Result<T, CniError>) -> Result<T, Stop> {
        self.take_or(key, r, T::default)
    }

    /// Records `e`, after which nothing is checked, collecting or not.
    fn stop(&mut self, key: &str, e: CniError) -> Stop {
        self.list.push((key.to_string(), e));
        Stop
    }

    /// Whether an error about `key` was recorded.
    fn failed(&self, key: &str) -> bool {
        self.list.iter().any(|(k, _)| k == key)
    }
}

/// What [`NetConf::check_all`] finds in a configuration.
#[derive(Debug)]
pub struct Checked {
    /// The configuration, each key that failed at its default (as if absent); `None`
    /// only when the input is not a JSON object (then nothing else can be checked).
    pub conf: Option<NetConf>,
    /// Every error with the key it is about (`""`: the whole input; else the key's
    /// path: `cniVersion`, `runtimeConfig.deviceID`, `ipam.dataDir`, ...), in the order
    /// of the phases: the first is the one the verbs answer.
    pub errors: Vec<(String, CniError)>,
}

impl Checked {
    /// Whether an error about `key` (a path as in [`Checked::errors`]) was found.
    pub fn failed(&self, key: &str) -> bool {
        self.errors.iter().any(|(k, _)| k == key)
    }
}

/// Phase "decode": stdin as a JSON object, and the keys read as [`RawConf`] of their
/// JSON types. Nothing follows stdin that is not a JSON object (code 6). A key of the
/// wrong type (`"name": 5`) is code 7; collecting, each such key is judged alone (the
/// message the verbs give when it is the only one) and then left out.
fn phase_decode(stdin: &[u8], errs: &mut Errors) -> Result<(Value, RawConf), Stop> {
    let raw: Value = serde_json::from_slice(stdin).map_err(|e| {
        errs.stop(
            "",
            CniError::new(
                crate::cni::code::DECODE_FAILURE,
                format!("cannot decode the network configuration on stdin: {e}"),
            ),
        )
    })?;
    let Some(obj) = raw.as_object() else {
        return Err(errs.stop(
            "",
            CniError::new(
                crate::cni::code::DECODE_FAILURE,
                "the network configuration on stdin is not a JSON object",
            ),
        ));
    };
    let invalid =
        |e: serde_json::Error| CniError::config(format!("invalid network configuration: {e}"));
    let whole = match RawConf::deserialize(&raw) {
        Ok(rc) => return Ok((raw, rc)),
        Err(e) => invalid(e),
    };
    if !errs.collect {
        return Err(errs.stop("", whole));
    }
    let mut rest = obj.clone();
    for (k, v) in obj {
        let one = Value::Object(std::iter::once((k.clone(), v.clone())).collect());
        if let Err(e) = RawConf::deserialize(&one) {
            errs.list.push((k.clone(), invalid(e)));
            rest.remove(k);
        }
    }
    match RawConf::deserialize(&Value::Object(rest)) {
        Ok(rc) => Ok((raw, rc)),
        Err(_) => Err(errs.stop("", whole)),
    }
}

/// Phase "identity": `cniVersion` (present, code 7; supported, code 1), `name`
/// (present, [`validate_name`]) and `type` (present). Collecting, a bad `cniVersion`
/// reads as the latest version.
fn phase_identity(rc: &RawConf, errs: &mut Errors) -> Result<(Version, String), Stop> {
    // A key left out by phase decode (the wrong JSON type) is reported there only.
    let latest = Version::ALL[Version::ALL.len() - 1];
    let ver = match rc.cni_version.as_deref() {
        Some(v) => parse_version(v),
        None if errs.failed("cniVersion") => Ok(latest),
        None => Err(CniError::config("cniVersion is missing")),
    };
    let cni_version = errs.take_or("cniVersion", ver, || latest)?;
    let name = match rc.name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) => validate_name(n).map(|()| n.to_string()),
        None if errs.failed("name") => Ok(String::new()),
        None => Err(CniError::config("name is missing")),
    };
    let name = errs.take("name", name)?;
    if rc.plugin_type.as_deref().unwrap_or("").is_empty() && !errs.failed("type") {
        errs.take("type", Err::<(), _>(CniError::config("type is missing")))?;
    }
    Ok((cni_version, name))
}

/// Phase "device": the VF's PCI address from `runtimeConfig.deviceID` (capability),
/// `deviceID` and `pciBusID`, the first given winning; a later one that differs is a
/// warning.
fn phase_device(
    rc: &RawConf,
    rt: &RawRuntimeConfig,
    warnings: &mut Vec<String>,
    errs: &mut Errors,
) -> Result<Option<PciAddress>, Stop> {
    let mut device_id = None;
    for (val, key) in [
        (&rt.device_id, "runtimeConfig.deviceID"),
        (&rc.device_id, "deviceID"),
        (&rc.pci_bus_id, "pciBusID"),
    ] {
        let addr = opt_str(val, key).and_then(|s| {
            s.map(|s| {
                s.parse::<PciAddress>()
                    .map_err(|e| CniError::config(format!("{key}: {e}")))
            })
            .transpose()
        });
        let Some(addr) = errs.take(key, addr)? else {
            continue;
        };
        match device_id {
            None => device_id = Some(addr),
            Some(prev) if prev != addr => warnings.push(format!(
                "{key} {addr} differs from the higher-precedence device {prev}; using {prev}"
            )),
            _ => {}
        }
    }
    Ok(device_id)
}

/// Phase "guid": the pod's GUID from `runtimeConfig.infinibandGUID` (capability), else
/// `args.cni.guid` (each an assignable GUID), and whether ib-kubernetes configured the
/// pod (`args.cni["mellanox.infiniband.app"] == "configured"`). The top-level `guid` is
/// never applied: a warning.
fn phase_guid(
    rc: &RawConf,
    rt: &RawRuntimeConfig,
    warnings: &mut Vec<String>,
    errs: &mut Errors,
) -> Result<(Option<(Guid, GuidSource)>, bool), Stop> {
    // args.cni: values of any JSON type; only `guid` and the ib-kubernetes key are read.
    let args_cni = rc
        .args
        .as_ref()
        .and_then(|a| a.get("cni"))
        .and_then(Value::as_object);
    let args_guid = args_cni.and_then(|m| m.get("guid")).cloned();
    let ib_kubernetes_configured = args_cni
        .and_then(|m| m.get(IB_K8S_APP_KEY))
        .and_then(Value::as_str)
        == Some("configured");

    let mut guid = None;
    for (val, key, src) in [
        (
            &rt.infiniband_guid,
            "runtimeConfig.infinibandGUID",
            GuidSource::RuntimeConfig,
        ),
        (&args_guid, "args.cni.guid", GuidSource::ArgsCni),
    ] {
        let g = opt_str(val, key).and_then(|s| s.map(|s| parse_guid(s, key)).transpose());
        if let Some(g) = errs.take(key, g)? {
            if guid.is_none() {
                guid = Some((g, src));
            }
        }
    }

    // The top-level `guid` is not applied: it is one value for every pod of the
    // network, so two pods would get the same GUID on the fabric. The Go plugin
    // ignores it too (k8snetworkplumbingwg/ib-sriov-cni 543060da, pkg/types/types.go:
    // `GUID string `json:"-"``).
    if rc.guid.as_ref().is_some_and(|g| !g.is_null()) {
        warnings.push(
            "guid: the top-level key is ignored (one GUID for every pod of the network would give two pods the same GUID on the fabric; the Go plugin ignores it too); give each pod its GUID with runtimeConfig.infinibandGUID (capability \"infinibandGUID\", Multus' infiniband-guid) or args.cni.guid".into(),
        );
    }
    Ok((guid, ib_kubernetes_configured))
}

/// What phase "vf" reads: how the VF is set up.
#[derive(Default)]
struct VfKeys {
    pkey: Option<u16>,
    link_state: Option<LinkState>,
    rdma_isolation: Option<bool>,
    ib_kubernetes_enabled: bool,
    vfio_pci_mode: Option<bool>,
}

/// Phase "vf": `pkey` ([`parse_pkey`]), `link_state` (`auto|enable|disable`),
/// `rdmaIsolation`, `ibKubernetesEnabled` and `vfioPciMode` (booleans).
fn phase_vf(rc: &RawConf, errs: &mut Errors) -> Result<VfKeys, Stop> {
    let pkey = opt_str(&rc.pkey, "pkey").and_then(|s| s.map(parse_pkey).transpose());
    let link_state = opt_str(&rc.link_state, "link_state").and_then(|s| {
        s.map(|s| s.parse::<LinkState>().map_err(CniError::config))
            .transpose()
    });
    Ok(VfKeys {
        pkey: errs.take("pkey", pkey)?,
        link_state: errs.take("link_state", link_state)?,
        rdma_isolation: errs.take(
            "rdmaIsolation",
            opt_bool(&rc.rdma_isolation, "rdmaIsolation"),
        )?,
        ib_kubernetes_enabled: errs
            .take(
                "ibKubernetesEnabled",
                opt_bool(&rc.ib_kubernetes_enabled, "ibKubernetesEnabled"),
            )?
            .unwrap_or(false),
        vfio_pci_mode: errs.take("vfioPciMode", opt_bool(&rc.vfio_pci_mode, "vfioPciMode"))?,
    })
}

/// Phase "ipam": `ipam` is an object or absent, its `type` a string; without a type it
/// is no IPAM. The built-in IPAM's `dataDir` is checked here, for every verb
/// ([`crate::ipam::validate_data_dir`]); the rest of it where the verbs use it
/// ([`crate::ipam::IpamConfig::from_json`]).
fn phase_ipam(ipam: Option<Value>, errs: &mut Errors) -> Result<Option<Value>, Stop> {
    let (key, r) = match ipam {
        None | Some(Value::Null) => return Ok(None),
        Some(v @ Value::Object(_)) => match v.get("type") {
            // No type (`"ipam": {}`, what the SR-IOV network operator renders for a
            // SriovIBNetwork without spec.ipam): no IPAM, as in the Go plugin
            // (k8snetworkplumbingwg/ib-sriov-cni 543060da, cmd/ib-sriov-cni/main.go:
            // `if netConf.IPAM.Type != ""`). Its other keys are ignored.
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(t)) if t.is_empty() => return Ok(None),
            Some(Value::String(_)) => {
                let dd = if crate::ipam::is_builtin(&v) {
                    crate::ipam::validate_data_dir(v.get("dataDir"))
                        .map_err(|e| CniError::config(format!("ipam.{}", e.message())))
                } else {
                    Ok(())
                };
                ("ipam.dataDir", dd.map(|()| Some(v)))
            }
            Some(other) => (
                "ipam.type",
                Err(CniError::config(format!(
                    "ipam.type must be a string, got {other}"
                ))),
            ),
        },
        Some(other) => (
            "ipam",
            Err(CniError::config(format!(
                "ipam must be an object, got {other}"
            ))),
        ),
    };
    errs.take(key, r)
}

/// Phase "log": `logLevel` ([`parse_level`]; default info) and `logFile`, which is
/// never refused: an unusable one (relative, a directory, a FIFO, a device, a symlink,
/// stdout itself) sends the log to stderr with one warning ([`crate::logging::init`]);
/// logging must not keep a pod's network from working.
fn phase_log(rc: &RawConf, errs: &mut Errors) -> Result<(log::LevelFilter, Option<PathBuf>), Stop> {
    let level = rc
        .log_level
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(parse_level)
        .transpose();
    let level = errs
        .take("logLevel", level)?
        .unwrap_or(log::LevelFilter::Info);
    let file = rc
        .log_file
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    Ok((level, file))
}

/// A path key's value: `None` when absent or `""`, else an absolute path without NUL.
///
/// Errors: code 7 naming `key` and the value.
fn abs_path(s: Option<&str>, key: &str) -> Result<Option<PathBuf>, CniError> {
    match s.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(p) if p.starts_with('/') && !p.contains('\0') => Ok(Some(PathBuf::from(p))),
        Some(p) => Err(CniError::config(format!(
            "{key} {p:?} must be an absolute path"
        ))),
    }
}

/// Phase "state": `stateDir` (default [`DEFAULT_STATE_DIR`]) and
/// `runtimeConfig.CNIDeviceInfoFile`, absolute paths ([`abs_path`]).
fn phase_state(
    rc: &RawConf,
    rt: &RawRuntimeConfig,
    errs: &mut Errors,
) -> Result<(PathBuf, Option<PathBuf>), Stop> {
    let state_dir = errs
        .take("stateDir", abs_path(rc.state_dir.as_deref(), "stateDir"))?
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let key = "runtimeConfig.CNIDeviceInfoFile";
    let device_info_file = errs.take(key, abs_path(rt.device_info_file.as_deref(), key))?;
    Ok((state_dir, device_info_file))
}

/// Phase "prevResult": decoded only when `decode` (CHECK; SPEC.md: ADD and DEL may
/// receive a prevResult and must not fail on it).
fn phase_prev_result(
    rc: &RawConf,
    decode: bool,
    errs: &mut Errors,
) -> Result<Option<CniOutput>, Stop> {
    match rc.prev_result.as_ref().filter(|v| !v.is_null()) {
        Some(v) if decode => {
            let r = CniOutput::from_json(v).map(Some).map_err(|e| CniError {
                msg: format!("prevResult: {}", e.msg),
                ..e
            });
            errs.take("prevResult", r)
        }
        _ => Ok(None),
    }
}

/// Phase "guidFallback": where a VF without a GUID gets one, `guidFile` (an absolute
/// path, default [`crate::vfguid::DEFAULT_GUID_FILE`]) and `deriveGuid` (a boolean).
fn phase_guid_fallback(rc: &RawConf, errs: &mut Errors) -> Result<(PathBuf, bool), Stop> {
    let file = opt_str(&rc.guid_file, "guidFile").and_then(|s| abs_path(s, "guidFile"));
    let file = errs
        .take("guidFile", file)?
        .unwrap_or_else(|| PathBuf::from(crate::vfguid::DEFAULT_GUID_FILE));
    let derive = errs
        .take("deriveGuid", opt_bool(&rc.derive_guid, "deriveGuid"))?
        .unwrap_or(false);
    Ok((file, derive))
}

/// Phase "goCache": `goCacheDir`, an absolute path (default
/// [`crate::gocache::GO_CACHE_DIR`]), or `""` for none.
fn phase_go_cache(rc: &RawConf, errs: &mut Errors) -> Result<Option<PathBuf>, Stop> {
    let dir = match &rc.go_cache_dir {
        Some(Value::String(s)) if s.is_empty() => return Ok(None),
        v => opt_str(v, "goCacheDir").and_then(|s| abs_path(s, "goCacheDir")),
    };
    Ok(errs
        .take("goCacheDir", dir)?
        .or_else(|| Some(PathBuf::from(crate::gocache::GO_CACHE_DIR))))
}

/// Phase "waits": `lockTimeoutMs` (1 to 600000, default [`DEFAULT_LOCK_TIMEOUT_MS`])
/// and `pkeyWaitMs` (1 to [`MAX_PKEY_WAIT_MS`]), which needs a `pkey` (`pkey`: the
/// parsed one; one that failed its phase is not reported missing).
fn phase_waits(
    rc: &RawConf,
    pkey: Option<u16>,
    errs: &mut Errors,
) -> Result<(std::time::Duration, Option<std::time::Duration>), Stop> {
    let lock = match &rc.lock_timeout_ms {
        None | Some(Value::Null) => Ok(DEFAULT_LOCK_TIMEOUT_MS),
        Some(v) => match v.as_u64() {
            Some(ms) if (1..=600_000).contains(&ms) => Ok(ms),
            _ => Err(CniError::config(format!(
                "lockTimeoutMs must be an integer from 1 to 600000, got {v}"
            ))),
        },
    };
    let lock = errs.take_or("lockTimeoutMs", lock, || DEFAULT_LOCK_TIMEOUT_MS)?;
    let pkey_given = pkey.is_some() || errs.failed("pkey");
    let wait = match &rc.pkey_wait_ms {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(ms) if (1..=MAX_PKEY_WAIT_MS).contains(&ms) => {
                if pkey_given {
                    Ok(Some(std::time::Duration::from_millis(ms)))
                } else {
                    Err(CniError::config(format!(
                        "pkeyWaitMs {ms} needs pkey: it waits for that partition key in the VF's pkey table"
                    )))
                }
            }
            _ => Err(CniError::config(format!(
                "pkeyWaitMs must be an integer from 1 to {MAX_PKEY_WAIT_MS}, got {v}"
            ))),
        },
    };
    let wait = errs.take("pkeyWaitMs", wait)?;
    Ok((std::time::Duration::from_millis(lock), wait))
}

impl NetConf {
    /// Parses and validates stdin for `command`: as [`NetConf::parse`], except that
    /// `prevResult` is decoded (and a malformed one refused) only for CHECK; the other
    /// verbs ignore it (SPEC.md: "ADD and DEL may receive a prevResult and must not fail
    /// on it"; GC and STATUS have no use for it). This is what the executable uses.
    ///
    /// Errors: as [`NetConf::parse`].
    pub fn parse_for(stdin: &[u8], command: Command) -> Result<NetConf, CniError> {
        Self::parse_inner(stdin, command == Command::Check)
    }

    /// Parses and validates stdin, decoding `prevResult` when present (what CHECK
    /// needs; in-process callers that know the verb use [`NetConf::parse_for`]).
    ///
    /// Every rule that makes a value safe to use is checked here, for every verb, before
    /// anything touches the host: `name` ([`validate_name`]); `stateDir`,
    /// `runtimeConfig.CNIDeviceInfoFile` and the built-in IPAM's `ipam.dataDir` are
    /// absolute paths without NUL. `logFile` is never refused: one that cannot be used
    /// sends the log to stderr ([`crate::logging::init`]). (`ipam.type` naming this
    /// plugin is refused where the delegate is looked up, [`crate::cni::Delegate::find`].)
    ///
    /// The parse runs in phases, in this order, and stops at the first error: decode
    /// ([`phase_decode`]), identity, device, guid, vf, ipam, log, state, prevResult,
    /// guidFallback, goCache, waits, then the warnings for keys nothing reads
    /// ([`unknown_keys`]). [`NetConf::check_all`] runs them all.
    ///
    /// Errors: code 6 when stdin is not a JSON object; code 1 for an unsupported
    /// `cniVersion`; code 7 for every invalid key, naming the key and the expected form.
    pub fn parse(stdin: &[u8]) -> Result<NetConf, CniError> {
        Self::parse_inner(stdin, true)
    }

    /// Every error of stdin as the verb `command` parses it, not only the first: each
    /// phase of [`NetConf::parse`] runs, a key that fails taking its default (as if it
    /// were absent), so one bad value hides no other (`ib-sriov doctor --conf`). The
    /// first error is the one [`NetConf::parse_for`] answers; the rules are the same
    /// code, not a second list.
    pub fn check_all(stdin: &[u8], command: Command) -> Checked {
        let mut errs = Errors {
            collect: true,
            list: Vec::new(),
        };
        let conf = Self::parse_phases(stdin, command == Command::Check, &mut errs).ok();
        Checked {
            conf,
            errors: errs.list,
        }
    }

    fn parse_inner(stdin: &[u8], decode_prev_result: bool) -> Result<NetConf, CniError> {
        let mut errs = Errors {
            collect: false,
            list: Vec::new(),
        };
        Self::parse_phases(stdin, decode_prev_result, &mut errs).map_err(|Stop| {
            errs.list.pop().map_or_else(
                || CniError::config("invalid network configuration"),
                |(_, e)| e,
            )
        })
    }

    /// The phases of [`NetConf::parse`], in order, their errors going to `errs`.
    fn parse_phases(
        stdin: &[u8],
        decode_prev_result: bool,
        errs: &mut Errors,
    ) -> Result<NetConf, Stop> {
        let (raw, mut rc) = phase_decode(stdin, errs)?;
        let (cni_version, name) = phase_identity(&rc, errs)?;
        let rt = rc.runtime_config.take().unwrap_or_default();
        let mut warnings = Vec::new();
        let device_id = phase_device(&rc, &rt, &mut warnings, errs)?;
        let (guid, ib_kubernetes_configured) = phase_guid(&rc, &rt, &mut warnings, errs)?;
        let vf = phase_vf(&rc, errs)?;
        let ipam = phase_ipam(rc.ipam.take(), errs)?;
        let (log_level, log_file) = phase_log(&rc, errs)?;
        let (state_dir, device_info_file) = phase_state(&rc, &rt, errs)?;
        let prev_result = phase_prev_result(&rc, decode_prev_result, errs)?;
        let (guid_file, derive_guid) = phase_guid_fallback(&rc, errs)?;
        let go_cache_dir = phase_go_cache(&rc, errs)?;
        let (lock_timeout, pkey_wait) = phase_waits(&rc, vf.pkey, errs)?;
        warnings.extend(unknown_keys(&raw));
        Ok(NetConf {
            pkey_wait,
            lock_timeout,
            cni_version,
            name,
            device_id,
            guid,
            pkey: vf.pkey,
            link_state: vf.link_state,
            rdma_isolation: vf.rdma_isolation,
            ib_kubernetes_enabled: vf.ib_kubernetes_enabled,
            ib_kubernetes_configured,
            vfio_pci_mode: vf.vfio_pci_mode,
            device_info_file,
            ipam,
            log_level,
            log_file,
            state_dir,
            go_cache_dir,
            prev_result,
            guid_file,
            derive_guid,
            raw,
            warnings,
        })
    }

    /// The ADD-time checks that need no host access: a device is named, and with
    /// `ibKubernetesEnabled` the pod has been configured by ib-kubernetes and carries a GUID.
    ///
    /// Errors: code 7 without a device; code 11 (kubelet retries) while ib-kubernetes
    /// has not annotated the pod yet.
    pub fn validate_for_add(&self) -> Result<PciAddress, CniError> {
        let dev = self.device_id.ok_or_else(|| {
            CniError::config(
                "no VF given: set deviceID (Multus fills it from the SR-IOV device plugin), pciBusID or runtimeConfig.deviceID",
            )
        })?;
        if self.ib_kubernetes_enabled {
            if !self.ib_kubernetes_configured {
                return Err(CniError::try_later(format!(
                    "ibKubernetesEnabled is set but args.cni[\"{IB_K8S_APP_KEY}\"] is not \"configured\": ib-kubernetes has not configured this pod yet"
                )));
            }
            if self.guid.is_none() {
                return Err(CniError::try_later(
                    "ibKubernetesEnabled is set but no GUID was given (runtimeConfig.infinibandGUID or args.cni.guid): ib-kubernetes has not assigned one yet",
                ));
            }
        }
        Ok(dev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_levels_and_their_aliases() {
        use log::LevelFilter::*;
        for (s, want) in [
            ("off", Off),
            ("NONE", Off),
            ("error", Error),
            ("panic", Error),
            ("fatal", Error),
            ("warn", Warn),
            ("Warning", Warn),
            ("info", Info),
            ("debug", Debug),
            ("verbose", Debug),
            ("trace", Trace),
        ] {
            assert_eq!(parse_level(s).unwrap(), want, "{s}");
        }
        assert!(parse_level("loud").is_err());
    }
    #[test]
    fn typos_are_named_with_the_key_they_miss() {
        let w = unknown_keys(&json!({
            "cniVersion": "1.0.0", "name": "n", "type": "ib-sriov",
            "link_stat": "enable", "rdmaIsolaton": true, "capabilities": {"infinibandGUID": true},
            "dns": {}, "publishPfGuid": true, "frobnicate": 1,
            "ipam": {"type": "ib-sriov-ipam", "subnt": "10.0.0.0/24", "dataDir": "/x"}
        }));
        assert!(
            w.contains(
                &"unknown key \"link_stat\" is ignored: did you mean link_state?".to_string()
            ),
            "{w:?}"
        );
        assert!(
            w.contains(
                &"unknown key \"rdmaIsolaton\" is ignored: did you mean rdmaIsolation?".to_string()
            ),
            "{w:?}"
        );
        assert!(
            w.contains(
                &"unknown key ipam.\"subnt\" is ignored: did you mean ipam.subnet?".to_string()
            ),
            "{w:?}"
        );
        assert!(
            w.contains(&"unknown key \"frobnicate\" is ignored".to_string()),
            "{w:?}"
        );
        // No key is named as the Go ib-sriov-cni's that it does not read:
        // `publishPfGuid` is in no version of k8snetworkplumbingwg/ib-sriov-cni (its
        // keys: `pkg/types/types.go`, `IbSriovNetConf`, at 543060da), an unknown key.
        assert!(
            w.contains(&"unknown key \"publishPfGuid\" is ignored".to_string()),
            "{w:?}"
        );
        assert!(!w.iter().any(|x| x.contains("Go")), "{w:?}");
        assert_eq!(w.len(), 5, "capabilities and dns are quiet: {w:?}");
        // An external IPAM's keys are its own.
        assert!(unknown_keys(
            &json!({"type": "ib-sriov", "ipam": {"type": "whereabouts", "range": "x"}})
        )
        .is_empty());
        // And parse() carries them to the log.
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"ib-sriov","Link_State":"enable"}"#,
        )
        .unwrap();
        assert_eq!(
            c.warnings,
            ["unknown key \"Link_State\" is ignored: did you mean link_state?"]
        );
        assert_eq!(c.link_state, None, "not applied");
        assert_eq!(near_miss("pkye", KNOWN_KEYS), Some("pkey"));
        assert_eq!(near_miss("zzzz", KNOWN_KEYS), None);
    }

    fn parse(v: Value) -> Result<NetConf, CniError> {
        NetConf::parse(v.to_string().as_bytes())
    }

    fn base() -> Value {
        json!({"cniVersion": "1.0.0", "name": "ibnet", "type": "ib-sriov", "deviceID": "0000:af:00.2"})
    }

    #[test]
    fn minimal_config() {
        let c = parse(base()).unwrap();
        assert_eq!(c.cni_version, Version::V1_0_0);
        assert_eq!(c.device_id.unwrap().to_string(), "0000:af:00.2");
        assert_eq!(c.guid, None);
        assert_eq!(c.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(c.log_level, log::LevelFilter::Info);
    }

    #[test]
    fn guid_precedence_runtime_then_args_and_top_level_ignored() {
        let mut v = base();
        v["guid"] = json!("00:00:00:00:00:00:00:03");
        v["args"] = json!({"cni": {"guid": "00:00:00:00:00:00:00:02", "other": 5, "list": [1]}});
        v["runtimeConfig"] = json!({"infinibandGUID": "00:00:00:00:00:00:00:01"});
        let c = parse(v.clone()).unwrap();
        assert_eq!(c.guid.unwrap().0.to_string(), "00:00:00:00:00:00:00:01");
        assert_eq!(c.guid.unwrap().1, GuidSource::RuntimeConfig);
        v["runtimeConfig"] = json!({});
        assert_eq!(
            parse(v.clone()).unwrap().guid.unwrap().1,
            GuidSource::ArgsCni
        );
        v["args"] = json!({"cni": {"x": {"nested": true}}});
        let c = parse(v.clone()).unwrap();
        assert_eq!(c.guid, None, "the top-level guid is never applied");
        assert!(c
            .warnings
            .iter()
            .any(|w| w.starts_with("guid: the top-level key is ignored")
                && w.contains("runtimeConfig.infinibandGUID")));
        // Ignored means not validated either (Go never reads it).
        for g in [json!("zz"), json!(17), json!("00:00:00:00:00:00:00:00")] {
            v["guid"] = g;
            let c = parse(v.clone()).unwrap();
            assert_eq!((c.guid, c.warnings.len()), (None, 1));
        }
        assert!(parse(base()).unwrap().warnings.is_empty());
    }

    #[test]
    fn invalid_guids_are_code_7() {
        for (k, g) in [
            (
                "runtimeConfig",
                json!({"infinibandGUID": "00:00:00:00:00:00:00:00"}),
            ),
            ("runtimeConfig", json!({"infinibandGUID": "zz"})),
            ("runtimeConfig", json!({"infinibandGUID": 17})),
        ] {
            let mut v = base();
            v[k] = g;
            assert_eq!(parse(v).unwrap_err().code, 7);
        }
        let mut v = base();
        v["args"] = json!({"cni": {"guid": 5}});
        assert_eq!(parse(v).unwrap_err().code, 7);
        let mut v = base();
        v["runtimeConfig"] = json!({"infinibandGUID": "ff:ff:ff:ff:ff:ff:ff:ff"});
        assert_eq!(parse(v).unwrap_err().code, 7);
    }

    #[test]
    fn device_id_sources() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("deviceID");
        v["pciBusID"] = json!("af:00.3");
        assert_eq!(
            parse(v.clone()).unwrap().device_id.unwrap().to_string(),
            "0000:af:00.3"
        );
        v["runtimeConfig"] = json!({"deviceID": "0000:af:00.4"});
        assert_eq!(
            parse(v).unwrap().device_id.unwrap().to_string(),
            "0000:af:00.4"
        );
        let mut v = base();
        v["deviceID"] = json!("garbage");
        let e = parse(v).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("deviceID"), "{}", e.msg);
    }

    #[test]
    fn link_state_pkey_bools() {
        let mut v = base();
        v["link_state"] = json!("enable");
        v["pkey"] = json!("0x8001");
        v["rdmaIsolation"] = json!(true);
        v["vfioPciMode"] = json!(false);
        let c = parse(v).unwrap();
        assert_eq!(c.link_state, Some(LinkState::Enable));
        assert_eq!(c.pkey, Some(0x8001));
        for (text, want) in [("0x8000", 0x8000), ("0x00000005", 5), ("7fff", 0x7fff)] {
            let mut v = base();
            v["pkey"] = json!(text);
            assert_eq!(parse(v).unwrap().pkey, Some(want), "{text}");
        }
        assert_eq!(c.rdma_isolation, Some(true));
        assert_eq!(c.vfio_pci_mode, Some(false));
        for (k, bad) in [
            ("link_state", json!("up")),
            ("pkey", json!("0x10000")),
            ("pkey", json!("0x000010000")),
            ("pkey", json!("xyz")),
            ("rdmaIsolation", json!("true")),
            ("ibKubernetesEnabled", json!(1)),
            ("logLevel", json!("loud")),
            ("stateDir", json!("state")),
            ("ipam", json!("host-local")),
            ("ipam", json!({"type": 5})),
            ("lockTimeoutMs", json!(0)),
            ("lockTimeoutMs", json!("5")),
        ] {
            let mut v = base();
            v[k] = bad.clone();
            let e = parse(v).unwrap_err();
            assert_eq!(e.code, 7, "{k}={bad}");
        }
    }

    #[test]
    fn pkey_wait_ms() {
        let mut v = base();
        v["pkey"] = json!("0x8001");
        assert_eq!(parse(v.clone()).unwrap().pkey_wait, None);
        for ms in [1u64, 1500, MAX_PKEY_WAIT_MS] {
            v["pkeyWaitMs"] = json!(ms);
            let c = parse(v.clone()).unwrap();
            assert_eq!(c.pkey_wait, Some(std::time::Duration::from_millis(ms)));
            assert!(c.warnings.is_empty(), "a known key: {:?}", c.warnings);
        }
        v["pkeyWaitMs"] = Value::Null;
        assert_eq!(parse(v.clone()).unwrap().pkey_wait, None);
        for bad in [
            json!(0),
            json!(MAX_PKEY_WAIT_MS + 1),
            json!("500"),
            json!(1.5),
        ] {
            v["pkeyWaitMs"] = bad.clone();
            let e = parse(v.clone()).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.contains("pkeyWaitMs must be an integer"), "{}", e.msg);
        }
        let mut v = base();
        v["pkeyWaitMs"] = json!(500);
        let e = parse(v).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("needs pkey"), "{}", e.msg);
    }

    #[test]
    fn ipam_without_a_type_is_no_ipam() {
        for ipam in [
            json!({}),
            json!({"subnet": "10.0.0.0/24"}),
            json!({"type": ""}),
        ] {
            let mut v = base();
            v["ipam"] = ipam.clone();
            assert_eq!(parse(v).unwrap().ipam, None, "{ipam}");
        }
    }

    #[test]
    fn decode_and_version_errors() {
        assert_eq!(NetConf::parse(b"{not json").unwrap_err().code, 6);
        assert_eq!(NetConf::parse(b"[1]").unwrap_err().code, 6);
        let mut v = base();
        v["cniVersion"] = json!("0.0.2");
        assert_eq!(parse(v).unwrap_err().code, 1);
        // 0.1.0 and 0.2.0 are accepted, as by the Go plugin's skel (libcni version.All).
        for old in ["0.1.0", "0.2.0"] {
            let mut v = base();
            v["cniVersion"] = json!(old);
            assert_eq!(parse(v).unwrap().cni_version.as_str(), old);
        }
        let mut v = base();
        v.as_object_mut().unwrap().remove("name");
        assert_eq!(parse(v).unwrap_err().code, 7);
    }

    #[test]
    fn accepts_capabilities_and_prev_result() {
        let mut v = base();
        v["capabilities"] = json!({"infinibandGUID": true, "deviceID": true});
        v["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]});
        let c = parse(v).unwrap();
        assert_eq!(c.prev_result.unwrap().ips.len(), 1);
    }

    #[test]
    fn ib_kubernetes_gating_is_code_11() {
        let mut v = base();
        v["ibKubernetesEnabled"] = json!(true);
        assert_eq!(
            parse(v.clone())
                .unwrap()
                .validate_for_add()
                .unwrap_err()
                .code,
            11
        );
        v["args"] = json!({"cni": {"mellanox.infiniband.app": "configured"}});
        assert_eq!(
            parse(v.clone())
                .unwrap()
                .validate_for_add()
                .unwrap_err()
                .code,
            11
        );
        v["args"]["cni"]["guid"] = json!("02:00:00:00:00:00:00:07");
        parse(v).unwrap().validate_for_add().unwrap();
        let mut v = base();
        v.as_object_mut().unwrap().remove("deviceID");
        assert_eq!(parse(v).unwrap().validate_for_add().unwrap_err().code, 7);
    }

    #[test]
    fn unsafe_network_names_are_code_7_for_every_verb() {
        let long = "n".repeat(256);
        for bad in [
            "a/b",
            "..",
            ".",
            "",
            "x\ny",
            "tab\there",
            "nul\0",
            long.as_str(),
        ] {
            let mut v = base();
            v["name"] = json!(bad);
            for cmd in [
                Command::Add,
                Command::Del,
                Command::Check,
                Command::Gc,
                Command::Status,
            ] {
                let e = NetConf::parse_for(v.to_string().as_bytes(), cmd).unwrap_err();
                assert_eq!(e.code, 7, "{bad:?} {cmd:?}");
                assert!(e.msg.contains("name"), "{bad:?}: {}", e.msg);
            }
        }
        let mut v = base();
        v["name"] = json!("n".repeat(255));
        parse(v).unwrap();
    }

    #[test]
    fn prev_result_is_decoded_only_for_check() {
        let mut v = base();
        v["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "not-an-ip"}]});
        let stdin = v.to_string();
        for cmd in [Command::Add, Command::Del, Command::Gc, Command::Status] {
            let c = NetConf::parse_for(stdin.as_bytes(), cmd).unwrap();
            assert!(c.prev_result.is_none(), "{cmd:?}");
            assert_eq!(c.raw["prevResult"], v["prevResult"], "kept raw");
        }
        assert!(NetConf::parse_for(stdin.as_bytes(), Command::Check).is_err());
        v["prevResult"] = json!("garbage");
        NetConf::parse_for(v.to_string().as_bytes(), Command::Del).unwrap();
        v["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]});
        let c = NetConf::parse_for(v.to_string().as_bytes(), Command::Check).unwrap();
        assert_eq!(c.prev_result.unwrap().ips.len(), 1);
    }

    #[test]
    fn paths_must_be_absolute_but_log_file_is_never_refused() {
        for (k, bad) in [("stateDir", "state"), ("stateDir", "../state")] {
            let mut v = base();
            v[k] = json!(bad);
            let e = parse(v).unwrap_err();
            assert_eq!(e.code, 7, "{k}={bad}");
            assert!(e.msg.contains(k) && e.msg.contains("absolute"), "{}", e.msg);
        }
        let mut v = base();
        v["runtimeConfig"] = json!({"CNIDeviceInfoFile": "devinfo.json"});
        let e = parse(v).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("CNIDeviceInfoFile"), "{e:?}");
        for dd in [json!("data"), json!("./x"), json!(3)] {
            let mut v = base();
            v["ipam"] = json!({"type": "ib-sriov-ipam", "subnet": "10.0.0.0/24", "dataDir": dd});
            let e = parse(v).unwrap_err();
            assert!(e.code == 7 && e.msg.contains("dataDir"), "{e:?}");
        }
        // An external IPAM plugin's dataDir is its own business.
        let mut v = base();
        v["ipam"] = json!({"type": "host-local", "subnet": "10.0.0.0/24", "dataDir": "rel"});
        parse(v).unwrap();
        // logging::init falls back to stderr for these; the verb goes on.
        for lf in [
            "/dev/null",
            "/dev/stdout",
            "/proc/self/fd/1",
            "/",
            "rel.log",
            "./x.log",
        ] {
            let mut v = base();
            v["logFile"] = json!(lf);
            assert_eq!(parse(v).unwrap().log_file, Some(PathBuf::from(lf)), "{lf}");
        }
    }

    #[test]
    fn sniff_version_reads_only_the_version() {
        assert_eq!(
            sniff_version(br#"{"x": [1, {"y": 2}], "cniVersion": "1.1.0"}"#).as_deref(),
            Some("1.1.0")
        );
        assert_eq!(sniff_version(br#"{"cniVersion": 1}"#), None);
        assert_eq!(sniff_version(b"[1]"), None);
        assert_eq!(sniff_version(b"{nope"), None);
    }

    /// Bad values, each on its own key, none of which changes how another is judged.
    fn defects() -> Vec<(&'static str, Value)> {
        vec![
            ("cniVersion", json!("9.9.9")),
            ("name", json!("a/b")),
            ("type", json!(7)),
            ("logLevel", json!(3)),
            ("deviceID", json!("garbage")),
            ("runtimeConfig", json!({"infinibandGUID": "zz"})),
            ("args", json!({"cni": {"guid": 5}})),
            ("pkey", json!("0x1ffff")),
            ("link_state", json!("sideways")),
            ("rdmaIsolation", json!("yes")),
            ("ibKubernetesEnabled", json!(1)),
            ("vfioPciMode", json!("no")),
            ("ipam", json!({"type": "ib-sriov-ipam", "dataDir": "rel"})),
            ("stateDir", json!("state")),
            ("guidFile", json!("guids")),
            ("deriveGuid", json!("yes")),
            ("goCacheDir", json!(3)),
            ("lockTimeoutMs", json!(0)),
            ("pkeyWaitMs", json!(60_001)),
        ]
    }

    /// The collecting parse (doctor --conf) and the verbs' agree: its first error is
    /// the verbs' answer, and a configuration with several bad keys shows each of them,
    /// as when each is the only one (issue 50: `lockTimeoutMs: 0` hid the rest).
    #[test]
    fn check_all_finds_every_bad_key_and_the_verbs_answer_first() {
        use proptest::prelude::*;
        let all = defects();
        let n = all.len();
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 256,
            ..Default::default()
        });
        runner
            .run(
                &proptest::sample::subsequence((0..n).collect::<Vec<_>>(), 0..=n),
                |picked| {
                    let mut v = base();
                    for &i in &picked {
                        v[all[i].0] = all[i].1.clone();
                    }
                    let stdin = v.to_string();
                    let checked = NetConf::check_all(stdin.as_bytes(), Command::Add);
                    match NetConf::parse_for(stdin.as_bytes(), Command::Add) {
                        Ok(_) => prop_assert!(checked.errors.is_empty(), "{:?}", checked.errors),
                        Err(e) => {
                            let (_, first) = &checked.errors[0];
                            prop_assert_eq!((first.code, &first.msg), (e.code, &e.msg));
                        }
                    }
                    // Each bad key, as the verbs answer it alone, is among the errors.
                    for &i in &picked {
                        let mut one = base();
                        one[all[i].0] = all[i].1.clone();
                        let alone = NetConf::parse_for(one.to_string().as_bytes(), Command::Add)
                            .unwrap_err();
                        prop_assert!(
                            checked.errors.iter().any(|(_, e)| e.msg == alone.msg),
                            "{} lost: {:?}",
                            all[i].0,
                            checked.errors
                        );
                    }
                    prop_assert_eq!(checked.errors.len(), picked.len(), "{:?}", checked.errors);
                    prop_assert!(checked.conf.is_some());
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn check_all_keeps_the_warnings_and_what_parsed() {
        let mut v = base();
        v["lockTimeoutMs"] = json!(0);
        v["link_stat"] = json!("enable");
        v["pkey"] = json!("0x8001");
        v["pkeyWaitMs"] = json!(500);
        v["logFile"] = json!("rel.log");
        let c = NetConf::check_all(v.to_string().as_bytes(), Command::Add);
        let keys: Vec<&str> = c.errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["lockTimeoutMs"]);
        assert!(c.failed("lockTimeoutMs") && !c.failed("pkey"));
        let conf = c.conf.unwrap();
        assert_eq!(
            conf.lock_timeout.as_millis(),
            u128::from(DEFAULT_LOCK_TIMEOUT_MS)
        );
        assert_eq!(conf.pkey_wait.map(|d| d.as_millis()), Some(500));
        assert_eq!(conf.log_file, Some(PathBuf::from("rel.log")));
        assert_eq!(
            conf.warnings,
            ["unknown key \"link_stat\" is ignored: did you mean link_state?"]
        );
        // A pkey that failed is not reported missing by pkeyWaitMs.
        v["pkey"] = json!("0x1ffff");
        let c = NetConf::check_all(v.to_string().as_bytes(), Command::Add);
        let keys: Vec<&str> = c.errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["pkey", "lockTimeoutMs"]);
        // Without pkey it is, as for the verbs.
        v.as_object_mut().unwrap().remove("pkey");
        let c = NetConf::check_all(v.to_string().as_bytes(), Command::Add);
        let keys: Vec<&str> = c.errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["lockTimeoutMs", "pkeyWaitMs"]);
        // Input that is not a JSON object: one error, nothing to check.
        let c = NetConf::check_all(b"[1]", Command::Add);
        assert!(c.conf.is_none() && c.errors.len() == 1 && c.errors[0].1.code == 6);
        // prevResult is ADD's business only for CHECK.
        let mut v = base();
        v["prevResult"] = json!("garbage");
        assert!(NetConf::check_all(v.to_string().as_bytes(), Command::Add)
            .errors
            .is_empty());
        assert!(NetConf::check_all(v.to_string().as_bytes(), Command::Check).failed("prevResult"));
    }
}
