//! Where the node's runtime looks for CNI plugins, so that `doctor --conf` looks a
//! delegated IPAM plugin up where ADD would (ADD looks in the `CNI_PATH` it is given).
//!
//! Read under the host root, each directory with where it was read:
//! - containerd, `/etc/containerd/config.toml`: the CRI plugin's `cni` table,
//!   `bin_dirs` (a list, containerd >= 2.1) or `bin_dir` (deprecated since 2.1), under
//!   `plugins."io.containerd.cri.v1.runtime"` (config version 3),
//!   `plugins."io.containerd.grpc.v1.cri"` (version 2) or `plugins.cri` (version 1);
//!   default `/opt/cni/bin` (containerd/containerd f7e5f7e `docs/cri/config.md`);
//! - CRI-O, `/etc/crio/crio.conf` then `/etc/crio/crio.conf.d/*` in name order, the
//!   last that sets it winning: `[crio.network] plugin_dirs` (a list; older releases'
//!   `plugin_dir`, a string); default `/opt/cni/bin/` (cri-o/cri-o f40da54
//!   `docs/crio.conf.5.md`, "CRIO.NETWORK TABLE");
//! - Multus (thin plugin), which runs the delegates with its `binDir` before the
//!   runtime's `CNI_PATH` (k8snetworkplumbingwg/multus-cni 95a0932
//!   `pkg/multus/multus.go`, `docs/configuration.md`): the `binDir` of a `multus`
//!   configuration in `/etc/cni/net.d` or `/etc/kubernetes/cni/net.d` (OpenShift's).
//!
//! With no runtime configuration under the host root: `/opt/cni/bin` (the CNI
//! convention, containerd's and CRI-O's default) and `/var/lib/cni/bin` (OpenShift's,
//! where its SR-IOV network operator installs: k8snetworkplumbingwg/sriov-network-operator
//! 249e2001 `controllers/sriovoperatorconfig_controller.go`, `SRIOV_CNI_BIN_PATH`
//! unset).

use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

/// Largest runtime configuration file read, in bytes.
const MAX_CONFIG: u64 = 1 << 20;

/// The directories searched for CNI plugins, as the node names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniPath {
    /// Each directory (absolute, as on the node) and where it was read (`--cni-path`,
    /// a runtime's configuration file and key, or the default).
    pub dirs: Vec<(PathBuf, String)>,
}

impl CniPath {
    /// `--cni-path DIRS` (colon-separated, as `CNI_PATH`).
    pub fn given(dirs: &str) -> CniPath {
        CniPath {
            dirs: dirs
                .split(':')
                .filter(|d| !d.is_empty())
                .map(|d| (PathBuf::from(d), "--cni-path".to_string()))
                .collect(),
        }
    }

    /// The directories in `CNI_PATH`'s form (`a:b`).
    pub fn joined(&self) -> String {
        self.dirs
            .iter()
            .map(|(d, _)| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }

    /// Each directory with its source: `a (from X), b (from Y)`.
    pub fn described(&self) -> String {
        self.dirs
            .iter()
            .map(|(d, s)| format!("{} ({s})", d.display()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The directories the node under `root` searches for CNI plugins (see the module).
pub fn of_node(root: &Path) -> CniPath {
    let mut dirs: Vec<(PathBuf, String)> = Vec::new();
    let mut add = |d: &str, src: String| {
        let p = PathBuf::from(d.trim_end_matches('/'));
        let p = if p.as_os_str().is_empty() {
            PathBuf::from("/")
        } else {
            p
        };
        if p.is_absolute() && !dirs.iter().any(|(x, _)| *x == p) {
            dirs.push((p, src));
        }
    };
    for (d, src) in multus(root) {
        add(&d, src);
    }
    let mut runtime = false;
    if let Some(found) = containerd(root) {
        runtime = true;
        for (d, src) in found {
            add(&d, src);
        }
    }
    if let Some(found) = crio(root) {
        runtime = true;
        for (d, src) in found {
            add(&d, src);
        }
    }
    if !runtime {
        add(
            "/opt/cni/bin",
            "no containerd or CRI-O configuration found: the CNI default".into(),
        );
        add(
            "/var/lib/cni/bin",
            "no containerd or CRI-O configuration found: OpenShift's".into(),
        );
    }
    CniPath { dirs }
}

/// `root`'s file at node path `abs`, as text; `None` when absent. A file that cannot be
/// read reads as empty (the runtime's defaults).
fn text_at(root: &Path, abs: &str) -> Option<String> {
    let p = root.join(abs.trim_start_matches('/'));
    if !p.exists() {
        return None;
    }
    let text = crate::fsutil::read_regular_bounded(&p, MAX_CONFIG).unwrap_or_default();
    Some(String::from_utf8_lossy(&text).into_owned())
}

/// `text` parsed as TOML (toml's parser, without serde); empty when it does not parse
/// (the runtime's defaults).
fn parse_toml(text: &str) -> DeTable<'_> {
    DeTable::parse(text)
        .map(|t| t.into_inner())
        .unwrap_or_default()
}

/// The value of `key` in table `t`.
fn get<'a, 'i>(t: &'a DeTable<'i>, key: &str) -> Option<&'a DeValue<'i>> {
    t.iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)
        .map(|(_, v)| v.get_ref())
}

/// The table at the path `keys` below `t`.
fn table<'a, 'i>(t: &'a DeTable<'i>, keys: &[&str]) -> Option<&'a DeTable<'i>> {
    keys.iter()
        .try_fold(t, |t, k| get(t, k).and_then(DeValue::as_table))
}

/// The non-empty strings of a TOML string or list of strings.
fn strings(v: &DeValue) -> Vec<String> {
    match v {
        DeValue::String(s) if !s.is_empty() => vec![s.to_string()],
        DeValue::Array(a) => a
            .iter()
            .filter_map(|x| {
                x.get_ref()
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(String::from)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// containerd's CNI plugin directories, `None` without its configuration file.
fn containerd(root: &Path) -> Option<Vec<(String, String)>> {
    const FILE: &str = "/etc/containerd/config.toml";
    let text = text_at(root, FILE)?;
    let t = parse_toml(&text);
    for id in [
        "io.containerd.cri.v1.runtime",
        "io.containerd.grpc.v1.cri",
        "cri",
    ] {
        let Some(cni) = table(&t, &["plugins", id, "cni"]) else {
            continue;
        };
        for key in ["bin_dirs", "bin_dir"] {
            let found = get(cni, key).map(strings).unwrap_or_default();
            if !found.is_empty() {
                let src = format!("containerd {FILE} plugins.\"{id}\".cni.{key}");
                return Some(found.into_iter().map(|d| (d, src.clone())).collect());
            }
        }
    }
    Some(vec![(
        "/opt/cni/bin".into(),
        format!("containerd's default: {FILE} sets no cni bin_dirs"),
    )])
}

/// CRI-O's CNI plugin directories, `None` without any of its configuration files.
fn crio(root: &Path) -> Option<Vec<(String, String)>> {
    let mut files = vec!["/etc/crio/crio.conf".to_string()];
    if let Ok(rd) = std::fs::read_dir(root.join("etc/crio/crio.conf.d")) {
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        files.extend(
            names
                .into_iter()
                .map(|n| format!("/etc/crio/crio.conf.d/{n}")),
        );
    }
    let mut seen = false;
    let mut last = None;
    for f in &files {
        let Some(text) = text_at(root, f) else {
            continue;
        };
        seen = true;
        let t = parse_toml(&text);
        let net = table(&t, &["crio", "network"]);
        for key in ["plugin_dirs", "plugin_dir"] {
            let found = net
                .and_then(|n| get(n, key))
                .map(strings)
                .unwrap_or_default();
            if !found.is_empty() {
                let src = format!("CRI-O {f} crio.network.{key}");
                last = Some(found.into_iter().map(|d| (d, src.clone())).collect());
                break;
            }
        }
    }
    if !seen {
        return None;
    }
    Some(last.unwrap_or_else(|| {
        vec![(
            "/opt/cni/bin".into(),
            "CRI-O's default: no crio.network.plugin_dirs set".into(),
        )]
    }))
}

/// The `binDir` of each Multus configuration (`type` `multus` or `multus-shim`, alone
/// or in a conflist) in the node's CNI configuration directories.
fn multus(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in ["/etc/cni/net.d", "/etc/kubernetes/cni/net.d"] {
        let Ok(rd) = std::fs::read_dir(root.join(dir.trim_start_matches('/'))) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".conf") || n.ends_with(".conflist") || n.ends_with(".json"))
            .collect();
        names.sort();
        for n in names {
            let p = root.join(dir.trim_start_matches('/')).join(&n);
            let Ok(bytes) = crate::fsutil::read_regular_bounded(&p, MAX_CONFIG) else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
                continue;
            };
            let mut entries = vec![&v];
            if let Some(list) = v.get("plugins").and_then(|p| p.as_array()) {
                entries.extend(list.iter());
            }
            for e in entries {
                let t = e.get("type").and_then(|t| t.as_str());
                if matches!(t, Some("multus" | "multus-shim")) {
                    if let Some(b) = e.get("binDir").and_then(|b| b.as_str()) {
                        out.push((b.to_string(), format!("Multus {dir}/{n} binDir")));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, abs: &str, text: &str) {
        let p = root.join(abs.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn runtime_configurations_name_the_directories() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let dirs = |r: &Path| -> Vec<String> {
            of_node(r)
                .dirs
                .iter()
                .map(|(d, _)| d.display().to_string())
                .collect()
        };
        assert_eq!(dirs(r), ["/opt/cni/bin", "/var/lib/cni/bin"]);
        // containerd 1.x (version 2), then 2.x (version 3) which wins.
        write(
            r,
            "/etc/containerd/config.toml",
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/usr/libexec/cni\"\n",
        );
        assert_eq!(dirs(r), ["/usr/libexec/cni"]);
        write(
            r,
            "/etc/containerd/config.toml",
            "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = ['/a/bin', '/b/bin/']\n",
        );
        let p = of_node(r);
        assert_eq!(p.joined(), "/a/bin:/b/bin");
        assert!(p.dirs[0].1.contains("bin_dirs"), "{p:?}");
        write(r, "/etc/containerd/config.toml", "version = 2\n");
        assert_eq!(dirs(r), ["/opt/cni/bin"]);
        std::fs::remove_file(r.join("etc/containerd/config.toml")).unwrap();
        // CRI-O: the last drop-in that sets plugin_dirs wins.
        write(
            r,
            "/etc/crio/crio.conf",
            "[crio.network]\nplugin_dirs = [\"/opt/cni/bin/\"]\n",
        );
        write(
            r,
            "/etc/crio/crio.conf.d/00-default",
            "[crio.network]\nplugin_dirs = [\"/var/lib/cni/bin\", \"/usr/libexec/cni\"]\n",
        );
        write(
            r,
            "/etc/crio/crio.conf.d/10-other",
            "[crio.runtime]\nx = 1\n",
        );
        let p = of_node(r);
        assert_eq!(p.joined(), "/var/lib/cni/bin:/usr/libexec/cni");
        assert!(
            p.described().contains("/etc/crio/crio.conf.d/00-default"),
            "{p:?}"
        );
        // Multus' binDir goes first.
        write(
            r,
            "/etc/kubernetes/cni/net.d/00-multus.conf",
            r#"{"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim", "binDir": "/var/lib/cni/bin"}"#,
        );
        write(
            r,
            "/etc/cni/net.d/00-multus.conflist",
            r#"{"name": "m", "plugins": [{"type": "multus", "binDir": "/opt/multus/bin"}]}"#,
        );
        assert_eq!(
            dirs(r),
            ["/opt/multus/bin", "/var/lib/cni/bin", "/usr/libexec/cni"]
        );
        assert_eq!(CniPath::given("/x::/y").joined(), "/x:/y");
    }
}
