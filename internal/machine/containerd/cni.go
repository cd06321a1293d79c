package containerd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultNetworkName is the CNI network's name when CNIOptions.Name is empty.
const DefaultNetworkName = "nodekeeper"

// CNIConfigFile is the name WriteCNIConfig gives its conflist.
const CNIConfigFile = "10-nodekeeper.conflist"

// cniConfigExts are the extensions libcni loads configs from.
var cniConfigExts = []string{".conf", ".conflist", ".json"}

// CNIOptions tune WriteCNIConfig. The zero value is valid.
type CNIOptions struct {
	// Bridge is the bridge's name (DefaultBridge if "").
	Bridge string
	// Name is the network's name (DefaultNetworkName if ""); host-local keeps
	// its allocations in DataDir/Name.
	Name string
	// DataDir is host-local's state directory ("": its default,
	// /var/lib/cni/networks).
	DataDir string
}

// WriteCNIConfig writes a CNI conflist for the pod network into dir as
// CNIConfigFile, unless dir holds another config (*.conf, *.conflist or
// *.json): someone chose their own network and it is left alone. When the
// only config is CNIConfigFile it is rewritten if it differs (a changed
// podCIDR or bridge takes effect for new pods). The network is a bridge (gateway on
// the bridge, masquerade for traffic leaving podCIDR) with host-local IPAM
// allocating from podCIDR, then portmap for hostPort. It has no loopback
// plugin: containerd's CRI plugin sets up lo itself (its loopback network is
// built in and needs only the loopback binary in bin_dir). It reports whether
// it wrote the file; dir is created if missing. A bad podCIDR is an error
// naming the field podCIDR and the value.
func WriteCNIConfig(dir, podCIDR string, opts CNIOptions) (written bool, err error) {
	cidr, err := ParsePodCIDR(podCIDR)
	if err != nil {
		return false, err
	}
	if opts.Bridge == "" {
		opts.Bridge = DefaultBridge
	}
	if err := validBridge(opts.Bridge); err != nil {
		return false, err
	}
	if opts.Name == "" {
		opts.Name = DefaultNetworkName
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("cni conf dir: %w", err)
	}
	b, err := json.MarshalIndent(cniConfig(cidr.String(), opts), "", "  ")
	if err != nil {
		return false, err
	}
	b = append(b, '\n')
	path := filepath.Join(dir, CNIConfigFile)
	existing, err := cniConfigs(dir)
	if err != nil {
		return false, err
	}
	switch {
	case len(existing) == 0:
	case len(existing) == 1 && existing[0] == CNIConfigFile:
		// Our own file: follow a changed podCIDR or bridge.
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
			return false, nil
		}
	default:
		return false, nil
	}
	if err := writeFileAtomic(path, b); err != nil {
		return false, fmt.Errorf("cni config: %w", err)
	}
	return true, nil
}

// cniConfigs lists the CNI config files in dir.
func cniConfigs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cni conf dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(cniConfigExts, filepath.Ext(e.Name())) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// The conflist's shape, in the order people read it.
type (
	conflist struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []any  `json:"plugins"`
	}
	bridgePlugin struct {
		Type        string `json:"type"`
		Bridge      string `json:"bridge"`
		IsGateway   bool   `json:"isGateway"`
		IPMasq      bool   `json:"ipMasq"`
		HairpinMode bool   `json:"hairpinMode"`
		IPAM        ipam   `json:"ipam"`
	}
	ipam struct {
		Type    string                `json:"type"`
		Ranges  [][]map[string]string `json:"ranges"`
		Routes  []map[string]string   `json:"routes"`
		DataDir string                `json:"dataDir,omitempty"`
	}
	portmapPlugin struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities"`
	}
)

// cniConfig is the conflist: bridge + host-local, portmap.
func cniConfig(subnet string, opts CNIOptions) conflist {
	return conflist{
		CNIVersion: "0.4.0",
		Name:       opts.Name,
		Plugins: []any{
			bridgePlugin{
				Type: "bridge", Bridge: opts.Bridge, IsGateway: true, IPMasq: true, HairpinMode: true,
				IPAM: ipam{
					Type:    "host-local",
					Ranges:  [][]map[string]string{{{"subnet": subnet}}},
					Routes:  []map[string]string{{"dst": "0.0.0.0/0"}},
					DataDir: opts.DataDir,
				},
			},
			portmapPlugin{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
		},
	}
}

// cniBinDir returns the single bin_dir containerd 1.6 takes: the one
// directory found, or, with several, <stateDir>/cni/bin holding a symlink to
// each plugin (from the first directory that has it). With none it returns
// an empty <stateDir>/cni/bin: host-network pods still run.
func cniBinDir(stateDir string, dirs []string) (string, error) {
	if len(dirs) == 1 {
		return dirs[0], nil
	}
	farm := filepath.Join(stateDir, "cni", "bin")
	if err := os.RemoveAll(farm); err != nil {
		return "", fmt.Errorf("cni bin dir: %w", err)
	}
	if err := os.MkdirAll(farm, 0o755); err != nil {
		return "", fmt.Errorf("cni bin dir: %w", err)
	}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			return "", fmt.Errorf("cni bin dir: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			err := os.Symlink(filepath.Join(d, e.Name()), filepath.Join(farm, e.Name()))
			if err != nil && !errors.Is(err, os.ErrExist) {
				return "", fmt.Errorf("cni bin dir: %w", err)
			}
		}
	}
	return farm, nil
}
