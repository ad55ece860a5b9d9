#!/usr/bin/env bash
# Hand test ib-sriov with cnitool on a host with a real VF: ADD, CHECK and DEL of one
# network on a network namespace made for it. On failure or Ctrl-C the trap undoes what
# was done (DEL if ADD ran, the netns, the temp config dir).
#
#   sudo DEVICE=0000:af:00.2 conf/cnitool-setup.sh
#
# DEVICE    (required) the VF's PCI address. VFs are the PCI devices with a physfn link:
#             for d in /sys/bus/pci/devices/*/physfn; do v=${d%/physfn}; echo "${v##*/} -> PF $(basename $(readlink $d)) netdev $(ls $v/net 2>/dev/null)"; done
# GUID      GUID for this attachment, passed as CAP_ARGS='{"infinibandGUID":"..."}'
#           (runtimeConfig.infinibandGUID, as Multus passes it); unset: the VF keeps its
#           GUID. The config has no fixed "guid": it would be the same on every node of
#           the fabric (per pod: runtimeConfig.infinibandGUID or args.cni.guid; the
#           plugin reads no GUID from CNI_ARGS).
# CNI_PATH  directory holding ib-sriov (default /opt/cni/bin)
# STATE_DIR the plugin's journals go to $STATE_DIR/ib-sriov (stateDir), its IP store to
#           $STATE_DIR/networks (ipam dataDir); default /var/lib/cni, on disk, so a test
#           host's attachments outlive its reboot (the plugin's own defaults are stateDir
#           /run/ib-sriov, a tmpfs, and dataDir /var/lib/cni/networks)
# NETNS     network namespace to create (default ib-sriov-test); SUBNET (default
#           10.56.217.0/24); CNI_IFNAME (default net1) and CNI_ARGS go to cnitool as is
#
# cnitool: conf/build-cnitool.sh builds it (Debian has no package).
set -euo pipefail

sys="${IB_SRIOV_SYSFS_ROOT:-/sys}" # the plugin reads sysfs there too
hint="VFs are the PCI devices with a physfn link; list them with:
  for d in $sys/bus/pci/devices/*/physfn; do v=\${d%/physfn}; echo \"\${v##*/} -> PF \$(basename \$(readlink \$d)) netdev \$(ls \$v/net 2>/dev/null)\"; done
then: sudo DEVICE=<VF address> $0"
if [[ -z "${DEVICE:-}" ]]; then
    echo "cnitool-setup: set DEVICE to the PCI address of a VF. $hint" >&2
    exit 2
fi
if [[ ! -L "$sys/bus/pci/devices/$DEVICE/physfn" ]]; then
    echo "cnitool-setup: DEVICE=$DEVICE is not a VF (no $sys/bus/pci/devices/$DEVICE/physfn). $hint" >&2
    exit 2
fi
command -v cnitool >/dev/null || { echo "cnitool-setup: no cnitool in PATH (build it: conf/build-cnitool.sh)" >&2; exit 1; }

export CNI_PATH="${CNI_PATH:-/opt/cni/bin}" CNI_IFNAME="${CNI_IFNAME:-net1}"
NETNS="${NETNS:-ib-sriov-test}"
net=ib-sriov-test
if [[ -n "${GUID:-}" ]]; then export CAP_ARGS="{\"infinibandGUID\": \"$GUID\"}"; fi
STATE_DIR="${STATE_DIR:-/var/lib/cni}"

run() { echo "+ $*"; "$@"; }
added=0 netns_made=0
NETCONFPATH=""
cleanup() {
    local rc=$?
    set +e
    trap '' INT TERM # let the cleanup finish
    if ((added)); then run cnitool del "$net" "/var/run/netns/$NETNS"; fi
    if ((netns_made)); then run ip netns del "$NETNS"; fi
    if [[ -n "$NETCONFPATH" ]]; then rm -rf "$NETCONFPATH"; fi
    if ((rc == 0)); then echo "cnitool-setup: OK"; else echo "cnitool-setup: FAILED (exit $rc)" >&2; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

NETCONFPATH="$(mktemp -d /tmp/ib-sriov-netconf.XXXXXX)"
export NETCONFPATH
cat >"$NETCONFPATH/$net.conflist" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "$net",
  "plugins": [{
    "type": "ib-sriov",
    "deviceID": "$DEVICE",
    "link_state": "enable",
    "capabilities": {"infinibandGUID": true},
    "stateDir": "$STATE_DIR/ib-sriov",
    "ipam": {"type": "ib-sriov-ipam", "subnet": "${SUBNET:-10.56.217.0/24}", "dataDir": "$STATE_DIR/networks"}
  }]
}
CONF
echo "VF $DEVICE (PF $(basename "$(readlink "$sys/bus/pci/devices/$DEVICE/physfn")"), netdev $(ls "$sys/bus/pci/devices/$DEVICE/net" 2>/dev/null || echo none))"
echo "NETCONFPATH=$NETCONFPATH CNI_PATH=$CNI_PATH CNI_IFNAME=$CNI_IFNAME${CAP_ARGS:+ CAP_ARGS=$CAP_ARGS}${CNI_ARGS:+ CNI_ARGS=$CNI_ARGS}"
cat "$NETCONFPATH/$net.conflist"

run ip netns add "$NETNS"
netns_made=1
added=1 # a failed ADD may have done part of its work: DEL undoes it
run cnitool add "$net" "/var/run/netns/$NETNS"
echo # the result has no final newline
run ip -n "$NETNS" addr show "$CNI_IFNAME"
run cnitool check "$net" "/var/run/netns/$NETNS"
run cnitool del "$net" "/var/run/netns/$NETNS"
added=0
