#!/usr/bin/env bash
# The test command (README "Test"): unit tests, emulated-host integration tests with
# fault injection, and the libcni end-to-end test. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --features failpoints "$@"
