package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// machineThreads returns the machine's task count (processes and threads, the
// denominator of /proc/loadavg's fourth field, what pid.available counts) and
// the largest it may reach (min of pid_max and threads-max).
func machineThreads(t *testing.T) (cur, max int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		t.Fatalf("/proc/loadavg: %q", b)
	}
	cur, err = strconv.ParseInt(total, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	max = readInt(t, "/proc/sys/kernel/pid_max")
	if tm := readInt(t, "/proc/sys/kernel/threads-max"); tm < max {
		max = tm
	}
	return cur, max
}

// TestPIDPressureEvictsSpawner: with pid.available set 1,500 tasks below
// what the machine has free now, an ordinary pod that spawns 500 processes
// (each a Go program with several threads) puts the node under PIDPressure;
// the eviction manager evicts it, the pod with the most processes, and the
// bystander keeps running.
func TestPIDPressureEvictsSpawner(t *testing.T) {
	cur, max := machineThreads(t)
	threshold := max - cur - 1500
	a := StartAgent(t, Options{Config: fmt.Sprintf(`evictionHard:
  memory.available: 100Mi
  pid.available: "%d"
evictionPressureTransitionPeriod: 5s
`, threshold)})
	a.apply("bystander.yaml", bestEffortManifest("bystander"))
	a.WaitPod("bystander", "running", running)
	if c := a.nodeConditionNow(v1.NodePIDPressure); c == v1.ConditionTrue {
		t.Fatalf("PIDPressure before the spawner started (machine tasks %d, threshold %d free of %d)", cur, threshold, max)
	}
	a.apply("spawner.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: spawner
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: %s
    args: ["spawn", "500"]
    env: [{name: TESTBOX_STOP_EXIT, value: "143"}] # ends Failed/Evicted, as a shell would
`, testbox))
	evicted := a.WaitPod("spawner", "evicted", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == "Evicted"
	})
	if !strings.Contains(evicted.Status.Message, "pids") {
		t.Errorf("eviction message %q does not name the pids resource", evicted.Status.Message)
	}
	if p := a.Pod("bystander"); p == nil || !running(p) {
		t.Errorf("the bystander was disturbed: %s", podSummary(p))
	}
	if !strings.Contains(a.Log(), "pid.available") {
		t.Errorf("the agent did not log the pid.available signal:\n%s", tail(a.Log(), 30))
	}
}

// nodeConditionNow reads one condition of /node now ("" when absent).
func (a *Agent) nodeConditionNow(c v1.NodeConditionType) v1.ConditionStatus {
	a.t.Helper()
	n, err := a.node()
	if err != nil {
		a.t.Fatalf("GET /node: %v", err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == c {
			return cond.Status
		}
	}
	return ""
}
