package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

// fakeLister is a runtime whose container list a test sets.
type fakeLister struct {
	mu   sync.Mutex
	ctrs []*runtimeapi.Container
	err  error
}

func (f *fakeLister) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctrs, f.err
}

func (f *fakeLister) set(ctrs ...*runtimeapi.Container) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrs = ctrs
}

func criContainer(uid, name string, state runtimeapi.ContainerState, annotations map[string]string) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: uid + "-" + name, State: state, Annotations: annotations,
		Labels: map[string]string{labelPodUID: uid, labelContainerName: name},
	}
}

// nodeEvents records events as "type reason: message".
type nodeEvents struct {
	mu  sync.Mutex
	got []string
}

func (e *nodeEvents) Event(o runtime.Object, typ, reason, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, typ+" "+reason+": "+msg)
}

func (e *nodeEvents) Eventf(o runtime.Object, typ, reason, f string, args ...any) {
	e.Event(o, typ, reason, sprintf(f, args...))
}

func (e *nodeEvents) AnnotatedEventf(o runtime.Object, _ map[string]string, typ, reason, f string, args ...any) {
	e.Eventf(o, typ, reason, f, args...)
}

func TestRuntimeDevices(t *testing.T) {
	t.Parallel()
	rt := &fakeLister{}
	rt.set(
		criContainer("p", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, map[string]string{AnnotationDevices: `{"example.com/gpu":["d1","d0"]}`}),
		criContainer("p", "new", runtimeapi.ContainerState_CONTAINER_CREATED, map[string]string{AnnotationDevices: `{"example.com/nic":["n0"]}`}),
		criContainer("q", "done", runtimeapi.ContainerState_CONTAINER_EXITED, map[string]string{AnnotationDevices: `{"example.com/gpu":["d2"]}`}),
		criContainer("q", "plain", runtimeapi.ContainerState_CONTAINER_RUNNING, nil),
		criContainer("q", "broken", runtimeapi.ContainerState_CONTAINER_RUNNING, map[string]string{AnnotationDevices: `not json`}),
	)
	got, err := RuntimeDevices(rt)(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []HeldDevices{
		{PodUID: "p", ContainerName: "app", Devices: map[string][]string{gpu: {"d1", "d0"}}},
		{PodUID: "p", ContainerName: "new", Devices: map[string][]string{"example.com/nic": {"n0"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RuntimeDevices (-want +got):\n%s", diff)
	}
	rt.mu.Lock()
	rt.err = errors.New("runtime down")
	rt.mu.Unlock()
	if _, err := RuntimeDevices(rt)(t.Context()); err == nil {
		t.Error("RuntimeDevices hid the runtime's error")
	}
}

// TestCorruptCheckpointRebuiltFromRuntime: the checkpoint is corrupt after a
// restart; the assignments come back from the runtime's containers (event
// and metric), the devices a running container holds are never given to
// another pod even though no pod source lists its pod yet, the container
// gets its plugin's answer again when it is re-created, and the devices are
// freed once the runtime no longer runs it.
func TestCorruptCheckpointRebuiltFromRuntime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testCtx(t)

	// Before the restart: p's container got d0 and d1 and was created with
	// the annotation.
	env := startManager(t, dir, Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{3, 3})
	c := ctr("app", map[string]int64{gpu: 2})
	p := pod("p", nil, c)
	*env.active = []*v1.Pod{p}
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	opts, err := env.m.ContainerOptions(ctx, p, &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.FileName), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}

	rt := &fakeLister{}
	rt.set(criContainer("p", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, opts.Annotations))
	events := &nodeEvents{}
	reg := prometheus.NewRegistry()
	var active []*v1.Pod
	var activeMu sync.Mutex
	m, err := New(Config{Dir: dir}, Deps{
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		ActivePods: func() []*v1.Pod {
			activeMu.Lock()
			defer activeMu.Unlock()
			return active
		},
		RuntimeDevices: RuntimeDevices(rt), Recorder: events, NodeName: "node1", Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	select {
	case <-m.Ready():
	case <-ctx.Done():
		t.Fatal("Run never got ready")
	}
	env2 := &testEnv{t: t, m: m, dir: dir, reg: reg}

	if diff := cmp.Diff(map[string][]string{gpu: {"d0", "d1"}}, m.AllocatedDevices("p", "app")); diff != "" {
		t.Errorf("rebuilt assignment (-want +got):\n%s", diff)
	}
	events.mu.Lock()
	gotEvents := events.got
	events.mu.Unlock()
	if len(gotEvents) != 1 || !strings.Contains(gotEvents[0], "Warning "+ReasonCheckpointRecovered+": Device checkpoint was unreadable") ||
		!strings.Contains(gotEvents[0], "rebuilt 1 device assignments of 1 containers from the runtime") {
		t.Errorf("events = %q, want one %s", gotEvents, ReasonCheckpointRecovered)
	}
	if v := testutil.ToFloat64(m.metrics.recoveries.WithLabelValues("rebuilt")); v != 1 {
		t.Errorf("recoveries{rebuilt} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.metrics.recovered.WithLabelValues()); v != 1 {
		t.Errorf("recovered assignments = %v, want 1", v)
	}

	// The agent re-admits p, whose container runs, before the plugin is
	// back: p keeps its devices.
	if err := m.AllocatePod(ctx, p); err != nil {
		t.Errorf("re-admitting the running pod while its plugin is away: %v", err)
	}

	// The plugin is back; no source lists p yet. A pod asking for two
	// devices cannot have p's, one asking for one gets the free one.
	env2.plugin("g2.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2"), nil, plugintest.Funcs{})
	env2.waitCounts(gpu, counts{3, 3})
	greedy := pod("greedy", nil, ctr("app", map[string]int64{gpu: 2}))
	if err := m.AllocatePod(ctx, greedy); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a pod asking for devices p's running container holds: %v, want ErrUnavailable", err)
	}
	q := pod("q", nil, ctr("app", map[string]int64{gpu: 1}))
	if err := m.AllocatePod(ctx, q); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d2"}}, m.AllocatedDevices("q", "app")); diff != "" {
		t.Errorf("q's devices (-want +got):\n%s", diff)
	}

	// p's container is re-created: its plugin answers again for d0 and d1.
	activeMu.Lock()
	active = []*v1.Pod{p, q}
	activeMu.Unlock()
	again, err := m.ContainerOptions(ctx, p, &c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(opts.Annotations, again.Annotations); diff != "" {
		t.Errorf("annotations after recovery (-want +got):\n%s", diff)
	}
	var envs []string
	for _, kv := range again.Envs {
		envs = append(envs, kv.Key+"="+string(kv.Value))
	}
	if diff := cmp.Diff([]string{"DEV_d0=d0", "DEV_d1=d1"}, envs); diff != "" {
		t.Errorf("envs after recovery (-want +got):\n%s", diff)
	}

	// p is gone and the runtime no longer runs it: its devices are free.
	activeMu.Lock()
	active = []*v1.Pod{q}
	activeMu.Unlock()
	rt.set()
	if err := m.AllocatePod(ctx, pod("r", nil, ctr("app", map[string]int64{gpu: 2}))); err != nil {
		t.Errorf("after p's container is gone: %v", err)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d0", "d1"}}, m.AllocatedDevices("r", "app")); diff != "" {
		t.Errorf("r's devices (-want +got):\n%s", diff)
	}
}

// TestInactivePodKeepsDevicesWhileRunning: a pod the pod sources do not
// list keeps its devices while the runtime still runs its container with
// them.
func TestInactivePodKeepsDevicesWhileRunning(t *testing.T) {
	t.Parallel()
	rt := &fakeLister{}
	m, err := New(Config{Dir: t.TempDir()}, Deps{ActivePods: func() []*v1.Pod { return nil }, RuntimeDevices: RuntimeDevices(rt)})
	if err != nil {
		t.Fatal(err)
	}
	m.pods.put("old", "app", gpu, &allocation{ids: []string{"d0"}})
	m.used.add(gpu, "d0")
	rt.set(criContainer("old", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, map[string]string{AnnotationDevices: `{"example.com/gpu":["d0"]}`}))
	m.freeInactive(t.Context())
	if !m.used.has(gpu, "d0") {
		t.Fatal("devices of a running container were freed")
	}
	rt.mu.Lock()
	rt.err = errors.New("runtime down")
	rt.mu.Unlock()
	m.freeInactive(t.Context())
	if !m.used.has(gpu, "d0") {
		t.Fatal("devices were freed while the runtime could not be read")
	}
	rt.mu.Lock()
	rt.err = nil
	rt.ctrs = nil
	rt.mu.Unlock()
	m.freeInactive(t.Context())
	if m.used.has(gpu, "d0") {
		t.Fatal("devices of a pod that is neither active nor running were kept")
	}
}

func sprintf(f string, args ...any) string { return fmt.Sprintf(f, args...) }

// TestRebuiltAssignmentSurvivesRestart: a rebuilt assignment has no plugin
// answer; written to the checkpoint and read back by the next start, the
// plugin is still asked again before the container is created.
func TestRebuiltAssignmentSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, checkpoint.FileName), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := &fakeLister{}
	rt.set(criContainer("p", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, map[string]string{AnnotationDevices: `{"example.com/gpu":["d1"]}`}))
	start := func() (*Manager, func()) {
		m, err := New(Config{Dir: dir}, Deps{ActivePods: func() []*v1.Pod { return nil }, RuntimeDevices: RuntimeDevices(rt),
			Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		select {
		case <-m.Ready():
		case err := <-done:
			t.Fatalf("Run = %v", err)
		}
		return m, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		}
	}
	_, stop := start()
	stop() // writes the rebuilt assignment, without an answer
	m, stop := start()
	defer stop()
	if diff := cmp.Diff(map[string][]string{gpu: {"d1"}}, m.AllocatedDevices("p", "app")); diff != "" {
		t.Errorf("after the second start (-want +got):\n%s", diff)
	}
	env := &testEnv{t: t, m: m, dir: dir}
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{2, 2})
	c := ctr("app", map[string]int64{gpu: 1})
	opts, err := m.ContainerOptions(testCtx(t), pod("p", nil, c), &c)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Envs) != 1 || opts.Envs[0].Key != "DEV_d1" {
		t.Errorf("envs %v, want the plugin's answer for d1", opts.Envs)
	}
}
