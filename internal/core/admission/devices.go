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
	// device resource, init containers first. It may wait on device plugins
	// (bounded by their RPC timeout); calls for different pods may overlap.
	AllocatePod(ctx context.Context, pod *v1.Pod) error
	// RequestsDevices reports, quickly, whether a container of pod asks for a
	// device resource; for other pods AllocatePod need not be called.
	RequestsDevices(pod *v1.Pod) bool
}

// DeviceHandler allocates the pod's devices, as the kubelet's resource
// allocation admit handler does before the resource-fit check: a pod is
// admitted only with its devices assigned. A failure (the resource is not
// registered, too few healthy devices, the plugin's Allocate failed) rejects
// the pod with ReasonUnexpected and the kubelet's message. It is a SlowHandler:
// Chain.Start leaves the allocation of a pod that asks for devices to
// Pending.Wait, and a pod that asks for none is never held up by a plugin.
type DeviceHandler struct {
	Devices DeviceAllocator
}

// Name returns "devices".
func (h *DeviceHandler) Name() string { return "devices" }

// Slow reports whether the pod asks for devices.
func (h *DeviceHandler) Slow(req *Request) bool { return h.Devices.RequestsDevices(req.Pod) }

// Admit allocates the pod's devices or rejects it; a pod that asks for no
// devices passes at once.
func (h *DeviceHandler) Admit(ctx context.Context, req *Request, resp *Response) error {
	if !h.Devices.RequestsDevices(req.Pod) {
		return nil
	}
	if err := h.Devices.AllocatePod(ctx, req.Pod); err != nil {
		resp.Reject(ReasonUnexpected, fmt.Sprintf("Allocate failed due to %v, which is unexpected", err))
	}
	return nil
}
