package podruntime

import (
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// startAction starts one container of the pod.
type startAction struct {
	container    *v1.Container
	restartCount int
	// prevFinished is when the container's previous instance exited; a
	// successful start then advances the crash-loop back-off. Zero: none.
	prevFinished time.Time
	// target is an ephemeral container's targetContainerName, whose process
	// namespace it joins; targetID is that container's runtime ID, "" when
	// the pod has no container of that name (the start then fails).
	target, targetID string
}

// killAction stops one running container.
type killAction struct {
	id, name, reason string
	// grace, when set, is the kill's grace period instead of the pod's (a
	// probe's terminationGracePeriodSeconds).
	grace *int64
	// message is the Killing event's message; "" is "Stopping container NAME".
	message string
}

// podActions is what one sync must do.
type podActions struct {
	// createSandbox: make a new sandbox (number attempt), after stopping the
	// pod's containers and sandboxes when killPod.
	createSandbox bool
	killPod       bool
	attempt       uint32
	// sandboxID is the current sandbox when none is created.
	sandboxID string
	kill      []killAction
	// start lists the containers to start, in order. In the init phase the
	// sync stops at the first one that fails to start.
	start []startAction
	// initPhase: start holds init containers only.
	initPhase bool
	// ephemeral lists the ephemeral containers to start, before start: those
	// the runtime holds no container of (they are started once, never
	// restarted).
	ephemeral []startAction
	// waiting are the waiting reasons of containers that are not started now.
	waiting map[string]v1.ContainerStateWaiting
	// retryAfter is the shortest back-off left, 0 if none.
	retryAfter time.Duration
	// remove lists exited containers older than the newest of their name.
	remove []string
}

// sandboxChanged reports whether pod needs a new sandbox, and its attempt.
func sandboxChanged(pod *v1.Pod, status *PodStatus) (changed bool, attempt uint32, id string) {
	if status == nil || len(status.Sandboxes) == 0 {
		return true, 0, ""
	}
	sb := status.Sandboxes[0]
	next := sb.GetMetadata().GetAttempt() + 1
	ready := 0
	for _, s := range status.Sandboxes {
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
	}
	want := runtimeapi.NamespaceMode_POD
	if pod.Spec.HostNetwork {
		want = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case ready > 1, sb.State != runtimeapi.PodSandboxState_SANDBOX_READY:
		return true, next, ""
	case sb.GetLinux().GetNamespaces().GetOptions().GetNetwork() != want:
		return true, next, ""
	case !pod.Spec.HostNetwork && sb.GetNetwork().GetIp() == "":
		return true, next, ""
	}
	return false, sb.GetMetadata().GetAttempt(), sb.Id
}

// inSandbox is the newest container named name created in sandbox id.
func inSandbox(status *PodStatus, name, id string) *runtimeapi.ContainerStatus {
	if status == nil {
		return nil
	}
	for _, c := range status.Containers {
		if c.GetMetadata().GetName() == name && c.GetAnnotations()[criconfig.AnnotationSandboxID] == id {
			return c
		}
	}
	return nil
}

// crashLoopMessage is the waiting message of a container in back-off, in the
// kubelet's words.
func crashLoopMessage(delay time.Duration, pod *v1.Pod, name string) string {
	return fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", delay, name, pod.Name, pod.Namespace, pod.UID)
}

// computeActions decides what a sync of pod does, given its runtime status
// (nil: none), the crash-loop back-off of each of its containers and now.
// started reports whether a running sidecar has started (its startup probe
// succeeded, or it has none); the next init container, or the containers,
// wait for it. A nil started counts every running sidecar as started.
func computeActions(pod *v1.Pod, status *PodStatus, now time.Time, backoff func(name string) (Backoff, bool),
	started func(c *v1.Container, cs *runtimeapi.ContainerStatus) bool) podActions {
	acts := podActions{waiting: map[string]v1.ContainerStateWaiting{}}
	changed, attempt, sbID := sandboxChanged(pod, status)
	acts.attempt, acts.sandboxID = attempt, sbID
	hasContainers := status != nil && len(status.Containers) > 0
	if changed {
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever && attempt != 0 && hasContainers {
			return acts // the pod ran once; a Never pod does not run again
		}
		acts.createSandbox = true
		acts.killPod = attempt != 0 || hasContainers
	}
	acts.remove = oldContainers(status)

	// start queues c, unless its last exit is within the crash-loop back-off.
	start := func(c *v1.Container) bool {
		newest, _ := status.Newest(c.Name)
		a := startAction{container: c}
		if newest != nil {
			a.restartCount = podstatus.RestartCount(newest) + 1
			if newest.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				finished := time.Unix(0, newest.FinishedAt)
				e, ok := backoff(c.Name)
				if in, left := inBackoff(e, ok, finished, now); in {
					acts.waiting[c.Name] = v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: crashLoopMessage(e.Delay, pod, c.Name)}
					if acts.retryAfter == 0 || left < acts.retryAfter {
						acts.retryAfter = left
					}
					return false
				}
				a.prevFinished = finished
			}
		}
		acts.start = append(acts.start, a)
		return true
	}
	cur := func(name string) *runtimeapi.ContainerStatus {
		if acts.createSandbox {
			return nil
		}
		return inSandbox(status, name, sbID)
	}
	if !acts.createSandbox {
		// Into the running sandbox only, even while the init containers run.
		acts.ephemeral = ephemeralStarts(pod, status)
	}

	// Init containers in order: a sidecar counts once started, a regular one
	// must exit 0 before the next.
	initDone := true
	initialized := slices.ContainsFunc(pod.Spec.Containers, func(c v1.Container) bool { return cur(c.Name) != nil })
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := cur(c.Name)
		if nodeapi.IsSidecar(c) {
			running := false
			switch {
			case cs == nil:
				start(c)
			case cs.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
				if cs.GetAnnotations()[criconfig.AnnotationContainerHash] != criconfig.Hash(c) {
					acts.kill = append(acts.kill, killAction{id: cs.Id, name: c.Name, reason: "Container spec hash changed"})
					start(c)
				} else {
					running = true
				}
			default:
				start(c)
			}
			// Once a container of the sandbox exists the pod was initialized:
			// a sidecar restarting then holds nothing up, as with the kubelet.
			if initialized || running && (started == nil || started(c, cs)) {
				continue
			}
			initDone = false
			break
		}
		if cs != nil && cs.State == runtimeapi.ContainerState_CONTAINER_EXITED && cs.ExitCode == 0 {
			continue
		}
		initDone = false
		switch {
		case cs == nil:
			start(c)
		case cs.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
		case cs.State == runtimeapi.ContainerState_CONTAINER_EXITED && !nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, nodeapi.InitContainer, cs.ExitCode):
			// The pod has failed; nothing more starts.
		default:
			start(c)
		}
		break
	}
	if !initDone {
		acts.initPhase = true
		return acts
	}

	if podFinished(pod, cur) {
		// Every container has run to its end: sidecars are not restarted
		// for a pod that is done (the caller kills it).
		kept := acts.start[:0]
		for _, a := range acts.start {
			if !nodeapi.IsSidecar(a.container) {
				kept = append(kept, a)
			} else {
				delete(acts.waiting, a.container.Name)
			}
		}
		acts.start = kept
		acts.ephemeral = nil // nothing more to debug: the pod is over
		for name, w := range acts.waiting {
			if w.Reason == "CrashLoopBackOff" {
				delete(acts.waiting, name)
			}
		}
		acts.retryAfter = 0
		return acts
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := cur(c.Name)
		switch {
		case cs == nil:
			start(c)
		case cs.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if cs.GetAnnotations()[criconfig.AnnotationContainerHash] != criconfig.Hash(c) {
				acts.kill = append(acts.kill, killAction{id: cs.Id, name: c.Name, reason: "Container spec hash changed"})
				start(c)
			}
		case cs.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			if nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, nodeapi.RegularContainer, cs.ExitCode) {
				start(c)
			}
		default: // created but never started, or unknown
			start(c)
		}
	}
	return acts
}

// ephemeralStarts are the ephemeral containers of pod that the runtime holds
// no container of, in spec order, each with its target's runtime ID (the
// newest container of that name). An ephemeral container that ran, whatever
// became of it, is never started again.
func ephemeralStarts(pod *v1.Pod, status *PodStatus) []startAction {
	var out []startAction
	for i := range pod.Spec.EphemeralContainers {
		ec := &pod.Spec.EphemeralContainers[i]
		if c, _ := status.Newest(ec.Name); c != nil {
			continue
		}
		a := startAction{container: (*v1.Container)(&ec.EphemeralContainerCommon), target: ec.TargetContainerName}
		if a.target != "" {
			if t, _ := status.Newest(a.target); t != nil {
				a.targetID = t.Id
			}
		}
		out = append(out, a)
	}
	return out
}

// podFinished reports whether every regular container of pod has exited in
// the current sandbox (cur) and the restart rule restarts none of them.
func podFinished(pod *v1.Pod, cur func(string) *runtimeapi.ContainerStatus) bool {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := cur(c.Name)
		if cs == nil || cs.State != runtimeapi.ContainerState_CONTAINER_EXITED || nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, nodeapi.RegularContainer, cs.ExitCode) {
			return false
		}
	}
	return true
}

// oldContainers are the exited containers the pod no longer needs: of each
// name the newest container and the newest exited one (its last state and
// restart count) are kept.
func oldContainers(status *PodStatus) []string {
	if status == nil {
		return nil
	}
	exited := map[string]bool{}
	var out []string
	for _, c := range status.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		name := c.GetMetadata().GetName()
		if exited[name] {
			out = append(out, c.Id)
		}
		exited[name] = true
	}
	return out
}
