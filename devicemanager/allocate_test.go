package devicemanager

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

const gpu = "example.com/gpu"

func TestAllocateInitContainerReuse(t *testing.T) {
	t.Parallel()
	type want map[string][]string // container → devices
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want want
	}{
		{
			name: "app reuses init devices",
			pod: pod("p", []v1.Container{ctr("init1", map[string]int64{gpu: 2}), ctr("init2", map[string]int64{gpu: 1})},
				ctr("app1", map[string]int64{gpu: 1}), ctr("app2", map[string]int64{gpu: 2})),
			want: want{"init1": {"d0", "d1"}, "init2": {"d0"}, "app1": {"d0"}, "app2": {"d1", "d2"}},
		},
		{
			name: "sidecar keeps its devices",
			pod: pod("p", []v1.Container{ctr("init", map[string]int64{gpu: 1}), sidecar(ctr("side", map[string]int64{gpu: 1}))},
				ctr("app", map[string]int64{gpu: 2})),
			// The sidecar starts after the init container ended, takes its
			// device and keeps it; the app gets new ones.
			want: want{"init": {"d0"}, "side": {"d0"}, "app": {"d1", "d2"}},
		},
		{
			name: "containers without devices",
			pod:  pod("p", []v1.Container{ctr("init", nil)}, ctr("app", map[string]int64{"cpu": 1, "example.com/unknown": 1})),
			want: want{"init": {}, "app": {}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := startManager(t, "", Config{})
			env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2", "d3"), nil, plugintest.Funcs{})
			env.waitCounts(gpu, counts{4, 4})
			if err := env.m.AllocatePod(testCtx(t), tc.pod); err != nil {
				t.Fatal(err)
			}
			got := want{}
			for _, c := range append(tc.pod.Spec.InitContainers, tc.pod.Spec.Containers...) {
				got[c.Name] = append([]string{}, env.m.AllocatedDevices("p", c.Name)[gpu]...)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocateErrors(t *testing.T) {
	t.Parallel()
	clk := newTimerClock()
	env := startManagerOn(t, "", Config{}, clk)
	stub := env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{2, 2})
	ctx := testCtx(t)

	holder := pod("holder", nil, ctr("app", map[string]int64{gpu: 1}))
	*env.active = []*v1.Pod{holder}
	if err := env.m.AllocatePod(ctx, holder); err != nil {
		t.Fatal(err)
	}

	err := env.m.AllocatePod(ctx, pod("big", nil, ctr("app", map[string]int64{gpu: 2})))
	wantErr(t, err, ErrUnavailable, "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1")

	changed := pod("holder", nil, ctr("app", map[string]int64{gpu: 2}))
	err = env.m.AllocatePod(ctx, changed)
	wantErr(t, err, nil, `pod "holder" container "app" changed request for resource "example.com/gpu" from 1 to 2`)

	// The holder's device turns unhealthy: its restart cannot get it back.
	stub.SetDevices(append(devices(pluginapi.Unhealthy, "d0"), devices(pluginapi.Healthy, "d1")...))
	env.waitCounts(gpu, counts{2, 1})
	err = env.m.AllocatePod(ctx, holder)
	wantErr(t, err, ErrUnavailable, "previously allocated devices are no longer healthy; cannot allocate unhealthy devices example.com/gpu")

	stub.SetDevices(devices(pluginapi.Unhealthy, "d0", "d1"))
	env.waitCounts(gpu, counts{2, 0})
	err = env.m.AllocatePod(ctx, pod("new", nil, ctr("app", map[string]int64{gpu: 1})))
	wantErr(t, err, ErrUnavailable, "no healthy devices present; cannot allocate unhealthy devices example.com/gpu")

	// Once the resource is removed, a pod asking for it is told so.
	stub.Stop()
	env.waitFor("plugin loss", func() bool { return !env.stoppedAt(gpu).IsZero() })
	clk.Step(DefaultStopGracePeriod + time.Second)
	if _, _, removed := env.m.Capacity(); len(removed) != 1 {
		t.Fatalf("removed %v after the grace period, want %s", removed, gpu)
	}
	err = env.m.AllocatePod(ctx, pod("late", nil, ctr("app", map[string]int64{gpu: 1})))
	wantErr(t, err, ErrUnavailable, "cannot allocate unregistered device example.com/gpu")

	// Devices of pods that are gone are freed; allocatable still covers
	// what the holder keeps.
	if diff := cmp.Diff(v1.ResourceList{gpu: resource.MustParse("1"), "cpu": resource.MustParse("4")},
		env.m.SanitizeAllocatable(v1.ResourceList{"cpu": resource.MustParse("4")})); diff != "" {
		t.Errorf("sanitized allocatable (-want +got):\n%s", diff)
	}
}

// wantErr checks that err reads exactly text, the kubelet's wording, and
// that errors.Is matches class (when not nil) and no other class.
func wantErr(t *testing.T, err, class error, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", text)
	}
	if got := err.Error(); got != text {
		t.Errorf("error text:\n got %q\nwant %q", got, text)
	}
	wantClass(t, err, class)
}

// wantErrPrefix is wantErr for a text that ends in the words of gRPC, which
// vary (a deadline reads "context deadline exceeded" or "stream terminated
// by RST_STREAM ...").
func wantErrPrefix(t *testing.T, err, class error, prefix string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one starting %q", prefix)
	}
	if got := err.Error(); !strings.HasPrefix(got, prefix) {
		t.Errorf("error text:\n got %q\nwant %q...", got, prefix)
	}
	wantClass(t, err, class)
}

func wantClass(t *testing.T, err, class error) {
	t.Helper()
	for _, c := range []error{ErrUnavailable, ErrPlugin, ErrNotRunning} {
		if is := errors.Is(err, c); is != (c == class) {
			t.Errorf("errors.Is(%q, %v) = %v", err, c, is)
		}
	}
}

func TestFreesDevicesOfInactivePods(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{2, 2})
	ctx := testCtx(t)
	first := pod("first", nil, ctr("app", map[string]int64{gpu: 2}))
	*env.active = []*v1.Pod{first}
	if err := env.m.AllocatePod(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := pod("second", nil, ctr("app", map[string]int64{gpu: 2}))
	wantErr(t, env.m.AllocatePod(ctx, second), ErrUnavailable,
		"requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 0")
	*env.active = nil // the first pod terminated
	if err := env.m.AllocatePod(ctx, second); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{}, env.m.AllocatedDevices("first", "app")); diff != "" {
		t.Errorf("first pod still holds (-want +got):\n%s", diff)
	}
}

func TestPreferredAllocation(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	var mu sync.Mutex
	var reqs []*pluginapi.ContainerPreferredAllocationRequest
	stub := plugintest.Funcs{}
	s := plugintest.New("", nil, nil, plugintest.Funcs{}) // the default chooser
	stub.Preferred = func(ctx context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		mu.Lock()
		reqs = append(reqs, r.ContainerRequests...)
		mu.Unlock()
		return s.GetPreferredAllocation(ctx, r)
	}
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2", "d3"),
		&pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, stub)
	env.waitCounts(gpu, counts{4, 4})
	p := pod("p", []v1.Container{ctr("init", map[string]int64{gpu: 1})}, ctr("app", map[string]int64{gpu: 2}))
	if err := env.m.AllocatePod(testCtx(t), p); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d3"}}, env.m.AllocatedDevices("p", "init")); diff != "" {
		t.Errorf("init (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d2", "d3"}}, env.m.AllocatedDevices("p", "app")); diff != "" {
		t.Errorf("app (-want +got):\n%s", diff)
	}
	want := []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{"d0", "d1", "d2", "d3"}, AllocationSize: 1},
		{AvailableDeviceIDs: []string{"d3", "d0", "d1", "d2"}, MustIncludeDeviceIDs: []string{"d3"}, AllocationSize: 2},
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, reqs, protocmp.Transform()); diff != "" {
		t.Errorf("preferred-allocation requests (-want +got):\n%s", diff)
	}
}

func TestPreferredAllocationBadAnswer(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2"),
		&pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
		plugintest.Funcs{Preferred: func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
			return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{
				{DeviceIDs: []string{"nonsense", "d2", "d2"}},
			}}, nil
		}})
	env.waitCounts(gpu, counts{3, 3})
	if err := env.m.AllocatePod(testCtx(t), pod("p", nil, ctr("app", map[string]int64{gpu: 2}))); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d0", "d2"}}, env.m.AllocatedDevices("p", "app")); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
}

func TestContainerOptionsAndPreStart(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	prestarts := make(chan []string, 4)
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"),
		&pluginapi.DevicePluginOptions{PreStartRequired: true},
		plugintest.Funcs{PreStart: func(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
			prestarts <- r.DevicesIds
			return &pluginapi.PreStartContainerResponse{}, nil
		}})
	const nic = "example.com/nic"
	env.plugin("n.sock", nic, devices(pluginapi.Healthy, "n0"), nil,
		plugintest.Funcs{Allocate: func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{
				Envs:        map[string]string{"DEV_d0": "other", "NIC": "n0"},
				Mounts:      []*pluginapi.Mount{{ContainerPath: "/usr/local/stub", HostPath: "/elsewhere"}},
				Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/n0", HostPath: "/dev/n0", Permissions: "r"}},
				Annotations: map[string]string{"nic": "yes"},
				CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/nic=n0"}, {Name: "example.com/nic=n0"}},
			}}}, nil
		}})
	env.waitCounts(gpu, counts{2, 2})
	env.waitCounts(nic, counts{1, 1})
	c := ctr("app", map[string]int64{gpu: 1, nic: 1})
	p := pod("p", nil, c)
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	opts, err := env.m.ContainerOptions(ctx, p, &c)
	if err != nil {
		t.Fatal(err)
	}
	want := &ContainerOptions{
		Envs:        []*runtimeapi.KeyValue{{Key: "DEV_d0", Value: []byte("d0")}, {Key: "NIC", Value: []byte("n0")}},
		Mounts:      []*runtimeapi.Mount{{ContainerPath: "/usr/local/stub", HostPath: "/opt/stub", Readonly: true}},
		Devices:     []*runtimeapi.Device{{ContainerPath: "/dev/d0", HostPath: "/dev/d0", Permissions: "rw"}, {ContainerPath: "/dev/n0", HostPath: "/dev/n0", Permissions: "r"}},
		Annotations: map[string]string{"nic": "yes", AnnotationDevices: `{"example.com/gpu":["d0"],"example.com/nic":["n0"]}`},
		CDIDevices:  []*runtimeapi.CDIDevice{{Name: "example.com/nic=n0"}},
	}
	if diff := cmp.Diff(want, opts, protocmp.Transform()); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	select {
	case ids := <-prestarts:
		if diff := cmp.Diff([]string{"d0"}, ids); diff != "" {
			t.Errorf("pre-start devices (-want +got):\n%s", diff)
		}
	default:
		t.Error("PreStartContainer not called")
	}
	if len(prestarts) != 0 {
		t.Error("PreStartContainer called more than once")
	}
}

// TestHungAllocateDoesNotBlockOthers: while one plugin's Allocate RPC is in
// progress, another pod's allocation of another resource goes ahead; the
// slow one completes when its plugin answers.
func TestHungAllocateDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	// Far longer than the test waits: the slow call stays in the plugin
	// until released.
	env := startManager(t, "", Config{AllocateTimeout: 10 * waitLimit})
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	defaults := plugintest.New("", nil, nil, plugintest.Funcs{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil,
		plugintest.Funcs{Allocate: func(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			entered <- struct{}{}
			select {
			case <-release:
				return defaults.Allocate(ctx, r)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})
	const nic = "example.com/nic"
	env.plugin("n.sock", nic, devices(pluginapi.Healthy, "n0"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{2, 2})
	env.waitCounts(nic, counts{1, 1})
	ctx := t.Context() // no deadline of its own: bounded by release

	hung := make(chan error, 1)
	go func() { hung <- env.m.AllocatePod(ctx, pod("hung", nil, ctr("app", map[string]int64{gpu: 2}))) }()
	select {
	case <-entered:
	case err := <-hung:
		t.Fatalf("gpu allocation returned before reaching the plugin: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("gpu allocation did not reach the plugin")
	}

	ok := make(chan error, 1)
	go func() { ok <- env.m.AllocatePod(ctx, pod("ok", nil, ctr("app", map[string]int64{nic: 1}))) }()
	select {
	case err := <-ok:
		if err != nil {
			t.Fatalf("nic allocation: %v", err)
		}
	case <-time.After(waitLimit / 2):
		t.Fatal("nic allocation blocked while the gpu plugin's Allocate was in progress")
	}
	select {
	case err := <-hung:
		t.Fatalf("gpu allocation returned before its plugin answered: %v", err)
	default:
	}
	if diff := cmp.Diff(map[string][]string{nic: {"n0"}}, env.m.AllocatedDevices("ok", "app")); diff != "" {
		t.Errorf("nic pod devices (-want +got):\n%s", diff)
	}

	releaseOnce()
	select {
	case err := <-hung:
		if err != nil {
			t.Fatalf("gpu allocation after the plugin answered: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("gpu allocation did not return after its plugin answered")
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d0", "d1"}}, env.m.AllocatedDevices("hung", "app")); diff != "" {
		t.Errorf("gpu pod devices (-want +got):\n%s", diff)
	}
}

// TestHungAllocateTimesOut: an Allocate RPC the plugin never answers fails
// after Config.AllocateTimeout with an ErrPlugin timeout error, and the
// devices reserved for it are free again.
func TestHungAllocateTimesOut(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	env := startManager(t, "", Config{AllocateTimeout: timeout})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil,
		plugintest.Funcs{Allocate: func(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	env.waitCounts(gpu, counts{2, 2})

	// The caller's deadline is far later than the timeout, so an error
	// before it can only come from the timeout.
	start := time.Now()
	err := env.m.AllocatePod(testCtx(t), pod("hung", nil, ctr("app", map[string]int64{gpu: 2})))
	elapsed := time.Since(start)
	wantErrPrefix(t, err, ErrPlugin, "rpc error: code = DeadlineExceeded desc = ")
	if code := status.Code(err); code != codes.DeadlineExceeded {
		t.Errorf("gRPC code %v, want %v", code, codes.DeadlineExceeded)
	}
	if elapsed < timeout || elapsed > waitLimit/2 {
		t.Errorf("hung Allocate returned after %v, want about %v", elapsed, timeout)
	}
	// The devices reserved for the failed container are free again.
	if diff := cmp.Diff(v1.ResourceList{}, env.m.SanitizeAllocatable(v1.ResourceList{})); diff != "" {
		t.Errorf("allocated after timeout (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{}, env.m.AllocatedDevices("hung", "app")); diff != "" {
		t.Errorf("failed container holds (-want +got):\n%s", diff)
	}
	if got := env.metricValue("kubelet_device_plugin_alloc_duration_seconds", gpu); got != 1 {
		t.Errorf("alloc_duration samples for %s = %v, want 1", gpu, got)
	}
}

func TestSanitizeAllocatable(t *testing.T) {
	t.Parallel()
	m, err := New(Config{Dir: t.TempDir()}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	m.used.add(gpu, "a", "b", "b")
	m.used.add("example.com/nic", "n")
	for _, tc := range []struct {
		name    string
		in, out v1.ResourceList
	}{
		{"raised", v1.ResourceList{gpu: resource.MustParse("1")},
			v1.ResourceList{gpu: resource.MustParse("2"), "example.com/nic": resource.MustParse("1")}},
		{"already enough", v1.ResourceList{gpu: resource.MustParse("5"), "example.com/nic": resource.MustParse("1")},
			v1.ResourceList{gpu: resource.MustParse("5"), "example.com/nic": resource.MustParse("1")}},
		{"nil", nil, v1.ResourceList{gpu: resource.MustParse("2"), "example.com/nic": resource.MustParse("1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := tc.in.DeepCopy()
			got := m.SanitizeAllocatable(tc.in)
			if diff := cmp.Diff(tc.out, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.in); diff != "" {
				t.Errorf("argument modified (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPluginAnswersNonsense(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0"), nil,
		plugintest.Funcs{Allocate: func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return &pluginapi.AllocateResponse{}, nil
		}})
	env.waitCounts(gpu, counts{1, 1})
	err := env.m.AllocatePod(testCtx(t), pod("p", nil, ctr("app", map[string]int64{gpu: 1})))
	// The kubelet prints the response after the text; an empty one prints
	// as nothing.
	wantErr(t, err, ErrPlugin, "no containers return in allocation response ")
	if diff := cmp.Diff(v1.ResourceList{}, env.m.SanitizeAllocatable(v1.ResourceList{})); diff != "" {
		t.Errorf("devices held after a failed allocation (-want +got):\n%s", diff)
	}
}

func TestHungPreStartTimesOut(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{PreStartTimeout: 200 * time.Millisecond})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0"), &pluginapi.DevicePluginOptions{PreStartRequired: true},
		plugintest.Funcs{PreStart: func(ctx context.Context, _ *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	env.waitCounts(gpu, counts{1, 1})
	c := ctr("app", map[string]int64{gpu: 1})
	p := pod("p", nil, c)
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	_, err := env.m.ContainerOptions(ctx, p, &c)
	wantErrPrefix(t, err, ErrPlugin, "device plugin PreStartContainer rpc failed with err: rpc error: code = DeadlineExceeded desc = ")
	if code := status.Code(err); code != codes.DeadlineExceeded {
		t.Errorf("gRPC code %v, want %v", code, codes.DeadlineExceeded)
	}
}

// TestContainerOptionsAllocatesMissing covers a node reboot: the container
// reaches creation without an assignment (its plugin registered late), and
// ContainerOptions allocates it.
func TestContainerOptionsAllocatesMissing(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{2, 2})
	c := ctr("app", map[string]int64{gpu: 2})
	p := pod("p", nil, c)
	*env.active = []*v1.Pod{p}
	opts, err := env.m.ContainerOptions(testCtx(t), p, &c)
	if err != nil {
		t.Fatal(err)
	}
	if opts == nil || len(opts.Devices) != 2 {
		t.Fatalf("options %v, want 2 devices", opts)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d0", "d1"}}, env.m.AllocatedDevices("p", "app")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestContainerOptionsPodGone: for a pod that is no longer active,
// ContainerOptions never allocates. Without devices (never assigned, or
// freed and given to another pod) it returns nil and no error; devices it
// still holds are returned as they are.
func TestContainerOptionsPodGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// setup leaves gone inactive and returns the devices it still
		// holds.
		setup func(t *testing.T, env *testEnv, gone *v1.Pod) []string
	}{
		{
			name:  "never assigned",
			setup: func(*testing.T, *testEnv, *v1.Pod) []string { return nil }, // never active
		},
		{
			name: "freed and taken by another pod",
			setup: func(t *testing.T, env *testEnv, gone *v1.Pod) []string {
				*env.active = []*v1.Pod{gone}
				if err := env.m.AllocatePod(testCtx(t), gone); err != nil {
					t.Fatal(err)
				}
				next := pod("next", nil, ctr("app", map[string]int64{gpu: 2}))
				*env.active = []*v1.Pod{next} // gone terminated
				if err := env.m.AllocatePod(testCtx(t), next); err != nil {
					t.Fatal(err)
				}
				return nil
			},
		},
		{
			name: "still held",
			setup: func(t *testing.T, env *testEnv, gone *v1.Pod) []string {
				*env.active = []*v1.Pod{gone}
				if err := env.m.AllocatePod(testCtx(t), gone); err != nil {
					t.Fatal(err)
				}
				*env.active = nil // gone terminated; nothing freed it yet
				return []string{"d0", "d1"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := startManager(t, "", Config{})
			env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
			env.waitCounts(gpu, counts{2, 2})
			c := ctr("app", map[string]int64{gpu: 2})
			gone := pod("gone", nil, c)
			held := tc.setup(t, env, gone)
			others := env.m.SanitizeAllocatable(v1.ResourceList{})

			opts, err := env.m.ContainerOptions(testCtx(t), gone, &c)
			if err != nil {
				t.Fatalf("ContainerOptions: %v", err)
			}
			want := map[string][]string{}
			if held != nil {
				want[gpu] = held
				if opts == nil || len(opts.Devices) != len(held) {
					t.Errorf("options %v, want the %d held devices", opts, len(held))
				}
			} else if opts != nil {
				t.Errorf("options %v, want nil", opts)
			}
			if diff := cmp.Diff(want, env.m.AllocatedDevices("gone", "app")); diff != "" {
				t.Errorf("gone pod holds (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(others, env.m.SanitizeAllocatable(v1.ResourceList{})); diff != "" {
				t.Errorf("devices in use changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestRestartKeepsRunningContainers: after a restart, before the pod
// sources are complete, a container the runtime reports running keeps its
// devices without any check, even while its plugin is away; one that is not
// running is checked.
func TestRestartKeepsRunningContainers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := startManager(t, dir, Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{2, 2})
	running, stopped := ctr("running", map[string]int64{gpu: 1}), ctr("stopped", map[string]int64{gpu: 1})
	p := pod("p", nil, running, stopped)
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := env.m.ContainerOptions(ctx, p, &running); err != nil {
		t.Fatal(err)
	}
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}

	m, err := New(Config{Dir: dir}, Deps{
		ActivePods:       func() []*v1.Pod { return []*v1.Pod{p} },
		SourcesReady:     func() bool { return false },
		ContainerRunning: func(_, name string) bool { return name == "running" },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Allocate(ctx, p, &running); err != nil {
		t.Errorf("running container: %v", err)
	}
	wantErr(t, m.Allocate(ctx, p, &stopped), ErrUnavailable, "no healthy devices present; cannot allocate unhealthy devices example.com/gpu")
}

// TestPreferredAllocationErrors: a failed GetPreferredAllocation and devices
// taken while the plugin was choosing fail the allocation with the
// kubelet's texts, and leave nothing reserved.
func TestPreferredAllocationErrors(t *testing.T) {
	t.Parallel()
	opts := &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
	t.Run("rpc fails", func(t *testing.T) {
		t.Parallel()
		env := startManager(t, "", Config{})
		env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2"), opts,
			plugintest.Funcs{Preferred: func(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
				return nil, status.Error(codes.Internal, "boom")
			}})
		env.waitCounts(gpu, counts{3, 3})
		err := env.m.AllocatePod(testCtx(t), pod("p", nil, ctr("app", map[string]int64{gpu: 2})))
		wantErr(t, err, ErrPlugin, "device plugin GetPreferredAllocation rpc failed with err: rpc error: code = Internal desc = boom")
		if code := status.Code(err); code != codes.Internal {
			t.Errorf("gRPC code %v, want %v", code, codes.Internal)
		}
		if diff := cmp.Diff(v1.ResourceList{}, env.m.SanitizeAllocatable(v1.ResourceList{})); diff != "" {
			t.Errorf("devices held after a failed allocation (-want +got):\n%s", diff)
		}
	})
	t.Run("devices taken meanwhile", func(t *testing.T) {
		t.Parallel()
		env := startManager(t, "", Config{})
		defaults := plugintest.New("", nil, nil, plugintest.Funcs{})
		var calls atomic.Int32
		other := pod("other", nil, ctr("app", map[string]int64{gpu: 2}))
		otherErr := make(chan error, 1)
		env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2"), opts,
			plugintest.Funcs{Preferred: func(ctx context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
				// While the first pod's plugin chooses, another pod
				// takes two of the three devices.
				// (The other pod's own request is the second call.)
				if calls.Add(1) == 1 {
					otherErr <- env.m.AllocatePod(ctx, other)
				}
				return defaults.GetPreferredAllocation(ctx, r)
			}})
		env.waitCounts(gpu, counts{3, 3})
		err := env.m.AllocatePod(testCtx(t), pod("p", nil, ctr("app", map[string]int64{gpu: 2})))
		select {
		case err := <-otherErr:
			if err != nil {
				t.Fatalf("other pod: %v", err)
			}
		default:
			t.Fatal("the plugin was not asked for a preferred allocation")
		}
		wantErr(t, err, ErrUnavailable, "unexpectedly allocated less resources than required. Requested: 2, Got: 1")
		if diff := cmp.Diff(v1.ResourceList{gpu: resource.MustParse("2")}, env.m.SanitizeAllocatable(v1.ResourceList{})); diff != "" {
			t.Errorf("devices in use (-want +got):\n%s", diff)
		}
	})
}

// TestCheckpointWriteError: ContainerOptions reports a checkpoint it cannot
// write as the kubelet's allocation does.
func TestCheckpointWriteError(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{1, 1})
	c := ctr("app", map[string]int64{gpu: 1})
	p := pod("p", nil, c)
	*env.active = []*v1.Pod{p}
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A directory where the file goes makes the final rename fail. The
	// background writer may recreate the file meanwhile: retry.
	path := filepath.Join(env.dir, checkpoint.FileName)
	for {
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
		err := os.Mkdir(path, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			t.Fatal(err)
		}
	}
	_, err := env.m.ContainerOptions(ctx, p, &c)
	const prefix = `failed to write checkpoint file "kubelet_internal_checkpoint": `
	if err == nil || !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("ContainerOptions error %v, want one starting %q", err, prefix)
	}
}
