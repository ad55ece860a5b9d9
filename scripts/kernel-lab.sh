#!/usr/bin/env bash
# Real-kernel lab (README "Real-kernel lab"): runs the plugin's real-kernel tests
# (tests/real_kernel.rs) inside a QEMU guest (TCG, no KVM needed) booted with virtme-ng
# on this machine's root filesystem, with an emulated Intel 82576 (`igb`) SR-IOV PF.
# The guest creates two igbvf VFs, loads rdma_rxe and runs every test of
# tests/real_kernel.rs (they are #[ignore]d on the host) against the real /sys and the
# real kernel's rtnetlink and RDMA netlink, one test per row of the printed table, with
# systemd-udevd running as on a real node; then it rebinds both VFs to the mlx5-shaped test driver
# tests/kmod/ibvf.c and runs the InfiniBand cases (tests/real_kernel/ib.rs).
#
#   scripts/kernel-lab.sh              install, build, boot, test; exits non-zero on any
#                                      failure, on zero tests run, or when the guest did
#                                      not finish
#   LAB_FILTER=REGEX scripts/kernel-lab.sh
#                                      only the tests whose names match (development)
#   LAB_REPEAT=N LAB_LOAD=M scripts/kernel-lab.sh
#                                      the InfiniBand cases N times in a row (rows named
#                                      `<test> #k`), with M busy loops (`yes >/dev/null`)
#                                      keeping the guest's CPUs busy beside them
#   scripts/kernel-lab.sh --guest ...  the part that runs inside the guest (internal)
#
# Needs root (apt-get, /lib/modules, and the guest runs the tests as root). Installs:
# `scripts/deps.sh lab` (qemu-system-x86 10 with `igb` from Debian bookworm-backports,
# installed with `-t bookworm-backports` so its firmware and data packages come from there
# too; busybox-static, kmod, gcc-12, make, pahole, libelf1: the kernel's compiler and module
# BTF; python3-venv; udev, whose systemd-udevd the guest runs), the
# backports 6.12 kernel image (only downloaded and unpacked, never installed as the host's
# kernel; likewise its headers and kbuild, for the test-only modules tests/kmod/vfguid.ko
# and tests/kmod/ibvf.ko), virtme-ng from PyPI in a venv. Everything lab-owned lives under $IB_SRIOV_LAB_DIR
# (default /var/lib/ib-sriov-lab; not /var/cache, which the guest hides under a tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."

LAB_DIR="${IB_SRIOV_LAB_DIR:-/var/lib/ib-sriov-lab}"
VIRTME_NG_VERSION=1.42
NUM_VFS=2

# ---------------------------------------------------------------------------- guest
if [[ "${1:-}" == --guest ]]; then
    out="$2"
    testbin="$3"
    kmod_dir="${4:-}"
    filter="${5:-}"
    repeat="${6:-1}"
    load="${7:-0}"
    results="$out/results.tsv"
    : >"$results"
    exec >"$out/guest.log" 2>&1
    set -x
    row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; }
    setup_fail() {
        row FAIL "setup: $1" 0
        touch "$out/done"
        exit 1
    }
    unset IB_SRIOV_SYSFS_ROOT
    mkdir -p /run/netns "$out/tests"

    # udev runs in the guest as on every real node (README): virtme-ng starts the host's
    # systemd-udevd (scripts/deps.sh lab installs udev), else it is started here. Its
    # renames to predictable names and its alternative names (a VF netdev returned from a
    # deleted netns gets its original name as an altname) are part of what the tests
    # face.
    if ! udevadm control --ping 2>/dev/null; then
        udevd=""
        for c in /usr/lib/systemd/systemd-udevd /lib/systemd/systemd-udevd; do
            [[ -x "$c" ]] && udevd="$c" && break
        done
        [[ -n "$udevd" ]] || setup_fail "no systemd-udevd (scripts/deps.sh lab installs udev)"
        "$udevd" --daemon || setup_fail "starting $udevd"
        for _ in $(seq 50); do udevadm control --ping 2>/dev/null && break; sleep 0.1; done
        udevadm control --ping || setup_fail "systemd-udevd does not answer"
    fi
    modprobe igb || setup_fail "modprobe igb"
    modprobe igbvf || setup_fail "modprobe igbvf"
    pf=""
    for d in /sys/bus/pci/drivers/igb/0000:*; do
        [[ -e "$d/sriov_totalvfs" ]] && pf="$(basename "$d")" && break
    done
    [[ -n "$pf" ]] || setup_fail "no igb SR-IOV PF in the guest"
    pfdir="/sys/bus/pci/devices/$pf"
    for _ in $(seq 50); do [[ -n "$(ls "$pfdir/net" 2>/dev/null)" ]] && break; sleep 0.1; done
    udevadm settle --timeout=60 || true
    pf_netdev="$(ls "$pfdir/net")"
    ip link set "$pf_netdev" up || setup_fail "ip link set $pf_netdev up"
    echo "$NUM_VFS" >"$pfdir/sriov_numvfs" || setup_fail "echo $NUM_VFS > $pfdir/sriov_numvfs"
    vfs=() vf_netdevs=()
    for ((i = 0; i < NUM_VFS; i++)); do
        vf="$(basename "$(readlink "$pfdir/virtfn$i")")" || setup_fail "$pfdir/virtfn$i"
        n=""
        for _ in $(seq 100); do
            n="$(ls "$pfdir/virtfn$i/net" 2>/dev/null || true)"
            [[ -n "$n" ]] && break
            sleep 0.1
        done
        [[ -n "$n" ]] || setup_fail "VF $i ($vf) has no netdev"
        vfs+=("$vf")
    done
    # The names udev gives them.
    udevadm settle --timeout=60 || true
    for ((i = 0; i < NUM_VFS; i++)); do
        vf_netdevs+=("$(ls "$pfdir/virtfn$i/net")")
    done
    vf_driver="$(basename "$(readlink "$pfdir/virtfn0/driver")")"
    row PASS "setup: igb PF $pf ($pf_netdev) with VFs ${vfs[*]} (${vf_netdevs[*]}, $vf_driver)" 0
    modprobe rdma_rxe || setup_fail "modprobe rdma_rxe"
    rdma system set netns exclusive || setup_fail "rdma system set netns exclusive"
    row PASS "setup: rdma_rxe loaded, RDMA netns mode exclusive" 0
    # The test-only module (tests/kmod): the real-kernel test that uses it loads it with
    # the PF as parent and unloads it (its netdev sits under the PF's PCI directory).
    if [[ -n "$kmod_dir" ]]; then
        [[ -f "$kmod_dir/vfguid.ko" ]] || setup_fail "no $kmod_dir/vfguid.ko"
        export LAB_KMOD="$kmod_dir/vfguid.ko"
    fi

    export LAB_PF="$pf" LAB_PF_NETDEV="$pf_netdev" LAB_VF_DRIVER="$vf_driver"
    LAB_VFS="$(IFS=,; echo "${vfs[*]}")" LAB_VF_NETDEVS="$(IFS=,; echo "${vf_netdevs[*]}")"
    export LAB_VFS LAB_VF_NETDEVS
    export LAB_LIBCNI_DRIVER="$out/libcni-driver" RUST_BACKTRACE=1
    ip -d link show
    ls -l "$pfdir"/ "$pfdir"/virtfn*/

    # One process per test; a row per test. $1: the function that puts the lab back
    # after a test (a failed test may leave a VF behind; noted in that test's log, the
    # failure itself is already recorded).
    # $run_label (e.g. " #3") is appended to the row and log names of a repeated run.
    run_label=""
    run_tests() {
        local restore="$1" t start status secs log
        shift
        for t in "$@"; do
            start=$(date +%s.%N)
            status=0
            log="$out/tests/$t${run_label// /}.log"
            timeout 300 "$testbin" --ignored --exact "$t" --test-threads=1 --nocapture \
                >"$log" 2>&1 || status=$?
            secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
            if [[ $status == 0 ]] && grep -q '^test result: ok. 1 passed' "$log"; then
                row PASS "$t$run_label" "$secs"
            else
                row FAIL "$t$run_label" "$secs"
            fi
            "$restore" "$t" >>"$log" 2>&1 || true
            ip netns list | awk '{ print $1 }' | xargs -r -n1 ip netns del || true
        done
    }
    # Every VF bound to driver $1 with netdev name ${names[i]} ($2: the array's name).
    restore_vfs() {
        local drv="$1" i n
        local -n names="$2"
        for ((i = 0; i < NUM_VFS; i++)); do
            if [[ -z "$(readlink "$pfdir/virtfn$i/driver")" ]]; then
                echo "lab: rebinding ${vfs[i]} to $drv"
                echo "${vfs[i]}" >"/sys/bus/pci/drivers/$drv/bind" || true
            fi
            n=""
            for _ in $(seq 100); do
                n="$(ls "$pfdir/virtfn$i/net" 2>/dev/null || true)"
                [[ -n "$n" ]] && break
                sleep 0.1
            done
            if [[ -n "$n" && "$n" != "${names[i]}" ]]; then
                echo "lab: VF $i netdev is $n, renaming it back to ${names[i]}"
                ip link set "$n" down && ip link set "$n" name "${names[i]}" || true
            fi
        done
    }
    restore_igbvf() {
        udevadm settle --timeout=30 || true
        restore_vfs "$vf_driver" vf_netdevs
    }
    restore_ibvf() {
        echo 0 >/sys/module/ibvf/parameters/no_refund || true
        echo "---- kernel log of $1"
        dmesg -c | grep -v 'audit:' || true
        udevadm settle --timeout=120 || true
        restore_vfs ibvf ib_netdevs
    }

    mapfile -t all < <("$testbin" --list --ignored --format terse | sed -n 's/: test$//p' |
        grep -E -- "${filter:-.}")
    # Phase 1, igbvf: the RDMA netns-mode round trip first (the kernel
    # refuses a mode change while any other network namespace exists, and the other
    # tests create and delete pod namespaces), then the rest as listed, but the IB cases.
    ordered=() ib_tests=()
    for t in "${all[@]}"; do [[ "$t" == rdma_netns_mode* ]] && ordered+=("$t"); done
    for t in "${all[@]}"; do
        case "$t" in
        rdma_netns_mode*) ;;
        ib::*) ib_tests+=("$t") ;;
        *) ordered+=("$t") ;;
        esac
    done
    run_tests restore_igbvf "${ordered[@]}"

    # Phase 2, the InfiniBand cases (tests/real_kernel/ib.rs): both VFs rebound through driver_override to the mlx5-shaped test driver (tests/kmod/ibvf.c),
    # which also puts the PF netdev ibpf0 (VF GUIDs and link state) on the PF.
    if ((${#ib_tests[@]})); then
        [[ -f "$kmod_dir/ibvf.ko" ]] || setup_fail "no $kmod_dir/ibvf.ko"
        udevadm control --ping || setup_fail "systemd-udevd is not running"
        insmod "$kmod_dir/ibvf.ko" pf="$pf" || setup_fail "insmod ibvf.ko pf=$pf"
        for ((i = 0; i < NUM_VFS; i++)); do
            echo ibvf >"$pfdir/virtfn$i/driver_override" || setup_fail "driver_override of ${vfs[i]}"
            echo "${vfs[i]}" >"/sys/bus/pci/drivers/$vf_driver/unbind" || setup_fail "unbind ${vfs[i]}"
            echo "${vfs[i]}" >/sys/bus/pci/drivers_probe || setup_fail "drivers_probe ${vfs[i]}"
        done
        udevadm settle --timeout=60 || true
        ib_netdevs=() ib_rdma=()
        for ((i = 0; i < NUM_VFS; i++)); do
            [[ "$(basename "$(readlink "$pfdir/virtfn$i/driver")")" == ibvf ]] || setup_fail "${vfs[i]} not bound to ibvf"
            n="$(ls "$pfdir/virtfn$i/net" 2>/dev/null || true)"
            [[ -n "$n" ]] || setup_fail "VF ${vfs[i]} has no IPoIB netdev"
            ib_netdevs+=("$n") ib_rdma+=("$(ls "$pfdir/virtfn$i/infiniband" 2>/dev/null)")
        done
        row PASS "setup: udev running; VFs ${vfs[*]} on ibvf: IPoIB ${ib_netdevs[*]}, RDMA ${ib_rdma[*]}, PF netdev ibpf0" 0
        ip -d link show
        rdma dev
        export LAB_IB=1
        dmesg -c >/dev/null || true
        load_pids=()
        for ((i = 0; i < load; i++)); do
            yes >/dev/null &
            load_pids+=($!)
        done
        ((load == 0)) || row PASS "setup: load: $load busy loop(s) (yes >/dev/null) beside the IB cases on $(nproc) CPU(s)" 0
        if ((repeat > 1)); then
            for ((r = 1; r <= repeat; r++)); do
                run_label=" #$r"
                run_tests restore_ibvf "${ib_tests[@]}"
            done
            run_label=""
        else
            run_tests restore_ibvf "${ib_tests[@]}"
        fi
        ((${#load_pids[@]} == 0)) || kill "${load_pids[@]}" || true
    fi
    touch "$out/done"
    exit 0
fi

# ----------------------------------------------------------------------------- host
if [[ "$(id -u)" != 0 ]]; then
    echo "kernel-lab: must run as root (apt-get, /lib/modules, VF setup in the guest)" >&2
    exit 1
fi
t0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive

# 1. Installs (scripts/deps.sh lab: QEMU and its firmware from bookworm-backports, the
# module toolchain, python3-venv).
scripts/deps.sh lab
bpo=/etc/apt/sources.list.d/ib-sriov-bookworm-backports.list
if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" >"$bpo"
    apt-get update -qq
fi
kernel_pkg() {
    apt-cache depends linux-image-amd64/bookworm-backports 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
pkg="$(kernel_pkg)"
if [[ -z "$pkg" ]]; then
    apt-get update -qq
    pkg="$(kernel_pkg)"
fi
[[ -n "$pkg" ]] || { echo "kernel-lab: no linux-image-amd64 in bookworm-backports" >&2; exit 1; }
kver="${pkg#linux-image-}"
qemu_ver() { dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || true; }
kroot="$LAB_DIR/kernel-$kver"
vmlinuz="$kroot/boot/vmlinuz-$kver"
if [[ ! -f "$kroot/.unpacked" ]]; then
    dl="$(mktemp -d)"
    (cd "$dl" && apt-get download -qq "$pkg" 2>/dev/null)
    rm -rf "$kroot"
    mkdir -p "$kroot"
    dpkg-deb -x "$dl"/linux-image-*.deb "$kroot"
    depmod -b "$kroot" "$kver"
    rm -rf "$dl"
    touch "$kroot/.unpacked"
fi
# The kernel's headers, for the test-only module (tests/kmod): downloaded and unpacked
# under $LAB_DIR, not installed (the headers package pulls in the kernel image, initramfs
# tools and more). The amd64 tree's Makefile includes the -common tree by absolute path;
# it is pointed at the unpacked copy, so nothing outside $LAB_DIR is needed.
kbase="${kver%-amd64}"
hroot="$LAB_DIR/headers-$kver"
kbuild_dir="$hroot/usr/src/linux-headers-$kver"
if [[ ! -f "$hroot/.unpacked" ]]; then
    dl="$(mktemp -d)"
    chmod 755 "$dl"
    hpkgs=("linux-headers-$kver" "linux-headers-$kbase-common" "linux-kbuild-$kbase")
    (cd "$dl" && apt-get download -qq "${hpkgs[@]}" 2>/dev/null) ||
        (apt-get update -qq && cd "$dl" && apt-get download -qq "${hpkgs[@]}" 2>/dev/null) ||
        { echo "kernel-lab: cannot download ${hpkgs[*]}" >&2; exit 1; }
    rm -rf "$hroot"
    mkdir -p "$hroot"
    for f in "$dl"/*.deb; do dpkg-deb -x "$f" "$hroot"; done
    sed -i "s|^include /usr/src/|include $hroot/usr/src/|" "$kbuild_dir/Makefile"
    rm -rf "$dl"
    touch "$hroot/.unpacked"
fi
# The kernel was built with gcc-12 (CONFIG_CC_VERSION_TEXT; the headers' Makefile calls
# x86_64-linux-gnu-gcc-12), bookworm's gcc; module BTF needs pahole, ELF tools libelf.
kcc="$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\([^ ]*\) .*/\1/p' "$kbuild_dir/.config")"
command -v "$kcc" >/dev/null || { echo "kernel-lab: the kernel's compiler $kcc is missing (scripts/deps.sh lab installs gcc-12)" >&2; exit 1; }
# virtme-ng gives the guest the modules of /lib/modules/<version> of the host's root.
mkdir -p /lib/modules
[[ -e "/lib/modules/$kver" && ! -L "/lib/modules/$kver" ]] ||
    ln -sfn "$kroot/lib/modules/$kver" "/lib/modules/$kver"
venv="$LAB_DIR/venv"
if [[ ! -x "$venv/bin/vng" ]] || ! "$venv/bin/pip" show virtme-ng 2>/dev/null | grep -qx "Version: $VIRTME_NG_VERSION"; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "virtme-ng==$VIRTME_NG_VERSION"
fi
export PATH="$venv/bin:$PATH"
t_install=$(date +%s)
echo "kernel-lab: installs done in $((t_install - t0)) s (kernel $kver, qemu $(qemu_ver), virtme-ng $VIRTME_NG_VERSION)"

# 2. Builds, on the host (the guest sees the host's filesystem read-only).
mkdir -p target/kernel-lab
out="$(mktemp -d "$PWD/target/kernel-lab/run.XXXXXX")"
testbin="$(cargo test --features failpoints --test real_kernel --no-run --message-format=json 2>"$out/build.log" |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "real_kernel" and m.get("executable"):
        print(m["executable"])')" || true
if [[ -z "$testbin" || ! -x "$testbin" ]]; then
    cat "$out/build.log" >&2
    echo "kernel-lab: building tests/real_kernel.rs failed" >&2
    exit 1
fi
tests/libcni/build.sh "$out/libcni-driver" 2>>"$out/build.log" || {
    cat "$out/build.log" >&2
    echo "kernel-lab: building the libcni driver failed" >&2
    exit 1
}
# The test-only module, built against the guest kernel's headers in the run directory
# (which the guest sees).
kmod_dir="$out/kmod"
mkdir -p "$kmod_dir"
cp tests/kmod/Kbuild tests/kmod/*.c "$kmod_dir/"
make -C "$kbuild_dir" M="$kmod_dir" modules >>"$out/build.log" 2>&1 || {
    cat "$out/build.log" >&2
    echo "kernel-lab: building the test modules of tests/kmod failed" >&2
    exit 1
}
t_build=$(date +%s)
echo "kernel-lab: builds done in $((t_build - t_install)) s"

# 3. Boot the guest and run the tests. vng's own exit status is not the script's (no
# virtio-serial script channel under TCG here), so only the files the guest writes count.
status=0
guest_limit=$((1200 + 900 * (${LAB_REPEAT:-1} - 1)))
timeout "$guest_limit" vng --verbose --run "$vmlinuz" --disable-kvm --cpus 2 --memory 2G \
    --rwdir="$out" \
    --qemu-opts='-machine q35 -device pcie-root-port,id=rp1,slot=1 -netdev user,id=n1 -device igb,bus=rp1,netdev=n1' \
    --exec "$PWD/scripts/kernel-lab.sh --guest $out $testbin $kmod_dir $(printf %q "${LAB_FILTER:-}") ${LAB_REPEAT:-1} ${LAB_LOAD:-0}" \
    </dev/null >"$out/console.log" 2>&1 || status=$?
t_guest=$(date +%s)
echo "kernel-lab: guest ran for $((t_guest - t_build)) s (vng exit status $status)"

fail=0 pass=0 ntests=0
if [[ ! -f "$out/done" ]]; then
    echo "kernel-lab: the guest did not finish (no $out/done); console tail:" >&2
    tail -n 60 "$out/console.log" >&2 || true
    [[ -f "$out/guest.log" ]] && tail -n 40 "$out/guest.log" >&2
    fail=1
fi
echo
printf '%-6s %7s  %s\n' RESULT SECONDS CHECK
while IFS=$'\t' read -r res name secs; do
    printf '%-6s %7s  %s\n' "$res" "$secs" "$name"
    [[ "$res" == PASS ]] && pass=$((pass + 1)) || fail=$((fail + 1))
    [[ "$name" == setup:* ]] || ntests=$((ntests + 1))
done <"$out/results.tsv" 2>/dev/null || true
echo
for f in "$out"/tests/*.log; do
    [[ -f "$f" ]] || continue
    t="$(basename "$f" .log)"
    # A repeated run's log is `<test>#k.log`, its row `<test> #k`.
    if grep -q "^FAIL"$'\t'"${t/\#/ #}"$'\t' "$out/results.tsv"; then
        echo "---- $t (failed) ----"
        tail -n 60 "$f"
    fi
done
if ((ntests == 0)); then
    echo "kernel-lab: no real-kernel test ran" >&2
    fail=$((fail + 1))
fi
t_end=$(date +%s)
echo "kernel-lab: total $((t_end - t0)) s (installs $((t_install - t0)) s, builds $((t_build - t_install)) s, guest $((t_guest - t_build)) s); logs in $out"
echo "kernel-lab: $pass passed, $fail failed"
((fail == 0))
