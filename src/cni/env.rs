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

/// Longest accepted `CNI_CONTAINERID`, in bytes (Linux `NAME_MAX`: the ID is part of
/// journal file names under `stateDir`).
pub const MAX_CONTAINER_ID_LEN: usize = 255;

/// Checks a container ID the way libcni does (`pkg/utils/utils.go` ValidateContainerID,
/// CNI SPEC.md "Parameters": "alphanumeric, plus underscore, period and hyphen"):
/// non-empty, starts with an ASCII letter or digit, then ASCII letters, digits, `_`, `.`,
/// `-`, at most [`MAX_CONTAINER_ID_LEN`] bytes. The ID also names journal and IPAM
/// files, so this keeps it a safe path component (no `/`, no `..`, no control or
/// whitespace character).
///
/// Errors: code 4 naming the value.
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::env("CNI_CONTAINERID is missing"));
    }
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !first_ok || !rest_ok || id.len() > MAX_CONTAINER_ID_LEN {
        return Err(CniError::env(format!(
            "CNI_CONTAINERID {id:?} is invalid: it must start with a letter or digit and contain only letters, digits, '_', '.' and '-' (at most {MAX_CONTAINER_ID_LEN} bytes)"
        )));
    }
    Ok(())
}

/// A byte the kernel's `isspace()` accepts (lib/ctype.c `_ctype[]`: `\t\n\v\f\r`,
/// space, and 0xA0, Latin-1 no-break space), which `dev_valid_name()` refuses.
fn kernel_isspace(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' | 0xa0)
}

/// Checks an interface name with the kernel's `dev_valid_name()` (net/core/dev.c), byte
/// by byte as the kernel does, plus libcni's `ValidateInterfaceName`
/// (`pkg/utils/utils.go`): 1..=15 bytes ([`MAX_IFNAME_LEN`]), not `.` or `..`, no `/`,
/// `:`, NUL or kernel whitespace byte (which includes 0xA0, so also the UTF-8
/// characters that contain that byte); and, beyond the kernel, no control character
/// (C0 or DEL), which would corrupt the IPAM record `"<containerID>\r\n<ifname>"` and
/// log lines.
///
/// Errors: code 4 naming the value and the rule.
pub fn validate_ifname(name: &str) -> Result<(), CniError> {
    let bad = name.is_empty()
        || name.len() > MAX_IFNAME_LEN
        || name == "."
        || name == ".."
        || name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_control() || kernel_isspace(b));
    if bad {
        return Err(CniError::env(format!(
            "CNI_IFNAME {name:?} is not a valid interface name: 1 to 15 bytes, not '.' or '..', without '/', ':', spaces or control characters"
        )));
    }
    Ok(())
}

impl CniEnv {
    /// Reads the `CNI_*` variables of the process environment; see
    /// [`CniEnv::from_map`]. Variables with other names are not looked at (a non-UTF-8
    /// one elsewhere in the environment does not matter).
    ///
    /// Errors: code 4 when one of [`CniEnv::VARS`] is not valid UTF-8 (naming it), else as
    /// [`CniEnv::from_map`].
    pub fn from_process() -> Result<Self, CniError> {
        let mut vars = HashMap::new();
        // Each variable by name (std::env::var_os), not a copy of the whole environment:
        // a runtime's environment can be long, and only these are read.
        for k in Self::VARS {
            if let Some(v) = std::env::var_os(k) {
                let v = v
                    .into_string()
                    .map_err(|_| CniError::env(format!("{k} is not valid UTF-8")))?;
                vars.insert(k.to_string(), v);
            }
        }
        Self::from_map(&vars)
    }

    /// The variables of SPEC.md "Parameters" that [`CniEnv::from_map`] reads.
    pub const VARS: [&'static str; 6] = [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_PATH",
    ];

    /// Builds and validates the environment from a map of variables.
    ///
    /// Errors (code 4): missing or unknown `CNI_COMMAND`; for ADD and CHECK a missing
    /// `CNI_CONTAINERID`, `CNI_NETNS` or `CNI_IFNAME`; for DEL a missing
    /// `CNI_CONTAINERID` or `CNI_IFNAME` (`CNI_NETNS` may be empty: SPEC.md DEL);
    /// an invalid container ID or interface name ([`validate_container_id`],
    /// [`validate_ifname`]). `CNI_ARGS` never fails ([`CniArgs::parse`] skips malformed
    /// segments) and is not even parsed for VERSION, which needs nothing but
    /// `CNI_COMMAND`.
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
        let args = match command {
            Command::Version => CniArgs::default(),
            _ => CniArgs::parse(get("CNI_ARGS")),
        };
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
        validate_ifname("ib0.8001").unwrap();
        validate_container_id(&"a".repeat(MAX_CONTAINER_ID_LEN)).unwrap();
        assert!(validate_container_id(&"a".repeat(MAX_CONTAINER_ID_LEN + 1)).is_err());
    }

    #[test]
    fn ifname_refuses_what_dev_valid_name_refuses_and_control_characters() {
        for bad in [
            "net\u{1}",
            "net\u{7f}",
            "a\tb",
            "a\nb",
            "a\rb",
            "a\u{b}b",
            "a\u{c}b",
            "a\0b",
            // U+00E0 is C3 A0 in UTF-8: the kernel's isspace() takes 0xA0 for a space.
            "n\u{e0}t",
            // 16 bytes in 8 characters.
            "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}",
        ] {
            let e = validate_ifname(bad).unwrap_err();
            assert_eq!(e.code, 4, "{bad:?}");
            assert!(e.msg.contains("CNI_IFNAME"), "{bad:?}: {}", e.msg);
        }
        // Other non-ASCII bytes are valid for the kernel.
        validate_ifname("n\u{e9}t").unwrap();
    }

    #[test]
    fn malformed_cni_args_never_fail_and_version_does_not_parse_them() {
        let e = env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_IFNAME", "net1"),
            ("CNI_ARGS", "garbage;K8S_POD_NAME=p;=x"),
        ])
        .unwrap();
        assert_eq!(e.args.get("K8S_POD_NAME"), Some("p"));
        assert_eq!(e.args.skipped(), &["garbage", "=x"]);
        let v = env(&[("CNI_COMMAND", "VERSION"), ("CNI_ARGS", "garbage")]).unwrap();
        assert_eq!(v.args, CniArgs::default());
    }
}
