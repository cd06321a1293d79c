package admission

import (
	"context"
	"runtime"

	v1 "k8s.io/api/core/v1"
)

// The kubelet's rejection reasons for a pod made for another operating
// system.
const (
	ReasonPodOSNotSupported     = "PodOSNotSupported"
	ReasonPodOSSelectorMismatch = "PodOSSelectorNodeLabelDoesNotMatch"
)

// OSHandler rejects, as the kubelet does, a pod whose kubernetes.io/os label
// or spec.os.name names another operating system than the node's.
type OSHandler struct {
	// OS is the node's operating system; "" is the one nodekeeper runs on.
	OS string
}

// Name returns "os".
func (h *OSHandler) Name() string { return "os" }

// Admit rejects a pod for another operating system.
func (h *OSHandler) Admit(_ context.Context, req *Request, resp *Response) error {
	os := h.OS
	if os == "" {
		os = runtime.GOOS
	}
	pod := req.Pod
	if l, ok := pod.Labels[v1.LabelOSStable]; ok && l != os {
		resp.Reject(ReasonPodOSSelectorMismatch, "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")
		return nil
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != os {
		resp.Reject(ReasonPodOSNotSupported, "Failed to admit pod as the OS field doesn't match node OS")
	}
	return nil
}
