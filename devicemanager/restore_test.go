package devicemanager

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/devicemanager/checkpoint"
	"github.com/nodekeeper/nodekeeper/devicemanager/plugintest"
)

func TestCheckpointRestoreAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := startManager(t, dir, Config{})
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2"), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{3, 3})
	c := ctr("app", map[string]int64{gpu: 2})
	p := pod("p", nil, c)
	*env.active = []*v1.Pod{p}
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	before, err := env.m.ContainerOptions(ctx, p, &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}

	// A new manager on the same directory: the assignment is back, the
	// resource is present with no capacity until its plugin registers.
	env2 := startManager(t, dir, Config{})
	*env2.active = []*v1.Pod{p}
	if !env2.m.CheckpointFound() {
		t.Error("CheckpointFound = false")
	}
	if diff := cmp.Diff(map[string]counts{gpu: {0, 0}}, env2.counts()); diff != "" {
		t.Errorf("counts after restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d0", "d1"}}, env2.m.AllocatedDevices("p", "app")); diff != "" {
		t.Errorf("restored devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(v1.ResourceList{gpu: resource.MustParse("2")}, env2.m.SanitizeAllocatable(v1.ResourceList{gpu: resource.MustParse("0")})); diff != "" {
		t.Errorf("sanitized allocatable while the plugin is away (-want +got):\n%s", diff)
	}
	after, err := env2.m.ContainerOptions(ctx, p, &c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after, protocmp.Transform()); diff != "" {
		t.Errorf("options after restart (-want +got):\n%s", diff)
	}
	// The plugin registers again; the running pod keeps its devices and a
	// new pod gets the free one.
	env2.plugin("g2.sock", gpu, devices(pluginapi.Healthy, "d0", "d1", "d2"), nil, plugintest.Funcs{})
	env2.waitCounts(gpu, counts{3, 3})
	if err := env2.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	q := pod("q", nil, ctr("app", map[string]int64{gpu: 1}))
	*env2.active = []*v1.Pod{p, q}
	if err := env2.m.AllocatePod(ctx, q); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{gpu: {"d2"}}, env2.m.AllocatedDevices("q", "app")); diff != "" {
		t.Errorf("new pod (-want +got):\n%s", diff)
	}
}

func TestCorruptCheckpointMovedAside(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		content string
	}{
		{"garbage", "\x00garbage"},
		{"truncated", `{"Data":{"PodDeviceEntries":[{"PodUID":"p"`},
		{"bad checksum", `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"example.com/gpu":["a"]}},"Checksum":7}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, checkpoint.FileName)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			env := startManager(t, dir, Config{})
			if diff := cmp.Diff(map[string]counts{}, env.counts()); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			aside, err := filepath.Glob(path + ".corrupt-*")
			if err != nil || len(aside) != 1 {
				t.Fatalf("moved-aside files %v, %v", aside, err)
			}
			b, err := os.ReadFile(aside[0])
			if err != nil || string(b) != tc.content {
				t.Errorf("moved-aside content %q, %v", b, err)
			}
			// The manager writes a fresh checkpoint once state changes.
			env.plugin("g.sock", gpu, devices(pluginapi.Healthy, "a"), nil, plugintest.Funcs{})
			env.waitCounts(gpu, counts{1, 1})
			c := ctr("app", map[string]int64{gpu: 1})
			p := pod("p", nil, c)
			if err := env.m.AllocatePod(testCtx(t), p); err != nil {
				t.Fatal(err)
			}
			// ContainerOptions returns once the assignment is on disk.
			if _, err := env.m.ContainerOptions(testCtx(t), p, &c); err != nil {
				t.Fatal(err)
			}
			b, err = os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			st, err := checkpoint.Decode(b)
			if err != nil {
				t.Fatalf("new checkpoint: %v", err)
			}
			if len(st.Entries) != 1 || st.Entries[0].PodUID != "p" {
				t.Errorf("new checkpoint entries %+v", st.Entries)
			}
		})
	}
}

// TestLoadsKubeletCheckpoint starts on a checkpoint written by the kubelet's
// own code (see devicemanager/checkpoint/testdata).
func TestLoadsKubeletCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := os.ReadFile("checkpoint/testdata/kubelet_internal_checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	env := startManager(t, dir, Config{})
	const uid = "0a9e3d5c-7d1e-4f7b-9a52-5d0f8cf1c001"
	if diff := cmp.Diff(map[string][]string{gpu: {"gpu-0", "gpu-1"}}, env.m.AllocatedDevices(uid, "trainer")); diff != "" {
		t.Errorf("trainer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"smarter-devices/null": {"null\x00\x01"}}, env.m.AllocatedDevices(uid, "init")); diff != "" {
		t.Errorf("init (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]counts{gpu: {0, 0}, "smarter-devices/null": {0, 0}}, env.counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	c := ctr("trainer", map[string]int64{gpu: 2})
	opts, err := env.m.ContainerOptions(testCtx(t), pod(uid, nil, c), &c)
	if err != nil {
		t.Fatal(err)
	}
	want := &ContainerOptions{Envs: []*runtimeapi.KeyValue{{Key: "GPU_LIST", Value: []byte("gpu-0")}},
		Annotations: map[string]string{AnnotationDevices: `{"example.com/gpu":["gpu-0","gpu-1"]}`}}
	if diff := cmp.Diff(want, opts, protocmp.Transform()); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

func TestOddDeviceIDsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := startManager(t, dir, Config{})
	ids := []string{"nul\x00dev", "tab\tdev", "esc\x1b[31m"}
	env.plugin("g.sock", gpu, devices(pluginapi.Healthy, ids...), nil, plugintest.Funcs{})
	env.waitCounts(gpu, counts{3, 3})
	c := ctr("app", map[string]int64{gpu: 3})
	p := pod("p", nil, c)
	*env.active = []*v1.Pod{p}
	ctx := testCtx(t)
	if err := env.m.AllocatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	want := env.m.AllocatedDevices("p", "app")
	if _, err := env.m.ContainerOptions(ctx, p, &c); err != nil {
		t.Fatal(err)
	}
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}
	env2 := startManager(t, dir, Config{})
	if diff := cmp.Diff(want, env2.m.AllocatedDevices("p", "app")); diff != "" {
		t.Errorf("after restart (-want +got):\n%s", diff)
	}
	if len(want[gpu]) != 3 {
		t.Errorf("allocated %q", want[gpu])
	}
}
