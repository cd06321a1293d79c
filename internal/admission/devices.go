package admission

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// DeviceAllocator assigns devices to a pod's containers at admission.
// devicemanager.Manager implements it.
type DeviceAllocator interface {
	// AllocatePod assigns devices to every container of pod that requests a
	// device resource, init containers first.
	AllocatePod(ctx context.Context, pod *v1.Pod) error
}

// DeviceHandler allocates the pod's devices, as the kubelet's resource
// allocation admit handler does before the resource-fit check: a pod is
// admitted only with its devices assigned. A failure (the resource is not
// registered, too few healthy devices, the plugin's Allocate failed) rejects
// the pod with ReasonUnexpected and the kubelet's message.
type DeviceHandler struct {
	Devices DeviceAllocator
}

// Name returns "devices".
func (h *DeviceHandler) Name() string { return "devices" }

// Admit allocates the pod's devices or rejects it.
func (h *DeviceHandler) Admit(ctx context.Context, req *Request, resp *Response) error {
	if err := h.Devices.AllocatePod(ctx, req.Pod); err != nil {
		resp.Reject(ReasonUnexpected, fmt.Sprintf("Allocate failed due to %v, which is unexpected", err))
	}
	return nil
}
