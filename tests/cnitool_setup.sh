#!/usr/bin/env bash
# Follows the hand-testing instructions as a new user would, on the emulated host:
# builds cnitool with conf/build-cnitool.sh, then runs conf/cnitool-setup.sh inside the
# emulated host's netns and checks that it works and leaves the host as it found it.
#
#   sudo tests/cnitool_setup.sh CNI_SRC
#
# CNI_SRC (argument or environment): containernetworking/cni v1.1.2 source, a checkout,
# an extracted tarball or a (bare) git mirror with the tag, e.g.
#   git --git-dir=<mirror> archive v1.1.2 | tar -x -C /tmp/cni-src
# Builds the plugin and emuhost with cargo (honours CARGO_TARGET_DIR). Needs root
# (network namespaces, veths), Debian's golang-go and golang-github-appc-cni-dev, jq.
# CNITOOL_TEST_PREFIX sets the emulated host's netns prefix (default ibct).
#
# Cases: DEVICE unset (exit 2, the hint); DEVICE a PF (exit 2, "not a VF"); the run as
# documented, with GUID= and STATE_DIR= (ADD/CHECK/DEL succeed, GUID applied during the
# attachment, host as before, no netns/journal/IP/libcni cache/temp config left); ADD
# failing for want of the plugin (bad CNI_PATH), inside the plugin (bad GUID: its DEL
# fails too; no free address: its DEL succeeds); Ctrl-C after ADD (DEL restores the VF). After each failure the trap must have undone everything.
set -euo pipefail
export LC_ALL=C

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cni_src="${1:-${CNI_SRC:-}}"
[[ -n "$cni_src" ]] || { sed -n '2,19p' "$0" >&2; exit 2; }
[[ "$(id -u)" == 0 ]] || { echo "cnitool_setup: needs root" >&2; exit 1; }
"$repo/scripts/deps.sh" demo >&2 # iproute2, jq

target="${CARGO_TARGET_DIR:-$repo/target}"
prefix="${CNITOOL_TEST_PREFIX:-ibct}"
host="$prefix-host"
podns="$prefix-pod0" # emuhost destroy removes <prefix>-pod<k> too, should one be left
[[ ! -e "/var/run/netns/$host" ]] || { echo "cnitool_setup: netns $host exists (set CNITOOL_TEST_PREFIX)" >&2; exit 1; }
for v in $(compgen -v CNI_ || true); do unset "$v"; done
unset IB_SRIOV_SYSFS_ROOT NETCONFPATH CAP_ARGS GUID STATE_DIR NETNS DEVICE

tmp="$(mktemp -d /tmp/ib-sriov-cnitool-test.XXXXXX)"
root="$tmp/sysfs"
emu="$target/debug/examples/emuhost"
emu_made=0 failures=0 passes=0
cleanup() {
    local rc=$?
    set +e
    if ((emu_made)); then "$emu" destroy --prefix "$prefix" --root "$root"; fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() { passes=$((passes + 1)); echo "ok   $*"; }
bad() { failures=$((failures + 1)); echo "FAIL $*"; }
check() { # check <description> <command...>
    local what="$1"
    shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}

echo "== conf/build-cnitool.sh --src $cni_src"
"$repo/conf/build-cnitool.sh" --src "$cni_src" --out "$tmp/cnitool-bin/cnitool"
check "cnitool built" test -x "$tmp/cnitool-bin/cnitool"

echo "== cargo build --bin ib-sriov --example emuhost"
(cd "$repo" && cargo build -q --bin ib-sriov --example emuhost)
mkdir "$tmp/cni-bin"
cp "$target/debug/ib-sriov" "$tmp/cni-bin/"

# cnitool wrapper: runs $ON_CHECK before `cnitool check` (to look at the attachment, or
# to play Ctrl-C), otherwise the real cnitool.
mkdir "$tmp/wrap"
cat >"$tmp/wrap/cnitool" <<EOF
#!/bin/bash
if [[ "\$1" == check && -n "\${ON_CHECK:-}" ]]; then eval "\$ON_CHECK"; fi
exec "$tmp/cnitool-bin/cnitool" "\$@"
EOF
chmod +x "$tmp/wrap/cnitool"

echo "== emuhost create --prefix $prefix --vfs 1 --root $root"
emu_made=1
"$emu" create --prefix "$prefix" --vfs 1 --root "$root" >"$tmp/emu.json"
vf="$(jq -r '.vfs[0].addr' "$tmp/emu.json")"
vf_dev="$(jq -r '.vfs[0].netdev' "$tmp/emu.json")"
pf="$(jq -r '.pf.addr' "$tmp/emu.json")"
ofed="$(jq -r '.vfs[0].ofed_dir' "$tmp/emu.json")"
echo "VF $vf ($vf_dev), PF $pf"

host_state() { # links of the host netns and every OFED file of the PF's VFs
    ip -n "$host" -j addr show | jq -c 'sort_by(.ifindex)[] |
        {ifindex, ifname, up: (.flags | index("UP") != null), mtu, address,
         addrs: ([.addr_info[] | "\(.local)/\(.prefixlen)"] | sort)}'
    local f
    for f in "$root"/devices/*/*/"$pf"/sriov/*/*; do echo "${f#"$root"/}: $(cat "$f")"; done
}
# Other tests may run at the same time: look only at what this one can have made.
netns_list() { ls /var/run/netns 2>/dev/null | grep "^$prefix-" | sort || true; }
cache_list() { ls /var/lib/cni/results 2>/dev/null | grep '^ib-sriov-test-' | sort || true; } # libcni's cache
host_state >"$tmp/host.before"
netns_list >"$tmp/netns.before"
cache_list >"$tmp/cache.before"

setup() { # setup <out-file> VAR=value...: conf/cnitool-setup.sh as docs/install.md "Hand testing with cnitool" says, in the host netns
    local out="$1" rc=0
    shift
    ip netns exec "$host" env IB_SRIOV_SYSFS_ROOT="$root" PATH="$tmp/wrap:$PATH" \
        CNI_PATH="$tmp/cni-bin" NETNS="$podns" STATE_DIR="$tmp/state" "$@" \
        "$repo/conf/cnitool-setup.sh" >"$out" 2>&1 || rc=$?
    sed 's/^/    | /' "$out"
    return "$rc"
}
in_host() { ip -n "$host" link show "$1" >/dev/null; }
rc_is() { [[ "$1" == "$2" ]]; }
has() { grep -qF -- "$2" "$1"; }
same_host() { # the host as before, no netns, libcni cache entry or temp config left by $1
    local out="$1" conf
    check "VF netdev $vf_dev back in the host netns" in_host "$vf_dev"
    host_state >"$tmp/host.after"
    check "host as before (links, OFED files)" diff -u "$tmp/host.before" "$tmp/host.after"
    check "no netns left" diff -u "$tmp/netns.before" <(netns_list)
    check "no libcni cache entry left" diff -u "$tmp/cache.before" <(cache_list)
    conf="$(sed -n 's/^NETCONFPATH=\([^ ]*\) .*/\1/p' "$out")"
    check "temp NETCONFPATH ${conf:-?} removed" test -n "$conf" -a ! -e "${conf:-/}"
    check "no journal left" test -z "$(find "$tmp/state/ib-sriov" -maxdepth 1 -type f 2>/dev/null)"
    check "no IP allocation left" test -z "$(find "$tmp/state/networks" -mindepth 2 -maxdepth 2 \
        -type f ! -name lock ! -name boot_id ! -name 'last_reserved_ip*' 2>/dev/null)"
}

echo "== DEVICE unset"
rc=0
setup "$tmp/out" || rc=$?
check "exit 2" rc_is "$rc" 2
check "says how to pick a VF" has "$tmp/out" "physfn; do"

echo "== DEVICE=$pf (the PF)"
rc=0
setup "$tmp/out" DEVICE="$pf" || rc=$?
check "exit 2" rc_is "$rc" 2
check "says it is not a VF" has "$tmp/out" "DEVICE=$pf is not a VF"
check "no netns left" diff -u "$tmp/netns.before" <(netns_list)

guid=02:00:00:00:00:00:00:42
echo "== DEVICE=$vf GUID=$guid (the documented run)"
rc=0
setup "$tmp/out" DEVICE="$vf" GUID="$guid" \
    ON_CHECK="cat '$ofed/node' >'$tmp/guid.during'; ip -n '$podns' -br link >'$tmp/pod.during'" || rc=$?
check "exit 0" rc_is "$rc" 0
check "ADD, CHECK, DEL shown" has "$tmp/out" "+ cnitool del ib-sriov-test /var/run/netns/$podns"
check "ADD result printed" has "$tmp/out" '"ips"'
check "pod had net1" grep -q '^net1[@ ]' "$tmp/pod.during"
check "VF GUID was $guid during the attachment (CAP_ARGS)" grep -qi "^$guid$" "$tmp/guid.during"
check "journal went to STATE_DIR" test -d "$tmp/state/ib-sriov"
check "IPAM store went to STATE_DIR" test -d "$tmp/state/networks/ib-sriov-test"
same_host "$tmp/out"

echo "== ADD fails: CNI_PATH without ib-sriov"
rc=0
setup "$tmp/out" DEVICE="$vf" CNI_PATH="$tmp/empty" || rc=$?
check "exit != 0" test "$rc" != 0
check "ADD error shown" has "$tmp/out" 'failed to find plugin "ib-sriov"'
check "trap ran DEL" has "$tmp/out" "+ cnitool del"
check "trap deleted the netns" has "$tmp/out" "+ ip netns del $podns"
same_host "$tmp/out"

echo "== ADD fails inside the plugin: GUID=zz"
rc=0
setup "$tmp/out" DEVICE="$vf" GUID=zz || rc=$?
check "exit != 0" test "$rc" != 0
check "trap ran DEL" has "$tmp/out" "+ cnitool del"
same_host "$tmp/out"

echo "== ADD fails in the plugin's IPAM: no free address (SUBNET=10.56.217.0/30, .2 taken)"
taken="$tmp/state/networks/ib-sriov-test/10.56.217.2"
mkdir -p "${taken%/*}"
printf 'someone-else\r\nnet1' >"$taken"
rc=0
setup "$tmp/out" DEVICE="$vf" SUBNET=10.56.217.0/30 || rc=$?
check "exit != 0" test "$rc" != 0
check "ADD error shown" has "$tmp/out" "no IP addresses available"
check "trap ran DEL, which succeeded" has "$tmp/out" "DEL succeeded"
check "the other allocation kept" test -f "$taken"
rm -f "$taken"
same_host "$tmp/out"

echo "== Ctrl-C after ADD"
rc=0
setup "$tmp/out" DEVICE="$vf" ON_CHECK='kill -INT $PPID; exit 0' || rc=$?
check "exit 130" rc_is "$rc" 130
check "ADD had succeeded" has "$tmp/out" "ADD succeeded"
check "trap ran DEL" has "$tmp/out" "+ cnitool del"
same_host "$tmp/out"

echo "== emuhost destroy"
emu_made=0
"$emu" destroy --prefix "$prefix" --root "$root"
check "emulated host gone" test ! -e "/var/run/netns/$host" -a ! -e "$root"

echo "cnitool_setup: $passes passed, $failures failed"
((failures == 0))
