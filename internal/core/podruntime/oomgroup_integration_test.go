package podruntime

import (
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// TestIntegrationOOMGroup (cgroup v2): with Config.OOMGroup (the kubelet's
// default on v2) the runtime sets memory.oom.group to 1 on the container's
// cgroup, from the CRI's unified resources (the kernel's default is 0;
// TestSyncPodOOMGroup shows none are asked without OOMGroup). On cgroup v1,
// where the agent never sets OOMGroup, containers start without unified
// resources in every other integration test of the package.
func TestIntegrationOOMGroup(t *testing.T) {
	integration.OnCgroup(t, 2)
	n := startNode(t)
	n.m.cfg.OOMGroup = true
	pod := hostPod("oom", "uid-oom") // the app image sleeps
	// A sandbox alone took 21 s in the TCG guest of the v2 lane on a busy host.
	st := n.runUntilWithin(t, pod, "Running", 2*time.Minute, running1)
	pid := n.pidOf(t, st.ContainerStatuses[0].ContainerID)
	if got := containerCgroupFile(t, pid, "memory.oom.group"); got != "1" {
		t.Errorf("memory.oom.group of the container's cgroup = %q, want 1", got)
	}
	if err := n.m.KillPod(t.Context(), pod, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.m.RemovePod(t.Context(), n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
}
