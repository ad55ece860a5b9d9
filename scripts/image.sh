#!/usr/bin/env bash
# Builds the ib-sriov image (Containerfile) with buildah, without any registry pull: the
# image is FROM scratch and holds the two static binaries that scripts/build.sh makes
# (/usr/bin/ib-sriov, /usr/bin/thin_entrypoint; entrypoint thin_entrypoint).
#
#   scripts/image.sh [--tag NAME] [--oci-archive FILE] [--skip-build]
#
#   --tag NAME          image name (default localhost/ib-sriov:<Cargo version>)
#   --oci-archive FILE  also write the image as an OCI archive (for `skopeo copy
#                       oci-archive:FILE docker://your.registry/ib-sriov:TAG`, or
#                       `podman load -i FILE`)
#   --skip-build        use the binaries already in target/<triple>/release
#
# Prints the image name on stdout. Needs root (buildah's default storage); installs
# buildah, podman and runc (scripts/deps.sh image). Labels: the OCI annotations
# version, revision (git commit), created (SOURCE_DATE_EPOCH or now), source
# (IB_SRIOV_SOURCE, else the git remote `origin`, else "unknown"), licenses.
set -euo pipefail
cd "$(dirname "$0")/.."

tag="" archive="" skip_build=0
while (($#)); do
    case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --oci-archive) archive="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    *) echo "image.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done

scripts/deps.sh image
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
[[ -n "$version" ]] || { echo "image.sh: no version in Cargo.toml" >&2; exit 1; }
tag="${tag:-localhost/ib-sriov:$version}"
revision="${IB_SRIOV_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
    created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
else
    created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
fi
source_url="${IB_SRIOV_SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}"

if ((skip_build)); then
    triple="${CARGO_BUILD_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}"
    bindir="$PWD/target/$triple/release"
else
    bindir="$(scripts/build.sh)"
fi
for b in ib-sriov thin_entrypoint; do
    [[ -x "$bindir/$b" ]] || { echo "image.sh: missing $bindir/$b (run scripts/build.sh)" >&2; exit 1; }
done

ctx="$(mktemp -d /tmp/ib-sriov-image.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
cp Containerfile "$ctx/"
cp "$bindir/ib-sriov" "$bindir/thin_entrypoint" "$ctx/"
echo "image.sh: building $tag from $bindir" >&2
buildah build --layers=false --pull=false -f "$ctx/Containerfile" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    --build-arg CREATED="$created" --build-arg SOURCE="$source_url" \
    -t "$tag" "$ctx" >&2
if [[ -n "$archive" ]]; then
    rm -f "$archive"
    buildah push "$tag" "oci-archive:$archive:$tag" >&2
    echo "image.sh: wrote $archive" >&2
fi
echo "$tag"
