package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// runtime is the CRI subset over cri-api's fakes.
type runtime struct {
	*apitest.FakeRuntimeService
	*apitest.FakeImageService
}

// stats counts Summary calls: one per eviction pass.
type stats struct {
	mu    sync.Mutex
	calls int // guarded by mu
}

func (s *stats) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *stats) Summary(context.Context) (*statsapi.Summary, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	avail := uint64(8 << 30)
	return &statsapi.Summary{Node: statsapi.NodeStats{Memory: &statsapi.MemoryStats{AvailableBytes: &avail, WorkingSetBytes: new(uint64(0))}}}, nil
}

type pods struct{ list []*v1.Pod }

func (p *pods) ActivePods() []*v1.Pod       { return p.list }
func (p *pods) IsPodDeleted(string) bool    { return false }
func (p *pods) IsPodTerminated(string) bool { return false }

func collaborators(st *stats, ps *pods, killed *[]nodeapi.KillRequest) Collaborators {
	return Collaborators{
		NodeName: "n1",
		Capacity: func() (v1.ResourceList, error) {
			return v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")}, nil
		},
		Stats:   st,
		Runtime: runtime{apitest.NewFakeRuntimeService(), apitest.NewFakeImageService()},
		Pods:    ps,
		Killer: nodeapi.PodKillerFunc(func(_ context.Context, r nodeapi.KillRequest) error {
			*killed = append(*killed, r)
			return nil
		}),
	}
}

func TestNewNeedsCollaborators(t *testing.T) {
	t.Parallel()
	if _, err := New(config.Default(), Options{}, Collaborators{}); err == nil {
		t.Fatal("New without collaborators succeeded")
	}
}

// TestRunLoopsOnTheClock runs the managers' loops (in a synctest bubble, on the
// real clock, whose time the bubble fakes): the eviction monitor passes at once
// and then every 10 s, and Run returns nil once ctx ends.
func TestRunLoopsOnTheClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &stats{}
		var killed []nodeapi.KillRequest
		n, err := New(config.Default(), Options{}, collaborators(st, &pods{}, &killed))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range n.Loops() {
			names = append(names, l.Name)
		}
		if !slices.Equal(names, []string{"eviction", "containergc", "imagegc"}) {
			t.Fatalf("loops %v", names)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		synctest.Wait()
		for want := 1; want <= 4; want++ {
			if got := st.count(); got != want {
				t.Fatalf("after %d monitoring intervals: %d eviction passes, want %d", want-1, got, want)
			}
			time.Sleep(10 * time.Second)
			synctest.Wait()
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	})
}

// TestAdmitPlansPreemption admits a critical pod on a full node: admission plans
// the preemption without killing, and the executor kills through the Killer with
// the preempted status.
func TestAdmitPlansPreemption(t *testing.T) {
	t.Parallel()
	victim := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "batch", UID: "u-batch"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m")}}}}}}
	critical := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "dns", UID: "u-dns"},
		Spec: v1.PodSpec{Priority: new(int32(2_000_000_000)), Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}}}}
	var killed []nodeapi.KillRequest
	n, err := New(config.Default(), Options{}, collaborators(&stats{}, &pods{list: []*v1.Pod{victim}}, &killed))
	if err != nil {
		t.Fatal(err)
	}
	resp := n.Admission.Admit(t.Context(), critical)
	if !resp.Admit || resp.Preemption == nil || len(killed) != 0 {
		t.Fatalf("Admit = %+v, killed %d; want admitted under a plan, nothing killed", resp, len(killed))
	}
	got, err := n.Preemption.Execute(t.Context(), resp.Preemption)
	if err != nil || len(got) != 1 || len(killed) != 1 || killed[0].Pod != victim {
		t.Fatalf("Execute = %v, %v; killed %v", got, err, killed)
	}
	if s := killed[0].Status; s.Phase != v1.PodFailed || s.Reason != "Preempting" || len(s.Conditions) != 1 || s.Conditions[0].Type != v1.DisruptionTarget {
		t.Errorf("preempted status %+v", s)
	}
	// Without room and without criticality, the pod is rejected with the kubelet's reason.
	plain := critical.DeepCopy()
	plain.Spec.Priority = nil
	if resp := n.Admission.Admit(t.Context(), plain); resp.Admit || resp.Reason != "OutOfcpu" {
		t.Errorf("non-critical pod: %+v, want OutOfcpu", resp)
	}
}

// TestAllocatablePodsDefault: with no pods in capacity, admission counts maxPods.
func TestAllocatablePodsDefault(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.MaxPods = 1
	one := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: "a"}}
	var killed []nodeapi.KillRequest
	n, err := New(cfg, Options{}, collaborators(&stats{}, &pods{list: []*v1.Pod{one}}, &killed))
	if err != nil {
		t.Fatal(err)
	}
	second := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b", UID: "b"}}
	if resp := n.Admission.Admit(t.Context(), second); resp.Admit || resp.Reason != "OutOfpods" {
		t.Errorf("second pod on a maxPods=1 node: %+v, want OutOfpods", resp)
	}
	broken := collaborators(&stats{}, &pods{}, &killed)
	broken.Capacity = func() (v1.ResourceList, error) { return nil, errors.New("no machine info") }
	n, err = New(cfg, Options{}, broken)
	if err != nil {
		t.Fatal(err)
	}
	if resp := n.Admission.Admit(t.Context(), second); resp.Admit || resp.Reason != "InvalidNodeInfo" {
		t.Errorf("without capacity: %+v, want InvalidNodeInfo", resp)
	}
}
