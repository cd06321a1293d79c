package podruntime

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/plan"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/prober"
)

// Probes is what the pod runtime asks of the prober; *prober.Manager
// satisfies it.
//
// Restarting one container: the agent's loop syncs a pod when the prober
// reports a liveness or startup Failure for one of its containers; SyncPod
// then asks Unhealthy about each running container of the current sandbox,
// kills those that failed (Killing event "Container NAME failed liveness
// probe, will be restarted", with the probe's terminationGracePeriodSeconds
// when it sets one and the pod has no deletion grace period) and, unless the
// pod's restartPolicy is Never, starts them again in the same sync with their
// restart count incremented. As the kubelet does, the first such restart is
// immediate; a container that exited before (an earlier probe kill) is
// started only once the crash-loop back-off of that exit has passed, and the
// restart advances the back-off.
type Probes interface {
	// UpdatePodStatus sets Started and Ready of the container statuses
	// from the probe results.
	UpdatePodStatus(pod *v1.Pod, status *v1.PodStatus)
	// Unhealthy reports whether a container (by the ID the pod status
	// carries, runtime://id) failed its liveness or startup probe, which,
	// and the probe-level grace period for its kill.
	Unhealthy(uid types.UID, name, containerID string) (prober.ProbeType, *int64, bool)
}

var _ Probes = (*prober.Manager)(nil)

// notStarted are the running sidecars of status (by runtime ID) whose
// startup probe has not succeeded, for the plan (plan.Input.NotStarted).
func (m *Manager) notStarted(pod *v1.Pod, status *PodStatus) map[string]bool {
	if m.probes == nil || status == nil {
		return nil
	}
	var out map[string]bool
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if !nodeapi.IsSidecar(c) || c.StartupProbe == nil {
			continue
		}
		for _, cs := range status.Containers {
			if cs.GetMetadata().GetName() != c.Name || cs.State != runtimeapi.ContainerState_CONTAINER_RUNNING || m.sidecarStarted(pod, c, cs) {
				continue
			}
			if out == nil {
				out = map[string]bool{}
			}
			out[cs.Id] = true
		}
	}
	return out
}

// sidecarStarted reports whether the running sidecar c (its runtime status
// cs), which has a startup probe, has started: the probe succeeded, or it
// has no result yet for a sidecar that ran from before the agent's start
// (prober.Manager.UpdatePodStatus).
func (m *Manager) sidecarStarted(pod *v1.Pod, c *v1.Container, cs *runtimeapi.ContainerStatus) bool {
	st := v1.PodStatus{InitContainerStatuses: []v1.ContainerStatus{{
		Name: c.Name, ContainerID: m.containerID(cs.Id),
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(0, cs.StartedAt))}},
	}}}
	m.probes.UpdatePodStatus(pod, &st)
	s := st.InitContainerStatuses[0].Started
	return s != nil && *s
}

// unhealthy are the running containers of status (by runtime ID) whose
// liveness or startup probe failed (see Probes), for the plan
// (plan.Input.Unhealthy), which kills and restarts those of the current
// sandbox.
func (m *Manager) unhealthy(pod *v1.Pod, status *PodStatus) map[string]plan.ProbeFailure {
	if m.probes == nil || status == nil {
		return nil
	}
	var out map[string]plan.ProbeFailure
	for _, cs := range status.Containers {
		if cs.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		pt, grace, bad := m.probes.Unhealthy(pod.UID, cs.GetMetadata().GetName(), m.containerID(cs.Id))
		if !bad {
			continue
		}
		if out == nil {
			out = map[string]plan.ProbeFailure{}
		}
		out[cs.Id] = plan.ProbeFailure{Probe: pt.String(), Grace: grace}
	}
	return out
}

// containerID is the ID of runtime container id as the pod status carries
// it, runtime://id.
func (m *Manager) containerID(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runtimeName + "://" + id
}
