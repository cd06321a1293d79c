package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/pressure"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// memTotalMiB reads MemTotal from /proc/meminfo, in MiB.
func memTotalMiB(t testing.TB) int64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/meminfo: MemTotal %q: %v", v, err)
			}
			return kb >> 10
		}
	}
	t.Fatal("/proc/meminfo: no MemTotal")
	return 0
}

// smallPodsConfig reserves all but podsMiB of the machine's memory, so that
// the pods' cgroup is limited to podsMiB (capacity less the reservations, as
// the kubelet enforces node allocatable; the machine is never at risk) and
// allocatableMemory.available (that limit less the pods' working set)
// crosses its hard threshold, thresholdMiB, when the pods use more than
// podsMiB-thresholdMiB.
func smallPodsConfig(t testing.TB, podsMiB, thresholdMiB int64, transition string) string {
	reserved := memTotalMiB(t) - podsMiB
	return fmt.Sprintf(`kubeReserved:
  memory: %dMi
evictionHard:
  memory.available: %dMi
evictionPressureTransitionPeriod: %s
`, reserved, thresholdMiB, transition)
}

// node reads the agent's Node from GET /node.
func (a *Agent) node() (*v1.Node, error) {
	resp, err := http.Get(a.URL + "/node")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /node: %s", resp.Status)
	}
	var n v1.Node
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return nil, err
	}
	return &n, nil
}

// conditionIs returns a check that the node condition c has status s.
func (a *Agent) conditionIs(c v1.NodeConditionType, s v1.ConditionStatus) func() (bool, string) {
	return func() (bool, string) {
		n, err := a.node()
		if err != nil {
			return false, err.Error()
		}
		for _, got := range n.Status.Conditions {
			if got.Type == c {
				return got.Status == s, fmt.Sprintf("%s=%s (%s)", c, got.Status, got.Reason)
			}
		}
		return false, fmt.Sprintf("no %s condition in %+v", c, n.Status.Conditions)
	}
}

func allocManifest(name string, mib int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: hog
    image: %s
    args: ["alloc", "%d"]
`, name, testbox, mib)
}

// TestMemoryPressureStaticPod: in a pods cgroup limited to 900Mi with a 300Mi
// hard threshold, a static pod allocating 700Mi sets MemoryPressure on the
// node (GET /node) without waiting for the 10s monitoring interval (the memcg
// notifier wakes the manager); the static pod, critical, is not evicted; once
// it is gone the condition clears after the (shortened) transition period.
func TestMemoryPressureStaticPod(t *testing.T) {
	a := StartAgent(t, Options{Config: smallPodsConfig(t, 900, 300, "5s")})
	notifier := pressure.MechanismMemcgThreshold
	if integration.CgroupVersion() == 2 {
		notifier = pressure.MechanismMemoryEvents
	}
	if !strings.Contains(a.Log(), notifier) {
		t.Errorf("the agent's log does not name the %s notifier:\n%s", notifier, tail(a.Log(), 20))
	}
	a.Eventually("no memory pressure at start", 30*time.Second, a.conditionIs(v1.NodeMemoryPressure, v1.ConditionFalse))

	a.WriteManifest("hog.yaml", allocManifest("hog", 700))
	a.WaitPod("hog-e2e", "running", running)
	started := time.Now()
	a.Eventually("MemoryPressure", 30*time.Second, a.conditionIs(v1.NodeMemoryPressure, v1.ConditionTrue))
	t.Logf("MemoryPressure seen %v after the pod was running", time.Since(started))
	a.Eventually("the eviction manager refusing to evict the critical pod", 30*time.Second, func() (bool, string) {
		return strings.Contains(a.Log(), "cannot evict a critical pod"), "not logged"
	})
	if p := a.Pod("hog-e2e"); p == nil || p.Status.Phase != v1.PodRunning || p.Status.Reason == "Evicted" {
		t.Fatalf("the static pod was evicted: %s", podSummary(p))
	}
	// The CLI against the live agent: get node shows the condition, explain
	// eviction --live ranks the hog for the signal under pressure.
	out, err := exec.Command(a.art.bin, "get", "node", "--server", a.URL).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^MemoryPressure\s+True\s+KubeletHasInsufficientMemory`).Match(out) {
		t.Errorf("get node: %v\n%s", err, out)
	}
	out, err = exec.Command(a.art.bin, "explain", "eviction", "--live="+a.Socket()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Node conditions: [MemoryPressure]") || !strings.Contains(string(out), "default/hog-e2e") {
		t.Errorf("explain eviction --live: %v\n%s", err, out)
	}

	a.RemoveManifest("hog.yaml")
	a.WaitGone("hog-e2e")
	a.Eventually("MemoryPressure cleared", 60*time.Second, a.conditionIs(v1.NodeMemoryPressure, v1.ConditionFalse))
}
