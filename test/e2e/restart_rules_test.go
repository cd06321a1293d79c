package e2e

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestContainerRestartRules: a container's own restartPolicy and
// restartPolicyRules (ContainerRestartRules) decide whether it starts again,
// and the pod's phase follows, as the upstream specs "Pod Extended (container
// restart policy)" check: in a Never pod, a container whose rule matches its
// exit code (42) restarts and the pod runs on; in an Always pod, a container
// with restartPolicy Never that exits 1 stays stopped and the pod has Failed.
func TestContainerRestartRules(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("rule.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: rule}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: %[1]s
    args: ["exit", "--once", "/work/done", "42"]
    restartPolicy: Never
    restartPolicyRules:
    - action: Restart
      exitCodes: {operator: In, values: [42]}
    volumeMounts: [{name: work, mountPath: /work}]
  volumes:
  - {name: work, emptyDir: {}}
`, testbox))
	a.WriteManifest("never.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  restartPolicy: Always
  containers:
  - {name: main, image: %[1]s, args: ["exit", "1"], restartPolicy: Never}
`, testbox))
	a.WaitPod("rule-e2e", "restarted by its rule, running", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return p.Status.Phase == v1.PodRunning && len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Running != nil &&
			cs[0].LastTerminationState.Terminated != nil && cs[0].LastTerminationState.Terminated.ExitCode == 42
	})
	p := a.WaitPod("never-e2e", "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 0 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 1 {
		t.Errorf("never-e2e's container: %+v; want terminated with exit 1 and no restart", cs)
	}
}
