package e2e

import (
	"fmt"
	"testing"
)

// TestEphemeralStorageLimitsEvictViolators: on one agent, a container with
// a 20Mi ephemeral-storage limit that writes 40Mi into its writable layer,
// beside a sidecar limited to 100Mi (so the pod's total, 120Mi, is not
// exceeded: the kubelet checks the pod sum before each container), is
// evicted with the kubelet's container message; a pod whose single
// container (limit 30Mi, so the pod's total is 30Mi) writes 40Mi into an
// emptyDir without a sizeLimit is evicted with the pod-level message (its
// container's own rootfs and logs stay under the limit, so only the pod sum
// of rootfs, logs and emptyDirs exceeds it); a pod writing 1Mi under a 20Mi
// limit keeps running. kubelet_evictions counts each under its limit label.
func TestEphemeralStorageLimitsEvictViolators(t *testing.T) {
	a := StartAgent(t, Options{})
	limit := func(l string) string { return "    resources: {limits: {ephemeral-storage: " + l + "}}\n" }
	cache := `    volumeMounts: [{name: cache, mountPath: /cache}]
  volumes:
  - name: cache
    emptyDir: {}
`
	sidecar := fmt.Sprintf(`  - name: side
    image: %s
    args: ["sleep"]
%s`, testbox, limit("100Mi"))
	pods := []struct{ name, args, extra, message, metric string }{
		{"writer", `["fill", "/tmp/x", "40Mi"]`, limit("20Mi") + sidecar,
			`Container app exceeded its local ephemeral storage limit "20Mi". `, "ephemeralcontainerfs.limit"},
		{"podsum", `["fill", "/cache/x", "40Mi"]`, limit("30Mi") + cache,
			"Pod ephemeral local storage usage exceeds the total limit of containers 30Mi. ", "ephemeralpodfs.limit"},
		{"within", `["fill", "/tmp/x", "1Mi"]`, limit("20Mi"), "", ""},
	}
	for _, p := range pods {
		a.applyLocal(localPod(p.name, "BestEffort", p.args, p.extra))
		t.Cleanup(func() { a.deleteLocal(p.name) })
	}
	for _, p := range pods {
		if p.message == "" {
			continue
		}
		got := a.WaitPod(p.name, "evicted", evicted)
		if got.Status.Message != p.message {
			t.Errorf("pod %s: message %q, want %q", p.name, got.Status.Message, p.message)
		}
		a.waitEvictionsMetric(p.metric, 1)
	}
	if p := a.Pod("within"); p == nil || !running(p) {
		t.Errorf("the pod within its limit was disturbed: %s", podSummary(p))
	}
}
