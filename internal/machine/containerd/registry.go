package containerd

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// registryHostsDir is where Run writes the hosts.toml of Config.RegistryMirrors,
// one directory per registry (containerd's config_path layout).
func registryHostsDir(stateDir string) string { return filepath.Join(stateDir, "certs.d") }

// validMirrors checks Config.RegistryMirrors: each key a registry host as
// image references name it (no scheme, no path), each value an http or https
// URL with a host and nothing after the path.
func validMirrors(mirrors map[string]string) error {
	for _, reg := range slices.Sorted(maps.Keys(mirrors)) {
		if reg == "" || reg == "." || reg == ".." || strings.ContainsAny(reg, "/\\ \t\n\"") {
			return fmt.Errorf("containerd: registryMirrors: registry %q: want a host as an image reference names it, e.g. registry.k8s.io or localhost:5000", reg)
		}
		u, err := url.Parse(mirrors[reg])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil ||
			strings.ContainsAny(mirrors[reg], "\"\\\n") {
			return fmt.Errorf("containerd: registryMirrors[%q]: mirror %q: want an http or https URL such as http://127.0.0.1:5000", reg, mirrors[reg])
		}
	}
	return nil
}

// hostsTOML is the hosts.toml that sends every pull from a registry to
// mirror, and nowhere else: the mirror is both the host tried first and the
// server, so an image the mirror lacks fails at once instead of reaching out
// to the registry itself.
func hostsTOML(registry, mirror string) string {
	return fmt.Sprintf(`# Written by nodekeeper: pulls of %s images go to %s only.
server = %q

[host.%q]
  capabilities = ["pull", "resolve"]
`, registry, mirror, mirror, mirror)
}

// writeRegistryHosts makes dir hold exactly one <registry>/hosts.toml per
// entry of mirrors: what an earlier Run wrote for other registries is
// removed. With no mirrors, dir is removed.
func writeRegistryHosts(dir string, mirrors map[string]string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("containerd: registry hosts: %w", err)
	}
	for reg, mirror := range mirrors {
		d := filepath.Join(dir, reg)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("containerd: registry hosts: %w", err)
		}
		if err := writeFileAtomic(filepath.Join(d, "hosts.toml"), []byte(hostsTOML(reg, mirror))); err != nil {
			return fmt.Errorf("containerd: registry hosts: %w", err)
		}
	}
	return nil
}
