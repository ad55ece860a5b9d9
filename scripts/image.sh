#!/usr/bin/env bash
# Builds the ib-sriov image (Containerfile) with buildah, without any registry pull: the
# image is FROM scratch and holds the two static binaries that scripts/build.sh makes
# (/usr/bin/ib-sriov, /usr/bin/ib-sriovctl, /usr/bin/thin_entrypoint; entrypoint thin_entrypoint), one image
# per platform, gathered in one OCI image index (a buildah manifest list), as the Go
# ib-sriov-cni release image is (linux/amd64, linux/arm64, linux/ppc64le, linux/s390x).
#
#   scripts/image.sh [--tag NAME] [--platforms LIST] [--oci-archive FILE] [--archive-ref NAME]
#                    [--skip-build]
#
#   --tag NAME          name of the image index (default localhost/ib-sriov:<version>,
#                       the version IB_SRIOV_VERSION or else Cargo.toml's); each platform's
#                       image is also tagged NAME-<arch> (localhost/ib-sriov:0.1.0-arm64)
#   --platforms LIST    comma-separated, of linux/amd64, linux/arm64, linux/ppc64le,
#                       linux/s390x (default: all four). The binaries of a platform other
#                       than this machine's come from `scripts/build.sh --arch` (Debian's
#                       cross toolchain, installed by scripts/deps.sh on first use)
#   --oci-archive FILE  also write the index with every platform's image as one OCI
#                       archive (for `skopeo copy --all oci-archive:FILE
#                       docker://your.registry/ib-sriov:TAG`, or `podman load -i FILE`).
#                       The same bytes for the same binaries and SOURCE_DATE_EPOCH: the
#                       index is written as an OCI layout and archived with sorted
#                       entries, owner 0:0, modes 0644/0755 and mtime SOURCE_DATE_EPOCH
#   --archive-ref NAME  the index's name inside the archive (its
#                       org.opencontainers.image.ref.name; default the --tag NAME)
#   --skip-build        use the binaries already built (target/<triple>/release, or
#                       target/cross/<triple>/release for another architecture)
#
# Prints the index's name on stdout. Needs root (buildah's default storage); installs
# buildah, podman and runc (scripts/deps.sh image). Labels: the OCI annotations
# version, revision (IB_SRIOV_COMMIT, else the git commit), created (SOURCE_DATE_EPOCH or
# now), source (IB_SRIOV_SOURCE, else the git remote `origin`, else "unknown"), licenses.
# With SOURCE_DATE_EPOCH set, it is also each image's creation time and its files' mtime
# (`buildah build --timestamp`): the images, and so the archive, are reproducible
# (scripts/release.sh).
# Building an image of another platform runs nothing of that platform (FROM scratch, no
# RUN), so it needs no emulator.
set -euo pipefail
cd "$(dirname "$0")/.."

tag="" archive="" archive_ref="" skip_build=0 platforms="linux/amd64,linux/arm64,linux/ppc64le,linux/s390x"
while (($#)); do
    case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --oci-archive) archive="$2"; shift 2 ;;
    --archive-ref) archive_ref="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --platforms) platforms="$2"; shift 2 ;;
    *) echo "image.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done

scripts/deps.sh image
version="${IB_SRIOV_VERSION:-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)}"
[[ -n "$version" ]] || { echo "image.sh: no version in Cargo.toml" >&2; exit 1; }
tag="${tag:-localhost/ib-sriov:$version}"
archive_ref="${archive_ref:-$tag}"
revision="${IB_SRIOV_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
timestamp=()
if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
    created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
    timestamp=(--timestamp "$SOURCE_DATE_EPOCH")
    mtime="$SOURCE_DATE_EPOCH"
else
    mtime="$(date +%s)"
    created="$(date -u -d "@$mtime" +%Y-%m-%dT%H:%M:%SZ)"
fi
source_url="${IB_SRIOV_SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}"

# Every platform checked before anything is built.
IFS=, read -r -a plats <<<"$platforms"
((${#plats[@]})) || { echo "image.sh: --platforms is empty" >&2; exit 2; }
. scripts/arch.sh # arch_of_oci
for p in "${plats[@]}"; do
    if [[ "$p" != linux/* ]] || ! arch_of_oci "${p#linux/}" >/dev/null; then
        echo "image.sh: unknown platform '$p' (linux/amd64, linux/arm64, linux/ppc64le, linux/s390x)" >&2
        exit 2
    fi
done

ctx="$(mktemp -d /tmp/ib-sriov-image.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
# A new index each time: the old one (and an image of that name) would keep old entries.
buildah manifest rm "$tag" >/dev/null 2>&1 || true
buildah rmi "$tag" >/dev/null 2>&1 || true
buildah manifest create "$tag" >/dev/null
for p in "${plats[@]}"; do
    arch="$(arch_of_oci "${p#linux/}")"
    if ((skip_build)); then
        triple="$arch-unknown-linux-gnu"
        if [[ "$arch" == "$(uname -m)" ]]; then
            bindir="$PWD/target/${CARGO_BUILD_TARGET:-$triple}/release"
        else
            bindir="$PWD/target/cross/$triple/release"
        fi
    else
        bindir="$(scripts/build.sh --arch "$arch")"
    fi
    for b in ib-sriov ib-sriovctl thin_entrypoint; do
        [[ -x "$bindir/$b" ]] || { echo "image.sh: missing $bindir/$b (run scripts/build.sh --arch $arch)" >&2; exit 1; }
    done
    rm -rf "${ctx:?}/$arch" && mkdir "$ctx/$arch"
    cp Containerfile "$bindir/ib-sriov" "$bindir/ib-sriovctl" "$bindir/thin_entrypoint" "$ctx/$arch/"
    echo "image.sh: building $tag-${p#linux/} ($p) from $bindir" >&2
    buildah build --layers=false --pull=false "${timestamp[@]}" --platform "$p" -f "$ctx/$arch/Containerfile" \
        --build-arg VERSION="$version" --build-arg REVISION="$revision" \
        --build-arg CREATED="$created" --build-arg SOURCE="$source_url" \
        -t "$tag-${p#linux/}" --manifest "$tag" "$ctx/$arch" >&2
done
if [[ -n "$archive" ]]; then
    rm -f "$archive"
    # An OCI layout first, then one tar of it with nothing of this machine or moment
    # (buildah's oci-archive: transport stamps the temp files' mtimes).
    buildah manifest push --all "$tag" "oci:$ctx/oci:$archive_ref" >&2
    find "$ctx/oci" -type d -exec chmod 0755 {} + && find "$ctx/oci" -type f -exec chmod 0644 {} +
    tar -C "$ctx/oci" --sort=name --format=ustar --owner=0 --group=0 --numeric-owner \
        --mtime="@$mtime" -cf "$archive" oci-layout index.json blobs
    echo "image.sh: wrote $archive (${plats[*]})" >&2
fi
echo "$tag"
