#!/usr/bin/env bash
# The test command (README "Quick start"): unit tests, emulated-host integration tests
# with fault injection (cargo feature `failpoints`), and the libcni end-to-end test.
# Needs root (network namespaces). Extra arguments go to `cargo test`.
# Ends with one plain line "N passed, N failed" summing every test binary.
set -euo pipefail
cd "$(dirname "$0")/.."
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --features failpoints --lib --bins --tests "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
