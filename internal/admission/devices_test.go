package admission

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
)

// allocatorFunc is a DeviceAllocator from a function.
type allocatorFunc func(ctx context.Context, pod *v1.Pod) error

func (f allocatorFunc) AllocatePod(ctx context.Context, pod *v1.Pod) error { return f(ctx, pod) }

var _ DeviceAllocator = (*devicemanager.Manager)(nil)

func TestChainAllocatesDevices(t *testing.T) {
	t.Parallel()
	alloc := list("cpu", "2", "memory", "4Gi", "pods", "10", "example.com/gpu", "1")
	tests := []struct {
		name       string
		pod        *v1.Pod
		conditions conditions
		allocErr   error
		want       Response
		// wantCalls are the pods AllocatePod was called for.
		wantCalls []string
	}{{
		name:      "allocated, then the fit admits",
		pod:       newPod("trainer", withRequests("example.com/gpu", "1")),
		want:      Response{Admit: true},
		wantCalls: []string{"trainer"},
	}, {
		name:     "allocation failure rejects with the kubelet's reason",
		pod:      newPod("trainer", withRequests("example.com/gpu", "1")),
		allocErr: errors.New("requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0"),
		want: Response{Reason: ReasonUnexpected,
			Message: "Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0, which is unexpected"},
		wantCalls: []string{"trainer"},
	}, {
		name:       "eviction admission rejects before any device is allocated",
		pod:        newPod("trainer", withRequests("example.com/gpu", "1")),
		conditions: conditions{v1.NodeDiskPressure},
		want:       Response{Reason: "Evicted", Message: "The node had condition: [DiskPressure]. "},
	}, {
		name:      "devices are allocated before the fit, which then rejects",
		pod:       newPod("trainer", withRequests("example.com/gpu", "2")),
		want:      Response{Reason: "OutOfexample.com/gpu"},
		wantCalls: []string{"trainer"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls []string
			chain, err := New(Deps{
				ActivePods: func() []*v1.Pod { return nil },
				Conditions: tc.conditions,
				Node:       func() (Node, error) { return Node{Allocatable: alloc}, nil },
				Allocator: allocatorFunc(func(_ context.Context, pod *v1.Pod) error {
					calls = append(calls, pod.Name)
					return tc.allocErr
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			got := chain.Admit(t.Context(), tc.pod)
			if tc.want.Reason == "OutOfexample.com/gpu" {
				// The fit's message is checked in the fit tests.
				got.Message, got.Failures = "", nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Admit (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCalls, calls); diff != "" {
				t.Errorf("AllocatePod calls (-want +got):\n%s", diff)
			}
		})
	}
}
