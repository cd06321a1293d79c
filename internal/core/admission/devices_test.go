package admission

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
)

// allocatorFunc is a DeviceAllocator from a function; the device resource is
// example.com/gpu.
type allocatorFunc func(ctx context.Context, pod *v1.Pod) error

func (f allocatorFunc) AllocatePod(ctx context.Context, pod *v1.Pod) error { return f(ctx, pod) }

func (f allocatorFunc) RequestsDevices(pod *v1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if _, ok := c.Resources.Requests["example.com/gpu"]; ok {
			return true
		}
	}
	return false
}

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
		name:     "a pod that asks for no devices is not allocated any",
		pod:      newPod("web", withRequests("cpu", "1")),
		allocErr: errors.New("AllocatePod called"),
		want:     Response{Admit: true},
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

// TestStartLeavesDeviceAllocationPending: Start stops before the device step
// of a pod that asks for devices and allocates nothing; Wait allocates, and
// Resume runs the fit, which sees the pods that became active meanwhile. A
// pod that asks for no devices gets its verdict from Start at once.
func TestStartLeavesDeviceAllocationPending(t *testing.T) {
	t.Parallel()
	alloc := list("cpu", "2", "memory", "4Gi", "pods", "10", "example.com/gpu", "2")
	tests := []struct {
		name     string
		allocErr error
		// meanwhile becomes active between Start and Resume.
		meanwhile *v1.Pod
		want      Response
	}{{
		name: "allocated, then the fit admits",
		want: Response{Admit: true},
	}, {
		name:      "the fit counts a pod admitted while the allocation waited",
		meanwhile: newPod("web", withRequests("cpu", "1500m")),
		want:      Response{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"},
	}, {
		name:     "an allocation error rejects with the kubelet's reason",
		allocErr: errors.New("rpc error: code = DeadlineExceeded desc = context deadline exceeded"),
		want: Response{Reason: ReasonUnexpected,
			Message: "Allocate failed due to rpc error: code = DeadlineExceeded desc = context deadline exceeded, which is unexpected"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var active []*v1.Pod
			var calls []string
			chain, err := New(Deps{
				ActivePods: func() []*v1.Pod { return active },
				Conditions: conditions{},
				Node:       func() (Node, error) { return Node{Allocatable: alloc}, nil },
				Allocator: allocatorFunc(func(_ context.Context, pod *v1.Pod) error {
					calls = append(calls, pod.Name)
					return tc.allocErr
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			plain := chain.Start(t.Context(), newPod("plain", withRequests("cpu", "500m")))
			if diff := cmp.Diff(Response{Admit: true}, plain); diff != "" {
				t.Errorf("Start of a pod without devices (-want +got):\n%s", diff)
			}

			trainer := newPod("trainer", withRequests("cpu", "1", "example.com/gpu", "1"))
			resp := chain.Start(t.Context(), trainer)
			if resp.Pending == nil || !resp.Admit || resp.Reason != "" {
				t.Fatalf("Start of a pod asking for devices = %+v, want it pending", resp)
			}
			if resp.Pending.Pod() != trainer {
				t.Errorf("Pending.Pod is not the pod being admitted")
			}
			if len(calls) != 0 {
				t.Fatalf("Start allocated devices: %v", calls)
			}
			resp.Pending.Wait(t.Context())
			if diff := cmp.Diff([]string{"trainer"}, calls); diff != "" {
				t.Errorf("AllocatePod calls after Wait (-want +got):\n%s", diff)
			}
			if tc.meanwhile != nil {
				active = append(active, tc.meanwhile)
			}
			got := resp.Pending.Resume(t.Context())
			got.Failures = nil
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resume (-want +got):\n%s", diff)
			}
		})
	}
}
