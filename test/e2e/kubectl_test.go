package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// pulling reports whether p's only container waits on its image.
func pulling(p *v1.Pod) bool {
	c := p.Status.ContainerStatuses
	return len(c) == 1 && c[0].State.Waiting != nil &&
		(c[0].State.Waiting.Reason == "ErrImagePull" || c[0].State.Waiting.Reason == "ImagePullBackOff")
}

// fields joins each line's fields with one space.
func fields(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return lines
}

// hasLine reports whether a line of lines starts with prefix.
func hasLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// TestKubectlCommands: the built binary's get pods, get pod -o yaml,
// describe pod and events tell, through the socket, why a pod whose image
// cannot be pulled does not run (STATUS, state, the Failed event and its
// error) and show a running pod; an unknown pod is one line and exit 1.
func TestKubectlCommands(t *testing.T) {
	a := StartAgent(t, Options{NoReadOnlyPort: true})
	started := a.processStart()
	t.Logf("the agent's process started %v before it answered", time.Since(started).Round(time.Millisecond))
	a.apply("web.yaml", bestEffortManifest("web"))
	// No registry answers on localhost:1: the pull fails at once.
	a.apply("pull.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: pull}\nspec:\n  containers:\n  - {name: c, image: localhost:1/nope:1}\n")
	a.WaitPod("web", "running", running)
	a.WaitPod("pull", "waiting in ErrImagePull or ImagePullBackOff", pulling)

	root := []string{"--root-dir", a.Root}
	cli := func(args ...string) []string {
		t.Helper()
		code, out := a.cli(append(args, root...)...)
		if code != 0 {
			t.Fatalf("nodekeeper %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return fields(out)
	}

	a.Eventually("get pods shows why pull waits", 30*time.Second, func() (bool, string) {
		lines := cli("get", "pods")
		ok := lines[0] == "NAMESPACE NAME READY STATUS RESTARTS AGE" && hasLine(lines, "default web 1/1 Running 0 ") &&
			(hasLine(lines, "default pull 0/1 ErrImagePull 0 ") || hasLine(lines, "default pull 0/1 ImagePullBackOff 0 "))
		return ok, strings.Join(lines, "\n")
	})

	code, out := a.cli(append([]string{"get", "pod", "pull", "-o", "yaml"}, root...)...)
	var p v1.Pod
	if err := yaml.Unmarshal([]byte(out), &p); err != nil || code != 0 {
		t.Fatalf("get pod pull -o yaml: exit %d, %v:\n%s", code, err, out)
	}
	if p.APIVersion != "v1" || p.Kind != "Pod" || p.Name != "pull" || !pulling(&p) {
		t.Errorf("get pod pull -o yaml:\n%s", out)
	}

	failed := `Failed to pull image "localhost:1/nope:1": `
	a.Eventually("describe pod pull shows the state and the Failed event", 30*time.Second, func() (bool, string) {
		lines := cli("describe", "pod", "pull")
		ok := hasLine(lines, "Name: pull") && hasLine(lines, "Image: localhost:1/nope:1") && hasLine(lines, "State: Waiting") &&
			(hasLine(lines, "Reason: ErrImagePull") || hasLine(lines, "Reason: ImagePullBackOff")) &&
			hasLine(lines, "QoS Class: BestEffort") && strings.Contains(strings.Join(lines, "\n"), "Warning Failed ") &&
			strings.Contains(strings.Join(lines, "\n"), " kubelet "+failed)
		return ok, strings.Join(lines, "\n")
	})
	a.Eventually("events --for pod/pull shows the Failed event", 30*time.Second, func() (bool, string) {
		lines := cli("events", "--for", "pod/pull")
		text := strings.Join(lines, "\n")
		return lines[0] == "LAST SEEN TYPE REASON OBJECT MESSAGE" && strings.Contains(text, " Warning Failed Pod/pull "+failed) &&
			strings.Contains(text, " Normal Pulling Pod/pull Pulling image \"localhost:1/nope:1\"") && !strings.Contains(text, "Pod/web"), text
	})
	lines := cli("describe", "pod", "web")
	if text := strings.Join(lines, "\n"); !hasLine(lines, "State: Running") || !hasLine(lines, "Ready: True") ||
		!strings.Contains(text, "Normal Started ") || !strings.Contains(text, "Started container main") {
		t.Errorf("describe pod web:\n%s", text)
	}
	if lines := cli("events"); !hasLine(lines, "NAMESPACE LAST SEEN TYPE REASON OBJECT MESSAGE") {
		t.Errorf("events:\n%s", strings.Join(lines, "\n"))
	}

	for _, args := range [][]string{{"get", "pod", "nope"}, {"describe", "pod", "nope"}} {
		code, out := a.cli(append(args, root...)...)
		if want := "nodekeeper: pod \"nope\" not found in namespace \"default\" (nodekeeper get pods lists them)\n"; code != 1 || out != want {
			t.Errorf("nodekeeper %s: exit %d, %q; want exit 1, %q", strings.Join(args, " "), code, out, want)
		}
	}

	// get node, first asked seconds after the agent started (after the
	// waits above): each condition dates from the agent's start (none
	// changed), not from this first request; SINCE counts from there. A
	// second of slack each: the agent's start follows its process's by
	// milliseconds, and the times are whole seconds.
	t.Logf("get node first asked %v after the agent's process started", time.Since(started).Round(time.Millisecond))
	elapsed := time.Since(started).Truncate(time.Second) - time.Second
	lines = cli("get", "node")
	conds := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasSuffix(f[0], "Pressure") && f[0] != "Ready" {
			continue
		}
		conds++
		if d, err := time.ParseDuration(f[3]); err != nil || d < elapsed {
			t.Errorf("get node: %s SINCE %q, want at least %v (the agent started before)", f[0], f[3], elapsed)
		}
	}
	if conds != 4 {
		t.Errorf("get node: %d conditions, want 4:\n%s", conds, strings.Join(lines, "\n"))
	}
	node := a.getNode()
	for _, c := range node.Status.Conditions {
		if c.LastTransitionTime.After(started.Add(time.Second)) {
			t.Errorf("/node: %s lastTransitionTime %v, later than the agent's start (%v)", c.Type, c.LastTransitionTime.Time, started)
		}
	}
}

// getNode reads the agent's /node through its socket.
func (a *Agent) getNode() *v1.Node {
	a.t.Helper()
	resp, err := a.Client().Get("http://localhost/node")
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var n v1.Node
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil || resp.StatusCode != http.StatusOK {
		a.t.Fatalf("GET /node: %s, %v", resp.Status, err)
	}
	return &n
}

// processStart is when the agent's current process started, from
// /proc/PID/stat's starttime (clock ticks of 10 ms after boot) and
// /proc/stat's btime, to the tick.
func (a *Agent) processStart() time.Time {
	a.t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.PID()))
	if err != nil {
		a.t.Fatal(err)
	}
	// The fields after the command's closing parenthesis start with the
	// state, field 3; starttime is field 22.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ticks, err := strconv.ParseInt(f[22-3], 10, 64)
	if err != nil {
		a.t.Fatalf("/proc/%d/stat: starttime: %v", a.PID(), err)
	}
	procStat, err := os.ReadFile("/proc/stat")
	if err != nil {
		a.t.Fatal(err)
	}
	for line := range strings.Lines(string(procStat)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			btime, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				a.t.Fatalf("/proc/stat: btime %q: %v", v, err)
			}
			return time.Unix(btime, 0).Add(time.Duration(ticks) * 10 * time.Millisecond)
		}
	}
	a.t.Fatal("/proc/stat: no btime")
	return time.Time{}
}
