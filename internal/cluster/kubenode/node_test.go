package kubenode

import (
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// TestReadSystemInfo reads the host fixture; a missing file leaves its field
// empty and osImage falls back to "Linux".
func TestReadSystemInfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, root string
		want       v1.NodeSystemInfo
	}{
		{"host", "testdata/host", v1.NodeSystemInfo{
			MachineID: "a1b2c3d4e5f60718293a4b5c6d7e8f90", SystemUUID: "4C4C4544-0042-3510-8052-B4C04F4E4C32",
			BootID: "0f7c6a2e-1d3b-4c5e-9f80-112233445566", KernelVersion: "6.1.0-13-amd64",
			OSImage: "Debian GNU/Linux 12 (bookworm)", OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH}},
		{"empty", t.TempDir(), v1.NodeSystemInfo{OSImage: "Linux", OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ReadSystemInfo(tc.root)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrettyName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want, err string }{
		{"double quoted", "ID=x\nPRETTY_NAME=\"Ubuntu 24.04 LTS\"\n", "Ubuntu 24.04 LTS", ""},
		{"single quoted", "PRETTY_NAME='Alpine Linux'", "Alpine Linux", ""},
		{"bare", "PRETTY_NAME=Arch", "Arch", ""},
		{"none", "ID=x\n", "", ""},
		{"bad quoting", `PRETTY_NAME="a\q"`, "", `PRETTY_NAME "a\q": invalid syntax`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := prettyName(tc.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff([]string{tc.want, tc.err}, []string{got, gotErr}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatusChanged: heartbeat times and the order of conditions do not
// count, anything else does; quantities compare by value.
func TestStatusChanged(t *testing.T) {
	t.Parallel()
	t0, t1 := metav1.NewTime(time.Unix(0, 0)), metav1.NewTime(time.Unix(10, 0))
	base := func() *v1.NodeStatus {
		return &v1.NodeStatus{
			Capacity: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")},
			Conditions: []v1.NodeCondition{
				{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: t0, LastTransitionTime: t0},
				{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, LastHeartbeatTime: t0, LastTransitionTime: t0},
			},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*v1.NodeStatus)
		want   bool
	}{
		{"same", func(*v1.NodeStatus) {}, false},
		{"heartbeat", func(s *v1.NodeStatus) { s.Conditions[0].LastHeartbeatTime = t1 }, false},
		{"order", func(s *v1.NodeStatus) { s.Conditions[0], s.Conditions[1] = s.Conditions[1], s.Conditions[0] }, false},
		{"same value", func(s *v1.NodeStatus) { s.Capacity[v1.ResourceMemory] = resource.MustParse("1024Mi") }, false},
		{"status", func(s *v1.NodeStatus) { s.Conditions[1].Status = v1.ConditionTrue }, true},
		{"message", func(s *v1.NodeStatus) { s.Conditions[0].Message = "x" }, true},
		{"transition", func(s *v1.NodeStatus) { s.Conditions[0].LastTransitionTime = t1 }, true},
		{"condition added", func(s *v1.NodeStatus) { s.Conditions = append(s.Conditions, v1.NodeCondition{Type: "X"}) }, true},
		{"capacity", func(s *v1.NodeStatus) { s.Capacity[v1.ResourceMemory] = resource.MustParse("2Gi") }, true},
		{"nodeInfo", func(s *v1.NodeStatus) { s.NodeInfo.BootID = "b2" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := base()
			tc.change(b)
			if got := statusChanged(base(), b); got != tc.want {
				t.Errorf("statusChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestApplyStatusResources: capacity keeps resources the source does not
// report, allocatable follows the source or else the capacity, and an
// extended resource gone from capacity leaves allocatable.
func TestApplyStatusResources(t *testing.T) {
	t.Parallel()
	q := resource.MustParse
	st := v1.NodeStatus{
		Capacity:    v1.ResourceList{"example.com/operator": q("5"), v1.ResourceCPU: q("1")},
		Allocatable: v1.ResourceList{"example.com/operator": q("5"), v1.ResourceCPU: q("1"), "example.com/stale": q("1")},
	}
	src := &v1.Node{Status: v1.NodeStatus{
		Capacity:    v1.ResourceList{v1.ResourceCPU: q("2"), "example.com/gpu": q("2")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: q("1500m"), "example.com/gpu": q("1")},
	}}
	cfg := Config{NodeName: "n1", Hostname: "n1"}
	cfg.applyStatus(&st, src, time.Unix(0, 0))
	want := v1.NodeStatus{
		Capacity:    v1.ResourceList{"example.com/operator": q("5"), v1.ResourceCPU: q("2"), "example.com/gpu": q("2")},
		Allocatable: v1.ResourceList{"example.com/operator": q("5"), v1.ResourceCPU: q("1500m"), "example.com/gpu": q("1")},
	}
	if diff := cmp.Diff(want.Capacity, st.Capacity, quantities); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Allocatable, st.Allocatable, quantities); diff != "" {
		t.Errorf("allocatable (-want +got):\n%s", diff)
	}
}

// TestHostIP: an IP node name is its own address; otherwise the address is
// one of the host's and never loopback.
func TestHostIP(t *testing.T) {
	t.Parallel()
	if ip, err := HostIP("192.0.2.7"); err != nil || ip.String() != "192.0.2.7" {
		t.Errorf("HostIP(192.0.2.7) = %v, %v", ip, err)
	}
	ip, err := HostIP("localhost")
	if err != nil {
		integration.Require(t, "this host has no usable address: "+err.Error())
	}
	if checkNodeIP(ip) != nil {
		t.Errorf("HostIP(localhost) = %v, an address a node may not report", ip)
	}
}
