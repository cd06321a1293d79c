package containergc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

var (
	_ nodeapi.Recorder = (*recorder)(nil)
	_ Runtime          = (*apitest.FakeRuntimeService)(nil)
	_ Runtime          = (*cri.Client)(nil)
)

// recorder records the reasons of the Warning events about node; an event
// about anything else is recorded as such.
type recorder struct {
	node    string
	mu      sync.Mutex
	reasons []string // guarded by mu
}

func (r *recorder) Event(object runtime.Object, eventType, reason, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ref, ok := object.(*v1.ObjectReference); !ok || *ref != *nodeapi.NodeRef(r.node) || eventType != v1.EventTypeWarning {
		reason = fmt.Sprintf("%s event %s about %#v", eventType, reason, object)
	}
	r.reasons = append(r.reasons, reason)
}

func (r *recorder) Eventf(object runtime.Object, eventType, reason, format string, args ...any) {
	r.Event(object, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.Eventf(object, eventType, reason, format, args...)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reasons)
}

// fakeContainer is a container of pod uid created at the given time.
func fakeContainer(id, uid, name string, st runtimeapi.ContainerState, at time.Time) *apitest.FakeContainer {
	return &apitest.FakeContainer{ContainerStatus: runtimeapi.ContainerStatus{
		Id: id, State: st, CreatedAt: at.UnixNano(),
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Labels:   map[string]string{LabelPodUID: uid, LabelContainerName: name},
	}}
}

func remainingContainers(rt *apitest.FakeRuntimeService) []string {
	rt.Lock()
	defer rt.Unlock()
	var out []string
	for id := range rt.Containers {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func remainingSandboxes(rt *apitest.FakeRuntimeService) []string {
	rt.Lock()
	defer rt.Unlock()
	var out []string
	for id := range rt.Sandboxes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func TestCollector(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		rt := apitest.NewFakeRuntimeService()
		rt.SetFakeSandboxes([]*apitest.FakePodSandbox{
			{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb-live", State: runtimeapi.PodSandboxState_SANDBOX_READY, Metadata: &runtimeapi.PodSandboxMetadata{Uid: "live"}, CreatedAt: now.Add(-time.Hour).UnixNano()}},
			{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb-term", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Metadata: &runtimeapi.PodSandboxMetadata{Uid: "term"}, CreatedAt: now.Add(-time.Hour).UnixNano()}},
		})
		live := []*apitest.FakeContainer{
			fakeContainer("app-1", "live", "app", runtimeapi.ContainerState_CONTAINER_EXITED, now.Add(-3*time.Minute)),
			fakeContainer("app-2", "live", "app", runtimeapi.ContainerState_CONTAINER_EXITED, now.Add(-2*time.Minute)),
			fakeContainer("app-3", "live", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, now.Add(-time.Minute)),
			fakeContainer("term-1", "term", "job", runtimeapi.ContainerState_CONTAINER_EXITED, now.Add(-time.Minute)),
		}
		for _, c := range live {
			c.SandboxID = "sb-" + c.Labels[LabelPodUID]
		}
		rt.SetFakeContainers(live)
		rec := &recorder{}
		c, err := New(DefaultPolicy(), 0, Deps{
			Runtime: rt, Pods: pods{terminated: map[string]bool{"term": true}}, Recorder: rec,
			Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.GarbageCollect(t.Context(), false, time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"app-2", "app-3", "term-1"}, remainingContainers(rt)); diff != "" {
			t.Errorf("containers after periodic GC (-want +got):\n%s", diff)
		}
		if err := c.DeleteAllUnusedContainers(t.Context(), time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"app-2", "app-3"}, remainingContainers(rt)); diff != "" {
			t.Errorf("containers after reclaim (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"sb-live"}, remainingSandboxes(rt)); diff != "" {
			t.Errorf("sandboxes after reclaim (-want +got):\n%s", diff)
		}
		if got := rec.got(); len(got) != 0 {
			t.Errorf("events = %v", got)
		}
	})
}

func TestCollectorRunReportsFailures(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rt := apitest.NewFakeRuntimeService()
		rt.SetFakeContainers([]*apitest.FakeContainer{
			fakeContainer("a", "p", "app", runtimeapi.ContainerState_CONTAINER_EXITED, time.Now().Add(-2*time.Minute)),
			fakeContainer("b", "p", "app", runtimeapi.ContainerState_CONTAINER_EXITED, time.Now().Add(-time.Minute)),
		})
		rt.InjectError("ListPodSandbox", cri.ErrUnavailable)
		rec := &recorder{node: "node-1"}
		c, err := New(DefaultPolicy(), 0, Deps{Runtime: rt, Recorder: rec, NodeName: "node-1", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- c.Run(ctx) }()
		synctest.Wait()
		if diff := cmp.Diff([]string{EventContainerGCFailed}, rec.got()); diff != "" {
			t.Fatalf("events after a failed pass (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"a", "b"}, remainingContainers(rt)); diff != "" {
			t.Errorf("containers after the failed pass (-want +got):\n%s", diff)
		}
		time.Sleep(DefaultPeriod)
		synctest.Wait()
		if diff := cmp.Diff([]string{"b"}, remainingContainers(rt)); diff != "" {
			t.Errorf("containers after the retry (-want +got):\n%s", diff)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// Step passes at now, with the containers' ages counted to now, and returns
// now plus the period.
func TestCollectorStep(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 11, 21, 12, 0, 0, 0, time.UTC)
	rt := apitest.NewFakeRuntimeService()
	rt.SetFakeContainers([]*apitest.FakeContainer{
		fakeContainer("old", "p", "app", runtimeapi.ContainerState_CONTAINER_EXITED, t0.Add(-3*time.Minute)),
		fakeContainer("new", "p", "app", runtimeapi.ContainerState_CONTAINER_EXITED, t0.Add(-time.Minute)),
	})
	c, err := New(Policy{MinAge: 2 * time.Minute, MaxPerPodContainer: 0, MaxContainers: -1}, 2*time.Minute,
		Deps{Runtime: rt, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	pass := []string{"ListPodSandbox", "ListContainers", "ListContainers"}
	removing := []string{"ListPodSandbox", "ListContainers", "RemoveContainer", "ListContainers"}
	for _, w := range []struct {
		at    time.Duration
		calls []string
		left  []string
	}{
		{0, removing, []string{"new"}},            // "new" is 1m old
		{30 * time.Second, pass, []string{"new"}}, // 1m30s old
		{2 * time.Minute, removing, nil},          // 3m old
		{4 * time.Minute, pass, nil},
	} {
		next := c.Step(t.Context(), t0.Add(w.at))
		if want := t0.Add(w.at + 2*time.Minute); !next.Equal(want) {
			t.Errorf("Step at %v: next due %v, want %v", w.at, next, want)
		}
		rt.Lock()
		calls := rt.Called
		rt.Called = nil
		rt.Unlock()
		if diff := cmp.Diff(w.calls, calls, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("calls at %v (-want +got):\n%s", w.at, diff)
		}
		if diff := cmp.Diff(w.left, remainingContainers(rt), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("containers at %v (-want +got):\n%s", w.at, diff)
		}
	}
}

func TestCollectorRemovalErrorsContinue(t *testing.T) {
	t.Parallel()
	rt := apitest.NewFakeRuntimeService()
	old := time.Now().Add(-time.Hour)
	rt.SetFakeContainers([]*apitest.FakeContainer{
		fakeContainer("a", "p", "app", runtimeapi.ContainerState_CONTAINER_EXITED, old),
		fakeContainer("b", "p", "app", runtimeapi.ContainerState_CONTAINER_EXITED, old.Add(time.Second)),
		fakeContainer("c", "p", "app", runtimeapi.ContainerState_CONTAINER_EXITED, old.Add(2*time.Second)),
	})
	rt.InjectError("RemoveContainer", errors.New("device busy"))
	c, err := New(DefaultPolicy(), 0, Deps{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	err = c.GarbageCollect(t.Context(), false, time.Now())
	if err == nil || !strings.Contains(err.Error(), `remove container "a": device busy`) {
		t.Fatalf("GarbageCollect = %v, want the removal error of a", err)
	}
	if diff := cmp.Diff([]string{"a", "c"}, remainingContainers(rt)); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
}

func TestNewRejectsInvalid(t *testing.T) {
	t.Parallel()
	if _, err := New(Policy{MinAge: -1}, 0, Deps{Runtime: apitest.NewFakeRuntimeService()}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("New(negative MinAge) = %v", err)
	}
	if _, err := New(DefaultPolicy(), 0, Deps{}); err == nil {
		t.Error("New without a runtime succeeded")
	}
}
