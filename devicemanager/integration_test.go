package devicemanager

// Integration tests against real third-party device plugins, built from the
// separate module in hack/tools. The plugins hard-code
// /var/lib/kubelet/device-plugins, so each runs as root in a private mount
// namespace where a tmpfs covers /var/lib and /tmp and the test's directory
// is bind-mounted at the plugin path: nothing is written on the host.
//
// Without root or unshare they are skipped, except under CI=true, where
// they must run.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// tools are the binaries the integration tests need, built from the
// separate module hack/tools.
var tools = toolbuild.Spec{
	Module:    "hack/tools",
	KeyFiles:  []string{"kubeletcheckpoint/main.go"},
	CacheName: "devicemanager-tools",
	Binaries: map[string]string{
		"sample-device-plugin": "k8s.io/kubernetes/test/images/sample-device-plugin",
		"gpu_plugin":           "github.com/intel/intel-device-plugins-for-kubernetes/cmd/gpu_plugin",
		"gpu_fakedev":          "github.com/intel/intel-device-plugins-for-kubernetes/cmd/gpu_fakedev",
		"kubeletcheckpoint":    "./kubeletcheckpoint",
	},
}

// buildToolsOnce is the test binary's one look-up (or build) of tools.
var buildToolsOnce = sync.OnceValues(func() (string, error) { return toolbuild.Build(tools) })

// requireIntegration skips unless the machine can run the real plugins; under
// CI=true it fails instead.
func requireIntegration(t *testing.T) {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		integration.Require(t, fmt.Sprintf(format, args...))
	}
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("integration test skipped in -short mode")
	}
	if runtime.GOOS != "linux" {
		skip("needs Linux mount namespaces")
	}
	if os.Geteuid() != 0 {
		skip("needs root for a private mount namespace")
	}
	for _, tool := range []string{"unshare", "mount", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("needs %s: %v", tool, err)
		}
	}
}

// buildTools returns the directory with the tools' binaries, built once per
// machine (see toolbuild).
func buildTools(t *testing.T) string {
	t.Helper()
	dir, err := buildToolsOnce()
	if err != nil {
		t.Fatalf("build hack/tools: %v", err)
	}
	return dir
}

// logWriter forwards a process's output to the test log, line by line.
type logWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    bytes.Buffer
	done   bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			break
		}
		w.t.Log(w.prefix + strings.TrimRight(line, "\n"))
	}
	return len(p), nil
}

func (w *logWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// startInNamespace runs bin with args as a plugin that sees dir as
// /var/lib/kubelet/device-plugins and, when data is set, data as
// /var/lib/plugin-data. It returns a function that stops it.
func startInNamespace(t *testing.T, dir, data, bin string, args ...string) (stop func()) {
	t.Helper()
	// The binary is opened before the tmpfs mounts, which may hide its path (a
	// build cache under /tmp or /var/lib), and copied into the namespace's /var/lib.
	// /var/run is a tmpfs too: the Intel plugin writes its CDI specs to
	// /var/run/cdi, which must not be left on the host.
	script := `set -e
exec 3<"$3"
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /var/run
mkdir -p /var/lib/kubelet/device-plugins /var/lib/plugin-data
mount --bind "$1" /var/lib/kubelet/device-plugins
if [ -n "$2" ]; then mount --bind "$2" /var/lib/plugin-data; fi
cat <&3 >/var/lib/plugin-bin
exec 3<&-
chmod 0755 /var/lib/plugin-bin
mount -t tmpfs tmpfs /tmp
shift 3
exec /var/lib/plugin-bin "$@"`
	cmdArgs := append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh", dir, data, bin}, args...)
	cmd := exec.Command("unshare", cmdArgs...)
	lw := &logWriter{t: t, prefix: filepath.Base(bin) + ": "}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			lw.close()
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestSampleDevicePlugin(t *testing.T) {
	requireIntegration(t)
	tools := buildTools(t)
	dir := t.TempDir()
	const res = "example.com/resource"
	env := startManager(t, dir, Config{})
	stopPlugin := startInNamespace(t, dir, "", filepath.Join(tools, "sample-device-plugin"))
	env.waitCounts(res, counts{2, 2})

	c := ctr("app", map[string]int64{res: 1})
	p := pod("sample", nil, c)
	*env.active = []*v1.Pod{p}
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	got := env.m.AllocatedDevices("sample", "app")
	if diff := cmp.Diff(map[string][]string{res: {"Dev-1"}}, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	opts, err := env.m.ContainerOptions(ctx, p, &c)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Mounts) != 1 || opts.Mounts[0].HostPath != "/tmp/Dev-1" {
		t.Errorf("mounts = %v, want /tmp/Dev-1", opts.Mounts)
	}

	// The manager restarts: it recreates kubelet.sock, the plugin notices
	// and registers again, and the pod keeps its device.
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}
	env2 := startManager(t, dir, Config{})
	*env2.active = []*v1.Pod{p}
	if diff := cmp.Diff(got, env2.m.AllocatedDevices("sample", "app")); diff != "" {
		t.Errorf("devices after restart (-want +got):\n%s", diff)
	}
	env2.waitCounts(res, counts{2, 2})
	q := pod("second", nil, ctr("app", map[string]int64{res: 1}))
	*env2.active = []*v1.Pod{p, q}
	if err := env2.m.AllocatePod(ctx, q); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{res: {"Dev-2"}}, env2.m.AllocatedDevices("second", "app")); diff != "" {
		t.Errorf("second pod (-want +got):\n%s", diff)
	}
	qc := q.Spec.Containers[0]
	if _, err := env2.m.ContainerOptions(ctx, q, &qc); err != nil {
		t.Fatal(err)
	}

	// Our checkpoint reads back with the kubelet's own code.
	out, err := exec.Command(filepath.Join(tools, "kubeletcheckpoint"), "read", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubelet could not read our checkpoint: %v\n%s", err, out)
	}
	var kc struct {
		Entries []struct {
			PodUID, ContainerName, ResourceName string
			Devices                             []string
		}
		Registered map[string][]string
	}
	if err := json.Unmarshal(out, &kc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if diff := cmp.Diff(map[string][]string{res: {"Dev-1", "Dev-2"}}, kc.Registered); diff != "" {
		t.Errorf("kubelet-read registered devices (-want +got):\n%s", diff)
	}
	if len(kc.Entries) != 2 {
		t.Errorf("kubelet-read entries = %+v, want 2", kc.Entries)
	}

	// The plugin goes away: its devices turn unhealthy.
	stopPlugin()
	env2.waitCounts(res, counts{2, 0})
}

// gpuFakeConfig makes two fake i915 GPUs.
const gpuFakeConfig = `{"Info": "2x fake DG1", "DevCount": 2, "DevMemSize": 4294967296, "Capabilities": {"platform": "fake_DG1"}}`

func TestIntelGPUPlugin(t *testing.T) {
	requireIntegration(t)
	tools := buildTools(t)
	dir := t.TempDir()
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "fake.json"), []byte(gpuFakeConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	gen := exec.Command(filepath.Join(tools, "gpu_fakedev"), "-json", "fake.json")
	gen.Dir = fake
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gpu_fakedev: %v\n%s", err, out)
	}
	const res = "gpu.intel.com/i915"
	env := startManager(t, dir, Config{})
	startInNamespace(t, dir, fake, filepath.Join(tools, "gpu_plugin"), "-prefix", "/var/lib/plugin-data", "-allocation-policy", "packed", "-v", "4")
	env.waitFor(res+" devices", func() bool { return env.counts()[res].Allocatable == 2 })

	c := ctr("app", map[string]int64{res: 1})
	p := pod("gpu", nil, c)
	*env.active = []*v1.Pod{p}
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	ids := env.m.AllocatedDevices("gpu", "app")[res]
	if len(ids) != 1 {
		t.Fatalf("devices = %q, want one", ids)
	}
	opts, err := env.m.ContainerOptions(ctx, p, &c)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, d := range opts.Devices {
		paths = append(paths, d.ContainerPath)
	}
	if !strings.Contains(strings.Join(paths, " "), "/dev/dri/") {
		t.Errorf("device nodes %q, want /dev/dri/...", paths)
	}
	env.m.mu.Lock()
	preferred := env.m.resources[res].ep.opts.GetGetPreferredAllocationAvailable()
	env.m.mu.Unlock()
	if !preferred {
		t.Error("the GPU plugin did not advertise GetPreferredAllocation")
	}
	if n := env.metricValue("kubelet_device_plugin_alloc_duration_seconds", res); n != 1 {
		t.Errorf("alloc_duration samples = %v, want 1", n)
	}
	// The checkpoint holds the allocation.
	b, err := os.ReadFile(filepath.Join(dir, checkpoint.FileName))
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Entries) != 1 || st.Entries[0].ResourceName != res {
		t.Errorf("checkpoint entries %+v", st.Entries)
	}
}
