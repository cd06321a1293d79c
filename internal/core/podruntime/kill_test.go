package podruntime

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

// orderRecorder is fakeCRI recording the order of StopContainer calls by
// container name; its ExecSync (a pre-stop hook) returns only once hooks
// of n containers are running at the same time.
type orderRecorder struct {
	fakeCRI
	names map[string]string // container ID -> name

	mu      sync.Mutex
	stopped []string
	hooks   int
	allIn   chan struct{} // closed when the n-th hook is running
	n       int
}

func (o *orderRecorder) StopContainer(ctx context.Context, id string, timeout int64) error {
	o.mu.Lock()
	o.stopped = append(o.stopped, o.names[id])
	o.mu.Unlock()
	return o.FakeRuntimeService.StopContainer(ctx, id, timeout)
}

func (o *orderRecorder) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	o.mu.Lock()
	if o.hooks++; o.hooks == o.n {
		close(o.allIn)
	}
	o.mu.Unlock()
	select {
	case <-o.allIn:
		return nil, nil, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// A killed pod's regular containers stop first and then its running
// sidecars, the last of the spec first; every container's pre-stop hook
// runs at the same time (node e2e "should terminate sidecars in reverse
// order after all main containers have exited", "should call sidecar
// container PreStop hook simultaneously"). A sidecar that is not running
// holds nothing up.
func TestKillPodSidecarsInReverseOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	always := v1.ContainerRestartPolicyAlways
	hook := &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}
	pod := testPod(func(p *v1.Pod) {
		for _, n := range []string{"side-1", "side-2", "side-3", "side-4"} {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "img:1", RestartPolicy: &always, Lifecycle: hook})
		}
		p.Spec.Containers = []v1.Container{
			{Name: "app", Image: "img:1", Lifecycle: hook},
			{Name: "web", Image: "img:1"},
		}
	})
	for range 5 { // four sidecars one by one, then the containers
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	f.exit(t, "side-4", 0) // exited, waiting for its restart
	st := f.status(t, pod.UID)
	rec := &orderRecorder{fakeCRI: fakeCRI{f.rt, f.img}, names: map[string]string{}, allIn: make(chan struct{}), n: 4}
	for _, c := range st.Containers {
		rec.names[c.Id] = c.GetMetadata().GetName()
	}
	m, err := New(f.m.cfg, Deps{Runtime: rec, Logger: testLogger(t), Recorder: f.events})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.KillPod(t.Context(), pod, st, nil); err != nil {
		t.Fatal(err)
	}
	// The regular containers in any order, then the running sidecars in
	// reverse order.
	got := rec.stopped
	if len(got) != 5 {
		t.Fatalf("stopped %v, want 5 containers", got)
	}
	if first := []string{got[0], got[1]}; !(first[0] == "app" && first[1] == "web" || first[0] == "web" && first[1] == "app") {
		t.Errorf("stopped first %v, want the regular containers", first)
	}
	if diff := cmp.Diff([]string{"side-3", "side-2", "side-1"}, got[2:]); diff != "" {
		t.Errorf("sidecars stopped (-want +got):\n%s", diff)
	}
}

// Without a pod (an orphan), the sidecars stop in reverse order of creation.
func TestStopAfter(t *testing.T) {
	t.Parallel()
	ctr := func(name, kind string, created int64) *runtimeapi.ContainerStatus {
		c := &runtimeapi.ContainerStatus{Metadata: &runtimeapi.ContainerMetadata{Name: name}, CreatedAt: created}
		if kind != "" {
			c.Annotations = map[string]string{criconfig.AnnotationInitKind: kind}
		}
		return c
	}
	ctrs := []*runtimeapi.ContainerStatus{ctr("b", "sidecar", 2), ctr("app", "", 5), ctr("a", "sidecar", 1), ctr("c", "sidecar", 3)}
	always := v1.ContainerRestartPolicyAlways
	pod := testPod(func(p *v1.Pod) {
		// The spec's order is not the creation order: the spec wins.
		for _, n := range []string{"c", "a", "b"} {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, RestartPolicy: &always})
		}
	})
	tests := []struct {
		name string
		pod  *v1.Pod
		want [][]int
	}{
		{name: "orphan: by creation", want: [][]int{{1, 3}, nil, {0, 1, 3}, {1}}},
		{name: "pod: by spec", pod: pod, want: [][]int{{1}, nil, {0, 1}, {0, 1, 2}}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, stopAfter(tc.pod, ctrs)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// hangingHook is fakeCRI whose ExecSync (a pre-stop hook) runs until the
// container is stopped, as a hook process that never exits does.
type hangingHook struct {
	fakeCRI
	started chan struct{} // closed when the hook runs
	stopped chan struct{} // closed by StopContainer

	mu       sync.Mutex
	timeouts []int64
}

func (h *hangingHook) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	close(h.started)
	select {
	case <-h.stopped:
		return nil, nil, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (h *hangingHook) StopContainer(ctx context.Context, id string, timeout int64) error {
	h.mu.Lock()
	h.timeouts = append(h.timeouts, timeout)
	h.mu.Unlock()
	close(h.stopped)
	return h.FakeRuntimeService.StopContainer(ctx, id, timeout)
}

// An exec pre-stop hook that does not end within the grace period is not
// cut off at its end: the container is stopped then (with the minimum grace
// period), which ends the hook, as with the kubelet (node e2e "should
// terminate sidecars simultaneously if prestop doesn't exit": the hooks live
// for the grace period plus 2 s).
func TestKillPodHangingExecHook(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		grace := int64(30)
		pod := testPod(func(p *v1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = &grace
			p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"loop"}}}}
		})
		if res := f.sync(t, pod); res.Err != nil {
			t.Fatal(res.Err)
		}
		rt := &hangingHook{fakeCRI: fakeCRI{f.rt, f.img}, started: make(chan struct{}), stopped: make(chan struct{})}
		m, err := New(f.m.cfg, Deps{Runtime: rt, Logger: testLogger(t), Recorder: f.events})
		if err != nil {
			t.Fatal(err)
		}
		st := f.status(t, pod.UID)
		done := make(chan error, 1)
		go func() { done <- m.KillPod(t.Context(), pod, st, nil) }()
		<-rt.started
		synctest.Wait() // the grace period's timer is set
		time.Sleep(30 * time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int64{minGracePeriod}, rt.timeouts); diff != "" {
			t.Errorf("StopContainer timeouts (-want +got):\n%s", diff)
		}
		for _, e := range f.events.take() {
			if strings.HasPrefix(e, "FailedPreStopHook") {
				t.Errorf("event %q: the hook did not fail, it outlived the grace period", e)
			}
		}
	})
}
