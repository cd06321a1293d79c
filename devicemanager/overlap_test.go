package devicemanager

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

// blockingAllocate is an Allocate that signals entered, then waits for
// release (and then answers as the default stub does) or for its context.
func blockingAllocate(entered chan<- struct{}, release <-chan struct{}) func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	defaults := plugintest.New("", nil, nil, plugintest.Funcs{})
	return func(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		entered <- struct{}{}
		select {
		case <-release:
			return defaults.Allocate(ctx, r)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// TestAllocateErrorReleasesThePodsDevices: when a later container's (or
// resource's) Allocate fails, the devices that AllocatePod already gave the
// pod's earlier containers are free again at once, not only once the pod is
// seen inactive: the pod is rejected and will never use them.
func TestAllocateErrorReleasesThePodsDevices(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
	const nic = "example.com/nic"
	env.plugin("n.sock", nic, devices(pluginapi.Healthy, "n0"), nil,
		plugintest.Funcs{Allocate: func(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return nil, errors.New("nic broken")
		}})
	env.waitCounts(gpu, counts{2, 2})
	env.waitCounts(nic, counts{1, 1})
	ctx := testCtx(t)

	// The init container's and the first app container's gpus are
	// assigned, then the second app container's nic fails.
	p := pod("p", []v1.Container{ctr("init", map[string]int64{gpu: 1})},
		ctr("a", map[string]int64{gpu: 2}), ctr("b", map[string]int64{nic: 1}))
	err := env.m.AllocatePod(ctx, p)
	wantErrPrefix(t, err, ErrPlugin, "rpc error: code = Unknown desc = nic broken")
	for _, c := range []string{"init", "a", "b"} {
		if diff := cmp.Diff(map[string][]string{}, env.m.AllocatedDevices("p", c)); diff != "" {
			t.Errorf("container %s of the failed pod holds (-want +got):\n%s", c, diff)
		}
	}
	if diff := cmp.Diff(v1.ResourceList{}, env.m.SanitizeAllocatable(v1.ResourceList{})); diff != "" {
		t.Errorf("devices in use after the failed allocation (-want +got):\n%s", diff)
	}
	// p stays active, so only the release can have freed its devices for
	// the next pod.
	*env.active = []*v1.Pod{p}
	q := pod("q", nil, ctr("app", map[string]int64{gpu: 2}))
	if err := env.m.AllocatePod(ctx, q); err != nil {
		t.Fatalf("the released gpus for the next pod: %v", err)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d0", "d1"}}, env.m.AllocatedDevices("q", "app")); diff != "" {
		t.Errorf("next pod's devices (-want +got):\n%s", diff)
	}
}

// TestOverlappingAdmissionsKeepInitDevicesForReuse: while one pod's
// allocation waits on a plugin between its init and app containers, another
// pod's allocation goes ahead; the first pod's app container still gets the
// device its init container used, and no device goes to two pods.
func TestOverlappingAdmissionsKeepInitDevicesForReuse(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{AllocateTimeout: 10 * waitLimit})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1"), nil, plugintest.Funcs{})
	// Sorted before example.com/gpu: a container asking for both waits on
	// this plugin before its gpu is chosen.
	const acc = "example.com/accel"
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	env.plugin("a.sock", acc, devices(pluginapi.Healthy, "a0"), nil,
		plugintest.Funcs{Allocate: blockingAllocate(entered, release)})
	env.waitCounts(gpu, counts{2, 2})
	env.waitCounts(acc, counts{1, 1})
	ctx := t.Context() // bounded by release

	first := pod("first", []v1.Container{ctr("init", map[string]int64{gpu: 1})},
		ctr("app", map[string]int64{acc: 1, gpu: 1}))
	*env.active = []*v1.Pod{first}
	firstErr := make(chan error, 1)
	go func() { firstErr <- env.m.AllocatePod(ctx, first) }()
	select {
	case <-entered:
	case err := <-firstErr:
		t.Fatalf("first pod's allocation returned before its accel plugin answered: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("first pod's allocation did not reach the accel plugin")
	}

	// The first pod's init container holds d0, which its app container is
	// to reuse: the second pod gets d1.
	second := pod("second", nil, ctr("app", map[string]int64{gpu: 1}))
	*env.active = []*v1.Pod{first, second}
	if err := env.m.AllocatePod(testCtx(t), second); err != nil {
		t.Fatalf("second pod while the first waits on its plugin: %v", err)
	}
	close(release)
	select {
	case err := <-firstErr:
		if err != nil {
			t.Fatalf("first pod after its plugin answered: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("first pod's allocation did not return after its plugin answered")
	}
	got := map[string]map[string][]string{
		"first/init": env.m.AllocatedDevices("first", "init"),
		"first/app":  env.m.AllocatedDevices("first", "app"),
		"second/app": env.m.AllocatedDevices("second", "app"),
	}
	want := map[string]map[string][]string{
		"first/init": {gpu: {"d0"}},
		"first/app":  {gpu: {"d0"}, acc: {"a0"}},
		"second/app": {gpu: {"d1"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
}

// lineWatch is a log writer that closes seen once a line containing substr
// was written.
type lineWatch struct {
	substr string
	once   sync.Once
	seen   chan struct{}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.substr) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestShortAllocationWaitsForDevicesInFlight: a container that finds too
// few free devices while another allocation of the resource waits on its
// plugin waits for it, as the kubelet's serial admission would: when that
// allocation fails, the container gets the devices it freed; when it
// succeeds, the container fails with the kubelet's text. No device goes to
// two containers.
func TestShortAllocationWaitsForDevicesInFlight(t *testing.T) {
	t.Parallel()
	for _, firstFails := range []bool{true, false} {
		name := "first succeeds"
		if firstFails {
			name = "first fails"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			watch := &lineWatch{substr: "Waiting for devices reserved by allocations in progress", seen: make(chan struct{})}
			env := startManagerLogged(t, "", Config{AllocateTimeout: 10 * waitLimit}, nil, watch)
			type call struct {
				ids    []string
				answer chan error
			}
			calls := make(chan call)
			defaults := plugintest.New("", nil, nil, plugintest.Funcs{})
			env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0"), nil,
				plugintest.Funcs{Allocate: func(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
					c := call{r.GetContainerRequests()[0].GetDevicesIds(), make(chan error, 1)}
					select {
					case calls <- c:
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
			env.waitCounts(gpu, counts{1, 1})
			ctx := testCtx(t)
			first, second := pod("first", nil, ctr("app", map[string]int64{gpu: 1})), pod("second", nil, ctr("app", map[string]int64{gpu: 1}))
			*env.active = []*v1.Pod{first, second}
			firstErr, secondErr := make(chan error, 1), make(chan error, 1)
			go func() { firstErr <- env.m.AllocatePod(ctx, first) }()
			c := <-calls
			go func() { secondErr <- env.m.AllocatePod(ctx, second) }()
			select {
			case <-watch.seen:
			case err := <-secondErr:
				t.Fatalf("second pod did not wait for the device in flight: %v", err)
			case <-ctx.Done():
				t.Fatal("second pod's allocation did not wait")
			}
			if firstFails {
				c.answer <- errors.New("gpu on fire")
				if err := <-firstErr; err == nil {
					t.Fatal("first pod's allocation succeeded")
				}
				c2 := <-calls
				if diff := cmp.Diff([]string{"d0"}, c2.ids); diff != "" {
					t.Errorf("second pod's Allocate devices (-want +got):\n%s", diff)
				}
				c2.answer <- nil
				if err := <-secondErr; err != nil {
					t.Fatalf("second pod after the first failed: %v", err)
				}
			} else {
				c.answer <- nil
				if err := <-firstErr; err != nil {
					t.Fatalf("first pod: %v", err)
				}
				wantErr(t, <-secondErr, ErrUnavailable, "requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0")
			}
			got := map[string]map[string][]string{
				"first": env.m.AllocatedDevices("first", "app"), "second": env.m.AllocatedDevices("second", "app"),
			}
			want := map[string]map[string][]string{"first": {gpu: {"d0"}}, "second": {}}
			if firstFails {
				want = map[string]map[string][]string{"first": {}, "second": {gpu: {"d0"}}}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}
