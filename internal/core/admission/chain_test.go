package admission

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
)

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

// preempted is the kill request of a preempted pod: the kubelet's status (checked
// in package preemption) and the pod's own grace period.
func preempted(p *v1.Pod) nodeapi.KillRequest {
	return nodeapi.KillRequest{Pod: p, Status: preemption.PreemptedStatus()}
}

// samePod compares pods by identity: a plan names the pods it was given.
var samePod = cmp.Comparer(func(a, b *v1.Pod) bool { return a == b })

func TestChain(t *testing.T) {
	t.Parallel()
	alloc := list("cpu", "2", "memory", "4Gi", "pods", "10")
	be := newPod("be", hostPortOpt(80, "", ""))
	bu := newPod("bu", withRequests("cpu", "1", "memory", "1Gi"))
	g := newPod("g", func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests = list("cpu", "500m", "memory", "2Gi")
		p.Spec.Containers[0].Resources.Limits = list("cpu", "500m", "memory", "2Gi")
	})
	running := []*v1.Pod{be, bu, g}
	preemptor := newPod("new", static(), withRequests("cpu", "600m", "memory", "1Gi"))
	twoSlots := newPod("new", static())
	tests := []struct {
		name         string
		pod          *v1.Pod
		conditions   conditions
		noPreemption bool
		// late pods appear in ActivePods once preemption has planned (a pod set
		// that changed under the plan).
		late         []*v1.Pod
		alloc        v1.ResourceList
		nodeErr      error
		wantResp     Response
		wantFailures int
	}{
		{
			name:     "fits",
			pod:      newPod("new", withRequests("cpu", "500m")),
			wantResp: Response{Admit: true},
		},
		{
			name:       "disk pressure rejects first",
			pod:        newPod("new", withRequests("cpu", "5")),
			conditions: conditions{v1.NodeDiskPressure},
			wantResp:   Response{Reason: "Evicted", Message: "The node had condition: [DiskPressure]. "},
		},
		{
			name:         "non-critical pod that does not fit",
			pod:          newPod("new", withRequests("cpu", "600m")),
			wantResp:     Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
			wantFailures: 1,
		},
		{
			name: "critical pod is admitted with a plan",
			pod:  preemptor,
			wantResp: Response{Admit: true, Preemption: &preemption.Plan{
				Preemptor:    preemptor,
				Requirements: preemption.Requirements{{Resource: v1.ResourceCPU, Quantity: 100}},
				Victims:      []nodeapi.KillRequest{preempted(bu)},
			}},
			wantFailures: 1,
		},
		{
			name:  "victims in kill order",
			pod:   twoSlots,
			alloc: list("cpu", "2", "memory", "4Gi", "pods", "2"),
			wantResp: Response{Admit: true, Preemption: &preemption.Plan{
				Preemptor:    twoSlots,
				Requirements: preemption.Requirements{{Resource: v1.ResourcePods, Quantity: 2}},
				Victims:      []nodeapi.KillRequest{preempted(be), preempted(bu)},
			}},
			wantFailures: 1,
		},
		{
			name:         "critical pod, preemption disabled",
			pod:          newPod("new", static(), withRequests("cpu", "600m")),
			noPreemption: true,
			wantResp:     Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
			wantFailures: 1,
		},
		{
			name:         "critical pod that no preemption can fit",
			pod:          newPod("new", static(), withRequests("cpu", "3")),
			wantResp:     Response{Reason: "UnexpectedAdmissionError", Message: "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 1000), ]"},
			wantFailures: 1,
		},
		{
			name:         "critical pod with a host port conflict is not helped",
			pod:          newPod("new", static(), withRequests("cpu", "600m"), hostPortOpt(80, "", "")),
			wantResp:     Response{Reason: "NodePorts", Message: "Predicate NodePorts failed"},
			wantFailures: 2,
		},
		{
			name:         "a plan that does not make the pod fit is dropped and the pod rejected",
			pod:          newPod("new", static(), withRequests("cpu", "600m")),
			late:         []*v1.Pod{newPod("late", withRequests("cpu", "1"))},
			wantResp:     Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
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
			nodeAlloc := alloc
			if tc.alloc != nil {
				nodeAlloc = tc.alloc
			}
			calls := 0
			deps := Deps{
				// The new pod is already in the pod table: it must be left out.
				ActivePods: func() []*v1.Pod {
					calls++
					pods := append(append([]*v1.Pod(nil), running...), tc.pod)
					if calls > 2 { // the fit check and preemption have seen the pods
						pods = append(pods, tc.late...)
					}
					return pods
				},
				Conditions: tc.conditions,
				Node:       func() (Node, error) { return Node{Allocatable: nodeAlloc}, tc.nodeErr },
				Preemption: !tc.noPreemption,
			}
			chain, err := New(deps)
			if err != nil {
				t.Fatal(err)
			}
			got := chain.Admit(t.Context(), tc.pod)
			if len(got.Failures) != tc.wantFailures {
				t.Errorf("failures = %v, want %d of them", got.Failures, tc.wantFailures)
			}
			if diff := cmp.Diff(tc.wantResp.Victims(), got.Victims(), samePod); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
			got.Failures = nil
			if diff := cmp.Diff(tc.wantResp, got, samePod); diff != "" {
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
