package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// oomPod is a static pod whose container allocates 256Mi under a 32Mi
// memory limit: the kernel's OOM killer kills it in its own cgroup.
func oomPod(name, restartPolicy string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: %s
  terminationGracePeriodSeconds: 2
  containers:
  - name: hog
    image: %s
    args: ["alloc", "256"]
    resources: {limits: {memory: 32Mi}}
`, name, restartPolicy, testbox)
}

// waitPodLong is WaitPod with 5 minutes for the pod's creation and its
// container's first run and kill: in the cgroup v2 lane's emulated VM on a
// busy machine a sandbox alone took 60 s.
func waitPodLong(a *Agent, name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	a.t.Helper()
	var got *v1.Pod
	a.Eventually(fmt.Sprintf("pod %s: %s", name, what), 5*time.Minute, func() (bool, string) {
		got = a.Pod(name)
		if got == nil {
			return false, "no such pod"
		}
		return cond(got), podSummary(got)
	})
	return got
}

// oomKilled says whether s is the kubelet's report of an OOM kill.
func oomKilled(s *v1.ContainerStateTerminated) bool {
	return s != nil && s.Reason == "OOMKilled" && s.ExitCode == 137
}

// TestOOMKilled: a container allocating past its memory limit is killed by
// the kernel (in its cgroup: memory.events oom_kill on cgroup v2,
// memory.oom_control on v1) and reported as the kubelet reports it, on
// either cgroup version: terminated with reason OOMKilled and exit code 137;
// restarted under restartPolicy Always (the kill kept as its last state);
// left terminated, the pod Failed, under Never.
func TestOOMKilled(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("oom-always.yaml", oomPod("oom-always", "Always"))
	a.WriteManifest("oom-never.yaml", oomPod("oom-never", "Never"))

	waitPodLong(a, "oom-always-e2e", "restarted after an OOM kill", func(p *v1.Pod) bool {
		c := p.Status.ContainerStatuses
		return len(c) == 1 && c[0].RestartCount >= 1 && c[0].LastTerminationState.Terminated != nil
	})
	// containerd says Error until its event loop has handled the OOM event,
	// then OOMKilled; the agent reads such a container again for 10 s
	// (podruntime's oomReasonWait), so the status says OOMKilled soon after.
	a.Eventually("the restarted container's last state OOMKilled, exit code 137", 30*time.Second, func() (bool, string) {
		p := a.Pod("oom-always-e2e")
		if p == nil {
			return false, "no such pod"
		}
		c := p.Status.ContainerStatuses
		return len(c) == 1 && oomKilled(c[0].LastTerminationState.Terminated), fmt.Sprintf("%+v", c)
	})
	waitPodLong(a, "oom-never-e2e", "failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	a.Eventually("restartPolicy Never: the container terminated OOMKilled, exit code 137, not restarted", 30*time.Second, func() (bool, string) {
		never := a.Pod("oom-never-e2e")
		if never == nil {
			return false, "no such pod"
		}
		c := never.Status.ContainerStatuses
		return len(c) == 1 && c[0].RestartCount == 0 && oomKilled(c[0].State.Terminated), podSummary(never)
	})
	resp, err := http.Get(a.URL + "/metrics/cadvisor")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, m := range regexp.MustCompile(`(?m)^container_oom_events_total\{[^}]*pod="oom-[^}]*\} .*$`).FindAll(b, -1) {
		t.Logf("%s", m)
	}
}

// TestOOMKillCounted: with singleProcessOOMKill the OOM killer kills only the
// biggest process of a container (memory.oom.group stays 0 on cgroup v2; v1
// never kills the group), so the container lives on, and
// container_oom_events_total counts the kill from its cgroup (memory.events
// oom_kill on v2, memory.oom_control on v1), as cadvisor's does.
func TestOOMKillCounted(t *testing.T) {
	a := StartAgent(t, Options{Config: "singleProcessOOMKill: true\n"})
	a.WriteManifest("oom-child.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: oom-child
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: hog
    image: %s
    args: ["spawn", "--alloc", "256", "1"]
    resources: {limits: {memory: 32Mi}}
`, testbox))
	series := regexp.MustCompile(`(?m)^container_oom_events_total\{([^}]*)\} (\d+)`)
	a.Eventually("the child's OOM kill counted in container_oom_events_total", 2*time.Minute, func() (bool, string) {
		resp, err := http.Get(a.URL + "/metrics/cadvisor")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, m := range series.FindAllSubmatch(b, -1) {
			labels := string(m[1])
			if strings.Contains(labels, `container="hog"`) && strings.Contains(labels, `pod="oom-child-e2e"`) {
				seen = append(seen, string(m[0]))
				if string(m[2]) != "0" {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("series: %q", seen)
	})
	p := a.Pod("oom-child-e2e")
	if p == nil {
		t.Fatal("pod oom-child-e2e gone")
	}
	if c := p.Status.ContainerStatuses; len(c) != 1 || c[0].RestartCount != 0 || c[0].State.Running == nil {
		t.Errorf("after its child's OOM kill: %s, want the container running, not restarted", podSummary(p))
	}
}
