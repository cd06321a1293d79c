package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// applyLocal creates an ordinary (non-static, evictable) pod through the
// agent's POST /pods on its socket (nodekeeper apply's endpoint).
func (a *Agent) applyLocal(manifest string) {
	a.t.Helper()
	resp, err := a.Client().Post("http://localhost/pods", "application/yaml", strings.NewReader(manifest))
	if err != nil {
		a.t.Fatalf("POST /pods: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		a.t.Fatalf("POST /pods: %s", resp.Status)
	}
}

// deleteLocal deletes an ordinary pod through DELETE /pods/NAMESPACE/NAME,
// ignoring one already gone.
func (a *Agent) deleteLocal(name string) {
	req, err := http.NewRequest(http.MethodDelete, "http://localhost/pods/default/"+name+"?gracePeriodSeconds=0", nil)
	if err != nil {
		a.t.Fatal(err)
	}
	resp, err := a.Client().Do(req)
	if err != nil {
		a.t.Logf("DELETE pod %s: %v", name, err)
		return
	}
	resp.Body.Close()
}

// evicted reports a pod evicted as the kubelet records it.
func evicted(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// localPod's container exits 143 when stopped, as a shell killed by SIGTERM
// does: an evicted pod then ends Failed/Evicted. (A killed pod whose
// containers all exit 0 ends Succeeded, as with the kubelet:
// TestCriticalStaticPodPreemptsLocalPod.)
func localPod(name, qos, args, extra string) string {
	res := ""
	switch qos {
	case "Guaranteed":
		res = "    resources: {requests: {memory: 64Mi, cpu: 10m}, limits: {memory: 64Mi, cpu: 10m}}\n"
	case "Burstable":
		res = "    resources: {requests: {memory: 50Mi}}\n"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: %s
    args: %s
    env: [{name: TESTBOX_STOP_EXIT, value: "143"}]
%s%s`, name, testbox, args, res, extra)
}

// TestMemoryPressureEvictsRankedPod: in a pods cgroup limited to 900Mi with
// a 300Mi hard threshold, three ordinary pods run; the Burstable one then
// allocates far past its request: the ranking picks it (over its request by
// the most), it is evicted (Failed, Evicted, the kubelet's message,
// DisruptionTarget, the Evicted event), the others keep running, and
// MemoryPressure clears after the transition period.
func TestMemoryPressureEvictsRankedPod(t *testing.T) {
	a := StartAgent(t, Options{Config: smallPodsConfig(t, 900, 300, "5s")})
	pods := map[string]string{
		"guaranteed": localPod("guaranteed", "Guaranteed", `["alloc", "20"]`, ""),
		"besteffort": localPod("besteffort", "BestEffort", `["sleep"]`, ""),
	}
	for name, m := range pods {
		a.applyLocal(m)
		t.Cleanup(func() { a.deleteLocal(name) })
	}
	for name := range pods {
		a.WaitPod(name, "running", running)
	}
	a.applyLocal(localPod("hog", "Burstable", `["alloc", "650"]`, ""))
	t.Cleanup(func() { a.deleteLocal("hog") })
	p := a.WaitPod("hog", "evicted", evicted)
	if want := "The node was low on resource: memory."; !strings.HasPrefix(p.Status.Message, want) {
		t.Errorf("message %q, want prefix %q", p.Status.Message, want)
	}
	if !strings.Contains(a.Log(), "reason=Evicted") {
		t.Errorf("no Evicted event logged:\n%s", tail(a.Log(), 30))
	}
	for name := range pods {
		if p := a.Pod(name); p == nil || !running(p) {
			t.Errorf("pod %s was disturbed: %s", name, podSummary(p))
		}
	}
	a.Eventually("MemoryPressure cleared", 60*time.Second, a.conditionIs(v1.NodeMemoryPressure, v1.ConditionFalse))
}

// TestEmptyDirSizeLimitEvictsViolator: a pod writing 20Mi into an emptyDir
// limited to 8Mi is evicted with the kubelet's message; a pod writing
// within its limit keeps running.
func TestEmptyDirSizeLimitEvictsViolator(t *testing.T) {
	a := StartAgent(t, Options{})
	vol := func(limit string) string {
		return fmt.Sprintf(`    volumeMounts: [{name: cache, mountPath: /cache}]
  volumes:
  - name: cache
    emptyDir: {sizeLimit: %s}
`, limit)
	}
	a.applyLocal(localPod("violator", "BestEffort", `["fill", "/cache/x", "20Mi"]`, vol("8Mi")))
	t.Cleanup(func() { a.deleteLocal("violator") })
	a.applyLocal(localPod("within", "BestEffort", `["fill", "/cache/x", "1Mi"]`, vol("8Mi")))
	t.Cleanup(func() { a.deleteLocal("within") })
	p := a.WaitPod("violator", "evicted", evicted)
	if want := `Usage of EmptyDir volume "cache" exceeds the limit "8Mi". `; p.Status.Message != want {
		t.Errorf("message %q, want %q", p.Status.Message, want)
	}
	if p := a.Pod("within"); p == nil || !running(p) {
		t.Errorf("the pod within its limit was disturbed: %s", podSummary(p))
	}
}
