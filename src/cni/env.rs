//! The CNI environment (SPEC.md "Parameters"): `CNI_COMMAND`, `CNI_CONTAINERID`,
//! `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS`, `CNI_PATH`.

use super::args::CniArgs;
use super::error::CniError;
use std::collections::HashMap;

/// A CNI verb (SPEC.md "CNI Operations").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach the VF to the container.
    Add,
    /// Detach and restore; must succeed when things are already gone.
    Del,
    /// Verify an attachment (cniVersion >= 0.4.0).
    Check,
    /// Report the supported versions.
    Version,
    /// Garbage-collect stale attachments (cniVersion 1.1.0).
    Gc,
    /// Report readiness to serve ADD (cniVersion 1.1.0).
    Status,
}

impl Command {
    /// Parses the `CNI_COMMAND` value (exact, upper case as the spec defines them).
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            _ => return None,
        })
    }

    /// The `CNI_COMMAND` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Gc => "GC",
            Command::Status => "STATUS",
        }
    }
}

/// The validated CNI environment of one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniEnv {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID`; empty only for VERSION, GC and STATUS.
    pub container_id: String,
    /// `CNI_NETNS`: path of the container's netns; `None` when unset or empty (allowed for DEL).
    pub netns: Option<String>,
    /// `CNI_IFNAME`: the interface name to create inside the container.
    pub ifname: String,
    /// `CNI_ARGS`, parsed.
    pub args: CniArgs,
    /// `CNI_PATH` split on `:` (where delegated plugins are searched).
    pub path: Vec<String>,
}

/// Linux `IFNAMSIZ - 1`: longest interface name (include/uapi/linux/if.h).
pub const MAX_IFNAME_LEN: usize = 15;

/// Checks a container ID the way libcni does (`pkg/utils/utils.go` ValidateContainerID):
/// non-empty, starts with an alphanumeric, then alphanumerics, `_`, `.`, `-`.
/// The ID also names journal and IPAM files, so this keeps it a safe path component.
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::env("CNI_CONTAINERID is missing"));
    }
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !first_ok || !rest_ok || id.len() > 255 {
        return Err(CniError::env(format!(
            "CNI_CONTAINERID {id:?} is invalid: it must start with a letter or digit and contain only letters, digits, '_', '.' and '-' (at most 255)"
        )));
    }
    Ok(())
}

/// Checks an interface name the way libcni does (`pkg/utils/utils.go`
/// ValidateInterfaceName) and the kernel's `dev_valid_name()` (net/core/dev.c):
/// 1..=15 bytes, not `.` or `..`, no `/`, `:` or whitespace.
pub fn validate_ifname(name: &str) -> Result<(), CniError> {
    let bad = name.is_empty()
        || name.len() > MAX_IFNAME_LEN
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace());
    if bad {
        return Err(CniError::env(format!(
            "CNI_IFNAME {name:?} is not a valid interface name: 1 to 15 characters, not '.' or '..', without '/', ':' or spaces"
        )));
    }
    Ok(())
}

impl CniEnv {
    /// Reads the process environment; see [`CniEnv::from_map`].
    pub fn from_process() -> Result<Self, CniError> {
        Self::from_map(&std::env::vars().collect())
    }

    /// Builds and validates the environment from a map of variables.
    ///
    /// Errors (code 4): missing or unknown `CNI_COMMAND`; for ADD and CHECK a missing
    /// `CNI_CONTAINERID`, `CNI_NETNS` or `CNI_IFNAME`; for DEL a missing
    /// `CNI_CONTAINERID` or `CNI_IFNAME` (`CNI_NETNS` may be empty: SPEC.md DEL);
    /// an invalid container ID or interface name; malformed `CNI_ARGS`.
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Self, CniError> {
        let get = |k: &str| vars.get(k).map(|s| s.as_str()).unwrap_or("");
        let cmd_s = get("CNI_COMMAND");
        if cmd_s.is_empty() {
            return Err(CniError::env("CNI_COMMAND is not set"));
        }
        let command = Command::parse(cmd_s).ok_or_else(|| {
            CniError::env(format!(
                "CNI_COMMAND {cmd_s:?} is unknown: expected ADD, DEL, CHECK, VERSION, GC or STATUS"
            ))
        })?;
        let container_id = get("CNI_CONTAINERID").to_string();
        let ifname = get("CNI_IFNAME").to_string();
        let netns = Some(get("CNI_NETNS").to_string()).filter(|s| !s.is_empty());
        let args = CniArgs::parse(get("CNI_ARGS"))?;
        let path = get("CNI_PATH")
            .split(':')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        match command {
            Command::Add | Command::Check | Command::Del => {
                validate_container_id(&container_id)?;
                if ifname.is_empty() {
                    return Err(CniError::env("CNI_IFNAME is missing"));
                }
                validate_ifname(&ifname)?;
                if command != Command::Del && netns.is_none() {
                    return Err(CniError::env(format!(
                        "CNI_NETNS is missing: {} needs the container's network namespace path",
                        command.as_str()
                    )));
                }
            }
            Command::Version | Command::Gc | Command::Status => {}
        }
        Ok(CniEnv {
            command,
            container_id,
            netns,
            ifname,
            args,
            path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<CniEnv, CniError> {
        CniEnv::from_map(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn add_needs_container_netns_ifname() {
        let ok = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "abc-1"),
            ("CNI_NETNS", "/var/run/netns/p"),
            ("CNI_IFNAME", "net1"),
            ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ])
        .unwrap();
        assert_eq!(ok.command, Command::Add);
        assert_eq!(ok.path, vec!["/opt/cni/bin", "/usr/lib/cni"]);
        for missing in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"] {
            let mut v = vec![
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "abc"),
                ("CNI_NETNS", "/x"),
                ("CNI_IFNAME", "net1"),
            ];
            v.retain(|(k, _)| *k != missing);
            let e = env(&v).unwrap_err();
            assert_eq!(e.code, 4, "{missing}");
            assert!(e.msg.contains(missing), "{}", e.msg);
        }
    }

    #[test]
    fn del_allows_empty_netns() {
        let e = env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_NETNS", ""),
            ("CNI_IFNAME", "net1"),
        ])
        .unwrap();
        assert_eq!(e.netns, None);
    }

    #[test]
    fn version_needs_nothing_else() {
        assert_eq!(
            env(&[("CNI_COMMAND", "VERSION")]).unwrap().command,
            Command::Version
        );
    }

    #[test]
    fn unknown_or_missing_command_is_code_4() {
        assert_eq!(env(&[]).unwrap_err().code, 4);
        assert_eq!(env(&[("CNI_COMMAND", "add")]).unwrap_err().code, 4);
    }

    #[test]
    fn container_id_and_ifname_rules() {
        for bad in ["", "-abc", "../etc", "a/b", "a b", ".x"] {
            assert!(validate_container_id(bad).is_err(), "{bad:?}");
        }
        for good in ["abc", "0123abc_.-x", "k8s_POD_x"] {
            validate_container_id(good).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen-chars-xx"] {
            assert!(validate_ifname(bad).is_err(), "{bad:?}");
        }
        validate_ifname("net1").unwrap();
        validate_ifname("fifteen-chars-x").unwrap();
    }
}
