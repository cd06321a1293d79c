package containergc

import (
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchContainers returns n containers over n/10 pods with two container names
// each, one in five running, the rest dead with distinct creation times; and a
// sandbox per pod.
func benchContainers(n int) ([]*runtimeapi.Container, []*runtimeapi.PodSandbox) {
	cs := make([]*runtimeapi.Container, n)
	for i := range cs {
		pod := fmt.Sprintf("pod-%d", i%(n/10))
		st := runtimeapi.ContainerState_CONTAINER_EXITED
		if i%5 == 0 {
			st = runtimeapi.ContainerState_CONTAINER_RUNNING
		}
		cs[i] = &runtimeapi.Container{
			Id: fmt.Sprintf("c%d", i), PodSandboxId: "sb-" + pod, State: st,
			CreatedAt: t0.Add(-time.Duration(i) * time.Second).UnixNano(),
			Labels:    map[string]string{LabelPodUID: pod, LabelContainerName: fmt.Sprintf("ctr-%d", i%2)},
		}
	}
	sbs := make([]*runtimeapi.PodSandbox, n/10)
	for i := range sbs {
		sbs[i] = &runtimeapi.PodSandbox{Id: fmt.Sprintf("sb-pod-%d", i), Metadata: &runtimeapi.PodSandboxMetadata{Uid: fmt.Sprintf("pod-%d", i)},
			State: runtimeapi.PodSandboxState_SANDBOX_READY}
	}
	return cs, sbs
}

// BenchmarkPlan is one container GC pass's decision for 1,000 containers with
// a node-wide cap (both cuts run).
func BenchmarkPlan(b *testing.B) {
	cs, sbs := benchContainers(1_000)
	p := Policy{MaxPerPodContainer: 2, MaxContainers: 100}
	gone := pods{deleted: map[string]bool{"pod-3": true}}
	b.ReportAllocs()
	for b.Loop() {
		if rs := PlanContainers(cs, sbs, p, gone, false, t0); len(rs) == 0 {
			b.Fatal("nothing to remove")
		}
		PlanSandboxes(sbs, cs, gone, false)
	}
}
