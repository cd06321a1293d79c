// Package e2e runs `nodekeeper run` for real: the binary, the images it
// imports, the containerd it starts, CNI networking, pod cgroups under a root
// of the test's own, all on temporary directories, and checks what the pods
// do through the agent's HTTP endpoints, CRI and /proc.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/daemon"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/syncbuf"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// artifacts are the binary and images every test's agent uses, built once
// per test binary, or taken from $NODEKEEPER_E2E_BIN and
// $NODEKEEPER_E2E_IMAGES when both are set (make test-cgroup2 builds them on
// the host: compiling inside its VM takes 10-20 times as long).
type artifacts struct {
	bin    string // the nodekeeper binary
	images string // pause.tar and testbox.tar
}

var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nke-build-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var build = sync.OnceValues(func() (artifacts, error) {
	if bin, images := os.Getenv("NODEKEEPER_E2E_BIN"), os.Getenv("NODEKEEPER_E2E_IMAGES"); bin != "" && images != "" {
		return artifacts{bin: bin, images: images}, nil
	}
	a := artifacts{bin: filepath.Join(buildDir, "nodekeeper"), images: filepath.Join(buildDir, "images")}
	for _, args := range [][]string{
		{"build", "-o", a.bin, "github.com/nodekeeper/nodekeeper/cmd/nodekeeper"},
		{"run", "github.com/nodekeeper/nodekeeper/images/mkimage", "-o", a.images},
	} {
		cmd := exec.Command(toolbuild.GoTool(), args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build
		if out, err := cmd.CombinedOutput(); err != nil {
			return a, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return a, nil
})

// available reports why the agent cannot run here, or "".
func available() string {
	if why := containerdtest.Available(); why != "" {
		return why
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			return "CNI plugins not found in /usr/lib/cni (Debian package containernetworking-plugins)"
		}
	}
	return ""
}

// Agent is a `nodekeeper run` of one test.
type Agent struct {
	t testing.TB
	// Dir holds everything: Root (the state dir), Manifests, Logs and the config.
	Dir, Root, Manifests, Logs, ConfigPath string
	// CgroupRoot is the agent's cgroupRoot; PodCIDR its pod network.
	CgroupRoot, PodCIDR string
	// URL is the agent's read-only port's base, "http://127.0.0.1:PORT",
	// set explicitly as the kubelet's node e2e harness sets it; "" with
	// Options.NoReadOnlyPort. Everything else, pod changes and /configz
	// included, goes through the root-only socket (Socket).
	URL string

	art    artifacts
	args   []string
	mu     sync.Mutex // guards cmd, exited and stderr's switch between runs
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *syncbuf.Buffer
}

// Options change an agent's configuration.
type Options struct {
	// Config is appended to the KubeletConfiguration the harness writes.
	Config string
	// Prepare, when set, runs after the agent's directories are chosen and
	// before its config is written and it starts (e.g. to mount a
	// filesystem of the test's own at Root); its cleanups run after the
	// agent's.
	Prepare func(a *Agent)
	// Args are further `nodekeeper run` flags (e.g. --kubeconfig).
	Args []string
	// NoReadOnlyPort leaves readOnlyPort out of the configuration: the
	// default, no TCP port but the ones the test sets.
	NoReadOnlyPort bool
}

// StartAgent starts `nodekeeper run` for t on its own directories and waits
// until its HTTP endpoints answer. Cleanup removes the pods, stops the agent
// and removes everything it made.
func StartAgent(t testing.TB, opts Options) *Agent {
	t.Helper()
	integration.Require(t, available())
	art, err := build()
	if err != nil {
		t.Fatal(err)
	}
	// A short directory: containerd's socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "nke-")
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{
		t: t, art: art, Dir: dir, Root: filepath.Join(dir, "root"), Manifests: filepath.Join(dir, "manifests"),
		Logs: filepath.Join(dir, "logs"), ConfigPath: filepath.Join(dir, "config.yaml"),
		CgroupRoot: fmt.Sprintf("/nke-%08x", rand.Uint32()),
		PodCIDR:    fmt.Sprintf("10.%d.%d.0/24", 150+rand.IntN(40), rand.IntN(256)),
	}
	if err := os.MkdirAll(a.Manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	if opts.Prepare != nil {
		opts.Prepare(a)
	}
	readOnly := ""
	if !opts.NoReadOnlyPort {
		port := freePort(t)
		a.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
		readOnly = fmt.Sprintf("readOnlyPort: %d\n", port)
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
staticPodPath: %s
podLogsDir: %s
cgroupRoot: %s
podCIDR: %s
%shealthzPort: 0
fileCheckFrequency: 2s
%s%s`, a.Manifests, a.Logs, a.CgroupRoot, a.PodCIDR, readOnly, integration.HostDiskNeutral(opts.Config), opts.Config)
	if err := os.WriteFile(a.ConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	a.args = []string{"run", "--config", a.ConfigPath, "--root-dir", a.Root, "--image-dir", art.images,
		"--hostname-override", "e2e", "--status-interval", "0", "--v", "4"}
	a.args = append(a.args, opts.Args...)
	t.Cleanup(a.cleanup)
	a.Start()
	return a
}

// slow is integration.Slow: d scaled for the cgroup v2 lane's emulated VM.
func slow(t testing.TB, d time.Duration) time.Duration { return integration.Slow(t, d) }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Socket is the agent's root-only unix socket, ROOT/nodekeeper.sock.
func (a *Agent) Socket() string { return filepath.Join(a.Root, "nodekeeper.sock") }

// Client returns an HTTP client whose every request goes to the agent's
// socket; give it URLs of the form "http://localhost/PATH".
func (a *Agent) Client() *http.Client {
	sock := a.Socket()
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// Start starts the agent process (again) and waits until /healthz answers ok
// on its socket.
func (a *Agent) Start() {
	a.t.Helper()
	a.mu.Lock()
	cmd := exec.Command(a.art.bin, a.args...)
	buf := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		a.mu.Unlock()
		a.t.Fatalf("start nodekeeper: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	a.cmd, a.exited, a.stderr = cmd, exited, buf
	a.mu.Unlock()
	a.Eventually("the agent's /healthz answers ok", 90*time.Second, func() (bool, string) {
		select {
		case <-exited:
			a.t.Fatalf("nodekeeper exited at start (%v):\n%s", cmd.ProcessState, buf.String())
		default:
		}
		resp, err := a.Client().Get("http://localhost/healthz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// Stop sends sig to the agent, waits until it exits and returns its exit
// code (-1 when a signal ended it).
func (a *Agent) Stop(sig syscall.Signal) int {
	a.t.Helper()
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	if cmd == nil {
		return -1
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(slow(a.t, 90*time.Second)):
		_ = cmd.Process.Kill()
		<-exited
		a.t.Errorf("nodekeeper did not exit within %v of %v", slow(a.t, 90*time.Second), sig)
	}
	a.mu.Lock()
	a.cmd = nil
	a.mu.Unlock()
	return cmd.ProcessState.ExitCode()
}

// Log returns what the agent's current (or last) run logged.
func (a *Agent) Log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stderr == nil {
		return ""
	}
	return a.stderr.String()
}

// WriteManifest writes a static pod manifest (atomically: written aside, then
// renamed in).
func (a *Agent) WriteManifest(name, content string) {
	a.t.Helper()
	tmp := filepath.Join(a.Dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(a.Manifests, name)); err != nil {
		a.t.Fatal(err)
	}
}

// RemoveManifest removes a static pod manifest.
func (a *Agent) RemoveManifest(name string) {
	a.t.Helper()
	if err := os.Remove(filepath.Join(a.Manifests, name)); err != nil {
		a.t.Fatal(err)
	}
}

// Pods returns the agent's pods from GET /pods on its socket.
func (a *Agent) Pods() ([]v1.Pod, error) {
	resp, err := a.Client().Get("http://localhost/pods")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /pods: %s", resp.Status)
	}
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Pod returns the pod named name (the static pod's full name), or nil.
func (a *Agent) Pod(name string) *v1.Pod {
	a.t.Helper()
	pods, err := a.Pods()
	if err != nil {
		a.t.Fatalf("list pods: %v", err)
	}
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

// WaitPod waits until the pod named name exists and cond holds for it, and
// returns it; what describes cond in the failure.
func (a *Agent) WaitPod(name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	a.t.Helper()
	var got *v1.Pod
	a.Eventually(fmt.Sprintf("pod %s: %s", name, what), 90*time.Second, func() (bool, string) {
		got = a.Pod(name)
		if got == nil {
			return false, "no such pod"
		}
		return cond(got), podSummary(got)
	})
	return got
}

// WaitGone waits until no pod is named name.
func (a *Agent) WaitGone(name string) {
	a.t.Helper()
	a.Eventually("pod "+name+" gone", 90*time.Second, func() (bool, string) {
		p := a.Pod(name)
		if p == nil {
			return true, ""
		}
		return false, podSummary(p)
	})
}

// Eventually polls check every 100ms until it reports true, failing the test
// with check's last note after timeout (times $NODEKEEPER_E2E_SLOW, see
// slow). The timeout bounds a wait for real processes; it is generous so that
// a busy machine does not fail the test.
func (a *Agent) Eventually(what string, timeout time.Duration, check func() (bool, string)) {
	a.t.Helper()
	timeout = slow(a.t, timeout)
	deadline := time.Now().Add(timeout)
	for {
		ok, note := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("timed out after %v waiting for %s; last: %s\nagent log (tail):\n%s", timeout, what, note, tail(a.Log(), 40))
		}
		time.Sleep(100 * time.Millisecond) // polling an outside process's state, not a goroutine of ours
	}
}

// CRI returns a CRI client for the agent's containerd.
func (a *Agent) CRI() *cri.Client {
	a.t.Helper()
	c, err := cri.New("unix://"+a.socket(), cri.Options{Timeout: slow(a.t, 30*time.Second)})
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (a *Agent) socket() string { return filepath.Join(a.Root, "containerd", "containerd.sock") }

// ContainerPID returns the host PID of the container's process, from
// containerd's verbose status.
func (a *Agent) ContainerPID(containerID string) int {
	a.t.Helper()
	id := strings.TrimPrefix(containerID, "containerd://")
	st, err := a.CRI().ContainerStatus(a.t.Context(), id, true)
	if err != nil {
		a.t.Fatalf("container status %s: %v", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		a.t.Fatalf("container %s: no pid in verbose status (%v): %v", id, err, st.GetInfo())
	}
	return info.Pid
}

// cleanup removes every pod through the agent (so it stops them as it would),
// stops the agent and removes what is left: shims, mounts, the bridge, the
// cgroups and the directory.
func (a *Agent) cleanup() {
	t := a.t
	if t.Failed() {
		t.Logf("containerd log, its end:\n%s", tailFile(filepath.Join(a.Root, "containerd", "containerd.log"), 40))
		t.Logf("agent log:\n%s", a.Log())
	}
	a.mu.Lock()
	running := a.cmd != nil
	a.mu.Unlock()
	if running {
		entries, _ := os.ReadDir(a.Manifests)
		for _, e := range entries {
			_ = os.Remove(filepath.Join(a.Manifests, e.Name()))
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			pods, err := a.Pods()
			if err != nil || len(pods) == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	removeSandboxes(t, a.socket())
	if running {
		a.Stop(syscall.SIGTERM)
	}
	// A killed agent leaves its containerd running (the next one adopts it).
	if pid, _, err := daemon.StopRuntime(a.Root, 10*time.Second); err != nil || pid != 0 {
		t.Logf("cleanup: stopped the containerd the agent left, pid %d: %v", pid, err)
	}
	containerdtest.RemoveState(t, a.Dir, a.socket(), daemon.BridgeName(a.Root))
	removeCgroups(t, a.CgroupRoot)
}

// removeSandboxes stops and removes, through the runtime at socket, the
// sandboxes an agent left: those a stopped or killed agent kept running (its
// containerd keeps them for the next agent), or those whose removal the
// cleanup's deadline cut short. So CNI releases their addresses and
// containerd removes their network namespaces, which killed shims would leave
// in /run/netns. Nothing to do when that containerd is not running.
func removeSandboxes(t testing.TB, socket string) {
	if _, err := os.Stat(socket); err != nil {
		return
	}
	c, err := cri.New("unix://"+socket, cri.Options{Timeout: slow(t, 30*time.Second)})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), slow(t, 60*time.Second))
	defer cancel()
	containerdtest.RemoveSandboxes(ctx, t, c)
}

// removeCgroups removes the cgroup tree root in every hierarchy, deepest first.
func removeCgroups(t testing.TB, root string) {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	hierarchies = append(hierarchies, "/sys/fs/cgroup")
	for _, h := range hierarchies {
		top := filepath.Join(h, root)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil {
				t.Logf("cleanup: remove cgroup %s: %v", dirs[i], err)
			}
		}
	}
}

// podSummary is a one-line view of a pod's status for failure messages.
func podSummary(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ip=%s", p.Status.Phase, p.Status.PodIP)
	for _, c := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses) {
		fmt.Fprintf(&b, " %s(restarts=%d ready=%t", c.Name, c.RestartCount, c.Ready)
		switch {
		case c.State.Waiting != nil:
			fmt.Fprintf(&b, " waiting=%s %q", c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Running != nil:
			b.WriteString(" running")
		case c.State.Terminated != nil:
			fmt.Fprintf(&b, " terminated=%d %s", c.State.Terminated.ExitCode, c.State.Terminated.Reason)
		}
		b.WriteString(")")
	}
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailFile returns the last n lines of the file at path, read from its last
// 64 KiB, or why it could not be read.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	const most = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > most {
		if _, err := f.Seek(fi.Size()-most, io.SeekStart); err != nil {
			return err.Error()
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, most))
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
}
