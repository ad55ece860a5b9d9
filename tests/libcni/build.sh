#!/usr/bin/env bash
# Build the libcni driver (tests/libcni/main.go), or another program of this module
# (the rdma-cni stand-in, tests/libcni/rdma-standin; the dra-driver-sriov stand-in,
# tests/libcni/dra-standin), offline.
#
#   tests/libcni/build.sh <output-binary-path> [package, default . (the driver);
#                                               ./rdma-standin; ./dra-standin]
#
# Needs Debian's golang-go and golang-github-appc-cni-dev (libcni 1.1.2,
# sources under /usr/share/gocode/src). When they are missing and we are root,
# they are installed with apt-get (set LIBCNI_NO_APT=1 to forbid that).
# Module mode: go.mod replaces github.com/containernetworking/cni with the
# Debian source tree; GOPROXY=off and -mod=readonly make sure nothing is
# fetched. No go.sum is needed (a replaced directory is not checksummed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-}"
pkg="${2:-.}"
if [[ -z "$out" ]]; then
    echo "usage: $0 <output-binary-path>" >&2
    exit 2
fi
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

cni_src=/usr/share/gocode/src/github.com/containernetworking/cni
need=()
command -v go >/dev/null 2>&1 || need+=(golang-go)
[[ -f "$cni_src/libcni/api.go" ]] || need+=(golang-github-appc-cni-dev)
if ((${#need[@]})); then
    if [[ "${LIBCNI_NO_APT:-0}" != 1 && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        echo "build.sh: installing ${need[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
            { apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; }
    else
        echo "build.sh: missing Debian packages: ${need[*]} (apt-get install ${need[*]})" >&2
        exit 1
    fi
fi

export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly GO111MODULE=on
export CGO_ENABLED=0
export GOCACHE="${GOCACHE:-${TMPDIR:-/tmp}/ib-sriov-libcni-gocache}"
export GOPATH="${GOPATH:-${TMPDIR:-/tmp}/ib-sriov-libcni-gopath}"

mkdir -p "$(dirname "$out")"
cd "$here"
go build -trimpath -o "$out" "$pkg"
echo "build.sh: built $out ($(go version | awk '{print $3}'), libcni $(dpkg-query -W -f='${Version}' golang-github-appc-cni-dev 2>/dev/null || echo '?'))" >&2
