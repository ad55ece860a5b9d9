#!/usr/bin/env bash
# Builds a release of ib-sriov into dist/<version>/: for each architecture the static
# `ib-sriov`, `ib-sriovctl` and `thin_entrypoint` with their dependency lists, the multi-platform OCI
# image archive, BUILDINFO and SHA256SUMS over all of them.
#
#   scripts/release.sh [--commit REV] [--snapshot] [--arches LIST] [--no-image] [--keep]
#   scripts/release.sh --check-reproducible [--commit REV] [--snapshot] [--arches LIST] [--no-image] [--keep]
#
#   --commit REV          build REV instead of HEAD (a release commit that main has moved
#                         past, see "The release commit" below)
#   --snapshot            build the commit although it is no release (see below)
#   --arches LIST         comma-separated, of x86_64, aarch64, powerpc64le, s390x (default:
#                         all four; the image holds the same platforms). A release of fewer
#                         says so in BUILDINFO
#   --no-image            no OCI archive
#   --check-reproducible  build everything twice, from scratch, in two directories of
#                         different paths and with two different CARGO_HOME paths, print
#                         both SHA256SUMS and their difference; exit 1 if they differ.
#                         When they agree the first build becomes dist/<version>/
#   --keep                keep the build directories (printed) instead of removing them
#
# THE VERSION COMES FROM THE TAG. A release is built from the git tag vX.Y.Z that points
# at HEAD, and from that commit only (`git archive`: uncommitted changes never reach a
# release). Design choice: the tag must AGREE with Cargo.toml rather than override it.
# release.sh refuses when Cargo.toml's `version` at that commit is not X.Y.Z, and when
# CHANGELOG.md there has no `## [X.Y.Z] - YYYY-MM-DD` entry. It does not inject the tag's
# version over Cargo.toml's, so Cargo.toml, Cargo.lock, `cargo metadata`, the dependency
# list embedded in each binary, the image labels and `ib-sriov --version` all say X.Y.Z,
# and a plain `cargo build` of the tagged commit says it too. To cut a release: set the
# version in Cargo.toml (and Cargo.lock), date its CHANGELOG.md entry, commit, then
# `git tag -a vX.Y.Z` and run this script.
#
# The release commit, when no tag travelled with it. A tag is the release's name, but a
# repository can reach its users without its tags (a submission that carries commits
# only, a mirror that drops refs/tags). So a commit is also taken as the release X.Y.Z,
# untagged, when all of these hold: no tag vX.Y.Z exists in this repository (a tag,
# where there is one, wins), Cargo.toml there says X.Y.Z, and it is THE commit that
# dated the entry: CHANGELOG.md there has `## [X.Y.Z] - YYYY-MM-DD` and its first
# parent's has none. Exactly one commit of a history does that, so the release is still
# one commit, found with `git log -G '^## \[X.Y.Z\] - [0-9]' -- CHANGELOG.md`. BUILDINFO
# then says "tag: none (untagged release commit)", and the script prints the
# `git tag -a vX.Y.Z <commit>` that names it.
#
# Neither (no tag at the commit, and not the untagged release commit): refused unless --snapshot. A
# snapshot's version is X.Y.Z-dev.g<commit, 12 hex> (X.Y.Z from Cargo.toml). The
# version is injected as IB_SRIOV_VERSION (a release's X.Y.Z, a snapshot's), which
# build.rs hands to `crate::version()` (src/lib.rs; a build without it, any build outside
# this script, says X.Y.Z-dev+g<commit>), so the binaries' --version, the doctor report,
# the image's version label and tag and every file name say what it is; so does
# BUILDINFO ("snapshot of <commit>, NOT A RELEASE"). (A semver pre-release with a `.`,
# not `+g<sha>` build metadata: `+` is not allowed in an image tag.)
#
# What dist/<version>/ holds (goarch: amd64, arm64, ppc64le, s390x):
#   ib-sriov-<version>-linux-<goarch>          the plugin (static; install it also as
#                                              ib-sriov-ipam: one binary, dispatched by
#                                              argv[0]; thin_entrypoint does that)
#   ib-sriovctl-<version>-linux-<goarch>       the node tools: doctor, exporter, top
#                                              (static; `ib-sriov doctor` runs it from
#                                              the plugin's directory or PATH)
#   thin_entrypoint-<version>-linux-<goarch>   the image's entrypoint (static)
#   <binary>.deps.json                         the crates in that binary (below)
#   ib-sriov-<version>.oci.tar                 the OCI image index of every platform
#                                              (scripts/image.sh; `skopeo copy --all
#                                              oci-archive:FILE docker://REGISTRY/ib-sriov:TAG`)
#   BUILDINFO                                  commit, tag, SOURCE_DATE_EPOCH, toolchains
#   SHA256SUMS                                 `sha256sum -c SHA256SUMS` in that directory
#
# Dependency lists: built with `cargo auditable build` (cargo-auditable, installed at
# the pinned version below when missing), each binary carries its crates (resolved for
# its target with the release features) zlib-compressed in an ELF section `.dep-v0`
# (read by `cargo audit bin`, `rust-audit-info`, syft, trivy). Beside it,
# <binary>.deps.json is that section read back out of the binary here, with each
# crate's source and checksum from Cargo.lock and its kind: "linked" (in the binary),
# "compile-time" (build scripts, proc-macros and what only they use); and the Rust
# standard library it was linked with.
#
# Reproducible: the same commit gives the same bytes, whatever the build directory and
# CARGO_HOME are called (--check-reproducible proves it), on a machine with the same
# toolchains (recorded in BUILDINFO: rustup's stable rustc for x86_64, Debian's rustc-web
# with -Zbuild-std for the others, scripts/build.sh). How:
#   - --remap-path-prefix for the build directory (-> /ib-sriov), CARGO_HOME (-> /cargo),
#     the rustup sysroot (-> /rustc-sysroot) and Debian's std source (->
#     /rustc/<rustc-web commit>, as the prebuilt std has); Cargo keeps these flags out of
#     -C metadata, so symbol names do not change with them. After each build no binary
#     may contain the build directory's or CARGO_HOME's path (checked)
#   - SOURCE_DATE_EPOCH = the commit's committer time: `ib-sriov --version`'s date, the
#     image's creation time, its files' and the archive's mtimes
#   - codegen-units=1 and fat LTO (Cargo.toml's release profile), --locked, a clean
#     environment (no RUSTFLAGS, CARGO_* or wrapper of the caller's), TZ=UTC, LC_ALL=C,
#     umask 022
#   - the OCI archive: sorted entries, owner 0:0, fixed modes and mtime (scripts/image.sh)
#
# Needs root (buildah; scripts/deps.sh installs the cross toolchains and buildah on first
# use). Takes about 20 minutes for the four architectures on 2 busy cores (x86_64 ~2.5,
# each cross architecture 4 to 7: its std is built too; the image seconds), twice that
# with --check-reproducible.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
. scripts/arch.sh # ARCHES, arch_facts

AUDITABLE_VERSION=0.7.7 # cargo-auditable: its version shapes the .dep-v0 bytes

die() { echo "release.sh: $*" >&2; exit 1; }
say() { echo "release.sh: $*" >&2; }

snapshot=0 check=0 image=1 keep=0 arches_arg="" rev=HEAD
while (($#)); do
    case "$1" in
    --commit) rev="${2:?--commit needs a revision}"; shift 2 ;;
    --snapshot) snapshot=1; shift ;;
    --check-reproducible) check=1; shift ;;
    --arches) arches_arg="${2:?--arches needs a list}"; shift 2 ;;
    --no-image) image=0; shift ;;
    --keep) keep=1; shift ;;
    *) echo "release.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
if [[ -n "$arches_arg" ]]; then
    IFS=, read -r -a arches <<<"$arches_arg"
else
    read -r -a arches <<<"$ARCHES"
fi
((${#arches[@]})) || die "--arches is empty"
for a in "${arches[@]}"; do
    arch_facts "$a" || { echo "release.sh: unknown architecture '$a' ($ARCHES)" >&2; exit 2; }
done

# ---- What is built, and under which version ---------------------------------------
commit="$(git rev-parse --verify "$rev^{commit}")" || die "--commit $rev: no such commit"
short="$(git rev-parse --short=12 "$commit")"
cargo_version="$(git show "$commit:Cargo.toml" | sed -n 's/^version = "\(.*\)"$/\1/p' | head -n1)"
[[ -n "$cargo_version" ]] || die "no version in Cargo.toml at $short"
mapfile -t tags < <(git tag --points-at "$commit" --list 'v*' | grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$' || true)
((${#tags[@]} <= 1)) || die "several release tags point at $short: ${tags[*]}"
tag="${tags[0]:-}"
# dated_entry COMMIT: true when CHANGELOG.md at COMMIT has a dated entry for Cargo.toml's version.
dated_entry() {
    git show "$1:CHANGELOG.md" 2>/dev/null | grep -qE "^## \[${cargo_version//./\\.}\] - [0-9]{4}-[0-9]{2}-[0-9]{2}\$"
}
untagged=0
if [[ -z "$tag" ]] && ! ((snapshot)) && [[ -z "$(git tag --list "v$cargo_version")" ]] &&
    dated_entry "$commit" && ! { git rev-parse -q --verify "$commit^1" >/dev/null && dated_entry "$commit^1"; }; then
    untagged=1
    tag="v$cargo_version"
    say "no tag v$cargo_version in this repository: $short is the commit that dated CHANGELOG.md's [$cargo_version] entry, built as the release v$cargo_version (name it: git tag -a v$cargo_version -m v$cargo_version $commit)"
fi
if ((snapshot)); then
    version="$cargo_version-dev.g$short"
    kind="snapshot of $commit, NOT A RELEASE"
elif [[ -z "$tag" ]]; then
    described="$(git describe --tags --match 'v[0-9]*' "$commit" 2>/dev/null || echo "no release tag")"
    die "$short ($described) is not at a release tag vX.Y.Z, nor the commit that dated CHANGELOG.md's [$cargo_version] entry: tag it (git tag -a v$cargo_version) or pass --snapshot"
else
    version="${tag#v}"
    [[ "$version" == "$cargo_version" ]] ||
        die "tag $tag but Cargo.toml at $short says version $cargo_version: set version = \"$version\" in Cargo.toml (and Cargo.lock), commit, and move the tag"
    git show "$commit:CHANGELOG.md" | grep -qE "^## \[${version//./\\.}\] - [0-9]{4}-[0-9]{2}-[0-9]{2}\$" ||
        die "CHANGELOG.md at $short has no '## [$version] - YYYY-MM-DD' entry (Keep a Changelog): date it, commit, and move the tag"
    kind="release $tag ($commit)"
    ((untagged == 0)) || kind="release $tag, untagged ($commit: the commit that dated its CHANGELOG.md entry)"
fi
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
    say "note: the work tree has uncommitted changes; they are not in this build (it builds commit $short)"
fi
epoch="$(git log -1 --format=%ct "$commit")"
dist="$repo/dist/$version"
platforms=""
for a in "${arches[@]}"; do
    arch_facts "$a"
    platforms+="${platforms:+,}linux/$oci"
done
say "$kind: version $version, arches ${arches[*]}, SOURCE_DATE_EPOCH $epoch ($(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ))"

# ---- Tools ---------------------------------------------------------------------------
command -v python3 >/dev/null || die "python3 is needed (the dependency lists)"
if ! cargo install --list 2>/dev/null | grep -qx "cargo-auditable v$AUDITABLE_VERSION:"; then
    say "installing cargo-auditable $AUDITABLE_VERSION (cargo install --locked)"
    cargo install --locked --quiet cargo-auditable --version "$AUDITABLE_VERSION" >&2 ||
        die "cannot install cargo-auditable $AUDITABLE_VERSION: the binaries would carry no dependency list"
fi
for a in "${arches[@]}"; do
    [[ "$a" == "$(uname -m)" ]] || scripts/deps.sh "cross-$a" >&2
done
((image == 0)) || scripts/deps.sh image >&2
default_cargo_home="${CARGO_HOME:-$HOME/.cargo}"
host_sysroot="$(rustc --print sysroot)"

# ---- One build, from scratch: build_once LABEL WORK CARGO_HOME OUT -------------------
build_once() {
    local label="$1" work="$2" cargo_home="$3" out="$4"
    local src="$work/ib-sriov-$version" t0 t1 a bindir b name std flags=() remap
    [[ "$work$cargo_home" != *[[:space:]]* ]] || die "no white space in build paths: $work, $cargo_home"
    mkdir -p "$src" "$out"
    git -C "$repo" archive --format=tar "$commit" | tar -x -C "$src"
    for remap in "$src=/ib-sriov" "$cargo_home=/cargo" "$host_sysroot=/rustc-sysroot"; do
        flags+=("--remap-path-prefix=$remap")
    done
    if [[ -x /usr/bin/rustc ]]; then # Debian's rustc-web: its std is built from source here
        flags+=("--remap-path-prefix=/usr/lib/rustlib/src/rust=/rustc/$(/usr/bin/rustc -vV | sed -n 's/^commit-hash: //p')")
    fi
    # The build's whole environment: the caller's PATH, HOME and root's tools, nothing
    # of the caller's cargo/rustc settings.
    local envs=(env -i PATH="$PATH" HOME="$HOME" USER="${USER:-root}" TERM=dumb TZ=UTC LC_ALL=C
        CARGO_HOME="$cargo_home" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
        CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0 SOURCE_DATE_EPOCH="$epoch"
        IB_SRIOV_COMMIT="$short" IB_SRIOV_AUDITABLE=1 RUSTFLAGS="${flags[*]}")
    # The version the binaries call themselves: X.Y.Z for a release (without it build.rs
    # would say X.Y.Z-dev+g<commit>, what every non-release build says), the snapshot's.
    envs+=(IB_SRIOV_VERSION="$version")
    # Which crates are proc-macros (for the dependency lists).
    (cd "$src" && "${envs[@]}" cargo metadata --format-version 1 --locked --offline >"$work/metadata.json") ||
        die "cargo metadata failed (in $src)"

    for a in "${arches[@]}"; do
        arch_facts "$a"
        t0=$(date +%s)
        bindir="$(cd "$src" && umask 022 && "${envs[@]}" scripts/build.sh --arch "$a")" ||
            die "$a: scripts/build.sh --arch $a failed (in $src)"
        t1=$(date +%s)
        say "$a: built in $((t1 - t0)) s ($bindir)"
        for b in ib-sriov ib-sriovctl thin_entrypoint; do
            name="$b-$version-linux-$oci"
            install -m 0755 "$bindir/$b" "$out/$name"
            if grep -a -q -F -e "$work" -e "$cargo_home" -e "$host_sysroot" "$out/$name"; then
                grep -a -o -F -e "$work" -e "$cargo_home" -e "$host_sysroot" "$out/$name" | sort | uniq -c >&2
                die "$a: $b holds a path of this build ($work, $cargo_home or $host_sysroot)"
            fi
            if [[ "$a" == "$(uname -m)" ]]; then
                std="rustup's prebuilt std of $(rustc -V)"
            else
                std="built from source with -Zbuild-std by $(/usr/bin/rustc -V), rust-web-src $(dpkg-query -W -f='${Version}' rust-web-src)"
            fi
            deps_json "$out/$name" "$src/Cargo.lock" "$work/metadata.json" "$triple" "$std" >"$out/$name.deps.json"
        done
    done
    if ((image)); then
        t0=$(date +%s)
        local btag="localhost/ib-sriov-release-$$-$label:$version"
        (cd "$src" && "${envs[@]}" IB_SRIOV_COMMIT="$commit" IB_SRIOV_SOURCE="${IB_SRIOV_SOURCE:-unknown}" \
            scripts/image.sh --skip-build --platforms "$platforms" --tag "$btag" \
            --archive-ref "localhost/ib-sriov:$version" --oci-archive "$out/ib-sriov-$version.oci.tar" >/dev/null) ||
            die "scripts/image.sh failed"
        buildah manifest rm "$btag" >/dev/null 2>&1 || true
        for a in "${arches[@]}"; do
            arch_facts "$a"
            buildah rmi "$btag-$oci" >/dev/null 2>&1 || true
        done
        say "image: $platforms in $(($(date +%s) - t0)) s"
    fi
    buildinfo >"$out/BUILDINFO"
    find "$out" -type f -exec touch -h -d "@$epoch" {} +
    local files
    mapfile -t files < <(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort)
    (cd "$out" && sha256sum -- "${files[@]}" >SHA256SUMS && touch -d "@$epoch" SHA256SUMS)
}

# deps_json BINARY CARGO_LOCK METADATA_JSON TRIPLE STD: the binary's .dep-v0 section
# (cargo-auditable), each crate with its Cargo.lock source and checksum and whether it is
# linked into the binary.
deps_json() {
    python3 - "$@" <<'PY'
import json, struct, sys, tomllib, zlib
path, lock_path, meta_path, triple, std = sys.argv[1:6]
data = open(path, "rb").read()
assert data[:4] == b"\x7fELF" and data[4] == 2, "not an ELF64 file"
e = "<" if data[5] == 1 else ">"
shoff, = struct.unpack_from(e + "Q", data, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x3A)
def section(i):  # name offset, file offset, size
    name, _t, _f, _a, off, size = struct.unpack_from(e + "IIQQQQ", data, shoff + i * shentsize)
    return name, off, size
_, stroff, _ = section(shstrndx)
audit = None
for i in range(shnum):
    name, off, size = section(i)
    if data[stroff + name:data.index(b"\0", stroff + name)] == b".dep-v0":
        audit = json.loads(zlib.decompress(data[off:off + size]))
if audit is None:
    sys.exit(f"{path}: no .dep-v0 section (not built with cargo auditable)")
lock = {(p["name"], p["version"]): p for p in tomllib.load(open(lock_path, "rb"))["package"]}
proc_macros = {(p["name"], p["version"]) for p in json.load(open(meta_path))["packages"]
               if any("proc-macro" in t["kind"] for t in p["targets"])}
pkgs = audit["packages"]
# Linked: reachable from the root through runtime edges, not through a proc-macro.
linked, todo = set(), [i for i, p in enumerate(pkgs) if p.get("root")]
while todo:
    i = todo.pop()
    p = pkgs[i]
    if i in linked or p.get("kind") == "build" or (p["name"], p["version"]) in proc_macros:
        continue
    linked.add(i)
    todo.extend(p.get("dependencies", []))
out = []
for i, p in enumerate(pkgs):
    l = lock.get((p["name"], p["version"]))
    if l is None:
        sys.exit(f"{path}: {p['name']} {p['version']} is not in Cargo.lock")
    out.append({"name": p["name"], "version": p["version"],
                "source": l.get("source", "local (this repository)"),
                "checksum": l.get("checksum"),
                "kind": "linked" if i in linked else "compile-time"})
doc = {"binary": path.rsplit("/", 1)[-1], "target": triple,
       "from": "the binary's .dep-v0 section (cargo auditable), with Cargo.lock's source and sha256 checksum of each crate",
       "std": std, "packages": out}
print(json.dumps(doc, indent=1))
PY
}

buildinfo() {
    local a
    echo "ib-sriov $version: $kind"
    echo "tag: $( ((untagged)) && echo "none (untagged release commit of $tag)" || echo "${tag:-none}")"
    echo "commit: $commit"
    echo "SOURCE_DATE_EPOCH: $epoch ($(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ), the commit's committer time)"
    echo "architectures: ${arches[*]}$([[ "${#arches[@]}" == 4 ]] || echo " (not all four: $ARCHES)")"
    echo "image: $( ((image)) && echo "ib-sriov-$version.oci.tar, $platforms, $(buildah --version)" || echo none)"
    echo "dependency lists: cargo-auditable $AUDITABLE_VERSION"
    for a in "${arches[@]}"; do
        arch_facts "$a"
        if [[ "$a" == "$(uname -m)" ]]; then
            echo "$a: $(rustc -V), $(cargo -V), linker $(cc --version | head -n1)"
        else
            echo "$a: $(/usr/bin/rustc -V), $(/usr/bin/cargo -V), rust-web-src $(dpkg-query -W -f='${Version}' rust-web-src), linker $("$gnu-gcc" --version | head -n1), libc6-dev-$deb-cross $(dpkg-query -W -f='${Version}' "libc6-dev-$deb-cross")"
        fi
    done
    echo "reproduce: scripts/release.sh --commit $commit$( ((snapshot)) && echo " --snapshot") --arches $(IFS=,; echo "${arches[*]}")$( ((image)) || echo " --no-image") (IB_SRIOV_SOURCE=${IB_SRIOV_SOURCE:-unknown})"
}

cleanup_dirs=()
trap '((keep)) || rm -rf "${cleanup_dirs[@]}"' EXIT
start=$(date +%s)
if ((check == 0)); then
    work="$(mktemp -d "${TMPDIR:-/tmp}/ib-sriov-release.XXXXXX")"
    cleanup_dirs+=("$work")
    build_once r "$work" "$default_cargo_home" "$work/dist"
    rm -rf "$dist" && mkdir -p "$(dirname "$dist")" && cp -a "$work/dist" "$dist"
    cat "$dist/SHA256SUMS"
    say "wrote $dist in $(($(date +%s) - start)) s"
    ((keep == 0)) || say "kept $work"
    exit 0
fi

# --check-reproducible: two builds, two paths (of different lengths), two CARGO_HOMEs.
work_a="$(mktemp -d "${TMPDIR:-/tmp}/ib-sriov-repro-a.XXXXXX")"
work_b="$(mktemp -d /var/tmp/ib-sriov-repro-b.XXXXXX)"
cleanup_dirs+=("$work_a" "$work_b")
# The second CARGO_HOME: a copy of the registry (nothing fetched), the same tools.
home_b="$work_b/other-cargo-home"
mkdir -p "$home_b"
cp -a "$default_cargo_home/registry" "$home_b/"
ln -s "$default_cargo_home/bin" "$home_b/bin"
say "build A in $work_a (CARGO_HOME $default_cargo_home)"
build_once a "$work_a" "$default_cargo_home" "$work_a/dist"
say "build B in $work_b/build/somewhere/deeper (CARGO_HOME $home_b)"
build_once b "$work_b/build/somewhere/deeper" "$home_b" "$work_b/dist"
echo "== build A: $work_a/dist/SHA256SUMS"
cat "$work_a/dist/SHA256SUMS"
echo "== build B: $work_b/dist/SHA256SUMS"
cat "$work_b/dist/SHA256SUMS"
if diff -u "$work_a/dist/SHA256SUMS" "$work_b/dist/SHA256SUMS"; then
    rm -rf "$dist" && mkdir -p "$(dirname "$dist")" && cp -a "$work_a/dist" "$dist"
    echo "REPRODUCIBLE: the two builds are identical, byte for byte ($(wc -l <"$dist/SHA256SUMS") files); wrote $dist in $(($(date +%s) - start)) s"
    exit 0
fi
echo "NOT REPRODUCIBLE: the files above differ; kept $work_a and $work_b" >&2
for f in $(diff <(cd "$work_a/dist" && sha256sum -- *) <(cd "$work_b/dist" && sha256sum -- *) | awk '/^[<>]/ {print $3}' | sort -u); do
    echo "== $f: $(cmp "$work_a/dist/$f" "$work_b/dist/$f" 2>&1 | head -n1); first differing bytes:" >&2
    cmp -l "$work_a/dist/$f" "$work_b/dist/$f" 2>/dev/null | head -n5 >&2 || true
done
keep=1
exit 1
