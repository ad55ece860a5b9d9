#!/bin/sh
# Randomized fault exploration against a reference model (issue 33; tests/explore.rs).
#
#   scripts/explore.sh [--seconds N] [--ops N] [--seed S] [--jobs J] [--ops-per-seed K]
#   EXPLORE_SEED=123 EXPLORE_OPS=457 scripts/explore.sh --replay   # a reported failure
#   scripts/explore.sh --file tests/fixtures/explore/NAME.ops      # one saved op list
#   scripts/explore.sh --regressions                               # every saved list
#   scripts/explore.sh --summarize LOG                             # totals so far of a run's log
#
# Runs the ignored test `explore::long` (needs root, the failpoints feature and Debian's
# host-local in /usr/lib/cni). Prints ops, ops faulted, faults by kind, invariant
# checks, violations and the seeds used. A violation is shrunk automatically and saved
# to $EXPLORE_SAVE_DIR (default /tmp/explore-shrunk); copy it to tests/fixtures/explore/
# to keep it as a regression. IB_SRIOV_BIN=/path/to/ib-sriov runs another binary (built
# with --features failpoints), e.g. a snapshot for a long run. --release builds the
# explorer and the plugin optimized (about twice the ops per second); --ops N starts
# no new seed once N ops have been executed (the seeds under way finish).
set -eu
cd "$(dirname "$0")/.."
secs=600
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) secs="$2"; shift 2 ;;
    --seed) export EXPLORE_SEED="$2"; shift 2 ;;
    --jobs) export EXPLORE_JOBS="$2"; shift 2 ;;
    --ops) export EXPLORE_TARGET_OPS="$2"; shift 2 ;;   # no new seed past N executed ops
    --release) profile=--release; shift ;;
    --ops-per-seed) export EXPLORE_OPS="$2"; shift 2 ;;
    --replay) export EXPLORE_REPLAY=1; shift ;;
    --file) export EXPLORE_FILE="$2"; shift 2 ;;
    --verbose) export EXPLORE_VERBOSE=1; shift ;;
    --regressions) regressions=1; shift ;;
    --summarize)
        # Totals of the per-seed progress lines of a (running) exploration's log.
        grep -a '^explore progress: seed' "$2" | awk '
            { s = $4; sub(":", "", s); seeds = seeds (seeds ? "," : "") s
              for (i = 1; i <= NF; i++) {
                if ($i == "ops") ops += $(i + 1)
                if ($i == "generated") gen += $(i + 1)
                if ($i == "faulted") faulted += $(i + 1)
                if ($i == "checks") checks += $(i + 1)
                if ($i == "quiescences") q += $(i + 1)
                if ($i == "violation" && $(i + 1) != "None") v++
                if ($i == "faults") { n = split($(i + 1), kv, ","); for (k = 1; k <= n; k++) { split(kv[k], p, "="); f[p[1]] += p[2] } }
              } }
            END { printf "seeds %d, ops executed %d of %d generated, ops faulted %d (%.1f%% of executed), invariant checks %d, quiescences %d, violations %d\nfaults by kind:", NR, ops, gen, faulted, ops ? 100 * faulted / ops : 0, checks, q, v
                  for (k in f) printf " %s=%d", k, f[k]; printf "\nseeds: %s\n", seeds }'
        grep -a '^explore: VIOLATION' "$2" | sort -u || true
        exit 0 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
export EXPLORE_SECONDS="$secs"
. scripts/static-flags.sh
if [ "${regressions:-0}" = 1 ]; then
    exec cargo test --target "$triple" --features failpoints --test explore regressions -- --nocapture
fi
exec cargo test ${profile:-} --target "$triple" --features failpoints --test explore long -- --ignored --nocapture
