package podruntime

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
)

// capturingCRI records the configs of created containers.
type capturingCRI struct {
	fakeCRI
	mu      sync.Mutex
	configs map[string]*runtimeapi.ContainerConfig
}

func (c *capturingCRI) CreateContainer(ctx context.Context, sb string, cfg *runtimeapi.ContainerConfig, sbCfg *runtimeapi.PodSandboxConfig) (string, error) {
	c.mu.Lock()
	c.configs[cfg.Metadata.Name] = cfg
	c.mu.Unlock()
	return c.fakeCRI.CreateContainer(ctx, sb, cfg, sbCfg)
}

// devicesFunc is a Devices from a function.
type devicesFunc func(ctx context.Context, pod *v1.Pod, c *v1.Container) (*devicemanager.ContainerOptions, error)

func (f devicesFunc) ContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container) (*devicemanager.ContainerOptions, error) {
	return f(ctx, pod, c)
}

func TestSyncPodDevices(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rt := &capturingCRI{fakeCRI: fakeCRI{f.rt, f.img}, configs: map[string]*runtimeapi.ContainerConfig{}}
	f.m.rt = rt
	fail := errors.New("device plugin PreStartContainer rpc failed with err: boom")
	var asked []string
	f.m.devices = devicesFunc(func(_ context.Context, pod *v1.Pod, c *v1.Container) (*devicemanager.ContainerOptions, error) {
		asked = append(asked, string(pod.UID)+"/"+c.Name)
		switch c.Name {
		case "broken":
			return nil, fail
		case "gpu":
			return &devicemanager.ContainerOptions{
				Envs:    []*runtimeapi.KeyValue{{Key: "VISIBLE", Value: []byte("g0")}},
				Devices: []*runtimeapi.Device{{ContainerPath: "/dev/g0", HostPath: "/dev/null", Permissions: "rw"}},
			}, nil
		}
		return nil, nil
	})
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Containers = []v1.Container{{Name: "gpu", Image: "img:1"}, {Name: "plain", Image: "img:1"}, {Name: "broken", Image: "img:1"}}
	})
	f.sync(t, pod)
	if diff := cmp.Diff([]string{"uid-1/gpu", "uid-1/plain", "uid-1/broken"}, asked); diff != "" {
		t.Errorf("ContainerOptions calls (-want +got):\n%s", diff)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.configs["broken"]; ok {
		t.Error("a container whose devices failed was created")
	}
	gpu := rt.configs["gpu"]
	if gpu == nil || len(gpu.Devices) != 1 || gpu.Devices[0].ContainerPath != "/dev/g0" || string(gpu.Envs[0].Value) != "g0" {
		t.Errorf("gpu container config lacks its device: %v", gpu)
	}
	if plain := rt.configs["plain"]; plain == nil || len(plain.Devices) != 0 {
		t.Errorf("plain container config: %v, want no devices", plain)
	}
	st := f.podStatus(f.m, pod, f.status(t, pod.UID), time.Now())
	for _, cs := range st.ContainerStatuses {
		if cs.Name == "broken" && (cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCreateError || cs.State.Waiting.Message != fail.Error()) {
			t.Errorf("broken container state: %+v, want waiting %s", cs.State, reasonCreateError)
		}
	}
}
