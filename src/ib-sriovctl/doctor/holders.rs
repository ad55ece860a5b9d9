//! Where the doctor looks for the holders of VFs before it advises anything that
//! touches a VF (an unbind/bind, a GUID write): every stateDir it can find, and the
//! runtimes' records of live attachments. Read-only, like the rest of the doctor.
//!
//! The stateDirs, in this order, each once (by its path on the node):
//! - the default, [`crate::config::DEFAULT_STATE_DIR`];
//! - each `--state-dir`;
//! - each `stateDir` of an ib-sriov configuration (`"type": "ib-sriov"`, at any depth: a
//!   conflist's `plugins`, Multus' `delegates`) in a file of the CNI configuration
//!   directory `/etc/cni/net.d` and of Multus' configuration directory
//!   `/etc/cni/multus/net.d` (Multus' `confDir` default, `defaultConfDir` in
//!   k8snetworkplumbingwg/multus-cni `pkg/types/conf.go`, commit 95a0932);
//! - each `stateDir` of an ib-sriov configuration recorded in a libcni result cache:
//!   `/var/lib/cni/results` (libcni's `CacheDir`, used by containerd and CRI-O) and
//!   `/var/lib/cni/multus/results` (Multus runs its delegates, the
//!   NetworkAttachmentDefinitions' configurations, through libcni with its `cniDir`
//!   `/var/lib/cni/multus` as the cache dir: `NewCNIConfigWithCacheDir(binDirs,
//!   multusNetconf.CNIDir, exec)` in `pkg/multus/multus.go`, `defaultCNIDir` in
//!   `pkg/types/conf.go`, same commit). A cache file is libcni's `cachedInfo`
//!   (containernetworking/cni `libcni/api.go`, commit 3f51e88): JSON with `kind`,
//!   `containerId`, `ifName`, `networkName` and `config`, the network configuration's
//!   bytes in base64 (Go's encoding of a `[]byte`), written at ADD and removed at DEL.
//!
//! The Go plugin's cache dir (`/var/lib/cni/ib-sriov`) is read by
//! [`super::collect`] as before. A libcni cache entry of an ib-sriov configuration with
//! a `deviceID` is a [`Claim`]: the runtime says that attachment holds that VF. A claim
//! no journal answers, and any source that could not be read, leave a VF without a
//! netdev "holder unknown" ([`super::findings`]), with read-only advice.

use super::paths::Paths;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Largest configuration or cache file read, in bytes.
const MAX_FILE: u64 = 1 << 20;

/// The CNI configuration directories read for `stateDir`s, as node paths.
pub const CONF_DIRS: [&str; 2] = ["/etc/cni/net.d", "/etc/cni/multus/net.d"];

/// The libcni result cache directories read for live attachments, as node paths.
pub const CACHE_DIRS: [&str; 2] = ["/var/lib/cni/results", "/var/lib/cni/multus/results"];

/// One place the doctor looked for holders (`holderSources` in the JSON report).
#[derive(Debug, Clone, serde::Serialize)]
pub struct HolderSource {
    /// The path as the node names it.
    pub path: String,
    /// `stateDir`, `goCache`, `cniConfigs` or `runtimeCache`.
    pub kind: String,
    /// Why it was read: `default`, `--state-dir`, or the file that named it.
    pub from: String,
    /// `read`, `absent`, or `unreadable: <why>`.
    pub state: String,
}

/// A runtime's record that an attachment holds a VF (a libcni cache entry).
#[derive(Debug, Clone)]
pub struct Claim {
    /// The VF's PCI address, as the configuration's `deviceID` gives it.
    pub vf: String,
    /// `containerID/ifname`.
    pub attachment: String,
    /// The configuration's stateDir (node path).
    pub state_dir: String,
    /// The cache file (node path).
    pub file: String,
}

/// What [`discover`] found.
#[derive(Debug, Default)]
pub struct Found {
    /// The stateDirs to read: (path under the host root, node path, why).
    pub state_dirs: Vec<(PathBuf, String, String)>,
    /// Every source looked at, with its state.
    pub sources: Vec<HolderSource>,
    /// The runtimes' claims.
    pub claims: Vec<Claim>,
    /// Why not every holder can be accounted for: sources that could not be read.
    pub unaccounted: Vec<String>,
}

impl Found {
    fn add_state_dir(&mut self, paths: &Paths, node_path: &str, from: &str) {
        let p = Path::new(node_path);
        if !p.is_absolute() || self.state_dirs.iter().any(|(_, n, _)| n == node_path) {
            return;
        }
        self.state_dirs
            .push((paths.host(p), node_path.to_string(), from.to_string()));
    }

    /// The files of directory `dir` (a node path) under the host root, recorded as a
    /// source of `kind`; none when it is absent or unreadable.
    fn listing(&mut self, paths: &Paths, dir: &str, kind: &str) -> Vec<PathBuf> {
        let (state, v) = match files(&paths.host(Path::new(dir))) {
            Ok(None) => ("absent".to_string(), Vec::new()),
            Err(e) => (format!("unreadable: {e}"), Vec::new()),
            Ok(Some(v)) => ("read".to_string(), v),
        };
        self.source(dir, kind, "", state);
        v
    }

    fn source(&mut self, path: &str, kind: &str, from: &str, state: String) {
        if state.starts_with("unreadable") {
            self.unaccounted.push(format!("{path}: {state}"));
        }
        self.sources.push(HolderSource {
            path: path.into(),
            kind: kind.into(),
            from: from.into(),
            state,
        });
    }
}

/// Every ib-sriov configuration object in `v`, at any depth.
fn ib_sriov_confs(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(o) => {
            if o.get("type").and_then(Value::as_str) == Some("ib-sriov") {
                out.push(v.clone());
            }
            o.values().for_each(|x| ib_sriov_confs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| ib_sriov_confs(x, out)),
        _ => {}
    }
}

/// The `stateDir` of an ib-sriov configuration: its own, else the default.
fn state_dir_of(c: &Value) -> String {
    c.get("stateDir")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .unwrap_or(crate::config::DEFAULT_STATE_DIR)
        .to_string()
}

/// Standard base64 (RFC 4648 section 4, with padding), as Go's `encoding/json` writes a
/// `[]byte`; `None` when malformed.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

/// The regular files of `dir` (under the host root), sorted; `Err` when the directory
/// exists but cannot be read, `Ok(None)` when it is absent.
fn files(dir: &Path) -> Result<Option<Vec<PathBuf>>, String> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .map(|e| e.path())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    v.sort();
    Ok(Some(v))
}

/// Finds the stateDirs and the runtimes' claims under `paths.root`; `extra` are the
/// `--state-dir` values (node paths).
pub fn discover(paths: &Paths, extra: &[PathBuf]) -> Found {
    let mut f = Found::default();
    f.add_state_dir(paths, crate::config::DEFAULT_STATE_DIR, "default");
    for d in extra {
        f.add_state_dir(paths, &d.display().to_string(), "--state-dir");
    }
    let node = |p: &Path| {
        Path::new("/")
            .join(p.strip_prefix(&paths.root).unwrap_or(p))
            .display()
            .to_string()
    };
    for dir in CONF_DIRS {
        let files = f.listing(paths, dir, "cniConfigs");
        for file in files {
            let name = node(&file);
            let bytes = match crate::fsutil::read_regular_bounded(&file, MAX_FILE) {
                Ok(b) => b,
                // Any file there could name a stateDir (a file that is JSON but names
                // no ib-sriov configuration, a kubeconfig say, is not judged).
                Err(e) => {
                    f.unaccounted.push(format!("{name}: unreadable ({e})"));
                    continue;
                }
            };
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => {
                    let mut confs = Vec::new();
                    ib_sriov_confs(&v, &mut confs);
                    for c in confs {
                        f.add_state_dir(paths, &state_dir_of(&c), &name);
                    }
                }
                Err(e) if String::from_utf8_lossy(&bytes).contains("ib-sriov") => f
                    .unaccounted
                    .push(format!("{name}: names ib-sriov but is not JSON ({e})")),
                Err(_) => {}
            }
        }
    }
    for dir in CACHE_DIRS {
        let files = f.listing(paths, dir, "runtimeCache");
        for file in files {
            let name = node(&file);
            let entry = crate::fsutil::read_regular_bounded(&file, MAX_FILE)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|e| e.to_string()));
            let entry = match entry {
                Ok(v) => v,
                Err(e) => {
                    f.unaccounted.push(format!("{name}: unreadable ({e})"));
                    continue;
                }
            };
            let conf = entry
                .get("config")
                .and_then(Value::as_str)
                .and_then(base64_decode)
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let Some(conf) = conf else {
                f.unaccounted
                    .push(format!("{name}: no readable network configuration in it"));
                continue;
            };
            let mut confs = Vec::new();
            ib_sriov_confs(&conf, &mut confs);
            let s = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("?");
            for c in confs {
                let state_dir = state_dir_of(&c);
                f.add_state_dir(paths, &state_dir, &name);
                if let Some(vf) = c.get("deviceID").and_then(Value::as_str) {
                    f.claims.push(Claim {
                        vf: vf.to_string(),
                        attachment: format!("{}/{}", s("containerId"), s("ifName")),
                        state_dir,
                        file: name.clone(),
                    });
                }
            }
        }
    }
    // The stateDirs and the Go cache dir first, then the directories searched.
    let mut searched = std::mem::take(&mut f.sources);
    for (at, n, from) in f.state_dirs.clone() {
        f.source(&n, "stateDir", &from, dir_state(&at));
    }
    let legacy = dir_state(&paths.legacy);
    f.source(
        crate::config::LEGACY_STATE_DIR,
        "goCache",
        "default",
        legacy,
    );
    f.sources.append(&mut searched);
    f
}

/// `read`, `absent`, or `unreadable: <why>` for a directory.
fn dir_state(p: &Path) -> String {
    match std::fs::read_dir(p) {
        Ok(_) => "read".to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "absent".to_string(),
        Err(e) => format!("unreadable: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_what_go_encodes() {
        // Go: base64.StdEncoding.EncodeToString([]byte(...)).
        assert_eq!(base64_decode("eyJhIjoxfQ==").unwrap(), br#"{"a":1}"#);
        assert_eq!(base64_decode("YWJj").unwrap(), b"abc");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("a").is_none() && base64_decode("a*bc").is_none());
    }

    #[test]
    fn ib_sriov_configurations_are_found_at_any_depth() {
        let v: Value = serde_json::from_str(
            r#"{"type":"multus","delegates":[{"plugins":[{"type":"ib-sriov","stateDir":"/run/x"},{"type":"tuning"}]}]}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        ib_sriov_confs(&v, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(state_dir_of(&out[0]), "/run/x");
        assert_eq!(
            state_dir_of(&serde_json::json!({"type": "ib-sriov"})),
            crate::config::DEFAULT_STATE_DIR
        );
    }
}
