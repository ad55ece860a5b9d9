// rdma-standin: a test-only stand-in for rdma-cni, the RDMA device meta plugin the
// SR-IOV network operator ships and that its users chain after ib-sriov
// (`metaPlugins: {"type": "rdma"}`). The real-kernel lab (tests/real_kernel/ib.rs,
// the rdma_chain cases) installs it as `rdma` in CNI_PATH and runs it through libcni
// after ib-sriov. Written here from the behaviour of
// k8snetworkplumbingwg/rdma-cni 449bfbc7b26ea0cf9636e925b2c064b6358927b1; no code of
// it is copied. What it does, as rdma-cni does (file names are rdma-cni's):
//
// ADD (cmd/rdma/main.go CmdAdd):
//   - a configuration without prevResult is refused: "RDMA-CNI is expected to be
//     called as part of a plugin chain";
//   - the RDMA netns mode must be exclusive (RDMA_NLDEV_CMD_SYS_GET, as
//     netlink.RdmaSystemGetNetnsMode in pkg/rdma/rdma_ops.go), else "RDMA subsystem
//     namespace awareness mode is set to shared, expecting it to be set to exclusive,
//     invalid system configurations";
//   - the RDMA device is looked up by deviceID under
//     /sys/bus/pci/devices/<deviceID>/infiniband (getRDMADevice, through
//     Mellanox/rdmamap GetRdmaDevicesForPcidev, rdma_map.go): none is "no RDMA devices
//     found", more than one is "discovered more than one RDMA device [...]. Unsupported
//     state", each wrapped in "failed to get RDMA device for device ID <id>: ...";
//   - the device is found by name in an RDMA netlink dump and moved into CNI_NETNS with
//     RDMA_NLDEV_CMD_SET + RDMA_NLDEV_NET_NS_FD (pkg/rdma/rdma.go MoveRdmaDevToNs:
//     netlink.RdmaLinkByName, netlink.RdmaLinkSetNsFd);
//   - its state is saved as <cacheDir>/<network>-<containerID>-<ifname>, JSON
//     {"version":"1.0","deviceID","sandboxRdmaDevName","containerRdmaDevName"}
//     (pkg/cache/cache.go, pkg/types/types.go); a failed save moves the device back;
//   - the result is prevResult, printed in the configuration's cniVersion.
//
// DEL (CmdDel): an empty CNI_NETNS does nothing; a missing state file does nothing
// (logged); else the device is moved back from inside the pod netns to the plugin's
// own netns and the state file removed. CHECK does nothing.
//
// Not reproduced: deriving deviceID from prevResult's MAC when the configuration has
// none (Multus always sets deviceID; here that case is the error rdma-cni gives when
// it cannot derive one), auxiliary (non-PCI) device IDs, zerolog's log format.
//
// Test-only setting: RDMA_STANDIN_CACHE_DIR replaces the state directory
// /var/lib/cni/rdma (the lab guest sees the host's /var/lib read-only).
//
// The RDMA netlink facts (include/uapi/rdma/rdma_netlink.h, the same values as
// src/rdma/codec.rs): NETLINK_RDMA 20, client RDMA_NL_NLDEV 5, message type
// (5 << 10) + op, RDMA_NLDEV_CMD_GET 1, _SET 2, _SYS_GET 6; attributes DEV_INDEX 1
// (u32), DEV_NAME 2 (string), SYS_ATTR_NETNS_MODE 66 (u8, 0 exclusive), NET_NS_FD 68
// (u32); no family header after nlmsghdr.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

func init() {
	// Namespace switches are per OS thread.
	runtime.LockOSThread()
}

const (
	netlinkRDMA      = 20
	rdmaNLNLDEV      = 5
	cmdGet           = 1
	cmdSet           = 2
	cmdSysGet        = 6
	attrDevIndex     = 1
	attrDevName      = 2
	attrSysNetnsMode = 66
	attrNetNsFD      = 68
	pciDevDir        = "/sys/bus/pci/devices"
	defaultCacheDir  = "/var/lib/cni/rdma"
)

// netConf is the part of the configuration rdma-cni reads.
type netConf struct {
	types.NetConf
	DeviceID string `json:"deviceID"`
}

// state is what ADD saves for DEL.
type state struct {
	Version              string `json:"version"`
	DeviceID             string `json:"deviceID"`
	SandboxRdmaDevName   string `json:"sandboxRdmaDevName"`
	ContainerRdmaDevName string `json:"containerRdmaDevName"`
}

func logf(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "rdma-standin: "+format+"\n", a...)
}

func cacheDir() string {
	if d := os.Getenv("RDMA_STANDIN_CACHE_DIR"); d != "" {
		return d
	}
	return defaultCacheDir
}

func statePath(network, cid, ifname string) string {
	return filepath.Join(cacheDir(), strings.Join([]string{network, cid, ifname}, "-"))
}

// ---------------------------------------------------------------- RDMA netlink

type nlConn struct {
	fd  int
	seq uint32
}

func dial() (*nlConn, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkRDMA)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_NETLINK, NETLINK_RDMA): %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind NETLINK_RDMA: %w", err)
	}
	return &nlConn{fd: fd}, nil
}

func (c *nlConn) close() { syscall.Close(c.fd) }

func attrU32(typ uint16, v uint32) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint16(b[0:], 8)
	binary.LittleEndian.PutUint16(b[2:], typ)
	binary.LittleEndian.PutUint32(b[4:], v)
	return b
}

// parseAttrs returns the attributes of one message payload by type.
func parseAttrs(b []byte) map[uint16][]byte {
	out := map[uint16][]byte{}
	for len(b) >= 4 {
		l := int(binary.LittleEndian.Uint16(b[0:]))
		t := binary.LittleEndian.Uint16(b[2:]) & 0x3fff
		if l < 4 || l > len(b) {
			break
		}
		out[t] = b[4:l]
		al := (l + 3) &^ 3
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return out
}

// request sends one RDMA_NL_NLDEV request and returns the payloads of its replies
// (until NLMSG_DONE for a dump, or the ack).
func (c *nlConn) request(op uint16, flags uint16, attrs ...[]byte) ([][]byte, error) {
	c.seq++
	body := []byte{}
	for _, a := range attrs {
		body = append(body, a...)
	}
	msg := make([]byte, 16, 16+len(body))
	binary.LittleEndian.PutUint32(msg[0:], uint32(16+len(body)))
	binary.LittleEndian.PutUint16(msg[4:], rdmaNLNLDEV<<10+op)
	binary.LittleEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK|flags)
	binary.LittleEndian.PutUint32(msg[8:], c.seq)
	msg = append(msg, body...)
	if err := syscall.Sendto(c.fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return nil, err
	}
	var replies [][]byte
	buf := make([]byte, 1<<16)
	for {
		n, _, err := syscall.Recvfrom(c.fd, buf, 0)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != c.seq {
				continue
			}
			switch m.Header.Type {
			case syscall.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short NLMSG_ERROR")
				}
				if e := int32(binary.LittleEndian.Uint32(m.Data)); e != 0 {
					return nil, syscall.Errno(-e)
				}
				return replies, nil
			case syscall.NLMSG_DONE:
				return replies, nil
			default:
				// A copy: the next datagram is read into the same buffer.
				replies = append(replies, append([]byte(nil), m.Data...))
			}
		}
	}
}

func netnsMode() (string, error) {
	c, err := dial()
	if err != nil {
		return "", err
	}
	defer c.close()
	replies, err := c.request(cmdSysGet, 0)
	if err != nil {
		return "", err
	}
	for _, r := range replies {
		if v, ok := parseAttrs(r)[attrSysNetnsMode]; ok && len(v) >= 1 {
			if v[0] == 0 {
				return "exclusive", nil
			}
			return "shared", nil
		}
	}
	return "", errors.New("no RDMA_NLDEV_SYS_ATTR_NETNS_MODE in the reply")
}

// linkIndexByName finds RDMA device `name` in a dump of the current netns.
func linkIndexByName(c *nlConn, name string) (uint32, error) {
	replies, err := c.request(cmdGet, syscall.NLM_F_DUMP)
	if err != nil {
		return 0, err
	}
	for _, r := range replies {
		a := parseAttrs(r)
		if strings.TrimRight(string(a[attrDevName]), "\x00") == name && len(a[attrDevIndex]) == 4 {
			return binary.LittleEndian.Uint32(a[attrDevIndex]), nil
		}
	}
	return 0, fmt.Errorf("no RDMA device %q", name)
}

// moveToNs moves RDMA device `name`, looked up in the current netns, to the netns of
// `nsFd` (rdma-cni pkg/rdma/rdma.go MoveRdmaDevToNs, with its error texts).
func moveToNs(name string, nsFd int) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.close()
	idx, err := linkIndexByName(c, name)
	if err != nil {
		return fmt.Errorf("cannot find RDMA link from name: %s", name)
	}
	if _, err := c.request(cmdSet, 0, attrU32(attrDevIndex, idx), attrU32(attrNetNsFD, uint32(nsFd))); err != nil {
		return fmt.Errorf("failed to move RDMA dev %s to namespace. %v", name, err)
	}
	return nil
}

// inNetns runs f on this (locked) thread inside the netns at `path`, then returns.
func inNetns(path string, f func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("failed to open network namespace %s: %v", path, err)
	}
	defer target.Close()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
	if err != nil {
		return err
	}
	defer self.Close()
	if err := setns(int(target.Fd())); err != nil {
		return err
	}
	ferr := f()
	if err := setns(int(self.Fd())); err != nil {
		panic(fmt.Sprintf("cannot return to the plugin's netns: %v", err))
	}
	return ferr
}

// sysSetns is setns(2)'s number on x86-64 (arch/x86/entry/syscalls/syscall_64.tbl),
// which Go's syscall package does not name; the lab guest is x86-64.
const sysSetns = 308

func setns(fd int) error {
	_, _, e := syscall.Syscall(sysSetns, uintptr(fd), syscall.CLONE_NEWNET, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ---------------------------------------------------------------- CNI verbs

func parseConf(data []byte) (*netConf, error) {
	conf := &netConf{}
	if err := json.Unmarshal(data, conf); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %+v", err)
	}
	return conf, nil
}

// rdmaDevices lists /sys/bus/pci/devices/<pci>/infiniband, as rdmamap does.
func rdmaDevices(pci string) []string {
	entries, err := os.ReadDir(filepath.Join(pciDevDir, pci, "infiniband"))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func getRDMADevice(deviceID string) (string, error) {
	devs := rdmaDevices(deviceID)
	if len(devs) == 0 {
		return "", errors.New("no RDMA devices found")
	}
	if len(devs) != 1 {
		return "", fmt.Errorf("discovered more than one RDMA device %v. Unsupported state", devs)
	}
	return devs[0], nil
}

func cmdAdd(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if conf.RawPrevResult == nil {
		return errors.New("RDMA-CNI is expected to be called as part of a plugin chain")
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return err
	}
	result, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return err
	}
	mode, err := netnsMode()
	if err != nil {
		return fmt.Errorf("failed to get RDMA subsystem namespace awareness mode. %v", err)
	}
	if mode != "exclusive" {
		return fmt.Errorf("RDMA subsystem namespace awareness mode is set to %s, "+
			"expecting it to be set to exclusive, invalid system configurations", mode)
	}
	if conf.DeviceID == "" {
		return errors.New("\"DeviceID\" network configuration attribute is required for rdma CNI")
	}
	dev, err := getRDMADevice(conf.DeviceID)
	if err != nil {
		return fmt.Errorf("failed to get RDMA device for device ID %s: %w", conf.DeviceID, err)
	}
	target, err := os.Open(args.Netns)
	if err != nil {
		return fmt.Errorf("failed to move RDMA device %s to namespace. failed to open network namespace %s: %v", dev, args.Netns, err)
	}
	err = moveToNs(dev, int(target.Fd()))
	target.Close()
	if err != nil {
		return fmt.Errorf("failed to move RDMA device %s to namespace. failed to move RDMA device %s to namespace. %v", dev, dev, err)
	}
	logf("ADD: moved RDMA device %s (deviceID %s) into %s", dev, conf.DeviceID, args.Netns)
	st := state{Version: "1.0", DeviceID: conf.DeviceID, SandboxRdmaDevName: dev, ContainerRdmaDevName: dev}
	b, _ := json.Marshal(st)
	p := statePath(conf.Name, args.ContainerID, args.IfName)
	if err := os.MkdirAll(cacheDir(), 0o700); err == nil {
		err = os.WriteFile(p, b, 0o600)
	}
	if err != nil {
		if rerr := moveBack(dev, args.Netns); rerr != nil {
			return fmt.Errorf("save to cache failed %v, failed while restoring namespace for RDMA device %s. %v", err, dev, rerr)
		}
		return err
	}
	return types.PrintResult(result, conf.CNIVersion)
}

// moveBack moves `dev` from the netns at `nsPath` to the plugin's own netns.
func moveBack(dev, nsPath string) error {
	host, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
	if err != nil {
		return fmt.Errorf("failed to open current network namespace: %v", err)
	}
	defer host.Close()
	if err := inNetns(nsPath, func() error { return moveToNs(dev, int(host.Fd())) }); err != nil {
		return fmt.Errorf("failed to move RDMA device %s to default namespace. %v", dev, err)
	}
	return nil
}

func cmdDel(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if args.Netns == "" {
		return nil
	}
	p := statePath(conf.Name, args.ContainerID, args.IfName)
	b, err := os.ReadFile(p)
	var st state
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		logf("DEL: failed to load cache entry(%q). it may have been deleted by a previous CMD_DEL call. %v", p, err)
		return nil
	}
	if err := moveBack(st.ContainerRdmaDevName, args.Netns); err != nil {
		return fmt.Errorf("failed to restore RDMA device %s to default namespace. %v", st.ContainerRdmaDevName, err)
	}
	logf("DEL: moved RDMA device %s back from %s", st.ContainerRdmaDevName, args.Netns)
	if err := os.Remove(p); err != nil {
		logf("DEL: failed to delete cache entry(%q). %v", p, err)
	}
	return nil
}

func cmdCheck(_ *skel.CmdArgs) error { return nil }

func main() {
	skel.PluginMain(cmdAdd, cmdCheck, cmdDel, version.All, "rdma-standin (test-only stand-in of rdma-cni)")
}
