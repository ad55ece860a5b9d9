#!/usr/bin/env bash
# Self-test of the libcni driver (not of ib-sriov): drives Debian's reference
# plugins (containernetworking-plugins: host-device, host-local, tuning) and a
# recording fake plugin through libcni, in private network namespaces.
#
#   tests/libcni/selftest.sh [driver-binary]
#
# Without an argument the driver is built with build.sh into a temp dir.
# Needs root (netns, veth). Installs containernetworking-plugins and jq with
# apt-get when missing. Prints "N passed, N failed" last; exit 1 on failure.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d /tmp/libcni-selftest.XXXXXX)"
id="lc$$"
host="${id}-host"
pod="${id}-pod"
vf="${id}vf"      # stands in for a VF netdev (<= 15 chars)
peer="${id}pe"
podns="/var/run/netns/$pod"
passed=0
failed=0

cleanup() {
    ip netns del "$pod" 2>/dev/null
    ip netns del "$host" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

if [[ "$(id -u)" != 0 ]]; then
    echo "selftest.sh: needs root" >&2
    exit 1
fi
need=()
[[ -x /usr/lib/cni/host-device ]] || need+=(containernetworking-plugins)
command -v jq >/dev/null || need+=(jq)
if ((${#need[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
        { apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; } || exit 1
fi

driver="${1:-}"
if [[ -z "$driver" ]]; then
    driver="$tmp/libcni-driver"
    "$here/build.sh" "$driver" || exit 1
fi

ok() { passed=$((passed + 1)); echo "ok   - $*"; }
ko() { failed=$((failed + 1)); echo "FAIL - $*"; }
expect() { # expect <description> <command...>: pass when the command succeeds
    local d="$1"; shift
    if "$@"; then ok "$d"; else ko "$d"; fi
}

# The recording fake plugin: logs every call, answers ADD in the config's
# cniVersion, fails with a CNI error when RECORDER_FAIL is set.
mkdir -p "$tmp/bin" "$tmp/conf"
cat >"$tmp/bin/recorder" <<'EOF'
#!/bin/bash
in="$(cat)"
jq -cn --arg cmd "${CNI_COMMAND-}" --arg cid "${CNI_CONTAINERID-}" --arg ifn "${CNI_IFNAME-}" \
    --arg ns "${CNI_NETNS-}" --arg args "${CNI_ARGS-}" --argjson conf "${in:-null}" \
    '{cmd:$cmd,cid:$cid,ifname:$ifn,netns:$ns,args:$args,conf:$conf}' >>"$RECORDER_LOG"
if [[ -n "${RECORDER_FAIL-}" ]]; then
    echo '{"cniVersion":"1.0.0","code":11,"msg":"try again later","details":"recorder"}'
    exit 1
fi
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
ADD) jq -cn --arg v "$(jq -r .cniVersion <<<"$in")" --arg i "$CNI_IFNAME" --arg ns "$CNI_NETNS" \
    '{cniVersion:$v,interfaces:[{name:$i,sandbox:$ns}],ips:[{address:"10.77.9.5/24",interface:0}]}' ;;
esac
EOF
chmod +x "$tmp/bin/recorder"
export RECORDER_LOG="$tmp/recorder.log"
: >"$RECORDER_LOG"

ip netns add "$host" && ip netns add "$pod" || exit 1
ip -n "$host" link add "$vf" type veth peer name "$peer" || exit 1
ip -n "$host" link set "$vf" up
ip -n "$host" link set "$peer" up

drv() { # drv <args...>: the driver inside the host netns, output in $tmp/out, $tmp/err
    ip netns exec "$host" env CNI_PATH="$tmp/bin:/usr/lib/cni" LIBCNI_CACHE_DIR="$tmp/cache" \
        "$driver" "$@" >"$tmp/out" 2>"$tmp/err"
}
in_pod() { ip -n "$pod" -o link show dev net1 >/dev/null 2>&1; }
in_host() { ip -n "$host" -o link show dev "$vf" >/dev/null 2>&1; }
jqo() { jq -e "$@" "$tmp/out" >/dev/null; }
jqf() { jq -e "$@" >/dev/null; }
pod_mac_is() { ip -n "$pod" -o link show dev net1 | grep -qi "$1"; }
ipam_files() { find "$tmp/ipam" -type f -name '10.*' 2>/dev/null | wc -l; }

hostdev() { # hostdev <cniVersion> <name>: plugin object JSON
    echo '{"type":"host-device","device":"'"$vf"'","ipam":{"type":"host-local","subnet":"10.77.1.0/24","dataDir":"'"$tmp/ipam"'"}}'
}

# --- 0.3.1, single .conf wrapped as a list ---------------------------------
jq -n --argjson p "$(hostdev)" '$p + {cniVersion:"0.3.1",name:"lc031"}' >"$tmp/conf/lc031.conf"
expect "0.3.1 add" drv add "$tmp/conf/lc031.conf" "$podns" c031 net1 "IgnoreUnknown=1;IgnoreUnknown=1"
expect "0.3.1 result version and ips[].version" jqo '.cniVersion == "0.3.1" and .ips[0].version == "4"'
expect "0.3.1 device in pod" in_pod
expect "0.3.1 cache entry records netns" jqf --arg ns "$podns" '.netns == $ns' "$tmp/cache/results/lc031-c031-net1"
if drv check "$tmp/conf/lc031.conf" "$podns" c031 net1; then ko "0.3.1 check refused by libcni"
else expect "0.3.1 check refused by libcni" grep -q 'does not support the CHECK' "$tmp/err"; fi
expect "0.3.1 del" drv del "$tmp/conf/lc031.conf" "$podns" c031 net1
expect "0.3.1 device back in host" in_host
expect "0.3.1 cache and IP released" test ! -e "$tmp/cache/results/lc031-c031-net1" -a "$(ipam_files)" = 0

# --- 0.4.0, .conflist --------------------------------------------------------
jq -n --argjson p "$(hostdev)" '{cniVersion:"0.4.0",name:"lc040",plugins:[$p]}' >"$tmp/conf/lc040.conflist"
expect "0.4.0 add" drv add "$tmp/conf/lc040.conflist" "$podns" c040 net1
expect "0.4.0 result" jqo '.cniVersion == "0.4.0" and .ips[0].version == "4" and .interfaces[0].name == "net1"'
expect "0.4.0 check" drv check "$tmp/conf/lc040.conflist" "$podns" c040 net1
expect "0.4.0 del" drv del "$tmp/conf/lc040.conflist" "$podns" c040 net1
drv del "$tmp/conf/lc040.conflist" "$podns" c040 net1 && ok "0.4.0 del repeated" || echo "note - Debian host-device 1.1.1: repeated DEL fails: $(head -n 1 "$tmp/err")"
expect "0.4.0 device back, IP released" test "$(in_host && echo y)" = y -a "$(ipam_files)" = 0

# --- 1.0.0, .conflist with tuning and a capability argument ------------------
jq -n --argjson p "$(hostdev)" '{cniVersion:"1.0.0",name:"lc100",plugins:[$p,
    {type:"tuning",capabilities:{mac:true}}]}' >"$tmp/conf/lc100.conflist"
mac=02:11:22:33:44:55
expect "1.0.0 add --cap mac" drv --cap mac=$mac add "$tmp/conf/lc100.conflist" "$podns" c100 net1
expect "1.0.0 result has no ips[].version" jqo '.cniVersion == "1.0.0" and (.ips[0] | has("version") | not)'
expect "1.0.0 capability reached tuning" pod_mac_is "$mac"
expect "1.0.0 check" drv check "$tmp/conf/lc100.conflist" "$podns" c100 net1
expect "1.0.0 del" drv del "$tmp/conf/lc100.conflist" "$podns" c100 net1
expect "1.0.0 del with empty netns (-)" drv del "$tmp/conf/lc100.conflist" - c100 net1
expect "1.0.0 device back, IP released" test "$(in_host && echo y)" = y -a "$(ipam_files)" = 0

# --- error path --------------------------------------------------------------
jq -n '{cniVersion:"1.0.0",name:"lcerr",type:"host-device",device:"nosuchdev0"}' >"$tmp/conf/lcerr.conf"
if drv add "$tmp/conf/lcerr.conf" "$podns" cerr net1; then ko "failing add exits 1"; else ok "failing add exits 1"; fi
expect "failing add: message on stderr, nothing on stdout" test -s "$tmp/err" -a ! -s "$tmp/out"

# --- recorder: CNI_ARGS, capabilities, GC, STATUS, CNI error codes ------------
rec() { jq -n --arg v "$1" '{cniVersion:$v,name:"rec",plugins:[{type:"recorder",capabilities:{deviceID:true}}]}'; }
rec 1.0.0 >"$tmp/conf/rec100.conflist"
rec 1.1.0 >"$tmp/conf/rec110.conflist"
lastlog() { tail -n 1 "$RECORDER_LOG"; }
expect "rec add r1" drv --cap deviceID=0000:3b:00.2 --cap infinibandGUID=02:00:00:00:00:00:00:01 \
    add "$tmp/conf/rec100.conflist" "$podns" r1 net1 "IgnoreUnknown=1;IgnoreUnknown=1;K8S_POD_NAME=p"
expect "rec add: CNI_ARGS passed with duplicates" \
    test "$(lastlog | jq -r .args)" = "IgnoreUnknown=1;IgnoreUnknown=1;K8S_POD_NAME=p"
expect "rec add: declared capability injected, undeclared one not" \
    test "$(lastlog | jq -c .conf.runtimeConfig)" = '{"deviceID":"0000:3b:00.2"}'
expect "rec add r2" drv add "$tmp/conf/rec100.conflist" "$podns" r2 net1
: >"$RECORDER_LOG"
expect "rec gc 1.1.0 --valid r1/net1" drv --valid r1/net1 gc "$tmp/conf/rec110.conflist"
expect "rec gc: stale r2 got DEL with its cached netns" \
    test "$(jq -sc '[.[] | select(.cmd == "DEL") | [.cid, .netns]]' "$RECORDER_LOG")" = "[[\"r2\",\"$podns\"]]"
expect "rec gc: GC carries valid-attachments" test "$(jq -sc '[.[] | select(.cmd == "GC") |
    .conf["cni.dev/valid-attachments"], .conf["cni.dev/attachments"], .conf.name, .conf.cniVersion, .cid]' \
    "$RECORDER_LOG")" = '[[{"containerID":"r1","ifname":"net1"}],[{"containerID":"r1","ifname":"net1"}],"rec","1.1.0",""]'
expect "rec gc: r2 cache gone, r1 kept" test ! -e "$tmp/cache/results/rec-r2-net1" -a -e "$tmp/cache/results/rec-r1-net1"
: >"$RECORDER_LOG"
expect "rec gc 1.0.0 sends no GC" drv gc "$tmp/conf/rec100.conflist"
expect "rec gc 1.0.0: only the stale DEL of r1" test "$(jq -sc '[.[] | .cmd + ":" + .cid]' "$RECORDER_LOG")" = '["DEL:r1"]'
: >"$RECORDER_LOG"
expect "rec status 1.1.0" drv status "$tmp/conf/rec110.conflist"
expect "rec status sent STATUS" test "$(jq -sc '[.[] | .cmd + ":" + .conf.name]' "$RECORDER_LOG")" = '["STATUS:rec"]'
: >"$RECORDER_LOG"
expect "rec status 1.0.0 is a no-op" drv status "$tmp/conf/rec100.conflist"
expect "rec status 1.0.0 sent nothing" test ! -s "$RECORDER_LOG"
if RECORDER_FAIL=1 drv status "$tmp/conf/rec110.conflist"; then ko "rec failing status exits 1"
else expect "rec failing status exits 1 with cni-error code 11" grep -q '^cni-error: {"code":11,' "$tmp/err"; fi
expect "rec validate" drv validate "$tmp/conf/rec100.conflist"
expect "rec validate lists capabilities" jqo '.capabilities == ["deviceID"]'
# libcni 1.1.2 has no 1.1.0 result type: ADD with a 1.1.0 configuration fails
# in the library (not in the plugin). Reported, not counted.
if drv add "$tmp/conf/rec110.conflist" "$podns" r3 net1; then
    echo "note - libcni accepted a 1.1.0 ADD result (newer libcni than 1.1.2?)"
else
    echo "note - known libcni 1.1.2 limitation: ADD at cniVersion 1.1.0 fails: $(head -n 1 "$tmp/err")"
fi

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
