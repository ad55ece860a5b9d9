#!/usr/bin/env bash
# The image test (.ci/run): builds the multi-platform image (scripts/image.sh) and runs
# it for real, as the DaemonSet's container and the SR-IOV network operator's init
# container run it:
#
#   0. The OCI archive holds one image index listing one image per platform asked for,
#      each with its os/architecture; each platform's image config says that
#      architecture, and its two binaries are static ELF executables of that machine.
#
#   1. `podman run ... --no-sleep` with a temp directory mounted as /host/opt/cni/bin,
#      with every capability dropped, a read-only root filesystem and no-new-privileges
#      (what conf/ib-sriov-daemonset.yaml claims is enough): exit 0; the copy is
#      byte-identical to the image's /usr/bin/ib-sriov, mode 0755, and answers
#      CNI_COMMAND=VERSION; nothing else is left in the directory.
#   2. The same without --no-sleep (the DaemonSet's way): the copy appears, the container
#      keeps running, `podman stop` (SIGTERM) ends it with exit status 0 at once.
#   3. The image's binaries are static (tests/static_binary.rs, run against the files
#      taken out of the image) and `ib-sriov --version` names the build.
#   4. The end-to-end tests that need no fail points, run once against the plugin taken
#      out of the image (IB_SRIOV_BIN): libcni ADD/CHECK/DEL/DEL for each version and
#      config format, the InfiniBand GUID capability, and ADD/CHECK/DEL/DEL per version.
#   5. Every platform's image, taken from the archive's index with `podman run --arch`
#      into a storage of its own, the non-amd64 ones through qemu-user (binfmt_misc,
#      scripts/binfmt.sh): the image holds that machine's plugin, --no-sleep copies it
#      byte-identical (thin_entrypoint's own VERSION check of the copy passes), and the
#      copy answers VERSION here too.
#
#   IB_SRIOV_IMAGE_PLATFORMS   platforms built and run (default linux/amd64,linux/arm64;
#                              all four: linux/amd64,linux/arm64,linux/ppc64le,linux/s390x)
#
# podman runs with runc (`--runtime runc`): crun, podman's default, fails on these
# machines' cgroup hybrid mode; the ulimits avoid podman's defaults, which these
# machines refuse. Needs root. Exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh image test
platforms="${IB_SRIOV_IMAGE_PLATFORMS:-linux/amd64,linux/arm64}"
[[ ",$platforms," == *,linux/amd64,* ]] || { echo "image-test: the platforms must include linux/amd64" >&2; exit 2; }

tmp="$(mktemp -d /tmp/ib-sriov-image-test.XXXXXX)"
ctr="ib-sriov-image-test-$$"
# Step 5's podman: a storage of its own, as on a node that has no image yet.
node=(podman --root "$tmp/node-storage" --runroot "$tmp/node-run" --storage-driver vfs)
cleanup() {
    podman rm -f "$ctr" >/dev/null 2>&1 || true
    "${node[@]}" rm -f "$ctr" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "image-test: FAIL: $*" >&2; exit 1; }
pass() { echo "image-test: ok: $*"; }

index="$(scripts/image.sh --platforms "$platforms" --oci-archive "$tmp/ib-sriov.oci.tar")"
pass "built $index ($(du -h "$tmp/ib-sriov.oci.tar" | cut -f1) as an OCI archive)"
image="$index-amd64" # this machine's platform

# 0. One index, one image per platform, each of its architecture.
python3 - "$tmp/ib-sriov.oci.tar" "$platforms" <<'PY' || fail "the OCI archive's index"
import json, sys, tarfile
tar = tarfile.open(sys.argv[1])
blob = lambda d: json.load(tar.extractfile("blobs/" + d["digest"].replace(":", "/")))
top = json.load(tar.extractfile("index.json"))
assert len(top["manifests"]) == 1, top
index = top["manifests"][0]
assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index
entries = blob(index)["manifests"]
found = sorted(f'{m["platform"]["os"]}/{m["platform"]["architecture"]}' for m in entries)
want = sorted(sys.argv[2].split(","))
assert found == want, (found, want)
for m in entries:
    config = blob(blob(m)["config"])
    assert config["architecture"] == m["platform"]["architecture"], (m, config["architecture"])
print("index:", ", ".join(found))
PY
pass "the OCI archive is one image index of ${platforms//,/, }, each image's config of its architecture"
buildah inspect --format '{{range $k, $v := .OCIv1.Config.Labels}}{{$k}}={{$v}}{{"\n"}}{{end}}' "$image" >"$tmp/labels"
for l in version revision created source licenses; do
    grep -q "^org.opencontainers.image.$l=." "$tmp/labels" || fail "label org.opencontainers.image.$l missing"
done
entry="$(buildah inspect --format '{{.OCIv1.Config.Entrypoint}}' "$image")"
[[ "$entry" == "[/usr/bin/thin_entrypoint]" ]] || fail "entrypoint is $entry"
pass "labels $(paste -sd' ' "$tmp/labels"); entrypoint $entry"

# The image's own files, for comparison and for the tests.
mkdir -p "$tmp/image-bin"
podman create --runtime runc --name "$ctr" "$index" >/dev/null
podman cp "$ctr:/usr/bin/ib-sriov" "$tmp/image-bin/ib-sriov"
podman cp "$ctr:/usr/bin/thin_entrypoint" "$tmp/image-bin/thin_entrypoint"
# The node tools beside the plugin, as in the image: `ib-sriov doctor` runs them.
podman cp "$ctr:/usr/bin/ib-sriovctl" "$tmp/image-bin/ib-sriovctl"
podman rm "$ctr" >/dev/null
run_opts=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024
    --network none --cap-drop ALL --read-only --security-opt no-new-privileges)
run=(podman run "${run_opts[@]}")

# 1. As the operator's init container: --no-sleep.
mkdir "$tmp/cnibin1"
"${run[@]}" --rm -v "$tmp/cnibin1:/host/opt/cni/bin" "$index" --no-sleep >"$tmp/run1.log" 2>&1 ||
    { cat "$tmp/run1.log" >&2; fail "podman run --no-sleep"; }
copy="$tmp/cnibin1/ib-sriov"
cmp "$copy" "$tmp/image-bin/ib-sriov" || fail "the copy differs from the image's /usr/bin/ib-sriov"
[[ "$(stat -c %a "$copy")" == 755 ]] || fail "mode of the copy is $(stat -c %a "$copy")"
[[ "$(ls -A "$tmp/cnibin1" | tr '\n' ' ')" == "ib-sriov ib-sriov-ipam " ]] || fail "left in the directory: $(ls -A "$tmp/cnibin1")"
# The IPAM plugin: a second, independent copy (not a link) that dispatches on its name.
cmp "$tmp/cnibin1/ib-sriov-ipam" "$tmp/image-bin/ib-sriov" || fail "ib-sriov-ipam differs from the image's /usr/bin/ib-sriov"
[[ "$(stat -c %h "$tmp/cnibin1/ib-sriov-ipam")" == 1 && ! -L "$tmp/cnibin1/ib-sriov-ipam" ]] || fail "ib-sriov-ipam is a link"
"$tmp/cnibin1/ib-sriov-ipam" --version | grep -q '^ib-sriov-ipam version:' || fail "ib-sriov-ipam --version: $("$tmp/cnibin1/ib-sriov-ipam" --version 2>&1)"
CNI_COMMAND=VERSION "$copy" </dev/null >"$tmp/version.json" || fail "the copy does not answer VERSION"
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); assert "1.1.0" in v["supportedVersions"], v' "$tmp/version.json" ||
    fail "VERSION answer: $(cat "$tmp/version.json")"
pass "--no-sleep: copy byte-identical, mode 755, answers VERSION $(cat "$tmp/version.json")"

# 2. As the DaemonSet's container: sleeps until SIGTERM, then exits 0.
mkdir "$tmp/cnibin2"
"${run[@]}" -d --name "$ctr" -v "$tmp/cnibin2:/host/opt/cni/bin" "$index" >/dev/null
for _ in $(seq 100); do [[ -e "$tmp/cnibin2/ib-sriov" ]] && break; sleep 0.1; done
cmp "$tmp/cnibin2/ib-sriov" "$tmp/image-bin/ib-sriov" || fail "daemon mode: no identical copy"
sleep 1
[[ "$(podman inspect -f '{{.State.Running}}' "$ctr")" == true ]] || fail "daemon mode: the container exited"
t0=$(date +%s.%N)
podman stop -t 10 "$ctr" >/dev/null
secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
status="$(podman inspect -f '{{.State.ExitCode}}' "$ctr")"
podman logs "$ctr" >"$tmp/run2.log" 2>&1 || true
podman rm "$ctr" >/dev/null
[[ "$status" == 0 ]] || { cat "$tmp/run2.log" >&2; fail "daemon mode: exit status $status after SIGTERM"; }
awk -v s="$secs" 'BEGIN { exit !(s < 5) }' || fail "daemon mode: SIGTERM took ${secs}s (the 10 s kill, not the signal)"
pass "daemon mode: copy made, running until SIGTERM, exit 0 in ${secs}s"

# 3. Static, and names its build.
"$tmp/image-bin/ib-sriov" --version | grep -q '^ib-sriov cni version:[^,]*, commit:[0-9a-f]' ||
    fail "ib-sriov --version: $("$tmp/image-bin/ib-sriov" --version 2>&1)"
pass "$("$tmp/image-bin/ib-sriov" --version)"
# The node tools: the image's ib-sriovctl answers, and the image's ib-sriov runs it from
# its own directory for `ib-sriov doctor` (issue 53); without it beside (the host's
# copy in /opt/cni/bin), ib-sriov says where to get it and exits 2.
"$tmp/image-bin/ib-sriovctl" --version | grep -q '^ib-sriovctl version:' ||
    fail "ib-sriovctl --version: $("$tmp/image-bin/ib-sriovctl" --version 2>&1)"
"$tmp/image-bin/ib-sriov" doctor --help | grep -q '^usage: ib-sriov doctor' ||
    fail "ib-sriov doctor --help beside ib-sriovctl: $("$tmp/image-bin/ib-sriov" doctor --help 2>&1)"
rc=0
env PATH=/nonexistent "$tmp/cnibin1/ib-sriov" doctor >"$tmp/nodoctor.log" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q 'ib-sriovctl' "$tmp/nodoctor.log" ||
    fail "ib-sriov doctor without ib-sriovctl: exit $rc, $(cat "$tmp/nodoctor.log")"
pass "ib-sriovctl in the image; ib-sriov doctor runs it from beside itself, and without it exits 2 naming it"

# 4. The tests that need no fail points, against the image's plugin and entrypoint. The
# test binaries are the ones scripts/test.sh built (same flags, so no rebuild).
. scripts/static-flags.sh # sets triple and RUSTFLAGS
export IB_SRIOV_BIN="$tmp/image-bin/ib-sriov" THIN_ENTRYPOINT_BIN="$tmp/image-bin/thin_entrypoint"
ct=(cargo test --target "$triple" --features failpoints)
"${ct[@]}" --test static_binary
"${ct[@]}" --test libcni_e2e
"${ct[@]}" --test ipam_plugin # the image's ib-sriov run as ib-sriov-ipam under host-device and libcni
"${ct[@]}" --test plugin_emulated -- --exact add_check_del_del_for_every_version
pass "static-binary, libcni and per-version end-to-end tests against the image's binaries"

# 5. Each platform's image as a node of that platform gets it: from the index in the OCI
# archive (what is pushed to a registry), into a podman storage of its own (a node that
# has nothing yet), chosen by `--arch`; the non-amd64 ones run under qemu-user.
. scripts/binfmt.sh # binfmt_register
. scripts/arch.sh   # arch_of_oci, arch_facts: elf_machine, qemu
IFS=, read -r -a plats <<<"$platforms"
for p in "${plats[@]}"; do
    arch="${p#linux/}"
    arch_facts "$(arch_of_oci "$arch")" || fail "unknown platform '$p'"
    how=natively
    if [[ -n "$qemu" ]]; then
        binfmt_register "$qemu" || fail "$arch: qemu-$qemu binfmt handler"
        how="under qemu-$qemu"
    fi
    mkdir "$tmp/bin-$arch" "$tmp/cnibin-$arch"
    "${node[@]}" create --runtime runc --arch "$arch" --name "$ctr" "oci-archive:$tmp/ib-sriov.oci.tar" >/dev/null 2>&1 ||
        fail "$arch: podman create --arch $arch from the archive's index"
    [[ "$("${node[@]}" image inspect -f '{{.Architecture}}' "$("${node[@]}" inspect -f '{{.Image}}' "$ctr")")" == "$arch" ]] ||
        fail "$arch: podman --arch $arch took another platform's image from the index"
    "${node[@]}" cp "$ctr:/usr/bin/ib-sriov" "$tmp/bin-$arch/ib-sriov"
    "${node[@]}" rm "$ctr" >/dev/null
    readelf -h "$tmp/bin-$arch/ib-sriov" | grep -q "Machine: *$elf_machine" ||
        fail "$arch: the $arch image holds a plugin for $(readelf -h "$tmp/bin-$arch/ib-sriov" | grep Machine)"
    "${node[@]}" run "${run_opts[@]}" --arch "$arch" --rm \
        -v "$tmp/cnibin-$arch:/host/opt/cni/bin" "oci-archive:$tmp/ib-sriov.oci.tar" --no-sleep \
        >"$tmp/run-$arch.log" 2>&1 || { cat "$tmp/run-$arch.log" >&2; fail "$arch: podman run --no-sleep"; }
    copy="$tmp/cnibin-$arch/ib-sriov"
    cmp "$copy" "$tmp/bin-$arch/ib-sriov" || fail "$arch: the copy differs from the $arch image's /usr/bin/ib-sriov"
    [[ "$(ls -A "$tmp/cnibin-$arch" | tr '\n' ' ')" == "ib-sriov ib-sriov-ipam " ]] || fail "$arch: left in the directory: $(ls -A "$tmp/cnibin-$arch")"
    cmp "$tmp/cnibin-$arch/ib-sriov-ipam" "$tmp/bin-$arch/ib-sriov" || fail "$arch: ib-sriov-ipam differs from the $arch image's /usr/bin/ib-sriov"
    v="$(CNI_COMMAND=VERSION "$copy" </dev/null)" || fail "$arch: the copy does not answer VERSION"
    python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert "1.1.0" in v["supportedVersions"], v' "$v" ||
        fail "$arch: VERSION answer: $v"
    pass "$arch: podman run --arch $arch --no-sleep from the index, $how: the $elf_machine plugin copied byte-identical (thin_entrypoint's VERSION check passed), the copy answers VERSION"
done
"${node[@]}" rmi -a -f >/dev/null 2>&1 || true
