package preemption

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestPreemptable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		preemptor, preemptee *v1.Pod
		want                 bool
	}{
		{"static preempts plain", newPod("a", static()), newPod("b"), true},
		{"mirror preempts plain", newPod("a", mirror()), newPod("b"), true},
		{"critical priority preempts plain", newPod("a", priority(2_000_000_000)), newPod("b"), true},
		{"just below critical priority preempts lower", newPod("a", priority(1_999_999_999)), newPod("b", priority(5)), true},
		{"just below critical priority does not preempt unset priority", newPod("a", priority(1_999_999_999)), newPod("b"), false},
		{"plain does not preempt plain", newPod("a"), newPod("b"), false},
		{"equal priority", newPod("a", priority(10)), newPod("b", priority(10)), false},
		{"higher priority", newPod("a", priority(11)), newPod("b", priority(10)), true},
		{"lower priority", newPod("a", priority(9)), newPod("b", priority(10)), false},
		{"static does not preempt static", newPod("a", static()), newPod("b", static()), false},
		{"static without priority does not preempt critical priority", newPod("a", static()), newPod("b", priority(2_000_000_000)), false},
		{"critical priority preempts lower critical priority", newPod("a", priority(2_000_001_000)), newPod("b", priority(2_000_000_000)), true},
		{"static with priority preempts static with lower", newPod("a", static(), priority(3)), newPod("b", mirror(), priority(2)), true},
		{"critical preempts nil", newPod("a", static()), nil, true},
		{"priority does not preempt nil", newPod("a", priority(1)), nil, false},
		{"nil preemptor", nil, newPod("b"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Preemptable(tc.preemptor, tc.preemptee); got != tc.want {
				t.Errorf("Preemptable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsCritical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		pod  *v1.Pod
		want bool
	}{
		{"plain", newPod("a"), false},
		{"static", newPod("a", static()), true},
		{"api source", newPod("a", func(p *v1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.source": "api"} }), false},
		{"mirror", newPod("a", mirror()), true},
		{"system-cluster-critical", newPod("a", priority(2_000_000_000)), true},
		{"high user priority", newPod("a", priority(1_000_000_000)), false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := IsCritical(tc.pod); got != tc.want {
				t.Errorf("IsCritical = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequest(t *testing.T) {
	t.Parallel()
	withInit := newPod("init", burstable("cpu", "100m", "memory", "100Mi"), func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Requests: list("cpu", "1", "memory", "50Mi")}}}
		p.Spec.Overhead = list("cpu", "10m", "memory", "1Mi")
	})
	sidecar := newPod("sidecar", burstable("cpu", "100m"), func(p *v1.Pod) {
		always := v1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []v1.Container{{Name: "s", RestartPolicy: &always, Resources: v1.ResourceRequirements{Requests: list("cpu", "200m")}}}
	})
	huge := newPod("huge", burstable("memory", "8Ei", "cpu", "9223372036854775"), func(p *v1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, *p.Spec.Containers[0].DeepCopy())
	})
	tests := []struct {
		name string
		pod  *v1.Pod
		res  v1.ResourceName
		want int64
	}{
		{"pods is one", newPod("a"), v1.ResourcePods, 1},
		{"memory sum beyond int64 saturates", huge, v1.ResourceMemory, math.MaxInt64},
		{"millicores beyond int64 saturate", huge, v1.ResourceCPU, math.MaxInt64},
		{"cpu in millicores", newPod("a", burstable("cpu", "1.5")), v1.ResourceCPU, 1500},
		{"memory in bytes", newPod("a", burstable("memory", "1Ki")), v1.ResourceMemory, 1024},
		{"absent", newPod("a", burstable("memory", "1Ki")), v1.ResourceCPU, 0},
		{"extended", newPod("a", burstable("example.com/gpu", "2")), "example.com/gpu", 2},
		{"init container max plus overhead cpu", withInit, v1.ResourceCPU, 1010},
		{"init container max plus overhead memory", withInit, v1.ResourceMemory, 101 << 20},
		{"sidecar adds up", sidecar, v1.ResourceCPU, 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Request(tc.pod, tc.res); got != tc.want {
				t.Errorf("Request(%s) = %d, want %d", tc.res, got, tc.want)
			}
			// Victim selection's allocation-free path agrees.
			out := []int64{-1}
			if requestsOf(tc.pod, []v1.ResourceName{tc.res}, out); out[0] != tc.want {
				t.Errorf("requestsOf(%s) = %d, want %d", tc.res, out[0], tc.want)
			}
		})
	}
}

func TestInsufficientResource(t *testing.T) {
	t.Parallel()
	e := &InsufficientResource{ResourceName: v1.ResourceCPU, Requested: 500, Used: 3800, Capacity: 4000}
	if diff := cmp.Diff("Node didn't have enough resource: cpu, requested: 500, used: 3800, capacity: 4000", e.Error()); diff != "" {
		t.Errorf("Error (-want +got):\n%s", diff)
	}
	if got := e.Insufficient(); got != 300 {
		t.Errorf("Insufficient = %d, want 300", got)
	}
	// A request capped at the int64 maximum on an over-committed node saturates.
	over := &InsufficientResource{ResourceName: v1.ResourceMemory, Requested: math.MaxInt64, Used: 10, Capacity: 4}
	if got := over.Insufficient(); got != math.MaxInt64 {
		t.Errorf("Insufficient of a saturated request = %d, want math.MaxInt64", got)
	}
	rs := Requirements{{v1.ResourceCPU, 300}, {v1.ResourceMemory, 1024}}
	if diff := cmp.Diff("[(res: cpu, q: 300), (res: memory, q: 1024), ]", rs.String()); diff != "" {
		t.Errorf("String (-want +got):\n%s", diff)
	}
}

// The cases of the seed (004) and of the kubelet's documented behaviour.
func TestSelectVictims(t *testing.T) {
	t.Parallel()
	critical := newPod("critical", static())
	mi := func(n int64) int64 { return n << 20 }

	be1, be2, be3 := newPod("be1"), newPod("be2"), newPod("be3")
	bu100 := newPod("bu100", burstable("memory", "100Mi"))
	bu250 := newPod("bu250", burstable("memory", "250Mi"))
	bu300 := newPod("bu300", burstable("memory", "300Mi"))
	g500 := newPod("g500", guaranteed("cpu", "1", "memory", "500Mi"))
	g800 := newPod("g800", guaranteed("cpu", "1", "memory", "800Mi"))

	tests := []struct {
		name      string
		preemptor *v1.Pod
		pods      []*v1.Pod
		reqs      Requirements
		want      []string
		wantErr   string
	}{
		{
			name:      "nothing required",
			preemptor: critical,
			pods:      []*v1.Pod{be1, bu100},
			reqs:      nil,
			want:      nil,
		},
		{
			name:      "requirements already met are ignored",
			preemptor: critical,
			pods:      []*v1.Pod{be1},
			reqs:      Requirements{{v1.ResourceMemory, 0}, {v1.ResourceCPU, -5}},
			want:      nil,
		},
		{
			// The seed's example: 200Mi of memory missing; one pod of 250Mi frees it.
			name:      "one pod covering the requirement beats a smaller one",
			preemptor: critical,
			pods:      []*v1.Pod{bu100, bu250, bu300},
			reqs:      Requirements{{v1.ResourceMemory, mi(200)}},
			want:      []string{"bu250"},
		},
		{
			name:      "besteffort pods only free pod slots",
			preemptor: critical,
			pods:      []*v1.Pod{be1, be2, be3, bu100},
			reqs:      Requirements{{v1.ResourcePods, 1}},
			want:      []string{"be3"}, // every besteffort pod ties; the last one scanned wins
		},
		{
			name:      "pod slots: besteffort before burstable",
			preemptor: critical,
			pods:      []*v1.Pod{bu100, be1, g500, be2},
			reqs:      Requirements{{v1.ResourcePods, 3}},
			// Guaranteed pass: none needed (3 slots from be+bu). Burstable pass: 3-2 = 1.
			want: []string{"be2", "be1", "bu100"},
		},
		{
			// Seed case 2: all besteffort pods and part of the burstable ones.
			name:      "all besteffort and some burstable, returned besteffort first",
			preemptor: critical,
			pods:      []*v1.Pod{bu100, bu300, be1, be2, g500},
			reqs:      Requirements{{v1.ResourcePods, 3}, {v1.ResourceMemory, mi(250)}},
			want:      []string{"be2", "be1", "bu300"},
		},
		{
			// Guaranteed pods are needed: choose them assuming all besteffort and
			// burstable pods go, then the fewest burstable ones on top.
			name:      "guaranteed pass first, then burstable",
			preemptor: critical,
			pods:      []*v1.Pod{be1, bu300, g500, g800},
			reqs:      Requirements{{v1.ResourceMemory, mi(1024)}},
			want:      []string{"bu300", "g800"},
		},
		{
			name:      "needs everything",
			preemptor: critical,
			pods:      []*v1.Pod{be1, bu300, g500, g800},
			reqs:      Requirements{{v1.ResourceMemory, mi(1600)}, {v1.ResourcePods, 4}},
			want:      []string{"be1", "bu300", "g800", "g500"}, // g800 is closer to the 1300Mi left
		},
		{
			name:      "impossible",
			preemptor: critical,
			pods:      []*v1.Pod{be1, bu300, g500},
			reqs:      Requirements{{v1.ResourceMemory, mi(1000)}, {v1.ResourceCPU, 500}},
			wantErr:   "no set of running pods found to reclaim resources: [(res: memory, q: 209715200), ]",
		},
		{
			name:      "no candidates",
			preemptor: critical,
			pods:      nil,
			reqs:      Requirements{{v1.ResourceCPU, 1}},
			wantErr:   "no set of running pods found to reclaim resources: [(res: cpu, q: 1), ]",
		},
		{
			name:      "critical pods are not candidates",
			preemptor: critical,
			pods:      []*v1.Pod{newPod("s", static(), burstable("memory", "1Gi")), newPod("m", mirror(), burstable("memory", "1Gi")), newPod("p", priority(2_000_000_000), burstable("memory", "1Gi"))},
			reqs:      Requirements{{v1.ResourceMemory, 1}},
			wantErr:   "no set of running pods found to reclaim resources: [(res: memory, q: 1), ]",
		},
		{
			name:      "a higher priority critical pod may preempt a lower critical one",
			preemptor: newPod("node-critical", priority(2_000_001_000)),
			pods:      []*v1.Pod{newPod("s", static(), burstable("memory", "1Gi")), newPod("p", priority(2_000_000_000), burstable("memory", "1Gi"))},
			reqs:      Requirements{{v1.ResourceMemory, 1}},
			want:      []string{"p"},
		},
		{
			// A pod that requests none of the needed resource is at distance 1 and
			// is never chosen while a pod that helps is left.
			name:      "pods requesting none of the resource are not chosen",
			preemptor: critical,
			pods: []*v1.Pod{
				newPod("memonly", burstable("memory", "1Gi")),
				newPod("cpu600mem100", burstable("cpu", "600m", "memory", "100Mi")),
				newPod("cpu600", burstable("cpu", "600m")),
			},
			reqs: Requirements{{v1.ResourceCPU, 1000}},
			// Both cpu pods are at distance 0.16; the one with less memory goes first.
			want: []string{"cpu600", "cpu600mem100"},
		},
		{
			name:      "tie on distance and memory goes to less cpu",
			preemptor: critical,
			pods: []*v1.Pod{
				newPod("big", burstable("cpu", "2", "memory", "1Gi")),
				newPod("small", burstable("cpu", "1", "memory", "1Gi")),
				newPod("big2", burstable("cpu", "3", "memory", "1Gi")),
			},
			reqs: Requirements{{v1.ResourceMemory, mi(512)}},
			want: []string{"small"},
		},
		{
			name:      "smallest distance over two resources",
			preemptor: critical,
			pods: []*v1.Pod{
				newPod("cpuheavy", burstable("cpu", "2", "memory", "100Mi")),
				newPod("balanced", burstable("cpu", "1", "memory", "1Gi")),
				newPod("memheavy", burstable("cpu", "100m", "memory", "2Gi")),
			},
			reqs: Requirements{{v1.ResourceCPU, 1000}, {v1.ResourceMemory, mi(1024)}},
			want: []string{"balanced"},
		},
		{
			name:      "greedy step by step",
			preemptor: critical,
			pods: []*v1.Pod{
				newPod("a", burstable("cpu", "500m")),
				newPod("b", burstable("cpu", "300m")),
				newPod("c", burstable("cpu", "200m")),
				newPod("d", burstable("cpu", "100m")),
			},
			reqs: Requirements{{v1.ResourceCPU, 700}},
			// 700 needed: a is closest ((200/700)² = 0.08). 200 left: b and c both
			// cover it (distance 0) and request no memory; c requests less cpu.
			want: []string{"a", "c"},
		},
		{
			name:      "extended resources and ephemeral storage",
			preemptor: critical,
			pods: []*v1.Pod{
				newPod("gpu-be", burstable("example.com/gpu", "1")), // BestEffort: no cpu or memory
				newPod("disk", burstable("ephemeral-storage", "1Gi", "cpu", "10m")),
			},
			reqs: Requirements{{"example.com/gpu", 1}, {v1.ResourceEphemeralStorage, 1 << 30}},
			want: []string{"gpu-be", "disk"},
		},
		{
			name:      "lower priority pods only, for a non-critical preemptor",
			preemptor: newPod("p10", priority(10)),
			pods: []*v1.Pod{
				newPod("p5", priority(5), burstable("cpu", "1")),
				newPod("p10b", priority(10), burstable("cpu", "1")),
				newPod("nopriority", burstable("cpu", "1")),
			},
			reqs: Requirements{{v1.ResourceCPU, 1000}},
			want: []string{"p5"},
		},
		{
			name:      "nil pods are skipped",
			preemptor: critical,
			pods:      []*v1.Pod{nil, be1},
			reqs:      Requirements{{v1.ResourcePods, 1}},
			want:      []string{"be1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := SelectVictims(tc.preemptor, tc.pods, tc.reqs)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrNoVictims) {
					t.Fatalf("err = %v, want %q wrapping ErrNoVictims", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SelectVictims: %v", err)
			}
			if diff := cmp.Diff(tc.want, names(got)); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
			ref, err := referenceSelect(tc.preemptor, tc.pods[:len(tc.pods):len(tc.pods)], tc.reqs)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			if diff := cmp.Diff(names(ref), names(got)); diff != "" {
				t.Errorf("differs from the kubelet's algorithm (-reference +got):\n%s", diff)
			}
		})
	}
}

// Ties on distance, memory and cpu follow the kubelet's scan with swap-removal:
// the last tied pod in the current slice order wins, and the removed slot is
// filled by the last pod.
func TestSelectVictimsTieOrder(t *testing.T) {
	t.Parallel()
	critical := newPod("critical", static())
	var pods []*v1.Pod
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		pods = append(pods, newPod(n, burstable("cpu", "100m")))
	}
	// Slice a b c d e: pick e (last). a b c d: pick d. a b c: pick c.
	got, err := SelectVictims(critical, pods, Requirements{{v1.ResourceCPU, 300}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"e", "d", "c"}, names(got)); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
	// Mixed shapes: x (200m) is picked first from the middle, and the last pod moves
	// into its slot, which changes which equal pod is "last".
	pods = []*v1.Pod{
		newPod("p1", burstable("cpu", "100m")),
		newPod("x", burstable("cpu", "300m")),
		newPod("p2", burstable("cpu", "100m")),
		newPod("p3", burstable("cpu", "100m")),
	}
	got, err = SelectVictims(critical, pods, Requirements{{v1.ResourceCPU, 500}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := referenceSelect(critical, pods, Requirements{{v1.ResourceCPU, 500}})
	if diff := cmp.Diff(names(want), names(got)); diff != "" {
		t.Errorf("victims (-kubelet +got):\n%s", diff)
	}
}

func TestSelectVictimsDoesNotModifyInput(t *testing.T) {
	t.Parallel()
	pods := []*v1.Pod{newPod("a", burstable("cpu", "1")), newPod("b", burstable("cpu", "2")), newPod("c")}
	before := names(pods)
	if _, err := SelectVictims(newPod("x", static()), pods, Requirements{{v1.ResourceCPU, 2500}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, names(pods)); diff != "" {
		t.Errorf("input reordered (-before +after):\n%s", diff)
	}
	if q := pods[0].Spec.Containers[0].Resources.Requests[v1.ResourceCPU]; q.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("input modified: %v", q)
	}
}
