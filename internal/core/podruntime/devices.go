package podruntime

import (
	"context"

	v1 "k8s.io/api/core/v1"

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
