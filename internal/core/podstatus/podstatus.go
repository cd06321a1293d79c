// Package podstatus derives a pod's API status (v1.PodStatus) from data: the
// pod's spec, what the runtime holds of it, its probe results, the waiting
// reasons and back-offs of its last sync, the final status a kill or an
// admission fixed, and the status it showed before. Derive is the one place
// a pod's status is made; the agent's sync loop calls it for each pod whose
// inputs changed, and keeps no other rule of how a status looks.
//
// It depends on nothing of the agent or the pod runtime: internal/core/podruntime
// writes the CRI objects Derive reads (Runtime, the annotations below) and
// returns the waiting reasons; the agent's pod table holds the rest.
package podstatus

import (
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// Annotations of the CRI containers that the pod runtime writes and Derive
// reads.
const (
	// AnnotationRestartCount is a container's restart count, the kubelet's.
	AnnotationRestartCount = "io.kubernetes.container.restartCount"
	// AnnotationImage is ours: the image the spec named when the container
	// was made, which its status shows (the spec's may have changed since).
	AnnotationImage = "nodekeeper.io/image"
	// AnnotationRun is ours: the ID of the container whose exit restarted
	// all the pod's containers (RestartAll) before this one was created,
	// "" when none had; it tells the pod's runs apart.
	AnnotationRun = "nodekeeper.io/restart-all-run"
)

// Runtime is what the runtime holds of one pod, as read by one relist: its
// sandboxes (newest first) and containers (newest first per name). A pod's
// identity is the io.kubernetes.pod.uid label on its CRI objects. Its
// statuses are shared between relists and readers: read them, do not change
// them. A nil *Runtime is a pod of which the runtime holds nothing.
type Runtime struct {
	UID       types.UID
	Name      string
	Namespace string
	// Sandboxes are the pod's sandboxes, newest first.
	Sandboxes []*runtimeapi.PodSandboxStatus
	// Containers are the pod's containers, newest first (by creation time).
	Containers []*runtimeapi.ContainerStatus
	// IPs are the newest ready sandbox's IPs, primary first.
	IPs []string
	// InspectErr, when set, says the runtime failed to give the status of
	// one of the pod's sandboxes or containers in this relist: the rest is
	// the previous relist's (or what this one saw, for a pod new to it),
	// and the pod is asked about again at the next relist.
	InspectErr error
}

// Newest is the newest container of r named name, nil if none; with prev,
// the one before it. r may be nil.
func (r *Runtime) Newest(name string) (newest, prev *runtimeapi.ContainerStatus) {
	if r == nil {
		return nil, nil
	}
	for _, c := range r.Containers {
		if c.GetMetadata().GetName() != name {
			continue
		}
		if newest == nil {
			newest = c
		} else {
			return newest, c
		}
	}
	return newest, nil
}

// Running reports whether anything of the pod runs: a ready sandbox or a
// running container. r may be nil.
func (r *Runtime) Running() bool {
	if r == nil {
		return false
	}
	return slices.ContainsFunc(r.Sandboxes, func(s *runtimeapi.PodSandboxStatus) bool {
		return s != nil && s.State == runtimeapi.PodSandboxState_SANDBOX_READY
	}) || slices.ContainsFunc(r.Containers, func(c *runtimeapi.ContainerStatus) bool {
		return c != nil && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	})
}

// RestartCount of a container from its annotation (its attempt without
// one); 0 for nil.
func RestartCount(c *runtimeapi.ContainerStatus) int {
	if c == nil {
		return 0
	}
	n, err := strconv.Atoi(c.GetAnnotations()[AnnotationRestartCount])
	if err != nil {
		return int(c.GetMetadata().GetAttempt())
	}
	return n
}

// Probes is what Derive asks of the prober; *prober.Manager satisfies it.
// UpdatePodStatus sets Started and Ready of the container statuses in status
// from the probe results (and may have a readiness probe run at once); it is
// safe from any goroutine.
type Probes interface {
	UpdatePodStatus(pod *v1.Pod, status *v1.PodStatus)
}

// Node is what of the node, its runtime and its prober every pod's status
// shows. *podruntime.Manager reports it (StatusNode).
type Node struct {
	// HostIP is status.hostIP, and the pod IP of host-network pods.
	HostIP string
	// RuntimeName prefixes container IDs ("containerd").
	RuntimeName string
	// RecursiveReadOnly: the runtime's default handler supports recursive
	// read-only mounts (the volume mounts' status).
	RecursiveReadOnly bool
	// Probes, if set, sets the started and ready fields of running
	// containers; without it a running container is started and ready.
	Probes Probes
}

// Input is everything a pod's status is derived from. Derive reads it and
// changes nothing in it.
type Input struct {
	// Pod is the pod (its spec; its own status is the one it came with).
	Pod *v1.Pod
	// Runtime is what the runtime holds of it (nil: nothing).
	Runtime *Runtime
	// Node is the node's part.
	Node Node
	// Waiting is the waiting state per container name that the pod's last
	// sync left (podruntime.SyncState.Waiting): ContainerCreating,
	// CrashLoopBackOff, ErrImagePull, ...
	Waiting map[string]v1.ContainerStateWaiting
	// Final, if set, is the status a kill request, the pod's active
	// deadline or an admission rejection fixed: its phase, reason and
	// message are shown over the runtime's, its conditions replace those
	// of the same type.
	Final *v1.PodStatus
	// Killed: Final came from a kill request (an eviction or a
	// preemption). Once its containers have stopped, a pod that is not
	// static takes its phase from their exits (see Derive).
	Killed bool
	// Rejected: admission refused the pod; its status is Final alone.
	Rejected bool
	// Deleted: the pod was deleted and its kill has ended; its phase is
	// terminal once every container has finished, and once Settled also
	// when some never will (see deleted).
	Deleted bool
	// Settled, with Deleted: the runtime was listed after the kill, so a
	// container that has not finished never will.
	Settled bool
	// Syncing: a SyncPod of the pod is in flight, or the runtime has not
	// been listed since it ended. A regular container that Previous shows
	// running and that has stopped since shows as Previous has it until then,
	// as the kubelet generates a pod's status only between its syncs, from a
	// listing made after the last: a sync that stops a container to start it
	// again (a changed spec, a failed liveness or startup probe) shows it
	// running, then restarted, never terminated in between, which the API
	// server refuses to see running again in a pod whose restartPolicy does
	// not restart it.
	Syncing bool
	// Devices is, per container name, the health of each device-plugin
	// device assigned to the container (devicemanager's
	// AllocatedResourcesStatus): its status's allocatedResourcesStatus.
	// Containers it does not name hold no devices.
	Devices map[string][]v1.ResourceStatus
	// Previous is the status the pod showed last (nil: none yet). Its
	// conditions' transition times go on (without it, those the pod came
	// with), its phase is held while the pod still runs, its IPs kept once
	// its sandbox is gone.
	Previous *v1.PodStatus
}

// Derive is the pod's status at now. done reports that the pod's containers
// are done under its restartPolicy (or fixed by Final): its phase is
// Succeeded or Failed, shown, or held (see below) while something of it
// still runs, which is when the caller stops the pod.
//
// The rules, in order: the runtime's view (containers' states by the
// waiting reasons of the last sync and the probes, phase, conditions; see
// view), its conditions' transition times kept from Previous where they did
// not change; Final over it; a deleted pod's phase and unfinished containers
// (see deleted); then, while a sandbox or container of the pod still
// runs, Previous's non-terminal phase, reason and message in place of a
// terminal phase (Pending if there is none), as the kubelet's status
// manager holds them: a terminal phase says the pod's containers have
// stopped for good and its resources are free; once nothing runs, a killed
// pod that is not static (Killed) takes the phase its containers' exits give
// (Succeeded when each exited 0, Failed when one did not; a container that
// never finished keeps Final's phase), and Final's reason and message stay
// only with Final's phase, as the kubelet's generateAPIPodStatus derives a
// terminal pod's phase from its containers (static pods excepted) and keeps
// the reason only with an unchanged phase; last, Previous's IPs when
// the runtime shows none (its sandbox stopped or is gone), as the kubelet
// keeps a terminated pod's IPs. Each container status, whatever its state,
// shows the health of the devices assigned to its container (Devices) as
// allocatedResourcesStatus, sorted by resource name, then device ID.
func Derive(in Input, now time.Time) (st v1.PodStatus, done bool) {
	if in.Rejected {
		return Settle(in, v1.PodStatus{}, now)
	}
	return Settle(in, view(in, now), now)
}

// Settle is Derive over rt, the runtime's view of the pod (what Derive
// computes first from in.Runtime, in.Waiting and in.Node): Derive(in, now)
// is Settle(in, view, now). It lets a test's fake runtime view be settled
// by the real rules.
func Settle(in Input, rt v1.PodStatus, now time.Time) (st v1.PodStatus, done bool) {
	st = rt
	if in.Rejected {
		st = *in.Final
	} else {
		prev := in.Pod.Status.Conditions
		if in.Previous != nil {
			prev = in.Previous.Conditions
		}
		st.Conditions = keepTransitions(prev, st.Conditions)
	}
	switch {
	case in.Rejected:
	case in.Final != nil:
		st = withFinal(st, *in.Final)
	case in.Deleted && in.Settled:
		st = deleted(in.Pod, st)
	case in.Deleted:
		st.Phase = deletedPhase(st)
	}
	done = terminalPhase(st.Phase)
	if done && in.Runtime.Running() {
		st.Phase, st.Reason, st.Message = v1.PodPending, "", ""
		if in.Previous != nil && !terminalPhase(in.Previous.Phase) {
			st.Phase, st.Reason, st.Message = in.Previous.Phase, in.Previous.Reason, in.Previous.Message
		}
	}
	if in.Killed && in.Final != nil && in.Pod != nil && !qos.IsStatic(in.Pod) && !in.Runtime.Running() {
		if ph := deletedPhase(st); terminalPhase(ph) && ph != st.Phase {
			st.Phase, st.Reason, st.Message = ph, "", ""
		}
	}
	if len(st.PodIPs) == 0 && in.Previous != nil && len(in.Previous.PodIPs) > 0 {
		st.PodIP, st.PodIPs = in.Previous.PodIP, in.Previous.PodIPs
	}
	if len(in.Devices) > 0 {
		st.InitContainerStatuses = withDevices(st.InitContainerStatuses, in.Devices)
		st.ContainerStatuses = withDevices(st.ContainerStatuses, in.Devices)
	}
	return st, done
}

// withDevices returns statuses with each container's allocatedResourcesStatus
// from devices, sorted by resource name, then device ID (KEP-4680, as the
// kubelet with ResourceHealthStatus shows it). statuses and devices are not
// modified: a status that changes is a copy in a new slice.
func withDevices(statuses []v1.ContainerStatus, devices map[string][]v1.ResourceStatus) []v1.ContainerStatus {
	var out []v1.ContainerStatus
	for i := range statuses {
		d, ok := devices[statuses[i].Name]
		if !ok {
			continue
		}
		if out == nil {
			out = slices.Clone(statuses)
		}
		out[i].AllocatedResourcesStatus = sortedResourceStatus(d)
	}
	if out == nil {
		return statuses
	}
	return out
}

// sortedResourceStatus is a sorted deep copy of in: by resource name, each
// resource's devices by ID.
func sortedResourceStatus(in []v1.ResourceStatus) []v1.ResourceStatus {
	out := make([]v1.ResourceStatus, len(in))
	for i, r := range in {
		out[i] = v1.ResourceStatus{Name: r.Name, Resources: slices.Clone(r.Resources)}
		slices.SortStableFunc(out[i].Resources, func(a, b v1.ResourceHealth) int { return strings.Compare(string(a.ResourceID), string(b.ResourceID)) })
	}
	slices.SortStableFunc(out, func(a, b v1.ResourceStatus) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out
}

func terminalPhase(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// keepTransitions gives each condition of cur whose status is the same as in
// prev prev's LastTransitionTime: a condition's time is when it last changed.
func keepTransitions(prev, cur []v1.PodCondition) []v1.PodCondition {
	if cur == nil {
		return nil
	}
	out := make([]v1.PodCondition, len(cur))
	copy(out, cur)
	for i := range out {
		for _, p := range prev {
			if p.Type == out[i].Type && p.Status == out[i].Status {
				out[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	return out
}

// withFinal lays a kill's final status over the runtime's: phase, reason
// and message, and its conditions replacing those of the same type.
func withFinal(st, final v1.PodStatus) v1.PodStatus {
	if final.Phase != "" {
		st.Phase = final.Phase
	}
	if final.Reason != "" || final.Message != "" {
		st.Reason, st.Message = final.Reason, final.Message
	}
	conds := slices.Clone(st.Conditions)
	for _, c := range final.Conditions {
		if i := slices.IndexFunc(conds, func(x v1.PodCondition) bool { return x.Type == c.Type }); i >= 0 {
			conds[i] = c
		} else {
			conds = append(conds, c)
		}
	}
	st.Conditions = conds
	return st
}
