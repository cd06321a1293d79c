package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
	"github.com/nodekeeper/nodekeeper/internal/core/admission"
)

// These tests run the agent with the admission chain the daemon builds (the
// device step, then the resource fit) over a real device manager and a stub
// device plugin on real Unix sockets, on real time: the stub's Allocate
// answers only when the test says so.

const (
	testGPU = "example.com/gpu"
	// devWait bounds every wait of these tests; none is expected to come
	// near it.
	devWait = time.Minute
)

// allocateCall is one Allocate RPC the stub received; it answers with
// answer's value (nil: the default response).
type allocateCall struct {
	ids    []string
	answer chan error
}

// noPressure is a node without pressure conditions.
type noPressure struct{}

func (noPressure) Conditions() []v1.NodeConditionType { return nil }

// logWatch is a log writer that closes seen once a line containing substr
// was written.
type logWatch struct {
	substr []byte
	once   sync.Once
	seen   chan struct{}
}

func (w *logWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.substr) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// deviceNode is an agent whose admission allocates devices of one stub
// plugin with the GPUs d0..., whose Allocate calls go to calls.
type deviceNode struct {
	agent   *Agent
	mem     *memRuntime
	devices *devicemanager.Manager
	stub    *plugintest.Stub
	calls   chan allocateCall
	// waiting is closed once an allocation waited for devices that an
	// allocation in flight reserved.
	waiting chan struct{}
}

// startDeviceNode starts the device manager, the stub plugin (registered)
// and the agent; everything stops when the test ends.
func startDeviceNode(tb testing.TB, allocateTimeout time.Duration, gpus ...string) *deviceNode {
	tb.Helper()
	return startDeviceNodeWith(tb, Config{}, allocateTimeout, gpus...)
}

// startDeviceNodeWith is startDeviceNode with the agent's Config cfg.
func startDeviceNodeWith(tb testing.TB, cfg Config, allocateTimeout time.Duration, gpus ...string) *deviceNode {
	tb.Helper()
	dir := tb.TempDir() // removed after the cleanup below stopped everything
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	n := &deviceNode{calls: make(chan allocateCall), waiting: make(chan struct{})}
	var out io.Writer = io.Discard
	if t, ok := tb.(*testing.T); ok {
		out = t.Output()
	}
	watch := &logWatch{substr: []byte("Waiting for devices reserved by allocations in progress"), seen: n.waiting}
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(out, watch), nil))

	table := newTable(tb, "file") // first: the device manager and admission read it
	dm, err := devicemanager.New(devicemanager.Config{Dir: dir, AllocateTimeout: allocateTimeout},
		devicemanager.Deps{Logger: logger, ActivePods: table.ActivePods})
	if err != nil {
		tb.Fatal(err)
	}
	n.devices = dm
	wg.Go(func() {
		if err := dm.Run(ctx); err != nil {
			tb.Errorf("device manager: %v", err)
		}
	})
	select {
	case <-dm.Ready():
	case <-time.After(devWait):
		tb.Fatal("device manager did not start")
	}

	var devs []*pluginapi.Device
	for _, id := range gpus {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	defaults := plugintest.New("", nil, nil, plugintest.Funcs{})
	stub := plugintest.New(filepath.Join(dir, "gpu.sock"), devs, nil, plugintest.Funcs{
		Allocate: func(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			c := allocateCall{ids: r.GetContainerRequests()[0].GetDevicesIds(), answer: make(chan error, 1)}
			select {
			case n.calls <- c:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			select {
			case err := <-c.answer:
				if err != nil {
					return nil, err
				}
				return defaults.Allocate(ctx, r)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})
	if err := stub.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stub.Stop)
	n.stub = stub
	rctx, rcancel := context.WithTimeout(ctx, devWait)
	defer rcancel()
	if err := stub.Register(rctx, filepath.Join(dir, devicemanager.SocketName), testGPU); err != nil {
		tb.Fatal(err)
	}
	for {
		if _, alloc, _ := dm.Capacity(); alloc.Name(testGPU, resource.DecimalSI).Value() == int64(len(gpus)) {
			break
		}
		select {
		case <-dm.Changed():
		case <-rctx.Done():
			tb.Fatal("the stub's devices did not show")
		}
	}

	chain, err := admission.New(admission.Deps{
		ActivePods: table.ActivePods,
		Conditions: noPressure{},
		Node: func() (admission.Node, error) {
			_, devs, _ := dm.Capacity()
			alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"),
				v1.ResourcePods: resource.MustParse("10")}
			maps.Copy(alloc, devs)
			return admission.Node{Allocatable: alloc}, nil
		},
		Devices: dm, Allocator: dm,
	})
	if err != nil {
		tb.Fatal(err)
	}
	mem, rt := newMem()
	n.mem = mem
	n.agent, err = New(cfg, Deps{Table: table, Runtime: rt, Admit: chain, Logger: logger, Devices: dm})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() {
		if err := n.agent.Run(ctx); err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return n
}

// gpuPod is a pod whose one container asks for count GPUs.
func gpuPod(name, uid string, created, count int) *v1.Pod {
	p := testPod(name, uid, created)
	q := *resource.NewQuantity(int64(count), resource.DecimalSI)
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{testGPU: q}, Limits: v1.ResourceList{testGPU: q},
	}
	return p
}

// setPods hands pods to the agent, failing if the loop does not take them
// within devWait.
func (n *deviceNode) setPods(tb testing.TB, pods ...*v1.Pod) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), devWait)
	defer cancel()
	if err := n.agent.SetPods(ctx, "file", pods); err != nil {
		tb.Fatalf("SetPods: %v (the loop is held)", err)
	}
}

// nextCall returns the stub's next Allocate call.
func (n *deviceNode) nextCall(tb testing.TB) allocateCall {
	tb.Helper()
	select {
	case c := <-n.calls:
		return c
	case <-time.After(devWait):
		tb.Fatal("no Allocate call reached the plugin")
		return allocateCall{}
	}
}

// waitStatus waits until the pod's published status satisfies cond.
func (n *deviceNode) waitStatus(tb testing.TB, name string, what string, cond func(v1.PodStatus) bool) {
	tb.Helper()
	deadline := time.After(devWait)
	for {
		for _, p := range n.agent.Pods() {
			if p.Name == name && cond(p.Status) {
				return
			}
		}
		select {
		case <-n.agent.Changes():
		case <-deadline:
			tb.Fatalf("pod %s never %s; pods: %v", name, what, phases(n.agent.Pods()))
		}
	}
}

func running(st v1.PodStatus) bool { return st.Phase == v1.PodRunning }

// TestPlainPodNotHeldByHungAllocate: while a device plugin's Allocate for
// one pod does not answer, a pod that asks for no device is admitted and
// started; a second pod for the same (only) device waits for the first's
// Allocate, and when that fails, the first pod is rejected as the kubelet
// rejects it, and the second gets the device. No device goes to two pods.
func TestPlainPodNotHeldByHungAllocate(t *testing.T) {
	t.Parallel()
	// The stub answers only when told to; the timeout never fires.
	n := startDeviceNode(t, 10*devWait, "d0")
	trainer := gpuPod("trainer", "u1", 0, 1)
	n.setPods(t, trainer)
	first := n.nextCall(t)
	if diff := cmp.Diff([]string{"d0"}, first.ids); diff != "" {
		t.Errorf("trainer's Allocate devices (-want +got):\n%s", diff)
	}

	// trainer's Allocate is unanswered until first.answer gets a value.
	web := testPod("web", "u2", 1)
	start := time.Now()
	n.setPods(t, trainer, web)
	n.waitStatus(t, "web", "ran", running)
	t.Logf("web admitted and running %v after SetPods, with trainer's Allocate unanswered", time.Since(start))
	if got := phases(n.agent.ActivePods()); got["default/trainer"] != v1.PodPending {
		t.Errorf("trainer is not pending among the active pods: %v", got)
	}
	for _, c := range n.mem.callLog() {
		if c == "sync default/trainer" {
			t.Errorf("trainer synced before its devices were allocated")
		}
	}

	// A second pod for the only GPU waits for trainer's Allocate.
	trainer2 := gpuPod("trainer2", "u3", 2, 1)
	n.setPods(t, trainer, web, trainer2)
	select {
	case <-n.waiting:
	case <-time.After(devWait):
		t.Fatal("trainer2's allocation did not wait for the device in flight")
	}
	first.answer <- errors.New("gpu on fire")
	const msg = "Allocate failed due to rpc error: code = Unknown desc = gpu on fire, which is unexpected"
	n.waitStatus(t, "trainer", "was rejected", func(st v1.PodStatus) bool {
		return st.Phase == v1.PodFailed && st.Reason == admission.ReasonUnexpected && st.Message == msg
	})
	second := n.nextCall(t)
	if diff := cmp.Diff([]string{"d0"}, second.ids); diff != "" {
		t.Errorf("trainer2's Allocate devices (-want +got):\n%s", diff)
	}
	second.answer <- nil
	n.waitStatus(t, "trainer2", "ran", running)
	got := map[string]map[string][]string{
		"trainer":  n.devices.AllocatedDevices("u1", "c"),
		"trainer2": n.devices.AllocatedDevices("u3", "c"),
		"web":      n.devices.AllocatedDevices("u2", "c"),
	}
	want := map[string]map[string][]string{"trainer": {}, "trainer2": {testGPU: {"d0"}}, "web": {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
}

// TestDeviceHealthInPodStatus: the status of a pod holding a device shows
// the device's health (allocatedResourcesStatus, KEP-4680) as the plugin's
// ListAndWatch gives it, and a change of it is shown at once: the resync
// period is an hour and the runtime does not change, so only the device
// manager's HealthChanges can make the loop derive the status again.
func TestDeviceHealthInPodStatus(t *testing.T) {
	t.Parallel()
	n := startDeviceNodeWith(t, Config{ResyncPeriod: time.Hour}, devWait, "d0", "d1")
	n.setPods(t, gpuPod("trainer", "u1", 0, 1))
	n.nextCall(t).answer <- nil
	health := func(h v1.ResourceHealthStatus) []v1.ResourceStatus {
		return []v1.ResourceStatus{{Name: testGPU, Resources: []v1.ResourceHealth{{ResourceID: "d0", Health: h}}}}
	}
	shows := func(h v1.ResourceHealthStatus) func(v1.PodStatus) bool {
		return func(st v1.PodStatus) bool {
			return st.Phase == v1.PodRunning && len(st.ContainerStatuses) == 1 &&
				cmp.Equal(health(h), st.ContainerStatuses[0].AllocatedResourcesStatus)
		}
	}
	n.waitStatus(t, "trainer", "showed d0 Healthy", shows(v1.ResourceHealthStatusHealthy))
	n.stub.SetDevices([]*pluginapi.Device{{ID: "d0", Health: pluginapi.Unhealthy}, {ID: "d1", Health: pluginapi.Healthy}})
	n.waitStatus(t, "trainer", "showed d0 Unhealthy", shows(v1.ResourceHealthStatusUnhealthy))
	n.stub.SetDevices([]*pluginapi.Device{{ID: "d0", Health: pluginapi.Healthy}, {ID: "d1", Health: pluginapi.Healthy}})
	n.waitStatus(t, "trainer", "showed d0 Healthy again", shows(v1.ResourceHealthStatusHealthy))
}

// BenchmarkPlainPodBehindHungAllocate is issue 26's observation: a plain pod
// applied 2 s after a pod whose device plugin never answers Allocate (the
// default 30 s timeout). It reports the seconds from the plain pod's SetPods
// to its Running status.
func BenchmarkPlainPodBehindHungAllocate(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		n := startDeviceNode(b, devicemanager.DefaultAllocateTimeout, "d0")
		b.StartTimer()
		// SetPods returns once the loop took the pods: not before the
		// Allocate ended when the loop waits for it.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), devWait)
			defer cancel()
			_ = n.agent.SetPods(ctx, "file", []*v1.Pod{gpuPod("trainer", "u1", 0, 1)})
		}()
		n.nextCall(b) // never answered
		time.Sleep(2 * time.Second)
		start := time.Now()
		n.setPods(b, gpuPod("trainer", "u1", 0, 1), testPod("web", "u2", 1))
		n.waitStatus(b, "web", "ran", running)
		b.ReportMetric(time.Since(start).Seconds(), "s-to-running")
	}
}
