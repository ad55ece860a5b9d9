#!/usr/bin/env bash
# The release build: static `ib-sriov` and `thin_entrypoint` for this machine's
# architecture, with no shared-library dependency, so one binary runs on every node OS
# (RHEL 8, Ubuntu 20.04 / DGX OS 5 and Amazon Linux 2 have glibc older than the build
# machine's).
#
#   scripts/build.sh [cargo build args...]    e.g. --features failpoints (tests only)
#
# Prints the directory holding the two binaries on stdout (target/<triple>/release).
#
# How: glibc static-pie, `RUSTFLAGS=-C target-feature=+crt-static` with an explicit
# `--target <host triple>`. The explicit target matters: with it, RUSTFLAGS apply to the
# binaries only, not to build scripts and proc-macros (which must stay dynamic: rustc
# refuses a proc-macro with crt-static). scripts/test.sh builds the test binaries the
# same way, so the suites run against a static plugin.
#
# Environment: IB_SRIOV_COMMIT and SOURCE_DATE_EPOCH set what `ib-sriov --version`
# prints (build.rs); CARGO_BUILD_TARGET overrides the host triple.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/static-flags.sh # sets triple and RUSTFLAGS
cargo build --release --locked --target "$triple" --bins "$@" >&2
echo "$PWD/target/$triple/release"
