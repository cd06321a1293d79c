package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestDeriveContainerRestartPolicy: once no container runs, the phase
// follows each container's own restartPolicy and restartPolicyRules
// (ContainerRestartRules, on in v1.36), as the upstream specs of "Pod Extended
// (container restart policy)" check: a Never pod's container that will start
// again keeps the pod Running; an Always pod's container that will not ends
// it Failed (or Succeeded after exit 0).
func TestDeriveContainerRestartPolicy(t *testing.T) {
	t.Parallel()
	always, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyNever
	on42 := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	s := time.Second
	for _, tc := range []struct {
		name   string
		pod    v1.RestartPolicy
		c      v1.Container
		exit   int32
		phase  v1.PodPhase
		isDone bool
	}{
		{"Never pod, rule matches the exit: restarts", v1.RestartPolicyNever, v1.Container{RestartPolicy: &never, RestartPolicyRules: on42}, 42, v1.PodRunning, false},
		{"Never pod, rule does not match: Failed", v1.RestartPolicyNever, v1.Container{RestartPolicy: &never, RestartPolicyRules: on42}, 1, v1.PodFailed, true},
		{"Never pod, container Always: restarts", v1.RestartPolicyNever, v1.Container{RestartPolicy: &always}, 1, v1.PodRunning, false},
		{"Always pod, container Never, exit 1: Failed", v1.RestartPolicyAlways, v1.Container{RestartPolicy: &never}, 1, v1.PodFailed, true},
		{"Always pod, container Never, exit 0: Succeeded", v1.RestartPolicyAlways, v1.Container{RestartPolicy: &never}, 0, v1.PodSucceeded, true},
		{"Always pod, no container policy: restarts", v1.RestartPolicyAlways, v1.Container{}, 1, v1.PodRunning, false},
		{"OnFailure pod, exit 0: Succeeded", v1.RestartPolicyOnFailure, v1.Container{}, 0, v1.PodSucceeded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.c
			c.Name, c.Image = "main", "img:1"
			pod := testPod(func(p *v1.Pod) {
				p.Spec.RestartPolicy = tc.pod
				p.Spec.Containers = []v1.Container{c}
			})
			rt := status([]*runtimeapi.PodSandboxStatus{sb("s1", 0, 0)}, ctr("c1", &c, "s1", 0, 1*s, exited(tc.exit, 1*s, 2*s)))
			// The runtime's view: Derive holds a terminal phase as Pending
			// while the sandbox runs, and stops the pod (done).
			st := view(Input{Pod: pod, Runtime: rt, Node: Node{RuntimeName: "containerd"}}, t0.Add(time.Minute))
			if st.Phase != tc.phase {
				t.Errorf("phase %s, want %s", st.Phase, tc.phase)
			}
			if _, done := Derive(Input{Pod: pod, Runtime: rt, Node: Node{RuntimeName: "containerd"}}, t0.Add(time.Minute)); done != tc.isDone {
				t.Errorf("done %v, want %v", done, tc.isDone)
			}
		})
	}
}
