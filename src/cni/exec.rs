//! Delegation: running another CNI plugin (an IPAM plugin) the way a runtime would
//! (SPEC.md "Section 4: Plugin Delegation": the delegate is found by its `type` on
//! `CNI_PATH`, gets the same configuration on stdin and the same environment, with
//! `CNI_COMMAND` set to the verb being delegated).
//!
//! This layer knows nothing of VFs: the plugin layer decides when to call what.

use super::env::{CniEnv, Command};
use super::error::{code, CniError};
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// This plugin's own `type` (and binary name on `CNI_PATH`): never a delegate.
pub const OWN_TYPE: &str = "ib-sriov";

/// Set to `1` in the environment of every delegated plugin ([`Delegate::run`]). If this
/// executable starts with it set (it was run, directly or through a copy or a wrapper,
/// as the IPAM plugin of itself), the entry point (src/cli.rs) fails at once with code 7
/// for every command but VERSION: that breaks a delegation loop after one fork.
pub const DELEGATED_ENV: &str = "IB_SRIOV_DELEGATED";

/// How long a delegated plugin may run before it is killed (whereabouts and nv-ipam talk
/// to the Kubernetes API; host-local answers in milliseconds). Past it the call is code
/// 11, so the runtime retries; the journal keeps what the rollback or DEL still owes.
pub const DELEGATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Largest output of a delegate read, per stream (a result is a few KiB).
pub const MAX_DELEGATE_OUTPUT: u64 = 4 << 20;

/// A delegated plugin found on `CNI_PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegate {
    /// The plugin's `type` (its file name on `CNI_PATH`).
    pub plugin_type: String,
    /// Absolute path of the executable.
    pub path: PathBuf,
}

/// `(st_dev, st_ino)` of the running executable (`/proc/self/exe`, which the kernel
/// resolves to the file that was executed); `None` without procfs.
fn own_executable() -> Option<(u64, u64)> {
    std::fs::metadata("/proc/self/exe")
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Delegate {
    /// Finds the executable named `plugin_type` in the directories of `cni_path`
    /// (first match wins, like libcni `invoke.FindInPath`; symlinks are followed).
    ///
    /// Errors (code 7, invalid config): a type that is empty or contains `/` or is `.`/`..`
    /// (it must be a file name); the type [`OWN_TYPE`] (`ib-sriov` would delegate to
    /// itself without end); an empty `CNI_PATH`; no executable regular file of that name
    /// in any of its directories; a first match that is the running executable itself
    /// (same `(st_dev, st_ino)` as `/proc/self/exe`: a symlink or hard link to this
    /// plugin under another name). A byte-for-byte copy under another name is not
    /// recognised here; it refuses to run as a delegate ([`DELEGATED_ENV`]).
    pub fn find(plugin_type: &str, cni_path: &[String]) -> Result<Delegate, CniError> {
        if plugin_type.is_empty()
            || plugin_type.contains('/')
            || plugin_type == "."
            || plugin_type == ".."
        {
            return Err(CniError::config(format!(
                "ipam type {plugin_type:?} is not a plugin name"
            )));
        }
        if plugin_type == OWN_TYPE {
            return Err(CniError::config(format!(
                "ipam type {OWN_TYPE:?} is this plugin itself (it would delegate to itself without end); use \"ib-sriov-ipam\" for the built-in allocator or an IPAM plugin such as host-local"
            )));
        }
        let dirs: Vec<&String> = cni_path.iter().filter(|d| !d.is_empty()).collect();
        if dirs.is_empty() {
            return Err(CniError::config(format!(
                "ipam plugin {plugin_type:?} cannot be found: CNI_PATH is empty"
            )));
        }
        for d in &dirs {
            let p = Path::new(d.as_str()).join(plugin_type);
            if let Ok(md) = std::fs::metadata(&p) {
                if md.is_file() && md.permissions().mode() & 0o111 != 0 {
                    if own_executable() == Some((md.dev(), md.ino())) {
                        return Err(CniError::config(format!(
                            "ipam plugin {plugin_type:?} ({}) is this plugin's own executable (it would delegate to itself without end); use \"ib-sriov-ipam\" for the built-in allocator or an IPAM plugin such as host-local",
                            p.display()
                        )));
                    }
                    return Ok(Delegate {
                        plugin_type: plugin_type.to_string(),
                        path: p,
                    });
                }
            }
        }
        Err(CniError::config(format!(
            "ipam plugin {plugin_type:?} not found in CNI_PATH ({}); install it there or use another ipam type",
            cni_path.join(":")
        )))
    }

    /// True when the delegate's VERSION reply lists `version` in `supportedVersions`
    /// (SPEC.md "VERSION"). GC and STATUS (1.1.0) are sent only to delegates that list
    /// 1.1.0: an older one (Debian's host-local 1.1.1) answers them with "unknown
    /// CNI_COMMAND", which says nothing about the network.
    ///
    /// Errors: as [`Delegate::run`] for the VERSION call.
    pub fn supports(&self, env: &CniEnv, version: &str) -> Result<bool, CniError> {
        let stdin = serde_json::json!({ "cniVersion": version }).to_string();
        let reply = self.run(Command::Version, env, stdin.as_bytes())?;
        Ok(reply
            .as_ref()
            .and_then(|r| r.get("supportedVersions"))
            .and_then(serde_json::Value::as_array)
            .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(version))))
    }

    /// Runs the delegate with `command`, the environment of `env` (`CNI_COMMAND`,
    /// `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS` as received, `CNI_PATH`;
    /// the rest of this process's environment is inherited, e.g. `KUBECONFIG` for
    /// whereabouts), [`DELEGATED_ENV`]`=1`, and `stdin`, and waits for it.
    ///
    /// Returns the JSON it printed on success (`None` when stdout is empty, as for DEL,
    /// CHECK, GC and STATUS). On a non-zero exit the delegate's error object (SPEC.md
    /// "Error") is returned with its own code and the message prefixed with the plugin
    /// name; without a parsable error object, code 103 with the exit status and stderr.
    pub fn run(
        &self,
        command: Command,
        env: &CniEnv,
        stdin: &[u8],
    ) -> Result<Option<Value>, CniError> {
        self.run_within(command, env, stdin, DELEGATE_TIMEOUT)
    }

    /// [`Delegate::run`], killing the delegate after `limit` (code 11) rather than
    /// [`DELEGATE_TIMEOUT`]: DEL gives it only what is left of its time bound
    /// ([`crate::plugin::Ctx::bounded`]).
    pub fn run_within(
        &self,
        command: Command,
        env: &CniEnv,
        stdin: &[u8],
        limit: std::time::Duration,
    ) -> Result<Option<Value>, CniError> {
        let name = &self.plugin_type;
        let mut cmd = std::process::Command::new(&self.path);
        cmd.env("CNI_COMMAND", command.as_str())
            .env("CNI_PATH", env.path.join(":"))
            .env("CNI_ARGS", env.args.raw())
            .env(DELEGATED_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in [
            ("CNI_CONTAINERID", &env.container_id),
            ("CNI_IFNAME", &env.ifname),
        ] {
            if v.is_empty() {
                cmd.env_remove(k);
            } else {
                cmd.env(k, v);
            }
        }
        match &env.netns {
            Some(n) => cmd.env("CNI_NETNS", n),
            None => cmd.env_remove("CNI_NETNS"),
        };
        // std resets the signal mask in the child, so the delegate stays killable even
        // while this process blocks SIGTERM/SIGINT during DEL.
        let mut child = cmd.spawn().map_err(|e| {
            CniError::new(
                code::IPAM_FAILURE,
                format!("starting ipam plugin {}: {e}", self.path.display()),
            )
        })?;
        if let Some(mut si) = child.stdin.take() {
            // A delegate that exits without reading stdin closes the pipe: not our error.
            let _ = si.write_all(stdin);
        }
        let out = wait_bounded(child, limit).map_err(|e| match e {
            WaitError::Timeout => CniError::try_later(format!(
                "ipam plugin {name} {} did not finish within {:.1} s and was killed",
                command.as_str(),
                limit.as_secs_f64()
            )),
            WaitError::Io(e) => CniError::new(
                code::IPAM_FAILURE,
                format!("waiting for ipam plugin {name}: {e}"),
            ),
        })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !stderr.trim().is_empty() {
            log::debug!(
                "ipam plugin {name} {} stderr: {}",
                command.as_str(),
                stderr.trim()
            );
        }
        if out.status.success() {
            if stdout.trim().is_empty() {
                return Ok(None);
            }
            return serde_json::from_str(&stdout).map(Some).map_err(|e| {
                CniError::new(
                    code::IPAM_FAILURE,
                    format!(
                        "ipam plugin {name} {} printed no JSON result: {e}",
                        command.as_str()
                    ),
                )
                .with_details(stdout.trim().to_string())
            });
        }
        let parsed: Option<Value> = serde_json::from_str(&stdout).ok();
        let code_of = parsed
            .as_ref()
            .and_then(|v| v.get("code"))
            .and_then(Value::as_u64)
            .filter(|c| *c > 0 && *c <= u64::from(u32::MAX));
        match (code_of, parsed.as_ref()) {
            (Some(c), Some(v)) => {
                let msg = v.get("msg").and_then(Value::as_str).unwrap_or("");
                let details = v.get("details").and_then(Value::as_str).unwrap_or("");
                Err(CniError::new(
                    c as u32,
                    format!("ipam plugin {name} {}: {msg}", command.as_str()),
                )
                .with_details(details.to_string()))
            }
            _ => Err(CniError::new(
                code::IPAM_FAILURE,
                format!(
                    "ipam plugin {name} {} failed ({})",
                    command.as_str(),
                    out.status
                ),
            )
            .with_details(format!(
                "stdout: {} stderr: {}",
                stdout.trim(),
                stderr.trim()
            ))),
        }
    }
}

enum WaitError {
    Timeout,
    Io(std::io::Error),
}

/// Waits for `child` at most `limit` (then kills it), reading its stdout and stderr (each
/// up to [`MAX_DELEGATE_OUTPUT`]) in two threads so a full pipe never blocks it. A
/// grandchild that keeps the pipes open past the child's exit does not hold the call
/// beyond the same deadline.
fn wait_bounded(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> Result<std::process::Output, WaitError> {
    use std::io::Read;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + limit;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        if let Some(r) = r {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                let _ = r.take(MAX_DELEGATE_OUTPUT).read_to_end(&mut b);
                let _ = tx.send(b);
            });
        } else {
            let _ = tx.send(Vec::new());
        }
        rx
    };
    let out_rx = reader(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err_rx = reader(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(WaitError::Timeout);
            }
            Err(e) => return Err(WaitError::Io(e)),
        }
    };
    let rest = |rx: mpsc::Receiver<Vec<u8>>| {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        rx.recv_timeout(left).map_err(|_| WaitError::Timeout)
    };
    Ok(std::process::Output {
        status,
        stdout: rest(out_rx)?,
        stderr: rest(err_rx)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn env(path: &Path) -> CniEnv {
        let m: HashMap<String, String> = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/var/run/netns/x"),
            ("CNI_IFNAME", "net1"),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=p"),
            ("CNI_PATH", &format!("/nonexistent:{}", path.display())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        CniEnv::from_map(&m).unwrap()
    }

    #[test]
    fn finds_the_first_executable_on_the_path() {
        let d = tempfile::tempdir().unwrap();
        let e = env(d.path());
        std::fs::write(d.path().join("plain"), "not executable").unwrap();
        let p = script(d.path(), "good", "exit 0");
        assert_eq!(Delegate::find("good", &e.path).unwrap().path, p);
        for bad in ["plain", "missing", "../good", "", ".."] {
            let err = Delegate::find(bad, &e.path).unwrap_err();
            assert_eq!(err.code, code::INVALID_CONFIG, "{bad}: {err:?}");
        }
        assert_eq!(
            Delegate::find("good", &[]).unwrap_err().code,
            code::INVALID_CONFIG
        );
    }

    #[test]
    fn passes_verb_environment_and_stdin_and_reads_the_result() {
        let d = tempfile::tempdir().unwrap();
        let e = env(d.path());
        let out = d.path().join("seen");
        script(
            d.path(),
            "echoer",
            &format!(
                "{{ echo \"$CNI_COMMAND|$CNI_CONTAINERID|$CNI_NETNS|$CNI_IFNAME|$CNI_ARGS|$CNI_PATH|$IB_SRIOV_DELEGATED\"; cat; }} > {}\necho '{{\"cniVersion\":\"1.0.0\",\"ips\":[]}}'",
                out.display()
            ),
        );
        let del = Delegate::find("echoer", &e.path).unwrap();
        let v = del.run(Command::Del, &e, b"{\"x\":1}").unwrap().unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        let seen = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            seen,
            format!(
                "DEL|c1|/var/run/netns/x|net1|IgnoreUnknown=1;K8S_POD_NAME=p|/nonexistent:{}|1\n{{\"x\":1}}",
                d.path().display()
            )
        );
    }

    #[test]
    fn empty_stdout_is_none_and_errors_keep_the_delegates_code() {
        let d = tempfile::tempdir().unwrap();
        let e = env(d.path());
        script(d.path(), "quiet", "cat >/dev/null; exit 0");
        script(
            d.path(),
            "failing",
            "echo '{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"busy\",\"details\":\"d\"}'; exit 1",
        );
        script(d.path(), "crashing", "echo boom >&2; exit 2");
        let q = Delegate::find("quiet", &e.path).unwrap();
        assert_eq!(q.run(Command::Check, &e, b"{}").unwrap(), None);
        let f = Delegate::find("failing", &e.path).unwrap();
        let err = f.run(Command::Add, &e, b"{}").unwrap_err();
        assert_eq!(err.code, 11);
        assert!(err.msg.contains("failing ADD: busy"), "{err:?}");
        assert_eq!(err.details, "d");
        let c = Delegate::find("crashing", &e.path).unwrap();
        let err = c.run(Command::Add, &e, b"{}").unwrap_err();
        assert_eq!(err.code, code::IPAM_FAILURE);
        assert!(err.details.contains("boom"), "{err:?}");
    }

    #[test]
    fn refuses_its_own_type_and_its_own_executable_under_another_name() {
        let d = tempfile::tempdir().unwrap();
        let e = env(d.path());
        // Even when a file of that name exists on the path.
        script(d.path(), OWN_TYPE, "exit 0");
        let err = Delegate::find(OWN_TYPE, &e.path).unwrap_err();
        assert_eq!(err.code, code::INVALID_CONFIG);
        assert!(err.msg.contains("this plugin itself"), "{err:?}");
        // A symlink and a hard link to the running executable (here: the test binary).
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        std::os::unix::fs::symlink(&exe, d.path().join("loop-ipam")).unwrap();
        let err = Delegate::find("loop-ipam", &e.path).unwrap_err();
        assert_eq!(err.code, code::INVALID_CONFIG);
        assert!(err.msg.contains("own executable"), "{err:?}");
        assert!(err.msg.contains("loop-ipam"), "{err:?}");
        if std::fs::hard_link(&exe, d.path().join("hard-ipam")).is_ok() {
            let err = Delegate::find("hard-ipam", &e.path).unwrap_err();
            assert!(err.msg.contains("own executable"), "{err:?}");
        }
    }
}

#[cfg(test)]
mod wait_tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn spawn(script: &str) -> std::process::Child {
        std::process::Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_delegate_past_its_deadline_is_killed() {
        let t = Instant::now();
        let r = wait_bounded(spawn("sleep 30"), Duration::from_millis(200));
        assert!(matches!(r, Err(WaitError::Timeout)));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn a_grandchild_holding_the_pipe_does_not_hold_the_call() {
        let t = Instant::now();
        let r = wait_bounded(
            spawn("(sleep 30 &) ; echo done"),
            Duration::from_millis(300),
        );
        assert!(matches!(r, Err(WaitError::Timeout)));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn output_and_status_of_a_quick_delegate() {
        let o = wait_bounded(
            spawn("echo out; echo err >&2; exit 3"),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|_| panic!("no output"));
        assert_eq!(o.stdout, b"out\n");
        assert_eq!(o.stderr, b"err\n");
        assert_eq!(o.status.code(), Some(3));
    }
}
