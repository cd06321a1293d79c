package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// cliSplit runs `nodekeeper ARGS --root-dir ROOT` against the agent and returns
// its stdout, stderr and exit code.
func (a *Agent) cliSplit(args ...string) (string, string, int) {
	a.t.Helper()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(a.t.Context(), a.art.bin, append(args[:1:1], append([]string{"--root-dir", a.Root}, args[1:]...)...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		a.t.Fatalf("nodekeeper %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// oneLine fails the test unless s is one line of an error starting with
// "nodekeeper: " and containing want.
func oneLine(t *testing.T, what, s, want string) {
	t.Helper()
	if !strings.HasPrefix(s, "nodekeeper: ") || strings.Count(s, "\n") != 1 || !strings.Contains(s, want) {
		t.Errorf("%s: stderr %q, want one line \"nodekeeper: ...%s...\"", what, s, want)
	}
}

// TestLogsAndExec reads container logs and runs commands in containers
// through the agent's socket, as a user of nodekeeper logs and exec does:
// a log while it is written (-f), its tail, the previous instance's after
// a restart; exec's output and exit code; and the refusals, each one line.
func TestLogsAndExec(t *testing.T) {
	a := StartAgent(t, Options{NoReadOnlyPort: true})
	a.WriteManifest("talk.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: talk
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: %s
    args: ["print", "--every", "1s", "--count", "6", "line"]
`, testbox))
	a.WriteManifest("crash.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: crash
spec:
  containers:
  - name: app
    image: %s
    args: ["env"]
    env: [{name: GREETING, value: hello}]
`, testbox))
	a.WriteManifest("box.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: box
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: %s
    args: ["sleep"]
    env: [{name: BOX, value: "1"}]
  - name: side
    image: %s
    args: ["sleep"]
`, testbox, testbox))

	// -f while the container writes: every line, then the end (exit 0)
	// once it stopped.
	a.WaitPod("talk-e2e", "started", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && (p.Status.ContainerStatuses[0].State.Running != nil || p.Status.ContainerStatuses[0].State.Terminated != nil)
	})
	follow := exec.CommandContext(t.Context(), a.art.bin, "logs", "--root-dir", a.Root, "talk-e2e", "-f")
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var followErr strings.Builder
	follow.Stderr = &followErr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	if err := follow.Wait(); err != nil {
		t.Errorf("logs -f: %v (stderr %q), want exit 0 once the container stopped", err, followErr.String())
	}
	if got, want := strings.Join(lines, ","), "line 1,line 2,line 3,line 4,line 5,line 6"; got != want {
		t.Errorf("logs -f printed %q, want %q", got, want)
	}
	if stdout, stderr, code := a.cliSplit("logs", "talk-e2e", "--tail", "2"); code != 0 || stdout != "line 5\nline 6\n" {
		t.Errorf("logs --tail 2 = %d, %q (stderr %q), want 0, the last two lines", code, stdout, stderr)
	}
	if stdout, _, code := a.cliSplit("logs", "talk-e2e", "--tail", "1", "--timestamps"); code != 0 || !strings.HasSuffix(stdout, "Z line 6\n") || !strings.HasPrefix(stdout, "20") {
		t.Errorf("logs --timestamps = %d, %q, want 0, the line after its RFC 3339 time", code, stdout)
	}
	_, stderr, code := a.cliSplit("logs", "talk-e2e", "--previous")
	if code != 1 {
		t.Errorf("logs --previous of a container never restarted: exit %d, want 1", code)
	}
	oneLine(t, "logs --previous without a previous instance", stderr, `previous terminated container "app" in pod "talk-e2e" not found`)

	// --previous after a restart: the instance before.
	a.WaitPod("crash-e2e", "restarted", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	if stdout, stderr, code := a.cliSplit("logs", "crash-e2e", "--previous"); code != 0 || !strings.Contains(stdout, "GREETING=hello\n") {
		t.Errorf("logs --previous = %d, %q (stderr %q), want 0, the previous instance's environment", code, stdout, stderr)
	}

	// exec: output and exit code.
	a.WaitPod("box-e2e", "running", running)
	if stdout, stderr, code := a.cliSplit("exec", "box-e2e", "-c", "app", "--", "/testbox", "env"); code != 0 || !strings.Contains(stdout, "BOX=1\n") {
		t.Errorf("exec testbox env = %d, %q (stderr %q), want 0 and the container's environment", code, stdout, stderr)
	}
	if _, stderr, code := a.cliSplit("exec", "box-e2e", "-c", "app", "--", "/testbox", "exit", "3"); code != 3 || stderr != "" {
		t.Errorf("exec testbox exit 3 = %d (stderr %q), want 3 and nothing said", code, stderr)
	}
	// A command the container does not have: the runtime's error, one line.
	_, stderr, code = a.cliSplit("exec", "box-e2e", "-c", "app", "--", "/no/such/command")
	t.Logf("exec of a missing command: exit %d, stderr %q", code, stderr)
	if code == 0 || strings.Count(stderr, "\n") > 1 {
		t.Errorf("exec of a missing command: exit %d, stderr %q; want a failure in at most one line", code, stderr)
	}
	_, stderr, code = a.cliSplit("exec", "box-e2e", "--", "/testbox", "env")
	if code != 1 {
		t.Errorf("exec into a two-container pod without -c: exit %d, want 1", code)
	}
	oneLine(t, "exec without -c", stderr, "a container name must be specified for pod box-e2e, choose one of: [app side]")
	_, stderr, code = a.cliSplit("exec", "talk-e2e", "--", "/testbox", "env")
	if code != 1 {
		t.Errorf("exec into a stopped container: exit %d, want 1", code)
	}
	oneLine(t, "exec into a stopped container", stderr, `container "app" of pod default/talk-e2e is not running`)
	_, stderr, code = a.cliSplit("exec", "nope", "--", "/testbox", "env")
	if code != 1 {
		t.Errorf("exec into an unknown pod: exit %d, want 1", code)
	}
	oneLine(t, "exec into an unknown pod", stderr, `pod "nope" not found in namespace "default"`)
	_, stderr, code = a.cliSplit("logs", "nope")
	if code != 1 {
		t.Errorf("logs of an unknown pod: exit %d, want 1", code)
	}
	oneLine(t, "logs of an unknown pod", stderr, `pod "nope" not found in namespace "default"`)
	for _, args := range [][]string{{"logs", "box-e2e", "-c", "nope"}, {"exec", "box-e2e", "-c", "nope", "--", "/testbox", "env"}} {
		_, stderr, code = a.cliSplit(args...)
		if code != 1 {
			t.Errorf("%s of an unknown container: exit %d, want 1", args[0], code)
		}
		oneLine(t, args[0]+" of an unknown container", stderr, `container "nope" is not valid for pod "box-e2e": choose one of: [app side]`)
	}
	if _, stderr, code := a.cliSplit("exec", "box-e2e", "-c", "app"); code != 2 || !strings.Contains(stderr, "exec needs a command") {
		t.Errorf("exec without a command = %d (stderr %q), want 2, the usage", code, stderr)
	}

	// logs -f of a pod deleted meanwhile: it ends with exit 0, as kubectl's,
	// and, when the pod was gone by then, one line saying so.
	follow = exec.CommandContext(t.Context(), a.art.bin, "logs", "--root-dir", a.Root, "box-e2e", "-c", "app", "-f")
	var followOut strings.Builder
	followErr.Reset()
	follow.Stdout, follow.Stderr = &followOut, &followErr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	a.RemoveManifest("box.yaml")
	ended := make(chan error, 1)
	go func() { ended <- follow.Wait() }()
	select {
	case err := <-ended:
		t.Logf("logs -f of a deleted pod ended: %v, stderr %q", err, followErr.String())
		switch {
		case err == nil && followErr.Len() == 0: // the container stopped before its pod went
		case err == nil:
			oneLine(t, "logs -f of a deleted pod", followErr.String(), "pod default/box-e2e was deleted while its log was followed")
		default:
			t.Errorf("logs -f of a deleted pod: %v (stderr %q), want exit 0", err, followErr.String())
		}
	case <-time.After(slow(t, 2*time.Minute)):
		t.Fatalf("logs -f still running 2 minutes after its pod's manifest was removed")
	}
}
