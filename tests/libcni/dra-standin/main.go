// dra-standin: a test-only stand-in for the CNI runtime of
// k8snetworkplumbingwg/dra-driver-sriov (the SR-IOV DRA driver, standalone mode),
// driving a plugin through Debian's libcni exactly as that driver does. Written here
// from the behaviour of dra-driver-sriov cd9404f0301e088653abb562df6ed8b106b097d6;
// no code of it is copied. What it reproduces (file names are the driver's):
//
//   - the network configuration is a NetworkAttachmentDefinition's spec.config;
//     a missing or empty "name" is set to the driver's name (pkg/cni/cni.go calls the
//     NAD client's GetCNIConfigFromSpec(config, DriverName); DriverName is
//     "sriovnetwork.k8snetworkplumbingwg.io", pkg/consts/consts.go);
//   - a top-level "deviceID" is set to the claimed VF's PCI address, replacing any
//     value the NAD had (pkg/types/types.go AddDeviceIDToNetConf, called from
//     pkg/devicestate/state.go applyConfigOnDevice);
//   - the configuration is loaded as ONE plugin (libcni NetworkPluginConfFromBytes in
//     libcni >= 1.2, whose libcni 1.1.2 name is ConfFromBytes): a conflist's
//     "plugins" are not run, so nothing is chained after the plugin;
//   - ADD and DEL are libcni AddNetwork / DelNetwork (not the *NetworkList forms) with
//     RuntimeConf{ContainerID: the pod sandbox ID, NetNS: the sandbox's netns path,
//     IfName: the claim's ifName (else a prefix and an index)} and exactly the Args
//     IgnoreUnknown=true, K8S_POD_NAMESPACE, K8S_POD_NAME,
//     K8S_POD_INFRA_CONTAINER_ID (= the sandbox ID), K8S_POD_UID, in that order, and
//     NO CapabilityArgs (so no runtimeConfig reaches the plugin) (pkg/cni/cni.go
//     AttachNetwork, DetachNetwork);
//   - DEL passes the netns path NRI reports for the sandbox even when that netns is
//     gone (pkg/nri/nri.go StopPodSandbox);
//   - the ADD result becomes the claim's NetworkDeviceData (pkg/cni/status.go
//     cniResultToNetworkData): the result converted to CNI 1.0.0, every ips[].address
//     in order, and the name and mac of the interface that has a sandbox (the last
//     such interface when there are several); printed here with the 1.0.0 result.
//
// Differences, all outside what the plugin sees: libcni 1.1.2 (Debian) instead of the
// driver's 1.3.0, so a cniVersion 1.1.0 result cannot be converted (the tests run the
// NAD at 1.0.0); the cache directory is LIBCNI_CACHE_DIR instead of /var/lib/cni; the
// plugin's stderr goes to ours, as the driver's RawExec{Stderr: os.Stderr} does.
//
// Usage:
//
//	dra-standin <add|del> <nad-config-file> <vf-pci-address> <netns-path> <sandbox-id> <ifname> <pod-namespace> <pod-name> <pod-uid>
//
// Environment: CNI_PATH (required), LIBCNI_CACHE_DIR (libcni's cache directory).
// add prints {"networkDeviceData": {...}, "result": {...}} on stdout. A failure
// prints the message on stderr, followed, for a plugin's CNI error object, by one
// line "cni-error: {json}"; the exit code is then 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/ioutil"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// driverName is dra-driver-sriov's driver name (pkg/consts/consts.go DriverName), the
// network name given to a NAD config without one.
const driverName = "sriovnetwork.k8snetworkplumbingwg.io"

// networkDeviceData has the JSON shape of Kubernetes resource.k8s.io/v1
// NetworkDeviceData (KEP-4817): interfaceName (at most 256 characters), ips (CIDR
// strings, at most 16), hardwareAddress (at most 128 characters).
type networkDeviceData struct {
	InterfaceName   string   `json:"interfaceName,omitempty"`
	IPs             []string `json:"ips,omitempty"`
	HardwareAddress string   `json:"hardwareAddress,omitempty"`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "dra-standin: %v\n", err)
		var cniErr *types.Error
		if errors.As(err, &cniErr) {
			b, _ := json.Marshal(cniErr)
			fmt.Fprintf(os.Stderr, "cni-error: %s\n", b)
		}
		os.Exit(1)
	}
}

// netConf is the NAD config with the name filled in and deviceID set, as the driver
// builds it before loading.
func netConf(nad []byte, pci string) ([]byte, error) {
	var raw map[string]interface{}
	if err := json.Unmarshal(nad, &raw); err != nil {
		return nil, fmt.Errorf("NAD config: %v", err)
	}
	if n, ok := raw["name"]; !ok || n == "" {
		raw["name"] = driverName
	}
	raw["deviceID"] = pci
	return json.Marshal(raw)
}

// toNetworkDeviceData is the claim status the driver derives from an ADD result.
func toNetworkDeviceData(res types.Result) (*networkDeviceData, *types100.Result, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, nil, fmt.Errorf("converting the result to 1.0.0: %v", err)
	}
	nd := &networkDeviceData{}
	for _, ip := range r.IPs {
		nd.IPs = append(nd.IPs, ip.Address.String())
	}
	for _, i := range r.Interfaces {
		if i.Sandbox != "" {
			nd.InterfaceName = i.Name
			nd.HardwareAddress = i.Mac
		}
	}
	return nd, r, nil
}

func run(args []string) error {
	if len(args) != 9 || (args[0] != "add" && args[0] != "del") {
		return fmt.Errorf("usage: dra-standin <add|del> <nad-config-file> <vf-pci-address> <netns-path> <sandbox-id> <ifname> <pod-namespace> <pod-name> <pod-uid>")
	}
	cmd, file, pci, netns, sandbox, ifname, ns, name, uid :=
		args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8]
	nad, err := ioutil.ReadFile(file)
	if err != nil {
		return err
	}
	raw, err := netConf(nad, pci)
	if err != nil {
		return err
	}
	conf, err := libcni.ConfFromBytes(raw)
	if err != nil {
		return fmt.Errorf("loading the plugin configuration: %v", err)
	}
	rt := &libcni.RuntimeConf{
		ContainerID: sandbox,
		NetNS:       netns,
		IfName:      ifname,
		Args: [][2]string{
			{"IgnoreUnknown", "true"},
			{"K8S_POD_NAMESPACE", ns},
			{"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", sandbox},
			{"K8S_POD_UID", uid},
		},
	}
	path := filepath.SplitList(os.Getenv("CNI_PATH"))
	if len(path) == 0 {
		return fmt.Errorf("CNI_PATH is not set")
	}
	var cninet *libcni.CNIConfig
	if d := os.Getenv("LIBCNI_CACHE_DIR"); d != "" {
		cninet = libcni.NewCNIConfigWithCacheDir(path, d, nil)
	} else {
		cninet = libcni.NewCNIConfig(path, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if cmd == "del" {
		return cninet.DelNetwork(ctx, conf, rt)
	}
	res, err := cninet.AddNetwork(ctx, conf, rt)
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("the plugin returned no result")
	}
	nd, r100, err := toNetworkDeviceData(res)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"networkDeviceData": nd,
		"result":            r100,
	})
}
