#!/usr/bin/env bash
# Real-kernel lab (docs/testing.md "Real-kernel lab"): runs the plugin's real-kernel tests
# (tests/real_kernel.rs) inside a QEMU guest (TCG, no KVM needed) booted with virtme-ng
# on this machine's root filesystem, with an emulated Intel 82576 (`igb`) SR-IOV PF.
# The guest creates two igbvf VFs, loads rdma_rxe and runs every test of
# tests/real_kernel.rs (they are #[ignore]d on the host) against the real /sys and the
# real kernel's rtnetlink and RDMA netlink, one test per row of the printed table, with
# systemd-udevd running as on a real node (on a kernel whose rxe is netns aware, also the
# walk-through between two pods, tests/real_kernel/pods.rs: rows `pods::*`, `N/A`
# elsewhere); then it rebinds both VFs to the mlx5-shaped test driver
# tests/kmod/ibvf.c and runs the InfiniBand cases (tests/real_kernel/ib.rs; with
# tests/real_kernel/rdma_chain.rs, rdma-cni's test-only stand-in tests/libcni/rdma-standin
# chained after ib-sriov through libcni). Third, a PF
# as big as a GPU node's: QEMU's emulated NVMe controller with SR-IOV (127 VFs, behind a
# second PCIe root port, ARI), every VF bound to ibvf, for the cases of
# tests/real_kernel/big_pf.rs (rows `ib::big_pf::*`: the last VF's state restored, also
# with the VF table read from a link dump; the whole 127-VF table; a rebind storm of
# multi-rail pods; ADD+DEL cost by VF index) and some phase-2 cases again (rows
# `<test> @big-pf`).
#
#   scripts/kernel-lab.sh              install, build, boot, test; exits non-zero on any
#                                      failure, on zero tests run, or when the guest did
#                                      not finish; a case that cannot run on the kernel
#                                      is a SKIP row with its reason (not a failure)
#   LAB_KERNEL=5.10|6.1|6.12|7.3 scripts/kernel-lab.sh
#                                      the guest's kernel: Debian's newest of that series
#                                      from bullseye-security (5.10), bookworm (6.1),
#                                      bookworm-backports (6.12, the default) or
#                                      trixie-backports (7.3); the test modules are built
#                                      for it (7.3: in a trixie root, gcc-14; 5.10: with
#                                      bookworm's gcc-12 for its gcc-10)
#   LAB_FILTER=REGEX scripts/kernel-lab.sh
#                                      only the tests whose names match (development)
#   LAB_REPEAT=N LAB_LOAD=M scripts/kernel-lab.sh
#                                      the InfiniBand cases N times in a row (rows named
#                                      `<test> #k`), with M busy loops (`yes >/dev/null`)
#                                      keeping the guest's CPUs busy beside them
#                                      (phases 1 and 2; phase 3 runs once)
#   LAB_BIG_VFS=N (default 127, at most 127; 0: no big PF), LAB_BIG_IB=REGEX (the phase-2
#   IB cases run again on the big PF, see BIG_IB; empty: none), LAB_STORM=PxR (the
#   storm's pods and rails per pod, default 8x2)
#                                      phase 3; it runs when LAB_FILTER selects one of
#                                      its `ib::big_pf::` cases; LAB_BIG_IB is not
#                                      filtered by LAB_FILTER
#   LAB_CHURN_SECS=N (default 40), LAB_CHURN_SHRINK=1
#                                      the node-file case (tests/real_kernel/churn.rs):
#                                      its cycles' time under the host's churn; with
#                                      SHRINK, instead, ADD and DEL while the host
#                                      replaces the files with ones of another size
#                                      (issue 50's hung DEL; may leave an unkillable
#                                      process spinning in the guest)
#   scripts/kernel-lab.sh --guest ...  the part that runs inside the guest (internal)
#
# Needs root (apt-get, /lib/modules, and the guest runs the tests as root). Installs:
# `scripts/deps.sh lab` (qemu-system-x86 10 with `igb` from Debian bookworm-backports,
# installed with `-t bookworm-backports` so its firmware and data packages come from there
# too; busybox-static, kmod, gcc-12, make, pahole, libelf1: the kernel's compiler and module
# BTF; mmdebstrap: the trixie root 7.3's modules are built in; python3-venv; udev, whose
# systemd-udevd the guest runs), the LAB_KERNEL kernel's image (only downloaded and
# unpacked, never installed as the host's kernel; likewise its headers and kbuild, for the
# test-only modules tests/kmod/vfguid.ko and tests/kmod/ibvf.ko), found and downloaded with
# apt through a private sources list of the kernel's suite on this machine's own Debian
# mirror (scripts/debian-sources.sh; the host's apt sources are not changed), and
# virtme-ng from PyPI in a venv. Everything lab-owned lives under $IB_SRIOV_LAB_DIR
# (default /var/lib/ib-sriov-lab, with apt/<suite>, kernel-<version>, headers-<version>,
# root-trixie; not /var/cache, which the guest hides under a tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."

LAB_DIR="${IB_SRIOV_LAB_DIR:-/var/lib/ib-sriov-lab}"
VIRTME_NG_VERSION=1.42
NUM_VFS=2
# Phase 3: the big PF's VF count (LAB_BIG_VFS; 0: no big PF) and the phase-2 IB cases
# that run again on it (LAB_BIG_IB, a regex; empty: none).
BIG_VFS=127
BIG_IB='^ib::(ib_add_check_del_del_with_rdma_in_the_pod|ib_doctor_before_during_and_after_an_attachment|ib_zero_guid_vf_gets_the_derived_guid_and_keeps_it)$'

# ---------------------------------------------------------------------------- guest
if [[ "${1:-}" == --guest ]]; then
    out="$2"
    testbin="$3"
    kmod_dir="${4:-}"
    filter="${5:-}"
    repeat="${6:-1}"
    load="${7:-0}"
    big_vfs="${8:-0}"
    big_ib="${9:-}"
    storm="${10:-}"
    churn_dir="${11:-}"
    churn_secs="${12:-40}"
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
    # The tests' temporary directories (stateDir, IPAM dataDir, logFile, GUID files) under
    # /run, within the plugin's default node policy (docs/configuration.md "Node policy
    # file"): the guest sees the host's /etc read-only, so it cannot widen the policy.
    export TMPDIR=/run/ib-sriov-lab-tmp
    mkdir -p "$TMPDIR"

    # udev runs in the guest as on every real node (docs/testing.md): virtme-ng starts the host's
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
    export LAB_LIBCNI_DRIVER="$out/libcni-driver" LAB_RDMA_STANDIN="$out/rdma-standin" LAB_DRA_STANDIN="$out/dra-standin"
    export LAB_PLUGIN_BIN="${testbin%/*}/ib-sriov" RUST_BACKTRACE=1
    # The node-file case (tests/real_kernel/churn.rs): two directories the host's churn
    # loop (churn_loop below) rewrites while the flag file exists, one seen through the
    # guest's read-only 9p root (as /etc/ib-sriov is), one through the read-write 9p
    # mount of the run directory.
    [[ -z "$churn_dir" ]] || export LAB_CHURN_DIRS="$churn_dir,$out/churn" LAB_CHURN_FLAG="$out/churn.on" LAB_CHURN_COUNT="$out/churn.count" LAB_CHURN_SECS="$churn_secs"
    ip -d link show
    ls -l "$pfdir"/ "$pfdir"/virtfn*/

    # One process per test; a row per test. $1: the function that puts the lab back
    # after a test (a failed test may leave a VF behind; noted in that test's log, the
    # failure itself is already recorded).
    # $run_label (e.g. " #3") is appended to the row and log names of a repeated run.
    run_label=""
    run_tests() {
        local restore="$1" t start status secs log skip
        shift
        for t in "$@"; do
            start=$(date +%s.%N)
            status=0
            log="$out/tests/$t${run_label// /}.log"
            timeout 300 "$testbin" --ignored --exact "$t" --test-threads=1 --nocapture \
                >"$log" 2>&1 || status=$?
            secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
            if [[ $status == 0 ]] && grep -q '^test result: ok. 1 passed' "$log"; then
                # A case that cannot run on this kernel says why (`lab-skip: REASON`,
                # tests/real_kernel.rs lab_skip): a SKIP row naming the reason.
                skip="$(grep -o 'lab-skip: .*' "$log" | head -n 1 || true)"
                if [[ -n "$skip" ]]; then
                    row SKIP "$t$run_label (${skip#lab-skip: })" "$secs"
                else
                    row PASS "$t$run_label" "$secs"
                fi
            else
                row FAIL "$t$run_label" "$secs"
            fi
            "$restore" "$t" >>"$log" 2>&1 || true
            ip netns list | awk '{ print $1 }' | xargs -r -n1 ip netns del || true
        done
    }
    # The netdev name under $1/net/ (one glob, no process: the big PF has 127 VFs),
    # empty when there is none.
    netdev_of() {
        local d=("$1"/net/*)
        if [[ -e "${d[0]}" ]]; then echo "${d[0]##*/}"; fi
    }
    # Every VF of PF directory $2 (PCI addresses in the array named $3) bound to driver
    # $1 with netdev name ${names[i]} ($4: the array's name).
    restore_vfs() {
        local drv="$1" dir="$2" i k n
        local -n addrs="$3" names="$4"
        for ((i = 0; i < ${#addrs[@]}; i++)); do
            if [[ ! -e "$dir/virtfn$i/driver" ]]; then
                echo "lab: rebinding ${addrs[i]} to $drv"
                echo "${addrs[i]}" >"/sys/bus/pci/drivers/$drv/bind" || true
            fi
            n=""
            for ((k = 0; k < 100; k++)); do
                n="$(netdev_of "$dir/virtfn$i")"
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
        restore_vfs "$vf_driver" "$pfdir" vfs vf_netdevs
    }
    restore_ibvf() {
        echo 0 >/sys/module/ibvf/parameters/no_refund || true
        # The test-only pkey tables (tests/real_kernel/pkey.rs): back to 0xffff only.
        for ((i = 0; i < NUM_VFS; i++)); do
            for e in 1 2 3; do echo "$i $e 0" >/sys/module/ibvf/parameters/set_pkey || true; done
        done
        echo "---- kernel log of $1"
        dmesg -c | grep -v 'audit:' || true
        udevadm settle --timeout=120 || true
        restore_vfs ibvf "$pfdir" vfs ib_netdevs
    }
    restore_big() {
        echo 0 >/sys/module/ibvf/parameters/no_refund || true
        echo 0 >/sys/module/ibvf/parameters/probe_delay_ms || true
        echo "---- kernel log of $1"
        dmesg -c | grep -v 'audit:' || true
        udevadm settle --timeout=120 || true
        restore_vfs ibvf "$bigdir" big_vfs_list big_netdevs
    }

    # Phase 1b, the walk-through between two pods (tests/real_kernel/pods.rs, rows
    # `pods::*`), on igbvf before phase 2 rebinds the VFs: only on a kernel whose rxe
    # has per-netns UDP sockets (drivers/infiniband/sw/rxe/rxe_ns.c, Debian's 7.3; its
    # `rxe_ns_pernet_sk4` is in /proc/kallsyms once rdma_rxe is loaded). Elsewhere each
    # case is a row `N/A`, with the reason, counted neither passed nor failed.
    restore_pods() {
        # Leftover rxe devices of a failed case (a pod netns deleted with its rxe
        # device returns that device to the initial netns).
        local ns d
        for ns in $(ip netns list | awk '{ print $1 }'); do
            for d in $(ip netns exec "$ns" rdma dev 2>/dev/null | awk '$2 ~ /^rxp/ { sub(":", "", $2); print $2 }'); do
                ip netns exec "$ns" rdma link delete "$d" || true
            done
        done
        for d in $(rdma dev 2>/dev/null | awk '$2 ~ /^rxp/ { sub(":", "", $2); print $2 }'); do
            rdma link delete "$d" || true
        done
        echo "---- kernel log of $1"
        dmesg -c | grep -v 'audit:' || true
        restore_igbvf "$1"
    }
    pods_phase() {
        (($#)) || return 0
        if ! grep -qw rxe_ns_pernet_sk4 /proc/kallsyms; then
            local t
            for t in "$@"; do
                row N/A "$t: kernel $(uname -r): its rdma_rxe has no per-netns sockets (no rxe_ns_pernet_sk4, drivers/infiniband/sw/rxe/rxe_ns.c), so an rxe device carries traffic only in the initial netns and cannot be moved into a pod (rdma dev set ... netns: Operation not supported on 6.12)" 0
            done
            return 0
        fi
        modprobe rdma_ucm || true
        dmesg -c >/dev/null || true
        run_tests restore_pods "$@"
    }

    mapfile -t all < <("$testbin" --list --ignored --format terse | sed -n 's/: test$//p' |
        grep -E -- "${filter:-.}")
    # Phase 1, igbvf: the RDMA netns-mode round trip first (the kernel
    # refuses a mode change while any other network namespace exists, and the other
    # tests create and delete pod namespaces), then the rest as listed, but the IB cases.
    ordered=() ib_tests=() big_tests=() pods_tests=()
    for t in "${all[@]}"; do [[ "$t" == rdma_netns_mode* ]] && ordered+=("$t"); done
    for t in "${all[@]}"; do
        case "$t" in
        rdma_netns_mode*) ;;
        pods::*) pods_tests+=("$t") ;;
        ib::big_pf::*) big_tests+=("$t") ;;
        ib::*) ib_tests+=("$t") ;;
        *) ordered+=("$t") ;;
        esac
    done
    run_tests restore_igbvf "${ordered[@]}"
    pods_phase "${pods_tests[@]}"

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

    # Phase 3, a PF as big as a GPU node's (tests/real_kernel/big_pf.rs): ibvf moves from
    # the igb PF (left with its VFs unbound) to QEMU's emulated NVMe PF, whose VFs (as many
    # as $big_vfs) are all bound to ibvf through driver_override. The NVMe function keeps
    # its nvme driver; it has no netdev but ibvf's ibpf0. Then the big-PF cases, and the
    # IB cases of phase 2 that match $big_ib (rows `<test> @big-pf`).
    if ((${#big_tests[@]})) && ((big_vfs > 0)); then
        t3=$(date +%s.%N)
        [[ -f "$kmod_dir/ibvf.ko" ]] || setup_fail "no $kmod_dir/ibvf.ko"
        udevadm control --ping || setup_fail "systemd-udevd is not running"
        if [[ -e /sys/module/ibvf ]]; then rmmod ibvf || setup_fail "rmmod ibvf"; fi
        modprobe nvme || setup_fail "modprobe nvme"
        bigpf=""
        for d in /sys/bus/pci/drivers/nvme/0000:*; do
            [[ -e "$d/sriov_totalvfs" ]] && bigpf="${d##*/}" && break
        done
        [[ -n "$bigpf" ]] || setup_fail "no nvme SR-IOV PF in the guest"
        bigdir="/sys/bus/pci/devices/$bigpf"
        (($(<"$bigdir/sriov_totalvfs") >= big_vfs)) || setup_fail "$bigpf has only $(<"$bigdir/sriov_totalvfs") VFs"
        # Else nvme probes every VF (it fails: a QEMU NVMe VF has no queue resources
        # until the PF assigns them).
        echo 0 >"$bigdir/sriov_drivers_autoprobe" || setup_fail "sriov_drivers_autoprobe of $bigpf"
        echo "$big_vfs" >"$bigdir/sriov_numvfs" || setup_fail "echo $big_vfs > $bigdir/sriov_numvfs"
        mapfile -t big_vfs_list < <(for ((i = 0; i < big_vfs; i++)); do echo "$bigdir/virtfn$i"; done |
            xargs readlink)
        big_vfs_list=("${big_vfs_list[@]##*/}")
        ((${#big_vfs_list[@]} == big_vfs)) || setup_fail "$bigpf lists ${#big_vfs_list[@]} of $big_vfs VFs"
        # driver_override first: registering the driver (insmod) then binds every VF.
        for ((i = 0; i < big_vfs; i++)); do
            echo ibvf >"$bigdir/virtfn$i/driver_override" || setup_fail "driver_override of ${big_vfs_list[i]}"
        done
        insmod "$kmod_dir/ibvf.ko" pf="$bigpf" || setup_fail "insmod ibvf.ko pf=$bigpf"
        for ((i = 0; i < big_vfs; i++)); do
            [[ "$bigdir/virtfn$i/driver" -ef /sys/bus/pci/drivers/ibvf ]] ||
                echo "${big_vfs_list[i]}" >/sys/bus/pci/drivers_probe || true
            [[ "$bigdir/virtfn$i/driver" -ef /sys/bus/pci/drivers/ibvf ]] || setup_fail "${big_vfs_list[i]} not bound to ibvf"
        done
        t3b=$(date +%s.%N)
        udevadm settle --timeout=600 || true
        big_netdevs=() big_rdma=()
        for ((i = 0; i < big_vfs; i++)); do
            n="$(netdev_of "$bigdir/virtfn$i")"
            [[ -n "$n" ]] || setup_fail "VF ${big_vfs_list[i]} has no IPoIB netdev"
            r=("$bigdir/virtfn$i/infiniband/"*)
            [[ -e "${r[0]}" ]] || setup_fail "VF ${big_vfs_list[i]} has no RDMA device"
            big_netdevs+=("$n") big_rdma+=("${r[0]##*/}")
        done
        secs=$(awk -v s="$t3" -v b="$t3b" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f s (binding %.1f s, udev %.1f s)", e - s, b - s, e - b }')
        row PASS "setup: big PF $bigpf (nvme) with $big_vfs VFs ${big_vfs_list[0]}..${big_vfs_list[big_vfs - 1]} on ibvf: IPoIB ${big_netdevs[0]}..${big_netdevs[big_vfs - 1]}, RDMA ${big_rdma[0]}..${big_rdma[big_vfs - 1]}, PF netdev ibpf0; $secs" 0
        ip -d link show ibpf0 >"$out/big-pf-ibpf0.txt" || true
        rdma dev >"$out/big-pf-rdma.txt" || true
        dmesg -c >/dev/null || true
        export LAB_PF="$bigpf" LAB_PF_NETDEV=ibpf0 LAB_VF_DRIVER=ibvf LAB_IB=1 LAB_BIG=1
        LAB_VFS="$(IFS=,; echo "${big_vfs_list[*]}")" LAB_VF_NETDEVS="$(IFS=,; echo "${big_netdevs[*]}")"
        export LAB_VFS LAB_VF_NETDEVS
        [[ -z "$storm" ]] || export LAB_STORM="$storm"
        run_label=""
        run_tests restore_big "${big_tests[@]}"
        again=()
        if [[ -n "$big_ib" ]]; then
            mapfile -t again < <("$testbin" --list --ignored --format terse | sed -n 's/: test$//p' |
                grep '^ib::' | grep -v '^ib::big_pf::' | grep -E -- "$big_ib")
        fi
        if ((${#again[@]})); then
            run_label=" @big-pf"
            run_tests restore_big "${again[@]}"
            run_label=""
        fi
    fi
    touch "$out/done"
    exit 0
fi

# ----------------------------------------------------------------------------- host
if [[ "$(id -u)" != 0 ]]; then
    echo "kernel-lab: must run as root (apt-get, /lib/modules, VF setup in the guest)" >&2
    exit 1
fi
# LAB_KERNEL: the guest's kernel series and the Debian suite it comes from;
# kroot_suite: the Debian release whose root builds its test modules (empty: this host);
# kcc_host: the host's compiler that builds them instead of the kernel's own (empty: the
# kernel's own).
LAB_KERNEL="${LAB_KERNEL:-6.12}"
kroot_suite="" kcc_host=""
case "$LAB_KERNEL" in
5.10) ksuite=bullseye-security kcc_host=gcc-12 ;;
6.1) ksuite=bookworm ;;
6.12) ksuite=bookworm-backports ;;
7.3) ksuite=trixie-backports kroot_suite=trixie ;;
*) echo "kernel-lab: LAB_KERNEL=$LAB_KERNEL: one of 5.10, 6.1, 6.12 (the default), 7.3" >&2; exit 1 ;;
esac
t0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive

# 1. Installs (scripts/deps.sh lab: QEMU and its firmware from bookworm-backports, the
# module toolchain, python3-venv).
scripts/deps.sh lab
# The kernel: the newest of the LAB_KERNEL series in its Debian suite, found and
# downloaded with apt through a private sources list of only that suite, on this
# machine's own Debian mirror (scripts/debian-sources.sh; the host's apt sources are not
# changed), and only unpacked under $LAB_DIR.
. scripts/debian-sources.sh
aptdir="$LAB_DIR/apt"
suite_apt_update "$aptdir" "$ksuite" || { echo "kernel-lab: apt-get update of $ksuite failed" >&2; exit 1; }
# linux-image-<series>.<x>[-<abi>]-amd64 (not -cloud, -rt, -dbg, -unsigned), the highest.
kernel_pkg() {
    suite_apt "$aptdir" "$ksuite" apt-cache pkgnames "linux-image-$LAB_KERNEL" 2>/dev/null |
        grep -E "^linux-image-${LAB_KERNEL//./\\.}[.-][^-]*(-[0-9]+)?-amd64$" | sort -V | tail -n 1
}
pkg="$(kernel_pkg)"
[[ -n "$pkg" ]] || { echo "kernel-lab: no linux-image-$LAB_KERNEL.*-amd64 in $ksuite" >&2; exit 1; }
kver="${pkg#linux-image-}"
# The versioned packages a package depends on (7.3's image is split into linux-binary-,
# linux-modules- and linux-base-<version>; a headers package needs its -common tree and
# kbuild), not the compiler's meta package.
kernel_deps() {
    suite_apt "$aptdir" "$ksuite" apt-cache depends "$@" 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-[a-z]+-[0-9]/ && $2 !~ /^linux-compiler-/ { print $2 }' | sort -u
}
# Download $2... into a temporary directory and unpack every .deb into $1.
unpack_debs() {
    local into="$1" dl
    shift
    dl="$(mktemp -d)"
    chmod 755 "$dl"
    (cd "$dl" && suite_apt "$aptdir" "$ksuite" apt-get download -qq "$@") ||
        { rm -rf "$dl"; echo "kernel-lab: cannot download $* from $ksuite" >&2; return 1; }
    rm -rf "$into"
    mkdir -p "$into"
    for f in "$dl"/*.deb; do dpkg-deb -x "$f" "$into"; done
    rm -rf "$dl"
}
qemu_ver() { dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || true; }
kroot="$LAB_DIR/kernel-$kver"
# 7.3's linux-binary ships the image as /usr/lib/modules/<version>/vmlinuz, the others
# as /boot/vmlinuz-<version>.
vmlinuz="$kroot/boot/vmlinuz-$kver"
[[ -f "$vmlinuz" || ! -f "$kroot/usr/lib/modules/$kver/vmlinuz" ]] || vmlinuz="$kroot/usr/lib/modules/$kver/vmlinuz"
if [[ ! -f "$kroot/.unpacked" ]]; then
    mapfile -t kpkgs < <(kernel_deps "$pkg")
    unpack_debs "$kroot" "$pkg" "${kpkgs[@]}" || exit 1
    # depmod -b reads <base>/lib/modules: a package that ships /usr/lib/modules gets a link.
    if [[ ! -d "$kroot/lib/modules/$kver" && -d "$kroot/usr/lib/modules/$kver" ]]; then
        mkdir -p "$kroot/lib"
        ln -sfn ../usr/lib/modules "$kroot/lib/modules"
    fi
    [[ -f "$vmlinuz" ]] || vmlinuz="$kroot/usr/lib/modules/$kver/vmlinuz"
    [[ -f "$vmlinuz" ]] || { echo "kernel-lab: $pkg ${kpkgs[*]} hold no boot/vmlinuz-$kver nor usr/lib/modules/$kver/vmlinuz" >&2; exit 1; }
    depmod -b "$kroot" "$kver"
    touch "$kroot/.unpacked"
fi
# The kernel's headers, for the test-only modules (tests/kmod): downloaded and unpacked
# under $LAB_DIR, not installed (the headers package pulls in the kernel image, initramfs
# tools and more). The amd64 tree's Makefile includes the -common tree by absolute path;
# it is pointed at the unpacked copy, so nothing outside $LAB_DIR is needed.
hroot="$LAB_DIR/headers-$kver"
kbuild_dir="$hroot/usr/src/linux-headers-$kver"
if [[ ! -f "$hroot/.unpacked" ]]; then
    mapfile -t hpkgs < <(kernel_deps "linux-headers-$kver")
    mapfile -t hpkgs2 < <(kernel_deps "${hpkgs[@]}")
    mapfile -t hpkgs < <(printf '%s\n' "${hpkgs[@]}" "${hpkgs2[@]}" | sort -u)
    unpack_debs "$hroot" "linux-headers-$kver" "${hpkgs[@]}" || exit 1
    # `include /usr/src/...-common/Makefile`, and 7.3's `KBUILD_OUTPUT=/usr/src/...`.
    sed -i "s|^include /usr/src/|include $hroot/usr/src/|; s|^KBUILD_OUTPUT=/usr/src/|KBUILD_OUTPUT=$hroot/usr/src/|" "$kbuild_dir/Makefile"
    touch "$hroot/.unpacked"
fi
# The compiler the kernel was built with (CONFIG_CC_VERSION_TEXT, e.g. `gcc-12 (Debian
# 12.2.0-14) 12.2.0`; the headers' Makefile calls x86_64-linux-gnu-gcc-<N>). Bookworm's
# gcc-12 (scripts/deps.sh lab) builds for 6.1 and 6.12. For a kernel whose compiler or
# kbuild tools bookworm lacks (7.3: gcc-14, and kbuild tools that need glibc 2.38), the
# modules are built in a Debian root of the kernel's own release ($kroot_suite, made
# once with mmdebstrap from the machine's Debian mirror, under $LAB_DIR/root-<suite>).
kcc="$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\([^ ]*\) .*/\1/p' "$kbuild_dir/.config")"
kcc_pkg="gcc-${kcc##*gcc-}"
build_root=""
if [[ -n "$kroot_suite" ]]; then
    build_root="$LAB_DIR/root-$kroot_suite"
    if [[ ! -f "$build_root/.ready" ]]; then
        rm -rf "$build_root"
        mmdebstrap --quiet --variant=minbase --include="$kcc_pkg,make,libc6-dev,libelf-dev,pahole,kmod" \
            "$kroot_suite" "$build_root" "deb $(debian_uri "$kroot_suite") $kroot_suite main" ||
            { echo "kernel-lab: mmdebstrap of a $kroot_suite root with $kcc_pkg failed" >&2; exit 1; }
        touch "$build_root/.ready"
    fi
    [[ -x "$build_root/usr/bin/$kcc" ]] || { echo "kernel-lab: $build_root has no $kcc" >&2; exit 1; }
else
    # 5.10 was built with bullseye's gcc-10; bookworm's gcc-12 builds its modules as well
    # (same vermagic: `5.10.0-<abi>-amd64 SMP mod_unload modversions`), with CC= given.
    kcc="${kcc_host:-$kcc}"
    command -v "$kcc" >/dev/null || { echo "kernel-lab: the kernel's compiler $kcc is missing (scripts/deps.sh lab installs gcc-12)" >&2; exit 1; }
fi
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
# The tree under test (others may be changing it): its commit and what differs in src/.
{ git log --oneline -1 && git status --short src; } >"$out/tree.txt" 2>&1 || true
bins="$(cargo test --features failpoints --test real_kernel --no-run --message-format=json 2>"$out/build.log" |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] in ("real_kernel", "ib-sriov") and m.get("executable"):
        print(m["target"]["name"], m["executable"])')" || true
# The node tools (doctor, exporter): `ib-sriov doctor` runs ib-sriovctl from its own
# directory, so the guest gets a copy beside the plugin's.
ctl="$(cargo build --features failpoints -p ib-sriovctl --bin ib-sriovctl --message-format=json 2>>"$out/build.log" |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "ib-sriovctl" and m.get("executable"):
        print(m["executable"])')" || true
# The guest runs copies, which no build on the host (other work in the same tree
# rebuilds target/debug/ib-sriov in place) can change meanwhile. Not in the run directory:
# the guest mounts that read-write without a page cache (9p), so every exec of the
# plugin would read its 60 MB again (0.3-0.8 s of the guest's CPU each); the guest sees
# the rest of the host's root read-only, cached.
bindir="$LAB_DIR/bin/${out##*/}"
mkdir -p "$bindir"
trap 'rm -rf "$bindir"' EXIT
testbin="" plugin_bin=""
while read -r name exe; do
    case "$name" in
    real_kernel) cp "$exe" "$bindir/real_kernel" && testbin="$bindir/real_kernel" ;;
    ib-sriov) cp "$exe" "$bindir/ib-sriov" && plugin_bin="$bindir/ib-sriov" ;;
    esac
done <<<"$bins"
[[ -n "$ctl" ]] && cp "$ctl" "$bindir/ib-sriovctl" || {
    cat "$out/build.log" >&2
    echo "kernel-lab: building ib-sriovctl (the node tools) failed" >&2
    exit 1
}
if [[ -z "$testbin" || ! -x "$testbin" || -z "$plugin_bin" ]] || ! "$plugin_bin" --version >/dev/null; then
    cat "$out/build.log" >&2
    echo "kernel-lab: building tests/real_kernel.rs and the plugin failed" >&2
    exit 1
fi
tests/libcni/build.sh "$out/libcni-driver" 2>>"$out/build.log" || {
    cat "$out/build.log" >&2
    echo "kernel-lab: building the libcni driver failed" >&2
    exit 1
}
# The test-only stand-in of rdma-cni (tests/libcni/rdma-standin), chained after
# ib-sriov by the cases of tests/real_kernel/rdma_chain.rs.
tests/libcni/build.sh "$out/rdma-standin" ./rdma-standin 2>>"$out/build.log" || {
    cat "$out/build.log" >&2
    echo "kernel-lab: building the rdma-cni stand-in failed" >&2
    exit 1
}
# The test-only stand-in of dra-driver-sriov's CNI calls (tests/libcni/dra-standin), for
# the DRA case of tests/real_kernel/dra.rs.
tests/libcni/build.sh "$out/dra-standin" ./dra-standin 2>>"$out/build.log" || {
    cat "$out/build.log" >&2
    echo "kernel-lab: building the dra-driver-sriov stand-in failed" >&2
    exit 1
}
# The test-only module, built against the guest kernel's headers in the run directory
# (which the guest sees).
kmod_dir="$out/kmod"
mkdir -p "$kmod_dir"
cp tests/kmod/Kbuild tests/kmod/*.c "$kmod_dir/"
kmake() {
    if [[ -z "$build_root" ]]; then
        make -C "$kbuild_dir" M="$kmod_dir" ${kcc_host:+CC="$kcc_host"} modules
    else
        # In a private mount namespace (nothing to undo): the headers at their own path
        # and the run's module directory bound into the build root; /proc for objtool.
        mkdir -p "$build_root$hroot" "$build_root/lab-kmod"
        unshare --mount --propagation private sh -c 'mount --bind "$1" "$2$1" && mount --bind "$3" "$2/lab-kmod" &&
            mount -t proc proc "$2/proc" &&
            exec chroot "$2" make -C "$4" M=/lab-kmod modules' sh "$hroot" "$build_root" "$kmod_dir" "$kbuild_dir"
    fi
}
kmake >>"$out/build.log" 2>&1 || {
    cat "$out/build.log" >&2
    echo "kernel-lab: building the test modules of tests/kmod failed" >&2
    exit 1
}
t_build=$(date +%s)
echo "kernel-lab: builds done in $((t_build - t_install)) s"

# The host side of the node-file case (tests/real_kernel/churn.rs), issue 50 finding 8:
# the host replaced /etc/ib-sriov/node.json, which the guest sees through its 9p root,
# while a DEL ran. While the guest's test keeps $out/churn.on, this loop rewrites
# node.json, guids (a `guidFile`) and labnet.conflist in two directories: one under
# $LAB_DIR, which the guest sees as it sees /etc (an overlay whose lower layer is the
# host's root over 9p), and $out/churn, the read-write 9p mount of the run directory.
# The flag's content is the mode: `rename` (write a temporary file, rename it over),
# `inplace` (that, alternating with overwriting the file in place), both with two
# variants of each file of the same size that differ in their last byte, so any read
# is valid; `shrink` (renamed over, variants of different sizes, as an editor or a
# configuration tool replaces a file: what hung issue 50's DEL in the guest's kernel,
# see docs/testing.md), only when the guest finds $out/churn.shrink (LAB_CHURN_SHRINK=1).
# Without the flag the loop only polls it every 0.2 s. Its counts go to $out/churn.count.
churn_dir="$LAB_DIR/churn/${out##*/}"
mkdir -p "$churn_dir" "$out/churn"
[[ "${LAB_CHURN_SHRINK:-0}" != 1 ]] || touch "$out/churn.shrink"
churn_loop() {
    exec python3 - "$out/churn.on" "$out/churn.count" "$churn_dir" "$out/churn" <<'PY'
import os, signal, sys, time
flag, count_file, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
node = b'{"extraPathRoots": ["/run/ib-sriov-lab-tmp", "/etc/ib-sriov"]}'
conf = b'{"cniVersion": "1.0.0", "name": "labnet", "plugins": [{"type": "ib-sriov"}]}'
same = [("node.json", [node + b"\n", node + b" "]), ("guids", [b"[]\n", b"[] "]),
        ("labnet.conflist", [conf + b"\n", conf + b" "])]
shrink = [("node.json", [node + b"\n", b'{\n  "extraPathRoots": [\n    "/run/ib-sriov-lab-tmp",\n    "/etc/ib-sriov"\n  ]\n}\n']),
          ("guids", [b"[]\n", b"[\n]\n\n"]), ("labnet.conflist", [conf + b"\n", conf + b"\n\n\n\n"])]
counts = {"rename": 0, "inplace": 0, "loops": 0}
def save():
    with open(count_file + ".tmp", "w") as f:
        f.write("rename %(rename)d inplace %(inplace)d loops %(loops)d\n" % counts)
    os.replace(count_file + ".tmp", count_file)
def stop(*_):
    save()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
for d in dirs:
    for name, v in same:
        with open(os.path.join(d, name), "wb") as f:
            f.write(v[0])
i = 0
while True:
    try:
        with open(flag) as f:
            mode = f.read().strip()
    except FileNotFoundError:
        if counts["loops"]:
            save()
        time.sleep(0.2)
        continue
    i += 1
    for d in dirs:
        for name, v in (shrink if mode == "shrink" else same):
            p = os.path.join(d, name)
            data = v[i % 2]
            if mode == "inplace" and i % 2:
                with open(p, "r+b") as f:
                    f.write(data)
                counts["inplace"] += 1
            else:
                with open(p + ".new", "wb") as f:
                    f.write(data)
                os.replace(p + ".new", p)
                counts["rename"] += 1
    counts["loops"] += 1
    if i % 200 == 0:
        save()
    time.sleep(0.002)
PY
}
churn_loop &
churn_pid=$!
trap 'kill "$churn_pid" 2>/dev/null || true; wait "$churn_pid" 2>/dev/null || true; rm -rf "$bindir" "$churn_dir"' EXIT

# 3. Boot the guest and run the tests. vng's own exit status is not the script's (no
# virtio-serial script channel under TCG here), so only the files the guest writes count.
status=0
big_vfs="${LAB_BIG_VFS:-$BIG_VFS}"
[[ "$big_vfs" =~ ^[0-9]+$ ]] && ((big_vfs <= 127)) || { echo "kernel-lab: LAB_BIG_VFS=$big_vfs: 0 to 127 (a ConnectX PF's most, and what the lab was run with)" >&2; exit 1; }
[[ "${LAB_CHURN_SECS:-40}" =~ ^[0-9]+$ ]] || { echo "kernel-lab: LAB_CHURN_SECS=$LAB_CHURN_SECS: a number of seconds" >&2; exit 1; }
qemu_opts='-machine q35 -device pcie-root-port,id=rp1,slot=1 -netdev user,id=n1 -device igb,bus=rp1,netdev=n1'
guest_limit=$((1200 + 900 * (${LAB_REPEAT:-1} - 1)))
if ((big_vfs > 0)); then
    # The big PF: QEMU's NVMe controller with SR-IOV behind a second PCIe root port (its
    # VFs get ARI routing IDs 01..7f on the port's bus). QEMU requires flexible queue
    # (>= 2 per VF) and interrupt (>= 1 per VF) resources for the VFs, with at least 2
    # queue pairs and 1 MSI-X vector left to the PF (hw/nvme/ctrl.c nvme_check_params()).
    qemu_opts+=" -device pcie-root-port,id=rp2,slot=2 -device nvme-subsys,id=nvsub0"
    qemu_opts+=" -device nvme,bus=rp2,serial=ibvflab0,subsys=nvsub0,sriov_max_vfs=$big_vfs"
    qemu_opts+=",sriov_vq_flexible=$((2 * big_vfs)),sriov_vi_flexible=$big_vfs"
    qemu_opts+=",max_ioqpairs=$((2 * big_vfs + 2)),msix_qsize=$((big_vfs + 1))"
    guest_limit=$((guest_limit + 900))
fi
timeout "$guest_limit" vng --verbose --run "$vmlinuz" --disable-kvm --cpus 2 --memory 2G \
    --rwdir="$out" \
    --qemu-opts="$qemu_opts" \
    --exec "$PWD/scripts/kernel-lab.sh --guest $out $testbin $kmod_dir $(printf %q "${LAB_FILTER:-}") ${LAB_REPEAT:-1} ${LAB_LOAD:-0} $big_vfs $(printf %q "${LAB_BIG_IB-$BIG_IB}") $(printf %q "${LAB_STORM:-}") $churn_dir ${LAB_CHURN_SECS:-40}" \
    </dev/null >"$out/console.log" 2>&1 || status=$?
t_guest=$(date +%s)
echo "kernel-lab: guest ran for $((t_guest - t_build)) s (vng exit status $status)"
kill "$churn_pid" 2>/dev/null || true
wait "$churn_pid" 2>/dev/null || true

fail=0 pass=0 na=0 skipped=0 ntests=0
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
    [[ "$name" == setup:* ]] || ntests=$((ntests + 1))
    # Not applicable on this kernel (phase 1b, N/A) or skipped with a reason (SKIP, a
    # case's `lab-skip:` line): neither passed nor failed.
    case "$res" in
    PASS) pass=$((pass + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    N/A) na=$((na + 1)) ;;
    *) fail=$((fail + 1)) ;;
    esac
done <"$out/results.tsv" 2>/dev/null || true
echo
# A row `<test><label>` (label ` #k` of a repeated run, ` @big-pf` of phase 3) has its
# log in `<test><label without spaces>.log`.
while IFS=$'\t' read -r res name _; do
    [[ "$res" == FAIL && "$name" != setup:* ]] || continue
    f="$out/tests/${name// /}.log"
    [[ -f "$f" ]] || continue
    echo "---- $name (failed) ----"
    tail -n 60 "$f"
done <"$out/results.tsv" 2>/dev/null || true
# The node-file case's figures (tests/real_kernel/churn.rs): call times under the churn.
grep -h '^lab-figure: churn' "$out"/tests/*.log 2>/dev/null || true
# The walk-through between two pods (tests/real_kernel/pods.rs): its figures and the
# exporter's series before and after (the tools' whole output is in the cases' logs).
grep -h '^lab-figure: between_pods' "$out"/tests/*.log 2>/dev/null || true
if ((ntests == 0)); then
    echo "kernel-lab: no real-kernel test ran" >&2
    fail=$((fail + 1))
fi
t_end=$(date +%s)
echo "kernel-lab: total $((t_end - t0)) s (installs $((t_install - t0)) s, builds $((t_build - t_install)) s, guest $((t_guest - t_build)) s); logs in $out"
echo "kernel-lab: $pass passed, $skipped skipped (a reason each, in its row), $fail failed$( ((na == 0)) || echo ", $na not applicable on this kernel")"
((fail == 0))
