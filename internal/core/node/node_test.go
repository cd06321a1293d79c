package node

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
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

// runLoops runs every loop of n until ctx ends or one fails, as a caller of
// Loops does, and returns after all have returned: nil when ctx ended, else
// the first error.
func runLoops(ctx context.Context, n *Node) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, l := range n.Loops() {
		g.Go(func() error { return l.Run(ctx) })
	}
	return g.Wait()
}

// TestRunLoopsOnTheClock runs the managers' loops (in a synctest bubble, on the
// real clock, whose time the bubble fakes): the eviction monitor passes at once
// and then every 10 s, and the loops return nil once ctx ends.
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
		go func() { done <- runLoops(ctx, n) }()
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

// TestDevicePlugins builds the node with the device manager: a device plugin
// registers over the real unix socket, its healthy devices become part of
// admission's allocatable, admission assigns them to the pod it admits, and a
// pod asking for more than there are is rejected with the kubelet's reason:
// allocation comes before the resource fit, so it is the allocation's
// UnexpectedAdmissionError, not OutOf<resource>.
func TestDevicePlugins(t *testing.T) {
	t.Parallel()
	const gpu = "example.com/gpu"
	dir := t.TempDir()
	var killed []nodeapi.KillRequest
	n, err := New(config.Default(), Options{DevicePlugins: &devicemanager.Config{Dir: dir}}, collaborators(&stats{}, &pods{}, &killed))
	if err != nil {
		t.Fatal(err)
	}
	if names := len(n.Loops()); names != 4 || n.Loops()[3].Name != "devicemanager" {
		t.Fatalf("loops: %d, want the device manager's too", names)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- runLoops(ctx, n) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	// The device manager clears its directory before it serves: wait until its
	// registration server answers (it rejects this request) before the plugin
	// makes its socket there.
	sock := filepath.Join(dir, devicemanager.SocketName)
	if err := plugintest.RegisterAs(ctx, sock, &pluginapi.RegisterRequest{Version: "v0"}); err == nil {
		t.Fatal("a registration with version v0 was accepted")
	}
	stub := plugintest.New(filepath.Join(dir, "gpu.sock"), []*pluginapi.Device{
		{ID: "g0", Health: pluginapi.Healthy}, {ID: "g1", Health: pluginapi.Healthy},
	}, nil, plugintest.Funcs{})
	if err := stub.Start(); err != nil {
		t.Fatal(err)
	}
	defer stub.Stop()
	if err := stub.Register(ctx, sock, gpu); err != nil {
		t.Fatal(err)
	}
	for {
		if _, alloc, _ := n.Devices.Capacity(); alloc.Name(gpu, resource.DecimalSI).Value() == 2 {
			break
		}
		select {
		case <-n.Devices.Changed():
		case <-ctx.Done():
			t.Fatal("the plugin's devices never showed up")
		}
	}
	ask := func(count string) admissionResult {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "g" + count, UID: types.UID("g" + count)},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{gpu: resource.MustParse(count)}, Limits: v1.ResourceList{gpu: resource.MustParse(count)}}}}}}
		r := n.Admission.Admit(ctx, pod)
		return admissionResult{r.Admit, r.Reason}
	}
	if got := ask("2"); !got.admit {
		t.Errorf("2 of 2 devices: %+v, want admitted", got)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"g0", "g1"}}, n.Devices.AllocatedDevices("g2", "c")); diff != "" {
		t.Errorf("devices of the admitted pod (-want +got):\n%s", diff)
	}
	if got := ask("3"); got.admit || got.reason != "UnexpectedAdmissionError" {
		t.Errorf("3 of 2 devices: %+v, want UnexpectedAdmissionError", got)
	}
}

type admissionResult struct {
	admit  bool
	reason string
}
