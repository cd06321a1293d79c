package criconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
)

func TestWithDevices(t *testing.T) {
	t.Parallel()
	kv := func(k, v string) *runtimeapi.KeyValue { return &runtimeapi.KeyValue{Key: k, Value: []byte(v)} }
	base := func() *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{
			Envs:        []*runtimeapi.KeyValue{kv("GPU", "container's")},
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/pods/data"}},
			Annotations: map[string]string{"io.kubernetes.container.hash": "h"},
		}
	}
	tests := []struct {
		name string
		opts *devicemanager.ContainerOptions
		want *runtimeapi.ContainerConfig
	}{{
		name: "no devices",
		want: base(),
	}, {
		name: "devices come first; the container's env and the runtime's annotations win",
		opts: &devicemanager.ContainerOptions{
			Envs:        []*runtimeapi.KeyValue{kv("GPU", "plugin's"), kv("VISIBLE", "g0")},
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/opt/drv", HostPath: "/drv", Readonly: true}},
			Devices:     []*runtimeapi.Device{{ContainerPath: "/dev/g0", HostPath: "/dev/null", Permissions: "rw"}},
			Annotations: map[string]string{"io.kubernetes.container.hash": "plugin", "vendor/dev": "g0"},
			CDIDevices:  []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=g0"}},
		},
		want: &runtimeapi.ContainerConfig{
			Envs: []*runtimeapi.KeyValue{kv("GPU", "plugin's"), kv("VISIBLE", "g0"), kv("GPU", "container's")},
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/opt/drv", HostPath: "/drv", Readonly: true},
				{ContainerPath: "/data", HostPath: "/pods/data"}},
			Devices:     []*runtimeapi.Device{{ContainerPath: "/dev/g0", HostPath: "/dev/null", Permissions: "rw"}},
			Annotations: map[string]string{"io.kubernetes.container.hash": "h", "vendor/dev": "g0"},
			CDIDevices:  []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=g0"}},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := base()
			WithDevices(got, tc.opts)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
