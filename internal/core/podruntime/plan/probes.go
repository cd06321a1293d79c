package plan

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podstatus"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// probeRestarts adds the running containers of the current sandbox whose
// liveness or startup probe failed (Input.Unhealthy): a kill each, with the
// probe's grace period unless the pod is being deleted, and a start unless
// the restart rule keeps a failed container down
// (nodeapi.RestartsAfterExit with a kill's exit code: restartPolicy Never)
// or the crash-loop back-off of the container's previous exit holds it. As
// the kubelet does, the first such restart is immediate. Sidecars start
// before what they serve.
func (p *planner) probeRestarts() {
	if len(p.in.Unhealthy) == 0 || p.in.Status == nil || p.acts.CreateSandbox {
		return
	}
	pod := p.in.Pod
	var sidecars []Start
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; nodeapi.IsSidecar(c) {
			if a, ok := p.probeRestart(c, nodeapi.InitContainer); ok {
				sidecars = append(sidecars, a)
			}
		}
	}
	if !p.acts.InitPhase {
		for i := range pod.Spec.Containers {
			if a, ok := p.probeRestart(&pod.Spec.Containers[i], nodeapi.RegularContainer); ok {
				p.acts.Start = append(p.acts.Start, a)
			}
		}
	}
	p.acts.Start = append(sidecars, p.acts.Start...)
}

// probeRestart kills container c (of role) if its running instance in the
// current sandbox failed a probe, and returns its start when it is to start
// again now.
func (p *planner) probeRestart(c *v1.Container, role nodeapi.ContainerRole) (Start, bool) {
	pod, status := p.in.Pod, p.in.Status
	cs := inSandbox(status, c.Name, p.acts.SandboxID)
	if cs == nil || cs.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return Start{}, false
	}
	if slices.ContainsFunc(p.acts.Kill, func(k Kill) bool { return k.ID == cs.Id }) {
		return Start{}, false // restarted for a changed spec already
	}
	f, bad := p.in.Unhealthy[cs.Id]
	if !bad {
		return Start{}, false
	}
	grace := f.Grace
	if pod.DeletionGracePeriodSeconds != nil {
		grace = nil // the deletion's grace period wins
	}
	// A container killed for a failed probe has failed: the restart rule
	// with a failure's exit code (137, killed) says whether it comes back.
	restart := nodeapi.RestartsAfterExit(pod.Spec.RestartPolicy, c, role, 137)
	msg := fmt.Sprintf("Container %s failed %s probe", c.Name, strings.ToLower(f.Probe))
	if restart {
		msg += ", will be restarted"
	}
	p.acts.Kill = append(p.acts.Kill, Kill{ID: cs.Id, Name: c.Name, Reason: f.Probe + " probe failed", Grace: grace, Message: msg})
	if !restart {
		return Start{}, false
	}
	return p.restartable(c, lastExited(status, c.Name), podstatus.RestartCount(cs)+1)
}

// lastExited is the newest exited container of status named name, nil if
// none.
func lastExited(status *podstatus.Runtime, name string) *runtimeapi.ContainerStatus {
	for _, c := range status.Containers {
		if c.GetMetadata().GetName() == name && c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return c
		}
	}
	return nil
}
