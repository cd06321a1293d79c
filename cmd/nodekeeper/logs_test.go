package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/servers/kubeletserver"
	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

// debugAgent is a fake agent behind the real socket handlers: pods whose
// containers' CRI log files are in a temp dir and a runtime that answers
// their statuses and execs.
type debugAgent struct {
	mu      sync.Mutex
	pods    []*v1.Pod
	running map[string]bool   // container ID: running
	logs    map[string]string // container ID: log path
	// exec answers CRI Exec; nil: an error.
	exec func(*runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	dir  string
}

func (a *debugAgent) Pods() []*v1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods
}

func (a *debugAgent) setRunning(id string, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running[id] = on
}

func (a *debugAgent) setPods(pods ...*v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods = pods
}

func (a *debugAgent) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	path, ok := a.logs[id]
	if !ok {
		return nil, fmt.Errorf("container %q: not found", id)
	}
	st := runtimeapi.ContainerState_CONTAINER_EXITED
	if a.running[id] {
		st = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, State: st, LogPath: path}}, nil
}

func (a *debugAgent) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return nil, errors.New("not in this test")
}

func (a *debugAgent) Exec(_ context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if a.exec == nil {
		return nil, errors.New("no exec in this test")
	}
	return a.exec(r)
}

func (a *debugAgent) Attach(context.Context, *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return nil, errors.New("not in this test")
}

func (a *debugAgent) PortForward(context.Context, *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return nil, errors.New("not in this test")
}

// writeLog writes container id's CRI log file with lines (stdout, full).
func (a *debugAgent) writeLog(t *testing.T, id string, lines ...string) {
	t.Helper()
	var b strings.Builder
	ts := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	for i, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", ts.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), l)
	}
	path := filepath.Join(a.dir, id+".log")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.logs[id] = path
	a.mu.Unlock()
}

// debugPods: web (one container "app", running as c2, restarted from c1),
// multi (containers a and b, init container setup), done (its container
// exited).
func debugPods() []*v1.Pod {
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	return []*v1.Pod{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u-web"},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app"}}},
			Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "app", ContainerID: "containerd://c2", State: running,
				LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ContainerID: "containerd://c1", ExitCode: 1}}}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "multi", UID: "u-multi"},
			Spec: v1.PodSpec{InitContainers: []v1.Container{{Name: "setup"}},
				Containers: []v1.Container{{Name: "a"}, {Name: "b"}}},
			Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{
				{Name: "a", ContainerID: "containerd://ca", State: running},
				{Name: "b", ContainerID: "containerd://cb", State: running},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "done", UID: "u-done"},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "job"}}},
			Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "job", ContainerID: "containerd://cd",
				State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ContainerID: "containerd://cd", Reason: "Completed"}}}}},
		},
	}
}

// newDebugAgent serves a debugAgent on a socket as the agent does (the
// server's Handler with kubeletserver's LocalHandler) and returns it and
// the socket.
func newDebugAgent(t *testing.T) (*debugAgent, string) {
	t.Helper()
	a := &debugAgent{pods: debugPods(), running: map[string]bool{"c2": true, "ca": true, "cb": true}, logs: map[string]string{}, dir: t.TempDir()}
	a.writeLog(t, "c1", "first life", "crashed")
	a.writeLog(t, "c2", "one", "two", "three")
	a.writeLog(t, "ca", "from a")
	a.writeLog(t, "cd", "job done")
	dbg, err := kubeletserver.NewDebugging(kubeletserver.DebuggingDeps{Pods: a.Pods, Runtime: a})
	if err != nil {
		t.Fatal(err)
	}
	_, sock := serveSocket(t, server.Deps{Pods: a.Pods, Debugging: dbg.LocalHandler()})
	return a, sock
}

func TestLogs(t *testing.T) {
	t.Parallel()
	_, sock := newDebugAgent(t)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string
		wantStderr string
	}{
		{"the only container", []string{"web"}, 0, "one\ntwo\nthree\n", ""},
		{"tail", []string{"web", "--tail", "2"}, 0, "two\nthree\n", ""},
		{"timestamps", []string{"web", "--tail=1", "--timestamps"}, 0, "2026-11-28T01:00:02Z three\n", ""},
		{"previous", []string{"web", "-p"}, 0, "first life\ncrashed\n", ""},
		{"named container", []string{"multi", "-c", "a"}, 0, "from a\n", ""},
		{"namespace", []string{"done", "-n", "jobs"}, 0, "job done\n", ""},
		{"no previous instance", []string{"multi", "-c", "a", "--previous"}, 1, "",
			"nodekeeper: previous terminated container \"a\" in pod \"multi\" not found\n"},
		{"container to choose", []string{"multi"}, 1, "",
			"nodekeeper: a container name must be specified for pod multi, choose one of: [a b] or one of the init containers: [setup] (-c)\n"},
		{"unknown container", []string{"web", "-c", "nope"}, 1, "",
			"nodekeeper: container \"nope\" is not valid for pod \"web\": choose one of: [app]\n"},
		{"unknown pod", []string{"nope"}, 1, "",
			"nodekeeper: pod \"nope\" not found in namespace \"default\" (nodekeeper get pods lists the pods)\n"},
		{"pod of another namespace", []string{"web", "-n", "jobs"}, 1, "",
			"nodekeeper: pod \"web\" not found in namespace \"jobs\" (nodekeeper get pods lists the pods)\n"},
		{"bad tail", []string{"web", "--tail", "-2"}, 2, "", "nodekeeper: --tail -2: want a number of lines, or -1 for all\n"},
		{"no pod", []string{}, 2, "", ""},
		{"through a TCP port", []string{"web", "--server", "http://127.0.0.1:10255"}, 2, "",
			"nodekeeper: --server: container logs are served only through the running nodekeeper's unix socket, never through a TCP port: drop --server (see --root-dir and --socket)\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			args := append([]string{"logs", "--socket", sock}, tc.args...)
			code := run(t.Context(), args, &stdout, &stderr)
			if code != tc.wantCode || stdout.String() != tc.wantOut || (tc.wantStderr != "" && stderr.String() != tc.wantStderr) {
				t.Errorf("%v = %d, stdout %q, stderr %q; want %d, %q, %q", args, code, stdout.String(), stderr.String(), tc.wantCode, tc.wantOut, tc.wantStderr)
			}
			if lines := strings.Count(stderr.String(), "\n"); lines > 1 || (tc.wantCode == 0) != (lines == 0) {
				t.Errorf("stderr %q: want one line on failure, none on success", stderr.String())
			}
		})
	}
}

// TestLogsFollowPodDeleted follows a log while the container writes, then
// deletes the pod: the command prints what was written and ends, saying
// why, with exit 1.
func TestLogsFollowPodDeleted(t *testing.T) {
	t.Parallel()
	a, sock := newDebugAgent(t)
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(t.Context(), []string{"logs", "--socket", sock, "web", "-f", "--tail", "1"}, pw, &stderr)
		pw.Close()
	}()
	out := make(chan string)
	go func() {
		b := make([]byte, 1024)
		var got string
		for {
			n, err := pr.Read(b)
			got += string(b[:n])
			if strings.HasSuffix(got, "\n") {
				out <- got
				got = ""
			}
			if err != nil {
				close(out)
				return
			}
		}
	}()
	read := func() string {
		t.Helper()
		select {
		case s := <-out:
			return s
		case <-time.After(30 * time.Second):
			t.Fatal("no output in 30s")
		}
		return ""
	}
	if got := read(); got != "three\n" {
		t.Fatalf("first output = %q, want the tail", got)
	}
	fh, err := os.OpenFile(a.logs["c2"], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(fh, "%s stdout F four\n", time.Now().UTC().Format(time.RFC3339Nano))
	fh.Close()
	if got := read(); got != "four\n" {
		t.Fatalf("followed output = %q, want %q", got, "four\n")
	}
	a.setRunning("c2", false)
	a.setPods(debugPods()[1:]...)
	select {
	case code := <-done:
		// kubectl's exit code (0: the stream ended), with a line saying why.
		if want := "nodekeeper: pod default/web was deleted while its log was followed\n"; code != 0 || stderr.String() != want {
			t.Errorf("exit %d, stderr %q; want 0, %q", code, stderr.String(), want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs -f still running 30s after the pod was deleted")
	}
}

// TestLogsFollowContainerStopped ends a follow with exit 0 when the
// container stopped and its pod is still there.
func TestLogsFollowContainerStopped(t *testing.T) {
	t.Parallel()
	a, sock := newDebugAgent(t)
	a.setRunning("c2", false)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"logs", "--socket", sock, "web", "-f"}, &stdout, &stderr)
	if code != 0 || stdout.String() != "one\ntwo\nthree\n" || stderr.Len() != 0 {
		t.Errorf("logs -f of a stopped container = %d, %q, %q; want 0, its log, nothing on stderr", code, stdout.String(), stderr.String())
	}
}
