package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats returns the stats of one container: cpu, memory, and its
// writable layer's usage.
func (c *Client) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	r, err := call(ctx, c, "ContainerStats", c.rt.ContainerStats, &runtimeapi.ContainerStatsRequest{ContainerId: containerID})
	return r.GetStats(), err
}

// ListContainerStats returns the stats of the containers filter selects (all
// when nil). Runtimes report running containers; a stopped one may be absent.
func (c *Client) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	r, err := call(ctx, c, "ListContainerStats", c.rt.ListContainerStats, &runtimeapi.ListContainerStatsRequest{Filter: filter})
	return r.GetStats(), err
}

// PodSandboxStats returns the stats of one pod sandbox. Runtimes that do not
// report sandbox stats (containerd 1.6 on Linux) fail with ErrUnimplemented.
func (c *Client) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	r, err := call(ctx, c, "PodSandboxStats", c.rt.PodSandboxStats, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podSandboxID})
	return r.GetStats(), err
}

// ListPodSandboxStats returns the stats of the sandboxes filter selects (all
// when nil), failing with ErrUnimplemented as PodSandboxStats does.
func (c *Client) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	r, err := call(ctx, c, "ListPodSandboxStats", c.rt.ListPodSandboxStats, &runtimeapi.ListPodSandboxStatsRequest{Filter: filter})
	return r.GetStats(), err
}
