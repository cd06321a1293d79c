package eviction

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestAdmit(t *testing.T) {
	t.Parallel()
	memory := []v1.NodeConditionType{v1.NodeMemoryPressure}
	disk := []v1.NodeConditionType{v1.NodeDiskPressure}
	pid := []v1.NodeConditionType{v1.NodePIDPressure}
	memoryAndDisk := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure}

	admitted := AdmitResult{Admit: true}
	rejected := func(msg string) AdmitResult { return AdmitResult{Reason: "Evicted", Message: msg} }

	tolerateMemory := v1.Toleration{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}
	tolerateEverything := v1.Toleration{Operator: v1.TolerationOpExists}

	be := func(opts ...podOpt) *v1.Pod { return newTestPod("be", append([]podOpt{bestEffort()}, opts...)...) }
	burst := newTestPod("burstable", burstable("1Gi", "2Gi"))
	guar := newTestPod("guaranteed", guaranteed("1Gi"))

	tests := []struct {
		name       string
		pod        *v1.Pod
		conditions []v1.NodeConditionType
		want       AdmitResult
	}{
		{name: "no conditions: BestEffort admitted", pod: be(), conditions: nil, want: admitted},
		{name: "no conditions: empty list", pod: be(), conditions: []v1.NodeConditionType{}, want: admitted},

		{name: "MemoryPressure rejects BestEffort", pod: be(), conditions: memory, want: rejected("The node had condition: [MemoryPressure]. ")},
		{name: "MemoryPressure admits Burstable", pod: burst, conditions: memory, want: admitted},
		{name: "MemoryPressure admits Guaranteed", pod: guar, conditions: memory, want: admitted},
		{name: "MemoryPressure admits BestEffort tolerating the taint", pod: be(withTolerations(tolerateMemory)), conditions: memory, want: admitted},
		{
			name:       "MemoryPressure admits BestEffort tolerating everything (Exists, no key)",
			pod:        be(withTolerations(tolerateEverything)),
			conditions: memory,
			want:       admitted,
		},
		{
			name:       "MemoryPressure admits BestEffort tolerating the key for every effect",
			pod:        be(withTolerations(v1.Toleration{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists})),
			conditions: memory,
			want:       admitted,
		},
		{
			name: "MemoryPressure admits BestEffort tolerating by Equal with an empty value",
			pod: be(withTolerations(v1.Toleration{
				Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpEqual, Effect: v1.TaintEffectNoSchedule,
			})),
			conditions: memory,
			want:       admitted,
		},
		{
			name: "a NoExecute toleration does not tolerate the NoSchedule taint",
			pod: be(withTolerations(v1.Toleration{
				Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute,
			})),
			conditions: memory,
			want:       rejected("The node had condition: [MemoryPressure]. "),
		},
		{
			name: "a disk-pressure toleration does not help under MemoryPressure",
			pod: be(withTolerations(v1.Toleration{
				Key: v1.TaintNodeDiskPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule,
			})),
			conditions: memory,
			want:       rejected("The node had condition: [MemoryPressure]. "),
		},

		{name: "DiskPressure rejects Burstable", pod: burst, conditions: disk, want: rejected("The node had condition: [DiskPressure]. ")},
		{name: "DiskPressure rejects Guaranteed", pod: guar, conditions: disk, want: rejected("The node had condition: [DiskPressure]. ")},
		{name: "DiskPressure rejects even a pod tolerating everything", pod: be(withTolerations(tolerateEverything)), conditions: disk, want: rejected("The node had condition: [DiskPressure]. ")},
		{name: "PIDPressure rejects Guaranteed", pod: guar, conditions: pid, want: rejected("The node had condition: [PIDPressure]. ")},

		{name: "two conditions reject Burstable", pod: burst, conditions: memoryAndDisk, want: rejected("The node had condition: [MemoryPressure DiskPressure]. ")},
		{
			name:       "two conditions reject BestEffort tolerating memory pressure",
			pod:        be(withTolerations(tolerateMemory)),
			conditions: memoryAndDisk,
			want:       rejected("The node had condition: [MemoryPressure DiskPressure]. "),
		},

		{name: "critical: static pod under two conditions", pod: be(withAnnotation("kubernetes.io/config.source", "file")), conditions: memoryAndDisk, want: admitted},
		{name: "critical: static pod from http", pod: be(withAnnotation("kubernetes.io/config.source", "http")), conditions: disk, want: admitted},
		{name: "critical: mirror pod", pod: be(withAnnotation("kubernetes.io/config.mirror", "abc")), conditions: disk, want: admitted},
		{name: "critical: priority 2e9", pod: be(withPriority(2_000_000_000)), conditions: memory, want: admitted},
		{name: "critical: system-node-critical priority", pod: be(withPriority(2_000_001_000)), conditions: pid, want: admitted},
		{name: "not critical: priority just below 2e9", pod: be(withPriority(1_999_999_999)), conditions: memory, want: rejected("The node had condition: [MemoryPressure]. ")},
		{name: "not critical: config source api", pod: be(withAnnotation("kubernetes.io/config.source", "api")), conditions: memory, want: rejected("The node had condition: [MemoryPressure]. ")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, Admit(tc.pod, tc.conditions)); diff != "" {
				t.Errorf("Admit() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
