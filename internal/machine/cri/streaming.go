package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec asks the runtime for a streaming URL that runs a command in a
// container (the kubelet API's exec proxies to it).
func (c *Client) Exec(ctx context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return call(ctx, c, "Exec", c.rt.Exec, r)
}

// Attach asks the runtime for a streaming URL attached to a running
// container's streams.
func (c *Client) Attach(ctx context.Context, r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return call(ctx, c, "Attach", c.rt.Attach, r)
}

// PortForward asks the runtime for a streaming URL forwarding ports of a pod
// sandbox.
func (c *Client) PortForward(ctx context.Context, r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return call(ctx, c, "PortForward", c.rt.PortForward, r)
}
