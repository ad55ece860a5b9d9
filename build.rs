//! Build script: records what `ib-sriov --version` prints.
//!
//! - `IB_SRIOV_COMMIT`: the `IB_SRIOV_COMMIT` environment variable when set (a build from
//!   a tarball), else the git commit (`git rev-parse --short=12 HEAD`), else `unknown`.
//!   Uncommitted changes are not flagged: watching the index would rebuild the whole
//!   package at every `git add`.
//! - `IB_SRIOV_BUILD_DATE`: UTC, RFC 3339. `SOURCE_DATE_EPOCH` when set
//!   (reproducible-builds.org), else the time this script ran.
//!
//! The version itself is `crate::version()` (src/lib.rs): Cargo's `CARGO_PKG_VERSION`, or
//! `IB_SRIOV_VERSION` when set (a snapshot of scripts/release.sh), read with `option_env!`
//! (rustc tracks it: a change rebuilds the crate).

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
    println!("cargo:rustc-env=IB_SRIOV_COMMIT={commit}");
    println!("cargo:rustc-env=IB_SRIOV_BUILD_DATE={date}");
}
