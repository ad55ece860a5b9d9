//! Build script: records what `ib-sriov --version` prints.
//!
//! - `IB_SRIOV_COMMIT`: the `IB_SRIOV_COMMIT` environment variable when set (a build from
//!   a tarball), else the git commit (`git rev-parse --short=12 HEAD`), else `unknown`.
//!   Uncommitted changes are not flagged: watching the index would rebuild the whole
//!   package at every `git add`.
//! - `IB_SRIOV_BUILD_DATE`: UTC, RFC 3339. `SOURCE_DATE_EPOCH` when set
//!   (reproducible-builds.org), else the time this script ran.
//!
//! - `IB_SRIOV_BUILD_VERSION`, what `crate::version()` (src/lib.rs) returns:
//!   `IB_SRIOV_VERSION` when set and not empty (scripts/release.sh sets it: `X.Y.Z` for
//!   a release built from its tag, `X.Y.Z-dev.g<commit>` for a snapshot); otherwise the
//!   build is not a release and says so: `X.Y.Z-dev+g<commit>` (Cargo's
//!   `CARGO_PKG_VERSION`, the commit as `IB_SRIOV_COMMIT` gives it), or `X.Y.Z-dev`
//!   when the commit is unknown (a build without git). Semver 2.0.0: `-dev` is a
//!   pre-release, so it sorts before X.Y.Z; `+g<commit>` is build metadata.

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=IB_SRIOV_COMMIT");
    println!("cargo:rerun-if-env-changed=IB_SRIOV_VERSION");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit or a checkout changes these; the date then follows the rebuild.
    if let Some(git_dir) = run("git", &["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        if let Some(r) = run("git", &["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{r}");
        }
    }
    let commit = std::env::var("IB_SRIOV_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| run("git", &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(e) if !e.is_empty() => run(
            "date",
            &["-u", "-d", &format!("@{e}"), "+%Y-%m-%dT%H:%M:%SZ"],
        ),
        _ => run("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
    }
    .unwrap_or_else(|| "unknown".into());
    let pkg = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let version = match std::env::var("IB_SRIOV_VERSION") {
        Ok(v) if !v.is_empty() => v,
        _ if commit == "unknown" => format!("{pkg}-dev"),
        _ => format!("{pkg}-dev+g{commit}"),
    };
    println!("cargo:rustc-env=IB_SRIOV_COMMIT={commit}");
    println!("cargo:rustc-env=IB_SRIOV_BUILD_VERSION={version}");
    println!("cargo:rustc-env=IB_SRIOV_BUILD_DATE={date}");
}
