// The libcni driver used by the end-to-end tests. It builds offline against
// Debian's golang-github-appc-cni-dev (libcni 1.1.2) through the replace
// below; nothing is vendored or downloaded. Build with ./build.sh.
module ib-sriov/tests/libcni-driver

go 1.19

require github.com/containernetworking/cni v1.1.2

replace github.com/containernetworking/cni => /usr/share/gocode/src/github.com/containernetworking/cni
