package eviction

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestMessage(t *testing.T) {
	t.Parallel()
	memObs := Observations{SignalMemoryAvailable: obsOf("50Mi", "8Gi")}
	memMet := []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}
	onePod := newTestPod("p", withContainer("c", resources("memory", "1Gi", "ephemeral-storage", "512Mi"), nil))
	annotations := func(names, usages, starved string) map[string]string {
		return map[string]string{
			OffendingContainersKey:      names,
			OffendingContainersUsageKey: usages,
			StarvedResourceKey:          starved,
		}
	}
	withPod := func(ann map[string]string, pod, usage string) map[string]string {
		ann[OffendingPodKey] = pod
		ann[OffendingPodUsageKey] = usage
		return ann
	}
	podLevel := func(opts ...podOpt) *v1.Pod {
		return newTestPod("web", append([]podOpt{withPodResources(resources("memory", "512Mi", "cpu", "1"), nil)}, opts...)...)
	}
	tests := []struct {
		name     string
		resource v1.ResourceName
		pod      *v1.Pod
		stats    []statsapi.PodStats
		met      []Threshold
		obs      Observations
		wantMsg  string
		wantAnn  map[string]string
	}{
		{
			// Usage is rendered as the kubelet renders it: a BinarySI quantity,
			// which has no suffix unless the byte count is a multiple of 1024,
			// so 1.8e9 bytes prints as 1800000000 (not "1800M").
			name:     "memory, decimal usage",
			resource: v1.ResourceMemory,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrWorkingSet("c", "1800M"))},
			met:      memMet,
			obs:      Observe(newSummary().memory("50Mi", "8Gi").build()),
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Container c was using 1800000000, request is 1Gi, has larger consumption of memory. ",
			wantAnn: annotations("c", "1800000000", "memory"),
		},
		{
			name:     "memory, binary usage",
			resource: v1.ResourceMemory,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrWorkingSet("c", "1800Mi"))},
			met:      memMet,
			obs:      memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Container c was using 1800Mi, request is 1Gi, has larger consumption of memory. ",
			wantAnn: annotations("c", "1800Mi", "memory"),
		},
		{
			name:     "memory within request names no container",
			resource: v1.ResourceMemory,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrWorkingSet("c", "1Gi"))},
			met:      memMet,
			obs:      memObs,
			wantMsg:  "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
			wantAnn:  annotations("", "", "memory"),
		},
		{
			// Init containers are named as regular ones are; a container the spec
			// does not declare is not.
			name:     "offending containers in stats order; no request is 0; unknown containers ignored",
			resource: v1.ResourceMemory,
			pod: newTestPod("p",
				withContainer("app", resources("memory", "1Gi"), nil),
				withContainer("helper", resources("memory", "256Mi"), nil),
				withContainer("norequest", nil, nil),
				withInitContainer("init", resources("memory", "1Mi"))),
			stats: []statsapi.PodStats{newPodStats(newTestPod("p"),
				ctrWorkingSet("norequest", "10Mi"),
				ctrWorkingSet("ghost", "5Gi"),
				ctrWorkingSet("init", "2Gi"),
				ctrWorkingSet("app", "1500Mi"),
				ctrWorkingSet("helper", "100Mi"))},
			met: memMet,
			obs: memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Container norequest was using 10Mi, request is 0, has larger consumption of memory. " +
				"Container init was using 2Gi, request is 1Mi, has larger consumption of memory. " +
				"Container app was using 1500Mi, request is 1Gi, has larger consumption of memory. ",
			wantAnn: annotations("norequest,init,app", "10Mi,2Gi,1500Mi", "memory"),
		},
		{
			name:     "sidecar over its memory request",
			resource: v1.ResourceMemory,
			pod: newTestPod("p",
				withSidecar("proxy", resources("memory", "64Mi")),
				withContainer("app", resources("memory", "1Gi"), nil)),
			stats: []statsapi.PodStats{newPodStats(newTestPod("p"),
				ctrWorkingSet("proxy", "300Mi"),
				ctrWorkingSet("app", "512Mi"))},
			met: memMet,
			obs: memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Container proxy was using 300Mi, request is 64Mi, has larger consumption of memory. ",
			wantAnn: annotations("proxy", "300Mi", "memory"),
		},
		{
			name:     "init container over its ephemeral-storage request",
			resource: v1.ResourceEphemeralStorage,
			pod: newTestPod("p",
				withInitContainer("fetch", resources("ephemeral-storage", "100Mi")),
				withContainer("app", resources("ephemeral-storage", "1Gi"), nil)),
			stats: []statsapi.PodStats{newPodStats(newTestPod("p"),
				ctrRootfs("fetch", "700Mi", 1), ctrLogs("fetch", "1Mi", 1),
				ctrRootfs("app", "10Mi", 1), ctrLogs("app", "1Mi", 1))},
			met: []Threshold{thrQ(SignalNodeFsAvailable, "1Gi")},
			obs: Observations{SignalNodeFsAvailable: obsOf("500Mi", "100Gi")},
			wantMsg: "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 500Mi. " +
				"Container fetch was using 701Mi, request is 100Mi, has larger consumption of ephemeral-storage. ",
			wantAnn: annotations("fetch", "701Mi", "ephemeral-storage"),
		},
		{
			// An ephemeral container cannot declare requests; the kubelet leaves it
			// out rather than blame it on every eviction.
			name:     "ephemeral container never named",
			resource: v1.ResourceMemory,
			pod: newTestPod("p",
				withContainer("app", resources("memory", "1Gi"), nil),
				withEphemeralContainer("debug")),
			stats: []statsapi.PodStats{newPodStats(newTestPod("p"),
				ctrWorkingSet("debug", "500Mi"),
				ctrWorkingSet("app", "100Mi"))},
			met:     memMet,
			obs:     memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
			wantAnn: annotations("", "", "memory"),
		},
		{
			// The pod sentence comes first; containers are then judged by their
			// own requests.
			name:     "pod-level request with container requests",
			resource: v1.ResourceMemory,
			pod: podLevel(
				withContainer("app", resources("memory", "256Mi"), nil),
				withContainer("log", resources("memory", "128Mi"), nil)),
			stats: []statsapi.PodStats{newPodStats(newTestPod("web"), podWorkingSet("900Mi"),
				ctrWorkingSet("app", "800Mi"),
				ctrWorkingSet("log", "100Mi"))},
			met: memMet,
			obs: memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Pod web was using 900Mi, request is 512Mi, has larger consumption of memory. " +
				"Container app was using 800Mi, request is 256Mi, has larger consumption of memory. ",
			wantAnn: withPod(annotations("app", "800Mi", "memory"), "web", "900Mi"),
		},
		{
			// Containers without requests are over a request of 0.
			name:     "pod-level request without container requests",
			resource: v1.ResourceMemory,
			pod: podLevel(
				withSidecar("proxy", nil),
				withContainer("app", nil, nil)),
			stats: []statsapi.PodStats{newPodStats(newTestPod("web"), podWorkingSet("700Mi"),
				ctrWorkingSet("app", "600Mi"),
				ctrWorkingSet("proxy", "100Mi"))},
			met: memMet,
			obs: memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Pod web was using 700Mi, request is 512Mi, has larger consumption of memory. " +
				"Container app was using 600Mi, request is 0, has larger consumption of memory. " +
				"Container proxy was using 100Mi, request is 0, has larger consumption of memory. ",
			wantAnn: withPod(annotations("app,proxy", "600Mi,100Mi", "memory"), "web", "700Mi"),
		},
		{
			// The kubelet writes the pod sentence without comparing usage and
			// request.
			name:     "pod within its pod-level request still has the pod sentence",
			resource: v1.ResourceMemory,
			pod:      podLevel(withContainer("app", nil, nil)),
			stats:    []statsapi.PodStats{newPodStats(newTestPod("web"), podWorkingSet("100Mi"))},
			met:      memMet,
			obs:      memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Pod web was using 100Mi, request is 512Mi, has larger consumption of memory. ",
			wantAnn: withPod(annotations("", "", "memory"), "web", "100Mi"),
		},
		{
			name:     "pod memory stats without a working set read as 0",
			resource: v1.ResourceMemory,
			pod:      podLevel(withContainer("app", nil, nil)),
			stats: []statsapi.PodStats{newPodStats(newTestPod("web"), func(ps *statsapi.PodStats) {
				ps.Memory = &statsapi.MemoryStats{}
			})},
			met: memMet,
			obs: memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Pod web was using 0, request is 512Mi, has larger consumption of memory. ",
			wantAnn: withPod(annotations("", "", "memory"), "web", "0"),
		},
		{
			name:     "no pod sentence without pod memory stats",
			resource: v1.ResourceMemory,
			pod:      podLevel(withContainer("app", nil, nil)),
			stats:    []statsapi.PodStats{newPodStats(newTestPod("web"), ctrWorkingSet("app", "1Mi"))},
			met:      memMet,
			obs:      memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Container app was using 1Mi, request is 0, has larger consumption of memory. ",
			wantAnn: annotations("app", "1Mi", "memory"),
		},
		{
			name:     "no pod sentence without a pod-level memory request",
			resource: v1.ResourceMemory,
			pod: newTestPod("web",
				withPodResources(resources("cpu", "1"), resources("memory", "1Gi")),
				withContainer("app", resources("memory", "1Gi"), nil)),
			stats:   []statsapi.PodStats{newPodStats(newTestPod("web"), podWorkingSet("900Mi"), ctrWorkingSet("app", "900Mi"))},
			met:     memMet,
			obs:     memObs,
			wantMsg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
			wantAnn: annotations("", "", "memory"),
		},
		{
			name:     "no pod sentence under disk pressure",
			resource: v1.ResourceEphemeralStorage,
			pod:      podLevel(withContainer("app", nil, nil)),
			stats: []statsapi.PodStats{newPodStats(newTestPod("web"), podWorkingSet("900Mi"),
				ctrRootfs("app", "2Mi", 1), ctrLogs("app", "1Mi", 1))},
			met: []Threshold{thrQ(SignalNodeFsAvailable, "1Gi")},
			obs: Observations{SignalNodeFsAvailable: obsOf("500Mi", "100Gi")},
			wantMsg: "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 500Mi. " +
				"Container app was using 3Mi, request is 0, has larger consumption of ephemeral-storage. ",
			wantAnn: annotations("app", "3Mi", "ephemeral-storage"),
		},
		{
			name:     "ephemeral-storage counts rootfs + logs",
			resource: v1.ResourceEphemeralStorage,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrRootfs("c", "600Mi", 1), ctrLogs("c", "424Mi", 1), volumeUsage("v", "5Gi", 1))},
			met:      []Threshold{thrQ(SignalNodeFsAvailable, "1Gi")},
			obs:      Observations{SignalNodeFsAvailable: obsOf("500Mi", "100Gi")},
			wantMsg: "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 500Mi. " +
				"Container c was using 1Gi, request is 512Mi, has larger consumption of ephemeral-storage. ",
			wantAnn: annotations("c", "1Gi", "ephemeral-storage"),
		},
		{
			name:     "ephemeral-storage needs both rootfs and logs stats",
			resource: v1.ResourceEphemeralStorage,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrRootfs("c", "5Gi", 1))},
			met:      []Threshold{thrQ(SignalNodeFsAvailable, "1Gi")},
			obs:      Observations{SignalNodeFsAvailable: obsOf("500Mi", "100Gi")},
			wantMsg:  "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 500Mi. ",
			wantAnn:  annotations("", "", "ephemeral-storage"),
		},
		{
			name:     "percentage threshold printed as the computed quantity",
			resource: v1.ResourceEphemeralStorage,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrRootfs("c", "1Mi", 1), ctrLogs("c", "1Mi", 1))},
			met:      []Threshold{thrP(SignalNodeFsAvailable, 0.10)},
			obs:      Observations{SignalNodeFsAvailable: obsOf("9Gi", "100Gi")},
			wantMsg:  "The node was low on resource: ephemeral-storage. Threshold quantity: 10737418400, available: 9Gi. ",
			wantAnn:  annotations("", "", "ephemeral-storage"),
		},
		{
			name:     "inodes: threshold only, containers have no inode usage in the message",
			resource: ResourceInodes,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrRootfs("c", "5Gi", 99999), ctrLogs("c", "5Gi", 99999))},
			met:      []Threshold{thrP(SignalNodeFsInodesFree, 0.05)},
			// Observed inodes are DecimalSI quantities: 40000 prints as 40k.
			obs:     Observe(newSummary().nodeFs(fsInfo("100Gi", "50Gi", 1000000, 40000)).build()),
			wantMsg: "The node was low on resource: inodes. Threshold quantity: 50000, available: 40k. ",
			wantAnn: annotations("", "", "inodes"),
		},
		{
			name:     "no threshold for the resource: no threshold sentence",
			resource: v1.ResourceMemory,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrWorkingSet("c", "2Gi"))},
			met:      []Threshold{thrQ(SignalNodeFsAvailable, "1Gi")},
			obs:      Observations{SignalNodeFsAvailable: obsOf("500Mi", "100Gi")},
			wantMsg:  "The node was low on resource: memory. Container c was using 2Gi, request is 1Gi, has larger consumption of memory. ",
			wantAnn:  annotations("c", "2Gi", "memory"),
		},
		{
			name:     "first threshold of the resource that has an observation",
			resource: v1.ResourceMemory,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrWorkingSet("c", "1Mi"))},
			met:      []Threshold{thrQ(SignalAllocatableMemoryAvailable, "1Gi"), thrQ(SignalMemoryAvailable, "100Mi"), thrQ(SignalMemoryAvailable, "2Gi")},
			obs:      memObs,
			wantMsg:  "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
			wantAnn:  annotations("", "", "memory"),
		},
		{
			// The kubelet reports the threshold whether or not available is still
			// below it: a threshold held by its minimum reclaim is reported too.
			name:     "threshold held by minimum reclaim",
			resource: v1.ResourceMemory,
			pod:      onePod,
			stats:    []statsapi.PodStats{newPodStats(onePod, ctrWorkingSet("c", "1Mi"))},
			met:      []Threshold{withMinReclaim(thrQ(SignalMemoryAvailable, "100Mi"), Value{Quantity: qtyp("500Mi")})},
			obs:      Observations{SignalMemoryAvailable: obsOf("300Mi", "8Gi")},
			wantMsg:  "The node was low on resource: memory. Threshold quantity: 100Mi, available: 300Mi. ",
			wantAnn:  annotations("", "", "memory"),
		},
		{
			name:     "pod without stats: no annotation, not even the starved resource",
			resource: v1.ResourceMemory,
			pod:      podLevel(withContainer("app", nil, nil)),
			stats:    nil,
			met:      memMet,
			obs:      memObs,
			wantMsg:  "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
			wantAnn:  map[string]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg, ann := Message(tc.resource, tc.pod, statsOf(tc.stats...), tc.met, tc.obs)
			if diff := cmp.Diff(tc.wantMsg, msg); diff != "" {
				t.Errorf("message mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAnn, ann); diff != "" {
				t.Errorf("annotations mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMessageForRankedPod ties ranking and message together the way a pass does:
// the first pod of the seed's memory ranking is named with its offending container.
func TestMessageForRankedPod(t *testing.T) {
	t.Parallel()
	c := newTestPod("C", burstable("1Gi", "2Gi"))
	b := newTestPod("B", guaranteed("2Gi"))
	stats := statsOf(
		newPodStats(c, podWorkingSet("1800Mi"), ctrWorkingSet("c", "1800Mi")),
		newPodStats(b, podWorkingSet("1900Mi"), ctrWorkingSet("c", "1900Mi")),
	)
	met := []Threshold{graced(thrQ(SignalMemoryAvailable, "100Mi"), time.Minute)}
	first := Rank(SignalMemoryAvailable, NoImageFs, []*v1.Pod{b, c}, stats)[0].Pod
	msg, ann := Message(v1.ResourceMemory, first, stats, met, Observations{SignalMemoryAvailable: obsOf("50Mi", "8Gi")})
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
		"Container c was using 1800Mi, request is 1Gi, has larger consumption of memory. "
	if diff := cmp.Diff(want, msg); diff != "" {
		t.Errorf("message mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("C", first.Name); diff != "" {
		t.Errorf("first ranked pod mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("1800Mi", ann[OffendingContainersUsageKey]); diff != "" {
		t.Errorf("usage annotation mismatch (-want +got):\n%s", diff)
	}
}
