package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// memStats reports the node's available memory as set.
type memStats struct{ available uint64 }

func (s *memStats) Summary(context.Context) (*statsapi.Summary, error) {
	ws := uint64(4<<30) - s.available
	return &statsapi.Summary{Node: statsapi.NodeStats{Memory: &statsapi.MemoryStats{AvailableBytes: &s.available, WorkingSetBytes: &ws}}}, nil
}

// TestObject: the Node object has the eviction manager's pressure
// conditions with the kubelet's reasons and messages, Ready (false with the
// error), capacity and allocatable less the reservations and the hard
// memory threshold, and each condition's transition time is when its status
// last changed, or the agent's start for the status first seen.
func TestObject(t *testing.T) {
	t.Parallel()
	ms := &memStats{available: 2 << 30}
	var killed []nodeapi.KillRequest
	c := collaborators(&stats{}, &pods{}, &killed)
	c.Stats = ms
	// The agent started an hour before Object is first called: the
	// conditions have had the status Object first sees since then.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	start := t0.Add(-time.Hour)
	c.Start = start
	cfg := config.Default()
	n, err := New(cfg, Options{}, c)
	if err != nil {
		t.Fatal(err)
	}
	cond := func(typ v1.NodeConditionType, s v1.ConditionStatus, reason, msg string, hb, tr time.Time) v1.NodeCondition {
		return v1.NodeCondition{Type: typ, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: metav1.NewTime(hb), LastTransitionTime: metav1.NewTime(tr)}
	}
	n.Eviction.Pass(t.Context(), time.Now())
	got, err := n.Object("n1", nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{
			Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
				v1.ResourcePods: resource.MustParse("110")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
				v1.ResourcePods: resource.MustParse("110")},
			Conditions: []v1.NodeCondition{
				cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", t0, start),
				cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", t0, start),
				cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available", t0, start),
				cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status", t0, start),
			},
		},
	}
	mem := want.Status.Allocatable[v1.ResourceMemory]
	mem.Sub(resource.MustParse("100Mi")) // the default hard memory.available threshold
	want.Status.Allocatable[v1.ResourceMemory] = mem
	opts := cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("at t0 (-want +got):\n%s", diff)
	}

	ms.available = 50 << 20
	n.Eviction.Pass(t.Context(), time.Now())
	got, err = n.Object("n1", errors.New("container runtime is down"), t1)
	if err != nil {
		t.Fatal(err)
	}
	want.Status.Conditions = []v1.NodeCondition{
		cond(v1.NodeMemoryPressure, v1.ConditionTrue, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available", t1, t1),
		cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", t1, start),
		cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available", t1, start),
		cond(v1.NodeReady, v1.ConditionFalse, "KubeletNotReady", "container runtime is down", t1, t1),
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("at t1 (-want +got):\n%s", diff)
	}
	got, err = n.Object("n1", errors.New("container runtime is down"), t2)
	if err != nil {
		t.Fatal(err)
	}
	if tr := got.Status.Conditions[0].LastTransitionTime.Time; !tr.Equal(t1) {
		t.Errorf("MemoryPressure transition at t2 = %v, want unchanged %v", tr, t1)
	}
}

// TestGoneDevices: a device resource reported once and then missing from the
// device manager's capacity is listed as gone (Object reports it at 0) on
// every later call, until it comes back.
func TestGoneDevices(t *testing.T) {
	t.Parallel()
	const gpu, fpga = v1.ResourceName("example.com/gpu"), v1.ResourceName("example.com/fpga")
	one := resource.MustParse("1")
	steps := []struct {
		name     string
		capacity v1.ResourceList
		want     []v1.ResourceName
	}{
		{"none yet", v1.ResourceList{}, nil},
		{"both registered", v1.ResourceList{gpu: one, fpga: one}, nil},
		{"gpu removed", v1.ResourceList{fpga: one}, []v1.ResourceName{gpu}},
		{"still removed", v1.ResourceList{fpga: one}, []v1.ResourceName{gpu}},
		{"both removed", v1.ResourceList{}, []v1.ResourceName{fpga, gpu}},
		{"gpu back", v1.ResourceList{gpu: one}, []v1.ResourceName{fpga}},
	}
	var tr transitions
	for _, s := range steps {
		if diff := cmp.Diff(s.want, tr.goneDevices(s.capacity)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", s.name, diff)
		}
	}
}

// statusAt: a condition keeps its transition time while its status holds,
// takes now on a change, and dates the status it is first seen with from
// the agent's start, not from the first look (issue 29: get node's SINCE
// was the first /node request's time).
func TestStatusAt(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seen, now := start.Add(time.Minute), start.Add(10*time.Minute)
	f, tr := v1.ConditionFalse, v1.ConditionTrue
	for _, tc := range []struct {
		name  string
		prev  statusSince
		known bool
		s     v1.ConditionStatus
		start time.Time
		want  statusSince
	}{
		{"first seen: since the agent's start", statusSince{}, false, f, start, statusSince{f, start}},
		{"first seen true: since the agent's start", statusSince{}, false, tr, start, statusSince{tr, start}},
		{"unchanged: kept", statusSince{f, seen}, true, f, start, statusSince{f, seen}},
		{"unchanged since the start: kept", statusSince{f, start}, true, f, start, statusSince{f, start}},
		{"changed: now", statusSince{f, start}, true, tr, start, statusSince{tr, now}},
		{"no start: now", statusSince{}, false, f, time.Time{}, statusSince{f, now}},
		{"start after now: now", statusSince{}, false, f, now.Add(time.Second), statusSince{f, now}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := statusAt(tc.prev, tc.known, tc.s, tc.start, now); got != tc.want {
				t.Errorf("statusAt = %+v, want %+v", got, tc.want)
			}
		})
	}
}
