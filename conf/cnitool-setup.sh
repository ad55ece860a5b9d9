#!/usr/bin/env bash
# Hand-testing ib-sriov with cnitool (github.com/containernetworking/cni/cnitool) on a
# host with a real VF. Edit DEVICE to a VF PCI address from `ls -l /sys/class/net/*/device`.
set -euo pipefail
DEVICE=${DEVICE:-0000:af:00.2}
export NETCONFPATH=${NETCONFPATH:-/tmp/ib-sriov-netconf}
export CNI_PATH=${CNI_PATH:-/opt/cni/bin}           # holds ib-sriov (and any external IPAM)
mkdir -p "$NETCONFPATH"
cat > "$NETCONFPATH/10-ib-sriov.conf" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "ib-sriov-test",
  "type": "ib-sriov",
  "deviceID": "$DEVICE",
  "link_state": "enable",
  "ipam": { "type": "ib-sriov-ipam", "subnet": "10.56.217.0/24" }
}
CONF
ip netns add ibtest 2>/dev/null || true
cnitool add ib-sriov-test /var/run/netns/ibtest
ip -n ibtest addr
cnitool check ib-sriov-test /var/run/netns/ibtest
cnitool del ib-sriov-test /var/run/netns/ibtest
ip netns del ibtest
