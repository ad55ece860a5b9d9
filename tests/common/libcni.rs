//! The libcni driver (tests/libcni/main.go: a cnitool-like program on Debian's libcni,
//! the library of cnitool, containerd, CRI-O and Multus) and the dra-driver-sriov
//! stand-in (tests/libcni/dra-standin), each built once per test binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The libcni driver, built on first use (once per test binary). Panics with the build's
/// output when it cannot be built.
pub fn driver() -> &'static Path {
    static DRIVER: OnceLock<PathBuf> = OnceLock::new();
    DRIVER.get_or_init(|| build("libcni-driver", "."))
}

/// The dra-driver-sriov stand-in (tests/libcni/dra-standin/main.go: ADD/DEL through
/// libcni as that DRA driver makes them), built on first use. Panics with the build's
/// output when it cannot be built.
pub fn dra_standin() -> &'static Path {
    static DRA: OnceLock<PathBuf> = OnceLock::new();
    DRA.get_or_init(|| build("dra-standin", "./dra-standin"))
}

/// Builds Go package `pkg` of tests/libcni with tests/libcni/build.sh as `name` under
/// the test target's temp dir.
fn build(name: &str, pkg: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libcni-driver");
    let out = dir.join(name);
    // Built under a per-process name and renamed into place, so that two test runs
    // building at once never execute a half-written binary.
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/libcni/build.sh");
    let build = Command::new(&script)
        .arg(&tmp)
        .arg(pkg)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        build.status.success(),
        "building {name} with {} failed ({}):\n{}{}",
        script.display(),
        build.status,
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    std::fs::rename(&tmp, &out)
        .unwrap_or_else(|e| panic!("renaming {} into place: {e}", tmp.display()));
    out
}
