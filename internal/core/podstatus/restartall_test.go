package podstatus

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func inRun(trigger string) ctrOpt {
	return func(c *runtimeapi.ContainerStatus) { c.Annotations[AnnotationRun] = trigger }
}

// TestDeriveRestartAll derives a pod's status through a RestartAllContainers
// action (KEP-5532) from the runtime alone: AllContainersRestarting is True
// from the trigger's exit until the pod's new run created a container, then
// False; Initialized stays True; the phase is Pending while the pod starts again, never terminal
// (the agent would stop the pod); a container of the run before shows
// waiting, its exit as the last termination and its restart count, until its
// new instance replaces it, whose restart count goes on and whose last
// termination is the old instance's.
func TestDeriveRestartAll(t *testing.T) {
	t.Parallel()
	never := v1.ContainerRestartPolicyNever
	rules := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	i1 := v1.Container{Name: "i1", Image: "img:1"}
	app := v1.Container{Name: "app", Image: "img:1", RestartPolicy: &never, RestartPolicyRules: rules}
	other := v1.Container{Name: "other", Image: "img:1"}
	pod := testPod(func(p *v1.Pod) {
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.InitContainers = []v1.Container{i1}
		p.Spec.Containers = []v1.Container{app, other}
	})
	s := time.Second
	ready := []*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}
	oldI1 := ctr("c1", &i1, "s1", 0, 1*s, exited(0, 1*s, 2*s))
	trigger := ctr("c3", &app, "s1", 0, 4*s, exited(42, 4*s, 10*s))
	tests := []struct {
		name  string
		ctrs  []*runtimeapi.ContainerStatus
		phase v1.PodPhase
		// cond is AllContainersRestarting ("": none); states are each
		// container's "state restarts last-exit".
		cond   string
		states []string
	}{
		{name: "no trigger: no condition",
			ctrs:  []*runtimeapi.ContainerStatus{oldI1, ctr("c3", &app, "s1", 0, 4*s, running(4*s)), ctr("c4", &other, "s1", 0, 5*s, running(5*s))},
			phase: v1.PodRunning, states: []string{"terminated 0 -", "running 0 -", "running 0 -"}},
		{name: "trigger exited, other still runs: restarting, Pending",
			ctrs:  []*runtimeapi.ContainerStatus{oldI1, trigger, ctr("c4", &other, "s1", 0, 5*s, running(5*s))},
			phase: v1.PodPending, cond: "True(ContainerExited): Container app exited with code 42, triggering pod restart",
			states: []string{"waiting 0 0", "waiting 0 42", "waiting 0 -"}},
		{name: "all stopped, a Never pod whose containers all failed: still Pending, not Failed",
			ctrs:  []*runtimeapi.ContainerStatus{oldI1, trigger, ctr("c4", &other, "s1", 0, 5*s, exited(137, 5*s, 11*s))},
			phase: v1.PodPending, cond: "True(ContainerExited): Container app exited with code 42, triggering pod restart",
			states: []string{"waiting 0 0", "waiting 0 42", "waiting 0 137"}},
		{name: "new run started: the condition is False, restart counts go on",
			ctrs: []*runtimeapi.ContainerStatus{oldI1, trigger, ctr("c4", &other, "s1", 0, 5*s, exited(137, 5*s, 11*s)),
				ctr("c5", &i1, "s1", 1, 12*s, running(12*s), inRun("c3"))},
			phase: v1.PodPending, cond: "False",
			states: []string{"running 1 0", "waiting 0 42", "waiting 0 137"}},
		{name: "new run running",
			ctrs: []*runtimeapi.ContainerStatus{oldI1, trigger, ctr("c4", &other, "s1", 0, 5*s, exited(137, 5*s, 11*s)),
				ctr("c5", &i1, "s1", 1, 12*s, exited(0, 12*s, 13*s), inRun("c3")),
				ctr("c6", &app, "s1", 1, 14*s, running(14*s), inRun("c3")),
				ctr("c7", &other, "s1", 1, 15*s, running(15*s), inRun("c3"))},
			phase: v1.PodRunning, cond: "False",
			states: []string{"terminated 1 0", "running 1 42", "running 1 137"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := Input{Pod: pod, Runtime: status(ready, tc.ctrs...), Node: Node{RuntimeName: "containerd"}}
			st, done := Derive(in, t0.Add(time.Minute))
			if done || st.Phase != tc.phase {
				t.Errorf("phase %s, done %v; want %s, not done", st.Phase, done, tc.phase)
			}
			cond := ""
			for _, c := range st.Conditions {
				if c.Type == v1.AllContainersRestarting {
					cond = string(c.Status)
					if c.Reason != "" {
						cond += "(" + c.Reason + "): " + c.Message
					}
				}
			}
			if cond != tc.cond {
				t.Errorf("AllContainersRestarting %q, want %q", cond, tc.cond)
			}
			// Initialized stays True through the restart: the pod is not
			// made again, only its containers.
			for _, c := range st.Conditions {
				if c.Type == v1.PodInitialized && (c.Status != v1.ConditionTrue || c.Reason != "") {
					t.Errorf("Initialized %s (%s), want True", c.Status, c.Reason)
				}
			}
			var states []string
			for _, cs := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
				state := "waiting"
				switch {
				case cs.State.Running != nil:
					state = "running"
				case cs.State.Terminated != nil:
					state = "terminated"
				}
				last := "-"
				if t := cs.LastTerminationState.Terminated; t != nil {
					last = fmt.Sprint(t.ExitCode)
				}
				states = append(states, fmt.Sprintf("%s %d %s", state, cs.RestartCount, last))
			}
			if diff := cmp.Diff(tc.states, states); diff != "" {
				t.Errorf("container states (-want +got):\n%s", diff)
			}
		})
	}
}
