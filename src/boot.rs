//! The boot this process runs in, which stamps state that lives exactly as long as the
//! kernel state it describes: journals (netns moves, RDMA moves, PF-side VF GUIDs and
//! link state are all gone after a reboot) and the built-in IPAM's allocations (every
//! pod netns of the node died with the boot).
//!
//! Facts:
//! - `/proc/sys/kernel/random/boot_id`: a random UUID the kernel draws once per boot
//!   (Documentation/admin-guide/sysctl/kernel.rst, "random"; `proc_do_uuid()` in
//!   drivers/char/random.c), 36 characters and a newline;
//! - `/proc/stat` line `btime <seconds>`: the boot time in seconds since the epoch
//!   (Documentation/filesystems/proc.rst, "1.8 Miscellaneous kernel statistics"),
//!   derived from the current wall clock minus the time since boot.
//!
//! Test seam: with the cargo feature `failpoints` (test builds only; the release binary
//! has no such input), `IB_SRIOV_TEST_BOOT_ID` replaces the kernel's boot ID, so a test
//! can make state look as if written in another boot.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the kernel publishes the boot ID.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Environment variable that replaces the boot ID in test builds (feature `failpoints`).
#[cfg(feature = "failpoints")]
pub const TEST_BOOT_ID_ENV: &str = "IB_SRIOV_TEST_BOOT_ID";

/// The boot ID of the running kernel (lowercase UUID text, no newline), read once per
/// process; `None` when `/proc` is not mounted or the file is unreadable or not a UUID
/// (then nothing is judged stale: state of unknown boot is kept).
pub fn id() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        #[cfg(feature = "failpoints")]
        if let Some(v) = std::env::var_os(TEST_BOOT_ID_ENV) {
            return parse_id(v.to_str().unwrap_or_default());
        }
        let text = crate::fsutil::read_text(std::path::Path::new(BOOT_ID_PATH)).ok()?;
        parse_id(&text)
    })
    .as_deref()
}

/// `text` as a boot ID: a UUID (8-4-4-4-12 hex digits) after trimming, lowercased;
/// `None` for anything else (an empty or torn marker, a foreign file).
pub fn parse_id(text: &str) -> Option<String> {
    let t = text.trim();
    let groups: Vec<&str> = t.split('-').collect();
    let shape = [8, 4, 4, 4, 12];
    let ok = groups.len() == shape.len()
        && groups
            .iter()
            .zip(shape)
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then(|| t.to_ascii_lowercase())
}

/// True when `recorded` names a boot other than the running one. `None` (state written
/// before boot IDs were recorded) and an unknown current boot are never "other".
pub fn is_other(recorded: Option<&str>) -> bool {
    match (recorded, id()) {
        (Some(r), Some(now)) => !r.eq_ignore_ascii_case(now),
        _ => false,
    }
}

/// The boot time from `/proc/stat` (`btime`), or `None` when unreadable. It follows
/// the wall clock: a clock stepped after boot moves it by the same amount.
pub fn boot_time() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_btime(&stat)
}

fn parse_btime(stat: &str) -> Option<SystemTime> {
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_ids_are_uuids() {
        assert_eq!(
            parse_id("5F6C2E0A-1b2c-4d5e-8f90-0123456789ab\n").as_deref(),
            Some("5f6c2e0a-1b2c-4d5e-8f90-0123456789ab")
        );
        for bad in [
            "",
            "\n",
            "not-a-uuid",
            "5f6c2e0a1b2c4d5e8f900123456789ab",
            "5f6c2e0a-1b2c-4d5e-8f90-0123456789ag",
            "5f6c2e0a-1b2c-4d5e-8f90-0123456789ab-00",
        ] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_running_kernel_has_a_boot_id_and_a_boot_time() {
        let id = id().expect("/proc/sys/kernel/random/boot_id");
        assert_eq!(parse_id(id).as_deref(), Some(id));
        assert!(!is_other(Some(id)));
        assert!(!is_other(None));
        assert!(is_other(Some("00000000-0000-4000-8000-000000000000")));
        let bt = boot_time().expect("btime");
        assert!(bt < SystemTime::now());
    }

    #[test]
    fn btime_is_read_from_its_line() {
        let stat = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(
            parse_btime(stat),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(parse_btime("cpu 1\n"), None);
        assert_eq!(parse_btime("btime x\n"), None);
    }
}
