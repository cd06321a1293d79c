package node

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/kubebuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

const (
	// nodeName is both agents' --hostname-override: static pods are named
	// MANIFEST-nkbench.
	nodeName = "nkbench"
	// labelPodName is the CRI label both agents put the pod's name in.
	labelPodName = "io.kubernetes.pod.name"
)

// agentNames are the agents compared, in the order they run.
var agentNames = []string{"kubelet", "nodekeeper"}

// agents selects some of agentNames, to measure one alone.
var agents = flag.String("agents", strings.Join(agentNames, ","), "the agents to run, comma-separated")

// agentsToRun is agentNames filtered by -agents.
func agentsToRun() []string {
	var run []string
	for _, name := range agentNames {
		if slices.Contains(strings.Split(*agents, ","), name) {
			run = append(run, name)
		}
	}
	return run
}

// env is what every benchmark shares: the built programs, one containerd
// with the pause and testbox images, and a CRI client of it.
type env struct {
	dir string // short: it holds the containerd socket
	// cgroup is both agents' cgroupRoot (without the leading slash), in
	// every cgroup hierarchy; bridge and podCIDR are the containerd's pod
	// network. All three are the process's own, so two runs can overlap.
	cgroup, bridge, podCIDR string
	kubelet, nodekeeper     string
	endpoint                string
	rt                      *cri.Client
	log                     *slog.Logger
}

// setup builds the kubelet (hack/kube, cached) and nodekeeper, starts a
// containerd with the images, and arranges for all of it, the pods and the
// cgroups to be removed when b ends.
func setup(b *testing.B) *env {
	b.Helper()
	integration.Require(b, containerdtest.Available())
	dir, err := os.MkdirTemp("/tmp", "nkb-")
	if err != nil {
		b.Fatal(err)
	}
	pid := os.Getpid()
	e := &env{
		dir: dir, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		cgroup: fmt.Sprintf("nkbench-%d", pid), bridge: fmt.Sprintf("nkb%x", pid),
		podCIDR: fmt.Sprintf("10.252.%d.0/22", 4*(pid%64)),
	}
	root, err := toolbuild.ModuleDir(".")
	if err != nil {
		b.Fatal(err)
	}
	spec, err := kubebuild.Node()
	if err != nil {
		b.Fatal(err)
	}
	kdir, err := toolbuild.Build(spec)
	if err != nil {
		b.Fatalf("build the kubelet from hack/kube: %v", err)
	}
	e.kubelet = filepath.Join(kdir, "kubelet")
	// The agents' own directories are dir/AGENT: the programs go in dir/bin.
	bin := filepath.Join(dir, "bin")
	e.nodekeeper = filepath.Join(bin, "nodekeeper")
	goBuild(b, root, e.nodekeeper, "./cmd/nodekeeper")
	var images []string
	for name, img := range map[string]func([]byte) ocibuild.Image{"pause": ocibuild.PauseImage, "testbox": ocibuild.TestboxImage} {
		prog := filepath.Join(bin, name)
		goBuild(b, root, prog, "./images/"+name)
		raw, err := os.ReadFile(prog)
		if err != nil {
			b.Fatal(err)
		}
		tar := filepath.Join(dir, name+".tar")
		if _, err := ocibuild.WriteFile(tar, img(raw)); err != nil {
			b.Fatal(err)
		}
		images = append(images, tar)
	}

	state := filepath.Join(dir, "c")
	m, err := containerd.New(containerd.Config{StateDir: state, SandboxImage: ocibuild.PauseRef, PodCIDR: e.podCIDR, CNIBridge: e.bridge, Logger: e.log, DieWithParent: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	// Cleanups run last first: the pods, then containerd, then its state.
	b.Cleanup(func() {
		containerdtest.RemoveState(b, dir, m.Socket(), e.bridge)
		removeCgroups(b, e.cgroup)
	})
	b.Cleanup(func() { cancel(); <-done })
	select {
	case <-m.Ready():
	case err := <-done:
		b.Fatalf("containerd: %v (log %s)", err, m.LogPath())
	case <-time.After(time.Minute):
		b.Fatalf("containerd not ready after 1 min (log %s)", m.LogPath())
	}
	if _, err := m.ImportFiles(b.Context(), images...); err != nil {
		b.Fatal(err)
	}
	e.endpoint = m.Endpoint()
	if e.rt, err = cri.New(e.endpoint, cri.Options{Timeout: 2 * time.Minute}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.clearPods(); err != nil {
			b.Logf("cleanup: %v", err)
		}
		e.rt.Close()
	})
	return e
}

// goBuild builds pkg of the module at root into out, static (CGO_ENABLED=0,
// as make build builds nodekeeper).
func goBuild(b *testing.B, root, out, pkg string) {
	b.Helper()
	cmd := exec.Command(toolbuild.GoTool(), "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if raw, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", pkg, err, raw)
	}
}

// clearPods stops and removes every pod sandbox of the runtime, so the next
// agent starts on an empty node.
func (e *env) clearPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods, err := e.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pods {
		if err := e.rt.StopPodSandbox(ctx, p.Id); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, e.rt.RemovePodSandbox(ctx, p.Id))
	}
	return errors.Join(errs...)
}

// cgroupDirs are the directories name names in each cgroup v1 hierarchy
// and the unified one.
func cgroupDirs(name string) []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var dirs []string
	for _, en := range entries {
		if en.Type()&fs.ModeSymlink != 0 || !en.IsDir() {
			continue // cpu -> cpu,cpuacct and the like: the same hierarchy
		}
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", en.Name(), name))
	}
	return dirs
}

// makeCgroups creates the agents' cgroupRoot in every hierarchy: the kubelet
// requires it to exist.
func makeCgroups(b *testing.B, name string) {
	b.Helper()
	for _, d := range cgroupDirs(name) {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			b.Fatalf("cgroup root: %v", err)
		}
	}
}

// removeCgroups removes the cgroupRoot trees, deepest first. The pods must
// be gone.
func removeCgroups(b *testing.B, name string) {
	for _, d := range cgroupDirs(name) {
		var dirs []string
		_ = filepath.WalkDir(d, func(p string, en fs.DirEntry, err error) error {
			if err == nil && en.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, p := range dirs {
			if err := syscall.Rmdir(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				b.Logf("cleanup: rmdir %s: %v", p, err)
			}
		}
	}
}

// cgroupGuard holds the cgroups of processes the benchmark did not start, to
// catch an agent moving them.
type cgroupGuard map[int][]byte

func snapshotCgroups(b *testing.B) cgroupGuard {
	g := cgroupGuard{}
	for _, pid := range []int{1, os.Getppid(), os.Getpid()} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			b.Fatal(err)
		}
		g[pid] = raw
	}
	return g
}

func (g cgroupGuard) check(b *testing.B, after string) {
	for pid, want := range g {
		got, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err == nil && !bytes.Equal(got, want) {
			b.Fatalf("after %s: process %d was moved to other cgroups:\n%s\nwas:\n%s", after, pid, got, want)
		}
	}
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// agent is one running agent process.
type agent struct {
	name, dir, manifests, logPath string
	cmd                           *exec.Cmd
	done                          chan error
	healthz                       string // the kubelet's healthz URL; "" for nodekeeper
	port                          int    // the kubelet API's port (the kubelet's /metrics)
	socket                        string // nodekeeper's root-only unix socket; "" for the kubelet
}

// configFor writes the configuration both agents get (the node's
// KubeletConfiguration; fields nodekeeper does not read are warnings to it)
// into dir, with extra appended.
func (e *env) configFor(b *testing.B, dir, manifests, extra string) (path, healthz string, port int) {
	hp, port := freePort(b), freePort(b)
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
staticPodPath: %s
podLogsDir: %s
containerRuntimeEndpoint: %s
cgroupRoot: /%s
oomScoreAdj: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
%s`, manifests, filepath.Join(dir, "logs"), e.endpoint, e.cgroup, port, hp, extra)
	if !strings.Contains(extra, "readOnlyPort:") {
		cfg += "readOnlyPort: 0\n"
	}
	if !strings.Contains(extra, "maxPods:") {
		cfg += "maxPods: 250\n"
	}
	path = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	return path, fmt.Sprintf("http://127.0.0.1:%d/healthz", hp), port
}

// start starts the agent name with a fresh root directory and the shared
// configuration (extra appended to it); stopAgent ends it.
func (e *env) start(b *testing.B, name, extra string, args ...string) *agent {
	b.Helper()
	a := &agent{name: name, dir: filepath.Join(e.dir, name), done: make(chan error, 1)}
	if err := os.RemoveAll(a.dir); err != nil {
		b.Fatal(err)
	}
	a.manifests = filepath.Join(a.dir, "manifests")
	if err := os.MkdirAll(a.manifests, 0o755); err != nil {
		b.Fatal(err)
	}
	makeCgroups(b, e.cgroup)
	cfg, healthz, port := e.configFor(b, a.dir, a.manifests, extra)
	a.port = port
	rootDir := filepath.Join(a.dir, "root")
	switch name {
	case "kubelet":
		// Without the three empty cgroup flags the kubelet moves the
		// machine's processes into cgroups of its own.
		a.cmd = exec.Command(e.kubelet, append([]string{"--config", cfg, "--root-dir", rootDir, "--hostname-override", nodeName,
			"--system-cgroups=", "--kubelet-cgroups=", "--runtime-cgroups="}, args...)...)
		a.healthz = healthz
	case "nodekeeper":
		a.cmd = exec.Command(e.nodekeeper, append([]string{"run", "--config", cfg, "--root-dir", rootDir, "--hostname-override", nodeName}, args...)...)
		a.socket = filepath.Join(rootDir, "nodekeeper.sock")
	default:
		b.Fatalf("unknown agent %q", name)
	}
	a.logPath = filepath.Join(a.dir, "agent.log")
	logf, err := os.Create(a.logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	b.Cleanup(func() { a.stop(b) })
	if a.healthz != "" {
		a.waitHealthy(b, time.Minute)
	}
	return a
}

// waitHealthy polls the kubelet's healthz until it answers 200.
func (a *agent) waitHealthy(b *testing.B, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(a.healthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-a.done:
			a.done <- err
			b.Fatalf("%s exited: %v\nlog (tail):\n%s", a.name, err, a.tail(30))
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not healthy after %v: %v\nlog (tail):\n%s", a.name, timeout, err, a.tail(30))
		}
		time.Sleep(100 * time.Millisecond) // polling an outside process
	}
}

func (a *agent) pid() int { return a.cmd.Process.Pid }

// fetch writes what nodekeeper's socket serves at path (a pprof profile) to
// file; a failure is logged.
func (a *agent) fetch(b *testing.B, path, file string) {
	url := "http://localhost" + path
	sock := a.socket
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get(url)
	if err != nil {
		b.Logf("fetch: %v", err)
		return
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("fetch: %s: %d %v", url, resp.StatusCode, err)
		return
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		b.Logf("fetch: %v", err)
	}
}

// tail is the last n lines of the agent's log.
func (a *agent) tail(n int) string {
	raw, _ := os.ReadFile(a.logPath)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// alive fails b if the agent exited.
func (a *agent) alive(b *testing.B) {
	b.Helper()
	select {
	case err := <-a.done:
		a.done <- err
		b.Fatalf("%s exited: %v\nlog (tail):\n%s", a.name, err, a.tail(30))
	default:
	}
}

// stop ends the agent (SIGTERM to its process group, SIGKILL after 30 s);
// a second call does nothing.
func (a *agent) stop(b *testing.B) {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	pgid := a.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case err := <-a.done:
		a.done <- err
	case <-time.After(30 * time.Second):
		b.Logf("%s did not stop in 30 s: killing it", a.name)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		err := <-a.done
		a.done <- err
	}
	a.cmd = nil
}

// place writes content as the manifest file and renames it into the
// manifest directory, returning the time just before the rename: the moment
// the manifest appears to the agent.
func (a *agent) place(b *testing.B, file, content string) time.Time {
	b.Helper()
	tmp := filepath.Join(a.dir, file+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := os.Rename(tmp, filepath.Join(a.manifests, file)); err != nil {
		b.Fatal(err)
	}
	return t0
}

func (a *agent) remove(b *testing.B, file string) {
	b.Helper()
	if err := os.Remove(filepath.Join(a.manifests, file)); err != nil {
		b.Fatal(err)
	}
}

// running lists the runtime's running containers by their pod's name.
func (e *env) running(b *testing.B) map[string]*runtimeapi.Container {
	b.Helper()
	cs, err := e.rt.ListContainers(b.Context(), &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		b.Fatal(err)
	}
	out := make(map[string]*runtimeapi.Container, len(cs))
	for _, c := range cs {
		out[c.Labels[labelPodName]] = c
	}
	return out
}

// waitStarted polls the runtime (every 20 ms) until each pod named in want
// has a running container, and returns when the runtime started each
// (CRI StartedAt) and the containers.
func (e *env) waitStarted(b *testing.B, a *agent, want []string, timeout time.Duration) (map[string]time.Time, map[string]*runtimeapi.Container) {
	b.Helper()
	started := make(map[string]time.Time, len(want))
	ctrs := make(map[string]*runtimeapi.Container, len(want))
	deadline := time.Now().Add(timeout)
	for {
		run := e.running(b)
		for _, name := range want {
			c, ok := run[name]
			if _, seen := started[name]; seen || !ok {
				continue
			}
			st, err := e.rt.ContainerStatus(b.Context(), c.Id, false)
			if err != nil {
				continue // gone again: the next poll tells
			}
			if at := st.GetStatus().GetStartedAt(); at != 0 {
				started[name] = time.Unix(0, at)
				ctrs[name] = c
			}
		}
		if len(started) == len(want) {
			return started, ctrs
		}
		a.alive(b)
		if time.Now().After(deadline) {
			b.Fatalf("%s: after %v, %d of %d pods have a running container\nlog (tail):\n%s",
				a.name, timeout, len(started), len(want), a.tail(30))
		}
		time.Sleep(20 * time.Millisecond) // polling the runtime, an outside process
	}
}

// waitGone polls the runtime until none of the pods named has a running
// container.
func (e *env) waitGone(b *testing.B, a *agent, names []string, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		run := e.running(b)
		left := 0
		for _, n := range names {
			if _, ok := run[n]; ok {
				left++
			}
		}
		if left == 0 {
			return
		}
		a.alive(b)
		if time.Now().After(deadline) {
			b.Fatalf("%s: after %v, %d of %d pods still have a running container\nlog (tail):\n%s",
				a.name, timeout, left, len(names), a.tail(30))
		}
		time.Sleep(50 * time.Millisecond) // polling the runtime, an outside process
	}
}

// usage is the agent's CPU time and RSS at one moment.
func (a *agent) usage(b *testing.B) (time.Duration, int64) {
	b.Helper()
	a.alive(b)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.pid()))
	if err != nil {
		b.Fatal(err)
	}
	cpu, err := StatCPU(string(stat))
	if err != nil {
		b.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.pid()))
	if err != nil {
		b.Fatal(err)
	}
	rss, err := StatusRSS(string(status))
	if err != nil {
		b.Fatal(err)
	}
	return cpu, rss
}

// idle measures the agent over window: its CPU use in percent of one core,
// and its RSS in MiB at the end.
func (a *agent) idle(b *testing.B, window time.Duration) (cpuPct, rssMiB float64) {
	b.Helper()
	cpu0, _ := a.usage(b)
	t0 := time.Now()
	time.Sleep(window) // the measured steady state
	cpu1, rss := a.usage(b)
	return 100 * float64(cpu1-cpu0) / float64(time.Since(t0)), float64(rss) / (1 << 20)
}

func readFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	return string(raw), err
}
