// libcni-driver: a small cnitool-like driver that runs CNI plugins through
// the reference Go library (libcni), the way container runtimes (containerd,
// CRI-O, Multus) do. The end-to-end tests use it to check that the plugin
// interoperates with the real client library rather than only with our own
// harness.
//
// It is built against Debian's golang-github-appc-cni-dev (libcni 1.1.2) from
// /usr/share/gocode; see build.sh. Nothing of libcni is vendored here.
//
// Usage:
//
//	libcni-driver [flags] <add|check|del> <conf-or-conflist> <netns> <containerID> <ifname> [CNI_ARGS]
//	libcni-driver [flags] <gc|status|validate> <conf-or-conflist> [<netns> <containerID> <ifname> [CNI_ARGS]]
//
// Flags (anywhere on the command line):
//
//	--cap KEY=VALUE       runtime capability argument with a string value
//	                      (e.g. --cap infinibandGUID=02:00:00:00:00:00:00:01,
//	                      --cap deviceID=0000:3b:00.2); repeatable
//	--cap-json KEY=JSON   runtime capability argument with a raw JSON value
//	--valid CID/IFNAME    gc: a still-valid attachment; repeatable
//	--no-valid-attachments
//	                      gc: omit the cni.dev/valid-attachments key entirely
//	--raw                 add: print the result in the version the plugin
//	                      replied in instead of converting it to the
//	                      configuration's cniVersion
//
// Environment:
//
//	CNI_PATH          plugin search path (':'-separated), required
//	LIBCNI_CACHE_DIR  libcni cache directory (default /var/lib/cni); results
//	                  are cached under <dir>/results/<net>-<cid>-<ifname>
//	LIBCNI_TIMEOUT    per-command timeout as a Go duration (default 60s)
//
// The netns argument "-" stands for an empty CNI_NETNS (DEL of a pod whose
// netns is already gone). CNI_ARGS is "K=V;K=V" (keys may repeat).
//
// Output: add prints the result JSON on stdout; every command exits 0 on
// success. On failure the message goes to stderr, followed, when the plugin
// returned a CNI error object, by one line "cni-error: {json}" so tests can
// match the error code; the exit code is then 1.
//
// libcni 1.1.2 has no GC or STATUS API (both came with libcni 1.2.0 / spec
// 1.1.0). The gc and status commands here follow libcni 1.2's
// GCNetworkList / GetStatusNetworkList: gc first issues DEL for every cached
// attachment of this network that is not listed as valid, then, for
// cniVersion >= 1.1.0, sends GC to every plugin of the list with
// "cni.dev/valid-attachments" (and the older spelling "cni.dev/attachments",
// which later libcni releases also send) injected; status sends STATUS to
// every plugin for cniVersion >= 1.1.0 and is a no-op below that. del (and
// gc's stale DELs) also take libcni 1.2's tolerance of a cached result that
// cannot be converted to the configuration's version (see delNetworkList).
// add records the netns in libcni's cache entry as libcni 1.2 does.
//
// Limitation: libcni 1.1.2 has no 1.1.0 result type, so add only works with
// cniVersion <= 1.0.0: an ADD at 1.1.0 fails in the library with
// `unsupported CNI result version "1.1.0"` after the plugin succeeded (no
// cache entry is written). check/del at 1.1.0 then run without prevResult.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/ioutil"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

const usage = `usage: libcni-driver [--cap K=V]... [--cap-json K=JSON]... [--valid CID/IF]... [--no-valid-attachments] [--raw]
       <add|check|del> <conf-or-conflist> <netns|-> <containerID> <ifname> [CNI_ARGS]
       <gc|status|validate> <conf-or-conflist> [<netns|-> <containerID> <ifname> [CNI_ARGS]]`

// gcAttachment mirrors types.GCAttachment of libcni >= 1.2 (absent in 1.1.2).
type gcAttachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

type options struct {
	caps        map[string]interface{}
	valid       []gcAttachment
	noValidKey  bool
	raw         bool
	positional  []string
	cacheDir    string
	explicitDir bool
	cniPath     []string
	timeout     time.Duration
}

func main() {
	opts, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := run(opts); err != nil {
		fail(opts.positional[0], err)
	}
}

func fail(cmd string, err error) {
	fmt.Fprintf(os.Stderr, "libcni-driver %s: %v\n", cmd, err)
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		b, _ := json.Marshal(cniErr)
		fmt.Fprintf(os.Stderr, "cni-error: %s\n", b)
	}
	os.Exit(1)
}

func parseArgs(args []string) (*options, error) {
	o := &options{caps: map[string]interface{}{}, timeout: 60 * time.Second}
	next := func(i *int, flag string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("flag %s needs a value", flag)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		flag, val, hasVal := a, "", false
		if strings.HasPrefix(a, "--") {
			if k := strings.IndexByte(a, '='); k > 0 {
				flag, val, hasVal = a[:k], a[k+1:], true
			}
		}
		var err error
		switch flag {
		case "--cap", "--cap-json":
			if !hasVal {
				if val, err = next(&i, flag); err != nil {
					return nil, err
				}
			}
			k := strings.IndexByte(val, '=')
			if k <= 0 {
				return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, val)
			}
			key, v := val[:k], val[k+1:]
			if flag == "--cap" {
				o.caps[key] = v
			} else {
				var j interface{}
				if err := json.Unmarshal([]byte(v), &j); err != nil {
					return nil, fmt.Errorf("--cap-json %s: %v", key, err)
				}
				o.caps[key] = j
			}
		case "--valid":
			if !hasVal {
				if val, err = next(&i, flag); err != nil {
					return nil, err
				}
			}
			k := strings.LastIndexByte(val, '/')
			if k <= 0 || k == len(val)-1 {
				return nil, fmt.Errorf("--valid %q: want CONTAINERID/IFNAME", val)
			}
			o.valid = append(o.valid, gcAttachment{ContainerID: val[:k], IfName: val[k+1:]})
		case "--no-valid-attachments":
			o.noValidKey = true
		case "--raw":
			o.raw = true
		case "-h", "--help":
			fmt.Println(usage)
			os.Exit(0)
		default:
			if strings.HasPrefix(a, "--") {
				return nil, fmt.Errorf("unknown flag %q", a)
			}
			o.positional = append(o.positional, a)
		}
	}
	if len(o.positional) < 2 {
		return nil, fmt.Errorf("missing command or configuration file")
	}
	switch o.positional[0] {
	case "add", "check", "del":
		if len(o.positional) < 5 || len(o.positional) > 6 {
			return nil, fmt.Errorf("%s needs <conf> <netns> <containerID> <ifname> [CNI_ARGS]", o.positional[0])
		}
	case "gc", "status", "validate":
		if len(o.positional) > 6 {
			return nil, fmt.Errorf("too many arguments")
		}
	default:
		return nil, fmt.Errorf("unknown command %q", o.positional[0])
	}
	o.cniPath = filepath.SplitList(os.Getenv("CNI_PATH"))
	if len(o.cniPath) == 0 {
		return nil, fmt.Errorf("CNI_PATH is not set")
	}
	if d := os.Getenv("LIBCNI_CACHE_DIR"); d != "" {
		o.cacheDir, o.explicitDir = d, true
	} else {
		o.cacheDir = libcni.CacheDir
	}
	if t := os.Getenv("LIBCNI_TIMEOUT"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil {
			return nil, fmt.Errorf("LIBCNI_TIMEOUT: %v", err)
		}
		o.timeout = d
	}
	return o, nil
}

// parseCNIArgs turns "K=V;K=V" into libcni's [][2]string, keeping order and
// duplicates (Multus repeats IgnoreUnknown).
func parseCNIArgs(s string) ([][2]string, error) {
	var out [][2]string
	if s == "" {
		return nil, nil
	}
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k := strings.IndexByte(kv, '=')
		if k <= 0 {
			return nil, fmt.Errorf("invalid CNI_ARGS pair %q", kv)
		}
		out = append(out, [2]string{kv[:k], kv[k+1:]})
	}
	return out, nil
}

// loadList reads a .conflist, or a single plugin .conf wrapped as a list.
func loadList(path string) (*libcni.NetworkConfigList, error) {
	data, err := ioutil.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if _, isList := probe["plugins"]; isList {
		return libcni.ConfListFromFile(path)
	}
	conf, err := libcni.ConfFromFile(path)
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromConf(conf)
}

func run(o *options) error {
	cmd := o.positional[0]
	list, err := loadList(o.positional[1])
	if err != nil {
		return err
	}
	rt := &libcni.RuntimeConf{CapabilityArgs: o.caps}
	if len(o.positional) > 2 && o.positional[2] != "-" {
		rt.NetNS = o.positional[2]
	}
	if len(o.positional) > 3 {
		rt.ContainerID = o.positional[3]
	}
	if len(o.positional) > 4 {
		rt.IfName = o.positional[4]
	}
	if len(o.positional) > 5 {
		if rt.Args, err = parseCNIArgs(o.positional[5]); err != nil {
			return err
		}
	}

	var cninet *libcni.CNIConfig
	if o.explicitDir {
		cninet = libcni.NewCNIConfigWithCacheDir(o.cniPath, o.cacheDir, nil)
	} else {
		cninet = libcni.NewCNIConfig(o.cniPath, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	switch cmd {
	case "add":
		result, err := cninet.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		recordNetNS(o.cacheDir, list.Name, rt)
		if !o.raw {
			if result, err = result.GetAsVersion(list.CNIVersion); err != nil {
				return fmt.Errorf("converting result to %s: %w", list.CNIVersion, err)
			}
		}
		if err := result.PrintTo(os.Stdout); err != nil {
			return err
		}
		fmt.Println()
		return nil
	case "check":
		return cninet.CheckNetworkList(ctx, list, rt)
	case "del":
		return delNetworkList(ctx, cninet, o.cacheDir, list, rt)
	case "gc":
		return gcNetworkList(ctx, cninet, o, list)
	case "status":
		return statusNetworkList(ctx, cninet, list)
	case "validate":
		caps, err := cninet.ValidateNetworkList(ctx, list)
		if err != nil {
			return err
		}
		if caps == nil {
			caps = []string{}
		}
		return json.NewEncoder(os.Stdout).Encode(map[string]interface{}{"capabilities": caps})
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// recordNetNS adds the "netns" key that libcni >= 1.2 keeps in its cache
// entries (1.1.2 does not), so that gc can hand the netns to stale DELs as
// libcni 1.2 does. libcni 1.1.2 ignores the unknown key when reading.
func recordNetNS(cacheDir, netName string, rt *libcni.RuntimeConf) {
	fname := cacheFile(cacheDir, netName, rt)
	data, err := ioutil.ReadFile(fname)
	if err != nil {
		return
	}
	var m map[string]interface{}
	if json.Unmarshal(data, &m) != nil {
		return
	}
	m["netns"] = rt.NetNS
	if out, err := json.Marshal(m); err == nil {
		_ = ioutil.WriteFile(fname, out, 0600)
	}
}

// delNetworkList is DelNetworkList with libcni 1.2's tolerance of an unusable
// cached result: 1.1.2 aborts the DEL when the cached result cannot be
// converted to the configuration's cniVersion (e.g. an ADD cached at 1.0.0 and
// a DEL or GC sent with a 1.1.0 configuration); 1.2 drops the cache entry and
// sends the DEL without prevResult. We do the same by removing the entry and
// retrying once.
func delNetworkList(ctx context.Context, cninet *libcni.CNIConfig, cacheDir string,
	list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	err := cninet.DelNetworkList(ctx, list, rt)
	if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("failed to get network %q cached result", list.Name)) {
		return err
	}
	fmt.Fprintf(os.Stderr, "libcni-driver: %v; dropping the cache entry and retrying without prevResult (libcni 1.2 behaviour)\n", err)
	_ = os.Remove(cacheFile(cacheDir, list.Name, rt))
	return cninet.DelNetworkList(ctx, list, rt)
}

func cacheFile(cacheDir, netName string, rt *libcni.RuntimeConf) string {
	return filepath.Join(cacheDir, "results", fmt.Sprintf("%s-%s-%s", netName, rt.ContainerID, rt.IfName))
}

type cachedAttachment struct {
	Kind           string                 `json:"kind"`
	ContainerID    string                 `json:"containerId"`
	IfName         string                 `json:"ifName"`
	NetworkName    string                 `json:"networkName"`
	NetNS          string                 `json:"netns"`
	CniArgs        [][2]string            `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]interface{} `json:"capabilityArgs,omitempty"`
}

func cachedAttachments(cacheDir, netName string) ([]cachedAttachment, error) {
	dir := filepath.Join(cacheDir, "results")
	entries, err := ioutil.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []cachedAttachment
	for _, e := range entries {
		if !e.Mode().IsRegular() || !strings.HasPrefix(e.Name(), netName+"-") {
			continue
		}
		data, err := ioutil.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var a cachedAttachment
		if json.Unmarshal(data, &a) != nil || a.Kind != libcni.CNICacheV1 || a.NetworkName != netName {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

func versionAtLeast(v, min string) bool {
	ok, err := version.GreaterThanOrEqualTo(v, min)
	return err == nil && ok
}

func injectAndExec(ctx context.Context, cninet *libcni.CNIConfig, plugin *libcni.NetworkConfig,
	inject map[string]interface{}, command string) error {
	conf, err := libcni.InjectConf(plugin, inject)
	if err != nil {
		return fmt.Errorf("building %s configuration for plugin %s: %w", command, plugin.Network.Type, err)
	}
	pluginPath, err := invoke.FindInPath(plugin.Network.Type, cninet.Path)
	if err != nil {
		return err
	}
	args := &invoke.Args{Command: command, Path: strings.Join(cninet.Path, string(os.PathListSeparator))}
	if err := invoke.ExecPluginWithoutResult(ctx, pluginPath, conf.Bytes, args, nil); err != nil {
		return fmt.Errorf("plugin type=%q failed (%s): %w", plugin.Network.Type, strings.ToLower(command), err)
	}
	return nil
}

// gcNetworkList follows libcni 1.2's GCNetworkList (see the package comment).
func gcNetworkList(ctx context.Context, cninet *libcni.CNIConfig, o *options, list *libcni.NetworkConfigList) error {
	var errs []string
	var firstErr error
	note := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
		errs = append(errs, err.Error())
	}
	valid := map[gcAttachment]bool{}
	for _, a := range o.valid {
		valid[a] = true
	}
	cached, err := cachedAttachments(o.cacheDir, list.Name)
	if err != nil {
		return err
	}
	for _, a := range cached {
		if valid[gcAttachment{a.ContainerID, a.IfName}] {
			continue
		}
		rt := &libcni.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName,
			Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs}
		if err := delNetworkList(ctx, cninet, o.cacheDir, list, rt); err != nil {
			note(fmt.Errorf("failed to delete stale attachment %s %s: %w", a.ContainerID, a.IfName, err))
		}
	}
	if versionAtLeast(list.CNIVersion, "1.1.0") {
		inject := map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion}
		if !o.noValidKey {
			attachments := o.valid
			if attachments == nil {
				attachments = []gcAttachment{}
			}
			inject["cni.dev/valid-attachments"] = attachments
			inject["cni.dev/attachments"] = attachments
		}
		for _, p := range list.Plugins {
			if err := injectAndExec(ctx, cninet, p, inject, "GC"); err != nil {
				note(err)
			}
		}
	} else {
		fmt.Fprintf(os.Stderr, "libcni-driver gc: cniVersion %q < 1.1.0: no GC sent to plugins\n", list.CNIVersion)
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return firstErr
	default:
		// keep the first error wrapped so a CNI error code stays visible
		return fmt.Errorf("%w (and: %s)", firstErr, strings.Join(errs[1:], "; "))
	}
}

// statusNetworkList follows libcni 1.2's GetStatusNetworkList.
func statusNetworkList(ctx context.Context, cninet *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
	if !versionAtLeast(list.CNIVersion, "1.1.0") {
		fmt.Fprintf(os.Stderr, "libcni-driver status: cniVersion %q < 1.1.0: no STATUS sent\n", list.CNIVersion)
		return nil
	}
	inject := map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion}
	for _, p := range list.Plugins {
		if err := injectAndExec(ctx, cninet, p, inject, "STATUS"); err != nil {
			return err
		}
	}
	return nil
}
