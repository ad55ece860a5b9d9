//! `thin_entrypoint`: the container entrypoint that installs the `ib-sriov` plugin into
//! the host's CNI bin directory, then sleeps. It is a drop-in for upstream's thin
//! entrypoint, so the upstream DaemonSet (`deployment/ib-sriov-cni-daemonset.yaml`, which
//! mounts the host's `/opt/cni/bin` at `/host/opt/cni/bin`) and the SR-IOV network
//! operator run this image unchanged.
//!
//! Matched to `cmd/thin_entrypoint/main.go` of k8snetworkplumbingwg/ib-sriov-cni at commit
//! 543060da640ef8f23229e11a4a83631fa03d1499 (that file last changed in a1002b31f962):
//! - the flags `-cni-bin-dir` (default `/host/opt/cni/bin`), `-ib-sriov-cni-bin-file`
//!   (default `/usr/bin/ib-sriov`) and `-no-sleep`, parsed with the syntax of Go's `flag`
//!   package: one or two dashes, `-f value` or `-f=value`, a bare `-no-sleep` or
//!   `-no-sleep=<bool>`, parsing stops at the first non-flag or after `--`, the rest is
//!   ignored; `-h`/`-help` prints the usage and exits 0, any other error exits 2;
//! - the checks of `verifyPaths` with its messages (the directory must exist, the source
//!   must be a regular file), and the destination name: always `<dir>/ib-sriov`, whatever
//!   the source is called;
//! - the log lines, then a sleep until SIGTERM or SIGINT (exit 0), or exit 0 at once with
//!   `-no-sleep`; errors are `Error: ...` on stderr with exit status 1.
//!
//! Deliberate differences from upstream:
//! - a second copy of the same source is installed as `<dir>/ib-sriov-ipam` (after
//!   `<dir>/ib-sriov`, the same way: temp file, VERSION check, rename, directory fsync):
//!   the executable started under that name is the built-in allocator as an IPAM plugin
//!   of its own, which the Go ib-sriov-cni execs after a rollback for NADs with
//!   `"ipam": {"type": "ib-sriov-ipam"}`. A copy rather than a link: a symlink to
//!   `ib-sriov` (or a hard link re-made by a later install) would follow `ib-sriov` when
//!   a rollback's Go entrypoint replaces it, and then run the Go plugin as the IPAM
//!   plugin; a copy is independent of what `ib-sriov` becomes, and each name is replaced
//!   atomically and checked on its own. Its VERSION check runs it under the name
//!   `ib-sriov-ipam` (argv[0]), as a runtime will;
//! - the temp file is `.ib-sriov.tmp.<pid>.<n>`, created with O_EXCL (upstream truncates a
//!   fixed `ib-sriov.temp`, which two writers sharing the directory would both write);
//! - the copy gets mode 0755 (upstream copies the source's mode): a CNI plugin must be
//!   executable, whatever the image did to the source's mode;
//! - the directory is fsync'd after the rename, so the new name survives a crash;
//! - the copy must answer `CNI_COMMAND=VERSION` (upstream does not run it); the check
//!   runs on the temp file *before* the rename, so a broken source never replaces a
//!   working plugin;
//! - log lines go to stderr (upstream prints them on stdout);
//! - SIGTERM and SIGINT are blocked from the start and taken with sigwait, so a signal
//!   that arrives during the copy lets the copy finish (upstream dies mid-copy).
//!
//! Flags of its own (upstream has neither):
//! - `-keep-installed`: instead of sleeping idle, check the installed copies every
//!   `-recheck-interval` (default 10s; Go duration syntax: `500ms`, `10s`, `1m`) and
//!   install them again when another installer replaced them. This is the per-node
//!   canary under the SR-IOV network operator (conf/ib-sriov-canary-daemonset.yaml,
//!   docs/upgrading.md "A per-node canary under the SR-IOV network operator"): the
//!   operator's config daemon re-runs the Go image's entrypoint (`--no-sleep`) in an
//!   init container whenever its pod starts, and that copy replaces ours. A copy is
//!   ours by content, not name: each check compares the file's identity
//!   (`st_dev`, `st_ino`, size, `mtime`, mode, from `lstat(2)`) with what the last
//!   install left, and only when it changed hashes the file (SHA-256) against the
//!   source; a different hash, a missing file or one that is not a regular file is
//!   re-installed (the same atomic, VERSION-checked install) and logged, with both
//!   hashes and a count. A failed re-install is logged and tried again at the next
//!   check. Not with `-no-sleep`.
//! - `-node-file PATH` (with `-keep-installed`): the node file follows the canary
//!   (docs/upgrading.md "The RDMA recipe in a mixed fleet"). `PATH` is the node file as
//!   the canary DaemonSet mounts it from a ConfigMap (`/etc/ib-sriov-canary/node.json`);
//!   it is validated with the plugin's own parser
//!   (`ib_sriov_cni::policy::NodePolicy::from_json`, what every ADD applies) and
//!   installed as `<-node-file-dir>/node.json` (default `/host/etc/ib-sriov`, the
//!   host's `/etc/ib-sriov`) the same atomic way (temp file, fsync, rename, directory
//!   fsync; mode 0644). Each check installs it again when the ConfigMap changed, puts it
//!   back when it was removed, and removes the installed one when the ConfigMap no
//!   longer has it; an invalid source is logged and the installed file left as it is.
//!   On SIGTERM or SIGINT (the node's label removed, the pod deleted) the installed file
//!   is removed. Only a file this canary installed is ever replaced or removed: its
//!   SHA-256 is recorded in `<-node-file-dir>/.node.json.canary` before each change, and
//!   a `node.json` whose hash is not recorded there (an admin's, a MachineConfig's) is
//!   left alone, with an error line at each change of it.

use anyhow::{bail, Context, Result};
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Default of `-cni-bin-dir`: where upstream's DaemonSet mounts the host's `/opt/cni/bin`.
const DEFAULT_CNI_BIN_DIR: &str = "/host/opt/cni/bin";
/// Default of `-ib-sriov-cni-bin-file`: where the image puts the plugin.
const DEFAULT_BIN_FILE: &str = "/usr/bin/ib-sriov";
/// The name of the installed plugin in the CNI bin directory (upstream's `copyBinary`).
const DEST_NAME: &str = "ib-sriov";
/// The name of the installed IPAM plugin (the same executable: it dispatches on its
/// file name).
const IPAM_DEST_NAME: &str = "ib-sriov-ipam";
/// Mode of the installed plugin.
const DEST_MODE: u32 = 0o755;
/// Default of `-node-file-dir`: the host's `/etc/ib-sriov`, where the plugin reads its
/// node file (`ib_sriov_cni::policy::NODE_FILE`).
const DEFAULT_NODE_FILE_DIR: &str = "/host/etc/ib-sriov";
/// The node file's name in that directory.
const NODE_FILE_NAME: &str = "node.json";
/// The record of the node files this canary installed (their SHA-256, one a line).
const NODE_FILE_RECORD: &str = ".node.json.canary";
/// Mode of the installed node file.
const NODE_FILE_MODE: u32 = 0o644;
/// Default of `-recheck-interval`.
const DEFAULT_RECHECK: Duration = Duration::from_secs(10);
/// How long the installed copy may take to answer `CNI_COMMAND=VERSION`.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);
/// What the VERSION check sends on stdin (SPEC.md "VERSION": the config carries only
/// `cniVersion`).
const VERSION_STDIN: &[u8] = br#"{"cniVersion":"1.0.0"}"#;

const USAGE: &str = "\
This is a thin entrypoint for InfiniBand SR-IOV CNI to copy its
binary into the CNI bin directory on the host filesystem.

Usage:
  -cni-bin-dir string
    \tCNI binary directory (default \"/host/opt/cni/bin\")
  -ib-sriov-cni-bin-file string
    \tInfiniBand SR-IOV CNI binary file path (default \"/usr/bin/ib-sriov\")
  -keep-installed
    \tWhile sleeping, re-install the binary when another installer replaced it
  -no-sleep
    \tExit after copying binary instead of sleeping
  -node-file string
    \tWith -keep-installed, the node file (a ConfigMap's) to keep installed while running, removed on exit
  -node-file-dir string
    \tWhere -node-file is installed as node.json (default \"/host/etc/ib-sriov\")
  -recheck-interval duration
    \tHow often -keep-installed checks the installed binary (default 10s)
";

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    cni_bin_dir: PathBuf,
    bin_file: PathBuf,
    no_sleep: bool,
    /// `-keep-installed`: re-install when another installer replaced the copies.
    keep_installed: bool,
    /// `-recheck-interval`: how often `-keep-installed` looks.
    recheck: Duration,
    /// `-node-file`: the node file to keep installed (see the module's documentation).
    node_file: Option<PathBuf>,
    /// `-node-file-dir`: where it is installed as [`NODE_FILE_NAME`].
    node_file_dir: PathBuf,
    /// Arguments after the flags: ignored, as upstream ignores them.
    rest: Vec<OsString>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cni_bin_dir: PathBuf::from(DEFAULT_CNI_BIN_DIR),
            bin_file: PathBuf::from(DEFAULT_BIN_FILE),
            no_sleep: false,
            keep_installed: false,
            recheck: DEFAULT_RECHECK,
            node_file: None,
            node_file_dir: PathBuf::from(DEFAULT_NODE_FILE_DIR),
            rest: Vec::new(),
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Run(Options),
    Help,
}

/// Parses `args` (without the program name) with the rules of Go's `flag` package
/// (`FlagSet.parseOne` in Go's `src/flag/flag.go`), so every command line upstream's
/// entrypoint accepts means the same here. Errors carry Go's messages, e.g.
/// `flag provided but not defined: -x`, `flag needs an argument: -cni-bin-dir`,
/// `bad flag syntax: ---x`, `invalid boolean value "x" for -no-sleep: parse error`.
fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let mut opts = Options::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let bytes = arg.as_bytes();
        if bytes.len() < 2 || bytes[0] != b'-' {
            opts.rest.push(arg);
            break;
        }
        if bytes == b"--" {
            break;
        }
        let body = if bytes[1] == b'-' {
            &bytes[2..]
        } else {
            &bytes[1..]
        };
        if body.is_empty() || body[0] == b'-' || body[0] == b'=' {
            return Err(format!("bad flag syntax: {}", arg.to_string_lossy()));
        }
        let (name, value) = match body.iter().position(|&b| b == b'=') {
            Some(i) => (&body[..i], Some(OsStr::from_bytes(&body[i + 1..]))),
            None => (body, None),
        };
        let shown = String::from_utf8_lossy(name);
        match name {
            b"no-sleep" | b"keep-installed" => {
                let on = match value {
                    None => true,
                    Some(v) => parse_go_bool(v).ok_or_else(|| {
                        format!(
                            "invalid boolean value {:?} for -{shown}: parse error",
                            v.to_string_lossy()
                        )
                    })?,
                };
                match name {
                    b"no-sleep" => opts.no_sleep = on,
                    _ => opts.keep_installed = on,
                }
            }
            b"recheck-interval" => {
                let v = match value {
                    Some(v) => v.to_os_string(),
                    None => args
                        .next()
                        .ok_or_else(|| format!("flag needs an argument: -{shown}"))?,
                };
                opts.recheck = parse_go_duration(&v)
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        format!(
                            "invalid value {:?} for flag -{shown}: parse error",
                            v.to_string_lossy()
                        )
                    })?;
            }
            b"cni-bin-dir" | b"ib-sriov-cni-bin-file" | b"node-file" | b"node-file-dir" => {
                let v = match value {
                    Some(v) => v.to_os_string(),
                    None => args
                        .next()
                        .ok_or_else(|| format!("flag needs an argument: -{shown}"))?,
                };
                match name {
                    b"cni-bin-dir" => opts.cni_bin_dir = PathBuf::from(v),
                    b"node-file" => opts.node_file = Some(PathBuf::from(v)),
                    b"node-file-dir" => opts.node_file_dir = PathBuf::from(v),
                    _ => opts.bin_file = PathBuf::from(v),
                }
            }
            b"h" | b"help" => return Ok(Parsed::Help),
            _ => return Err(format!("flag provided but not defined: -{shown}")),
        }
    }
    opts.rest.extend(args);
    if opts.keep_installed && opts.no_sleep {
        return Err("-keep-installed needs the sleep: it cannot be used with -no-sleep".into());
    }
    if opts.node_file.is_some() && !opts.keep_installed {
        return Err(
            "-node-file needs -keep-installed (it is kept installed while the canary runs)".into(),
        );
    }
    Ok(Parsed::Run(opts))
}

/// A positive duration in the subset of Go's `time.ParseDuration` syntax a check
/// interval needs: a decimal number (fraction allowed) and one unit of `ms`, `s`, `m`,
/// `h` (`500ms`, `10s`, `1.5m`). `None` for anything else.
fn parse_go_duration(v: &OsStr) -> Option<Duration> {
    let s = v.to_str()?;
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

/// Go's `strconv.ParseBool`: the spellings a Go boolean flag accepts.
fn parse_go_bool(v: &OsStr) -> Option<bool> {
    match v.as_bytes() {
        b"1" | b"t" | b"T" | b"true" | b"TRUE" | b"True" => Some(true),
        b"0" | b"f" | b"F" | b"false" | b"FALSE" | b"False" => Some(false),
        _ => None,
    }
}

/// Checks the inputs before anything is written, as upstream's `verifyPaths` does.
/// Errors: the directory is missing or not a directory; the source is missing or not a
/// regular file (a symlink to one is fine: both are followed, as Go's `os.Stat` does).
fn verify_paths(cni_bin_dir: &Path, bin_file: &Path) -> Result<()> {
    let meta = fs::metadata(cni_bin_dir)
        .with_context(|| format!("CNI bin directory {cni_bin_dir:?} does not exist"))?;
    if !meta.is_dir() {
        bail!("CNI bin directory {cni_bin_dir:?} is not a directory");
    }
    let meta = fs::metadata(bin_file)
        .with_context(|| format!("IB SR-IOV CNI binary file {bin_file:?} does not exist"))?;
    if !meta.is_file() {
        bail!("IB SR-IOV CNI binary file {bin_file:?} is not a regular file");
    }
    Ok(())
}

/// Creates a new, empty temp file for `name` in `dir`: `.<name>.tmp.<pid>.<n>` with the
/// first free `n`, opened with O_EXCL (`create_new`) so it is never someone else's file.
/// In a container the pid is the same every run, so `n` also steps over a temp file
/// left by a run killed with SIGKILL. Errors: the directory is read-only (EROFS),
/// not writable (EACCES), full (ENOSPC, EDQUOT), or 100 names are taken.
fn create_temp(dir: &Path, name: &str) -> Result<(PathBuf, File)> {
    let pid = std::process::id();
    for n in 0..100 {
        let tmp = dir.join(format!(".{name}.tmp.{pid}.{n}"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {tmp:?}")),
        }
    }
    bail!("cannot create a temp file in {dir:?}: .{name}.tmp.{pid}.0 to .99 all exist")
}

/// Copies `src` to a new temp file in `dir` with mode [`DEST_MODE`], fsync'd and closed;
/// returns its path. On any error the temp file is removed before returning.
/// Errors: the source cannot be read; the temp file cannot be created (see
/// [`create_temp`]); writing or fsyncing fails (ENOSPC on a full disk, EIO).
fn write_temp_copy(src: &Path, dir: &Path, name: &str) -> Result<PathBuf> {
    let mut input = File::open(src).with_context(|| format!("cannot open {src:?}"))?;
    let (tmp, mut out) = create_temp(dir, name)?;
    let written = (|| -> Result<()> {
        io::copy(&mut input, &mut out)
            .with_context(|| format!("cannot copy {src:?} to {tmp:?}"))?;
        // fchmod on the open file: the umask does not apply, and the fsync below makes
        // the mode durable together with the data.
        out.set_permissions(fs::Permissions::from_mode(DEST_MODE))
            .with_context(|| format!("cannot chmod {tmp:?}"))?;
        out.sync_all()
            .with_context(|| format!("cannot fsync {tmp:?}"))
    })();
    drop(out);
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(tmp)
}

/// The node file that follows the canary (`-node-file`, see the module's
/// documentation): what the ConfigMap says, installed only over a file of its own.
struct NodeFile {
    /// The source (the ConfigMap's file).
    src: PathBuf,
    /// The host's directory (`-node-file-dir`).
    dir: PathBuf,
    /// The last problem logged, so each is logged once until it changes.
    last_problem: Option<String>,
}

/// SHA-256 of `bytes`, in hex.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl NodeFile {
    fn dst(&self) -> PathBuf {
        self.dir.join(NODE_FILE_NAME)
    }

    fn record(&self) -> PathBuf {
        self.dir.join(NODE_FILE_RECORD)
    }

    /// The hashes recorded as this canary's (empty without a record).
    fn ours(&self) -> Vec<String> {
        fs::read_to_string(self.record())
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Writes the record (`hashes`, one a line), atomically; an empty list removes it.
    fn write_record(&self, hashes: &[&str]) -> Result<()> {
        if hashes.is_empty() {
            return match fs::remove_file(self.record()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("cannot remove {:?}", self.record()))
                }
                _ => Ok(()),
            };
        }
        let text: String = hashes.iter().map(|h| format!("{h}\n")).collect();
        write_atomic(&self.dir, NODE_FILE_RECORD, text.as_bytes(), 0o600)
    }

    /// The installed file's content: `Ok(None)` when there is none.
    fn installed(&self) -> Result<Option<Vec<u8>>> {
        match fs::read(self.dst()) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {:?}", self.dst())),
        }
    }

    /// Logs `msg` unless it was the last one logged.
    fn problem(&mut self, msg: String) {
        if self.last_problem.as_deref() != Some(msg.as_str()) {
            eprintln!("Error: {msg}");
            self.last_problem = Some(msg);
        }
    }

    /// One check: installs the source when it is valid and differs from the installed
    /// file (replacing only a file of ours), removes ours when the source is gone.
    fn sync(&mut self) {
        if let Err(e) = self.try_sync() {
            self.problem(format!("{e:#}"));
        }
    }

    fn try_sync(&mut self) -> Result<()> {
        let dst = self.dst();
        let want = match fs::read(&self.src) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {:?}", self.src)),
        };
        let have = self.installed()?;
        if want == have {
            self.last_problem = None;
            return Ok(());
        }
        let ours = self.ours();
        if let Some(h) = &have {
            let hash = sha256_hex(h);
            if !ours.contains(&hash) {
                bail!("{dst:?} exists and was not installed by this canary (sha256 {}): left as it is; merge the ConfigMap's keys into it, or remove it", &hash[..16]);
            }
        }
        let Some(want) = want else {
            fs::remove_file(&dst).with_context(|| format!("cannot remove {dst:?}"))?;
            self.write_record(&[])?;
            eprintln!("Removed {dst:?}: {:?} is gone", self.src);
            self.last_problem = None;
            return Ok(());
        };
        if let Err(e) = ib_sriov_cni::policy::NodePolicy::from_json(Path::new("/"), &want) {
            bail!(
                "{:?} is not a valid node file ({e}): {dst:?} left as it is",
                self.src
            );
        }
        let hash = sha256_hex(&want);
        // Journaled before the change: both the old and the new content are ours
        // until the rename is done.
        let mut both: Vec<&str> = ours.iter().map(String::as_str).collect();
        both.push(&hash);
        self.write_record(&both)?;
        write_atomic(&self.dir, NODE_FILE_NAME, &want, NODE_FILE_MODE)?;
        self.write_record(&[&hash])?;
        eprintln!(
            "Installed {:?} as {dst:?} (sha256 {})",
            self.src,
            &hash[..16]
        );
        self.last_problem = None;
        Ok(())
    }

    /// On exit: removes the installed file when it is ours, then the record.
    fn remove(&mut self) {
        let dst = self.dst();
        let r = (|| -> Result<()> {
            if let Some(h) = self.installed()? {
                let hash = sha256_hex(&h);
                if !self.ours().contains(&hash) {
                    bail!(
                        "{dst:?} was not installed by this canary (sha256 {}): left as it is",
                        &hash[..16]
                    );
                }
                fs::remove_file(&dst).with_context(|| format!("cannot remove {dst:?}"))?;
                eprintln!("Removed {dst:?} (the canary stops)");
            }
            self.write_record(&[])
        })();
        if let Err(e) = r {
            eprintln!("Error: {e:#}");
        }
    }
}

/// Writes `bytes` as `<dir>/<name>` atomically with mode `mode`: a new temp file
/// ([`create_temp`]), fsync'd, renamed over the name, then `dir` fsync'd.
/// Errors: those of [`create_temp`], the write, fsync or rename (the temp file is
/// removed on each).
fn write_atomic(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<()> {
    let (tmp, mut out) = create_temp(dir, name)?;
    let r = (|| -> Result<()> {
        out.write_all(bytes)
            .with_context(|| format!("cannot write {tmp:?}"))?;
        out.set_permissions(fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot chmod {tmp:?}"))?;
        out.sync_all()
            .with_context(|| format!("cannot fsync {tmp:?}"))?;
        fs::rename(&tmp, dir.join(name))
            .with_context(|| format!("cannot rename {tmp:?} to {:?}", dir.join(name)))
    })();
    drop(out);
    if let Err(e) = r {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync directory {dir:?}"))
}

/// Installs `src` as `<dir>/<name>` atomically: writes a temp copy in `dir` (see
/// [`write_temp_copy`]), runs `check` on it, renames it over the destination with
/// rename(2), which replaces the name in one step (readers open the old file or the new
/// one, never a partial one), then fsyncs `dir` so the rename survives a crash.
/// On any error before the rename the temp file is removed and the existing destination
/// is not touched. Errors: those of [`write_temp_copy`], `check`'s, the rename's (EISDIR
/// when the destination is a directory), and the directory fsync's (EIO; the new plugin
/// is in place then).
fn install_atomic(
    src: &Path,
    dir: &Path,
    name: &str,
    check: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let dst = dir.join(name);
    let tmp = write_temp_copy(src, dir, name)?;
    let renamed = check(&tmp).and_then(|()| {
        fs::rename(&tmp, &dst).with_context(|| format!("cannot rename {tmp:?} to {dst:?}"))
    });
    if let Err(e) = renamed {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync directory {dir:?}"))?;
    Ok(dst)
}

/// Runs `bin` as a CNI runtime runs a plugin for VERSION (CNI SPEC.md, "VERSION"): a
/// clean environment with only `CNI_COMMAND=VERSION`, `{"cniVersion":"1.0.0"}` on stdin,
/// and `argv0` as its argv[0] (the name it will be installed under) when given.
/// Returns the `supportedVersions` it prints. Errors: it cannot be executed (ENOENT,
/// EACCES on a noexec mount, ENOEXEC), it does not exit 0 within `timeout` (then it is
/// killed), or its stdout is not a JSON object with a `supportedVersions` array.
fn check_version(bin: &Path, argv0: Option<&str>, timeout: Duration) -> Result<Vec<String>> {
    let mut cmd = Command::new(bin);
    if let Some(a) = argv0 {
        std::os::unix::process::CommandExt::arg0(&mut cmd, a);
    }
    let mut child = cmd
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run {bin:?}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin may exit without reading stdin: EPIPE is not an error here.
        let _ = stdin.write_all(VERSION_STDIN);
    }
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.by_ref().take(1 << 20).read_to_end(&mut out);
        let _ = tx.send(out);
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("no answer within {timeout:?}, killed it");
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(10)));
    };
    // It exited: its stdout closes now, unless something it started holds it open.
    let grace = deadline.saturating_duration_since(Instant::now());
    let out = rx
        .recv_timeout(grace.max(Duration::from_secs(1)))
        .context("it exited but its stdout stayed open")?;
    let shown = String::from_utf8_lossy(&out);
    let shown = shown.trim();
    if !status.success() {
        bail!("it failed ({status}), stdout: {shown:?}");
    }
    let reply: serde_json::Value = serde_json::from_slice(&out)
        .with_context(|| format!("its stdout is not JSON: {shown:?}"))?;
    let Some(versions) = reply.get("supportedVersions").and_then(|v| v.as_array()) else {
        bail!("its answer has no supportedVersions array: {shown}");
    };
    Ok(versions
        .iter()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        .collect())
}

/// The installed names, with what each is for the log.
const INSTALLED: [(&str, &str); 2] = [
    (DEST_NAME, "IB SR-IOV CNI binary"),
    (IPAM_DEST_NAME, "its IPAM plugin"),
];

/// Checks, installs and verifies, as upstream's `verifyPaths` then `copyBinary`; then
/// installs the same source as [`IPAM_DEST_NAME`] (see the module's documentation).
fn install(opts: &Options) -> Result<()> {
    verify_paths(&opts.cni_bin_dir, &opts.bin_file)?;
    for (name, what) in INSTALLED {
        install_one(opts, name, what)?;
    }
    Ok(())
}

/// The identity of an installed file as `lstat(2)` shows it: `(st_dev, st_ino, size,
/// mtime in ns, mode)`. `None` when it is missing or not a regular file.
type Stamp = (u64, u64, u64, i128, u32);

fn stamp(p: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(p).ok().filter(|m| m.is_file())?;
    let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    Some((m.dev(), m.ino(), m.size(), mtime, m.mode()))
}

/// SHA-256 of a file's content, in hex (at most 1 GiB read).
fn sha256_of(p: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut f = File::open(p).with_context(|| format!("cannot open {p:?}"))?;
    let mut h = Sha256::new();
    io::copy(&mut (&mut f).take(1 << 30), &mut h).with_context(|| format!("cannot read {p:?}"))?;
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// `-keep-installed`: what this process installed, to tell its copies from another
/// installer's (see the module's documentation).
struct Keeper {
    /// SHA-256 of the source, read once (the image's file does not change).
    ours: String,
    /// Each installed name's identity as the last install (or check) left it.
    stamps: Vec<Option<Stamp>>,
    /// Re-installs so far.
    reinstalls: u64,
}

impl Keeper {
    /// After the first install: the source's hash and the copies' identities.
    fn new(opts: &Options) -> Result<Keeper> {
        Ok(Keeper {
            ours: sha256_of(&opts.bin_file)?,
            stamps: INSTALLED
                .iter()
                .map(|(n, _)| stamp(&opts.cni_bin_dir.join(n)))
                .collect(),
            reinstalls: 0,
        })
    }

    /// One check of every installed name: unchanged identity, nothing to do; changed
    /// but the same content (touched, or copied again by another instance of this
    /// image), the new identity is recorded; else it is installed again. Logs each
    /// finding; a failed re-install is logged and left for the next check.
    fn check(&mut self, opts: &Options) {
        for (i, (name, what)) in INSTALLED.into_iter().enumerate() {
            let dst = opts.cni_bin_dir.join(name);
            let now = stamp(&dst);
            if now.is_some() && now == self.stamps[i] {
                continue;
            }
            let found = match now {
                None if fs::symlink_metadata(&dst).is_ok() => "is not a regular file".into(),
                None => "is missing".to_string(),
                Some(_) => match sha256_of(&dst) {
                    Ok(h) if h == self.ours => {
                        eprintln!("{dst:?} changed identity but holds this image's binary (sha256 {}): kept", &h[..16]);
                        self.stamps[i] = now;
                        continue;
                    }
                    Ok(h) => format!(
                        "was replaced by another binary (sha256 {}, this image's is {})",
                        &h[..16],
                        &self.ours[..16]
                    ),
                    Err(e) => format!("cannot be read ({e:#})"),
                },
            };
            self.reinstalls += 1;
            eprintln!(
                "Re-installing {dst:?} (re-install #{}): it {found}",
                self.reinstalls
            );
            match install_one(opts, name, what) {
                Ok(()) => self.stamps[i] = stamp(&dst),
                Err(e) => eprintln!(
                    "Error: re-installing {dst:?}: {e:#}; trying again in {:?}",
                    opts.recheck
                ),
            }
        }
    }
}

/// Waits up to `timeout` for one of the blocked `signals` (`sigtimedwait(2)`):
/// `Some(signal)`, or `None` when the time ran out.
fn wait_signal(signals: &SigSet, timeout: Duration) -> Result<Option<Signal>> {
    let ts = nix::libc::timespec {
        tv_sec: timeout.as_secs() as nix::libc::time_t,
        tv_nsec: timeout.subsec_nanos() as nix::libc::c_long,
    };
    loop {
        // SAFETY: the set and the timespec outlive the call; no siginfo is asked for.
        let r = unsafe { nix::libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), &ts) };
        if r >= 0 {
            return Ok(Signal::try_from(r).ok());
        }
        match nix::errno::Errno::last() {
            nix::errno::Errno::EAGAIN => return Ok(None),
            nix::errno::Errno::EINTR => continue,
            e => return Err(e).context("sigtimedwait"),
        }
    }
}

/// Installs `opts.bin_file` as `<cni_bin_dir>/<name>`, checked with VERSION under
/// `name` before the rename.
fn install_one(opts: &Options, name: &str, what: &str) -> Result<()> {
    let dst = opts.cni_bin_dir.join(name);
    eprintln!("Copying {:?} to {dst:?}", opts.bin_file);
    let mut versions = Vec::new();
    install_atomic(&opts.bin_file, &opts.cni_bin_dir, name, |tmp| {
        versions = check_version(tmp, Some(name), VERSION_TIMEOUT).with_context(|| {
            format!(
                "the copy of {:?} does not answer CNI_COMMAND=VERSION",
                opts.bin_file
            )
        })?;
        Ok(())
    })
    .with_context(|| format!("failed to copy binary to {dst:?}"))?;
    eprintln!(
        "Successfully copied {what} to {dst:?} (answers VERSION: {})",
        versions.join(", ")
    );
    Ok(())
}

/// The sleep of `-keep-installed`: a check every `-recheck-interval` until SIGTERM or
/// SIGINT (exit 0).
fn keep_installed(opts: &Options, signals: &SigSet) -> ExitCode {
    let mut keeper = match Keeper::new(opts) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("Error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let mut node = opts.node_file.as_ref().map(|src| NodeFile {
        src: src.clone(),
        dir: opts.node_file_dir.clone(),
        last_problem: None,
    });
    if let Some(n) = node.as_mut() {
        n.sync();
    }
    eprintln!(
        "Keeping {:?} installed: checking every {:?} (sha256 {})",
        opts.cni_bin_dir.join(DEST_NAME),
        opts.recheck,
        &keeper.ours[..16]
    );
    loop {
        match wait_signal(signals, opts.recheck) {
            Ok(None) => {
                keeper.check(opts);
                if let Some(n) = node.as_mut() {
                    n.sync();
                }
            }
            Ok(Some(sig)) => {
                if let Some(n) = node.as_mut() {
                    n.remove();
                }
                eprintln!(
                    "Received signal {sig}, exiting... ({} re-install(s))",
                    keeper.reinstalls
                );
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                eprintln!("Error: waiting for SIGTERM or SIGINT: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args_os().skip(1)) {
        Ok(Parsed::Run(opts)) => opts,
        Ok(Parsed::Help) => {
            ib_sriov_cni::process::print_out(USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            ib_sriov_cni::process::print_err(&format!("{e}\n{USAGE}"));
            return ExitCode::from(2);
        }
    };
    // Blocked before anything else: a signal during the copy stays pending (the copy
    // finishes), and is then taken by the sigwait below. Threads started later (the
    // VERSION reader) inherit the mask; the plugin run for VERSION does not (std resets
    // the signal mask of a spawned child).
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&signals), None) {
        eprintln!("Error: cannot block SIGTERM and SIGINT: {e}");
        return ExitCode::FAILURE;
    }
    if !opts.rest.is_empty() {
        eprintln!("Ignoring extra arguments {:?}", opts.rest);
    }
    if let Err(e) = install(&opts) {
        eprintln!("Error: {e:#}");
        return ExitCode::FAILURE;
    }
    if opts.no_sleep {
        eprintln!("Binary copied successfully, exiting (--no-sleep)");
        return ExitCode::SUCCESS;
    }
    eprintln!("Entering sleep... (success)");
    if opts.keep_installed {
        return keep_installed(&opts, &signals);
    }
    match signals.wait() {
        Ok(sig) => {
            eprintln!("Received signal {sig}, exiting...");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("Error: waiting for SIGTERM or SIGINT: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Mutex;

    /// Serializes the tests that write a script and then execute it: a fork by another
    /// test thread while a script is open for writing would make its exec fail with
    /// ETXTBSY.
    static EXEC: Mutex<()> = Mutex::new(());

    /// A plugin that answers VERSION.
    const VERSION_SCRIPT: &str = r#"echo '{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}'"#;

    fn parse(args: &[&str]) -> Result<Parsed, String> {
        parse_args(args.iter().map(OsString::from))
    }

    fn run(args: &[&str]) -> Options {
        match parse(args) {
            Ok(Parsed::Run(o)) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn defaults_match_upstream() {
        let o = run(&[]);
        assert_eq!(o.cni_bin_dir, Path::new("/host/opt/cni/bin"));
        assert_eq!(o.bin_file, Path::new("/usr/bin/ib-sriov"));
        assert!(!o.no_sleep);
    }

    #[test]
    fn flags_take_one_or_two_dashes_and_separate_or_joined_values() {
        for args in [
            &[
                "--cni-bin-dir",
                "/d",
                "--ib-sriov-cni-bin-file",
                "/s",
                "--no-sleep",
            ][..],
            &[
                "--cni-bin-dir=/d",
                "--ib-sriov-cni-bin-file=/s",
                "--no-sleep",
            ],
            &[
                "-cni-bin-dir",
                "/d",
                "-ib-sriov-cni-bin-file=/s",
                "-no-sleep",
            ],
            &[
                "-no-sleep=true",
                "-cni-bin-dir=/x",
                "--cni-bin-dir=/d",
                "-ib-sriov-cni-bin-file",
                "/s",
            ],
        ] {
            let o = run(args);
            assert_eq!(o.cni_bin_dir, Path::new("/d"), "{args:?}");
            assert_eq!(o.bin_file, Path::new("/s"), "{args:?}");
            assert!(o.no_sleep, "{args:?}");
        }
    }

    #[test]
    fn values_may_start_with_a_dash_or_contain_equals() {
        let o = run(&["--cni-bin-dir", "-odd", "--ib-sriov-cni-bin-file=/a=b"]);
        assert_eq!(o.cni_bin_dir, Path::new("-odd"));
        assert_eq!(o.bin_file, Path::new("/a=b"));
    }

    #[test]
    fn no_sleep_takes_go_booleans() {
        for v in ["1", "t", "T", "true", "TRUE", "True"] {
            assert!(run(&[&format!("--no-sleep={v}")]).no_sleep, "{v}");
        }
        for v in ["0", "f", "F", "false", "FALSE", "False"] {
            assert!(
                !run(&["--no-sleep", &format!("-no-sleep={v}")]).no_sleep,
                "{v}"
            );
        }
        assert_eq!(
            parse(&["--no-sleep=yes"]),
            Err(r#"invalid boolean value "yes" for -no-sleep: parse error"#.into())
        );
    }

    #[test]
    fn help_and_usage_errors() {
        for h in ["-h", "--h", "-help", "--help"] {
            assert_eq!(parse(&[h]), Ok(Parsed::Help), "{h}");
        }
        assert_eq!(parse(&["--no-sleep", "--help"]), Ok(Parsed::Help));
        assert_eq!(
            parse(&["--bogus"]),
            Err("flag provided but not defined: -bogus".into())
        );
        assert_eq!(
            parse(&["--cni-bin-dir"]),
            Err("flag needs an argument: -cni-bin-dir".into())
        );
        assert_eq!(parse(&["---x"]), Err("bad flag syntax: ---x".into()));
        assert_eq!(parse(&["-=x"]), Err("bad flag syntax: -=x".into()));
    }

    #[test]
    fn parsing_stops_at_the_first_non_flag_or_after_double_dash() {
        let o = run(&["--no-sleep", "extra", "--bogus"]);
        assert!(o.no_sleep);
        assert_eq!(o.rest, vec![OsString::from("extra"), "--bogus".into()]);
        let o = run(&["--", "--bogus"]);
        assert_eq!(o.rest, vec![OsString::from("--bogus")]);
        let o = run(&["-", "--no-sleep"]);
        assert!(!o.no_sleep);
        assert_eq!(o.rest, vec![OsString::from("-"), "--no-sleep".into()]);
    }

    #[test]
    fn verify_paths_names_what_is_wrong() {
        let d = tempdir();
        let src = d.path().join("src");
        fs::write(&src, b"x").unwrap();
        verify_paths(d.path(), &src).unwrap();
        let missing = d.path().join("nope");
        let e = format!("{:#}", verify_paths(&missing, &src).unwrap_err());
        assert!(e.contains("CNI bin directory") && e.contains("nope"), "{e}");
        assert!(e.contains("No such file or directory"), "{e}");
        let e = format!("{:#}", verify_paths(&src, &src).unwrap_err());
        assert!(e.contains("is not a directory"), "{e}");
        let e = format!("{:#}", verify_paths(d.path(), &missing).unwrap_err());
        assert!(
            e.contains("IB SR-IOV CNI binary file") && e.contains("does not exist"),
            "{e}"
        );
        let e = format!("{:#}", verify_paths(d.path(), d.path()).unwrap_err());
        assert!(e.contains("is not a regular file"), "{e}");
    }

    #[test]
    fn install_copies_with_mode_0755_and_leaves_no_temp_file() {
        let d = tempdir();
        let src = d.path().join("source-name");
        fs::write(&src, b"plugin bytes").unwrap();
        fs::set_permissions(&src, fs::Permissions::from_mode(0o600)).unwrap();
        let dir = d.path().join("bin");
        fs::create_dir(&dir).unwrap();
        let dst = install_atomic(&src, &dir, DEST_NAME, |_| Ok(())).unwrap();
        assert_eq!(dst, dir.join("ib-sriov"));
        assert_eq!(fs::read(&dst).unwrap(), b"plugin bytes");
        assert_eq!(fs::metadata(&dst).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(names(&dir), ["ib-sriov"]);
    }

    #[test]
    fn install_replaces_the_destination_by_rename_not_in_place() {
        let d = tempdir();
        let src = d.path().join("src");
        fs::write(&src, b"new").unwrap();
        let dir = d.path().join("bin");
        fs::create_dir(&dir).unwrap();
        let dst = dir.join(DEST_NAME);
        fs::write(&dst, b"old plugin").unwrap();
        // A hard link keeps the old inode: a write in place would change it too.
        let old = d.path().join("old-link");
        fs::hard_link(&dst, &old).unwrap();
        let mut checked = None;
        install_atomic(&src, &dir, DEST_NAME, |tmp| {
            // The check sees the complete temp copy while the old destination is intact.
            checked = Some(fs::read(tmp).unwrap());
            assert_eq!(fs::read(&dst).unwrap(), b"old plugin");
            Ok(())
        })
        .unwrap();
        assert_eq!(checked.as_deref(), Some(&b"new"[..]));
        assert_eq!(fs::read(&dst).unwrap(), b"new");
        assert_eq!(fs::read(&old).unwrap(), b"old plugin");
        assert_ne!(
            fs::metadata(&dst).unwrap().ino(),
            fs::metadata(&old).unwrap().ino()
        );
        assert_eq!(names(&dir), ["ib-sriov"]);
    }

    #[test]
    fn failures_remove_the_temp_file_and_leave_the_destination() {
        let d = tempdir();
        let dir = d.path().join("bin");
        fs::create_dir(&dir).unwrap();
        let dst = dir.join(DEST_NAME);
        fs::write(&dst, b"old plugin").unwrap();
        let src = d.path().join("src");
        fs::write(&src, b"new").unwrap();

        // A failed check: the temp file existed, is gone, the destination is the old one.
        let mut seen = None;
        let e = install_atomic(&src, &dir, DEST_NAME, |tmp| {
            seen = Some(tmp.to_path_buf());
            bail!("injected check failure")
        })
        .unwrap_err();
        assert_eq!(format!("{e:#}"), "injected check failure");
        let seen = seen.unwrap();
        assert!(
            seen.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".ib-sriov.tmp."),
            "{seen:?}"
        );
        assert!(!seen.exists());
        // A read error mid-copy (the source is a directory: EISDIR).
        let e = install_atomic(d.path(), &dir, DEST_NAME, |_| Ok(())).unwrap_err();
        assert!(format!("{e:#}").contains("cannot copy"), "{e:#}");
        // A missing source: nothing is created.
        let e = install_atomic(&d.path().join("nope"), &dir, DEST_NAME, |_| Ok(())).unwrap_err();
        assert!(format!("{e:#}").contains("No such file"), "{e:#}");
        assert_eq!(fs::read(&dst).unwrap(), b"old plugin");
        assert_eq!(names(&dir), ["ib-sriov"]);

        // The rename fails (the destination is a non-empty directory): same cleanup.
        let dir2 = d.path().join("bin2");
        fs::create_dir_all(dir2.join(DEST_NAME).join("x")).unwrap();
        let e = install_atomic(&src, &dir2, DEST_NAME, |_| Ok(())).unwrap_err();
        assert!(format!("{e:#}").contains("cannot rename"), "{e:#}");
        assert_eq!(names(&dir2), ["ib-sriov"]);
        assert!(dir2.join(DEST_NAME).join("x").is_dir());
    }

    #[test]
    fn temp_names_step_over_leftovers() {
        let d = tempdir();
        let pid = std::process::id();
        let stale = d.path().join(format!(".ib-sriov.tmp.{pid}.0"));
        fs::write(&stale, b"left by a killed run").unwrap();
        let (tmp, _f) = create_temp(d.path(), DEST_NAME).unwrap();
        assert_eq!(tmp, d.path().join(format!(".ib-sriov.tmp.{pid}.1")));
        assert_eq!(fs::read(&stale).unwrap(), b"left by a killed run");
    }

    #[test]
    fn check_version_accepts_a_version_reply() {
        let _g = EXEC.lock().unwrap_or_else(|e| e.into_inner());
        let d = tempdir();
        // Also checks the clean environment and the stdin the plugin gets.
        let ok = script(
            d.path(),
            "ok",
            r#"[ "$CNI_COMMAND" = VERSION ] && [ -z "$HOME" ] || exit 3
read -r line; [ "$line" = '{"cniVersion":"1.0.0"}' ] || exit 4
echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}'"#,
        );
        assert_eq!(
            check_version(&ok, None, VERSION_TIMEOUT).unwrap(),
            ["0.4.0", "1.0.0"]
        );
    }

    #[test]
    fn check_version_rejects_what_is_not_a_version_reply() {
        let _g = EXEC.lock().unwrap_or_else(|e| e.into_inner());
        let d = tempdir();
        let cases = [
            ("fails", "exit 1", "it failed (exit status: 1)"),
            ("nojson", "echo hello", "is not JSON: \"hello\""),
            (
                "noarray",
                r#"echo '{"cniVersion":"1.0.0"}'"#,
                "no supportedVersions array",
            ),
        ];
        for (name, body, want) in cases {
            let p = script(d.path(), name, body);
            let e = format!(
                "{:#}",
                check_version(&p, None, VERSION_TIMEOUT).unwrap_err()
            );
            assert!(e.contains(want), "{name}: {e}");
        }
        let e = format!(
            "{:#}",
            check_version(&d.path().join("absent"), None, VERSION_TIMEOUT).unwrap_err()
        );
        assert!(
            e.contains("cannot run") && e.contains("No such file"),
            "{e}"
        );
        let data = d.path().join("data");
        fs::write(&data, b"\x00\x01 not a program").unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_version(&data, None, VERSION_TIMEOUT).is_err());
    }

    #[test]
    fn check_version_kills_a_plugin_that_hangs() {
        let _g = EXEC.lock().unwrap_or_else(|e| e.into_inner());
        let d = tempdir();
        let p = script(d.path(), "hang", "exec /bin/sleep 30");
        let t = Instant::now();
        let e = format!(
            "{:#}",
            check_version(&p, None, Duration::from_millis(300)).unwrap_err()
        );
        assert!(e.contains("no answer within 300ms"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn node_file_needs_keep_installed() {
        let o = run(&["-keep-installed", "-node-file", "/cm/node.json"]);
        assert_eq!(o.node_file, Some(PathBuf::from("/cm/node.json")));
        assert_eq!(o.node_file_dir, PathBuf::from(DEFAULT_NODE_FILE_DIR));
        let o = run(&["-keep-installed", "-node-file=/a", "--node-file-dir=/h/etc"]);
        assert_eq!(o.node_file_dir, PathBuf::from("/h/etc"));
        assert!(parse(&["-node-file=/a"])
            .unwrap_err()
            .contains("-node-file needs -keep-installed"));
    }

    /// The node file is installed only over a file of its own, validated first, and
    /// removed only when it is its own.
    #[test]
    fn node_file_installs_and_removes_only_its_own() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src.json");
        let dir = d.path().join("etc");
        fs::create_dir(&dir).unwrap();
        let mut n = NodeFile {
            src: src.clone(),
            dir: dir.clone(),
            last_problem: None,
        };
        n.sync();
        assert!(names(&dir).is_empty(), "no source, nothing installed");
        fs::write(&src, "{\"defaults\": {\"rdmaIsolation\": 1}}").unwrap();
        n.sync();
        assert!(names(&dir).is_empty(), "invalid: nothing installed");
        assert!(n
            .last_problem
            .as_deref()
            .unwrap()
            .contains("not a valid node file"));
        fs::write(&src, "{\"defaults\": {\"rdmaIsolation\": true}}").unwrap();
        n.sync();
        assert_eq!(names(&dir), [NODE_FILE_RECORD, NODE_FILE_NAME]);
        assert_eq!(n.ours(), [sha256_hex(&fs::read(&src).unwrap())]);
        fs::remove_file(&src).unwrap();
        n.sync();
        assert!(names(&dir).is_empty(), "the source gone, ours removed");
        fs::write(dir.join(NODE_FILE_NAME), "{}").unwrap();
        fs::write(&src, "{\"defaults\": {\"rdmaIsolation\": true}}").unwrap();
        n.sync();
        assert_eq!(fs::read_to_string(dir.join(NODE_FILE_NAME)).unwrap(), "{}");
        assert!(n
            .last_problem
            .as_deref()
            .unwrap()
            .contains("not installed by this canary"));
        n.remove();
        assert_eq!(fs::read_to_string(dir.join(NODE_FILE_NAME)).unwrap(), "{}");
    }

    #[test]
    fn keep_installed_and_its_interval() {
        let o = run(&[]);
        assert!(!o.keep_installed);
        assert_eq!(o.recheck, Duration::from_secs(10));
        let o = run(&["-keep-installed", "--recheck-interval", "500ms"]);
        assert!(o.keep_installed);
        assert_eq!(o.recheck, Duration::from_millis(500));
        for (v, want) in [
            ("2s", 2_000),
            ("1.5m", 90_000),
            ("0.25s", 250),
            ("1h", 3_600_000),
        ] {
            let o = run(&[&format!("-recheck-interval={v}")]);
            assert_eq!(o.recheck, Duration::from_millis(want), "{v}");
        }
        assert!(!run(&["-keep-installed=false"]).keep_installed);
        for bad in ["10", "0s", "-1s", "s", "1d", "1.2.3s", ""] {
            assert_eq!(
                parse(&[&format!("-recheck-interval={bad}")]),
                Err(format!(
                    "invalid value {bad:?} for flag -recheck-interval: parse error"
                )),
                "{bad}"
            );
        }
        assert!(parse(&["-keep-installed", "-no-sleep"])
            .unwrap_err()
            .contains("cannot be used with -no-sleep"));
    }

    /// The keeper's check: an untouched copy is left alone; a copy replaced by other
    /// content (by rename, as an installer does, or rewritten in place) or removed is
    /// installed again and counted; a new identity with this image's content (a copy
    /// of the same image) is only recorded.
    #[test]
    fn the_keeper_reinstalls_other_content_only() {
        let _g = EXEC.lock().unwrap_or_else(|e| e.into_inner());
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("bin");
        fs::create_dir(&dir).unwrap();
        let src = script(d.path(), "ours", VERSION_SCRIPT);
        let opts = Options {
            cni_bin_dir: dir.clone(),
            bin_file: src.clone(),
            ..Options::default()
        };
        install(&opts).unwrap();
        let mut k = Keeper::new(&opts).unwrap();
        k.check(&opts);
        assert_eq!(k.reinstalls, 0);
        let dst = dir.join(DEST_NAME);
        let go = script(d.path(), "go", "echo go plugin");
        fs::copy(&go, dir.join("x.tmp")).unwrap();
        fs::rename(dir.join("x.tmp"), &dst).unwrap();
        k.check(&opts);
        assert_eq!(k.reinstalls, 1);
        assert_eq!(fs::read(&dst).unwrap(), fs::read(&src).unwrap());
        fs::write(&dst, "#!/bin/sh\necho rewritten in place\n").unwrap();
        fs::remove_file(dir.join(IPAM_DEST_NAME)).unwrap();
        k.check(&opts);
        assert_eq!(k.reinstalls, 3);
        for n in [DEST_NAME, IPAM_DEST_NAME] {
            assert_eq!(
                fs::read(dir.join(n)).unwrap(),
                fs::read(&src).unwrap(),
                "{n}"
            );
        }
        fs::copy(&src, dir.join("y.tmp")).unwrap();
        fs::rename(dir.join("y.tmp"), &dst).unwrap();
        k.check(&opts);
        assert_eq!(
            k.reinstalls, 3,
            "the same content under a new inode is kept"
        );
        k.check(&opts);
        assert_eq!(k.reinstalls, 3);
    }
}
