package podruntime

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
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

// sidecarStarted reports whether the running sidecar c (its runtime status
// cs) has started: it has no startup probe, or the probe succeeded.
func (m *Manager) sidecarStarted(pod *v1.Pod, c *v1.Container, cs *runtimeapi.ContainerStatus) bool {
	if m.probes == nil || c.StartupProbe == nil {
		return true
	}
	m.mu.Lock()
	runtimeName := m.runtimeName
	m.mu.Unlock()
	st := v1.PodStatus{InitContainerStatuses: []v1.ContainerStatus{{
		Name: c.Name, ContainerID: runtimeName + "://" + cs.Id,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
	}}}
	m.probes.UpdatePodStatus(pod, &st)
	s := st.InitContainerStatuses[0].Started
	return s != nil && *s
}

// probeRestarts adds to acts the running containers of the current sandbox
// whose liveness or startup probe failed (see Probes): a kill each, and a
// start unless the restart rule keeps a failed container down
// (nodeapi.RestartsAfterExit: restartPolicy Never) or the crash-loop
// back-off of the container's previous exit holds it.
func (m *Manager) probeRestarts(pod *v1.Pod, status *PodStatus, now time.Time, acts *podActions, backoff func(name string) (Backoff, bool)) {
	if m.probes == nil || status == nil || acts.createSandbox {
		return
	}
	m.mu.Lock()
	runtimeName := m.runtimeName
	m.mu.Unlock()
	var sidecarStarts []startAction
	check := func(c *v1.Container, sidecar bool) {
		cs := inSandbox(status, c.Name, acts.sandboxID)
		if cs == nil || cs.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return
		}
		if slices.ContainsFunc(acts.kill, func(k killAction) bool { return k.id == cs.Id }) {
			return // restarted for a changed spec already
		}
		pt, grace, bad := m.probes.Unhealthy(pod.UID, c.Name, runtimeName+"://"+cs.Id)
		if !bad {
			return
		}
		if pod.DeletionGracePeriodSeconds != nil {
			grace = nil // the deletion's grace period wins
		}
		// A container killed for a failed probe has failed: the restart rule
		// with a failure's exit code (137, killed) says whether it comes back.
		role := nodeapi.RegularContainer
		if sidecar {
			role = nodeapi.InitContainer
		}
		restart := nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, role, 137)
		msg := fmt.Sprintf("Container %s failed %s probe", c.Name, strings.ToLower(pt.String()))
		if restart {
			msg += ", will be restarted"
		}
		acts.kill = append(acts.kill, killAction{id: cs.Id, name: c.Name, reason: pt.String() + " probe failed", grace: grace, message: msg})
		if !restart {
			return
		}
		a := startAction{container: c, restartCount: podstatus.RestartCount(cs) + 1}
		if prev := lastExited(status, c.Name); prev != nil {
			finished := time.Unix(0, prev.FinishedAt)
			e, ok := backoff(c.Name)
			if in, left := inBackoff(e, ok, finished, now); in {
				acts.waiting[c.Name] = v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: crashLoopMessage(e.Delay, pod, c.Name)}
				if acts.retryAfter == 0 || left < acts.retryAfter {
					acts.retryAfter = left
				}
				return
			}
			a.prevFinished = finished
		}
		if sidecar {
			sidecarStarts = append(sidecarStarts, a)
		} else {
			acts.start = append(acts.start, a)
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; nodeapi.IsSidecar(c) {
			check(c, true)
		}
	}
	if !acts.initPhase {
		for i := range pod.Spec.Containers {
			check(&pod.Spec.Containers[i], false)
		}
	}
	// Sidecars start before what they serve.
	acts.start = append(sidecarStarts, acts.start...)
}

// lastExited is the newest exited container of status named name, nil if
// none.
func lastExited(status *PodStatus, name string) *runtimeapi.ContainerStatus {
	for _, c := range status.Containers {
		if c.GetMetadata().GetName() == name && c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return c
		}
	}
	return nil
}
