package qos

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

const gi = int64(1) << 30

func TestOOMScoreAdj(t *testing.T) {
	t.Parallel()
	guaranteed := list(t, "cpu", "500m", "memory", "1Gi")
	cpuOnly := list(t, "cpu", "100m")
	mem := func(q string) v1.ResourceList { return list(t, "memory", q) }
	tests := []struct {
		name      string
		pod       *v1.Pod
		container string // name of the container to score; "" for the first regular one
		capacity  int64
		want      int
	}{
		{
			name:     "seed example: 4Gi request on a 30Gi node",
			pod:      newPod(ctrs(ctr("c", list(t, "cpu", "250m", "memory", "4Gi"), mem("8Gi")))),
			capacity: 30 * gi,
			want:     867,
		},
		{
			name:     "best effort",
			pod:      newPod(ctrs(ctr("a", nil, nil))),
			capacity: 30 * gi,
			want:     1000,
		},
		{
			name:     "guaranteed",
			pod:      newPod(ctrs(ctr("b", guaranteed, guaranteed))),
			capacity: 30 * gi,
			want:     -997,
		},
		{
			name:     "guaranteed from limits only",
			pod:      newPod(ctrs(ctr("b", nil, guaranteed))),
			capacity: 30 * gi,
			want:     -997,
		},
		{
			name:     "memory request defaults to the limit",
			pod:      newPod(ctrs(ctr("c", cpuOnly, mem("4Gi")))),
			capacity: 30 * gi,
			want:     867,
		},
		{
			name:     "floor is 3, not the seed's 2",
			pod:      newPod(ctrs(ctr("c", mem("998"), nil))),
			capacity: 1000,
			want:     3,
		},
		{
			name:     "just above the floor",
			pod:      newPod(ctrs(ctr("c", mem("996"), nil))),
			capacity: 1000,
			want:     4,
		},
		{
			name:     "request equal to capacity",
			pod:      newPod(ctrs(ctr("c", mem("1Gi"), nil))),
			capacity: gi,
			want:     3,
		},
		{
			name:     "request above capacity",
			pod:      newPod(ctrs(ctr("c", mem("64Gi"), nil))),
			capacity: gi,
			want:     3,
		},
		{
			name:     "no memory request (cpu only) is capped at 999",
			pod:      newPod(ctrs(ctr("c", cpuOnly, nil))),
			capacity: 30 * gi,
			want:     999,
		},
		{
			name:     "request below one score point is capped at 999",
			pod:      newPod(ctrs(ctr("c", mem("30Mi"), nil))),
			capacity: 30 * gi,
			want:     999,
		},
		{
			name:     "integer division truncates",
			pod:      newPod(ctrs(ctr("c", mem("1999"), nil))),
			capacity: 1_000_000,
			want:     999, // 1000 - 1 = 999, not 998
		},
		{
			name:     "huge values do not overflow",
			pod:      newPod(ctrs(ctr("c", mem("6Ei"), nil))),
			capacity: 7 << 60,
			want:     143, // 1000 - 6000/7
		},
		{
			name:      "each container scores its own request",
			pod:       newPod(ctrs(ctr("small", mem("1Gi"), nil), ctr("big", mem("4Gi"), nil))),
			container: "small",
			capacity:  30 * gi,
			want:      967,
		},
		{
			name:      "sidecar is capped at the score of the smallest regular request",
			pod:       newPod(ctrs(ctr("small", mem("1Gi"), nil), ctr("big", mem("4Gi"), nil)), withInit(sidecar("proxy", cpuOnly, nil))),
			container: "proxy",
			capacity:  30 * gi,
			want:      967,
		},
		{
			name:      "sidecar below the cap keeps its own score",
			pod:       newPod(ctrs(ctr("small", mem("1Gi"), nil), ctr("big", mem("4Gi"), nil)), withInit(sidecar("proxy", mem("8Gi"), nil))),
			container: "proxy",
			capacity:  30 * gi,
			want:      734,
		},
		{
			name:      "sidecar cap where a regular container requests nothing",
			pod:       newPod(ctrs(ctr("a", cpuOnly, nil), ctr("b", mem("4Gi"), nil)), withInit(sidecar("proxy", cpuOnly, nil))),
			container: "proxy",
			capacity:  30 * gi,
			want:      999,
		},
		{
			name:      "non-restartable init container is not capped",
			pod:       newPod(ctrs(ctr("small", mem("1Gi"), nil)), withInit(ctr("setup", cpuOnly, nil))),
			container: "setup",
			capacity:  30 * gi,
			want:      999,
		},
		{
			name:     "node-critical best-effort pod",
			pod:      newPod(ctrs(ctr("a", nil, nil)), withPriority(2_000_001_000, "system-node-critical")),
			capacity: 30 * gi,
			want:     -997,
		},
		{
			name:     "node-critical burstable static pod without priority",
			pod:      newPod(ctrs(ctr("a", mem("4Gi"), nil)), withAnnotation(ConfigSourceAnnotation, "file"), withPriorityClassName("system-node-critical")),
			capacity: 30 * gi,
			want:     -997,
		},
		{
			name:     "cluster-critical pod is scored by its class",
			pod:      newPod(ctrs(ctr("a", nil, nil)), withPriority(2_000_000_000, "system-cluster-critical")),
			capacity: 30 * gi,
			want:     1000,
		},
		{
			name:     "node-critical class name without critical priority",
			pod:      newPod(ctrs(ctr("a", nil, nil)), withPriority(1000, "system-node-critical")),
			capacity: 30 * gi,
			want:     1000,
		},
		{
			name: "pod-level memory request split over containers",
			// 6Gi - 1Gi assigned = 5Gi, 2.5Gi each: 1Gi+2.5Gi -> 1000-116 = 884.
			pod: newPod(ctrs(ctr("a", mem("1Gi"), nil), ctr("b", nil, nil)),
				withPodResources(list(t, "cpu", "1", "memory", "6Gi"), nil)),
			container: "a",
			capacity:  30 * gi,
			want:      884,
		},
		{
			name: "pod-level share for a container without a request",
			// 2.5Gi -> 1000-83 = 917.
			pod: newPod(ctrs(ctr("a", mem("1Gi"), nil), ctr("b", nil, nil)),
				withPodResources(list(t, "cpu", "1", "memory", "6Gi"), nil)),
			container: "b",
			capacity:  30 * gi,
			want:      917,
		},
		{
			name: "pod-level share counts init containers",
			// 6Gi over two containers (init + regular): 3Gi -> 900.
			pod: newPod(ctrs(ctr("a", nil, nil)), withInit(ctr("setup", nil, nil)),
				withPodResources(mem("6Gi"), nil)),
			container: "a",
			capacity:  30 * gi,
			want:      900,
		},
		{
			name: "pod-level cpu request only adds no memory",
			pod: newPod(ctrs(ctr("a", mem("4Gi"), nil)),
				withPodResources(list(t, "cpu", "1"), nil)),
			container: "a",
			capacity:  30 * gi,
			want:      867,
		},
		{
			name: "sidecar cap includes the pod-level share",
			// 5Gi - 1Gi = 4Gi, 2Gi each. Sidecar: 2Gi -> 934, capped at 1Gi+2Gi -> 900.
			pod: newPod(ctrs(ctr("a", mem("1Gi"), nil)), withInit(sidecar("proxy", nil, nil)),
				withPodResources(mem("5Gi"), nil)),
			container: "proxy",
			capacity:  30 * gi,
			want:      900,
		},
		{
			name: "pod-level limits only default the requests: guaranteed",
			pod: newPod(ctrs(ctr("a", nil, nil)),
				withPodResources(nil, list(t, "cpu", "2", "memory", "12Gi"))),
			container: "a",
			capacity:  30 * gi,
			want:      -997,
		},
		{
			name: "pod-level memory limit defaults the request to it",
			// Pod request defaults to 12Gi; with only a cpu request the pod is Burstable: 1000-400 = 600.
			pod: newPod(ctrs(ctr("a", nil, nil)),
				withPodResources(list(t, "cpu", "1"), mem("12Gi"))),
			container: "a",
			capacity:  30 * gi,
			want:      600,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := find(t, tc.pod, tc.container)
			before := tc.pod.DeepCopy()
			got := OOMScoreAdj(tc.pod, c, tc.capacity)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("OOMScoreAdj(%s) (-want +got):\n%s", c.Name, diff)
			}
			if !equality.Semantic.DeepEqual(before, tc.pod) {
				t.Errorf("OOMScoreAdj modified the pod")
			}
		})
	}
}

// find returns a pointer into pod to the named container, or the first regular one for "".
func find(t *testing.T, pod *v1.Pod, name string) *v1.Container {
	t.Helper()
	if name == "" {
		return &pod.Spec.Containers[0]
	}
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	t.Fatalf("pod has no container %q", name)
	return nil
}

// TestOOMScoreAdjContainerByName checks that a container passed as a copy, not as
// a pointer into the pod, is still recognised, including as a sidecar.
func TestOOMScoreAdjContainerByName(t *testing.T) {
	t.Parallel()
	pod := newPod(ctrs(ctr("small", list(t, "memory", "1Gi"), nil), ctr("big", list(t, "memory", "4Gi"), nil)),
		withInit(sidecar("proxy", list(t, "cpu", "100m"), nil)))
	tests := []struct {
		name string
		c    v1.Container
		want int
	}{
		{name: "sidecar copy", c: *pod.Spec.InitContainers[0].DeepCopy(), want: 967},
		{name: "regular copy", c: *pod.Spec.Containers[1].DeepCopy(), want: 867},
		{name: "unknown container scored alone", c: ctr("other", nil, list(t, "memory", "4Gi")), want: 867},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, OOMScoreAdj(pod, &tc.c, 30*gi)); diff != "" {
				t.Errorf("OOMScoreAdj(%s) (-want +got):\n%s", tc.c.Name, diff)
			}
		})
	}
}

func TestOOMScoreAdjCapacity(t *testing.T) {
	t.Parallel()
	t.Run("guaranteed and best effort need no capacity", func(t *testing.T) {
		t.Parallel()
		g := list(t, "cpu", "1", "memory", "1Gi")
		gp := newPod(ctrs(ctr("g", g, g)))
		bp := newPod(ctrs(ctr("b", nil, nil)))
		got := []int{OOMScoreAdj(gp, &gp.Spec.Containers[0], 0), OOMScoreAdj(bp, &bp.Spec.Containers[0], 0)}
		if diff := cmp.Diff([]int{GuaranteedOOMScoreAdj, BestEffortOOMScoreAdj}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	for _, capacity := range []int64{0, -1} {
		t.Run("burstable panics on capacity "+resource.NewQuantity(capacity, resource.BinarySI).String(), func(t *testing.T) {
			t.Parallel()
			p := newPod(ctrs(ctr("c", list(t, "memory", "1Gi"), nil)))
			defer func() {
				if recover() == nil {
					t.Errorf("OOMScoreAdj with capacity %d did not panic", capacity)
				}
			}()
			OOMScoreAdj(p, &p.Spec.Containers[0], capacity)
		})
	}
}

func TestOOMScoreAdjConstants(t *testing.T) {
	t.Parallel()
	got := []int{KubeletOOMScoreAdj, KubeProxyOOMScoreAdj, GuaranteedOOMScoreAdj, BestEffortOOMScoreAdj, burstableMinOOMScoreAdj, burstableMaxOOMScoreAdj}
	if diff := cmp.Diff([]int{-999, -999, -997, 1000, 3, 999}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
