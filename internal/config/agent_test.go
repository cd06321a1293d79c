package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAgentFields(t *testing.T) {
	t.Parallel()
	c, err := Parse("agent.yaml", []byte(header+`staticPodPath: /etc/nk/manifests
containerRuntimeEndpoint: unix:///run/x.sock
podCIDR: 10.99.0.0/24
podLogsDir: /tmp/logs
address: 0.0.0.0
readOnlyPort: 0
enableProfilingHandler: false
cgroupRoot: /nk
syncFrequency: 30s
fileCheckFrequency: 5s
runtimeRequestTimeout: 1m
failCgroupV1: true
healthzBindAddress: 0.0.0.0
healthzPort: 0
clusterDomain: cluster.local
allowedUnsafeSysctls: ["kernel.msg*", "net.core.somaxconn"]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Agent{
		StaticPodPath: "/etc/nk/manifests", RuntimeEndpoint: "unix:///run/x.sock", PodCIDR: "10.99.0.0/24",
		PodLogsDir: "/tmp/logs", Address: "0.0.0.0", ReadOnlyPort: 0, CgroupDriver: "cgroupfs", CgroupRoot: "/nk",
		CgroupsPerQOS: true, SyncFrequency: 30 * time.Second, FileCheckFrequency: 5 * time.Second,
		RuntimeRequestTimeout: time.Minute, FailCgroupV1: true, HealthzBindAddress: "0.0.0.0", HealthzPort: 0,
		ClusterDomain: "cluster.local", AllowedUnsafeSysctls: []string{"kernel.msg*", "net.core.somaxconn"},
	}
	if diff := cmp.Diff(want, c.Agent); diff != "" {
		t.Errorf("Agent (-want +got):\n%s", diff)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings for supported fields: %q", c.Warnings)
	}
	if err := c.Agent.RunnableErr("agent.yaml"); err != nil {
		t.Errorf("RunnableErr: %v", err)
	}
}

func TestAgentFieldErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"relative podLogsDir", "podLogsDir: logs\n", []string{"podLogsDir", `"logs"`, "absolute"}},
		{"relative staticPodPath", "staticPodPath: manifests\n", []string{"staticPodPath", `"manifests"`}},
		{"bad podCIDR", "podCIDR: 10.0.0.0/33\n", []string{"podCIDR", `"10.0.0.0/33"`}},
		{"unknown cgroupDriver", "cgroupDriver: cgroupv3\n", []string{"cgroupDriver", `"cgroupv3"`}},
		{"unclean cgroupRoot", "cgroupRoot: /a/../b\n", []string{"cgroupRoot", `"/a/../b"`}},
		{"address not an IP", "address: localhost\n", []string{"address", `"localhost"`}},
		{"readOnlyPort out of range", "readOnlyPort: 70000\n", []string{"readOnlyPort", `"70000"`}},
		{"negative syncFrequency", "syncFrequency: -1s\n", []string{"syncFrequency", `"-1s"`}},
		{"healthzBindAddress not an IP", "healthzBindAddress: localhost\n", []string{"healthzBindAddress", `"localhost"`}},
		{"healthzPort out of range", "healthzPort: -1\n", []string{"healthzPort", `"-1"`}},
		{"node-level unsafe sysctl", "allowedUnsafeSysctls: [net.core.somaxconn, vm.swappiness]\n", []string{"allowedUnsafeSysctls[1]", `"vm.swappiness"`, "namespaced"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("bad.yaml", []byte(header+tc.data))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: %v, want an ErrInvalid error", err)
			}
			for _, w := range append(tc.want, "bad.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestAgentRunnable: explain reads a kubeadm file with the systemd driver, but
// the agent refuses to run with it, naming the field.
func TestAgentRunnable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ data, want string }{
		{"cgroupDriver: systemd\n", `cgroupDriver: "systemd"`},
		{"cgroupsPerQOS: false\n", `cgroupsPerQOS: "false"`},
		{"imageServiceEndpoint: unix:///img.sock\n", `imageServiceEndpoint: "unix:///img.sock"`},
		{"containerRuntimeEndpoint: unix:///a.sock\nimageServiceEndpoint: unix:///img.sock\n", `imageServiceEndpoint: "unix:///img.sock"`},
	} {
		c, err := Parse("k.yaml", []byte(header+tc.data))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.data, err)
		}
		err = c.Agent.RunnableErr("k.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("RunnableErr for %q = %v, want an ErrInvalid error naming %s", tc.data, err, tc.want)
		}
	}
}
