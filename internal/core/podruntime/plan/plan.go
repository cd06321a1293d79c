// Package plan decides what one sync of a pod does: given the pod's spec,
// what the runtime holds of it, what the pod's previous syncs learnt (its
// crash-loop back-offs), what the prober says and now, which sandbox to
// make, which containers to kill, start and remove, and why the others
// wait. It is pure: it makes no CRI call, does no I/O and reads no clock;
// the pod runtime (internal/core/podruntime) gathers its input and carries
// its Actions out.
package plan

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

// ReasonCrashLoopBackOff is the waiting reason of a container held by its
// crash-loop back-off.
const ReasonCrashLoopBackOff = "CrashLoopBackOff"

// Input is what a sync of one pod is planned from. Compute reads it and
// changes nothing in it.
type Input struct {
	Pod *v1.Pod
	// Status is what the runtime holds of the pod (nil: nothing).
	Status *podstatus.Runtime
	// Hashes are criconfig.Hash of the pod's init and regular containers,
	// by name (criconfig.Hashes): computed once per sync, they are
	// compared with the running containers' and key the crash back-offs.
	Hashes map[string]string
	// Crash is the crash-loop back-off per container name, from the pod's
	// previous sync; one counted for another spec (Backoff.Spec) is not
	// this container's.
	Crash map[string]Backoff
	// CrashLoop is the node's crash-loop back-off (CrashLoopPolicy); the
	// zero value is the kubelet's default, 10s doubling to 5m.
	CrashLoop Policy
	// NotStarted holds the runtime IDs of running sidecars whose startup
	// probe has not succeeded yet; the next init container, or the
	// containers, wait for them. Absent: started.
	NotStarted map[string]bool
	// Unhealthy holds the runtime IDs of running containers whose liveness
	// or startup probe failed: they are killed and, by the restart rule,
	// started again.
	Unhealthy map[string]ProbeFailure
}

// ProbeFailure is a failed liveness or startup probe of a running container.
type ProbeFailure struct {
	// Probe is the probe's type as the prober names it ("Liveness",
	// "Startup").
	Probe string
	// Grace is the probe's terminationGracePeriodSeconds, nil for the pod's.
	Grace *int64
}

// Start starts one container of the pod.
type Start struct {
	Container *v1.Container
	// Hash is the container's criconfig.Hash ("" for an ephemeral
	// container: the config computes it).
	Hash         string
	RestartCount int
	// PrevFinished is when the container's previous instance exited; a
	// successful start then advances the crash-loop back-off. Zero: none.
	PrevFinished time.Time
	// Run is the pod's run the container belongs to
	// (podstatus.AnnotationRun).
	Run string
	// Target is an ephemeral container's targetContainerName, whose
	// process namespace it joins; TargetID is that container's runtime ID,
	// "" when the pod has no container of that name (the start then fails).
	Target, TargetID string
}

// Kill stops one running container.
type Kill struct {
	ID, Name, Reason string
	// Grace, when set, is the kill's grace period instead of the pod's (a
	// probe's terminationGracePeriodSeconds).
	Grace *int64
	// Message is the Killing event's message; "" is "Stopping container NAME".
	Message string
}

// Actions is what one sync must do, in this order: kill the pod and make a
// new sandbox (CreateSandbox), kill, start the ephemeral containers, start,
// remove.
type Actions struct {
	// CreateSandbox: make a new sandbox (number Attempt), after stopping
	// the pod's containers and sandboxes when KillPod.
	CreateSandbox bool
	KillPod       bool
	Attempt       uint32
	// SandboxID is the current sandbox when none is created.
	SandboxID string
	Kill      []Kill
	// Start lists the containers to start, in order. In the init phase the
	// sync stops at the first one that fails to start.
	Start []Start
	// InitPhase: Start holds init containers only.
	InitPhase bool
	// Ephemeral lists the ephemeral containers to start, before Start:
	// those the runtime holds no container of (they are started once,
	// never restarted).
	Ephemeral []Start
	// Waiting are the waiting reasons of containers that are not started now.
	Waiting map[string]v1.ContainerStateWaiting
	// RetryAfter is the shortest back-off left, 0 if none.
	RetryAfter time.Duration
	// Remove lists exited containers older than the newest of their name.
	Remove []string
}

// Compute decides what a sync of in.Pod does at now.
func Compute(in Input, now time.Time) Actions {
	p := planner{in: in, now: now, acts: Actions{Waiting: map[string]v1.ContainerStateWaiting{}}}
	p.plan()
	p.probeRestarts()
	return p.acts
}

// planner is one Compute under way.
type planner struct {
	in   Input
	now  time.Time
	acts Actions
	// restartAll is the pod's RestartAllContainers state in its current
	// sandbox: containers of the run before it are not current.
	restartAll podstatus.RestartAll
}

// plan fills p.acts from the spec and the runtime status.
func (p *planner) plan() {
	pod, status := p.in.Pod, p.in.Status
	changed, attempt, sbID := sandboxChanged(pod, status)
	p.acts.Attempt, p.acts.SandboxID = attempt, sbID
	hasContainers := status != nil && len(status.Containers) > 0
	if changed {
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever && attempt != 0 && hasContainers {
			return // the pod ran once; a Never pod does not run again
		}
		p.acts.CreateSandbox = true
		p.acts.KillPod = attempt != 0 || hasContainers
	}
	p.acts.Remove = oldContainers(status)
	if !p.acts.CreateSandbox {
		p.restartAll = status.RestartAll(pod)
		p.acts.Remove = p.restartAll.KeepRunBefore(status, p.acts.Remove)
		if p.restartAll.Pending && p.stopAll() {
			return // the cleanup; the pod starts again once nothing runs
		}
		// Into the running sandbox only, even while the init containers run.
		p.acts.Ephemeral = ephemeralStarts(pod, status)
	}
	if !p.initContainers() {
		p.acts.InitPhase = true
		return
	}
	if podFinished(pod, p.current) {
		p.finished()
		return
	}
	for i := range pod.Spec.Containers {
		p.regular(&pod.Spec.Containers[i])
	}
}

// current is the container named name in the current sandbox and the pod's
// current run, nil if none (or a new sandbox is made, or its newest is of the
// run before a RestartAllContainers).
func (p *planner) current(name string) *runtimeapi.ContainerStatus {
	if p.acts.CreateSandbox {
		return nil
	}
	c := inSandbox(p.in.Status, name, p.acts.SandboxID)
	if p.restartAll.Stale(c) {
		return nil
	}
	return c
}

// stopAll plans the cleanup of a RestartAllContainers: it kills every
// container of the pod that runs, at once (no grace period, so no pre-stop
// hook, as KEP-5532 has it), and reports whether there was one. Nothing
// starts in the same sync: the next one, once the runtime shows them
// stopped, starts the pod again from its first init container.
func (p *planner) stopAll() bool {
	t := p.restartAll.Trigger
	msg := fmt.Sprintf("Container %s exited with code %d, restarting all containers of the pod", p.restartAll.Spec.Name, t.GetExitCode())
	zero := int64(0)
	killed := false
	for _, c := range p.in.Status.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		p.acts.Kill = append(p.acts.Kill, Kill{ID: c.Id, Name: c.GetMetadata().GetName(), Reason: "RestartAllContainers", Grace: &zero, Message: msg})
		killed = true
	}
	return killed
}

// crash is the crash-loop back-off of container name, if one was counted
// for its current spec.
func (p *planner) crash(name string) (Backoff, bool) {
	e, ok := p.in.Crash[name]
	return e, ok && e.Spec == p.in.Hashes[name]
}

// restartable is the start of container c, whose newest instance is newest
// (nil: none), unless its last exit is within the crash-loop back-off: then
// its waiting reason and the back-off left are recorded and ok is false.
func (p *planner) restartable(c *v1.Container, newest *runtimeapi.ContainerStatus, restartCount int) (a Start, ok bool) {
	a = Start{Container: c, Hash: p.in.Hashes[c.Name], RestartCount: restartCount, Run: p.restartAll.Run()}
	if newest == nil || newest.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		return a, true
	}
	finished := time.Unix(0, newest.FinishedAt)
	e, found := p.crash(c.Name)
	if in, left := InBackoff(p.in.CrashLoop, e, found, finished, p.now); in {
		p.acts.Waiting[c.Name] = v1.ContainerStateWaiting{Reason: ReasonCrashLoopBackOff, Message: crashLoopMessage(e.Delay, p.in.Pod, c.Name)}
		if p.acts.RetryAfter == 0 || left < p.acts.RetryAfter {
			p.acts.RetryAfter = left
		}
		return a, false
	}
	a.PrevFinished = finished
	return a, true
}

// start queues c, unless its last exit is within the crash-loop back-off.
func (p *planner) start(c *v1.Container) {
	newest, _ := p.in.Status.Newest(c.Name)
	count := 0
	if newest != nil {
		count = podstatus.RestartCount(newest) + 1
	}
	if a, ok := p.restartable(c, newest, count); ok {
		p.acts.Start = append(p.acts.Start, a)
	}
}

// changedSpec reports whether running container cs of c runs another spec;
// then it is killed and c started again.
func (p *planner) changedSpec(c *v1.Container, cs *runtimeapi.ContainerStatus) bool {
	if cs.GetAnnotations()[criconfig.AnnotationContainerHash] == p.in.Hashes[c.Name] {
		return false
	}
	p.acts.Kill = append(p.acts.Kill, Kill{ID: cs.Id, Name: c.Name, Reason: "Container spec hash changed"})
	p.start(c)
	return true
}

// initContainers plans the init containers in order: a sidecar counts once
// started, a regular one must exit 0 before the next. It reports whether
// they are all done.
func (p *planner) initContainers() bool {
	pod := p.in.Pod
	// Once a container of the sandbox exists the pod was initialized: a
	// sidecar restarting then holds nothing up, as with the kubelet.
	initialized := slices.ContainsFunc(pod.Spec.Containers, func(c v1.Container) bool { return p.current(c.Name) != nil })
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := p.current(c.Name)
		if nodeapi.IsSidecar(c) {
			if !p.sidecar(c, cs) && !initialized {
				return false
			}
			continue
		}
		if cs != nil && cs.State == runtimeapi.ContainerState_CONTAINER_EXITED && cs.ExitCode == 0 {
			continue
		}
		if cs == nil && initialized {
			// Removed from the runtime after the pod was initialized: it
			// exited 0 (podstatus shows it so), and it does not run again,
			// as with the kubelet.
			continue
		}
		switch {
		case cs == nil:
			p.start(c)
		case cs.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
		case cs.State == runtimeapi.ContainerState_CONTAINER_EXITED && !nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, nodeapi.InitContainer, cs.ExitCode):
			// The pod has failed; nothing more starts.
		default:
			p.start(c)
		}
		return false
	}
	return true
}

// sidecar plans sidecar c (its current instance cs) and reports whether it
// runs and has started.
func (p *planner) sidecar(c *v1.Container, cs *runtimeapi.ContainerStatus) bool {
	if cs == nil || cs.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		p.start(c)
		return false
	}
	if p.changedSpec(c, cs) {
		return false
	}
	return !p.in.NotStarted[cs.Id]
}

// regular plans regular container c.
func (p *planner) regular(c *v1.Container) {
	cs := p.current(c.Name)
	switch {
	case cs == nil:
		p.start(c)
	case cs.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
		p.changedSpec(c, cs)
	case cs.State == runtimeapi.ContainerState_CONTAINER_EXITED:
		if nodeapi.RestartsAfterExit(p.in.Pod.Spec.RestartPolicy, c, nodeapi.RegularContainer, cs.ExitCode) {
			p.start(c)
		}
	default: // created but never started, or unknown
		p.start(c)
	}
}

// finished trims the plan of a pod whose containers have all run to their
// end: sidecars are not restarted for a pod that is done (the caller kills
// it), nothing more is debugged, and nothing waits for a back-off.
func (p *planner) finished() {
	kept := p.acts.Start[:0]
	for _, a := range p.acts.Start {
		if !nodeapi.IsSidecar(a.Container) {
			kept = append(kept, a)
		} else {
			delete(p.acts.Waiting, a.Container.Name)
		}
	}
	p.acts.Start = kept
	p.acts.Ephemeral = nil
	for name, w := range p.acts.Waiting {
		if w.Reason == ReasonCrashLoopBackOff {
			delete(p.acts.Waiting, name)
		}
	}
	p.acts.RetryAfter = 0
}

// sandboxChanged reports whether pod needs a new sandbox, and its attempt.
func sandboxChanged(pod *v1.Pod, status *podstatus.Runtime) (changed bool, attempt uint32, id string) {
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
func inSandbox(status *podstatus.Runtime, name, id string) *runtimeapi.ContainerStatus {
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

// ephemeralStarts are the ephemeral containers of pod that the runtime holds
// no container of, in spec order, each with its target's runtime ID (the
// newest container of that name). An ephemeral container that ran, whatever
// became of it, is never started again.
func ephemeralStarts(pod *v1.Pod, status *podstatus.Runtime) []Start {
	var out []Start
	for i := range pod.Spec.EphemeralContainers {
		ec := &pod.Spec.EphemeralContainers[i]
		if c, _ := status.Newest(ec.Name); c != nil {
			continue
		}
		a := Start{Container: (*v1.Container)(&ec.EphemeralContainerCommon), Target: ec.TargetContainerName}
		if a.Target != "" {
			if t, _ := status.Newest(a.Target); t != nil {
				a.TargetID = t.Id
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
func oldContainers(status *podstatus.Runtime) []string {
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
