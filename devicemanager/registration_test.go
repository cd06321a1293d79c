package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

// TestRegistrationResourceNames: Register accepts exactly the extended
// resource names, with the kubelet's error text for the others.
func TestRegistrationResourceNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"example.com/gpu", true},
		{"gpu.intel.com/i915", true},
		{"smarter-devices/null", true},
		{"nvidia.com/gpu", true},
		{"gpu", false},
		{"cpu", false},
		{"kubernetes.io/gpu", false},
		{"foo.kubernetes.io/gpu", false},
		{"requests.example.com/gpu", false},
		{"example.com/", false},
		{"/gpu", false},
		{"example.com/g pu", false},
		{"example.com/gpu/x", false},
		{"", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := validateRegistration(&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: tc.name})
			if tc.want {
				if err != nil {
					t.Errorf("resource name %q rejected: %v", tc.name, err)
				}
				return
			}
			if want := fmt.Sprintf("the ResourceName %q is invalid", tc.name); err == nil || err.Error() != want {
				t.Errorf("resource name %q: error %v, want %q", tc.name, err, want)
			}
		})
	}
}

// TestRegistrationEndpoints: Register accepts only a plain file name as the
// endpoint, so the manager never dials outside its directory.
func TestRegistrationEndpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		endpoint string
		want     bool
	}{
		{"p.sock", true},
		{"nvidia-gpu.sock", true},
		{".hidden.sock", true},
		{"..x.sock", true},
		{"", false},
		{".", false},
		{"..", false},
		{"../../x.sock", false},
		{"../../../../tmp/x.sock", false},
		{"/tmp/x.sock", false},
		{"sub/x.sock", false},
		{"x.sock/", false},
		{"x\x00.sock", false},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			t.Parallel()
			err := validateRegistration(&pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: tc.endpoint, ResourceName: "example.com/dev"})
			if tc.want {
				if err != nil {
					t.Errorf("endpoint %q rejected: %v", tc.endpoint, err)
				}
				return
			}
			want := fmt.Sprintf("the Endpoint %q is invalid: it must be a file name in the device plugin directory", tc.endpoint)
			if err == nil || err.Error() != want {
				t.Errorf("endpoint %q: error %v, want %q", tc.endpoint, err, want)
			}
		})
	}
}

func TestRegisterRejected(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{DialTimeout: 300 * time.Millisecond})
	stub := plugintest.New(filepath.Join(env.dir, "p.sock"), devices(pluginapi.Healthy, "a"), nil, plugintest.Funcs{})
	if err := stub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Stop)
	for _, tc := range []struct {
		name    string
		req     *pluginapi.RegisterRequest
		wantMsg string
	}{
		{
			name:    "version",
			req:     &pluginapi.RegisterRequest{Version: "v1alpha", Endpoint: "p.sock", ResourceName: "example.com/dev"},
			wantMsg: `requested API version "v1alpha" is not supported by kubelet. Supported versions are ["v1beta1"]`,
		},
		{
			name:    "native name",
			req:     &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: "cpu"},
			wantMsg: `the ResourceName "cpu" is invalid`,
		},
		{
			name:    "kubernetes.io",
			req:     &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: "kubernetes.io/dev"},
			wantMsg: `the ResourceName "kubernetes.io/dev" is invalid`,
		},
		{
			name:    "endpoint outside the directory",
			req:     &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "../../x.sock", ResourceName: "example.com/up"},
			wantMsg: `the Endpoint "../../x.sock" is invalid`,
		},
		{
			name:    "empty endpoint",
			req:     &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "", ResourceName: "example.com/empty"},
			wantMsg: `the Endpoint "" is invalid`,
		},
		{
			name:    "unreachable endpoint",
			req:     &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "nothing.sock", ResourceName: "example.com/none"},
			wantMsg: `failed to get device plugin options of "example.com/none"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plugintest.RegisterAs(testCtx(t), env.socket(), tc.req)
			if err == nil {
				t.Fatal("registration accepted")
			}
			if msg := status.Convert(errors.Unwrap(err)).Message(); !strings.HasPrefix(msg, tc.wantMsg) {
				t.Errorf("message = %q, want prefix %q", msg, tc.wantMsg)
			}
		})
	}
	if diff := cmp.Diff(map[string]counts{}, env.counts()); diff != "" {
		t.Errorf("capacity after rejections (-want +got):\n%s", diff)
	}
	if got := env.metricValue("kubelet_device_plugin_registration_total", "cpu"); got != 1 {
		t.Errorf("registration_total{cpu} = %v, want 1", got)
	}
}

func TestStartRemovesSocketsOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "stale-plugin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	env := startManager(t, dir, Config{})
	var names []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{SocketName, "notes.txt", "sub"}, names); diff != "" {
		t.Errorf("directory after start (-want +got):\n%s", diff)
	}
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(env.socket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kubelet.sock left after Run returned: %v", err)
	}
}

func TestDeviceStateFollowsListAndWatch(t *testing.T) {
	t.Parallel()
	env := startManager(t, "", Config{})
	const res = "example.com/dev"
	devs := append(devices(pluginapi.Healthy, "a", "b"), devices(pluginapi.Unhealthy, "c")...)
	stub := env.plugin("p.sock", res, devs, nil, plugintest.Funcs{})
	env.waitCounts(res, counts{3, 2})

	numa := &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 1}}}
	steps := []struct {
		name string
		devs []*pluginapi.Device
		want counts
	}{
		{"empty", nil, counts{0, 0}},
		{"repeated and reordered", []*pluginapi.Device{
			{ID: "b", Health: pluginapi.Healthy}, {ID: "a", Health: pluginapi.Healthy, Topology: numa},
			{ID: "b", Health: pluginapi.Healthy},
		}, counts{2, 2}},
		{"last health wins", []*pluginapi.Device{
			{ID: "a", Health: pluginapi.Healthy}, {ID: "a", Health: pluginapi.Unhealthy},
			{ID: "b", Health: "Bogus"}, {ID: "", Health: pluginapi.Healthy},
			{ID: "c", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{}},
		}, counts{3, 1}},
	}
	for _, s := range steps {
		stub.SetDevices(s.devs)
		env.waitCounts(res, s.want)
	}
}

// TestStreamEndNotRedialled: as with the kubelet, a ListAndWatch stream
// that ends leaves the resource's devices unhealthy and is not re-dialled,
// however long the socket stays; the plugin's next registration opens the
// next stream and its devices are healthy again.
func TestStreamEndNotRedialled(t *testing.T) {
	t.Parallel()
	clk := newTimerClock()
	logs := newSyncBuffer()
	env := startManagerLogged(t, "", Config{StopGracePeriod: 24 * time.Hour}, clk, logs)
	const res = "example.com/dev"
	stub := env.plugin("p.sock", res, devices(pluginapi.Healthy, "a", "b"), nil, plugintest.Funcs{})
	env.waitCounts(res, counts{2, 2})
	if n := <-stub.Watches(); n != 1 {
		t.Fatalf("first stream number %d", n)
	}
	stub.DropStreams()
	env.waitCounts(res, counts{2, 0})
	// The log line is the endpoint goroutine's last act.
	logs.waitLog(t, "the stream-ended line", func(log string) bool {
		return strings.Contains(log, "Device plugin stream ended")
	})
	clk.Step(time.Hour)
	select {
	case n := <-stub.Watches():
		t.Fatalf("stream %d opened without a registration", n)
	default:
	}
	if got := env.counts()[res]; got != (counts{2, 0}) {
		t.Fatalf("%s = %+v after an hour, want {2 0}", res, got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := stub.Register(ctx, env.socket(), res); err != nil {
		t.Fatal(err)
	}
	if n := <-stub.Watches(); n != 2 {
		t.Fatalf("stream number %d after registering again, want 2", n)
	}
	env.waitCounts(res, counts{2, 2})
}

// TestPluginGoneRemovedAfterGracePeriod runs on a fake clock: a resource whose
// plugin is gone stays in Capacity, unhealthy, until the clock has passed
// StopGracePeriod since the loss, then is removed and reported once.
func TestPluginGoneRemovedAfterGracePeriod(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	clk := newTimerClock()
	env := startManagerOn(t, "", Config{StopGracePeriod: grace}, clk)
	const res = "example.com/dev"
	stub := env.plugin("p.sock", res, devices(pluginapi.Healthy, "a", "b"), nil, plugintest.Funcs{})
	env.plugin("q.sock", "example.com/other", devices(pluginapi.Healthy, "x"), nil, plugintest.Funcs{})
	env.waitCounts(res, counts{2, 2})
	env.waitCounts("example.com/other", counts{1, 1})

	stub.Stop()
	env.waitCounts(res, counts{2, 0}) // the loss is stamped at the fake time now
	for _, step := range []time.Duration{grace / 2, grace / 2} {
		clk.Step(step)
		c, a, removed := env.m.Capacity()
		if len(removed) != 0 || toCounts(c, a)[res] != (counts{2, 0}) {
			t.Fatalf("within grace: counts %v removed %v", toCounts(c, a), removed)
		}
	}
	clk.Step(time.Nanosecond)
	c, a, removed := env.m.Capacity()
	if diff := cmp.Diff([]string{res}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]counts{"example.com/other": {1, 1}}, toCounts(c, a)); diff != "" {
		t.Errorf("counts after removal (-want +got):\n%s", diff)
	}
	if _, _, removed := env.m.Capacity(); len(removed) != 0 {
		t.Errorf("removed reported twice: %v", removed)
	}

	// The plugin comes back and registers again.
	env.plugin("p2.sock", res, devices(pluginapi.Healthy, "a"), nil, plugintest.Funcs{})
	env.waitCounts(res, counts{1, 1})
}

// TestReRegistrationReplacesEndpoint: a plugin registering again for its
// resource replaces the old endpoint. Replacing cancels the old endpoint's
// stream, but a message or the end of that stream can already be on its way
// to the manager; neither may touch the new endpoint's devices.
func TestReRegistrationReplacesEndpoint(t *testing.T) {
	t.Parallel()
	clk := newTimerClock()
	env := startManagerOn(t, "", Config{}, clk)
	const res = "example.com/dev"
	env.plugin("p.sock", res, devices(pluginapi.Healthy, "a", "b"), nil, plugintest.Funcs{})
	env.waitCounts(res, counts{2, 2})
	old := env.endpoint(res)
	env.plugin("p-new.sock", res, devices(pluginapi.Healthy, "c"), nil, plugintest.Funcs{})
	env.waitCounts(res, counts{1, 1})
	if env.endpoint(res) == old {
		t.Fatal("endpoint not replaced")
	}
	// What the old endpoint's goroutine does with a late message and with
	// the end of its stream. The calls are synchronous: when they return
	// the manager has handled both.
	env.m.updateDevices(old, devices(pluginapi.Healthy, "a", "b", "d"))
	env.m.stopped(old, clk.Now())

	if got := env.counts()[res]; got != (counts{1, 1}) {
		t.Errorf("counts = %v, want {1 1}", got)
	}
	pod := pod("u1", nil, ctr("app", map[string]int64{res: 1}))
	if err := env.m.AllocatePod(testCtx(t), pod); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{res: {"c"}}, env.m.AllocatedDevices("u1", "app")); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
	clk.Step(DefaultStopGracePeriod + time.Second)
	if _, _, removed := env.m.Capacity(); len(removed) != 0 {
		t.Errorf("resource removed as stopped: %v", removed)
	}
}

// stoppedAt returns when the resource lost its plugin; zero while connected
// or when the resource is unknown.
func (e *testEnv) stoppedAt(res string) time.Time {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	if rs := e.m.resources[res]; rs != nil {
		return rs.stoppedAt
	}
	return time.Time{}
}

// endpoint returns the resource's current endpoint, nil if none.
func (e *testEnv) endpoint(res string) *endpoint {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	if rs := e.m.resources[res]; rs != nil {
		return rs.ep
	}
	return nil
}
