package podruntime

import (
	"context"
	"maps"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
)

// Devices gives a container what the device plugins asked for the devices
// assigned to it at admission; devicemanager.Manager implements it.
type Devices interface {
	// ContainerOptions returns the container's device options, nil when it
	// holds no devices. It is called right before the container is created
	// (it runs the plugins' PreStartContainer).
	ContainerOptions(ctx context.Context, pod *v1.Pod, container *v1.Container) (*devicemanager.ContainerOptions, error)
}

var _ Devices = (*devicemanager.Manager)(nil)

// withDevices adds the device options o to cfg as the kubelet orders them:
// the devices' environment variables before the container's own (a runtime
// keeps the last value of a name, so the container's env wins), their mounts
// before the volumes', and their annotations under the pod runtime's own.
func withDevices(cfg *runtimeapi.ContainerConfig, o *devicemanager.ContainerOptions) {
	if o == nil {
		return
	}
	cfg.Envs = append(append([]*runtimeapi.KeyValue{}, o.Envs...), cfg.Envs...)
	cfg.Mounts = append(append([]*runtimeapi.Mount{}, o.Mounts...), cfg.Mounts...)
	cfg.Devices = append(cfg.Devices, o.Devices...)
	cfg.CDIDevices = append(cfg.CDIDevices, o.CDIDevices...)
	if len(o.Annotations) > 0 {
		annotations := maps.Clone(o.Annotations)
		maps.Copy(annotations, cfg.Annotations)
		cfg.Annotations = annotations
	}
}
