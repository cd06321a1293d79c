package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// cli runs the nodekeeper binary with args and returns its exit code and
// output.
func (a *Agent) cli(args ...string) (int, string) {
	a.t.Helper()
	out, err := exec.Command(a.art.bin, args...).CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		a.t.Fatalf("nodekeeper %s: %v", strings.Join(args, " "), err)
	}
	return 0, string(out)
}

// apply creates the pods of manifest with `nodekeeper apply` through the
// agent's socket (found by its root directory), failing the test unless it
// succeeds, and deletes them when the test ends, before the harness stops
// the agent.
func (a *Agent) apply(name, manifest string) {
	a.t.Helper()
	path := filepath.Join(a.Dir, name)
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		a.t.Fatal(err)
	}
	if code, out := a.cli("apply", "-f", path, "--root-dir", a.Root); code != 0 {
		a.t.Fatalf("apply %s: exit %d: %s", name, code, out)
	}
	a.t.Cleanup(func() {
		a.mu.Lock()
		up := a.cmd != nil
		a.mu.Unlock()
		if !up {
			return
		}
		for _, p := range a.localPods() {
			a.cli("delete", "pod", p.Name, "-n", p.Namespace, "--grace-period", "1", "--socket", a.Socket())
		}
	})
}

// localPods are the agent's pods from the local store.
func (a *Agent) localPods() []v1.Pod {
	pods, _ := a.Pods()
	var out []v1.Pod
	for _, p := range pods {
		if p.Annotations["kubernetes.io/config.source"] == "api" {
			out = append(out, p)
		}
	}
	return out
}

func bestEffortManifest(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: main
    image: %s
    args: ["sleep"]
`, name, testbox)
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestLocalPodLifecycle: `nodekeeper apply` creates an ordinary pod with a
// random UID that runs; a duplicate is refused with exit 2; after an agent
// restart the pod is still there and its container was not restarted;
// `nodekeeper delete pod` stops it within its grace and it is gone, from the
// agent and from containerd.
func TestLocalPodLifecycle(t *testing.T) {
	a := StartAgent(t, Options{})
	a.apply("job.yaml", bestEffortManifest("job"))
	pod := a.WaitPod("job", "running", running)
	if !uuidRE.MatchString(string(pod.UID)) || pod.Annotations["kubernetes.io/config.source"] != "api" ||
		pod.Namespace != "default" || pod.Spec.Priority == nil || *pod.Spec.Priority != 0 || pod.CreationTimestamp.IsZero() {
		t.Errorf("local pod identity: uid %q annotations %v namespace %q priority %v created %v",
			pod.UID, pod.Annotations, pod.Namespace, pod.Spec.Priority, pod.CreationTimestamp)
	}
	path := filepath.Join(a.Dir, "job.yaml")
	if code, out := a.cli("apply", "-f", path, "--socket", a.Socket()); code != 2 || out != "nodekeeper: pod \"default/job\": already exists\n" {
		t.Errorf("duplicate apply: exit %d, %q", code, out)
	}
	ctr := pod.Status.ContainerStatuses[0].ContainerID

	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("agent exit code %d", code)
	}
	a.Start()
	pod = a.WaitPod("job", "running after the restart", running)
	if got := pod.Status.ContainerStatuses[0]; got.ContainerID != ctr || got.RestartCount != 0 {
		t.Errorf("after the restart: container %s restarts %d, want %s and 0", got.ContainerID, got.RestartCount, ctr)
	}

	start := time.Now()
	code, out := a.cli("delete", "pod", "job", "--socket", a.Socket())
	if code != 0 || !strings.HasPrefix(out, `pod "job" deleted`) {
		t.Fatalf("delete: exit %d: %s", code, out)
	}
	// testbox stops on SIGTERM; the grace (3s) bounds it anyway.
	if took := time.Since(start); took > 3*time.Second+5*time.Second {
		t.Errorf("delete took %v, grace 3s", took)
	}
	a.WaitGone("job")
	cs, err := a.CRI().ListContainers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.GetLabels()["io.kubernetes.pod.uid"] == string(pod.UID) {
			t.Errorf("container %s of the deleted pod is still in containerd (%v)", c.GetId(), c.GetState())
		}
	}
	// An unknown pod is a runtime error (exit 1), as kubectl's NotFound.
	if code, out := a.cli("delete", "pod", "job", "--root-dir", a.Root); code != 1 || out != "nodekeeper: pod \"default/job\": not found\n" {
		t.Errorf("second delete: exit %d, %q; want 1", code, out)
	}
}

// TestCriticalStaticPodPreemptsLocalPod: with room for one pod (maxPods 1),
// a static pod (critical) preempts the running BestEffort local pod, whose
// container exits 0 on SIGTERM: the victim ends Succeeded with the
// DisruptionTarget condition (reason TerminationByKubelet, the preemption's
// message), as upstream's CriticalPod specs expect of the kubelet, which
// derives a stopped pod's phase from its containers' exits; the Preempting
// event is recorded, the static pod runs; after an agent restart the victim
// stays Succeeded and is not started again.
func TestCriticalStaticPodPreemptsLocalPod(t *testing.T) {
	a := StartAgent(t, Options{Config: "maxPods: 1\n"})
	a.apply("victim.yaml", bestEffortManifest("victim"))
	a.WaitPod("victim", "running", running)
	a.WriteManifest("crit.yaml", webManifest("crit", "critical"))
	a.WaitPod("crit-e2e", "running", running)
	victim := a.WaitPod("victim", "preempted", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	if victim.Status.Reason != "" || victim.Status.Message != "" {
		t.Errorf("victim status: reason %q message %q, want none (the phase is the containers', not the kill's)", victim.Status.Reason, victim.Status.Message)
	}
	var disrupted bool
	for _, c := range victim.Status.Conditions {
		disrupted = disrupted || (c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue &&
			c.Reason == v1.PodReasonTerminationByKubelet && c.Message == "Pod was preempted by Kubelet to accommodate a critical pod.")
	}
	if !disrupted {
		t.Errorf("victim conditions %+v lack the preemption's DisruptionTarget", victim.Status.Conditions)
	}
	for _, c := range victim.Status.ContainerStatuses {
		if c.State.Running != nil {
			t.Errorf("victim container %s still running", c.Name)
		}
	}
	if log := a.Log(); !strings.Contains(log, "reason=Preempting") || !strings.Contains(log, `object="Pod default/victim"`) {
		t.Errorf("no Preempting event about default/victim in the log")
	}
	a.Eventually("the victim's final status saved", 30*time.Second, func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(a.Root, "local-pods.json"))
		return err == nil && strings.Contains(string(b), `"phase":"Succeeded"`) && strings.Contains(string(b), `"type":"DisruptionTarget"`), string(b)
	})

	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("agent exit code %d", code)
	}
	a.Start()
	a.WaitPod("crit-e2e", "running after the restart", running)
	victim = a.WaitPod("victim", "still preempted after the restart", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded && slices.ContainsFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.DisruptionTarget })
	})
	for _, c := range victim.Status.ContainerStatuses {
		if c.State.Running != nil || c.RestartCount != 0 {
			t.Errorf("victim container %s started again after the restart: %+v", c.Name, c.State)
		}
	}
	if strings.Contains(a.Log(), "requestingPod=default/crit-e2e") {
		t.Errorf("the restarted agent preempted again: the victim was admitted")
	}
}

// TestInitContainerRemovedAfterInit: an init container removed from the
// runtime once its pod's containers run (upstream's "StaticPod ... should be
// ready after init container is removed and kubelet restarts") does not run
// again, before or after the agent's restart; its status reads exited 0
// with the kubelet's message, and the pod stays ready.
func TestInitContainerRemovedAfterInit(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("init.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: withinit
spec:
  terminationGracePeriodSeconds: 3
  initContainers:
  - name: init
    image: %[1]s
    args: ["exit", "0"]
  containers:
  - name: main
    image: %[1]s
    args: ["sleep"]
`, testbox))
	p := a.WaitPod("withinit-e2e", "initialized and running", func(p *v1.Pod) bool {
		return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Terminated != nil &&
			len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	initID := strings.TrimPrefix(p.Status.InitContainerStatuses[0].ContainerID, "containerd://")
	if err := a.CRI().RemoveContainer(t.Context(), initID); err != nil {
		t.Fatalf("remove the init container: %v", err)
	}
	lost := func(p *v1.Pod) bool {
		term := p.Status.InitContainerStatuses[0].State.Terminated
		return term != nil && term.ExitCode == 0 && strings.Contains(term.Message, "Unable to get init container status") &&
			p.Status.ContainerStatuses[0].State.Running != nil && readyIs(true)(p)
	}
	a.WaitPod("withinit-e2e", "the removed init container read as exited 0", lost)
	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("nodekeeper exited %d after SIGTERM, want 0", code)
	}
	a.Start()
	p = a.WaitPod("withinit-e2e", "the removed init container read as exited 0 after the restart", lost)
	if n := p.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("main restarted %d times", n)
	}
	cs, err := a.CRI().ListContainers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.GetMetadata().GetName() == "init" && c.GetLabels()["io.kubernetes.pod.uid"] == string(p.UID) {
			t.Errorf("the init container ran again: %s (%v)", c.GetId(), c.GetState())
		}
	}
}
