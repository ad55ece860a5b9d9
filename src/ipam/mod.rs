//! Built-in IPAM (`"ipam": {"type": "ib-sriov-ipam", ...}`): a file-locked,
//! in-process address allocator with host-local's configuration schema and
//! host-local's exact on-disk format, so operators can inspect it and switch
//! between host-local and this allocator in either direction.
//!
//! Reference: containernetworking/plugins `plugins/ipam/host-local`
//! (`backend/allocator/{config,range,range_set,allocator}.go`,
//! `backend/disk/{backend,lock}.go`, `main.go`).
//!
//! Layout (one job per file, like host-local's backend):
//! * `config.rs` — the `ipam` JSON object → [`IpamConfig`].
//! * `range.rs` — one range of a subnet ([`Range`]).
//! * `range_set.rs` — a set of ranges and its round-robin iterator ([`RangeSet`]).
//! * `allocator.rs` — allocate / release / lookup / list / free counts.
//! * `disk.rs` — the per-network directory and its files.
//! * `lock.rs` — the `flock` on `<dataDir>/<network>/lock` with a timeout.
//! * `names.rs` — validation of network name, container ID and ifname.
//! * `error.rs` — [`IpamError`].
//!
//! On disk (`<dataDir>` defaults to `/var/lib/cni/networks`):
//! `<dataDir>/<network>/<ip>` holds `"<containerID>\r\n<ifname>"`,
//! `<dataDir>/<network>/last_reserved_ip.<rangeset index>` holds the last
//! address handed out from that range set, `<dataDir>/<network>/lock` is the
//! flock'ed lock file. Logging goes through the `log` crate only (stdout
//! belongs to the CNI result).

mod allocator;
mod config;
mod disk;
mod error;
mod lock;
mod names;
mod range;
mod range_set;

#[cfg(test)]
mod multiprocess_tests;
#[cfg(test)]
mod proptests;

pub use allocator::{AllocatedIp, Allocation, QUERY_LOCK_TIMEOUT};
pub use config::{
    errors as config_errors, validate_data_dir, warnings as config_warnings, IpamConfig,
    RouteConfig,
};
pub use disk::{
    DiskStore, Record, BOOT_MARKER_FILE, DEFAULT_DATA_DIR, LAST_IP_FILE_PREFIX, LINE_BREAK,
};
pub use error::IpamError;
pub use lock::LOCK_FILE_NAME;
pub use names::{validate_container_id, validate_ifname, validate_network_name};
pub use range::Range;
pub use range_set::{RangeIter, RangeSet};

/// The `ipam.type` value that selects this built-in allocator instead of
/// delegating to an external IPAM binary.
pub const BUILTIN_TYPE: &str = "ib-sriov-ipam";

/// Whether an `ipam` object selects the built-in allocator
/// (`ipam.type == "ib-sriov-ipam"`).
pub fn is_builtin(ipam: &serde_json::Value) -> bool {
    ipam.get("type").and_then(|t| t.as_str()) == Some(BUILTIN_TYPE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_type_detection() {
        assert!(is_builtin(&json!({"type": "ib-sriov-ipam"})));
        assert!(!is_builtin(&json!({"type": "host-local"})));
        assert!(!is_builtin(&json!({})));
        assert!(!is_builtin(&json!("ib-sriov-ipam")));
    }
}
