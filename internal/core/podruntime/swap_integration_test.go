package podruntime

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/stats"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// containerCgroupFile reads file of the cgroup v2 cgroup of pid.
func containerCgroupFile(t *testing.T, pid int, file string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	path, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "0::")
	if !ok {
		t.Fatalf("/proc/%d/cgroup is not a cgroup v2 line: %q", pid, b)
	}
	v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", path, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// TestIntegrationSwapLimit runs a Burstable pod on cgroup v2 with swap on
// and LimitedSwap, and reads its containers' memory.swap.max: the one whose
// memory request is below its limit gets the kubelet's share (request /
// node memory * node swap, which the kernel keeps in whole pages), the one
// whose request equals its limit none (0). (Guaranteed, BestEffort,
// critical pods and NoSwap are TestApplySwap's table.)
func TestIntegrationSwapLimit(t *testing.T) {
	integration.OnCgroup(t, 2)
	integration.SwapOn(t, 64<<20)
	swapCap, err := stats.SwapCapacity("")
	if err != nil || swapCap == 0 {
		t.Fatalf("swap capacity %d, %v: want swap on", swapCap, err)
	}
	n := startNode(t)
	const memory = 8 << 30 // startNode's MemoryCapacity
	n.m.cfg.Swap = Swap{Controller: true, CgroupV2: true, Limited: true, Capacity: swapCap}
	pod := hostPod("swap", "uid-swap", func(p *v1.Pod) {
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl("memory", "64Mi"), Limits: rl("memory", "128Mi")}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "equal", Image: appImage,
			Resources: v1.ResourceRequirements{Requests: rl("memory", "32Mi"), Limits: rl("memory", "32Mi")}})
	})
	// Container starts take seconds each under TCG emulation (the v2 lane).
	st := n.runUntilWithin(t, pod, "Running", 4*time.Minute, func(st v1.PodStatus) bool {
		return st.Phase == v1.PodRunning && len(st.ContainerStatuses) == 2 &&
			st.ContainerStatuses[0].State.Running != nil && st.ContainerStatuses[1].State.Running != nil
	})
	page := int64(os.Getpagesize())
	want := map[string]string{
		"app":   strconv.FormatInt(int64(float64(64<<20)/float64(memory)*float64(swapCap))/page*page, 10),
		"equal": "0",
	}
	for _, cs := range st.ContainerStatuses {
		got := containerCgroupFile(t, n.pidOf(t, cs.ContainerID), "memory.swap.max")
		if got != want[cs.Name] {
			t.Errorf("container %s: memory.swap.max = %s, want %s (swap %d bytes, node memory %d)", cs.Name, got, want[cs.Name], swapCap, int64(memory))
		}
	}
}
