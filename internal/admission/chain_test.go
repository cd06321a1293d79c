package admission

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/eviction"
)

type fakeKiller struct {
	kill func(ctx context.Context, pod *v1.Pod, status v1.PodStatus, grace *int64) error
}

func (f fakeKiller) KillPod(ctx context.Context, pod *v1.Pod, status v1.PodStatus, grace *int64) error {
	return f.kill(ctx, pod, status, grace)
}

type conditions []v1.NodeConditionType

func (c conditions) Conditions() []v1.NodeConditionType { return c }

type handlerFunc struct {
	name  string
	admit func(ctx context.Context, req *Request, resp *Response) error
}

func (h handlerFunc) Name() string { return h.name }
func (h handlerFunc) Admit(ctx context.Context, req *Request, resp *Response) error {
	return h.admit(ctx, req, resp)
}

func podNames(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestChain(t *testing.T) {
	t.Parallel()
	alloc := list("cpu", "2", "memory", "4Gi", "pods", "10")
	running := []*v1.Pod{
		newPod("be", hostPortOpt(80, "", "")),
		newPod("bu", withRequests("cpu", "1", "memory", "1Gi")),
		newPod("g", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = list("cpu", "500m", "memory", "2Gi")
			p.Spec.Containers[0].Resources.Limits = list("cpu", "500m", "memory", "2Gi")
		}),
	}
	tests := []struct {
		name         string
		pod          *v1.Pod
		conditions   conditions
		killer       bool
		failKill     string
		nodeErr      error
		wantResp     Response
		wantVictims  []string
		wantKilled   []string
		wantFailures int
	}{
		{
			name:     "fits",
			pod:      newPod("new", withRequests("cpu", "500m")),
			killer:   true,
			wantResp: Response{Admit: true},
		},
		{
			name:       "disk pressure rejects first",
			pod:        newPod("new", withRequests("cpu", "5")),
			conditions: conditions{v1.NodeDiskPressure},
			killer:     true,
			wantResp:   Response{Reason: "Evicted", Message: "The node had condition: [DiskPressure]. "},
		},
		{
			name:         "non-critical pod that does not fit",
			pod:          newPod("new", withRequests("cpu", "600m")),
			killer:       true,
			wantResp:     Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
			wantFailures: 1,
		},
		{
			name:         "critical pod preempts",
			pod:          newPod("new", static(), withRequests("cpu", "600m", "memory", "1Gi")),
			killer:       true,
			wantResp:     Response{Admit: true},
			wantVictims:  []string{"bu"},
			wantKilled:   []string{"bu"},
			wantFailures: 1,
		},
		{
			name:         "critical pod, preemption disabled",
			pod:          newPod("new", static(), withRequests("cpu", "600m")),
			wantResp:     Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
			wantFailures: 1,
		},
		{
			name:         "critical pod that no preemption can fit",
			pod:          newPod("new", static(), withRequests("cpu", "3")),
			killer:       true,
			wantResp:     Response{Reason: "UnexpectedAdmissionError", Message: "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 1000), ]"},
			wantFailures: 1,
		},
		{
			name:         "critical pod with a host port conflict is not helped",
			pod:          newPod("new", static(), withRequests("cpu", "600m"), hostPortOpt(80, "", "")),
			killer:       true,
			wantResp:     Response{Reason: "NodePorts", Message: "Predicate NodePorts failed"},
			wantFailures: 2,
		},
		{
			name:         "a failed kill leaves the pod rejected on the re-check",
			pod:          newPod("new", static(), withRequests("cpu", "600m")),
			killer:       true,
			failKill:     "bu",
			wantResp:     Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
			wantKilled:   []string{"bu"},
			wantFailures: 1,
		},
		{
			name:     "node unknown",
			pod:      newPod("new"),
			nodeErr:  errors.New("no node"),
			wantResp: Response{Reason: "InvalidNodeInfo", Message: "Kubelet cannot get node info."},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var killed []string
			deps := Deps{
				// The new pod is already in the pod table: it must be left out.
				ActivePods: func() []*v1.Pod { return append(append([]*v1.Pod(nil), running...), tc.pod) },
				Conditions: tc.conditions,
				Node:       func() (Node, error) { return Node{Allocatable: alloc}, tc.nodeErr },
				Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
			}
			if tc.killer {
				deps.Killer = fakeKiller{kill: func(_ context.Context, p *v1.Pod, st v1.PodStatus, _ *int64) error {
					if st.Reason != "Preempting" || st.Phase != v1.PodFailed {
						t.Errorf("kill %s with status %+v", p.Name, st)
					}
					killed = append(killed, p.Name)
					if p.Name == tc.failKill {
						return errors.New("runtime down")
					}
					return nil
				}}
			}
			chain, err := New(deps)
			if err != nil {
				t.Fatal(err)
			}
			got := chain.Admit(t.Context(), tc.pod)
			if diff := cmp.Diff(tc.wantVictims, podNames(got.Victims)); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantKilled, killed); diff != "" {
				t.Errorf("killed (-want +got):\n%s", diff)
			}
			if len(got.Failures) != tc.wantFailures {
				t.Errorf("failures = %v, want %d of them", got.Failures, tc.wantFailures)
			}
			got.Victims, got.Failures = nil, nil
			if diff := cmp.Diff(tc.wantResp, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChainOrderAndErrors(t *testing.T) {
	t.Parallel()
	var ran []string
	step := func(name string, f func(resp *Response) error) Handler {
		return handlerFunc{name: name, admit: func(_ context.Context, _ *Request, resp *Response) error {
			ran = append(ran, name)
			return f(resp)
		}}
	}
	chain := NewChain(
		step("one", func(*Response) error { return nil }),
		step("two", func(*Response) error { return errors.New("boom") }),
		step("three", func(*Response) error { return nil }),
	)
	got := chain.Admit(t.Context(), newPod("p"))
	want := Response{Reason: "UnexpectedAdmissionError", Message: "two admission: boom"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"one", "two"}, ran); diff != "" {
		t.Errorf("handlers run (-want +got):\n%s", diff)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	if _, err := New(Deps{}); err == nil {
		t.Error("empty deps accepted")
	}
}

// sanitizer raises one extended resource's allocatable, as the device manager does
// for devices already assigned while their plugin is away.
type sanitizer struct {
	name v1.ResourceName
	min  string
}

func (s sanitizer) SanitizeAllocatable(a v1.ResourceList) v1.ResourceList {
	out := a.DeepCopy()
	if q, ok := out[s.name]; !ok || q.Cmp(list(string(s.name), s.min)[s.name]) < 0 {
		out[s.name] = list(string(s.name), s.min)[s.name]
	}
	return out
}

func TestChainSanitizesDeviceAllocatable(t *testing.T) {
	t.Parallel()
	// The plugin is gone: allocatable reports 0 GPUs, yet the pod holds one.
	alloc := list("cpu", "2", "memory", "4Gi", "pods", "10", "example.com/gpu", "0")
	pod := newPod("trainer", withRequests("example.com/gpu", "1"))
	for _, tc := range []struct {
		name    string
		devices AllocatableSanitizer
		admit   bool
	}{
		{name: "without the device manager", admit: false},
		{name: "with the device manager", devices: sanitizer{name: "example.com/gpu", min: "1"}, admit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chain, err := New(Deps{
				ActivePods: func() []*v1.Pod { return nil },
				Conditions: conditions(nil),
				Node:       func() (Node, error) { return Node{Allocatable: alloc}, nil },
				Devices:    tc.devices,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := chain.Admit(t.Context(), pod); got.Admit != tc.admit {
				t.Errorf("Admit = %+v, want admit %v", got, tc.admit)
			}
		})
	}
	if alloc["example.com/gpu"] != list("example.com/gpu", "0")["example.com/gpu"] {
		t.Error("the node's allocatable was modified")
	}
}

// The real components satisfy the chain's interfaces.
var (
	_ AllocatableSanitizer = (*devicemanager.Manager)(nil)
	_ ConditionSource      = (*eviction.Manager)(nil)
)
