package criconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestLimitedSwapFormula: the kubelet's calcSwapForBurstablePods, a
// container's share of the swap its share of the memory, truncated; none
// when the node memory is unknown or the request exceeds it.
func TestLimitedSwapFormula(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		request, memory, swap int64
		want                  int64
		wantOK                bool
	}{
		{"a quarter of the memory", 1 << 30, 4 << 30, 2 << 30, 512 << 20, true},
		{"truncated", 1, 3, 100, 33, true},
		{"no swap on the node", 1 << 30, 4 << 30, 0, 0, true},
		{"no request", 0, 4 << 30, 2 << 30, 0, true},
		{"the whole memory", 4 << 30, 4 << 30, 1 << 30, 1 << 30, true},
		{"request above the memory", 5 << 30, 4 << 30, 1 << 30, 0, false},
		{"unknown memory", 1 << 30, 0, 1 << 30, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := limitedSwap(tc.request, tc.memory, tc.swap)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("limitedSwap(%d, %d, %d) = %d, %v; want %d, %v", tc.request, tc.memory, tc.swap, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestApplySwap: which containers LimitedSwap gives swap (Burstable, not
// critical, memory requested or limited, request other than the limit), the
// NoSwap of everyone else (memory.swap.max 0 on v2, memory+swap = memory on
// v1), and nothing where the kernel has no swap controller.
func TestApplySwap(t *testing.T) {
	t.Parallel()
	const (
		memory = 8 << 30
		swap   = 2 << 30
	)
	v2Limited := Swap{Controller: true, CgroupV2: true, Limited: true, Capacity: swap}
	v2No := Swap{Controller: true, CgroupV2: true, Capacity: swap}
	onV1 := Swap{Controller: true, Capacity: swap}
	res := func(req, lim v1.ResourceList) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: req, Limits: lim} }
	}
	unified := func(v string) map[string]string { return map[string]string{"memory.swap.max": v} }
	priority := int32(2_000_000_000)
	for _, tc := range []struct {
		name        string
		pod         *v1.Pod
		swap        Swap
		wantUnified map[string]string
		wantMemSwap int64
	}{
		{"burstable, request below limit", testPod(res(rl("memory", "1Gi"), rl("memory", "2Gi"))), v2Limited, unified("268435456"), 0},
		{"burstable, request only", testPod(res(rl("memory", "2Gi"), nil)), v2Limited, unified("536870912"), 0},
		{"burstable, limit only (request taken as 0)", testPod(res(nil, rl("memory", "1Gi"))), v2Limited, unified("0"), 0},
		{"burstable, request equal to limit", testPod(res(rl("cpu", "1", "memory", "1Gi"), rl("memory", "1Gi"))), v2Limited, unified("0"), 0},
		{"burstable, cpu only", testPod(res(rl("cpu", "1"), nil)), v2Limited, unified("0"), 0},
		{"guaranteed", testPod(res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), v2Limited, unified("0"), 0},
		{"best effort", testPod(), v2Limited, unified("0"), 0},
		{"critical by priority", testPod(res(rl("memory", "1Gi"), nil), func(p *v1.Pod) { p.Spec.Priority = &priority }), v2Limited, unified("0"), 0},
		{"static pod", testPod(res(rl("memory", "1Gi"), nil), func(p *v1.Pod) {
			p.Annotations["kubernetes.io/config.source"] = "file"
		}), v2Limited, unified("0"), 0},
		{"NoSwap on v2", testPod(res(rl("memory", "1Gi"), rl("memory", "2Gi"))), v2No, unified("0"), 0},
		{"request above the node's memory", testPod(res(rl("memory", "16Gi"), nil)), v2Limited, unified("0"), 0},
		{"v1 with a memory limit", testPod(res(rl("memory", "1Gi"), rl("memory", "2Gi"))), onV1, nil, 2 << 30},
		{"v1 without a memory limit", testPod(res(rl("memory", "1Gi"), nil)), onV1, nil, 0},
		{"v2 without a swap controller", testPod(res(rl("memory", "1Gi"), nil)), Swap{CgroupV2: true, Limited: true, Capacity: swap}, nil, 0},
		{"v1 without a swap controller", testPod(res(rl("memory", "1Gi"), rl("memory", "2Gi"))), Swap{Capacity: swap}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &tc.pod.Spec.Containers[0]
			r := containerResources(tc.pod, c, memory, false)
			want := containerResources(tc.pod, c, memory, false)
			want.Unified, want.MemorySwapLimitInBytes = tc.wantUnified, tc.wantMemSwap
			applySwap(r, tc.pod, c, memory, tc.swap)
			if diff := cmp.Diff(want, r, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplySwapKeepsUnified: the swap limit is added to the unified
// settings already there.
func TestApplySwapKeepsUnified(t *testing.T) {
	t.Parallel()
	pod := testPod()
	r := &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.oom.group": "1"}}
	applySwap(r, pod, &pod.Spec.Containers[0], 1<<30, Swap{Controller: true, CgroupV2: true})
	if diff := cmp.Diff(map[string]string{"memory.oom.group": "1", "memory.swap.max": "0"}, r.Unified); diff != "" {
		t.Errorf("Unified (-want +got):\n%s", diff)
	}
}

// TestContainerConfigSwap: the swap limit reaches the container's CRI
// config.
func TestContainerConfigSwap(t *testing.T) {
	t.Parallel()
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: rl("memory", "1Gi"), Limits: rl("memory", "2Gi")}
	})
	cfg, err := Container(Input{Pod: pod, Container: &pod.Spec.Containers[0], MemoryCapacity: 4 << 30, CPUs: 1,
		Swap: Swap{Controller: true, CgroupV2: true, Limited: true, Capacity: 1 << 30}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Linux.Resources.Unified["memory.swap.max"]; got != "268435456" {
		t.Errorf("memory.swap.max = %q, want 268435456 (1Gi / 4Gi * 1Gi)", got)
	}
}
