//! The Go ib-sriov-cni's per-attachment cache, read so that pods the Go plugin attached
//! can be deleted after the binary was swapped in place (README "Upgrading from the Go
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
//! ignored. The file is never written by this plugin, only removed once the attachment
//! it describes is undone.

use crate::fsutil::open_regular;
use crate::types::{Guid, LinkState, PciAddress};
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::Value;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The Go plugin's cache directory (hard-coded there: `config.DefaultCNIDir`).
pub const GO_CACHE_DIR: &str = "/var/lib/cni/ib-sriov";

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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> PathBuf {
        PathBuf::from("/x/cid-net1")
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
