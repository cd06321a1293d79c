package podstatus

import (
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// deletedPhase is the phase of a stopped pod being deleted: Succeeded when
// every container exited 0, Failed when every container exited and one did
// not exit 0, else (a container never started, or no status) st's own.
func deletedPhase(st v1.PodStatus) v1.PodPhase {
	if len(st.ContainerStatuses) == 0 {
		return st.Phase
	}
	phase := v1.PodSucceeded
	for _, c := range st.ContainerStatuses {
		switch t := c.State.Terminated; {
		case t == nil:
			return st.Phase
		case t.ExitCode != 0:
			phase = v1.PodFailed
		}
	}
	return phase
}

// The kubelet's reason and message for a container that had not finished
// when its pod was stopped for good.
const (
	reasonStatusUnknown  = "ContainerStatusUnknown"
	messageStatusUnknown = "The container could not be located when the pod was terminated"
)

// deleted is the final status of a deleted pod whose containers were
// stopped, from st, its status after the kill, as the kubelet records it: a
// container that never finished (one waiting for its image, say) counts as
// failed with exit code 137 — every container once the pod got past its
// init containers, else the init containers up to the last one that started
// (at least the first) — and a phase that is not yet terminal becomes Failed
// (Succeeded only when every container exited 0). Static pods keep their
// phase, as in the kubelet. st is not modified.
func deleted(pod *v1.Pod, st v1.PodStatus) v1.PodStatus {
	st.Phase = deletedPhase(st)
	if podInitialized(pod, st) {
		st.ContainerStatuses = unfinishedUnknown(st.ContainerStatuses, len(st.ContainerStatuses))
	}
	st.InitContainerStatuses = unfinishedUnknown(st.InitContainerStatuses, startedPrefix(st.InitContainerStatuses))
	if !qos.IsStatic(pod) && st.Phase != v1.PodSucceeded && st.Phase != v1.PodFailed {
		st.Phase = v1.PodFailed
	}
	return st
}

// unfinishedUnknown is a copy of ss whose first n statuses, where not
// terminated, are terminated as ContainerStatusUnknown, exit code 137.
func unfinishedUnknown(ss []v1.ContainerStatus, n int) []v1.ContainerStatus {
	ss = slices.Clone(ss)
	for i := range ss[:n] {
		if ss[i].State.Terminated == nil {
			ss[i].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				Reason: reasonStatusUnknown, Message: messageStatusUnknown, ExitCode: 137,
			}}
		}
	}
	return ss
}

// podInitialized reports whether pod, with status st, got past its init
// containers: it has none, a container left waiting or ran before, or the
// last init container exited 0 (a sidecar: runs and has started).
func podInitialized(pod *v1.Pod, st v1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, c := range st.ContainerStatuses {
		if c.LastTerminationState.Terminated != nil || c.State.Waiting == nil {
			return true
		}
	}
	n := len(st.InitContainerStatuses)
	if n == 0 {
		return false
	}
	last := st.InitContainerStatuses[n-1]
	i := slices.IndexFunc(pod.Spec.InitContainers, func(c v1.Container) bool { return c.Name == last.Name })
	if i < 0 {
		return false
	}
	if nodeapi.IsSidecar(&pod.Spec.InitContainers[i]) {
		return last.State.Running != nil && last.Started != nil && *last.Started
	}
	for _, t := range []*v1.ContainerStateTerminated{last.LastTerminationState.Terminated, last.State.Terminated} {
		if t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// startedPrefix is the number of leading statuses up to the last one that
// left waiting or ran before; at least 1 when there are any.
func startedPrefix(ss []v1.ContainerStatus) int {
	for i := len(ss) - 1; i >= 0; i-- {
		if ss[i].State.Waiting == nil || ss[i].LastTerminationState.Terminated != nil {
			return i + 1
		}
	}
	return min(len(ss), 1)
}
