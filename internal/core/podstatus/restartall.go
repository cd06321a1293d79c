package podstatus

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// ReasonRestartAllContainers is the reason of the AllContainersRestarting
// condition while a pod restarts all its containers in place, as KEP-5532
// documents it.
const ReasonRestartAllContainers = "ContainerExited"

// RestartAll is where a pod is in the RestartAllContainers action of its
// restartPolicyRules (KEP-5532), read from what the runtime holds of it alone,
// so that an agent restarted in the middle goes on from where the last one
// stopped. A container of the pod exiting with a code whose rule's action is
// RestartAllContainers (the trigger) asks for every container of the pod
// (init, sidecars, regular, ephemeral) to be stopped, the sandbox, its IPs and
// the volumes kept (the cleanup), then for the pod to start again from its
// first init container (the startup). Each container the pod runtime creates
// names in AnnotationRun the trigger whose run it belongs to. The containers
// of the run before stay in the runtime (their restart counts and last states
// go on from them, the kubelet keeping them in the API status instead), but
// count for nothing else (see Stale): the pod's phase, init sequence and
// restarts are those of its new run. The zero value is a pod with no trigger.
type RestartAll struct {
	// Trigger is the exited container, in the pod's newest sandbox, that
	// finished last of those whose exit asks for all containers to restart
	// (nil: none); Spec is its container in the pod's spec.
	Trigger *runtimeapi.ContainerStatus
	Spec    *v1.Container
	// Pending: no container of the pod belongs to Trigger's run yet, so the
	// cleanup is under way (or its startup not begun): what still runs is
	// to be stopped, then the pod started again. Once the startup has
	// created a container, the restart is done.
	Pending bool
}

// RestartAll reads the pod's RestartAllContainers state from r (nil: none):
// only containers created in the newest sandbox count, so that a pod whose
// sandbox was made again (a node restart) starts afresh.
func (r *Runtime) RestartAll(pod *v1.Pod) RestartAll {
	var ra RestartAll
	if r == nil || pod == nil || len(r.Sandboxes) == 0 {
		return ra
	}
	since := r.Sandboxes[0].GetCreatedAt()
	for _, c := range r.Containers {
		if c.GetCreatedAt() < since || c.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		spec := specContainer(pod, c.GetMetadata().GetName())
		if spec == nil || !nodeapi.RestartsAllAfterExit(spec, c.GetExitCode()) {
			continue
		}
		if ra.Trigger == nil || c.GetFinishedAt() > ra.Trigger.GetFinishedAt() {
			ra.Trigger, ra.Spec = c, spec
		}
	}
	if ra.Trigger == nil {
		return ra
	}
	ra.Pending = !slices.ContainsFunc(r.Containers, func(c *runtimeapi.ContainerStatus) bool {
		return c.GetAnnotations()[AnnotationRun] == ra.Trigger.GetId()
	})
	return ra
}

// Run is the AnnotationRun of the containers the pod starts now: its
// trigger's ID, "" for a pod with none.
func (ra RestartAll) Run() string {
	if ra.Trigger == nil {
		return ""
	}
	return ra.Trigger.GetId()
}

// Stale reports whether container c belongs to the pod's run before its last
// RestartAllContainers (its AnnotationRun is not the trigger's). A stale
// container gives its restart count and last state to the container that
// replaces it, and nothing else. c may be nil (false).
func (ra RestartAll) Stale(c *runtimeapi.ContainerStatus) bool {
	return ra.Trigger != nil && c != nil && c.GetAnnotations()[AnnotationRun] != ra.Trigger.GetId()
}

// KeepRunBefore returns remove (IDs of exited containers of r to remove)
// without those that the pod's current run still reads: the trigger, which
// marks where the run begins, and of each name the last container of the run
// before, whose exit is the last termination of the container that replaces
// it. remove's array is reused; nil when none is left.
func (ra RestartAll) KeepRunBefore(r *Runtime, remove []string) []string {
	if ra.Trigger == nil || r == nil {
		return remove
	}
	keep := map[string]bool{ra.Trigger.GetId(): true}
	seen := map[string]bool{}
	for _, c := range r.Containers { // newest first
		if name := c.GetMetadata().GetName(); ra.Stale(c) && !seen[name] {
			seen[name], keep[c.GetId()] = true, true
		}
	}
	if remove = slices.DeleteFunc(remove, func(id string) bool { return keep[id] }); len(remove) == 0 {
		return nil
	}
	return remove
}

// Condition is the pod's AllContainersRestarting condition at now: True while
// the restart is pending, False once the pod started again; none (ok false)
// for a pod with no trigger.
func (ra RestartAll) Condition(now metav1.Time) (c v1.PodCondition, ok bool) {
	if ra.Trigger == nil {
		return c, false
	}
	c = v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse, LastTransitionTime: now}
	if ra.Pending {
		c.Status, c.Reason = v1.ConditionTrue, ReasonRestartAllContainers
		c.Message = fmt.Sprintf("Container %s exited with code %d, triggering pod restart", ra.Spec.Name, ra.Trigger.GetExitCode())
	}
	return c, true
}

// specContainer is pod's init or regular container named name, nil if none
// (ephemeral containers have no restart rules).
func specContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// newestOf is the newest container named name and the one before it, as
// Runtime.Newest, in the pod's current run: when the newest is stale (see
// RestartAll.Stale) both are nil and stale is it.
func newestOf(r *Runtime, ra RestartAll, name string) (newest, prev, stale *runtimeapi.ContainerStatus) {
	newest, prev = r.Newest(name)
	if ra.Stale(newest) {
		return nil, nil, newest
	}
	return newest, prev, nil
}
