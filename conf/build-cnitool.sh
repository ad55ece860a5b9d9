#!/usr/bin/env bash
# Build cnitool (github.com/containernetworking/cni/cnitool) for hand testing with
# conf/cnitool-setup.sh. Debian packages no cnitool, and Debian's libcni sources
# (golang-github-appc-cni-dev) lack its directory, so this takes cnitool.go of
# containernetworking/cni v1.1.2 (the libcni version Debian bookworm ships) and
# builds it offline against Debian's libcni with Debian's Go.
#
#   sudo conf/build-cnitool.sh                 # git clone --depth 1 -b v1.1.2 (needs network)
#   sudo conf/build-cnitool.sh --src ~/cni     # an existing checkout/extraction of the cni repo
#   conf/build-cnitool.sh --url URL --out ~/bin/cnitool   # a mirror; install elsewhere
#
# --src DIR  cni repo checkout (or extracted tarball); if it is a git checkout that has
#            tag v1.1.2, cnitool.go is taken from that tag, else from the work tree
# --url URL  git URL to clone tag v1.1.2 from (default https://github.com/containernetworking/cni)
# --out PATH where to install the binary (default /usr/local/bin/cnitool)
#
# Installs golang-go and golang-github-appc-cni-dev (and git, to clone) with apt-get when
# missing and run as root. Nothing is fetched by Go: go.mod replaces the cni module with
# /usr/share/gocode/src/github.com/containernetworking/cni, GOPROXY=off, -mod=readonly.
#
# With Go module access (any Go >= 1.16) this whole script is one line:
#   GOBIN=/usr/local/bin go install github.com/containernetworking/cni/cnitool@v1.1.2
set -euo pipefail

tag=v1.1.2
url=https://github.com/containernetworking/cni
src="" out=/usr/local/bin/cnitool
while (($#)); do
    case "$1" in
    --src) src="${2:?--src needs a directory}"; shift 2 ;;
    --url) url="${2:?--url needs a URL}"; shift 2 ;;
    --out) out="${2:?--out needs a path}"; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "build-cnitool: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

cni_src=/usr/share/gocode/src/github.com/containernetworking/cni
need=()
command -v go >/dev/null || need+=(golang-go)
[[ -f "$cni_src/libcni/api.go" ]] || need+=(golang-github-appc-cni-dev)
[[ -n "$src" ]] || command -v git >/dev/null || need+=(git ca-certificates)
if ((${#need[@]})); then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        echo "build-cnitool: apt-get install ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y --no-install-recommends "${need[@]}" ||
            { apt-get update && apt-get install -y --no-install-recommends "${need[@]}"; }
    else
        echo "build-cnitool: missing: ${need[*]} (as root: apt-get install ${need[*]})" >&2
        exit 1
    fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/build-cnitool.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [[ -z "$src" ]]; then
    echo "build-cnitool: git clone --depth 1 -b $tag $url"
    git -c advice.detachedHead=false clone -q --depth 1 -b "$tag" "$url" "$work/cni"
    src="$work/cni"
fi
mkdir "$work/cnitool"
if git -C "$src" rev-parse -q --verify "$tag^{commit}" >/dev/null 2>&1; then
    echo "build-cnitool: cnitool.go from $src at tag $tag"
    git -C "$src" show "$tag:cnitool/cnitool.go" >"$work/cnitool/cnitool.go"
elif [[ -f "$src/cnitool/cnitool.go" ]]; then
    echo "build-cnitool: cnitool.go from $src/cnitool (should be $tag to match Debian's libcni)"
    cp "$src/cnitool/cnitool.go" "$work/cnitool/"
else
    echo "build-cnitool: no cnitool/cnitool.go in $src (want a checkout of $url)" >&2
    exit 1
fi

cat >"$work/cnitool/go.mod" <<EOF
module github.com/containernetworking/cni/cnitool

go 1.19

require github.com/containernetworking/cni $tag

replace github.com/containernetworking/cni => $cni_src
EOF

export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly GO111MODULE=on
export CGO_ENABLED=0 GOPATH="$work/gopath"
GOCACHE="$(go env GOCACHE 2>/dev/null || true)"
[[ "$GOCACHE" == /* ]] || GOCACHE="$work/gocache"
export GOCACHE
(cd "$work/cnitool" && go build -trimpath -ldflags='-s -w' -o "$work/cnitool.bin" .)
mkdir -p "$(dirname "$out")"
install -m 0755 "$work/cnitool.bin" "$out"
echo "build-cnitool: installed $out ($(go version | awk '{print $3}'), libcni $(
    dpkg-query -W -f='${Version}' golang-github-appc-cni-dev 2>/dev/null || echo '?'))"
