package podstatus

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

func nanoTime(ns int64) metav1.Time {
	if ns == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(0, ns))
}

// terminated is the API state of an exited container.
func terminated(c *runtimeapi.ContainerStatus, id string) *v1.ContainerStateTerminated {
	reason := c.Reason
	if reason == "" {
		reason = "Completed"
		if c.ExitCode != 0 {
			reason = "Error"
		}
	}
	return &v1.ContainerStateTerminated{
		ExitCode: c.ExitCode, Reason: reason, Message: c.Message,
		StartedAt: nanoTime(c.StartedAt), FinishedAt: nanoTime(c.FinishedAt), ContainerID: id,
	}
}

// containerAPIStatus is the API status of spec container c in the pod's
// current run (ra: a container of the run before a RestartAllContainers waits
// to start again, its exit the last termination).
func containerAPIStatus(in Input, ra RestartAll, c *v1.Container, defaultWaiting string) v1.ContainerStatus {
	newest, prev, stale := newestOf(in.Runtime, ra, c.Name)
	cs := v1.ContainerStatus{Name: c.Name, Image: c.Image, Started: new(false), VolumeMounts: volumeMountStatuses(c, in.Node.RecursiveReadOnly)}
	w, hasWaiting := in.Waiting[c.Name]
	if newest == nil {
		if !hasWaiting {
			w = v1.ContainerStateWaiting{Reason: defaultWaiting}
		}
		cs.State.Waiting = &w
		if stale != nil {
			cs.Image = containerImage(stale, c)
			cs.ImageID = stale.ImageRef
			cs.RestartCount = int32(RestartCount(stale))
			if stale.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				cs.LastTerminationState.Terminated = terminated(stale, in.Node.RuntimeName+"://"+stale.Id)
			}
		}
		return cs
	}
	id := in.Node.RuntimeName + "://" + newest.Id
	cs.ContainerID = id
	cs.Image = containerImage(newest, c)
	cs.ImageID = newest.ImageRef
	cs.RestartCount = int32(RestartCount(newest))
	if prev != nil && prev.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		cs.LastTerminationState.Terminated = terminated(prev, in.Node.RuntimeName+"://"+prev.Id)
	}
	switch newest.State {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		cs.State.Running = &v1.ContainerStateRunning{StartedAt: nanoTime(newest.StartedAt)}
		cs.Started = new(true)
		cs.Ready = true
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		t := terminated(newest, id)
		if hasWaiting {
			// Waiting to restart: the exit is the last termination.
			cs.State.Waiting = &w
			cs.LastTerminationState = v1.ContainerState{Terminated: t}
		} else {
			cs.State.Terminated = t
		}
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		if !hasWaiting {
			w = v1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		cs.State.Waiting = &w
	default:
		if !hasWaiting {
			w = v1.ContainerStateWaiting{Reason: "ContainerStatusUnknown"}
		}
		cs.State.Waiting = &w
	}
	return cs
}

// containerImage is the image runtime container cs of spec container c was
// made from, as the spec named it then: a changed spec shows only in the
// container that replaces it.
func containerImage(cs *runtimeapi.ContainerStatus, c *v1.Container) string {
	if img := cs.GetAnnotations()[AnnotationImage]; img != "" {
		return img
	}
	if img := cs.GetImage().GetImage(); img != "" {
		return img
	}
	return c.Image
}

// volumeMountStatuses are the statuses of c's volume mounts, as the kubelet
// reports them: each mount's name, path and readOnly, and for a read-only
// one whether it is recursively read-only (Enabled or Disabled; a mode the
// runtime cannot honour reads Disabled). nil without mounts.
func volumeMountStatuses(c *v1.Container, supportsRRO bool) []v1.VolumeMountStatus {
	var out []v1.VolumeMountStatus
	for _, vm := range c.VolumeMounts {
		st := v1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			if rro, err := RecursiveReadOnly(vm, supportsRRO); err == nil && rro {
				mode = v1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}

// view is the pod's status as its runtime shows it at now: the
// containers' states (with the waiting reasons of the last sync), started
// and ready from the probes, the phase by the kubelet's rule and the
// conditions, each timed now.
func view(in Input, now time.Time) v1.PodStatus {
	pod := in.Pod
	out := v1.PodStatus{QOSClass: qos.Class(pod)}
	if in.Node.HostIP != "" {
		out.HostIP = in.Node.HostIP
		out.HostIPs = []v1.HostIP{{IP: in.Node.HostIP}}
	}
	var sandbox *runtimeapi.PodSandboxStatus
	if in.Runtime != nil && len(in.Runtime.Sandboxes) > 0 {
		sandbox = in.Runtime.Sandboxes[0]
		oldest := in.Runtime.Sandboxes[len(in.Runtime.Sandboxes)-1]
		t := nanoTime(oldest.CreatedAt)
		out.StartTime = &t
	}
	var ips []string
	if pod.Spec.HostNetwork {
		if in.Node.HostIP != "" {
			ips = []string{in.Node.HostIP}
		}
	} else if in.Runtime != nil {
		ips = in.Runtime.IPs
	}
	for i, ip := range ips {
		if i == 0 {
			out.PodIP = ip
		}
		out.PodIPs = append(out.PodIPs, v1.PodIP{IP: ip})
	}

	// Init containers, then containers, of the pod's current run.
	ra := in.Runtime.RestartAll(pod)
	initDone, initFailed := true, false
	regularRan := regularCreated(in, ra)
	var incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := containerAPIStatus(in, ra, c, "PodInitializing")
		newest, _, _ := newestOf(in.Runtime, ra, c.Name)
		if nodeapi.IsSidecar(c) {
			cs = withProbes(in, cs, true)
		} else {
			if newest == nil && regularRan && cs.State.Waiting != nil {
				// Removed from the runtime after the pod was initialized
				// (static pods keep no status of their own): the kubelet
				// treats it as exited 0, and it does not run again.
				cs.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Completed", Message: messageInitStatusLost}}
			}
			// A regular init container is ready once it has succeeded.
			cs.Ready = cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		}
		out.InitContainerStatuses = append(out.InitContainerStatuses, cs)
		if nodeapi.IsSidecar(c) {
			if newest == nil {
				initDone = false
				incomplete = append(incomplete, c.Name)
			}
			continue
		}
		switch {
		case newest == nil && regularRan:
		case newest != nil && newest.State == runtimeapi.ContainerState_CONTAINER_EXITED && newest.ExitCode == 0:
		case newest != nil && newest.State == runtimeapi.ContainerState_CONTAINER_EXITED && !nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, nodeapi.InitContainer, newest.ExitCode):
			initFailed = true
			initDone = false
			incomplete = append(incomplete, c.Name)
		default:
			initDone = false
			incomplete = append(incomplete, c.Name)
		}
	}
	defaultWaiting := "ContainerCreating"
	if !initDone {
		defaultWaiting = "PodInitializing"
	}
	var running, waiting, stopped, stoppedForGood, succeeded int
	var unready []string
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs, held := heldStatus(in, ra, c)
		if !held {
			cs = withProbes(in, containerAPIStatus(in, ra, c, defaultWaiting), false)
		}
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
		switch {
		case cs.State.Waiting != nil && ra.Trigger != nil && cs.ContainerID == "":
			waiting++ // to start again in the pod's new run
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
			if !nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, nodeapi.RegularContainer, cs.State.Terminated.ExitCode) {
				stoppedForGood++
			}
		case cs.LastTerminationState.Terminated != nil:
			stopped++ // waiting to restart after an exit
			if cs.LastTerminationState.Terminated.ExitCode == 0 {
				succeeded++
			}
			if !nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, nodeapi.RegularContainer, cs.LastTerminationState.Terminated.ExitCode) {
				stoppedForGood++
			}
		default:
			waiting++
		}
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
	}
	for _, cs := range out.InitContainerStatuses {
		for i := range pod.Spec.InitContainers {
			if c := &pod.Spec.InitContainers[i]; c.Name == cs.Name && nodeapi.IsSidecar(c) && !cs.Ready {
				unready = append(unready, c.Name)
			}
		}
	}
	out.Phase = podPhase(initDone, initFailed, running, waiting, stopped, stoppedForGood, succeeded)
	out.EphemeralContainerStatuses = ephemeralStatuses(in)

	cond := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		c := v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}
		if !ok {
			c.Status, c.Reason, c.Message = v1.ConditionFalse, reason, msg
		}
		return c
	}
	sandboxReady := sandbox != nil && sandbox.State == runtimeapi.PodSandboxState_SANDBOX_READY &&
		(pod.Spec.HostNetwork || sandbox.GetNetwork().GetIp() != "")
	done := out.Phase == v1.PodSucceeded || out.Phase == v1.PodFailed
	ready := len(unready) == 0
	notReadyReason, notReadyMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if done {
		ready, notReadyReason, notReadyMsg = false, "PodCompleted", ""
	}
	// A pod restarting all its containers stays initialized (KEP-5532)
	// while its init containers run again: one of its regular containers
	// ran in the run before.
	reinit := !initDone && slices.ContainsFunc(pod.Spec.Containers, func(c v1.Container) bool {
		_, _, stale := newestOf(in.Runtime, ra, c.Name)
		return stale != nil
	})
	initialized := initDone || (done && !initFailed) || reinit
	out.Conditions = []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, sandboxReady, "", ""),
		cond(v1.PodInitialized, initialized, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " "))),
		cond(v1.ContainersReady, ready, notReadyReason, notReadyMsg),
		cond(v1.PodReady, ready, notReadyReason, notReadyMsg),
		// The pod is on this node: scheduled, whether a scheduler said so
		// (node e2e pods name their node themselves) or not.
		cond(v1.PodScheduled, true, "", ""),
	}
	if initialized && !initDone && !reinit {
		out.Conditions[1].Reason = "PodCompleted"
	}
	if c, ok := ra.Condition(metav1.NewTime(now)); ok {
		out.Conditions = append(out.Conditions, c)
	}
	return out
}

// ephemeralStatuses are the API statuses of the pod's ephemeral containers,
// as the kubelet reports them: states as for the other containers, never
// ready, no started field (they have no probes), and waiting for
// PodInitializing in a pod with init containers before they are created.
// They count for neither the phase nor the conditions.
func ephemeralStatuses(in Input) []v1.ContainerStatus {
	defaultWaiting := "ContainerCreating"
	if len(in.Pod.Spec.InitContainers) > 0 {
		defaultWaiting = "PodInitializing"
	}
	var out []v1.ContainerStatus
	for i := range in.Pod.Spec.EphemeralContainers {
		c := (*v1.Container)(&in.Pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		cs := containerAPIStatus(in, RestartAll{}, c, defaultWaiting)
		cs.Ready, cs.Started = false, nil
		out = append(out, cs)
	}
	return out
}

// podPhase is the kubelet's phase rule over the regular containers' counts
// (v1.36, ContainerRestartRules on): once none runs, the pod runs on while a
// stopped container will start again (stoppedForGood counts those that will
// not, by their own restartPolicy and restartPolicyRules, else the pod's), and
// else it has Succeeded when every one exited 0, Failed otherwise.
func podPhase(initDone, initFailed bool, running, waiting, stopped, stoppedForGood, succeeded int) v1.PodPhase {
	switch {
	case initFailed:
		return v1.PodFailed
	case !initDone:
		return v1.PodPending
	case waiting > 0:
		return v1.PodPending
	case running > 0:
		return v1.PodRunning
	case stopped > 0:
		switch {
		case stopped != stoppedForGood:
			return v1.PodRunning
		case stopped == succeeded:
			return v1.PodSucceeded
		default:
			return v1.PodFailed
		}
	}
	return v1.PodPending
}

// withProbes sets a running container's Started and Ready from its probes
// (initCtr: a restartable init container), handing them what the pod showed
// last for the same container (shown), as the kubelet's status generation
// hands its prober the old status's Started.
func withProbes(in Input, cs v1.ContainerStatus, initCtr bool) v1.ContainerStatus {
	if in.Node.Probes == nil || cs.State.Running == nil {
		return cs
	}
	cs.Started, cs.Ready = nil, false
	if old, ok := shown(in, cs, initCtr); ok {
		cs.Started, cs.Ready = old.Started, old.Ready
	}
	var st v1.PodStatus
	if initCtr {
		st.InitContainerStatuses = []v1.ContainerStatus{cs}
	} else {
		st.ContainerStatuses = []v1.ContainerStatus{cs}
	}
	in.Node.Probes.UpdatePodStatus(in.Pod, &st)
	if initCtr {
		return st.InitContainerStatuses[0]
	}
	return st.ContainerStatuses[0]
}

// messageInitStatusLost is the kubelet's message for an init container
// that is gone from the runtime after its pod was initialized.
const messageInitStatusLost = "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally"

// regularCreated reports whether a regular container of the pod's current
// run was created (whatever its state since): the pod was initialized.
func regularCreated(in Input, ra RestartAll) bool {
	for i := range in.Pod.Spec.Containers {
		if newest, _, _ := newestOf(in.Runtime, ra, in.Pod.Spec.Containers[i].Name); newest != nil {
			return true
		}
	}
	return false
}

// heldStatus is Previous's status of regular container c while a sync is in
// flight (Input.Syncing) and c's newest instance, which Previous shows
// running, has stopped since.
func heldStatus(in Input, ra RestartAll, c *v1.Container) (v1.ContainerStatus, bool) {
	if !in.Syncing || in.Previous == nil {
		return v1.ContainerStatus{}, false
	}
	newest, _, _ := newestOf(in.Runtime, ra, c.Name)
	if newest == nil || newest.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		return v1.ContainerStatus{}, false
	}
	id := in.Node.RuntimeName + "://" + newest.Id
	for _, old := range in.Previous.ContainerStatuses {
		if old.Name == c.Name && old.ContainerID == id && old.State.Running != nil {
			return old, true
		}
	}
	return v1.ContainerStatus{}, false
}

// shown is the status the pod showed last for container cs (by name and
// container ID): Previous's, else the one the pod came with (an API pod's
// status on the API server, which is all the agent has of it after its
// restart, as the kubelet falls back to the pod's status).
func shown(in Input, cs v1.ContainerStatus, initCtr bool) (v1.ContainerStatus, bool) {
	var prev *v1.PodStatus
	switch {
	case in.Previous != nil:
		prev = in.Previous
	case in.Pod != nil:
		prev = &in.Pod.Status
	default:
		return v1.ContainerStatus{}, false
	}
	list := prev.ContainerStatuses
	if initCtr {
		list = prev.InitContainerStatuses
	}
	for _, old := range list {
		if old.Name == cs.Name && old.ContainerID == cs.ContainerID {
			return old, true
		}
	}
	return v1.ContainerStatus{}, false
}

// RecursiveReadOnly resolves a volume mount's recursiveReadOnly mode
// against the runtime's support, as the kubelet does: true when the mount
// is to be read-only all the way down. Enabled on a runtime without support,
// on a mount that is not read-only or that propagates mounts is an error
// (the API server refuses the last two already); IfPossible is Enabled
// where supported, else Disabled.
func RecursiveReadOnly(vm v1.VolumeMount, supported bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if p := vm.MountPropagation; p != nil && *p != v1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *p)
	}
	switch mode := *vm.RecursiveReadOnly; mode {
	case v1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case v1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", mode)
	}
}
