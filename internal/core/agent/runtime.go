package agent

import (
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
)

// sandboxReady reports whether any of the pod's sandboxes is ready.
func sandboxReady(st *podruntime.PodStatus) bool {
	if st == nil {
		return false
	}
	return slices.ContainsFunc(st.Sandboxes, func(s *runtimeapi.PodSandboxStatus) bool {
		return s != nil && s.State == runtimeapi.PodSandboxState_SANDBOX_READY
	})
}

// hasRunning reports whether anything of the pod runs: a ready sandbox or a
// running container.
func hasRunning(st *podruntime.PodStatus) bool { return st.Running() }

// runtimeChanged reports whether a relist saw the pod change: a sandbox or
// container appeared, went or changed state (or an exited container its
// reason), or its IPs changed.
func runtimeChanged(a, b *podruntime.PodStatus) bool {
	if a == nil || b == nil {
		return (a == nil) != (b == nil)
	}
	if !slices.Equal(a.IPs, b.IPs) {
		return true
	}
	if !slices.EqualFunc(a.Sandboxes, b.Sandboxes, func(x, y *runtimeapi.PodSandboxStatus) bool {
		return x.GetId() == y.GetId() && x.GetState() == y.GetState()
	}) {
		return true
	}
	// The reason too: an exited container's can change after its exit (a
	// SIGKILL's Error becoming OOMKilled once the runtime handled the OOM).
	return !slices.EqualFunc(a.Containers, b.Containers, func(x, y *runtimeapi.ContainerStatus) bool {
		return x.GetId() == y.GetId() && x.GetState() == y.GetState() && x.GetReason() == y.GetReason()
	})
}
