package containerdtest

import (
	"os"
	"sync"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// containerd17 builds containerd, containerd-shim-runc-v2 and ctr from the
// separate module hack/containerd (containerd 1.7, whose CRI plugin reports
// pinned images). The tags leave out the plugins that need C headers or kernel
// features a test does not use; the config disables the same plugins.
var containerd17 = toolbuild.Spec{
	Module: "hack/containerd",
	Binaries: map[string]string{
		"containerd":              "github.com/containerd/containerd/cmd/containerd",
		"containerd-shim-runc-v2": "github.com/containerd/containerd/cmd/containerd-shim-runc-v2",
		"ctr":                     "github.com/containerd/containerd/cmd/ctr",
	},
	Tags:      "no_btrfs no_devmapper no_zfs no_aufs no_tracing",
	CacheName: "containerd",
}

// build is the test binary's one look-up (or build) of containerd17.
var build = sync.OnceValues(func() (string, error) { return toolbuild.Build(containerd17) })

// Containerd17 is the build of containerd 1.7 that BuildContainerd makes,
// for a program outside the tests (the conformance driver) to build or find
// it with toolbuild.Build: the same cache, built once per machine.
func Containerd17() toolbuild.Spec { return containerd17 }

// BuildContainerd builds containerd 1.7 from hack/containerd (once per machine,
// see toolbuild) and returns the directory holding it, for Options.BinDir.
// Without root (needed to run it), or in -short mode, it skips t; under
// CI=true it fails t instead, and a failed build always fails t.
func BuildContainerd(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		integration.Require(t, "containerd tests need root")
	}
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("skipping the containerd 1.7 build in -short mode")
	}
	dir, err := build()
	if err != nil {
		t.Fatalf("build hack/containerd: %v", err)
	}
	return dir
}
