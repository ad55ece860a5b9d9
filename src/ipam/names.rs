//! Validation of the caller-supplied names that reach the filesystem.
//!
//! The network name becomes a directory under `dataDir`
//! (host-local backend/disk/backend.go: `filepath.Join(dataDir, network)`);
//! the container ID and the interface name are written into the per-IP files
//! as `"<containerID>\r\n<ifname>"`. host-local itself does not validate them;
//! we do, before any file access, so that a hostile or broken runtime cannot
//! escape `dataDir` or corrupt the record format.

use super::error::IpamError;

/// Longest accepted network name or container ID, in bytes (Linux NAME_MAX).
pub const MAX_NAME_LEN: usize = 255;

/// Longest accepted interface name, in bytes (Linux IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// Common rule for a single path component: non-empty, at most
/// [`MAX_NAME_LEN`] bytes, not `.` or `..`, no `/`, no NUL, no other control
/// character.
fn check_component(what: &str, value: &str) -> Result<(), IpamError> {
    let bad = |why: &str| Err(IpamError::InvalidConfig(format!("{what} {value:?} {why}")));
    if value.is_empty() {
        return Err(IpamError::InvalidConfig(format!("{what} is empty")));
    }
    if value.len() > MAX_NAME_LEN {
        return bad(&format!(
            "is {} bytes long (max {MAX_NAME_LEN})",
            value.len()
        ));
    }
    if value == "." || value == ".." {
        return bad("is not a valid path component");
    }
    if value.contains('/') {
        return bad("contains '/'");
    }
    if value.contains('\0') {
        return bad("contains NUL");
    }
    if value.chars().any(char::is_control) {
        return bad("contains a control character");
    }
    Ok(())
}

/// Validate a network name (the `name` of the network config), used as the
/// directory `<dataDir>/<network>`.
///
/// Errors: [`IpamError::InvalidConfig`] naming the value when it is empty,
/// longer than [`MAX_NAME_LEN`] bytes, `.`/`..`, or contains `/`, NUL or a
/// control character.
pub fn validate_network_name(network: &str) -> Result<(), IpamError> {
    check_component("network name", network)
}

/// Validate a container ID (CNI_CONTAINERID).
///
/// Same rules as [`validate_network_name`], and additionally no whitespace:
/// host-local stores `strings.TrimSpace(id) + "\r\n" + ifname` and matches on
/// the trimmed file content, so whitespace would make records ambiguous.
pub fn validate_container_id(container_id: &str) -> Result<(), IpamError> {
    check_component("container ID", container_id)?;
    if container_id.chars().any(char::is_whitespace) {
        return Err(IpamError::InvalidConfig(format!(
            "container ID {container_id:?} contains whitespace"
        )));
    }
    Ok(())
}

/// Validate an interface name (CNI_IFNAME) with the kernel's rules
/// (`dev_valid_name()` in net/core/dev.c): 1..=15 bytes, not `.`/`..`, no `/`,
/// `:` or whitespace; we also refuse control characters.
pub fn validate_ifname(ifname: &str) -> Result<(), IpamError> {
    check_component("interface name", ifname)?;
    let bad = |why: &str| {
        Err(IpamError::InvalidConfig(format!(
            "interface name {ifname:?} {why}"
        )))
    };
    if ifname.len() > MAX_IFNAME_LEN {
        return bad(&format!(
            "is {} bytes long (max {MAX_IFNAME_LEN})",
            ifname.len()
        ));
    }
    if ifname.contains(':') {
        return bad("contains ':'");
    }
    if ifname.chars().any(char::is_whitespace) {
        return bad("contains whitespace");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(r: Result<(), IpamError>) -> String {
        match r {
            Err(IpamError::InvalidConfig(m)) => m,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn accepts_ordinary_names() {
        validate_network_name("ib-net_1.prod").unwrap();
        validate_container_id(&"a".repeat(64)).unwrap();
        validate_container_id("k8s_POD_x-1.2").unwrap();
        validate_ifname("net1").unwrap();
        validate_ifname("ib0.8001").unwrap();
        validate_ifname(&"e".repeat(15)).unwrap();
    }

    #[test]
    fn rejects_unsafe_network_names() {
        assert!(invalid(validate_network_name("")).contains("empty"));
        assert!(invalid(validate_network_name(".")).contains("\".\""));
        assert!(invalid(validate_network_name("..")).contains("\"..\""));
        assert!(invalid(validate_network_name("a/b")).contains("'/'"));
        assert!(invalid(validate_network_name("../etc")).contains("'/'"));
        assert!(invalid(validate_network_name("a\0b")).contains("NUL"));
        assert!(invalid(validate_network_name("a\nb")).contains("control"));
        assert!(invalid(validate_network_name(&"n".repeat(256))).contains("256 bytes"));
        validate_network_name(&"n".repeat(255)).unwrap();
    }

    #[test]
    fn rejects_unsafe_container_ids() {
        assert!(invalid(validate_container_id("")).contains("empty"));
        assert!(invalid(validate_container_id("..")).contains("path component"));
        assert!(invalid(validate_container_id("x/y")).contains("'/'"));
        assert!(invalid(validate_container_id("x\r\ny")).contains("control"));
        assert!(invalid(validate_container_id("x y")).contains("whitespace"));
        assert!(invalid(validate_container_id(" x")).contains("whitespace"));
    }

    #[test]
    fn rejects_bad_ifnames() {
        assert!(invalid(validate_ifname("")).contains("empty"));
        assert!(invalid(validate_ifname(&"e".repeat(16))).contains("16 bytes"));
        assert!(invalid(validate_ifname("eth:0")).contains("':'"));
        assert!(invalid(validate_ifname("eth 0")).contains("whitespace"));
        assert!(invalid(validate_ifname("a/b")).contains("'/'"));
        assert!(invalid(validate_ifname("..")).contains("path component"));
    }
}
