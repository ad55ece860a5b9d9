#!/usr/bin/env bash
# Installs the Debian packages a part of this repository needs, on a machine that has
# never installed anything (Debian 12 "bookworm", as root). The one place that knows the
# package lists: .ci/run, scripts/test.sh, scripts/demo.sh, scripts/kernel-lab.sh,
# scripts/image.sh, scripts/bench.sh and tests/libcni/*.sh all call it.
#
#   scripts/deps.sh GROUP...        install what GROUP needs (idempotent; installs only
#                                   the missing packages, `apt-get update` only when an
#                                   install is needed)
#   scripts/deps.sh --list GROUP... print the packages, one per line
#   scripts/deps.sh --missing GROUP... print the missing packages; exit 1 if any
#
# Groups:
#   demo    scripts/demo.sh: iproute2 (ip netns, veths), jq
#   test    scripts/test.sh: iproute2, jq, python3; golang-go and golang-github-appc-cni-dev
#           (the libcni 1.1.2 end-to-end driver, tests/libcni); containernetworking-plugins
#           (host-local, static, host-device, tuning: the external-IPAM and libcni tests);
#           file and binutils (the static-binary test reads `file` and `objdump -T`);
#           strace (the exporter's read-only test); prometheus (the dashboard test runs a
#           real Prometheus against the exporter, tests/exporter.rs, and so does the fleet
#           alerts' test, tests/fleet_alerts.rs; its promtool checks and unit-tests the
#           alerts, tests/alert_rules.rs); tmux (`ib-sriov top`'s
#           test drives it in a tmux pane)
#   lab     scripts/kernel-lab.sh: qemu-system-x86 10 *from bookworm-backports* (the `igb`
#           SR-IOV NIC model; its qemu-system-common, qemu-system-data and seabios must come
#           from backports too, hence `apt-get install -t bookworm-backports`),
#           busybox-static, kmod, gcc-12, make, pahole, libelf1 (the test-only kernel
#           modules), mmdebstrap (the Debian root the modules of a kernel whose compiler
#           bookworm lacks are built in: LAB_KERNEL=7.3, gcc-14), python3-venv (virtme-ng), udev (the guest, booted on this root
#           filesystem, runs its systemd-udevd in the lab's IB phase; nothing starts it on
#           the host)
#   image   scripts/image.sh and the image test: buildah, podman, runc (crun, podman's
#           default, fails on these machines' cgroup hybrid mode), fuse-overlayfs
#   bench   scripts/bench.sh: iproute2, containernetworking-plugins, python3, and for its
#           default store (a journaled ext4 on a loop device) mount (losetup), e2fsprogs
#           (mkfs.ext4) and util-linux (findmnt)
#   cross-aarch64, cross-powerpc64le, cross-s390x
#           scripts/build.sh --arch ARCH: Debian 12's Rust toolchain rustc-web and
#           cargo-web (bookworm-security; /usr/bin/rustc, /usr/bin/cargo) with its
#           standard library's source, rust-web-src (the same source package and version,
#           so the std built from it matches that compiler exactly), the cross C
#           toolchain (gcc-<gnu triple>, the linker), static glibc
#           (libc6-dev-<arch>-cross) and binutils (readelf); qemu-user-static from
#           bookworm-backports runs the binaries (scripts/cross-check.sh, the image test).
#           No foreign dpkg architecture is added: every package is an amd64 one.
#
# Without root it installs nothing: it names the missing packages and exits 1.
# IB_SRIOV_NO_APT=1 forbids apt-get (same message, exit 1).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
. "$(dirname "$0")/arch.sh" # arch_facts: gnu, deb (the cross-ARCH groups)
. "$(dirname "$0")/debian-sources.sh" # debian_uri: this machine's own Debian mirror

BPO_LIST=/etc/apt/sources.list.d/ib-sriov-bookworm-backports.list

# group -> "suite:package" words; suite "-" is the default release.
packages() {
    case "$1" in
    demo) echo "-:iproute2 -:jq" ;;
    test) echo "-:iproute2 -:jq -:python3 -:golang-go -:golang-github-appc-cni-dev -:containernetworking-plugins -:file -:binutils -:strace -:prometheus -:tmux" ;;
    lab) echo "bookworm-backports:qemu-system-x86 -:busybox-static -:kmod -:gcc-12 -:make -:pahole -:libelf1 -:mmdebstrap -:python3-venv -:iproute2 -:udev -:rdmacm-utils -:perftest -:ibverbs-providers" ;;
    image) echo "-:buildah -:podman -:runc -:fuse-overlayfs -:uidmap" ;;
    bench) echo "-:iproute2 -:containernetworking-plugins -:python3 -:mount -:e2fsprogs -:util-linux -:strace" ;;
    cross-aarch64 | cross-powerpc64le | cross-s390x)
        local gnu deb oci qemu elf_machine elf_data triple
        arch_facts "${1#cross-}"
        echo "-:rustc-web -:cargo-web -:rust-web-src -:gcc-$gnu -:libc6-dev-$deb-cross -:binutils bookworm-backports:qemu-user-static"
        ;;
    *)
        echo "deps.sh: unknown group '$1' (demo, test, lab, image, bench, cross-aarch64, cross-powerpc64le, cross-s390x)" >&2
        exit 2
        ;;
    esac
}

installed() { # installed <package> [suite]: installed, and from backports when suite says so
    local v
    v="$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true)"
    [[ "$v" == "install ok installed "* ]] || return 1
    [[ "${2:--}" != bookworm-backports || "$v" == *bpo* ]]
}

mode=install
case "${1:-}" in
--list) mode=list; shift ;;
--missing) mode=missing; shift ;;
esac
(($#)) || { echo "usage: $0 [--list|--missing] GROUP..." >&2; exit 2; }
# Every group known before anything else: `$(packages ...)` below runs in a subshell,
# whose exit would not end this script.
for g in "$@"; do packages "$g" >/dev/null; done

default_missing=() bpo_missing=()
for g in "$@"; do
    for w in $(packages "$g"); do
        suite="${w%%:*}" p="${w#*:}"
        if [[ $mode == list ]]; then echo "$p"; continue; fi
        installed "$p" "$suite" && continue
        if [[ $suite == bookworm-backports ]]; then
            [[ " ${bpo_missing[*]} " == *" $p "* ]] || bpo_missing+=("$p")
        else
            [[ " ${default_missing[*]} " == *" $p "* ]] || default_missing+=("$p")
        fi
    done
done
[[ $mode != list ]] || exit 0
all_missing=("${default_missing[@]}" "${bpo_missing[@]}")
((${#all_missing[@]})) || exit 0
if [[ $mode == missing ]]; then
    printf '%s\n' "${all_missing[@]}"
    exit 1
fi
if [[ "$(id -u)" != 0 || "${IB_SRIOV_NO_APT:-0}" == 1 ]] || ! command -v apt-get >/dev/null; then
    echo "deps.sh: missing Debian packages: ${all_missing[*]}" >&2
    ((${#bpo_missing[@]} == 0)) || echo "deps.sh: (${bpo_missing[*]} from bookworm-backports: apt-get install -t bookworm-backports ${bpo_missing[*]})" >&2
    echo "deps.sh: run as root to install them: $0 $*" >&2
    exit 1
fi

echo "deps.sh: installing ${all_missing[*]}" >&2
if ((${#bpo_missing[@]})) && ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    # The machine's own Debian mirror (scripts/debian-sources.sh), only the suite added.
    bpo_uri="$(debian_uri bookworm-backports)"
    echo "deb $bpo_uri bookworm-backports main" >"$BPO_LIST"
fi
apt-get update -qq >&2
if ((${#default_missing[@]})); then
    apt-get install -y -qq --no-install-recommends "${default_missing[@]}" >&2
fi
if ((${#bpo_missing[@]})); then
    # -t: the package's own dependencies (qemu-system-common, qemu-system-data, seabios,
    # ipxe-qemu...) resolve from backports as well; naming only the top package with
    # /bookworm-backports leaves them on bookworm's older versions, which do not satisfy it.
    apt-get install -y -qq --no-install-recommends -t bookworm-backports "${bpo_missing[@]}" >&2
fi
still=()
for g in "$@"; do
    for w in $(packages "$g"); do installed "${w#*:}" "${w%%:*}" || still+=("${w#*:}"); done
done
if ((${#still[@]})); then
    echo "deps.sh: still missing after apt-get: ${still[*]}" >&2
    exit 1
fi
