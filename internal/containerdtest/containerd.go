package containerdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/cri"
	"github.com/nodekeeper/nodekeeper/internal/integration"
)

// Namespace is the containerd namespace the CRI plugin uses.
const Namespace = "k8s.io"

// SandboxImageRef is the reference of the pause image Start builds and sets
// as the CRI plugin's sandbox_image.
const SandboxImageRef = "docker.io/nodekeeper/pause:test"

// Containerd is a running private containerd.
type Containerd struct {
	// Dir holds the config, root, state, socket and log.
	Dir string
	// Socket is the gRPC socket path; Endpoint is "unix://" + Socket.
	Socket, Endpoint string
	// Root is containerd's root directory.
	Root string
	// CRI is a client for its CRI API, closed at cleanup.
	CRI *cri.Client
	// Sandbox is the pause image, built and imported by Start.
	Sandbox Built
	// RestrictOOMScoreAdj reports whether the config sets restrict_oom_score_adj.
	RestrictOOMScoreAdj bool
	// RuntimeVersion is the version the CRI API reports, e.g. "1.6.20~ds1".
	RuntimeVersion string

	binDir string // Options.BinDir
	images string // directory of built tarballs
	log    string
}

// Options select the containerd StartWith runs.
type Options struct {
	// BinDir, if set, holds the containerd, containerd-shim-runc-v2 and ctr
	// binaries to use (see BuildContainerd); containerd finds the shim there
	// first. If empty, the binaries are looked up in PATH. runc always comes
	// from PATH.
	BinDir string
}

// Available reports why containerd tests cannot run here, or "" if they can.
func Available() string {
	return available("")
}

// available is Available for the binaries in binDir ("": PATH).
func available(binDir string) string {
	if os.Geteuid() != 0 {
		return "containerd tests need root"
	}
	for _, bin := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if binDir != "" {
			if st, err := os.Stat(filepath.Join(binDir, bin)); err != nil || st.Mode()&0o111 == 0 {
				return fmt.Sprintf("%s not found in %s", bin, binDir)
			}
		} else if _, err := exec.LookPath(bin); err != nil {
			return fmt.Sprintf("%s not found in PATH (Debian packages containerd and runc)", bin)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return "runc not found in PATH (Debian package runc)"
	}
	return ""
}

// Start starts the containerd found in PATH for t: StartWith(t, Options{}).
func Start(t testing.TB) *Containerd {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith starts containerd for t, or skips t (fails it when CI=true) if it
// cannot run here. It returns once the CRI API answers and the sandbox image is
// imported. Everything is cleaned up when t ends.
func StartWith(t testing.TB, opts Options) *Containerd {
	t.Helper()
	integration.Require(t, available(opts.BinDir))
	// A short directory: the socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "nkctd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{
		Dir: dir, Socket: filepath.Join(dir, "c.sock"), Root: filepath.Join(dir, "root"),
		images: filepath.Join(dir, "images"), log: filepath.Join(dir, "containerd.log"),
		RestrictOOMScoreAdj: !canLowerOOMScoreAdj(), binDir: opts.BinDir,
	}
	c.Endpoint = "unix://" + c.Socket
	if err := os.MkdirAll(c.images, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cleanup(t) })

	c.Sandbox = BuildImage(t, c.images, Image{Ref: SandboxImageRef, Runnable: true})
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(c.config()), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(c.bin("containerd"), "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if c.binDir != "" {
		// containerd looks the shim up in PATH before its own directory.
		cmd.Env = append(os.Environ(), "PATH="+c.binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { c.stop(t, cmd, exited) }) // runs before c.cleanup (LIFO)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.RuntimeVersion, err = waitReady(ctx, c.Endpoint, exited)
	if err != nil {
		t.Fatalf("containerd did not become ready: %v\n%s", err, c.Log())
	}
	c.CRI, err = cri.New(c.Endpoint, cri.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.removePods(t) }) // runs first: pods go while containerd is up
	c.Import(t, c.Sandbox)
	return c
}

// bin returns the path of the named binary: in Options.BinDir if set, else
// the bare name, looked up in PATH.
func (c *Containerd) bin(name string) string {
	if c.binDir == "" {
		return name
	}
	return filepath.Join(c.binDir, name)
}

// config generates containerd's config (version 2, containerd 1.6 and 1.7).
func (c *Containerd) config() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = %t
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "native"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = %q
  conf_dir = %q
`, c.Root, filepath.Join(c.Dir, "state"), c.Socket, c.Socket+".ttrpc", filepath.Join(c.Dir, "opt"),
		SandboxImageRef, c.RestrictOOMScoreAdj, filepath.Join(c.Dir, "cni", "bin"), filepath.Join(c.Dir, "cni", "conf"))
}

// canLowerOOMScoreAdj reports whether this process may set a lower
// oom_score_adj (a negative one for containers); it restores its own value.
func canLowerOOMScoreAdj() bool {
	const path = "/proc/self/oom_score_adj"
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || cur <= -1000 {
		return false
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(cur-1)), 0o644); err != nil {
		return false
	}
	_ = os.WriteFile(path, []byte(strconv.Itoa(cur)), 0o644)
	return true
}

// waitReady waits until the CRI API answers Version, the process exits or ctx
// ends, and returns the runtime version.
func waitReady(ctx context.Context, endpoint string, exited <-chan error) (string, error) {
	// Short reconnect backoff: the socket appears a few milliseconds after start.
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	type result struct {
		version string
		err     error
	}
	ready := make(chan result, 1)
	go func() {
		v, err := rt.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		ready <- result{v.GetRuntimeVersion(), err}
	}()
	select {
	case r := <-ready:
		return r.version, r.err
	case err := <-exited:
		return "", fmt.Errorf("containerd exited: %v", err)
	}
}

// Log returns containerd's log so far.
func (c *Containerd) Log() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

// Ctr runs ctr (from Options.BinDir if set) against this containerd in the
// k8s.io namespace.
func (c *Containerd) Ctr(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin("ctr"), append([]string{"-a", c.Socket, "-n", Namespace}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// Build builds img into this containerd's image directory (not imported).
func (c *Containerd) Build(t testing.TB, img Image) Built {
	t.Helper()
	return BuildImage(t, c.images, img)
}

// Import imports built images through ctr, unpacked for the native snapshotter,
// and waits until the CRI API lists each of them.
func (c *Containerd) Import(t testing.TB, imgs ...Built) {
	t.Helper()
	for _, b := range imgs {
		c.Ctr(t, "images", "import", "--snapshotter", "native", "--no-unpack=false", b.Path)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, b := range imgs {
		for {
			st, err := c.CRI.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: b.Ref}, false)
			if err == nil && st.GetImage().GetId() == b.ID {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("image %s (%s) not visible through CRI: %v, got %v", b.Ref, b.ID, err, st.GetImage())
			}
			// The CRI plugin learns of imports from containerd events; wait for
			// them with a short, bounded backoff rather than a fixed sleep.
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// PinnedLabel is the image label, with the value "pinned", by which the CRI
// plugin of containerd ≥ 1.7 reports an image as pinned.
const PinnedLabel = "io.cri-containerd.pinned"

// Pin labels the imported image b io.cri-containerd.pinned=pinned with
// ctr and waits until the CRI API reports it pinned; it fails t if that does
// not happen within 30s (containerd 1.6.20 never reports pinned images).
func (c *Containerd) Pin(t testing.TB, b Built) {
	t.Helper()
	c.Ctr(t, "images", "label", b.Ref, PinnedLabel+"=pinned")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		// The CRI plugin learns of the label from an image update event.
		st, err := c.CRI.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: b.Ref}, false)
		if err == nil && st.GetImage().GetId() == b.ID && st.GetImage().GetPinned() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("containerd %s does not report image %s (%s) pinned: %v, got %v", c.RuntimeVersion, b.Ref, b.ID, err, st.GetImage())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Pod is a running host-network pod sandbox.
type Pod struct {
	ID     string
	Config *runtimeapi.PodSandboxConfig
}

// RunPod runs a host-network pod sandbox named name with pod UID uid.
func (c *Containerd) RunPod(t testing.TB, name, uid string) Pod {
	t.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "default"},
		LogDirectory: filepath.Join(c.Dir, "logs", uid),
		Labels:       map[string]string{"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
			},
		},
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := c.CRI.RunPodSandbox(t.Context(), cfg, "")
	if err != nil {
		t.Fatalf("run pod %s: %v\n%s", name, err, c.Log())
	}
	return Pod{ID: id, Config: cfg}
}

// CreateContainer creates (and, with start, starts) a container named name from
// image in pod, running args (nil: the image's command). It carries the pod UID
// and container name labels container GC groups by.
func (c *Containerd) CreateContainer(t testing.TB, pod Pod, name string, attempt uint32, image string, args []string, start bool) string {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Args:     args,
		LogPath:  fmt.Sprintf("%s_%d.log", name, attempt),
		Labels: map[string]string{
			"io.kubernetes.pod.uid":        pod.Config.Metadata.Uid,
			"io.kubernetes.container.name": name,
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
			},
		},
	}
	id, err := c.CRI.CreateContainer(t.Context(), pod.ID, cfg, pod.Config)
	if err != nil {
		t.Fatalf("create container %s: %v\n%s", name, err, c.Log())
	}
	if start {
		if err := c.CRI.StartContainer(t.Context(), id); err != nil {
			t.Fatalf("start container %s: %v\n%s", name, err, c.Log())
		}
	}
	return id
}

// WaitExited waits until the container is no longer running.
func (c *Containerd) WaitExited(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		st, err := c.CRI.ContainerStatus(ctx, id, false)
		if err == nil && st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("container %s did not exit: %v, state %v", id, err, st.GetStatus().GetState())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// removePods stops and removes every sandbox, so the shims exit cleanly.
func (c *Containerd) removePods(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sbs, err := c.CRI.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Logf("cleanup: list sandboxes: %v", err)
		return
	}
	for _, sb := range sbs {
		if err := c.CRI.StopPodSandbox(ctx, sb.Id); err != nil {
			t.Logf("cleanup: stop sandbox %s: %v", sb.Id, err)
		}
		if err := c.CRI.RemovePodSandbox(ctx, sb.Id); err != nil {
			t.Logf("cleanup: remove sandbox %s: %v", sb.Id, err)
		}
	}
	_ = c.CRI.Close()
}

// stop terminates containerd: SIGTERM, then SIGKILL after 10s.
func (c *Containerd) stop(t testing.TB, cmd *exec.Cmd, exited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Logf("cleanup: containerd ignored SIGTERM; killing pid %d", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// cleanup kills the shims that served this containerd, unmounts what is left
// under Dir and removes it.
func (c *Containerd) cleanup(t testing.TB) {
	for _, pid := range shimPIDs(c.Socket) {
		t.Logf("cleanup: killing leftover shim pid %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, m := range mountsUnder(c.Dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
	if t.Failed() {
		t.Logf("containerd log:\n%s", c.Log())
	}
}

// shimPIDs returns the PIDs of containerd-shim processes started with
// -address socket (this containerd's shims and no other's).
func shimPIDs(socket string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// mountsUnder lists mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
