//! CNI error values and codes (CNI SPEC.md, section "Error").
//!
//! An error reaches the runtime as `{"cniVersion", "code", "msg", "details"}` on stdout
//! with a non-zero exit status. Codes 1-99 are the spec's; 100 and up are this plugin's.

use serde::Serialize;
use std::fmt;

/// Well-known error codes (SPEC.md "Well-known Error Codes") and this plugin's own (>= 100).
pub mod code {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Container unknown or does not exist.
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid necessary environment variables (CNI_COMMAND, CNI_CONTAINERID, ...).
    pub const INVALID_ENV: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content (stdin is not JSON / not a network configuration).
    pub const DECODE_FAILURE: u32 = 6;
    /// Invalid network config.
    pub const INVALID_CONFIG: u32 = 7;
    /// Try again later: a transient condition (lock timeout, pod not yet annotated).
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin is not available to serve ADD requests.
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// STATUS: limited connectivity (not used by this plugin).
    pub const LIMITED_CONNECTIVITY: u32 = 51;
    /// Plugin: an internal error (a caught panic or a broken invariant).
    pub const INTERNAL: u32 = 100;
    /// Plugin: the VF is held by another attachment.
    pub const DEVICE_BUSY: u32 = 101;
    /// Plugin: a host operation (netlink, sysfs write, driver rebind, netns) failed.
    pub const HOST_OPERATION: u32 = 102;
    /// Plugin: IPAM failed (pool exhausted, store error, delegate failure).
    pub const IPAM_FAILURE: u32 = 103;
    /// Plugin: CHECK found the attachment not as configured.
    pub const CHECK_FAILED: u32 = 104;
}

/// A CNI error: a code, a one-line message and optional details (SPEC.md "Error").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CniError {
    /// Numeric code: see [`code`].
    pub code: u32,
    /// Short message naming the object and, where possible, the fix.
    pub msg: String,
    /// Longer context: the undo errors of a rolled-back ADD, the cause chain, ...
    #[serde(skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    /// An error with `code` and `msg` and no details.
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Code 7, invalid network configuration.
    pub fn config(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_CONFIG, msg)
    }

    /// Code 4, invalid environment.
    pub fn env(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_ENV, msg)
    }

    /// Code 11, try again later.
    pub fn try_later(msg: impl Into<String>) -> Self {
        Self::new(code::TRY_AGAIN_LATER, msg)
    }

    /// Code 102, a host operation failed.
    pub fn host(msg: impl Into<String>) -> Self {
        Self::new(code::HOST_OPERATION, msg)
    }

    /// Code 100, internal error.
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(code::INTERNAL, msg)
    }

    /// Returns the error with `details` set (replacing any previous details).
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Serialises the error in the wire form for `cni_version`.
    pub fn to_json(&self, cni_version: &str) -> serde_json::Value {
        let mut v = serde_json::json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
        });
        if !self.details.is_empty() {
            v["details"] = serde_json::Value::String(self.details.clone());
        }
        v
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}

/// Result alias used throughout the plugin.
pub type CniResult<T> = Result<T, CniError>;
