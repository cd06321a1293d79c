package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// TestCgroupDriverContainerd: the containerd versions nodekeeper runs, Debian's
// 1.6.20 (PATH) and the 1.7 of hack/containerd, have no CRI RuntimeConfig
// (containerd implements it from 2.0; 1.7 vendors cri-api 0.27): the start
// keeps cgroupDriver, after one call, with one log line saying the runtime
// cannot report its driver. Needs root and containerd (fails under CI=true
// without them), on either cgroup version.
func TestCgroupDriverContainerd(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) containerdtest.Options
	}{
		{"PATH", func(*testing.T) containerdtest.Options { return containerdtest.Options{} }},
		{"hack/containerd", func(t *testing.T) containerdtest.Options {
			return containerdtest.Options{BinDir: containerdtest.BuildContainerd(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := containerdtest.StartWith(t, tc.opts(t))
			t.Logf("containerd %s", c.RuntimeVersion)
			var logs bytes.Buffer
			got, err := cgroupDriver(t.Context(), c.CRI, driverRetryWait, "(defaults)", c.Endpoint, config.Default().Agent,
				slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil || got != "cgroupfs" {
				t.Fatalf("cgroupDriver = %q, %v; want cgroupfs, the configuration's", got, err)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], "cannot report its cgroup driver") || !strings.Contains(lines[0], c.Endpoint) {
				t.Errorf("logged %q, want one line saying the runtime at %s cannot report its cgroup driver", logs.String(), c.Endpoint)
			}
		})
	}
}
