// Package kubebuild names the builds of Kubernetes' own programs from the
// tools module hack/kube (k8s.io/kubernetes at one pinned release): the
// kube-apiserver of the cluster tests, and the kubelet, the node e2e test
// binary, agnhost and the sample device plugin of the conformance runs.
// internal/testenv/toolbuild builds and caches them; nodekeeper itself
// never imports k8s.io/kubernetes.
package kubebuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// Module is the tools module's directory under nodekeeper's root.
const Module = "hack/kube"

// APIServer is the build of kube-apiserver.
func APIServer() (toolbuild.Spec, error) {
	return spec("kube", map[string]string{"kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver"}, nil)
}

// Node is the build of the kubelet, of the node e2e suite's test binary
// e2e_node.test, and of the ginkgo command that runs it in parallel.
func Node() (toolbuild.Spec, error) {
	return spec("kube-node",
		map[string]string{"kubelet": "k8s.io/kubernetes/cmd/kubelet", "ginkgo": "github.com/onsi/ginkgo/v2/ginkgo"},
		map[string]string{"e2e_node.test": "k8s.io/kubernetes/test/e2e_node"})
}

// Agnhost is the build of agnhost, the e2e suites' multi-purpose test
// program, linked statically (CGO_ENABLED=0) to run in a minimal image.
func Agnhost() (toolbuild.Spec, error) {
	s, err := spec("kube-agnhost", map[string]string{"agnhost": "k8s.io/kubernetes/test/images/agnhost"}, nil)
	s.DefaultCgo = false
	return s, err
}

// SampleDevicePlugin is the build of sampledeviceplugin, the device plugin
// of the e2e suites' sample-device-plugin image
// (k8s.io/kubernetes/test/images/sample-device-plugin), linked statically
// (CGO_ENABLED=0) to run in a minimal image. It has a cache of its own:
// the other builds' caches stay valid whether or not it was built.
func SampleDevicePlugin() (toolbuild.Spec, error) {
	s, err := spec("kube-sample-device-plugin",
		map[string]string{"sample-device-plugin": "k8s.io/kubernetes/test/images/sample-device-plugin"}, nil)
	s.DefaultCgo = false
	return s, err
}

// Version is the k8s.io/kubernetes release hack/kube pins, such as "v1.36.3".
func Version() (string, error) {
	dir, err := toolbuild.ModuleDir(Module)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	v, err := requiredVersion(b, "k8s.io/kubernetes")
	if err != nil {
		return "", fmt.Errorf("%s/go.mod: %w", Module, err)
	}
	return v, nil
}

// PorterDir is agnhost's porter source directory in the module cache (its
// localhost.crt and localhost.key go into the agnhost stand-ins). The module
// is there once Agnhost has been built.
func PorterDir() (string, error) {
	dir, err := SourceDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "test", "images", "agnhost", "porter"), nil
}

// SourceDir is the directory of the k8s.io/kubernetes release hack/kube pins
// in the module cache. The module is there once a build of this package has
// run (or `go mod download k8s.io/kubernetes` in hack/kube); SourceDir only
// names the directory.
func SourceDir() (string, error) {
	v, err := Version()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(toolbuild.GoTool(), "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@"+v), nil
}

// spec is a build from hack/kube into the cache directory name. CGO_ENABLED
// is left to the go command so a plain `go build` in hack/kube warms the same
// build cache. The version the programs report (/version, the kubelet's
// --version, the node's kubeletVersion, emulation versions) is the module's
// k8s.io/kubernetes version, set as the release build sets it.
func spec(name string, bins, tests map[string]string) (toolbuild.Spec, error) {
	v, err := Version()
	if err != nil {
		return toolbuild.Spec{}, err
	}
	const pkg = "k8s.io/component-base/version"
	major, minor, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	return toolbuild.Spec{
		Module:     Module,
		Binaries:   bins,
		Tests:      tests,
		CacheName:  name,
		DefaultCgo: true,
		LDFlags: fmt.Sprintf("-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
			pkg, v, pkg, major, pkg, minor, pkg),
	}, nil
}

// requiredVersion returns the version go.mod requires of module.
func requiredVersion(gomod []byte, module string) (string, error) {
	for line := range strings.Lines(string(gomod)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == module && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no requirement of %s", module)
}
