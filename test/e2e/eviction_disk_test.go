package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestDiskPressureReclaimsUnusedImages: with disk thresholds no filesystem
// here can satisfy (99% available), the node has DiskPressure, and the
// eviction manager reclaims at node level through image GC: the unused
// testbox image is removed, the pause (sandbox) image stays.
func TestDiskPressureReclaimsUnusedImages(t *testing.T) {
	a := StartAgent(t, Options{Config: `evictionHard:
  memory.available: 100Mi
  nodefs.available: "99%"
  imagefs.available: "99%"
`})
	a.Eventually("DiskPressure", 60*time.Second, a.conditionIs(v1.NodeDiskPressure, v1.ConditionTrue))
	images := func() []string {
		imgs, err := a.CRI().ListImages(t.Context(), nil)
		if err != nil {
			t.Fatalf("list images: %v", err)
		}
		var tags []string
		for _, im := range imgs {
			tags = append(tags, im.RepoTags...)
		}
		slices.Sort(tags)
		return tags
	}
	a.Eventually("the unused testbox image removed", 60*time.Second, func() (bool, string) {
		tags := images()
		return !slices.Contains(tags, testbox), fmt.Sprint(tags)
	})
	if tags := images(); !slices.ContainsFunc(tags, func(s string) bool { return strings.Contains(s, "pause") }) {
		t.Errorf("the pause image was removed too: %v", tags)
	}
	if !strings.Contains(a.Log(), `msg="removing image"`) {
		t.Errorf("no image removal logged:\n%s", tail(a.Log(), 30))
	}
}

// TestPIDPressure: with a pid.available threshold the machine cannot meet
// (1,000 tasks more free than it has now), the node reports PIDPressure (GET
// /node) while the static pod it runs, critical, is not evicted.
func TestPIDPressure(t *testing.T) {
	cur, max := machineThreads(t)
	a := StartAgent(t, Options{Config: fmt.Sprintf(`evictionHard:
  memory.available: 100Mi
  pid.available: "%d"
`, max-cur+1000)})
	a.WriteManifest("spawner.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: spawner
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: %s
    args: ["spawn", "20"]
`, testbox))
	a.WaitPod("spawner-e2e", "running", running)
	a.Eventually("PIDPressure", 60*time.Second, a.conditionIs(v1.NodePIDPressure, v1.ConditionTrue))
	a.Eventually("the eviction manager refusing to evict the critical pod", 30*time.Second, func() (bool, string) {
		return strings.Contains(a.Log(), "cannot evict a critical pod"), "not logged"
	})
	if p := a.Pod("spawner-e2e"); p == nil || !running(p) {
		t.Errorf("the static pod was disturbed: %s", podSummary(p))
	}
}
