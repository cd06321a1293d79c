package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus returns a sandbox's status: its state, and for a sandbox
// with its own network namespace the IPs CNI gave it (Network.Ip and
// AdditionalIps). An unknown ID is an error of class ErrNotFound.
func (c *Client) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return call(ctx, c, "PodSandboxStatus", c.rt.PodSandboxStatus, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podSandboxID, Verbose: verbose})
}
