package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status returns the runtime's conditions (RuntimeReady, NetworkReady).
func (c *Client) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return call(ctx, c, "Status", c.rt.Status, &runtimeapi.StatusRequest{Verbose: verbose})
}

// UpdateContainerResources changes a running container's Linux resources.
func (c *Client) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	_, err := call(ctx, c, "UpdateContainerResources", c.rt.UpdateContainerResources, &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: containerID, Linux: resources.GetLinux(), Windows: resources.GetWindows(),
	})
	return err
}

// RuntimeConfig returns the runtime's configuration: on Linux, the cgroup
// driver it uses (Linux.CgroupDriver). Runtimes older than the call (containerd
// before 2.0) answer ErrUnimplemented.
func (c *Client) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return call(ctx, c, "RuntimeConfig", c.rt.RuntimeConfig, &runtimeapi.RuntimeConfigRequest{})
}
