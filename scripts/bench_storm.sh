#!/usr/bin/env bash
# Start-up storm benchmark (not a test), run as `scripts/bench.sh --storm`:
#
#   scripts/bench.sh --storm [--pods P] [--rails R] [--probe-ms MS] [--lock-timeout-ms MS]
#                            [--json FILE] [--check]
#
# On an emulated host with P x R VFs (default 8 x 8 = 64) whose driver probe takes MS
# milliseconds (default 300, about mlx5's: `emuhost probe`, EmuHost::fifo_probe), P pods
# start at once, each ADDing its R rails one after another as Multus does, each rail
# with a GUID of its own (a GUID set and a rebind per ADD, as with ib-kubernetes); then
# all pods are deleted at once, each DELeting its rails in reverse (a rebind per DEL).
# scripts/bench_storm.py does the timing; it runs inside the emulated host's netns.
#
# Reports total time, per-ADD and per-DEL latency (p50/p99/max) and rebind-queue wait,
# rebinds per pod, code-11 answers, and whether the host came back to its starting state
# (links; OFED GUID and policy files). Bounds (met/MISSED; --check makes a miss exit 1):
# - no code 11 and no failure, at the default lockTimeoutMs (20 s);
# - total time within 1.15 x (rebinds x probe time);
# - no ADD or DEL waited longer than 1.15 x (rebinds ahead of it on arrival x probe time)
#   plus 50 ms (process start and the GUID write of the one ahead);
# - the host equal to its starting state after all DELs.
#
# Needs root; builds the static release plugin and the emuhost example first (skipped
# with BENCH_SKIP_BUILD=1; IB_SRIOV_BIN and EMUHOST_BIN override the two paths).
set -euo pipefail
export LC_ALL=C
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

pods=8 rails=8 probe_ms=300 lock_timeout="" json_out="" check=0
while (($#)); do
    case "$1" in
    --pods) pods="$2"; shift 2 ;;
    --rails) rails="$2"; shift 2 ;;
    --probe-ms) probe_ms="$2"; shift 2 ;;
    --lock-timeout-ms) lock_timeout="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    --check) check=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench --storm: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ "$pods" =~ ^[1-9][0-9]*$ && "$rails" =~ ^[1-9][0-9]*$ && "$probe_ms" =~ ^[0-9]+$ ]] ||
    { echo "bench --storm: bad --pods/--rails/--probe-ms" >&2; exit 2; }
((pods * rails <= 127)) || { echo "bench --storm: at most 127 VFs (pods x rails)" >&2; exit 2; }
[[ "$(id -u)" == 0 ]] || { echo "bench --storm: needs root (network namespaces)" >&2; exit 1; }
"$repo/scripts/deps.sh" bench demo

triple="${CARGO_BUILD_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}"
ours_bin="${IB_SRIOV_BIN:-$repo/target/$triple/release/ib-sriov}"
emu_bin="${EMUHOST_BIN:-$repo/target/release/examples/emuhost}"
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
    echo "bench --storm: building the static release ib-sriov (scripts/build.sh) and the emuhost example" >&2
    (cd "$repo" && scripts/build.sh >/dev/null && cargo build --release --example emuhost >&2)
fi

tmp="$(mktemp -d /dev/shm/ib-sriov-storm.XXXXXX)"
prefix="st$(($$ % 100000))"
probe_pid=""
cleanup() {
    set +e
    [[ -n "$probe_pid" ]] && kill "$probe_pid" 2>/dev/null && wait "$probe_pid" 2>/dev/null
    for k in $(seq 0 $((pods - 1))); do ip netns del "${prefix}-pod$k" 2>/dev/null; done
    "$emu_bin" destroy --prefix "$prefix" --root "$tmp/emu" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$emu_bin" create --prefix "$prefix" --vfs $((pods * rails)) --root "$tmp/emu" >"$tmp/emu.json"
for k in $(seq 0 $((pods - 1))); do ip netns add "${prefix}-pod$k"; done
"$emu_bin" probe --root "$tmp/emu" --delay-ms "$probe_ms" &
probe_pid=$!
echo "bench --storm: $pods pods x $rails rails on $((pods * rails)) emulated VFs, probe $probe_ms ms" >&2

out="$(ip netns exec "$prefix-host" env BENCH_OURS_BIN="$ours_bin" BENCH_SYSFS_ROOT="$tmp/emu" \
    BENCH_EMU="$tmp/emu.json" BENCH_TMP="$tmp" BENCH_PODS="$pods" BENCH_RAILS="$rails" \
    BENCH_PROBE_MS="$probe_ms" BENCH_POD_PREFIX="${prefix}-pod" BENCH_LOCK_TIMEOUT_MS="$lock_timeout" \
    /usr/bin/python3 "$repo/scripts/bench_storm.py")"
[[ -n "$json_out" ]] && jq . <<<"$out" >"$json_out"

j() { jq -r "$1" <<<"$out"; }
verdict() { if awk -v a="$1" -v b="$2" 'BEGIN {exit !(a <= b)}'; then echo met; else echo MISSED; fi; }
printf 'storm: %s pods x %s rails, probe %s ms, kernel %s\n' "$pods" "$rails" "$probe_ms" "$(uname -r)"
printf 'total %.1f s (ADD phase %.1f s, DEL phase %.1f s); rebinds %s (per pod: %s); ideal %.1f s\n' \
    "$(j .total_s)" "$(j .add_phase_s)" "$(j .del_phase_s)" "$(j .rebinds)" "$(j '.rebinds_per_pod|join(",")')" "$(j .ideal_s)"
for v in add del; do
    printf '%s latency p50 %.0f ms, p99 %.0f ms, max %.0f ms; queue wait p50 %.0f ms, p99 %.0f ms, max %.0f ms; CPU p50 %.1f ms\n' \
        "${v^^}" "$(j ".$v.p50_ms")" "$(j ".$v.p99_ms")" "$(j ".$v.max_ms")" \
        "$(j ".$v.wait_p50_ms // 0")" "$(j ".$v.wait_p99_ms // 0")" "$(j ".$v.wait_max_ms // 0")" "$(j ".$v.cpu_p50_ms")"
done
missed=0
c11="$(j .code11)" failed="$(j .failed)"
v1=$([[ "$c11" == 0 && "$failed" == 0 ]] && echo met || echo MISSED)
v2=$(verdict "$(j .total_s)" "$(j '.ideal_s * 1.15')")
v3=$(verdict "$(j '.worst_wait.excess_ms // 0')" 50)
v4=$([[ "$(j .host_restored)" == true ]] && echo met || echo MISSED)
for v in "$v1" "$v2" "$v3" "$v4"; do [[ "$v" == met ]] || missed=1; done
printf 'bound: no code 11, no failure:                    %s code 11, %s failed  %s\n' "$c11" "$failed" "$v1"
printf 'bound: total <= 1.15 x rebinds x probe:           %.1f <= %.1f s  %s\n' "$(j .total_s)" "$(j '.ideal_s * 1.15')" "$v2"
printf 'bound: wait <= 1.15 x ahead x probe + 50 ms:      worst %s  %s\n' "$(jq -c .worst_wait <<<"$out")" "$v3"
printf 'bound: host as before after all DELs:             %s  %s\n' "$(j .host_restored)" "$v4"
if ((failed)); then jq -c '.failures[]' <<<"$out" >&2; fi
((check && missed)) && exit 1
exit 0
