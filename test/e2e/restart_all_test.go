package e2e

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// restartAllManifest is a Never pod whose container source exits 42 once (its
// mark in the pod's emptyDir), after exitAfter, then runs; its rule says
// RestartAllContainers for 42 (KEP-5532). Its init container takes initFor;
// a sidecar and another container (exiting 143 when stopped) run until
// stopped.
func restartAllManifest(name, exitAfter, initFor string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 30
  initContainers:
  - {name: setup, image: %[2]s, args: ["exit", "--after", "%[4]s", "0"]}
  - {name: side, image: %[2]s, args: ["sleep"], restartPolicy: Always}
  containers:
  - name: source
    image: %[2]s
    args: ["exit", "--once", "/work/done", "--after", "%[3]s", "42"]
    restartPolicy: Never
    restartPolicyRules:
    - action: RestartAllContainers
      exitCodes: {operator: In, values: [42]}
    volumeMounts: [{name: work, mountPath: /work}]
  - name: other
    image: %[2]s
    args: ["sleep"]
    env: [{name: TESTBOX_STOP_EXIT, value: "143"}]
  volumes:
  - {name: work, emptyDir: {}}
`, name, testbox, exitAfter, initFor)
}

// allRestartedOnce reports whether every container of p restarted exactly
// once, its last termination recorded, and the regular ones and the sidecar
// run again.
func allRestartedOnce(p *v1.Pod) bool {
	all := append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	if len(all) != 4 {
		return false
	}
	for _, c := range all {
		if c.RestartCount != 1 || c.LastTerminationState.Terminated == nil {
			return false
		}
		if c.Name != "setup" && c.State.Running == nil {
			return false
		}
	}
	return p.Status.Phase == v1.PodRunning
}

// restartingCondition is p's AllContainersRestarting condition's status, ""
// if none.
func restartingCondition(p *v1.Pod) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.AllContainersRestarting {
			return c.Status
		}
	}
	return ""
}

// checkRestartedInPlace checks the end of a RestartAllContainers: every
// container restarted once, in the same sandbox (the pod keeps its IP), the
// init container ran again and exited 0, source's last exit is the 42 that
// triggered it, and AllContainersRestarting is False.
func checkRestartedInPlace(t *testing.T, before, after *v1.Pod) {
	t.Helper()
	if after.Status.PodIP == "" || after.Status.PodIP != before.Status.PodIP {
		t.Errorf("pod IP %q after the restart, want %q (the sandbox kept)", after.Status.PodIP, before.Status.PodIP)
	}
	if got := restartingCondition(after); got != v1.ConditionFalse {
		t.Errorf("AllContainersRestarting %q after the restart, want False", got)
	}
	if c := after.Status.InitContainerStatuses[0]; c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
		t.Errorf("init container after the restart: %+v, want run again and exited 0", c.State)
	}
	for _, c := range after.Status.ContainerStatuses {
		if c.Name == "source" && c.LastTerminationState.Terminated.ExitCode != 42 {
			t.Errorf("source's last termination %+v, want exit 42", c.LastTerminationState.Terminated)
		}
		if c.Name == "other" && c.LastTerminationState.Terminated.ExitCode != 143 {
			t.Errorf("other's last termination %+v, want exit 143 (stopped)", c.LastTerminationState.Terminated)
		}
	}
}

// TestRestartAllContainers: a regular container exiting with the code of
// its RestartAllContainers rule restarts every container of the pod in
// place: the sidecar and the other container are stopped, the init
// container runs again, then the sidecar and both containers start, each
// once (node e2e "Pod Extended (RestartAllContainers) should restart all
// containers on regular container exit").
func TestRestartAllContainers(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("restartall.yaml", restartAllManifest("restartall", "2s", "0s"))
	before := a.WaitPod("restartall-e2e", "source running before its exit", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[0].RestartCount == 0
	})
	after := a.WaitPod("restartall-e2e", "every container restarted once", allRestartedOnce)
	checkRestartedInPlace(t, before, after)
}

// TestRestartAllContainersAgentRestart: the agent restarted in the middle of
// a RestartAllContainers goes on from what the runtime holds. The trigger
// exits while no agent runs (the new agent must infer the cleanup from the
// runtime alone), and the agent is restarted again while the init container
// of the pod's new run runs (the startup must go on, not restart all again).
// Node e2e "RestartAllContainersWithKubeletRestarts kubelet restart during
// cleanup / during startup".
func TestRestartAllContainersAgentRestart(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("restartall.yaml", restartAllManifest("restartall", "8s", "10s"))
	before := a.WaitPod("restartall-e2e", "source running before its exit", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[0].RestartCount == 0
	})
	// The agent's stop stops its containerd, not the pod's processes.
	pid := a.ContainerPID(before.Status.ContainerStatuses[0].ContainerID)
	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("nodekeeper exited %d after SIGTERM, want 0", code)
	}
	// The trigger exits while no agent runs; nothing else changes.
	a.Eventually("source exited while the agent is down", 60*time.Second, func() (bool, string) {
		err := syscall.Kill(pid, 0)
		return errors.Is(err, syscall.ESRCH), fmt.Sprintf("kill(%d, 0): %v", pid, err)
	})
	a.Start()
	a.WaitPod("restartall-e2e", "the new run's init container running", func(p *v1.Pod) bool {
		c := p.Status.InitContainerStatuses[0]
		return restartingCondition(p) == v1.ConditionFalse && c.RestartCount == 1 && c.State.Running != nil
	})
	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("nodekeeper exited %d after SIGTERM, want 0", code)
	}
	a.Start()
	after := a.WaitPod("restartall-e2e", "every container restarted once", allRestartedOnce)
	checkRestartedInPlace(t, before, after)
}
