package criconfig

import (
	"maps"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/devicemanager"
)

// WithDevices adds the device options o to cfg as the kubelet orders them:
// the devices' environment variables before the container's own (a runtime
// keeps the last value of a name, so the container's env wins), their mounts
// before the volumes', and their annotations under the pod runtime's own.
func WithDevices(cfg *runtimeapi.ContainerConfig, o *devicemanager.ContainerOptions) {
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
