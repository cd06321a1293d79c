package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// control POSTs /control/SETTING to the testbox serving on the pod's 8080.
func control(t *testing.T, p *v1.Pod, setting string) {
	t.Helper()
	url := "http://" + net.JoinHostPort(p.Status.PodIP, "8080") + "/control/" + setting
	resp, err := http.Post(url, "text/plain", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

func podCondition(p *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// readyIs reports whether the pod's Ready and ContainersReady conditions and
// its first container's ready field are all want.
func readyIs(want bool) func(*v1.Pod) bool {
	s := v1.ConditionFalse
	if want {
		s = v1.ConditionTrue
	}
	return func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready == want &&
			podCondition(p, v1.PodReady) == s && podCondition(p, v1.ContainersReady) == s
	}
}

func restartedRunning(n int32) func(*v1.Pod) bool {
	return func(p *v1.Pod) bool {
		if len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount >= n && cs.State.Running != nil && cs.Ready
	}
}

// TestProbesLive: HTTP readiness toggling moves Ready and ContainersReady;
// an HTTP liveness failure restarts the container (restart count, events
// Unhealthy and Killing); an exec liveness probe runs in the container
// through containerd; a failing postStart hook kills the container
// (FailedPostStartHook) which is then restarted, a succeeding one does not;
// a removed pod's probes stop.
func TestProbesLive(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("web.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: web
    image: %[1]s
    args: ["serve", "--http", "8080"]
    readinessProbe:
      httpGet: {path: /readyz, port: 8080}
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 1
      failureThreshold: 2
      terminationGracePeriodSeconds: 2
`, testbox))
	a.WriteManifest("exec.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: exec
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: %[1]s
    args: ["serve", "--http", "8080"]
    livenessProbe:
      exec: {command: ["/testbox", "check", "/tmp/fail"]}
      periodSeconds: 1
      timeoutSeconds: 10
      failureThreshold: 1
`, testbox))
	// postStart hooks: one succeeds (the container just runs), one fails
	// (FailedPostStartHook, the container is killed and restarted).
	hooked := func(name string, cmd string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: %s
    args: ["sleep"]
    lifecycle:
      postStart:
        exec: {command: %s}
`, name, testbox, cmd)
	}
	a.WriteManifest("hookok.yaml", hooked("hookok", `["/testbox", "check", "/no/such/file"]`))
	a.WriteManifest("hookfail.yaml", hooked("hookfail", `["/testbox", "exit", "3"]`))
	web := a.WaitPod("web-e2e", "running and ready", running)
	if cs := web.Status.ContainerStatuses[0]; cs.Started == nil || !*cs.Started {
		t.Errorf("started = %v, want true", cs.Started)
	}

	crt := a.CRI()
	id := strings.TrimPrefix(web.Status.ContainerStatuses[0].ContainerID, "containerd://")

	// Readiness follows the probe.
	control(t, web, "readiness=fail")
	a.WaitPod("web-e2e", "not ready after readiness=fail", readyIs(false))
	control(t, web, "readiness=ok")
	a.WaitPod("web-e2e", "ready again after readiness=ok", readyIs(true))

	// A liveness failure restarts the container.
	control(t, web, "liveness=fail")
	web = a.WaitPod("web-e2e", "restarted after liveness=fail", restartedRunning(1))
	if cs := web.Status.ContainerStatuses[0]; cs.ContainerID == "containerd://"+id || cs.LastTerminationState.Terminated == nil {
		t.Errorf("after the liveness restart: container %s, last state %+v", cs.ContainerID, cs.LastTerminationState)
	}
	log := a.Log()
	for _, want := range []string{"reason=Unhealthy", "Liveness probe failed", "reason=Killing", "Container web failed liveness probe, will be restarted"} {
		if !strings.Contains(log, want) {
			t.Errorf("agent log lacks %q", want)
		}
	}

	// The exec probe: creating /tmp/fail in the container fails it.
	ex := a.WaitPod("exec-e2e", "running", running)
	id = strings.TrimPrefix(ex.Status.ContainerStatuses[0].ContainerID, "containerd://")
	// fill writes the file, then holds until killed: the exec's timeout ends it.
	_, _, _ = crt.ExecSync(t.Context(), id, []string{"/testbox", "fill", "/tmp/fail", "1"}, 3*time.Second)
	a.WaitPod("exec-e2e", "restarted after its exec liveness probe failed", restartedRunning(1))

	// The failing postStart hook: event, kill, restart.
	a.WaitPod("hookfail-e2e", "restarted after its postStart hook failed", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	log = a.Log()
	for _, want := range []string{`reason=FailedPostStartHook object="Pod default/hookfail-e2e" message="PostStartHook failed"`, `reason=Killing object="Pod default/hookfail-e2e" message=FailedPostStartHook`} {
		if !strings.Contains(log, want) {
			t.Errorf("agent log lacks %q", want)
		}
	}
	ok := a.WaitPod("hookok-e2e", "running", running)
	if n := ok.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("the succeeding postStart hook's container restarted %d times", n)
	}

	// Probes stop when their pod goes: its probe series leave /metrics.
	if !strings.Contains(metrics(t, a), `pod="web-e2e"`) {
		t.Errorf("/metrics has no probe series of web-e2e while it runs")
	}
	a.RemoveManifest("web.yaml")
	a.WaitGone("web-e2e")
	a.Eventually("web-e2e's probe series gone from /metrics", 30*time.Second, func() (bool, string) {
		m := metrics(t, a)
		return !strings.Contains(m, `pod="web-e2e"`), "still there"
	})
}

// metrics returns the prober's lines of the agent's /metrics.
func metrics(t *testing.T, a *Agent) string {
	t.Helper()
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "prober_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestStartupProbeGates: until the startup probe succeeds the container is
// neither started nor ready and its liveness probe does not run (failing
// liveness does not restart it); once it succeeds, started and ready follow.
func TestStartupProbeGates(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("slow.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: slow
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: %[1]s
    args: ["serve", "--http", "8080"]
    startupProbe:
      httpGet: {path: /startupz, port: 8080}
      initialDelaySeconds: 8
      periodSeconds: 1
      failureThreshold: 120
    readinessProbe:
      httpGet: {path: /readyz, port: 8080}
      periodSeconds: 1
    livenessProbe:
      httpGet: {path: /healthz, port: 8080}
      periodSeconds: 1
      failureThreshold: 1
`, testbox))
	p := a.WaitPod("slow-e2e", "container running", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil && p.Status.PodIP != ""
	})
	// Before the initial delay is over: the startup probe will fail, and so
	// would liveness.
	a.Eventually("testbox answers", 30*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + net.JoinHostPort(p.Status.PodIP, "8080") + "/control")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
	control(t, p, "startup=fail")
	control(t, p, "liveness=fail")
	// Well past the initial delay, with liveness failing every second.
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) {
		p = a.Pod("slow-e2e")
		cs := p.Status.ContainerStatuses[0]
		if cs.RestartCount != 0 || (cs.Started != nil && *cs.Started) || cs.Ready || podCondition(p, v1.PodReady) != v1.ConditionFalse {
			t.Fatalf("before the startup probe succeeded: %s started=%v ready=%v restarts=%d", podSummary(p), cs.Started, cs.Ready, cs.RestartCount)
		}
		time.Sleep(500 * time.Millisecond) // sampling an outside process's state
	}
	control(t, p, "liveness=ok")
	control(t, p, "startup=ok")
	p = a.WaitPod("slow-e2e", "started and ready", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.Started != nil && *cs.Started && readyIs(true)(p)
	})
	if n := p.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("restart count %d, want 0", n)
	}
}

// TestOOMScoreAdjPerQoS reads oom_score_adj of the real container processes:
// BestEffort 1000, Burstable within [2, 999], Guaranteed -997 where the agent
// may lower scores; where it may not (negative scores refused), containerd's
// restrict_oom_score_adj clamps it to the agent's own score, which the agent
// could not lower to -999 either (it warns).
func TestOOMScoreAdjPerQoS(t *testing.T) {
	a := StartAgent(t, Options{})
	pod := func(name, resources string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: %s
    args: ["sleep"]
%s`, name, testbox, resources)
	}
	a.WriteManifest("be.yaml", pod("besteffort", ""))
	a.WriteManifest("bu.yaml", pod("burstable", "    resources: {requests: {memory: 32Mi}}\n"))
	a.WriteManifest("gu.yaml", pod("guaranteed", "    resources: {limits: {cpu: 100m, memory: 64Mi}}\n"))

	a.mu.Lock()
	agentPID := a.cmd.Process.Pid
	a.mu.Unlock()
	agentScore := readInt(t, fmt.Sprintf("/proc/%d/oom_score_adj", agentPID))
	lowered := agentScore == -999
	if !lowered && !strings.Contains(a.Log(), "cannot set the agent's oom_score_adj") {
		t.Errorf("agent oom_score_adj %d, and no warning that -999 was refused", agentScore)
	}
	t.Logf("agent oom_score_adj %d (lowering allowed: %v)", agentScore, lowered)

	score := func(name string) int64 {
		p := a.WaitPod(name+"-e2e", "running", running)
		return readInt(t, fmt.Sprintf("/proc/%d/oom_score_adj", a.ContainerPID(p.Status.ContainerStatuses[0].ContainerID)))
	}
	if got := score("besteffort"); got != 1000 {
		t.Errorf("BestEffort oom_score_adj %d, want 1000", got)
	}
	if got := score("burstable"); got < 2 || got > 999 {
		t.Errorf("Burstable oom_score_adj %d, want within [2, 999]", got)
	}
	want := max(-997, agentScore)
	if got := score("guaranteed"); got != want {
		t.Errorf("Guaranteed oom_score_adj %d, want %d (-997, clamped to the agent's %d where lowering is refused)", got, want, agentScore)
	}
}

// TestProbeStatusAcrossAgentRestart: a container that was started and ready
// when the agent stopped stays so across the agent's restart, as with the
// kubelet ≥ 1.35 (upstream "MirrorPod when kubelet restarts should not change
// container status"): its startup probe, which would now fail, does not run
// again (the container had started), and its readiness stays until the
// readiness probe has a result of its own, which then decides.
func TestProbeStatusAcrossAgentRestart(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("keep.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: keep
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: %[1]s
    args: ["serve", "--http", "8080"]
    startupProbe:
      httpGet: {path: /startupz, port: 8080}
      periodSeconds: 1
      failureThreshold: 100
    readinessProbe:
      httpGet: {path: /readyz, port: 8080}
      periodSeconds: 1
      failureThreshold: 1
`, testbox))
	startedReady := func(p *v1.Pod) bool {
		if len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.State.Running != nil && cs.Started != nil && *cs.Started && cs.Ready
	}
	p := a.WaitPod("keep-e2e", "started and ready", startedReady)
	control(t, p, "startup=fail")
	// The container counts as running from before the agent's start once it
	// started more than the kubelet's 10 s restart grace before it.
	startedAt := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	a.Eventually("the container older than the restart grace", 30*time.Second, func() (bool, string) {
		return time.Since(startedAt) > 11*time.Second, fmt.Sprintf("started %v ago", time.Since(startedAt))
	})
	if code := a.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("nodekeeper exited %d after SIGTERM, want 0", code)
	}
	a.Start()
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		p = a.Pod("keep-e2e")
		if !startedReady(p) || p.Status.ContainerStatuses[0].RestartCount != 0 {
			cs := p.Status.ContainerStatuses
			t.Fatalf("after the agent's restart: %s statuses %+v", podSummary(p), cs)
		}
		time.Sleep(200 * time.Millisecond) // sampling the agent's published status
	}
	control(t, p, "readiness=fail")
	a.WaitPod("keep-e2e", "not ready once its readiness probe fails", readyIs(false))
	if cs := a.Pod("keep-e2e").Status.ContainerStatuses[0]; cs.Started == nil || !*cs.Started {
		t.Errorf("started = %v after readiness failed, want true", cs.Started)
	}
}
