#!/usr/bin/env bash
# The release build: static `ib-sriov` and `thin_entrypoint` (the CNI binary and the
# image's entrypoint, package ib-sriov-cni) and `ib-sriovctl` (the node tools, package
# src/ib-sriovctl; the whole workspace is built), with no shared-library
# dependency, so one binary runs on every node OS (RHEL 8, Ubuntu 20.04 / DGX OS 5 and
# Amazon Linux 2 have glibc older than the build machine's), for this machine's
# architecture or, with --arch, for any architecture the Go plugin's image ships.
#
#   scripts/build.sh [cargo build args...]    e.g. --features failpoints (tests only)
#   scripts/build.sh --arch ARCH [cargo build args...]
#                    ARCH: x86_64, aarch64, powerpc64le or s390x (-unknown-linux-gnu)
#
# Prints the directory holding the three binaries on stdout (target/<triple>/release for
# this machine's architecture, target/cross/<triple>/release for another).
#
# How: glibc static-pie, `RUSTFLAGS=-C target-feature=+crt-static` with an explicit
# `--target <triple>`. The explicit target matters: with it, RUSTFLAGS apply to the
# binaries only, not to build scripts and proc-macros (which must stay dynamic: rustc
# refuses a proc-macro with crt-static). scripts/test.sh builds the test binaries the
# same way, so the suites run against a static plugin.
#
# Another architecture: the machine's rustup toolchain has only its own standard
# library, and rustup fetches nothing here. Debian 12 ships a newer Rust toolchain for
# building browsers, `rustc-web`/`cargo-web` (bookworm-security: /usr/bin/rustc and
# /usr/bin/cargo), and the source of its standard library as `rust-web-src`
# (/usr/lib/rustlib/src/rust/library), built from the same source package at the same
# version. Cargo builds that std for the target together with the plugin
# (`-Zbuild-std`, an unstable cargo flag enabled on this stable compiler with
# RUSTC_BOOTSTRAP=1), so the std always matches the compiler exactly and no foreign dpkg
# architecture is needed (Debian's multiarch `libstd-rust-web-dev:<arch>` has 1.96 for
# arm64 only, and adding ppc64el/s390x to dpkg made `apt-get update` fail on a mirror
# whose security index for them lagged). scripts/deps.sh cross-<ARCH> installs the
# toolchain with the cross C toolchain (gcc-<gnu triple>, the linker) and static glibc
# (libc6-dev-<arch>-cross); the build goes to target/cross (its own target dir: the two
# compilers never share artifacts). A release engineer repeats it on any x86_64
# Debian 12 with:
#   scripts/build.sh --arch aarch64       (installs what it needs through deps.sh)
#
# Environment: IB_SRIOV_COMMIT and SOURCE_DATE_EPOCH set what `ib-sriov --version`
# prints (build.rs), IB_SRIOV_VERSION its version (crate::version; scripts/release.sh
# sets it); CARGO_BUILD_TARGET overrides the host triple. RUSTFLAGS given are kept, before
# the static flags (scripts/release.sh passes its --remap-path-prefix flags so).
# IB_SRIOV_AUDITABLE=1 builds with `cargo auditable build` (cargo-auditable, a cargo
# subcommand in $CARGO_HOME/bin): each binary carries its dependency list in a
# `.dep-v0` section (scripts/release.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=""
if [[ "${1:-}" == --arch ]]; then
    arch="${2:?--arch needs x86_64, aarch64, powerpc64le or s390x}"
    shift 2
fi
build=(build)
[[ "${IB_SRIOV_AUDITABLE:-0}" != 1 ]] || build=(auditable build)
host_arch="$(uname -m)"
if [[ -z "$arch" || "$arch" == "$host_arch" ]]; then
    . scripts/static-flags.sh # sets triple and RUSTFLAGS
    cargo "${build[@]}" --release --locked --target "$triple" --workspace --bins "$@" >&2
    echo "$PWD/target/$triple/release"
    exit 0
fi
. scripts/arch.sh # arch_facts: triple, gnu
arch_facts "$arch" || {
    echo "build.sh: unknown --arch '$arch' (x86_64, aarch64, powerpc64le, s390x)" >&2
    exit 2
}
scripts/deps.sh "cross-$arch" >&2
# The compiler and the std source must be one version (rustc refuses another's std).
v_rustc="$(dpkg-query -W -f='${Version}' rustc-web)"
v_src="$(dpkg-query -W -f='${Version}' rust-web-src)"
if [[ "$v_rustc" != "$v_src" ]]; then
    echo "build.sh: rustc-web $v_rustc but rust-web-src $v_src: apt-get install --only-upgrade both" >&2
    exit 1
fi
# With crt-static, rustc links these targets as a static non-PIE executable (x86_64's is
# a static-pie): no relative relocations to pack, so no -z pack-relative-relocs.
linker_var="CARGO_TARGET_$(echo "$triple" | tr 'a-z-' 'A-Z_')_LINKER"
env PATH="/usr/bin:/bin:/usr/sbin:/sbin" RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc \
    RUSTC_BOOTSTRAP=1 "$linker_var=$gnu-gcc" \
    RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static" \
    /usr/bin/cargo "${build[@]}" --release --locked --target "$triple" --target-dir target/cross \
    -Zbuild-std=std,panic_unwind --workspace --bins "$@" >&2
echo "$PWD/target/cross/$triple/release"
