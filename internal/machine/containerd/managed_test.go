package containerd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// state is a test's containerd state dir, with the pause image built in
// images/, a unique bridge name and pod CIDR. Everything is removed at the end.
type state struct {
	dir, images string
	sandbox     containerdtest.Built
	bridge      string
	podCIDR     string
}

func newState(t *testing.T) state {
	t.Helper()
	integration.Require(t, containerdtest.Available())
	dir, err := os.MkdirTemp("/tmp", "nkm-") // short: the socket path
	if err != nil {
		t.Fatal(err)
	}
	s := state{
		dir: dir, images: filepath.Join(dir, "images"),
		bridge:  fmt.Sprintf("nkt%08x", rand.Uint32()),
		podCIDR: fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256)),
	}
	t.Cleanup(func() {
		containerdtest.RemoveState(t, dir, filepath.Join(dir, "containerd.sock"), s.bridge)
	})
	if err := os.MkdirAll(s.images, 0o755); err != nil {
		t.Fatal(err)
	}
	s.sandbox = containerdtest.BuildImage(t, s.images, containerdtest.Image{Ref: containerdtest.SandboxImageRef, Runnable: true})
	return s
}

func (s state) config(t *testing.T) containerd.Config {
	return containerd.Config{
		StateDir: s.dir, SandboxImage: s.sandbox.Ref, PodCIDR: s.podCIDR, CNIBridge: s.bridge,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)), DieWithParent: true,
	}
}

// running is a Managed whose Run runs in a goroutine.
type running struct {
	m      *containerd.Managed
	cri    *cri.Client
	cancel context.CancelFunc
	done   chan error
}

// start runs cfg's containerd and waits until it is ready; stop is
// registered as a cleanup too (a no-op after an explicit stop).
func start(t *testing.T, cfg containerd.Config) *running {
	t.Helper()
	return startWith(t, cfg, nil)
}

// startWith is start with set, when not nil, called on the Managed before Run.
func startWith(t *testing.T, cfg containerd.Config, set func(*containerd.Managed)) *running {
	t.Helper()
	m, err := containerd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	wait(t, m.Ready(), "containerd ready", r.log)
	r.cri, err = cri.New(m.Endpoint(), cri.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.cri.Close() })
	if _, err := r.cri.Version(t.Context(), ""); err != nil {
		t.Fatalf("CRI Version after Ready: %v", err)
	}
	return r
}

// stop ends Run and waits for it to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.done == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its ctx ending")
	}
	r.done = nil
}

func (r *running) log() string {
	b, _ := os.ReadFile(r.m.LogPath())
	return string(b)
}

// wait waits for ch to be readable (or closed), at most 30s.
func wait[T any](t *testing.T, ch <-chan T, what string, log func() string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s\n%s", what, log())
	}
}

// runPod runs a pod sandbox; hostNetwork chooses the node's network namespace.
func runPod(t *testing.T, r *running, dir, name string, hostNetwork bool) string {
	t.Helper()
	netMode := runtimeapi.NamespaceMode_POD
	if hostNetwork {
		netMode = runtimeapi.NamespaceMode_NODE
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: "uid-" + name, Namespace: "default"},
		LogDirectory: filepath.Join(dir, "logs", name),
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: netMode, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
		}},
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := r.cri.RunPodSandbox(t.Context(), cfg, "")
	if err != nil {
		t.Fatalf("run pod %s: %v\n%s", name, err, r.log())
	}
	return id
}

func removePod(t *testing.T, r *running, id string) {
	t.Helper()
	if err := r.cri.StopPodSandbox(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := r.cri.RemovePodSandbox(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}

func sandboxState(t *testing.T, r *running, id string) runtimeapi.PodSandboxState {
	t.Helper()
	st, err := r.cri.PodSandboxStatus(t.Context(), id, false)
	if err != nil {
		t.Fatalf("sandbox %s status: %v", id, err)
	}
	return st.GetStatus().GetState()
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i+2 < len(b) && b[i+2] != 'Z'
}

// TestManagedSupervises: containerd starts (over a stale socket file), is
// restarted when SIGKILLed with a running sandbox still READY, stops on ctx
// end leaving the sandbox's shim running, and a new Managed on the same state
// dir adopts the sandbox.
func TestManagedSupervises(t *testing.T) {
	s := newState(t)
	if err := os.WriteFile(filepath.Join(s.dir, "containerd.sock"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := start(t, s.config(t))
	cfg := r.m.Config()
	t.Logf("snapshotter %s, restrict_oom_score_adj %v, CNI bin dirs %v", cfg.Snapshotter, *cfg.RestrictOOMScoreAdj, cfg.CNIBinDirs)
	if cfg.Snapshotter != containerd.Overlayfs && cfg.Snapshotter != containerd.Native {
		t.Errorf("snapshotter = %q after Ready", cfg.Snapshotter)
	}
	if *cfg.RestrictOOMScoreAdj == containerd.CanLowerOOMScoreAdj() {
		t.Errorf("restrict_oom_score_adj = %v, but this process can lower its score: %v", *cfg.RestrictOOMScoreAdj, containerd.CanLowerOOMScoreAdj())
	}
	if _, err := r.m.ImportDir(t.Context(), s.images); err != nil {
		t.Fatal(err)
	}
	id := runPod(t, r, s.dir, "survivor", true)
	// runc keeps its state in the state dir too, not in /run/containerd.
	if _, err := os.Stat(filepath.Join(s.dir, "runc", containerd.Namespace, id)); err != nil {
		t.Errorf("runc state: %v", err)
	}

	// SIGKILL containerd: restarted after the 1s back-off, the pod still READY.
	first := r.m.PID()
	if first == 0 || r.m.Starts() != 1 {
		t.Fatalf("PID %d, Starts %d; want a PID and 1 start", first, r.m.Starts())
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, r.m.Restarts(), "restart", r.log)
	second := r.m.PID()
	if second == 0 || second == first || r.m.Starts() != 2 {
		t.Errorf("after the restart: PID %d (was %d), Starts %d; want a new PID and 2 starts", second, first, r.m.Starts())
	}
	if _, err := r.cri.Version(t.Context(), ""); err != nil {
		t.Fatalf("CRI after the restart: %v", err)
	}
	if got := sandboxState(t, r, id); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox after the restart: %v, want READY", got)
	}

	// ctx end: containerd gone, the shim (the pod) still running.
	r.stop(t)
	if alive(second) || r.m.PID() != 0 {
		t.Errorf("containerd pid %d alive after Run returned (PID() = %d)", second, r.m.PID())
	}
	shims := containerdtest.ShimPIDs(r.m.Socket())
	if len(shims) == 0 || !alive(shims[0]) {
		t.Fatalf("no live shim after containerd stopped: %v", shims)
	}

	// A new agent on the same state dir adopts the pod.
	r2 := start(t, s.config(t))
	if got := sandboxState(t, r2, id); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("sandbox after the agent restart: %v, want READY", got)
	}
	removePod(t, r2, id)
	r2.stop(t)
}

// TestManagedPodNetwork: a pod without host network gets an IP from the pod
// CIDR through the CNI config Run wrote, and removing it removes the
// masquerade rules the bridge plugin added.
func TestManagedPodNetwork(t *testing.T) {
	s := newState(t)
	for _, bin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if !slices.ContainsFunc(containerd.DefaultCNIBinDirs, func(d string) bool {
			_, err := os.Stat(filepath.Join(d, bin))
			return err == nil
		}) {
			integration.Require(t, fmt.Sprintf("CNI plugin %s not found in %v (Debian package containernetworking-plugins)", bin, containerd.DefaultCNIBinDirs))
		}
	}
	// The bridge plugin turns on IP forwarding as a gateway; put it back.
	const fwd = "/proc/sys/net/ipv4/ip_forward"
	if before, err := os.ReadFile(fwd); err == nil {
		t.Cleanup(func() { _ = os.WriteFile(fwd, before, 0o644) })
	}
	r := start(t, s.config(t))
	if _, err := r.m.ImportDir(t.Context(), s.images); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(r.m.Config().CNIConfDir, containerd.CNIConfigFile))
	if err != nil || !strings.Contains(string(conf), `"bridge": "`+s.bridge+`"`) {
		t.Fatalf("CNI config: %v\n%s", err, conf)
	}

	id := runPod(t, r, s.dir, "networked", false)
	st, err := r.cri.PodSandboxStatus(t.Context(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(st.GetStatus().GetNetwork().GetIp())
	if err != nil || !netip.MustParsePrefix(s.podCIDR).Contains(ip) {
		t.Fatalf("pod IP %q (%v), want one in %s", st.GetStatus().GetNetwork().GetIp(), err, s.podCIDR)
	}
	t.Logf("pod IP %s on bridge %s", ip, s.bridge)
	if _, err := os.Stat(filepath.Join("/sys/class/net", s.bridge)); err != nil {
		t.Errorf("bridge %s: %v", s.bridge, err)
	}
	// host-local keeps its leases in the state dir, not /var/lib/cni.
	if _, err := os.Stat(filepath.Join(s.dir, "cni", "networks", containerd.DefaultNetworkName, ip.String())); err != nil {
		t.Errorf("IPAM lease: %v", err)
	}
	if rules := natRules(t, id); len(rules) == 0 {
		t.Errorf("no nat rule names sandbox %s: is the masquerade missing?", id)
	}

	removePod(t, r, id)
	if rules := natRules(t, id); len(rules) != 0 {
		t.Errorf("nat rules left after the sandbox was removed:\n%s", strings.Join(rules, "\n"))
	}
	if _, err := os.Stat(filepath.Join(s.dir, "cni", "networks", containerd.DefaultNetworkName, ip.String())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("IPAM lease after removal: %v, want it gone", err)
	}
}

// natRules returns the iptables nat rules mentioning id.
func natRules(t *testing.T, id string) []string {
	t.Helper()
	out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -t nat -S: %v: %s", err, out)
	}
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, id) {
			rules = append(rules, l)
		}
	}
	return rules
}

// TestManagedImportDir imports an OCI layout and a docker save archive, and
// reports a corrupt tarball by name while importing the others.
func TestManagedImportDir(t *testing.T) {
	s := newState(t)
	r := start(t, s.config(t))
	extra := filepath.Join(s.dir, "more-images")
	if err := os.MkdirAll(extra, 0o755); err != nil {
		t.Fatal(err)
	}
	oci := containerdtest.BuildImage(t, extra, containerdtest.Image{Ref: "docker.io/nodekeeper/oci:1", Runnable: true})
	docker := containerdtest.BuildImage(t, extra, containerdtest.Image{Ref: "docker.io/nodekeeper/docker:1", Pad: 10, DockerArchive: true})
	bad := filepath.Join(extra, "0-corrupt.tar")
	if err := os.WriteFile(bad, []byte("this is not a tar file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(extra, "README"), []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := r.m.ImportDir(t.Context(), s.images, extra, filepath.Join(s.dir, "missing"))
	if err == nil || !strings.Contains(err.Error(), "import image file "+bad+": ") {
		t.Errorf("error = %v, want one naming %s", err, bad)
	} else {
		t.Logf("error: %v", err)
	}
	want := []containerd.Imported{
		{File: s.sandbox.Path, Ref: s.sandbox.Ref, ID: s.sandbox.ID},
		{File: oci.Path, Ref: oci.Ref, ID: oci.ID},
		{File: docker.Path, Ref: docker.Ref, ID: docker.ID},
	}
	sortImported := cmpopts.SortSlices(func(a, b containerd.Imported) bool { return a.Ref < b.Ref })
	if diff := cmp.Diff(want, got, sortImported); diff != "" {
		t.Errorf("imported (-want +got):\n%s", diff)
	}
	// Importing again (every agent start does) gives the same images.
	again, err := r.m.ImportDir(t.Context(), s.images)
	if diff := cmp.Diff(want[:1], again); err != nil || diff != "" {
		t.Errorf("second import: %v (-want +got):\n%s", err, diff)
	}
	for _, b := range []containerdtest.Built{oci, docker} {
		st, err := r.cri.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: b.Ref}, false)
		if err != nil || st.GetImage().GetId() != b.ID {
			t.Errorf("CRI image %s: %v, %v; want ID %s", b.Ref, err, st.GetImage(), b.ID)
		}
	}
}

// TestManagedImportAgain: an image imported from a file and removed since
// (as image GC does) is imported again from that file, under its full name
// or the short one a pod spec gives; an image no file gave is not (pull it),
// and a file gone since is an error naming it.
func TestManagedImportAgain(t *testing.T) {
	s := newState(t)
	r := start(t, s.config(t))
	extra := filepath.Join(s.dir, "more-images")
	if err := os.MkdirAll(extra, 0o755); err != nil {
		t.Fatal(err)
	}
	img := containerdtest.BuildImage(t, extra, containerdtest.Image{Ref: "docker.io/library/app:latest", Runnable: true})
	if _, err := r.m.ImportDir(t.Context(), extra); err != nil {
		t.Fatal(err)
	}
	listed := func() bool {
		st, err := r.cri.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: img.Ref}, false)
		return err == nil && st.GetImage().GetId() == img.ID
	}
	for _, name := range []string{"docker.io/library/app:latest", "app", "library/app:latest"} {
		if err := r.cri.RemoveImage(t.Context(), &runtimeapi.ImageSpec{Image: img.Ref}); err != nil {
			t.Fatal(err)
		}
		if listed() {
			t.Fatalf("%s still listed after RemoveImage", img.Ref)
		}
		id, ok, err := r.m.ImportAgain(t.Context(), name)
		if !ok || err != nil || id != img.ID {
			t.Errorf("ImportAgain(%q) = %q, %v, %v; want %s, true, nil", name, id, ok, err, img.ID)
		}
		if !listed() {
			t.Errorf("ImportAgain(%q): %s not listed by CRI", name, img.Ref)
		}
	}
	for _, name := range []string{"app:2", "example.com/app:latest", "docker.io/library/other:latest"} {
		if id, ok, err := r.m.ImportAgain(t.Context(), name); ok || err != nil || id != "" {
			t.Errorf("ImportAgain(%q) = %q, %v, %v; want nothing: no file gave it", name, id, ok, err)
		}
	}
	if err := os.Remove(img.Path); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.m.ImportAgain(t.Context(), "app"); !ok || err == nil || !strings.Contains(err.Error(), img.Path) {
		t.Errorf("ImportAgain with its file gone = %v, %v; want an error naming %s", ok, err, img.Path)
	}
}

// agentEnv names the state dir the test binary runs a Managed on when
// TestManagedOutlivesAgent starts it as a stand-in agent.
const agentEnv = "NODEKEEPER_TEST_AGENT_STATE"

func TestMain(m *testing.M) {
	if dir := os.Getenv(agentEnv); dir != "" {
		os.Exit(agentProcess(dir, os.Getenv(agentEnv+"_BRIDGE")))
	}
	os.Exit(m.Run())
}

// agentProcess runs a Managed on dir as the agent does (containerd outlives
// it), prints containerd's PID once ready and waits to be killed.
func agentProcess(dir, bridge string) int {
	m, err := containerd.New(containerd.Config{StateDir: dir, SandboxImage: containerdtest.SandboxImageRef, CNIBridge: bridge})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = m.Run(context.Background()) }()
	<-m.Ready()
	fmt.Printf("pid %d\n", m.PID())
	select {} // until SIGKILL
}

// startAgent runs agentProcess on s in a child process and returns it with
// the PID of its containerd, once that is ready.
func startAgent(t *testing.T, s state) (*exec.Cmd, int) {
	t.Helper()
	agent := exec.Command(os.Args[0])
	agent.Env = append(os.Environ(), agentEnv+"="+s.dir, agentEnv+"_BRIDGE="+s.bridge)
	out, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	// A containerd the agent left is stopped (through its pid file) before
	// the state dir goes (cleanups run last first).
	t.Cleanup(func() {
		if pid, _, err := containerd.StopRecorded(s.dir, 5*time.Second); err != nil || pid != 0 {
			t.Logf("cleanup: stopped the agent's containerd pid %d: %v", pid, err)
		}
	})
	pidc := make(chan int, 1)
	go func() {
		buf := make([]byte, 4096)
		var seen string
		for {
			n, err := out.Read(buf)
			seen += string(buf[:n])
			for _, l := range strings.Split(seen, "\n") {
				var pid int
				if _, err := fmt.Sscanf(l, "pid %d", &pid); err == nil && pid > 0 {
					pidc <- pid
					return
				}
			}
			if err != nil {
				close(pidc)
				return
			}
		}
	}()
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent process did not report containerd's PID within 60s")
	}
	if pid == 0 || !alive(pid) {
		t.Fatalf("containerd pid %d not running", pid)
	}
	return agent, pid
}

// TestManagedOutlivesAgent: a SIGKILLed agent leaves its containerd running
// (its CRI API answers); the next Managed on the same state dir adopts it
// (no new process), restarts it when it dies, and stops it on ctx end; a
// containerd left running with the state dir's config but no pid file (here
// one started by hand) is killed by the next Run, which then starts cleanly.
func TestManagedOutlivesAgent(t *testing.T) {
	s := newState(t)
	agent, pid := startAgent(t, s)
	if err := agent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	if !alive(pid) {
		t.Fatalf("containerd pid %d died with its agent", pid)
	}
	c, err := cri.New("unix://"+filepath.Join(s.dir, "containerd.sock"), cri.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Version(t.Context(), ""); err != nil {
		t.Fatalf("CRI of the containerd whose agent died: %v", err)
	}
	// It runs in a session of its own, not its agent's.
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Errorf("containerd's session %d (%v), want its own (%d)", sid, err, pid)
	}

	r := start(t, s.config(t))
	if got := r.m.PID(); got != pid || r.m.Starts() != 0 {
		t.Fatalf("after the agent's restart: PID %d, Starts %d; want the adopted %d and no start", got, r.m.Starts(), pid)
	}
	// The adopted containerd dies: restarted as a child of ours.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, r.m.Restarts(), "restart", r.log)
	second := r.m.PID()
	if second == 0 || second == pid || r.m.Starts() != 1 {
		t.Errorf("after the adopted containerd died: PID %d (was %d), Starts %d; want a new PID and 1 start", second, pid, r.m.Starts())
	}
	r.stop(t)
	if alive(second) {
		t.Errorf("containerd pid %d alive after Run returned", second)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "containerd.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file after Run returned: %v, want none", err)
	}

	// A containerd started by hand on the same config, not recorded.
	rogue := exec.Command("containerd", "--config", filepath.Join(s.dir, "config.toml"))
	rogue.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := rogue.Start(); err != nil {
		t.Fatal(err)
	}
	rogueDone := make(chan struct{})
	go func() { _ = rogue.Wait(); close(rogueDone) }()
	t.Cleanup(func() { _ = rogue.Process.Kill(); <-rogueDone })

	r = start(t, s.config(t))
	select {
	case <-rogueDone:
	case <-time.After(10 * time.Second):
		t.Errorf("the stale containerd pid %d still runs after Run started", rogue.Process.Pid)
	}
	if r.m.PID() == rogue.Process.Pid || r.m.Starts() != 1 {
		t.Errorf("Managed reports PID %d (the stale one is %d), %d starts; want its own and 1 start", r.m.PID(), rogue.Process.Pid, r.m.Starts())
	}
}

// TestManagedIgnoresForeignPidFile: a pid file naming a process that is not
// the recorded containerd (another start time, another command line, or a
// file that does not parse) is not adopted, and that process is not
// signalled: Run starts its own containerd.
func TestManagedIgnoresForeignPidFile(t *testing.T) {
	s := newState(t)
	other := exec.Command("sleep", "600")
	other.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	otherDone := make(chan struct{})
	go func() { _ = other.Wait(); close(otherDone) }()
	t.Cleanup(func() { _ = other.Process.Kill(); <-otherDone })
	st := procStartTime(t, other.Process.Pid)
	cfgPath := filepath.Join(s.dir, "config.toml")
	for _, tc := range []struct{ name, file string }{
		{"wrong start time", fmt.Sprintf(`{"pid":%d,"startTime":%d,"config":%q}`, other.Process.Pid, st+1, cfgPath)},
		{"not containerd", fmt.Sprintf(`{"pid":%d,"startTime":%d,"config":%q}`, other.Process.Pid, st, cfgPath)},
		{"garbage", fmt.Sprintf("%d\n", other.Process.Pid)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(s.dir, "containerd.pid"), []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			r := start(t, s.config(t))
			if r.m.Starts() != 1 || r.m.PID() == other.Process.Pid {
				t.Errorf("Starts %d, PID %d; want a containerd of its own (the pid file names %d)", r.m.Starts(), r.m.PID(), other.Process.Pid)
			}
			r.stop(t)
			select {
			case <-otherDone:
				t.Fatalf("pid %d, named by the pid file, was killed", other.Process.Pid)
			default:
			}
		})
	}
}

// procStartTime returns field 22 of /proc/pid/stat.
func procStartTime(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var st uint64
	if _, err := fmt.Sscan(f[19], &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestManagedReadyAfterFailedStart: when the first containerd dies before
// answering, Ready is closed by the restarted one (and it is no "restart").
func TestManagedReadyAfterFailedStart(t *testing.T) {
	s := newState(t)
	real, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(s.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(s.dir, "failed-once")
	script := fmt.Sprintf("#!/bin/sh\nif [ ! -e %s ]; then touch %s; exit 1; fi\nexec %s \"$@\"\n", mark, mark, real)
	if err := os.WriteFile(filepath.Join(bin, "containerd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := s.config(t)
	cfg.Binary = filepath.Join(bin, "containerd")
	r := start(t, cfg)
	if got := r.m.Starts(); got != 2 {
		t.Errorf("%d starts, want 2", got)
	}
	select {
	case <-r.m.Restarts():
		t.Error("Restarts signalled for the first ready containerd")
	default:
	}
}

// TestManagedCleansLeftovers: a containerd that lost its record of a running
// sandbox (its metadata is gone, as when it dies before committing it) leaves
// the sandbox's shim and processes running, which containerd itself never
// reaps; the next Run kills them, removes the runc state and the task
// directory, and touches nothing of another containerd.
func TestManagedCleansLeftovers(t *testing.T) {
	s := newState(t)
	r := start(t, s.config(t))
	if _, err := r.m.ImportDir(t.Context(), s.images); err != nil {
		t.Fatal(err)
	}
	id := runPod(t, r, s.dir, "leaked", true)
	shims := containerdtest.ShimPIDs(r.m.Socket())
	if len(shims) != 1 {
		t.Fatalf("shims %v, want one", shims)
	}

	other := newState(t)
	r2 := start(t, other.config(t))
	if _, err := r2.m.ImportDir(t.Context(), other.images); err != nil {
		t.Fatal(err)
	}
	otherID := runPod(t, r2, other.dir, "bystander", true)
	otherShims := containerdtest.ShimPIDs(r2.m.Socket())

	// A container runc created and nobody started: its `runc init` waits on
	// its exec fifo forever, holding its cgroup (as one a containerd killed
	// between creating and starting a task leaves).
	stuck, initPID := runcCreate(t, s.dir, filepath.Join(s.dir, "state", "io.containerd.runtime.v2.task", containerd.Namespace, id, "rootfs"))

	r.stop(t) // the shim keeps running
	if err := os.Remove(filepath.Join(s.dir, "root", "io.containerd.metadata.v1.bolt", "meta.db")); err != nil {
		t.Fatal(err)
	}
	r = start(t, s.config(t))
	for _, pid := range shims {
		if alive(pid) {
			t.Errorf("the leaked shim %d still runs", pid)
		}
	}
	if alive(initPID) {
		t.Errorf("the stuck runc init %d still runs", initPID)
	}
	for _, dir := range []string{
		filepath.Join(s.dir, "state", "io.containerd.runtime.v2.task", containerd.Namespace, id),
		filepath.Join(s.dir, "runc", containerd.Namespace, id),
		filepath.Join(s.dir, "runc", containerd.Namespace, stuck),
	} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it gone", dir, err)
		}
	}
	for _, pid := range otherShims {
		if !alive(pid) {
			t.Errorf("the other containerd's shim %d was killed", pid)
		}
	}
	if got := sandboxState(t, r2, otherID); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("the other containerd's sandbox: %v, want READY", got)
	}
}

// runcCreate creates, with runc on the runc root of the containerd in dir, a
// container (not started) over rootfs, in a cgroup of its own, and returns its
// ID and the pid of its `runc init`. Cleanup deletes it and its cgroup.
func runcCreate(t *testing.T, dir, rootfs string) (string, int) {
	t.Helper()
	id := fmt.Sprintf("stuck-%08x", rand.Uint32())
	bundle := filepath.Join(dir, "bundle-"+id)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	var spec map[string]any
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	cgroup := "/" + id
	spec["process"].(map[string]any)["terminal"] = false
	spec["process"].(map[string]any)["args"] = []string{"/pause"}
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	spec["linux"].(map[string]any)["cgroupsPath"] = cgroup
	if b, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "runc", containerd.Namespace)
	pidFile := filepath.Join(bundle, "pid")
	// Output to a file: runc init keeps runc's stdio open, a pipe would
	// never end.
	out, err := os.Create(filepath.Join(bundle, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	create := exec.Command("runc", "--root", root, "create", "--bundle", bundle, "--pid-file", pidFile, id)
	create.Stdout, create.Stderr = out, out
	if err := create.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("runc create: %v: %s", err, b)
	}
	t.Cleanup(func() {
		_ = exec.Command("runc", "--root", root, "delete", "--force", id).Run()
		hs, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, h := range append(hs, "/sys/fs/cgroup") {
			d := filepath.Join(h, cgroup)
			// A killed runc init may take a moment to leave it: bounded retry.
			for try := 0; syscall.Rmdir(d) == syscall.EBUSY && try < 100; try++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	b, err = os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(pid) {
		t.Fatalf("runc init pid %q (%v) not running", b, err)
	}
	return id, pid
}

// TestManagedReapsStuckInit: a `runc init` of this containerd's runc root
// that waits on its exec fifo (a task created and never started) is killed
// once it has been seen for the stuck time; a fresh one is not.
func TestManagedReapsStuckInit(t *testing.T) {
	s := newState(t)
	r := startWith(t, s.config(t), func(m *containerd.Managed) {
		containerd.SetReapTiming(m, 50*time.Millisecond, 2*time.Second)
	})
	if _, err := r.m.ImportDir(t.Context(), s.images); err != nil {
		t.Fatal(err)
	}
	id := runPod(t, r, s.dir, "host", true)
	// Stamped before runc create: the reaper may first see the runc init
	// at any moment after it exists, before runcCreate returns on a busy
	// machine, so only the time before its creation bounds the stuck time.
	created := time.Now()
	stuck, initPID := runcCreate(t, s.dir, filepath.Join(s.dir, "state", "io.containerd.runtime.v2.task", containerd.Namespace, id, "rootfs"))
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for alive(initPID) {
		if time.Now().After(deadline) {
			t.Fatalf("the stuck runc init %d still runs 30s after it was made", initPID)
		}
		<-tick.C // bounded poll: the process is not our child
	}
	if d := time.Since(created); d < 2*time.Second {
		t.Errorf("the runc init was killed %s after it was made, before the 2s stuck time", d)
	}
	// containerd does not know it: its runc state goes with runc delete.
	for state := filepath.Join(s.dir, "runc", containerd.Namespace, stuck); ; <-tick.C {
		if _, err := os.Stat(state); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runc state %s still there 30s after the runc init was made", state)
		}
	}
	if got := sandboxState(t, r, id); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("the pod's sandbox: %v, want READY (only the stuck init is killed)", got)
	}
}
