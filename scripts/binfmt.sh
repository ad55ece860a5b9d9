# Sourced by cross-check.sh and image-test.sh: `binfmt_register QEMU_ARCH` makes the
# kernel run that architecture's ELF executables through Debian's qemu-user (package
# qemu-user-binfmt, pulled in by qemu-user-static; scripts/deps.sh cross-ARCH installs
# it). binfmt_misc is mounted if a fresh VM has not (Documentation/admin-guide/
# binfmt-misc.rst), and the handler /usr/lib/binfmt.d/qemu-QEMU_ARCH.conf registered with
# systemd-binfmt, as Debian does at boot. Its flags include F (the interpreter, a
# static-pie qemu, is opened at registration), so the handler also works inside a
# container's mount namespace: `podman run --arch` relies on that.
#
#   QEMU_ARCH: aarch64, ppc64le, s390x (qemu's names)
#
# Returns non-zero, with a message on stderr, when the handler cannot be registered.
binfmt_register() {
    local qarch="$1" conf="/usr/lib/binfmt.d/qemu-$1.conf" entry="/proc/sys/fs/binfmt_misc/qemu-$1"
    if ! mountpoint -q /proc/sys/fs/binfmt_misc &&
        ! mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; then
        echo "binfmt: cannot mount binfmt_misc" >&2
        return 1
    fi
    [[ -r "$conf" ]] || { echo "binfmt: no $conf (scripts/deps.sh cross-ARCH installs qemu-user-static)" >&2; return 1; }
    [[ -e "$entry" ]] || /usr/lib/systemd/systemd-binfmt "$conf" || {
        echo "binfmt: systemd-binfmt $conf failed" >&2
        return 1
    }
    [[ "$(head -n1 "$entry")" == enabled ]] || echo 1 >"$entry"
    grep -q '^flags: .*F' "$entry" || { echo "binfmt: $entry lacks the F flag: $(grep flags "$entry")" >&2; return 1; }
}
