# Sourced by build.sh, deps.sh, image.sh, cross-check.sh and image-test.sh: what each
# architecture the image ships is called by each tool, in one table (docs/install.md
# "Architectures"; the Go ib-sriov-cni release image's platforms, its
# .github/workflows/image-push-release.yaml).
#
#   ARCHES                 the four, by their Rust/uname names
#   arch_facts ARCH        ARCH: x86_64, aarch64, powerpc64le or s390x. Sets
#                          triple     the Rust target (<arch>-unknown-linux-gnu)
#                          gnu        the GNU triple of Debian's cross gcc (gcc-<gnu>)
#                          deb        the Debian architecture (libc6-dev-<deb>-cross)
#                          oci        the OCI/Go architecture (linux/<oci> platforms)
#                          qemu       qemu-user's name ("" for x86_64, run natively here)
#                          elf_machine, elf_data   what `readelf -h` prints as Machine
#                                     and Data (byte order) for its executables
#                          Returns 1, setting nothing, for any other name.
#   arch_of_oci OCI_ARCH   prints the Rust name of amd64, arm64, ppc64le or s390x;
#                          returns 1 for any other name.
ARCHES="x86_64 aarch64 powerpc64le s390x"

arch_facts() {
    case "$1" in
    x86_64) gnu=x86_64-linux-gnu deb=amd64 oci=amd64 qemu="" elf_machine="Advanced Micro Devices X86-64" elf_data="little endian" ;;
    aarch64) gnu=aarch64-linux-gnu deb=arm64 oci=arm64 qemu=aarch64 elf_machine=AArch64 elf_data="little endian" ;;
    powerpc64le) gnu=powerpc64le-linux-gnu deb=ppc64el oci=ppc64le qemu=ppc64le elf_machine=PowerPC64 elf_data="little endian" ;;
    s390x) gnu=s390x-linux-gnu deb=s390x oci=s390x qemu=s390x elf_machine="IBM S/390" elf_data="big endian" ;;
    *) return 1 ;;
    esac
    triple="$1-unknown-linux-gnu"
}

arch_of_oci() {
    local a gnu deb oci qemu elf_machine elf_data triple
    for a in $ARCHES; do
        arch_facts "$a"
        [[ "$oci" != "$1" ]] || { echo "$a"; return 0; }
    done
    return 1
}
