//! Executable stand-ins the suites install: delegated IPAM plugins and wrappers around
//! the binary under test, as shell scripts.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Writes `text` as the file `name` in `dir` (created when missing) and makes it
/// executable (mode 0755). Returns its path. Panics when a step fails.
#[track_caller]
pub fn install_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {dir:?}: {e}"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {path:?}: {e}"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {path:?}: {e}"));
    path
}
