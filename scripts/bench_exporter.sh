#!/usr/bin/env bash
# Benchmark (not a test) of `ib-sriov exporter`: the CPU and memory of one scrape of
# ATT attachments (default 128) on an emulated host. Run through
# `scripts/bench.sh --exporter [--attachments N] [--scrapes N] [--json FILE] [--check]`
# (which sets up the node policy for the stateDir in /dev/shm).
#
# Makes an emulated host with 127 VFs on its first PF and the rest on the second
# (`emuhost create --vfs 127 --pf1-vfs N`), ATT pods, and ATT attachments with the
# static release plugin (each with its pod named in CNI_ARGS and the built-in IPAM on a
# /20); then runs `ib-sriov exporter --once` SCRAPES times (default 30) in the emulated
# host's netns, each a process of its own whose CPU (user+sys) and peak RSS (ru_maxrss)
# wait4() gives: so a figure includes the process start (an upper bound of a scrape in the
# long-running server). Each `--once` includes one plain doctor pass, whose findings it
# prints (issue 52; the server runs that pass on a thread of its own, once per
# --doctor-interval, not per scrape); --no-findings passes `--doctor-interval 0` (the
# scrape alone). Prints the medians and the maxima, and the median of the doctor pass's
# own duration (ib_sriov_doctor_run_duration_seconds); with --check, fails unless
# the median CPU is <= 50 ms and the peak RSS <= 20 MiB (issue 42's targets).
set -euo pipefail
export LC_ALL=C
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
att=128
scrapes=30
json_out=""
check=0
findings=1
while (($#)); do
    case "$1" in
    --attachments) att="$2"; shift 2 ;;
    --scrapes) scrapes="$2"; shift 2 ;;
    --json) json_out="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --no-findings) findings=0; shift ;;
    *) echo "bench_exporter: unknown argument $1" >&2; exit 2 ;;
    esac
done
((att >= 1 && att <= 254)) || { echo "bench_exporter: --attachments 1..254" >&2; exit 2; }
triple="$(uname -m)-unknown-linux-gnu"
src_bin="${IB_SRIOV_BIN:-$repo/target/$triple/release/ib-sriov}"
emu_bin="${EMUHOST_BIN:-$repo/target/release/examples/emuhost}"
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
    echo "bench_exporter: building the static release ib-sriov and the emuhost example" >&2
    (cd "$repo" && scripts/build.sh >/dev/null && cargo build --release --example emuhost >&2)
fi
tmp="$(mktemp -d /dev/shm/ib-sriov-bench-exp.XXXXXX)"
prefix="ibx$$"
pods=()
cleanup() {
    set +e
    for p in "${pods[@]}"; do ip netns del "$p" 2>/dev/null; done
    "$emu_bin" destroy --prefix "$prefix" --root "$tmp/sys" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# The plugin and its built-in IPAM (the same executable under the name ib-sriov-ipam), as
# an installer lays them out in the CNI binary directory.
mkdir -p "$tmp/bin"
cp "$src_bin" "$tmp/bin/ib-sriov"
cp "$src_bin" "$tmp/bin/ib-sriov-ipam"
bin="$tmp/bin/ib-sriov"
pf1=$((att > 127 ? att - 127 : 0))
vfs=$((att > 127 ? 127 : att))
mkdir -p "$tmp/sys"
"$emu_bin" create --prefix "$prefix" --vfs "$vfs" --pf1-vfs "$pf1" --root "$tmp/sys" >"$tmp/emu.json"
hostns="$(jq -r .host_netns "$tmp/emu.json")"
mapfile -t addrs < <(jq -r '.vfs[].addr' "$tmp/emu.json")
echo "bench_exporter: $att attachments on ${#addrs[@]} VFs" >&2
for ((i = 0; i < att; i++)); do
    p="${prefix}-pod$i"
    ip netns add "$p"
    pods+=("$p")
    conf=$(jq -nc --arg dev "${addrs[$i]}" --arg st "$tmp/state" --arg data "$tmp/ipam" --arg go "$tmp/go" \
        '{cniVersion:"1.0.0",name:"benchnet",type:"ib-sriov",deviceID:$dev,stateDir:$st,goCacheDir:$go,
          ipam:{type:"ib-sriov-ipam",subnet:"10.60.0.0/20",dataDir:$data}}')
    out=$(ip netns exec "$hostns" env -i PATH="$PATH" IB_SRIOV_SYSFS_ROOT="$tmp/sys" CNI_COMMAND=ADD \
        CNI_CONTAINERID="bench$i" CNI_NETNS="/var/run/netns/$p" CNI_IFNAME=net1 CNI_PATH="$(dirname "$bin")" \
        CNI_ARGS="K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod$i;K8S_POD_UID=uid$i" "$bin" <<<"$conf" 2>"$tmp/add.log") ||
        { echo "bench_exporter: ADD $i failed: $out" >&2; cat "$tmp/add.log" >&2; exit 1; }
done
# The exporter as its DaemonSet runs it: the node tools' binary (ib-sriovctl exporter),
# built beside the plugin by scripts/build.sh.
ip netns exec "$hostns" python3 - "$(dirname "$src_bin")/ib-sriovctl" "$tmp/state" "$tmp/sys" "$scrapes" "$att" "$json_out" "$check" "$findings" <<'PY'
import json, os, statistics, sys
binp, state, sysroot, n, att, json_out, check = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7] == "1"
extra = [] if sys.argv[8] == "1" else ["--doctor-interval", "0"]
cpu, rss, doctor = [], [], []
env = {"PATH": os.environ["PATH"], "IB_SRIOV_SYSFS_ROOT": sysroot}
for i in range(n + 2):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.execve(binp, [binp, "exporter", "--once", "--state-dir", state] + extra, env)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 1 << 16)
        if not b:
            break
        out += b
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    assert status == 0, status
    live = [l for l in out.decode().splitlines() if l.startswith("ib_sriov_attachments_live ")]
    assert live and int(float(live[0].split()[1])) == att, live
    took = [l for l in out.decode().splitlines() if l.startswith("ib_sriov_doctor_run_duration_seconds ")]
    if i < 2:
        continue  # warm-up: page cache, dentries
    if took:
        doctor.append(float(took[0].split()[1]) * 1000)
    cpu.append((ru.ru_utime + ru.ru_stime) * 1000)
    rss.append(ru.ru_maxrss / 1024)
res = {"attachments": att, "scrapes": n, "cpu_ms_median": round(statistics.median(cpu), 2),
       "cpu_ms_max": round(max(cpu), 2), "rss_mib_median": round(statistics.median(rss), 2),
       "rss_mib_max": round(max(rss), 2), "findings": not extra}
if doctor:
    res["doctor_pass_ms_median"] = round(statistics.median(doctor), 2)
    res["doctor_pass_ms_max"] = round(max(doctor), 2)
print(f"exporter --once{' --doctor-interval 0' if extra else ''}, {att} attachments, {n} scrapes: CPU median {res['cpu_ms_median']} ms "
      f"(max {res['cpu_ms_max']}), peak RSS median {res['rss_mib_median']} MiB (max {res['rss_mib_max']})"
      + (f"; doctor pass median {res['doctor_pass_ms_median']} ms wall (max {res['doctor_pass_ms_max']})" if doctor else ""))
if json_out:
    with open(json_out, "w") as f:
        json.dump(res, f, indent=1)
if check:
    ok = res["cpu_ms_median"] <= 50 and res["rss_mib_max"] <= 20
    print("targets (CPU <= 50 ms, RSS <= 20 MiB):", "met" if ok else "NOT met")
    sys.exit(0 if ok else 1)
PY
