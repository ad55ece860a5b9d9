#!/usr/bin/env bash
# See ib-sriov work, without InfiniBand hardware.
#
#   sudo scripts/demo.sh
#
# Builds the static release plugin (scripts/build.sh) and the emulated host
# (cargo build --release --example emuhost), creates an emulated SR-IOV InfiniBand host (a sysfs tree under a
# temp dir plus veths standing in for the PF and VF netdevs, in a private
# network namespace "ibdemo-host"; see tests/common/emuhost.rs) and a pod
# network namespace, then runs target/<triple>/release/ib-sriov inside the host netns,
# as a container runtime would, with cniVersion 1.0.0 and the built-in IPAM:
#
#   ADD    the VF netdev moves into the pod as net1 with an address and a
#          route; its GUID (per pod, runtimeConfig.infinibandGUID as Multus
#          passes it) and link state are set through the MLNX_OFED
#          sysfs files (the emulated PF answers no VF netlink)
#   CHECK  with ADD's result as prevResult
#   DEL    everything undone; DEL again: still succeeds, changes nothing
#
# and shows that the host is exactly as before. Everything it made (netns,
# sysfs tree, temp dir) is removed on exit, also on failure or Ctrl-C; it writes nothing
# outside its temp dir (the plugin's stateDir, IPAM dataDir, logFile and goCacheDir are
# in it), so /var/lib/cni and /run/ib-sriov are left as they were.
#
# Needs root (network namespaces, veths). Installs missing Debian packages
# (jq, iproute2: scripts/deps.sh demo). Environment: DEMO_SKIP_BUILD=1 skips the
# build; DEMO_PREFIX sets the netns prefix (default ibdemo).
set -euo pipefail
export LC_ALL=C

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${DEMO_PREFIX:-ibdemo}"
triple="${CARGO_BUILD_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}"
bindir="$repo/target/$triple/release"
bin="$bindir/ib-sriov"
emu_bin="$repo/target/release/examples/emuhost"

if [[ -t 1 ]]; then
    bold=$'\e[1m' dim=$'\e[2m' green=$'\e[32m' red=$'\e[31m' off=$'\e[0m'
else
    bold="" dim="" green="" red="" off=""
fi
say() { printf '\n%s==> %s%s\n' "$bold" "$*" "$off"; }
show() { printf '%s$ %s%s\n' "$dim" "$*" "$off"; }
die() { printf '%sdemo: %s%s\n' "$red" "$*" "$off" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "needs root (network namespaces, veths): sudo $0"

"$repo/scripts/deps.sh" demo

if [[ "${DEMO_SKIP_BUILD:-0}" != 1 ]]; then
    say "Building (scripts/build.sh: the static release plugin; cargo build --release --example emuhost)"
    (cd "$repo" && scripts/build.sh >/dev/null && cargo build --release --example emuhost)
fi
[[ -x "$bin" && -x "$emu_bin" ]] || die "missing $bin or $emu_bin (build first)"

host="$prefix-host"
pod="$prefix-pod0"
podns="/var/run/netns/$pod"
[[ ! -e "/var/run/netns/$host" ]] ||
    die "netns $host already exists (another demo running, or a leftover: ip netns del $host; or set DEMO_PREFIX)"

# Any CNI_* of the caller's environment must not leak into the plugin.
for v in $(compgen -v CNI_ || true); do unset "$v"; done
unset IB_SRIOV_SYSFS_ROOT

# Under /run: its stateDir, IPAM dataDir and logFile are within the default node policy
# (docs/configuration.md "Node policy file").
tmp="$(mktemp -d /run/ib-sriov-demo.XXXXXX)"
root="$tmp/sysfs"
emu_made=0
pod_made=0
cleanup() {
    local rc=$?
    set +e
    say "Cleaning up"
    if ((pod_made)); then show "ip netns del $pod"; ip netns del "$pod" 2>/dev/null; fi
    if ((emu_made)); then
        show "emuhost destroy --prefix $prefix --root $root"
        "$emu_bin" destroy --prefix "$prefix" --root "$root"
    fi
    show "rm -rf $tmp"
    rm -rf "$tmp"
    if ((rc == 0)); then
        printf '%sdemo: done%s\n' "$green" "$off"
    else
        printf '%sdemo: FAILED (exit %d)%s\n' "$red" "$rc" "$off" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "Creating the emulated host"
show "emuhost create --prefix $prefix --vfs 2 --root $root"
emu_made=1
"$emu_bin" create --prefix "$prefix" --vfs 2 --root "$root" >"$tmp/emu.json"
vf_addr="$(jq -r '.vfs[0].addr' "$tmp/emu.json")"
vf_dev="$(jq -r '.vfs[0].netdev' "$tmp/emu.json")"
ofed="$(jq -r '.vfs[0].ofed_dir' "$tmp/emu.json")"
pf="$(jq -r '.pf.addr' "$tmp/emu.json")"
echo "host netns $host; sysfs root $root"
echo "PF $pf ($(jq -r '.pf.netdev' "$tmp/emu.json")), VFs: $(jq -r '[.vfs[] | "\(.addr) (\(.netdev))"] | join(", ")' "$tmp/emu.json")"
echo "using VF 0: $vf_addr, netdev $vf_dev, OFED files ${ofed#"$root"/}/{node,port,policy}"

show "ip netns add $pod"
ip netns add "$pod"
pod_made=1
ip -n "$pod" link set lo up

ofed_files() { # the VF's MLNX_OFED GUID and policy files
    local f
    for f in node port policy; do printf '  %-6s %s\n' "$f" "$(cat "$ofed/$f")"; done
}
host_state() { # what "the host is as before" compares: links of the host netns, every OFED file
    ip -n "$host" -j addr show | jq -c 'sort_by(.ifindex)[] |
        {ifindex, ifname, up: (.flags | index("UP") != null), mtu, address,
         addrs: ([.addr_info[] | "\(.local)/\(.prefixlen)"] | sort)}'
    local f
    for f in "$root"/devices/*/*/"$pf"/sriov/*/*; do echo "${f#"$root"/}: $(cat "$f")"; done
}

say "Before ADD: the VF netdev in the host netns, its OFED files"
show "ip -n $host -br link show $vf_dev"
ip -n "$host" -br link show "$vf_dev"
show "cat ${ofed#"$root"/}/{node,port,policy}"
ofed_files
host_state >"$tmp/host.before"

# Everything the plugin writes goes under $tmp, which cleanup removes: its stateDir, the
# IPAM dataDir, the log, and goCacheDir (the Go plugin's cache files ADD also writes for
# a rollback; by default /var/lib/cni/ib-sriov, which would create /var/lib/cni on this
# machine and stay after the demo).
jq -n --arg vf "$vf_addr" --arg state "$tmp/state" --arg data "$tmp/ipam" --arg log "$tmp/ib-sriov.log" \
    --arg gocache "$tmp/go-cache" '{
    cniVersion: "1.0.0",
    name: "ibdemo",
    type: "ib-sriov",
    deviceID: $vf,
    runtimeConfig: {infinibandGUID: "02:00:00:00:00:00:de:01"},
    link_state: "enable",
    stateDir: $state,
    goCacheDir: $gocache,
    logFile: $log,
    ipam: {
        type: "ib-sriov-ipam",
        subnet: "10.56.217.0/24",
        gateway: "10.56.217.1",
        routes: [{dst: "192.168.0.0/16"}],
        dataDir: $data
    }
}' >"$tmp/conf.json"
say "Network configuration (stdin of every call)"
jq . "$tmp/conf.json"

cni() { # cni <COMMAND> <stdin-file> <title>: the plugin inside the host netns, its stdout in $tmp/out
    local cmd="$1" conf="$2" rc=0
    local env=(PATH="$PATH" CNI_COMMAND="$cmd" CNI_CONTAINERID=demo-ctr CNI_NETNS="$podns"
        CNI_IFNAME=net1 CNI_PATH="$bindir" IB_SRIOV_SYSFS_ROOT="$root")
    say "$3"
    show "ip netns exec $host env -i PATH=\$PATH ${env[*]:1} ${bin#"$repo"/} < ${conf#"$tmp"/}"
    ip netns exec "$host" env -i "${env[@]}" "$bin" <"$conf" >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [[ -s "$tmp/out" ]]; then jq . "$tmp/out" 2>/dev/null || cat "$tmp/out"; else echo "(no output)"; fi
    if ((rc != 0)); then
        [[ ! -s "$tmp/err" ]] || { echo "stderr:"; cat "$tmp/err"; }
        [[ ! -s "$tmp/ib-sriov.log" ]] || { echo "plugin log:"; tail -n 20 "$tmp/ib-sriov.log"; }
        die "$cmd failed (exit $rc)"
    fi
    echo "${green}exit 0${off}"
}

cni ADD "$tmp/conf.json" "ADD"
cp "$tmp/out" "$tmp/add-result.json"

say "After ADD: net1 in the pod, the VF gone from the host netns, GUID and policy set"
show "ip -n $pod addr show net1"
ip -n "$pod" addr show net1
show "ip -n $pod route"
ip -n "$pod" route
show "ip -n $host -br link show $vf_dev"
ip -n "$host" -br link show "$vf_dev" 2>&1 || true
show "cat ${ofed#"$root"/}/{node,port,policy}"
ofed_files

jq --slurpfile prev "$tmp/add-result.json" '. + {prevResult: $prev[0]}' "$tmp/conf.json" >"$tmp/check.json"
say "CHECK's configuration: the same, plus prevResult = ADD's result"
show "jq --slurpfile prev add-result.json '. + {prevResult: \$prev[0]}' conf.json > check.json"
cni CHECK "$tmp/check.json" "CHECK"
cni DEL "$tmp/conf.json" "DEL"
cni DEL "$tmp/conf.json" "DEL again (must succeed and change nothing)"

say "After DEL: the VF netdev back in the host netns, OFED files restored, pod empty"
show "ip -n $host -br link show $vf_dev"
ip -n "$host" -br link show "$vf_dev"
show "cat ${ofed#"$root"/}/{node,port,policy}"
ofed_files
show "ip -n $pod -br link"
ip -n "$pod" -br link
left() { # left <dir> <find-args...>: the entries left in dir, or "none"
    local d="$1" l
    shift
    l="$(find "$d" -mindepth 1 -maxdepth 1 "$@" -printf '%f ' 2>/dev/null || true)"
    echo "${l:-none}"
}
echo "journals left in stateDir: $(left "$tmp/state" ! -name locks ! -name vfs)"
echo "holder links left in stateDir/vfs: $(left "$tmp/state/vfs")"
echo "addresses left in the IPAM dataDir: $(left "$tmp/ipam/ibdemo" ! -name lock ! -name boot_id ! -name 'last_reserved_ip*')"
host_state >"$tmp/host.after"
if diff -u "$tmp/host.before" "$tmp/host.after" >"$tmp/host.diff"; then
    echo "${green}host exactly as before ADD: $(grep -c ifindex "$tmp/host.after") links (index, name, state, MTU, MAC, addresses) and $(grep -c sriov/ "$tmp/host.after") OFED files compared${off}"
else
    cat "$tmp/host.diff"
    die "the host differs from before ADD"
fi
