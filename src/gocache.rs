//! The Go ib-sriov-cni's per-attachment cache, read so that pods the Go plugin attached
//! can be deleted after the binary was swapped in place (docs/upgrading.md "Upgrading from the Go
//! plugin").
//!
//! Format (k8snetworkplumbingwg/ib-sriov-cni 543060da, `pkg/utils/utils.go`
//! `SaveNetConf`, `pkg/types/types.go` `NetConf`): the file
//! `/var/lib/cni/ib-sriov/<containerID>-<ifname>` (directory 0700, file 0600, written last
//! by a successful ADD, removed by a successful DEL), one JSON object: `json.Marshal` of
//! the Go `NetConf`. Keys read here: `deviceID` (VF PCI address), `VFID`, `Master` (PF
//! netdev), `HostIFNames` (the VF netdev's host name before ADD), `HostIFGUID` (the VF's
//! port GUID before ADD, when ADD set a GUID; `FF:FF:FF:FF:FF:FF:FF:FF` in vfio mode),
//! `ContIFNames`, `link_state`, `vfioPciMode`, `rdmaIsolation`,
//! `RdmaNetState.containerRdmaDevName`, `ipam.type` (the only IPAM key it keeps),
//! `runtimeConfig.infinibandGUID`, `args.cni.guid`, `name`. Releases up to v1.2.1 wrote
//! the same keys in struct order and no `vfioPciMode`; both forms parse. Unknown keys are
//! ignored.
//!
//! ADD also writes this file, in the Go plugin's current format ([`render`]), so that a
//! node rolled back to the Go plugin with pods running can still DEL them: the Go DEL
//! reads it and undoes the attachment as it undoes its own. Our own key
//! [`MARKER_KEY`] (`{"bootId", "writer"}`, which Go's `encoding/json` ignores as an
//! unknown field) tells our DEL the file is ours and which boot wrote it.

use crate::fsutil::open_regular;
use crate::types::{Guid, LinkState, PciAddress};
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::Value;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The Go plugin's cache directory (hard-coded there: `config.DefaultCNIDir`).
pub const GO_CACHE_DIR: &str = "/var/lib/cni/ib-sriov";

/// The Go plugin's node lock file (hard-coded there: `config.CniFileLockDir` +
/// `config.CniFileLockName`, k8snetworkplumbingwg/ib-sriov-cni 543060da
/// `pkg/config/config.go`). `cmd/ib-sriov-cni/main.go` `lockCNIExecution` creates the
/// directory (mode 0700) and takes the lock through gofrs/flock v0.13.0 (`New`: the
/// file opened `O_CREATE|O_RDONLY`, mode 0600; `Lock`: `flock(2)` `LOCK_EX`, blocking
/// without limit; gofrs/flock 95a014d9 `flock.go`, `flock_unix.go`); `cmdAdd` holds it
/// from after parsing its configuration and opening the netns to its return (the VF
/// rebind, the moves, the delegated IPAM: the whole call), `cmdDel` likewise around the
/// VF cleanup. This plugin holds the same lock for each of its rebind windows
/// ([`crate::plugin::rebind_queue`]).
pub const GO_LOCK_FILE: &str = "/var/run/cni/ib-sriov/cni.lock";

/// Environment variable that replaces [`GO_LOCK_FILE`] in test builds (feature
/// `failpoints`), so parallel emulated nodes do not share the machine's lock and a test
/// can hold one of its own.
#[cfg(feature = "failpoints")]
pub const TEST_GO_LOCK_ENV: &str = "IB_SRIOV_TEST_GO_LOCK";

/// The Go plugin's node lock file this process takes: [`GO_LOCK_FILE`] (in test builds,
/// `$IB_SRIOV_TEST_GO_LOCK` when set and not empty).
pub fn go_lock_path() -> PathBuf {
    #[cfg(feature = "failpoints")]
    if let Some(p) = std::env::var_os(TEST_GO_LOCK_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    PathBuf::from(GO_LOCK_FILE)
}

/// The key of this plugin's own object in a cache file it wrote: `{"bootId": <the
/// kernel's boot ID or null>, "writer": "ib-sriov <version>"}`. Sorted after every key
/// the Go plugin writes (all ASCII, `x` above them), so a file without it is byte for
/// byte what Go's `json.Marshal` writes.
pub const MARKER_KEY: &str = "x-ib-sriov";

/// What the Go plugin writes as `HostIFGUID` in vfio mode (`utils.DefaultGUID`).
pub const GO_DEFAULT_GUID: &str = "FF:FF:FF:FF:FF:FF:FF:FF";

/// Largest cache file read, in bytes (a Go cache is well under 4 KiB).
pub const MAX_GO_CACHE_BYTES: u64 = 1 << 20;

#[derive(Debug, Default, Deserialize)]
struct RawRdma {
    #[serde(rename = "containerRdmaDevName", default)]
    container_rdma_dev_name: String,
}

#[derive(Debug, Default, Deserialize)]
struct RawRuntime {
    #[serde(rename = "infinibandGUID", default)]
    infiniband_guid: String,
}

#[derive(Debug, Deserialize)]
struct RawGoNetConf {
    #[serde(rename = "deviceID", default)]
    device_id: String,
    #[serde(rename = "VFID", default)]
    vf_id: Option<u32>,
    #[serde(rename = "Master", default)]
    master: String,
    #[serde(rename = "HostIFNames", default)]
    host_if_names: String,
    #[serde(rename = "HostIFGUID", default)]
    host_if_guid: String,
    #[serde(rename = "ContIFNames", default)]
    cont_if_names: String,
    #[serde(default)]
    link_state: String,
    #[serde(rename = "vfioPciMode", default)]
    vfio_pci_mode: bool,
    #[serde(rename = "rdmaIsolation", default)]
    rdma_isolation: bool,
    #[serde(rename = "RdmaNetState", default)]
    rdma_net_state: Option<RawRdma>,
    #[serde(default)]
    ipam: Option<Value>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntime>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    name: String,
    #[serde(rename = "x-ib-sriov", default)]
    marker: Option<RawMarker>,
}

#[derive(Debug, Default, Deserialize)]
struct RawMarker {
    #[serde(rename = "bootId", default)]
    boot_id: Option<String>,
}

/// What the Go plugin's ADD did, as its cache records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAttachment {
    /// The cache file.
    pub path: PathBuf,
    /// `deviceID`: the VF.
    pub vf: PciAddress,
    /// `VFID`.
    pub vf_index: Option<u32>,
    /// `Master`: the PF netdev name at ADD (empty: unknown).
    pub pf_netdev: Option<String>,
    /// `HostIFNames`: the VF netdev's host name before ADD (`None` in vfio mode).
    pub host_name: Option<String>,
    /// `ContIFNames`: the name ADD gave it in the pod.
    pub pod_name: Option<String>,
    /// `HostIFGUID` as Go's DEL uses it: the GUID it sets on node and port (all-zero
    /// read as all-ones, `utils.DefaultGUID`, as `ResetVFConfig` does); `None` when ADD
    /// set no GUID, so DEL sets none and does not rebind.
    pub restore_guid: Option<Guid>,
    /// The GUID ADD set (`runtimeConfig.infinibandGUID`, else `args.cni.guid`).
    pub applied_guid: Option<Guid>,
    /// `link_state`: when set, Go's DEL sets the VF's link state to `auto`.
    pub link_state: Option<LinkState>,
    /// `vfioPciMode` (set by ADD's auto-detection too).
    pub vfio: bool,
    /// `RdmaNetState.containerRdmaDevName` when `rdmaIsolation` moved it into the pod.
    pub rdma_device: Option<String>,
    /// `ipam.type` (empty: no IPAM). Go's DEL releases with the DEL call's own stdin.
    pub ipam_type: Option<String>,
    /// `name`.
    pub network: String,
    /// Written by this plugin's ADD ([`MARKER_KEY`]): `Some(boot ID it recorded)`.
    pub ours: Option<Option<String>>,
}

impl GoAttachment {
    /// Written by this plugin's ADD in the running boot (its marker's `bootId` is
    /// `/proc/sys/kernel/random/boot_id` now): the host state it describes may still
    /// be there. False for the Go plugin's files, a marker of another boot, or a boot
    /// that cannot be read (then nothing is claimed).
    pub fn ours_this_boot(&self) -> bool {
        matches!(&self.ours, Some(Some(b)) if crate::boot::id().is_some_and(|now| b.eq_ignore_ascii_case(now)))
    }

    /// Written in a boot before the running one, so the pod netns and the netdev its ADD
    /// moved died with that boot. Our marker's `bootId` decides when it names one
    /// ([`crate::boot::is_other`]); otherwise (the Go plugin's files, which record no
    /// boot) the file's modification time, set by the ADD that wrote it (Go's
    /// `utils.SaveNetConf`, an `os.WriteFile` in `saveScratchNetConf`,
    /// k8snetworkplumbingwg/ib-sriov-cni 543060da `pkg/utils/utils.go`; nothing
    /// rewrites it), is compared with the boot time
    /// (`/proc/stat` `btime`, [`crate::boot::boot_time`]), as the built-in IPAM judges
    /// its records after a reboot. False whenever either time is unreadable (nothing is
    /// claimed). A wall clock stepped forward after the ADD moves `btime` past the
    /// file's time: such a file of this boot reads as older.
    pub fn of_earlier_boot(&self) -> bool {
        if let Some(Some(b)) = &self.ours {
            return crate::boot::is_other(Some(b));
        }
        let Some(booted) = crate::boot::boot_time() else {
            return false;
        };
        std::fs::symlink_metadata(&self.path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < booted)
    }
}

/// The facts of one attachment that the Go plugin's `cmdAdd` computes before
/// `utils.SaveNetConf` (k8snetworkplumbingwg/ib-sriov-cni 543060da: `config.LoadDeviceInfo`,
/// `sriovManager.ApplyVFConfig`/`applyVFGuid`, `doVFConfig`, `SetupVF`).
#[derive(Debug, Clone)]
pub struct GoFacts<'a> {
    /// `deviceID`: the VF.
    pub vf: PciAddress,
    /// `VFID`.
    pub vf_index: u32,
    /// `Master`: the PF netdev (`""` when it has none).
    pub master: &'a str,
    /// `HostIFNames`: the VF netdev's host name before ADD (`""` in vfio mode).
    pub host_ifname: &'a str,
    /// `ContIFNames`: CNI_IFNAME (`""` in vfio mode).
    pub cont_ifname: &'a str,
    /// `HostIFGUID`: `""` unless the pod asked for a GUID; then the VF's port GUID
    /// before ADD, or [`GO_DEFAULT_GUID`] in vfio mode.
    pub host_if_guid: String,
    /// `vfioPciMode` (configured or detected from the driver).
    pub vfio: bool,
    /// The RDMA device ADD moved into the pod (`RdmaNetState`, and `rdmaIsolation`).
    pub rdma_device: Option<&'a str>,
    /// Our marker's `bootId`.
    pub boot_id: Option<&'a str>,
}

/// The cache file the Go plugin's ADD would write for network configuration `stdin`
/// (the JSON object ADD received) and `facts`, plus [`MARKER_KEY`]: `json.Marshal` of
/// its `NetConf` (ib-sriov-cni 543060da `pkg/types/types.go` `NetConf.MarshalJSON`:
/// containernetworking/cni v1.3.0 `PluginConf` merged with `IbSriovNetConf`, keys
/// sorted). From the configuration it keeps exactly what Go's decoder keeps:
/// `cniVersion`, `name`, `type` (omitted when empty), `capabilities` (booleans; omitted
/// when empty), `ipam` (`type` only), `dns` (omitted when empty), `prevResult` (omitted
/// when empty), `pkey`, `link_state` (omitted when empty), `rdmaIsolation`,
/// `ibKubernetesEnabled`, `vfioPciMode` (omitted when false), `runtimeConfig`
/// (`infinibandGUID` only) and `args` (`cni` string values only; `null` when absent).
pub fn render(stdin: &Value, facts: &GoFacts) -> String {
    use serde_json::{json, Map};
    use std::collections::BTreeMap;
    let get = |k: &str| stdin.get(k);
    let s = |k: &str| get(k).and_then(Value::as_str).unwrap_or_default();
    let truthy = |k: &str| get(k).and_then(Value::as_bool).unwrap_or(false);
    let mut m: BTreeMap<&str, Value> = BTreeMap::new();
    for k in ["cniVersion", "name", "type"] {
        if !s(k).is_empty() {
            m.insert(k, json!(s(k)));
        }
    }
    let caps: Map<String, Value> = get("capabilities")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter(|(_, v)| v.is_boolean())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    if !caps.is_empty() {
        m.insert("capabilities", Value::Object(caps));
    }
    let ipam_type = get("ipam")
        .and_then(|i| i.get("type"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    m.insert(
        "ipam",
        if ipam_type.is_empty() {
            json!({})
        } else {
            json!({ "type": ipam_type })
        },
    );
    if let Some(dns) = get("dns").and_then(Value::as_object) {
        let mut d = Map::new();
        for k in ["nameservers", "search", "options"] {
            if let Some(a) = dns
                .get(k)
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
            {
                d.insert(k.to_string(), Value::Array(a.clone()));
            }
        }
        if let Some(v) = dns
            .get("domain")
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
        {
            d.insert("domain".to_string(), json!(v));
        }
        if !d.is_empty() {
            m.insert("dns", Value::Object(d));
        }
    }
    if let Some(p) = get("prevResult").filter(|p| p.as_object().is_some_and(|o| !o.is_empty())) {
        m.insert("prevResult", p.clone());
    }
    m.insert("pkey", json!(s("pkey")));
    if !s("link_state").is_empty() {
        m.insert("link_state", json!(s("link_state")));
    }
    if truthy("rdmaIsolation") || facts.rdma_device.is_some() {
        m.insert("rdmaIsolation", json!(true));
    }
    if truthy("ibKubernetesEnabled") {
        m.insert("ibKubernetesEnabled", json!(true));
    }
    if facts.vfio {
        m.insert("vfioPciMode", json!(true));
    }
    let rt_guid = get("runtimeConfig")
        .and_then(|r| r.get("infinibandGUID"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    m.insert("runtimeConfig", json!({ "infinibandGUID": rt_guid }));
    let cni_args = get("args")
        .and_then(|a| a.get("cni"))
        .and_then(Value::as_object)
        .map(|o| {
            Value::Object(
                o.iter()
                    .filter(|(_, v)| v.is_string())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )
        });
    m.insert("args", json!({ "cni": cni_args }));
    m.insert("Master", json!(facts.master));
    m.insert("deviceID", json!(facts.vf.to_string()));
    m.insert("VFID", json!(facts.vf_index));
    m.insert("HostIFNames", json!(facts.host_ifname));
    m.insert("HostIFGUID", json!(facts.host_if_guid));
    m.insert("ContIFNames", json!(facts.cont_ifname));
    let rdma = facts.rdma_device.unwrap_or_default();
    let rdma_vf = if rdma.is_empty() {
        String::new()
    } else {
        facts.vf.to_string()
    };
    m.insert(
        "RdmaNetState",
        json!({"containerRdmaDevName": rdma, "deviceID": rdma_vf, "sandboxRdmaDevName": rdma, "version": ""}),
    );
    m.insert(
        MARKER_KEY,
        json!({"bootId": facts.boot_id, "writer": format!("ib-sriov {}", crate::version())}),
    );
    serde_json::to_string(&m).unwrap_or_default()
}

/// The cache file of (containerID, ifname) in `dir`: `<dir>/<containerID>-<ifname>`
/// (`strings.Join([]string{containerID, ifName}, "-")` in `SaveNetConf`).
pub fn path(dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    dir.join(format!("{container_id}-{ifname}"))
}

/// Why a cache file could not be used.
#[derive(Debug)]
pub enum GoCacheError {
    /// Reading it failed (not a regular file, too large, I/O).
    Io(PathBuf, io::Error),
    /// Its content is not a Go `NetConf` this plugin can act on.
    Invalid(PathBuf, String),
}

impl std::fmt::Display for GoCacheError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GoCacheError::Io(p, e) => write!(f, "reading Go plugin cache {}: {e}", p.display()),
            GoCacheError::Invalid(p, m) => {
                write!(f, "Go plugin cache {} is unusable: {m}", p.display())
            }
        }
    }
}

impl std::error::Error for GoCacheError {}

/// Reads the cache of (containerID, ifname) from `dir`: `Ok(None)` when there is none.
/// The file is opened without following symlinks and must be a regular file of at most
/// [`MAX_GO_CACHE_BYTES`].
///
/// Errors: [`GoCacheError`] naming the file.
pub fn load(
    dir: &Path,
    container_id: &str,
    ifname: &str,
) -> Result<Option<GoAttachment>, GoCacheError> {
    let p = path(dir, container_id, ifname);
    let mut f = match open_regular(&p, OFlag::O_RDONLY, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(GoCacheError::Io(p, e)),
    };
    let mut buf = Vec::new();
    (&mut f)
        .take(MAX_GO_CACHE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| GoCacheError::Io(p.clone(), e))?;
    if buf.len() as u64 > MAX_GO_CACHE_BYTES {
        return Err(GoCacheError::Invalid(
            p,
            format!("larger than {MAX_GO_CACHE_BYTES} bytes"),
        ));
    }
    parse(&buf, p).map(Some)
}

/// Parses the content of a cache file (`path` is kept for messages and removal).
///
/// Errors: [`GoCacheError::Invalid`] when it is not a JSON object with a valid
/// `deviceID`, or a GUID, `link_state` it holds is malformed.
pub fn parse(bytes: &[u8], path: PathBuf) -> Result<GoAttachment, GoCacheError> {
    let bad = |m: String| GoCacheError::Invalid(path.clone(), m);
    let raw: RawGoNetConf =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not a Go NetConf: {e}")))?;
    let vf: PciAddress = raw
        .device_id
        .parse()
        .map_err(|e| bad(format!("deviceID: {e}")))?;
    let guid = |s: &str, key: &str| -> Result<Option<Guid>, GoCacheError> {
        if s.is_empty() {
            return Ok(None);
        }
        s.parse::<Guid>()
            .map(Some)
            .map_err(|e| bad(format!("{key}: {e}")))
    };
    let restore_guid = guid(&raw.host_if_guid, "HostIFGUID")?.map(|g| {
        if g.is_zero() {
            "ff:ff:ff:ff:ff:ff:ff:ff".parse().unwrap_or(g)
        } else {
            g
        }
    });
    let args_guid = raw
        .args
        .as_ref()
        .and_then(|a| a.get("cni"))
        .and_then(|c| c.get("guid"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let applied_guid = match guid(
        &raw.runtime_config.unwrap_or_default().infiniband_guid,
        "runtimeConfig.infinibandGUID",
    )? {
        Some(g) => Some(g),
        None => guid(&args_guid, "args.cni.guid")?,
    };
    let link_state = match raw.link_state.as_str() {
        "" => None,
        s => Some(s.parse::<LinkState>().map_err(bad)?),
    };
    let ipam_type = raw
        .ipam
        .as_ref()
        .and_then(|i| i.get("type"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    Ok(GoAttachment {
        path: path.clone(),
        vf,
        vf_index: raw.vf_id,
        pf_netdev: non_empty(raw.master),
        host_name: non_empty(raw.host_if_names),
        pod_name: non_empty(raw.cont_if_names),
        restore_guid,
        applied_guid,
        link_state,
        vfio: raw.vfio_pci_mode,
        rdma_device: raw
            .rdma_net_state
            .filter(|_| raw.rdma_isolation)
            .and_then(|r| non_empty(r.container_rdma_dev_name)),
        ipam_type,
        network: raw.name,
        ours: raw.marker.map(|m| m.boot_id),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> PathBuf {
        PathBuf::from("/x/cid-net1")
    }

    /// What ADD writes is, byte for byte, what the Go plugin writes for the same stdin
    /// and host (the fixtures of tests/fixtures/go-cache, generated from the Go
    /// plugin's own types at 543060da), plus our marker as the last key.
    #[test]
    fn render_matches_the_go_plugin_byte_for_byte() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/go-cache");
        let m: Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        let mut seen = 0;
        for f in m["fixtures"].as_array().unwrap() {
            if f["dir"] != "ib-sriov" {
                continue; // the legacy v1.2.1 format is read, never written
            }
            let n = f["vf"].as_u64().unwrap() as u32;
            let vfio = f["stdin"]["vfioPciMode"] == true;
            let stdin = &f["stdin"];
            let guid_given = stdin["runtimeConfig"]["infinibandGUID"].is_string()
                || stdin["args"]["cni"]["guid"].is_string();
            let host_ifname = format!("ibp175s0f0v{n}");
            let rdma = format!("mlx5_{}", n + 1);
            let facts = GoFacts {
                vf: f["stdin"]["deviceID"].as_str().unwrap().parse().unwrap(),
                vf_index: n,
                master: "ibp175s0f0",
                host_ifname: if vfio { "" } else { &host_ifname },
                cont_ifname: if vfio { "" } else { "net1" },
                host_if_guid: match (guid_given, vfio) {
                    (false, _) => String::new(),
                    (true, true) => GO_DEFAULT_GUID.into(),
                    (true, false) => format!("02:00:00:00:00:02:00:{n:02x}"),
                },
                vfio,
                rdma_device: (stdin["rdmaIsolation"] == true).then_some(rdma.as_str()),
                boot_id: Some("0d5e9a32-4b8a-4c57-9e3f-2b1f3f0e8a11"),
            };
            let ours = render(stdin, &facts);
            let cut = ours.find(&format!(",\"{MARKER_KEY}\":")).expect("marker");
            let go =
                std::fs::read_to_string(dir.join("ib-sriov").join(f["file"].as_str().unwrap()))
                    .unwrap();
            assert_eq!(format!("{}}}", &ours[..cut]), go, "{}", f["name"]);
            let back = parse(ours.as_bytes(), p()).unwrap();
            assert_eq!(
                back.ours,
                Some(Some("0d5e9a32-4b8a-4c57-9e3f-2b1f3f0e8a11".to_string()))
            );
            seen += 1;
        }
        assert_eq!(seen, 5, "fixtures a-e");
    }

    /// A file older than the boot is of an earlier boot, a fresh one is not; our marker's
    /// boot ID decides over the file's time; a file that cannot be read claims nothing.
    #[test]
    fn earlier_boot_by_marker_else_by_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("cid-net1");
        std::fs::write(&f, "{}").unwrap();
        let go = |ours: Option<Option<String>>| GoAttachment {
            ours,
            ..parse(br#"{"deviceID":"0000:af:00.2"}"#, f.clone()).unwrap()
        };
        assert!(!go(None).of_earlier_boot(), "written now");
        let booted = crate::boot::boot_time().unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(booted - std::time::Duration::from_secs(60))
            .unwrap();
        assert!(go(None).of_earlier_boot(), "written before the boot");
        assert!(go(Some(None)).of_earlier_boot(), "a marker without a boot");
        let now = crate::boot::id().unwrap().to_string();
        assert!(
            !go(Some(Some(now))).of_earlier_boot(),
            "our marker: this boot"
        );
        let other = "00000000-0000-4000-8000-000000000000".to_string();
        assert!(
            go(Some(Some(other))).of_earlier_boot(),
            "our marker: another"
        );
        std::fs::remove_file(&f).unwrap();
        assert!(!go(None).of_earlier_boot(), "no file: nothing claimed");
    }

    #[test]
    fn names_as_save_net_conf() {
        assert_eq!(
            path(Path::new("/var/lib/cni/ib-sriov"), "abc", "net1"),
            PathBuf::from("/var/lib/cni/ib-sriov/abc-net1")
        );
    }

    #[test]
    fn zero_host_guid_is_restored_as_all_ones_and_empty_means_none() {
        let a = parse(
            br#"{"deviceID":"0000:af:00.2","HostIFGUID":"00:00:00:00:00:00:00:00","VFID":0}"#,
            p(),
        )
        .unwrap();
        assert_eq!(
            a.restore_guid.unwrap().to_string(),
            "ff:ff:ff:ff:ff:ff:ff:ff"
        );
        let a = parse(br#"{"deviceID":"0000:af:00.2","HostIFGUID":""}"#, p()).unwrap();
        assert_eq!(a.restore_guid, None);
        assert_eq!(a.host_name, None);
    }

    #[test]
    fn rdma_device_only_with_rdma_isolation_and_guid_from_args() {
        let a = parse(
            br#"{"deviceID":"0000:af:00.6","rdmaIsolation":true,"RdmaNetState":{"containerRdmaDevName":"mlx5_5"},"args":{"cni":{"guid":"02:00:00:00:00:00:0a:05"}},"runtimeConfig":{"infinibandGUID":""},"ipam":{"type":"host-local"},"link_state":"enable"}"#,
            p(),
        )
        .unwrap();
        assert_eq!(a.rdma_device.as_deref(), Some("mlx5_5"));
        assert_eq!(
            a.applied_guid.unwrap().to_string(),
            "02:00:00:00:00:00:0a:05"
        );
        assert_eq!(a.ipam_type.as_deref(), Some("host-local"));
        assert_eq!(a.link_state, Some(LinkState::Enable));
        let a = parse(
            br#"{"deviceID":"0000:af:00.6","RdmaNetState":{"containerRdmaDevName":"mlx5_5"},"ipam":{}}"#,
            p(),
        )
        .unwrap();
        assert_eq!((a.rdma_device, a.ipam_type), (None, None));
    }

    #[test]
    fn unusable_content_is_an_error_naming_the_file() {
        for bad in [
            &b"[]"[..],
            b"{}",
            br#"{"deviceID":"nope"}"#,
            br#"{"deviceID":"0000:af:00.2","HostIFGUID":"zz"}"#,
            br#"{"deviceID":"0000:af:00.2","link_state":"up"}"#,
        ] {
            let e = parse(bad, p()).unwrap_err();
            assert!(e.to_string().contains("/x/cid-net1"), "{e}");
        }
    }
}
