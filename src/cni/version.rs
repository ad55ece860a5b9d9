//! CNI spec versions this plugin speaks and the VERSION reply (SPEC.md "VERSION").

use super::error::{code, CniError};
use serde_json::{json, Value};

/// A supported CNI specification version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// 0.1.0 (result: `ip4`/`ip6` objects, libcni `pkg/types/020`)
    V0_1_0,
    /// 0.2.0 (same result form as 0.1.0)
    V0_2_0,
    /// 0.3.0
    V0_3_0,
    /// 0.3.1
    V0_3_1,
    /// 0.4.0 (adds CHECK)
    V0_4_0,
    /// 1.0.0 (drops `ips[].version`)
    V1_0_0,
    /// 1.1.0 (adds GC, STATUS, `interfaces[].pciID/mtu/socketPath`)
    V1_1_0,
}

impl Version {
    /// `Ok` when this (the configuration's `cniVersion`) is at least `min`; else code 1
    /// (incompatible version, SPEC.md "Error codes"), saying `"{needs}, got {self}"`,
    /// e.g. `needs` = "GC needs cniVersion 1.1.0".
    pub fn require(self, min: Version, needs: &str) -> Result<(), CniError> {
        if self < min {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("{needs}, got {}", self.as_str()),
            ));
        }
        Ok(())
    }

    /// Every supported version, oldest first (the VERSION reply's `supportedVersions`);
    /// the list of libcni `pkg/version` `All`, which the Go plugin's skel accepts.
    pub const ALL: [Version; 7] = [
        Version::V0_1_0,
        Version::V0_2_0,
        Version::V0_3_0,
        Version::V0_3_1,
        Version::V0_4_0,
        Version::V1_0_0,
        Version::V1_1_0,
    ];

    /// The newest supported version.
    pub const LATEST: Version = Version::V1_1_0;

    /// The dotted version string.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_1_0 => "0.1.0",
            Version::V0_2_0 => "0.2.0",
            Version::V0_3_0 => "0.3.0",
            Version::V0_3_1 => "0.3.1",
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }
}

/// Parses a `cniVersion` string.
///
/// Errors: code 1 (incompatible version) for anything not in [`Version::ALL`].
pub fn parse_version(s: &str) -> Result<Version, CniError> {
    Version::ALL
        .into_iter()
        .find(|v| v.as_str() == s)
        .ok_or_else(|| {
            CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "cniVersion {s:?} is not supported; supported: {}",
                    Version::ALL.map(|v| v.as_str()).join(", ")
                ),
            )
        })
}

/// The VERSION reply: `{"cniVersion": <requested or latest>, "supportedVersions": [...]}`.
pub fn version_reply(requested: Option<&str>) -> Value {
    let cni_version = requested
        .and_then(|r| parse_version(r).ok())
        .unwrap_or(Version::LATEST);
    json!({
        "cniVersion": cni_version.as_str(),
        "supportedVersions": Version::ALL.map(|v| v.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_supported_and_rejects_others_with_code_1() {
        for v in Version::ALL {
            assert_eq!(parse_version(v.as_str()).unwrap(), v);
        }
        for bad in ["0.0.1", "1.2.0", "", "1.0", "0.2"] {
            assert_eq!(parse_version(bad).unwrap_err().code, 1, "{bad}");
        }
    }

    #[test]
    fn version_reply_lists_all() {
        let r = version_reply(Some("0.4.0"));
        assert_eq!(r["cniVersion"], "0.4.0");
        assert_eq!(
            r["supportedVersions"],
            json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
        );
        assert_eq!(version_reply(None)["cniVersion"], "1.1.0");
    }
}
