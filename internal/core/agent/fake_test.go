package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
)

// fakeRuntime is a Runtime of function fields.
type fakeRuntime struct {
	statusesF func(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error)
	syncPodF  func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus) podruntime.Result
	// syncStates, when set, sees the State each SyncPod is given.
	syncStates func(pod *v1.Pod, prev podruntime.SyncState)
	killPodF   func(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error
	removePodF func(ctx context.Context, st *podruntime.PodStatus) error
	podStatusF func(pod *v1.Pod, st *podruntime.PodStatus, now time.Time) v1.PodStatus
	// tearDownF may be nil: tearing down volumes does nothing.
	tearDownF func(uid types.UID) error
}

func (f *fakeRuntime) Statuses(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error) {
	return f.statusesF(ctx)
}
func (f *fakeRuntime) SyncPod(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, prev podruntime.SyncState) podruntime.Result {
	if f.syncStates != nil {
		f.syncStates(pod, prev)
	}
	return f.syncPodF(ctx, pod, st)
}
func (f *fakeRuntime) KillPod(ctx context.Context, pod *v1.Pod, st *podruntime.PodStatus, grace *int64) error {
	return f.killPodF(ctx, pod, st, grace)
}
func (f *fakeRuntime) RemovePod(ctx context.Context, st *podruntime.PodStatus) error {
	return f.removePodF(ctx, st)
}
func (f *fakeRuntime) TearDownVolumes(uid types.UID) error {
	if f.tearDownF == nil {
		return nil
	}
	return f.tearDownF(uid)
}
func (f *fakeRuntime) StatusNode() podstatus.Node { return podstatus.Node{} }

// derive is podstatus.Derive over the fake's view of the pod (podStatusF)
// rather than over the runtime's: the agent's own rules (a kill's final
// status, a deletion, a phase held while the pod runs, kept IPs) are the
// real ones.
func (f *fakeRuntime) derive(in podstatus.Input, now time.Time) (v1.PodStatus, bool) {
	return podstatus.Settle(in, f.podStatusF(in.Pod, in.Runtime, now), now)
}

// memRuntime keeps pods in memory and logs every call; its methods fill a
// fakeRuntime's fields. Tests may replace single fields afterwards.
type memRuntime struct {
	mu sync.Mutex // guards the fields below
	// pods are the runtime's pods.
	pods map[types.UID]*podruntime.PodStatus
	// calls logs "sync ns/name", "kill ns/name", "remove ns/name", in order.
	calls []string
	// creates counts sandboxes created.
	creates int
	n       int
}

func newMem() (*memRuntime, *fakeRuntime) {
	m := &memRuntime{pods: map[types.UID]*podruntime.PodStatus{}}
	return m, &fakeRuntime{statusesF: m.statuses, syncPodF: m.sync, killPodF: m.kill, removePodF: m.remove, podStatusF: memPodStatus}
}

func (m *memRuntime) statuses(ctx context.Context) (map[types.UID]*podruntime.PodStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[types.UID]*podruntime.PodStatus{}
	for uid, st := range m.pods {
		c := *st
		c.Sandboxes = slices.Clone(st.Sandboxes)
		c.Containers = slices.Clone(st.Containers)
		out[uid] = &c
	}
	return out, nil
}

// put adds a running pod to the runtime (a pod from an earlier run) and
// returns the IDs of its sandbox and containers.
func (m *memRuntime) put(uid types.UID, ns, name string, ctrs ...string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	st := &podruntime.PodStatus{UID: uid, Namespace: ns, Name: name,
		Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: fmt.Sprintf("sb%d", m.n), State: runtimeapi.PodSandboxState_SANDBOX_READY}}}
	ids := []string{st.Sandboxes[0].Id}
	for _, c := range ctrs {
		m.n++
		st.Containers = append(st.Containers, &runtimeapi.ContainerStatus{Id: fmt.Sprintf("c%d", m.n), State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Metadata: &runtimeapi.ContainerMetadata{Name: c}})
		ids = append(ids, st.Containers[len(st.Containers)-1].Id)
	}
	m.pods[uid] = st
	return ids
}

func (m *memRuntime) log(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, s)
}

func (m *memRuntime) sync(_ context.Context, pod *v1.Pod, _ *podruntime.PodStatus) podruntime.Result {
	m.log("sync " + podName(pod))
	m.mu.Lock()
	p, ok := m.pods[pod.UID]
	// A pod that is absent or was stopped gets a new sandbox and containers.
	fresh := !ok || p.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_READY
	if fresh {
		m.creates++
	}
	m.mu.Unlock()
	var res podruntime.Result
	if fresh {
		var names []string
		for _, c := range pod.Spec.Containers {
			names = append(names, c.Name)
		}
		// What it started, as podruntime reports it.
		res.Started = m.put(pod.UID, pod.Namespace, pod.Name, names...)
	}
	return res
}

func (m *memRuntime) kill(_ context.Context, pod *v1.Pod, st *podruntime.PodStatus, _ *int64) error {
	name := st.Namespace + "/" + st.Name
	if pod != nil {
		name = podName(pod)
	}
	m.log("kill " + name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pods[st.UID]; p != nil {
		p.Sandboxes = []*runtimeapi.PodSandboxStatus{{Id: p.Sandboxes[0].Id, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}
		var ctrs []*runtimeapi.ContainerStatus
		for _, c := range p.Containers {
			ctrs = append(ctrs, &runtimeapi.ContainerStatus{Id: c.Id, State: runtimeapi.ContainerState_CONTAINER_EXITED, Metadata: c.Metadata})
		}
		p.Containers = ctrs
	}
	return nil
}

func (m *memRuntime) remove(_ context.Context, st *podruntime.PodStatus) error {
	m.log("remove " + st.Namespace + "/" + st.Name)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pods, st.UID)
	return nil
}

func (m *memRuntime) callLog() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func (m *memRuntime) uids() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.pods))
}

// memPodStatus: Pending without a ready sandbox, Running with one.
func memPodStatus(pod *v1.Pod, st *podruntime.PodStatus, _ time.Time) v1.PodStatus {
	if sandboxReady(st) {
		return v1.PodStatus{Phase: v1.PodRunning}
	}
	return v1.PodStatus{Phase: v1.PodPending}
}

func podName(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// admitFunc is an Admitter of a function.
type admitFunc func(ctx context.Context, pod *v1.Pod) admission.Response

func (f admitFunc) Start(ctx context.Context, pod *v1.Pod) admission.Response { return f(ctx, pod) }

func admitAll(context.Context, *v1.Pod) admission.Response { return admission.Response{Admit: true} }

// events records Event calls.
type events struct {
	mu  sync.Mutex // guards got
	got []string
}

func (e *events) Event(_ runtime.Object, eventtype, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, eventtype+" "+reason+" "+message)
}
func (e *events) Eventf(o runtime.Object, eventtype, reason, f string, args ...any) {
	e.Event(o, eventtype, reason, fmt.Sprintf(f, args...))
}
func (e *events) AnnotatedEventf(o runtime.Object, _ map[string]string, eventtype, reason, f string, args ...any) {
	e.Eventf(o, eventtype, reason, f, args...)
}

func testPod(name, uid string, created int) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, created, 0, time.UTC))},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "img"}}},
	}
}

// start runs a in the background; the returned stop cancels it and waits
// for Run to return, failing the test on an error.
func start(t *testing.T, a *Agent) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func newTestAgent(t *testing.T, cfg Config, deps Deps) *Agent {
	t.Helper()
	if deps.Table == nil {
		deps.Table = newTable(t, "file")
	}
	if deps.Admit == nil {
		deps.Admit = admitFunc(admitAll)
	}
	deps.Logger = testLogger(t)
	a, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := deps.Runtime.(*fakeRuntime); ok {
		a.derive = f.derive
	}
	return a
}

// newTable returns an empty pod table for sources.
func newTable(tb testing.TB, sources ...string) *Table {
	tb.Helper()
	t, err := NewTable(sources)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}
