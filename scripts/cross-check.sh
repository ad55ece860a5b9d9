#!/usr/bin/env bash
# Builds and checks the release binaries of each architecture the image ships
# (.ci/run: x86_64 and aarch64).
#
#   scripts/cross-check.sh [ARCH...]     default: x86_64 aarch64
#                                        ARCH: x86_64, aarch64, powerpc64le, s390x, all
#
# Per architecture: scripts/build.sh --arch ARCH (scripts/deps.sh cross-ARCH installs
# Debian's toolchain for it), then for both binaries the ELF header names the right
# machine, class and byte order and a static executable (no PT_INTERP program header,
# no DT_NEEDED entry: `readelf`). Then, natively for x86_64 and through qemu-user for the
# others (Debian's qemu-user-static, registered with the kernel's binfmt_misc by
# scripts/binfmt.sh): `ib-sriov --version` and `CNI_COMMAND=VERSION` answer, and
# `thin_entrypoint --no-sleep` installs a byte-identical copy that answers VERSION.
# For aarch64 also the emulated-host end-to-end test ADD, CHECK, DEL, DEL with the
# built-in IPAM for every CNI version (tests/plugin_emulated.rs
# add_check_del_del_for_every_version) runs against the aarch64 plugin (IB_SRIOV_BIN):
# the test harness is this machine's, the plugin runs under qemu-aarch64. Needs root.
# Exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
(($#)) || set -- x86_64 aarch64
fail() { echo "cross-check: FAIL: $*" >&2; exit 1; }
pass() { echo "cross-check: ok: $*"; }

. scripts/binfmt.sh # binfmt_register
. scripts/arch.sh   # ARCHES, arch_facts: elf_machine, elf_data, qemu
[[ "$*" != all ]] || set -- $ARCHES

for arch in "$@"; do
    arch_facts "$arch" || fail "unknown architecture '$arch' (x86_64, aarch64, powerpc64le, s390x, all)"
    t0=$(date +%s)
    dir="$(scripts/build.sh --arch "$arch")"
    t1=$(date +%s)
    pass "$arch: built in $((t1 - t0)) s: $dir"
    for b in ib-sriov ib-sriovctl thin_entrypoint; do
        f="$dir/$b"
        [[ -x "$f" ]] || fail "$arch: no $f"
        h="$(readelf -h "$f")"
        grep -q "Machine: *$elf_machine" <<<"$h" || fail "$arch: $b is not $elf_machine: $(grep Machine <<<"$h")"
        grep -q "Class: *ELF64" <<<"$h" || fail "$arch: $b is not ELF64"
        grep -q "Data: .*$elf_data" <<<"$h" || fail "$arch: $b is not $elf_data: $(grep Data <<<"$h")"
        grep -qE "Type: *(EXEC|DYN)" <<<"$h" || fail "$arch: $b is not an executable"
        ! readelf -lW "$f" | grep -q INTERP || fail "$arch: $b has a PT_INTERP (dynamically linked)"
        ! readelf -dW "$f" | grep -q NEEDED || fail "$arch: $b has DT_NEEDED entries: $(readelf -dW "$f" | grep NEEDED)"
        pass "$arch: $b is a static ELF64 $elf_data $elf_machine executable ($(grep -o 'Type: *[A-Z]*' <<<"$h" | tr -s ' '), no PT_INTERP, no DT_NEEDED)"
    done
    how=natively
    if [[ -n "$qemu" ]]; then
        binfmt_register "$qemu" || fail "$arch: qemu-$qemu binfmt handler"
        how="under qemu-$qemu"
    fi
    v="$("$dir/ib-sriov" --version)" || fail "$arch: ib-sriov --version $how"
    grep -q '^ib-sriov cni version:' <<<"$v" || fail "$arch: --version said $v"
    j="$(CNI_COMMAND=VERSION "$dir/ib-sriov" </dev/null)" || fail "$arch: CNI_COMMAND=VERSION"
    "$dir/ib-sriov" doctor --help | grep -q '^usage: ib-sriov doctor' || fail "$arch: ib-sriov doctor --help (ib-sriovctl beside it)"
    python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert "1.1.0" in v["supportedVersions"], v' "$j" ||
        fail "$arch: VERSION answered $j"
    # thin_entrypoint as the image runs it: copies the plugin, checks the copy answers VERSION.
    tdir="$(mktemp -d /tmp/ib-sriov-cross.XXXXXX)"
    mkdir "$tdir/bin"
    "$dir/thin_entrypoint" --cni-bin-dir "$tdir/bin" --ib-sriov-cni-bin-file "$dir/ib-sriov" --no-sleep \
        >"$tdir/log" 2>&1 || { cat "$tdir/log" >&2; fail "$arch: thin_entrypoint --no-sleep"; }
    cmp -s "$tdir/bin/ib-sriov" "$dir/ib-sriov" || fail "$arch: thin_entrypoint's copy differs"
    rm -rf "$tdir"
    pass "$arch: $how: $v; VERSION $j; thin_entrypoint installed a copy that answers VERSION"
    if [[ "$arch" == aarch64 ]]; then
        . scripts/static-flags.sh # the test harness: this machine's triple and flags
        IB_SRIOV_BIN="$dir/ib-sriov" cargo test --target "$triple" --features failpoints \
            --test plugin_emulated -- --exact add_check_del_del_for_every_version
        pass "$arch: emulated-host ADD/CHECK/DEL/DEL with the built-in IPAM, every CNI version, against the $arch plugin"
    fi
    pass "$arch: $(($(date +%s) - t0)) s in all"
done
