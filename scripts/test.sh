#!/usr/bin/env bash
# The test command (README "Quick start"): unit tests, emulated-host integration tests
# with fault injection (cargo feature `failpoints`), and the libcni end-to-end test,
# all against static binaries (as scripts/build.sh makes them).
# Needs root (network namespaces). Installs the Debian packages it needs first
# (scripts/deps.sh test). Extra arguments go to `cargo test`.
# Ends with one plain line "N passed, N failed" summing every test binary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# Static binaries, built the way scripts/build.sh builds the release (glibc static-pie,
# explicit --target so build scripts and proc-macros stay dynamic): the suites run
# against a plugin linked exactly like the one shipped (tests/static_binary.rs checks).
. scripts/static-flags.sh # sets triple and RUSTFLAGS
# The whole workspace: the node tools' binary (ib-sriovctl) is built beside the plugin's
# first, as the tests that run `ib-sriov doctor|exporter|top` need it there.
cargo build --target "$triple" --features failpoints --workspace --bins >&2 || status=$?
cargo test --target "$triple" --features failpoints --workspace --lib --bins --tests "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
