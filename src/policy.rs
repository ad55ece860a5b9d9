//! The node policy of where a network configuration's paths may point.
//!
//! A network configuration comes from a NetworkAttachmentDefinition, which namespace
//! admins may write, and the plugin runs as root: every path in it is confined to a set
//! of directories (the *roots*) that the node's admin chooses. The keys ([`PathKey`]):
//! `logFile`, `stateDir`, the built-in IPAM's `ipam.dataDir`, `goCacheDir`, `guidFile`
//! and `runtimeConfig.CNIDeviceInfoFile`. A delegated IPAM plugin's own paths
//! (host-local's `dataDir`, whereabouts' kubeconfig) are never opened by this plugin:
//! that plugin reads its `ipam` object itself, so they are not policed here.
//!
//! Defaults ([`DEFAULT_ROOTS`]): `/run`, `/var/run`, `/var/lib/cni`, `/var/log`, and for
//! `guidFile` also [`GUID_FILE_ROOT`] (`/etc/sriov-operator`, the SR-IOV network
//! operator's static GUID file, read only). The node file [`NODE_FILE`]
//! (`/etc/ib-sriov/node.json`, read under the host root) changes them:
//!
//! ```json
//! { "extraPathRoots": ["/data/cni"], "pathRoots": { "logFile": ["/var/log/ib-sriov"] } }
//! ```
//!
//! - `pathRoots.<key>` replaces the roots of that key (an empty list allows none);
//! - `extraPathRoots` is added to the roots of every key, replaced or not;
//! - `defaults` ([`NodeDefaults`]) gives the node's value of a network key that a
//!   network configuration leaves out (today `rdmaIsolation` only, which the SR-IOV
//!   network operator cannot render); a key the configuration gives always wins.
//!
//! Unknown keys, at the top level and in `defaults`, make the file invalid.
//!
//! A path is allowed when it is absolute, has no `..` component and no NUL, starts
//! (component by component) with one of its key's roots, and still lies beneath that root
//! once every symbolic link of its existing part is resolved, as the kernel would
//! resolve it ([`resolve`]; the root itself may be a link, e.g. `/var/run` -> `/run`).
//! A dangling link in the path is refused (where it leads cannot be proved). The check
//! is made before the first change to the host; a root-owned directory that someone
//! swaps for a link between the check and the use is outside what this guards (the
//! roots are directories only root writes to).
//!
//! Only values the configuration gives are checked: the built-in defaults of the keys
//! (`/run/ib-sriov`, `/var/lib/cni/networks`, ...) are the plugin's own choice.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

/// The node file, under the host root: `/etc/ib-sriov/node.json`.
pub const NODE_FILE: &str = "/etc/ib-sriov/node.json";

/// The host root the plugin reads the node file and resolves paths under: `/` (the
/// plugin runs in the host's mount namespace, a child of containerd or CRI-O); doctor
/// takes `--host-root` instead.
pub const HOST_ROOT: &str = "/";

/// Largest node file read, in bytes.
pub const MAX_NODE_FILE: u64 = 1 << 20;

/// The roots of every path key when the node file does not replace them: the places
/// the docs and the SR-IOV network operator use (`/run/ib-sriov`, `/var/lib/cni/...`,
/// `/var/log/...`; `/var/run` is `/run` on systemd nodes, file-hierarchy(7)).
pub const DEFAULT_ROOTS: &[&str] = &["/run", "/var/run", "/var/lib/cni", "/var/log"];

/// The extra default root of `guidFile`: the SR-IOV network operator's static VF GUID
/// file lives at `/etc/sriov-operator/infiniband/guids` ([`crate::vfguid::DEFAULT_GUID_FILE`]).
pub const GUID_FILE_ROOT: &str = "/etc/sriov-operator";

/// Symbolic links followed in one path before giving up (the kernel's `MAXSYMLINKS`,
/// include/linux/namei.h).
const MAX_LINKS: usize = 40;

/// A configuration key that names a path on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathKey {
    /// `logFile` (appended to).
    LogFile,
    /// `stateDir` (journals, locks, holder links).
    StateDir,
    /// The built-in IPAM's `ipam.dataDir` (address records, locks).
    IpamDataDir,
    /// `goCacheDir` (the Go plugin's cache files, written and read).
    GoCacheDir,
    /// `guidFile` (read; its errors are echoed).
    GuidFile,
    /// `runtimeConfig.CNIDeviceInfoFile` (the device-info file written at ADD).
    DeviceInfoFile,
}

impl PathKey {
    /// Every key, in the order of the docs.
    pub const ALL: [PathKey; 6] = [
        PathKey::LogFile,
        PathKey::StateDir,
        PathKey::IpamDataDir,
        PathKey::GoCacheDir,
        PathKey::GuidFile,
        PathKey::DeviceInfoFile,
    ];

    /// The key as the configuration and the node file's `pathRoots` spell it.
    pub fn name(self) -> &'static str {
        match self {
            PathKey::LogFile => "logFile",
            PathKey::StateDir => "stateDir",
            PathKey::IpamDataDir => "ipam.dataDir",
            PathKey::GoCacheDir => "goCacheDir",
            PathKey::GuidFile => "guidFile",
            PathKey::DeviceInfoFile => "runtimeConfig.CNIDeviceInfoFile",
        }
    }

    fn from_name(s: &str) -> Option<PathKey> {
        PathKey::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The built-in roots of the key ([`DEFAULT_ROOTS`], plus [`GUID_FILE_ROOT`] for
    /// `guidFile`).
    pub fn default_roots(self) -> Vec<PathBuf> {
        let mut r: Vec<PathBuf> = DEFAULT_ROOTS.iter().map(PathBuf::from).collect();
        if self == PathKey::GuidFile {
            r.push(PathBuf::from(GUID_FILE_ROOT));
        }
        r
    }
}

impl fmt::Display for PathKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The node file ([`NODE_FILE`]) could not be used: unreadable, not JSON, or a value of
/// the wrong form.
#[derive(Debug)]
pub struct NodeFileError {
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for NodeFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node file {NODE_FILE}: {}", self.msg)
    }
}

impl std::error::Error for NodeFileError {}

/// Why a configured path is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not an absolute path.
    NotAbsolute,
    /// A `..` component (never accepted).
    DotDot,
    /// A NUL byte.
    Nul,
    /// It does not start with any of the key's roots.
    OutsideRoots,
    /// It starts with a root, but a symbolic link in it leads out of that root: the
    /// path it resolves to.
    LinkOut(PathBuf),
    /// A symbolic link in it that cannot be resolved (dangling, a loop, unreadable).
    Unresolvable(String),
}

/// A configured path outside the node policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathViolation {
    /// The key.
    pub key: PathKey,
    /// The path as configured.
    pub path: String,
    /// Why.
    pub refusal: Refusal,
    /// The key's roots.
    pub roots: Vec<PathBuf>,
}

impl fmt::Display for PathViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match &self.refusal {
            Refusal::NotAbsolute => "is not an absolute path".to_string(),
            Refusal::DotDot => "has a \"..\" component".to_string(),
            Refusal::Nul => "contains NUL".to_string(),
            Refusal::OutsideRoots => "is outside the node's allowed roots".to_string(),
            Refusal::LinkOut(to) => format!(
                "leads out of the node's allowed roots through a symbolic link (to {})",
                to.display()
            ),
            Refusal::Unresolvable(e) => format!("cannot be resolved ({e})"),
        };
        let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
        write!(
            f,
            "{} {:?} {why}: the node policy allows {} (set in {NODE_FILE}: \"pathRoots\", \"extraPathRoots\")",
            self.key,
            self.path,
            if roots.is_empty() {
                "no path for this key".to_string()
            } else {
                format!("only paths beneath {}", roots.join(", "))
            },
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodeFile {
    #[serde(rename = "extraPathRoots", default)]
    extra_path_roots: Vec<String>,
    #[serde(rename = "pathRoots", default)]
    path_roots: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    defaults: NodeDefaults,
}

/// The node file's `defaults`: network keys the node supplies when a network
/// configuration leaves them out (docs/configuration.md "Node defaults"). A key the
/// configuration gives always wins. Only keys that describe the node rather than the
/// network are allowed, and only those an operator-rendered configuration cannot carry:
/// today `rdmaIsolation` (the SR-IOV network operator's SriovIBNetwork has no field for
/// it). Path keys are not defaults (the node confines them with `pathRoots`), nor are
/// keys that name a VF, a GUID, a pkey or addresses (they belong to one network).
///
/// Errors (through [`NodePolicy::load`]): an unknown key, or a value of the wrong type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeDefaults {
    /// `rdmaIsolation` for configurations without the key: `true` moves each VF's RDMA
    /// device into its pod (exclusive RDMA netns mode required, else ADD answers code 7).
    #[serde(
        rename = "rdmaIsolation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub rdma_isolation: Option<bool>,
}

impl NodeDefaults {
    /// The keys this node file may set in `defaults`, as configurations spell them.
    pub const KEYS: &'static [&'static str] = &["rdmaIsolation"];

    /// True when no default is set.
    pub fn is_empty(&self) -> bool {
        self == &NodeDefaults::default()
    }

    /// Fills the keys `conf` lacks from these defaults and returns one log line per key
    /// filled (`"rdmaIsolation: true (from the node file's defaults)"`); a key `conf`
    /// gives is kept.
    pub fn apply(&self, conf: &mut crate::config::NetConf) -> Vec<String> {
        let mut filled = Vec::new();
        if let (None, Some(v)) = (conf.rdma_isolation, self.rdma_isolation) {
            conf.rdma_isolation = Some(v);
            filled.push(format!(
                "rdmaIsolation: {v} (from the defaults of {NODE_FILE}; the network does not set it)"
            ));
        }
        filled
    }
}

/// The node policy: the roots of each [`PathKey`], and the host root its paths are
/// resolved under (`/` for the plugin, `--host-root` for doctor).
#[derive(Debug, Clone)]
pub struct NodePolicy {
    /// `pathRoots`: the roots of these keys instead of their defaults.
    overrides: BTreeMap<PathKey, Vec<PathBuf>>,
    /// `extraPathRoots`: roots added to every key's.
    extra: Vec<PathBuf>,
    host_root: PathBuf,
    /// Whether a node file was read (else the built-in defaults).
    pub from_file: bool,
    /// The node file's `defaults` (empty without a file).
    pub defaults: NodeDefaults,
}

/// A root from the node file: absolute, no `..`, no NUL.
fn root_path(s: &str) -> Result<PathBuf, String> {
    let p = Path::new(s);
    if s.contains('\0') || !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(format!(
            "root {s:?} must be an absolute path without \"..\""
        ));
    }
    Ok(p.components().collect())
}

impl NodePolicy {
    /// The built-in defaults ([`PathKey::default_roots`]), resolved under `host_root`.
    pub fn defaults(host_root: &Path) -> NodePolicy {
        NodePolicy {
            overrides: BTreeMap::new(),
            extra: Vec::new(),
            host_root: host_root.to_path_buf(),
            from_file: false,
            defaults: NodeDefaults::default(),
        }
    }

    /// The policy of the node whose root is `host_root` (`/` for the plugin): the
    /// defaults changed by `<host_root>/etc/ib-sriov/node.json` when it exists.
    ///
    /// Errors: the file exists but cannot be read, is larger than [`MAX_NODE_FILE`], is
    /// not a JSON object of the documented keys (`extraPathRoots`: array of absolute
    /// paths; `pathRoots`: object from a [`PathKey`] name to such an array; `defaults`:
    /// object of [`NodeDefaults::KEYS`]), or names a root with `..`.
    pub fn load(host_root: &Path) -> Result<NodePolicy, NodeFileError> {
        let file = under(host_root, Path::new(NODE_FILE));
        let err = |msg: String| NodeFileError { msg };
        let bytes = match read_node_file(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(NodePolicy::defaults(host_root))
            }
            Err(e) => return Err(err(e.to_string())),
        };
        NodePolicy::from_json(host_root, &bytes).map_err(err)
    }

    /// The policy given by a node file's contents (see [`NodePolicy::load`]).
    pub fn from_json(host_root: &Path, bytes: &[u8]) -> Result<NodePolicy, String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if !v.is_object() {
            return Err("not a JSON object".into());
        }
        // serde would take an array for the struct `defaults` too.
        if v.get("defaults").is_some_and(|d| !d.is_object()) {
            return Err("defaults: not a JSON object".into());
        }
        let raw = RawNodeFile::deserialize(&v).map_err(|e| e.to_string())?;
        let mut p = NodePolicy::defaults(host_root);
        p.from_file = true;
        p.defaults = raw.defaults.clone();
        for (k, list) in &raw.path_roots {
            let key = PathKey::from_name(k).ok_or_else(|| {
                let names: Vec<&str> = PathKey::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "pathRoots: unknown key {k:?} (the keys are {})",
                    names.join(", ")
                )
            })?;
            let roots = list
                .iter()
                .map(|s| root_path(s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("pathRoots.{k}: {e}"))?;
            p.overrides.insert(key, roots);
        }
        p.extra = raw
            .extra_path_roots
            .iter()
            .map(|s| root_path(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("extraPathRoots: {e}"))?;
        Ok(p)
    }

    /// The roots of `key`: its `pathRoots` when the node file gives them, else its
    /// defaults ([`PathKey::default_roots`]), then the `extraPathRoots` it lacks. Built
    /// for the key asked (a call checks two or three keys of six).
    pub fn roots(&self, key: PathKey) -> Vec<PathBuf> {
        let mut roots = match self.overrides.get(&key) {
            Some(r) => r.clone(),
            None => key.default_roots(),
        };
        for r in &self.extra {
            // Both normalized (built from components): the bytes compare as the
            // components would, without parsing them again.
            if !roots.iter().any(|x| x.as_os_str() == r.as_os_str()) {
                roots.push(r.clone());
            }
        }
        roots
    }

    /// Checks one configured path of `key` (see the module docs).
    ///
    /// Errors: a [`PathViolation`] naming the key, the path, why, the key's roots and
    /// [`NODE_FILE`].
    pub fn check(&self, key: PathKey, path: &str) -> Result<(), PathViolation> {
        self.check_with(key, path, &mut Lstats::default())
    }

    /// [`NodePolicy::check`] with the `lstat` results of earlier checks of one call
    /// (the roots and the prefixes its paths share are looked up once).
    fn check_with(&self, key: PathKey, path: &str, memo: &mut Lstats) -> Result<(), PathViolation> {
        let roots = self.roots(key);
        let refuse = |refusal| PathViolation {
            key,
            path: path.to_string(),
            refusal,
            roots: roots.clone(),
        };
        if path.contains('\0') {
            return Err(refuse(Refusal::Nul));
        }
        let p = Path::new(path);
        if !p.is_absolute() {
            return Err(refuse(Refusal::NotAbsolute));
        }
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(refuse(Refusal::DotDot));
        }
        let mut matching = roots.iter().filter(|r| p.starts_with(r)).peekable();
        if matching.peek().is_none() {
            return Err(refuse(Refusal::OutsideRoots));
        }
        // The path as the host resolves it, once for every root it starts with.
        let real = resolve_with(&self.host_root, p, memo)
            .map_err(|e| refuse(Refusal::Unresolvable(e.to_string())))?;
        // The root as the host resolves it too (an admin's root may itself be a link).
        if matching.any(|root| {
            resolve_with(&self.host_root, root, memo)
                .is_ok_and(|real_root| real.starts_with(real_root))
        }) {
            return Ok(());
        }
        Err(refuse(Refusal::LinkOut(real)))
    }
}

/// The node policy applied to one call's configuration ([`screen`]).
#[derive(Debug, Default)]
pub struct Screened {
    /// The `logFile` to open: the configured one when the policy allows it, else `None`
    /// (the log goes to the journal or stderr).
    pub log_file: Option<PathBuf>,
    /// What to log as warnings once the log is open: a refused `logFile`, a node file
    /// that could not be used (the defaults were applied).
    pub warnings: Vec<String>,
    /// The refused paths of the other keys: ADD, CHECK and STATUS answer code 7 with
    /// them; DEL and GC touch nothing.
    pub refused: Vec<PathViolation>,
    /// The node file could not be used ([`NodePolicy::load`]); the checks above used
    /// the defaults. ADD, CHECK and STATUS answer code 7 with it.
    pub node_error: Option<NodeFileError>,
    /// The node file's `defaults` (empty when it has none or could not be used).
    pub defaults: NodeDefaults,
}

impl Screened {
    /// The code-7 refusal of ADD, CHECK and STATUS: the node file's error, else every
    /// refused path; `None` when nothing was refused.
    pub fn refusal(&self) -> Option<crate::cni::CniError> {
        if let Some(e) = &self.node_error {
            return Some(crate::cni::CniError::config(e.to_string()));
        }
        if self.refused.is_empty() {
            return None;
        }
        let msgs: Vec<String> = self.refused.iter().map(|v| v.to_string()).collect();
        Some(crate::cni::CniError::config(msgs.join("; ")))
    }
}

/// What a verb does after [`screen`], once its log is open and the warnings logged.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing refused (or only the node file, on DEL or GC: the defaults passed): go on.
    Proceed,
    /// DEL or GC of a configuration with a refused path: succeed touching nothing (ADD
    /// refused it, so nothing was made through that path). Logged.
    NothingTouched,
}

impl Screened {
    /// The verdict for `command`: ADD, CHECK and STATUS (and VERSION, which never gets
    /// here) answer [`Screened::refusal`], logged as an error; DEL and GC go on when only
    /// the node file was unusable, else touch nothing (logged as a warning naming
    /// `what`, e.g. "the paths", "ipam.dataDir").
    ///
    /// Errors: the code-7 refusal of ADD, CHECK and STATUS.
    pub fn verdict(
        &self,
        command: crate::cni::Command,
        what: &str,
    ) -> Result<Verdict, crate::cni::CniError> {
        use crate::cni::Command;
        let Some(e) = self.refusal() else {
            return Ok(Verdict::Proceed);
        };
        match command {
            Command::Del | Command::Gc if self.refused.is_empty() => Ok(Verdict::Proceed),
            Command::Del | Command::Gc => {
                log::warn!(
                    "{} of a configuration with {what} outside the node policy ({}): ADD refuses it, so nothing was made through {what}; nothing touched",
                    command.as_str(),
                    e.msg
                );
                Ok(Verdict::NothingTouched)
            }
            _ => {
                log::error!("{} refused: {}", command.as_str(), e.msg);
                Err(e)
            }
        }
    }
}

/// Applies the node policy of the node at `host_root` (`/` for the plugin) to the paths
/// of `keys` that `conf` (a network configuration as received) gives. A `logFile`
/// outside the policy is dropped with a warning, never refused (logging must not fail a
/// verb); the other keys' violations are collected for the verb to act on.
pub fn screen(conf: &Value, host_root: &Path, keys: &[PathKey]) -> Screened {
    let mut out = Screened::default();
    let policy = NodePolicy::load(host_root).unwrap_or_else(|e| {
        out.warnings.push(format!(
            "{e}; the default path roots apply ({})",
            DEFAULT_ROOTS.join(", ")
        ));
        out.node_error = Some(e);
        NodePolicy::defaults(host_root)
    });
    out.defaults = policy.defaults.clone();
    let mut memo = Lstats::default();
    for (key, path) in configured_paths(conf) {
        if !keys.contains(&key) {
            continue;
        }
        match (key, policy.check_with(key, &path, &mut memo)) {
            (PathKey::LogFile, Ok(())) => out.log_file = Some(PathBuf::from(path)),
            (PathKey::LogFile, Err(v)) => out
                .warnings
                .push(format!("{v}; logging to the journal or stderr instead")),
            (_, Ok(())) => {}
            (_, Err(v)) => out.refused.push(v),
        }
    }
    out
}

/// The paths a network configuration gives (as received, before defaults), by key: the
/// non-empty string values of `logFile`, `stateDir`, `goCacheDir`, `guidFile`,
/// `runtimeConfig.CNIDeviceInfoFile`, and `ipam.dataDir` when `ipam.type` is the built-in
/// `ib-sriov-ipam` (a delegated IPAM plugin's paths are its own). Values of another
/// JSON type are left to the configuration parser, which refuses them.
pub fn configured_paths(conf: &Value) -> Vec<(PathKey, String)> {
    let s = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let ipam = conf.get("ipam").filter(|i| crate::ipam::is_builtin(i));
    let mut out = Vec::new();
    for key in PathKey::ALL {
        let v = match key {
            PathKey::LogFile => s(conf.get("logFile")),
            PathKey::StateDir => s(conf.get("stateDir")),
            PathKey::IpamDataDir => s(ipam.and_then(|i| i.get("dataDir"))),
            PathKey::GoCacheDir => s(conf.get("goCacheDir")),
            PathKey::GuidFile => s(conf.get("guidFile")),
            PathKey::DeviceInfoFile => s(conf
                .get("runtimeConfig")
                .and_then(|r| r.get("CNIDeviceInfoFile"))),
        };
        if let Some(v) = v {
            out.push((key, v));
        }
    }
    out
}

/// `p` (absolute) as a path of the filesystem that sees `host_root` as `/`.
fn under(host_root: &Path, p: &Path) -> PathBuf {
    let rel: PathBuf = p
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    host_root.join(rel)
}

/// The node file (following links: an admin may project it from a ConfigMap), at most
/// [`MAX_NODE_FILE`] bytes, read only when it is a regular file: opened `O_NONBLOCK`, so
/// a FIFO in its place is refused at once instead of blocking every call until a writer
/// comes ([`crate::fsutil::read_regular_following`]).
fn read_node_file(p: &Path) -> io::Result<Vec<u8>> {
    crate::fsutil::read_regular_following(p, MAX_NODE_FILE)
}

/// Resolves the absolute path `p` as the kernel's path walk would on the node whose root
/// is `host_root` (a link's absolute target starts again at that root): every existing
/// component's symbolic links are followed, `..` from a link's target goes up, and the
/// part that does not exist yet is appended as it is (the plugin creates it). Returns the
/// path as the node names it.
///
/// Errors: a link that cannot be read, a dangling link (`NotFound`: where a created
/// path would land cannot be proved), more than 40 links (`ELOOP`), or another error of
/// `lstat(2)` but `ENOENT` and `ENOTDIR`.
pub fn resolve(host_root: &Path, p: &Path) -> io::Result<PathBuf> {
    resolve_with(host_root, p, &mut Lstats::default())
}

/// What `lstat(2)` said of a node path, kept for the other checks of one call: a link
/// (its target), something else, or nothing (`ENOENT`, `ENOTDIR`).
#[derive(Clone)]
enum Lstat {
    Link(PathBuf),
    Other,
    Missing,
}

/// The `lstat` results of one call's checks, by node path.
type Lstats = BTreeMap<OsString, Lstat>;

/// [`resolve`] with `memo`: each node path is looked at once per call.
fn resolve_with(host_root: &Path, p: &Path, memo: &mut Lstats) -> io::Result<PathBuf> {
    let mut todo: std::collections::VecDeque<OsString> = link_parts(p).into();
    let mut cur = PathBuf::from("/");
    let mut links = 0;
    let mut exists = true;
    // While components of a link's target are being walked: how many components of
    // `todo` follow that target (a missing component before then is a dangling link).
    let mut link_until: Option<usize> = None;
    while let Some(c) = todo.pop_front() {
        let in_target = link_until.is_some_and(|n| todo.len() >= n);
        if !in_target {
            link_until = None;
        }
        if c == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        if !exists {
            cur = next;
            continue;
        }
        let seen = match memo.get(next.as_os_str()) {
            Some(l) => l.clone(),
            None => {
                let on_host = if host_root == Path::new("/") {
                    next.clone()
                } else {
                    under(host_root, &next)
                };
                let l = match std::fs::symlink_metadata(&on_host) {
                    Ok(m) if m.file_type().is_symlink() => {
                        Lstat::Link(std::fs::read_link(&on_host)?)
                    }
                    Ok(_) => Lstat::Other,
                    Err(e)
                        if e.kind() == io::ErrorKind::NotFound
                            || e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32) =>
                    {
                        Lstat::Missing
                    }
                    Err(e) => return Err(e),
                };
                memo.insert(next.clone().into_os_string(), l.clone());
                l
            }
        };
        match seen {
            Lstat::Link(target) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(
                        nix::errno::Errno::ELOOP as i32,
                    ));
                }
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                let n = todo.len();
                link_until = Some(link_until.map_or(n, |b| b.min(n)));
                for part in link_parts(&target).into_iter().rev() {
                    todo.push_front(part);
                }
            }
            Lstat::Other => cur = next,
            Lstat::Missing => {
                if in_target {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "a symbolic link leads to {}, which does not exist",
                            next.display()
                        ),
                    ));
                }
                exists = false;
                cur = next;
            }
        }
    }
    Ok(cur)
}

/// The components of a link's target, `..` kept (the root and `.` dropped).
fn link_parts(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    /// A host root with `run/`, `var/log/`, `etc/` and `var/run -> /run`.
    fn host() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for sub in [
            "run",
            "var/log",
            "var/lib/cni",
            "etc/sriov-operator",
            "proc",
        ] {
            std::fs::create_dir_all(d.path().join(sub)).unwrap();
        }
        symlink("/run", d.path().join("var/run")).unwrap();
        d
    }

    #[test]
    fn defaults_allow_the_documented_places_only() {
        let h = host();
        let p = NodePolicy::defaults(h.path());
        for (k, ok) in [
            (PathKey::StateDir, "/run/ib-sriov"),
            (PathKey::StateDir, "/var/run/ib-sriov/x"),
            (PathKey::IpamDataDir, "/var/lib/cni/networks"),
            (PathKey::LogFile, "/var/log/ib-sriov.log"),
            (PathKey::GoCacheDir, "/var/lib/cni/ib-sriov"),
            (PathKey::GuidFile, "/etc/sriov-operator/infiniband/guids"),
            (
                PathKey::DeviceInfoFile,
                "/var/run/k8s.cni.cncf.io/devinfo/cni/x.json",
            ),
        ] {
            p.check(k, ok).unwrap_or_else(|e| panic!("{k} {ok}: {e}"));
        }
        for (k, bad, why) in [
            (
                PathKey::LogFile,
                "/etc/ld.so.preload",
                Refusal::OutsideRoots,
            ),
            (PathKey::StateDir, "/etc/cron.d", Refusal::OutsideRoots),
            (PathKey::LogFile, "/proc/self/fd/1", Refusal::OutsideRoots),
            (PathKey::IpamDataDir, "/sys/bus/pci", Refusal::OutsideRoots),
            (PathKey::GoCacheDir, "/run/../etc", Refusal::DotDot),
            (PathKey::StateDir, "run/x", Refusal::NotAbsolute),
            (PathKey::LogFile, "/run/a\0b", Refusal::Nul),
            // /etc/sriov-operator is for guidFile only.
            (
                PathKey::StateDir,
                "/etc/sriov-operator/x",
                Refusal::OutsideRoots,
            ),
            // A prefix of a component is not a root.
            (PathKey::LogFile, "/runx/a.log", Refusal::OutsideRoots),
        ] {
            let e = p.check(k, bad).unwrap_err();
            assert_eq!(e.refusal, why, "{k} {bad:?}: {e}");
            let m = e.to_string();
            assert!(m.contains(k.name()) && m.contains(NODE_FILE), "{m}");
        }
    }

    #[test]
    fn a_link_out_of_a_root_is_refused_and_one_within_it_followed() {
        let h = host();
        let r = h.path();
        symlink("/etc", r.join("run/out")).unwrap();
        symlink("../etc", r.join("run/rel-out")).unwrap();
        std::fs::create_dir_all(r.join("run/real")).unwrap();
        symlink("/run/real", r.join("run/in")).unwrap();
        symlink("/var/run/real", r.join("run/via-var-run")).unwrap();
        symlink("/run/nowhere", r.join("run/dangling")).unwrap();
        symlink("loop", r.join("run/loop")).unwrap();
        symlink("/var/log", r.join("run/other-root")).unwrap();
        let p = NodePolicy::defaults(r);
        for ok in ["/run/in/x.log", "/run/via-var-run/x", "/run/real/new/dir"] {
            p.check(PathKey::LogFile, ok)
                .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["/run/out/passwd", "/run/rel-out/cron.d/x", "/run/out"] {
            let e = p.check(PathKey::StateDir, bad).unwrap_err();
            assert!(matches!(e.refusal, Refusal::LinkOut(_)), "{bad}: {e}");
        }
        // Another allowed root reached through a link of this one is still out of it.
        let e = p.check(PathKey::LogFile, "/run/other-root/x").unwrap_err();
        assert!(matches!(e.refusal, Refusal::LinkOut(_)), "{e}");
        for bad in ["/run/dangling/x", "/run/loop/x"] {
            let e = p.check(PathKey::StateDir, bad).unwrap_err();
            assert!(matches!(e.refusal, Refusal::Unresolvable(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn the_node_file_widens_and_narrows() {
        let h = host();
        let p = NodePolicy::from_json(
            h.path(),
            br#"{"extraPathRoots": ["/data/cni"], "pathRoots": {"logFile": ["/var/log/ib-sriov"], "stateDir": []}}"#,
        )
        .unwrap();
        assert!(p.from_file);
        p.check(PathKey::IpamDataDir, "/data/cni/networks").unwrap();
        p.check(PathKey::LogFile, "/var/log/ib-sriov/a.log")
            .unwrap();
        p.check(PathKey::LogFile, "/data/cni/a.log").unwrap();
        assert!(p.check(PathKey::LogFile, "/var/log/other.log").is_err());
        // stateDir: [] plus the extra root only.
        assert!(p.check(PathKey::StateDir, "/run/ib-sriov").is_err());
        p.check(PathKey::StateDir, "/data/cni/state").unwrap();
        for bad in [
            r#"{"extraPathRoots": ["rel"]}"#,
            r#"{"extraPathRoots": ["/a/../etc"]}"#,
            r#"{"pathRoots": {"logfile": ["/x"]}}"#,
            r#"{"pathRoot": {}}"#,
            r#"[]"#,
            r#"{"extraPathRoots": "/x"}"#,
        ] {
            assert!(
                NodePolicy::from_json(h.path(), bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn defaults_fill_what_the_network_lacks_and_unknown_ones_are_refused() {
        let h = host();
        let p =
            NodePolicy::from_json(h.path(), br#"{"defaults": {"rdmaIsolation": true}}"#).unwrap();
        assert_eq!(p.defaults.rdma_isolation, Some(true));
        assert!(NodePolicy::defaults(h.path()).defaults.is_empty());
        let parse = |c: &str| crate::config::NetConf::parse(c.as_bytes()).unwrap();
        let mut absent = parse(r#"{"cniVersion":"1.0.0","name":"n","type":"ib-sriov"}"#);
        let filled = p.defaults.apply(&mut absent);
        assert_eq!(absent.rdma_isolation, Some(true));
        assert!(filled[0].starts_with("rdmaIsolation: true"), "{filled:?}");
        let mut given =
            parse(r#"{"cniVersion":"1.0.0","name":"n","type":"ib-sriov","rdmaIsolation":false}"#);
        assert!(p.defaults.apply(&mut given).is_empty());
        assert_eq!(given.rdma_isolation, Some(false), "the network's key wins");
        for bad in [
            r#"{"defaults": {"rdmaIsolaton": true}}"#,
            r#"{"defaults": {"stateDir": "/run/x"}}"#,
            r#"{"defaults": {"rdmaIsolation": "true"}}"#,
            r#"{"defaults": []}"#,
        ] {
            let e = NodePolicy::from_json(h.path(), bad.as_bytes()).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
    }

    #[test]
    fn load_reads_the_file_under_the_host_root() {
        let h = host();
        assert!(!NodePolicy::load(h.path()).unwrap().from_file);
        std::fs::create_dir_all(h.path().join("etc/ib-sriov")).unwrap();
        std::fs::write(
            h.path().join("etc/ib-sriov/node.json"),
            r#"{"extraPathRoots": ["/srv"]}"#,
        )
        .unwrap();
        let p = NodePolicy::load(h.path()).unwrap();
        assert!(p.from_file);
        p.check(PathKey::StateDir, "/srv/x").unwrap();
        std::fs::write(h.path().join("etc/ib-sriov/node.json"), "{").unwrap();
        let e = NodePolicy::load(h.path()).unwrap_err();
        assert!(e.to_string().contains(NODE_FILE), "{e}");
    }

    #[test]
    fn configured_paths_reads_what_the_config_gives() {
        let c = json!({
            "logFile": "/a", "stateDir": "", "goCacheDir": "/c", "guidFile": 5,
            "runtimeConfig": {"CNIDeviceInfoFile": "/d"},
            "ipam": {"type": "ib-sriov-ipam", "dataDir": "/e"}
        });
        assert_eq!(
            configured_paths(&c),
            vec![
                (PathKey::LogFile, "/a".to_string()),
                (PathKey::IpamDataDir, "/e".to_string()),
                (PathKey::GoCacheDir, "/c".to_string()),
                (PathKey::DeviceInfoFile, "/d".to_string()),
            ]
        );
        // A delegated IPAM plugin's dataDir is its own.
        let c = json!({"ipam": {"type": "host-local", "dataDir": "/etc"}});
        assert!(configured_paths(&c).is_empty());
    }
}
