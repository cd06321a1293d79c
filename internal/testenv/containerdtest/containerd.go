package containerdtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// Namespace is the containerd namespace the CRI plugin uses.
const Namespace = containerd.Namespace

// SandboxImageRef is the reference of the pause image Start builds and sets
// as the CRI plugin's sandbox_image.
const SandboxImageRef = "docker.io/nodekeeper/pause:test"

// slowTimeout bounds containerd's start and each CRI call. A sandbox starts
// in under a second on the host but takes about 50 s in the cgroup v2 lane's
// emulated VM on a busy machine (make test-cgroup2): a limit only a hung
// containerd reaches.
const slowTimeout = 3 * time.Minute

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
	// Managed supervises the containerd process (internal/machine/containerd).
	Managed *containerd.Managed
	// Bridge and PodCIDR are this containerd's CNI pod network, unique per
	// Start: the bridge is made when a pod without host network runs, and
	// deleted at cleanup.
	Bridge, PodCIDR string

	binDir string // Options.BinDir
	images string // directory of built tarballs
	log    string // containerd's output
}

// Options select the containerd StartWith runs.
type Options struct {
	// BinDir, if set, holds the containerd, containerd-shim-runc-v2 and ctr
	// binaries to use (see BuildContainerd); containerd finds the shim there
	// first. If empty, the binaries are looked up in PATH. runc always comes
	// from PATH.
	BinDir string
	// SystemdCgroup runs runc with its systemd cgroup driver
	// (containerd.Config.SystemdCgroup): sandboxes then need a slice for
	// cgroupParent, and systemd as the init system.
	SystemdCgroup bool
	// CDISpecDirs turns on CDI with these spec directories
	// (containerd.Config.CDISpecDirs; containerd 1.7, see BuildContainerd).
	CDISpecDirs []string
	// RegistryMirrors is containerd.Config.RegistryMirrors: pulls of those
	// registries' images go to the mirrors (a test's own registry).
	RegistryMirrors map[string]string
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
		Dir: dir, Root: filepath.Join(dir, "root"), images: filepath.Join(dir, "images"),
		Bridge: fmt.Sprintf("nkt%08x", rand.Uint32()), PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256)),
		binDir: opts.BinDir,
	}
	bin := ""
	if opts.BinDir != "" {
		bin = c.bin("containerd")
	}
	c.Managed, err = containerd.New(containerd.Config{
		StateDir: dir, Binary: bin, SandboxImage: SandboxImageRef, Snapshotter: containerd.Native,
		PodCIDR: c.PodCIDR, CNIBridge: c.Bridge, DieWithParent: true, SystemdCgroup: opts.SystemdCgroup,
		CDISpecDirs:     opts.CDISpecDirs,
		RegistryMirrors: opts.RegistryMirrors,
		Logger:          slog.New(slog.NewTextHandler(t.Output(), nil)).With("subsystem", "containerd"),
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	c.Socket, c.Endpoint, c.log = c.Managed.Socket(), c.Managed.Endpoint(), c.Managed.LogPath()
	c.RestrictOOMScoreAdj = *c.Managed.Config().RestrictOOMScoreAdj
	if err := os.MkdirAll(c.images, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		RemoveState(t, c.Dir, c.Socket, c.Bridge)
		if t.Failed() {
			t.Logf("containerd log:\n%s", c.Log())
		}
	})

	c.Sandbox = BuildImage(t, c.images, Image{Ref: SandboxImageRef, Runnable: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Managed.Run(ctx) }()
	t.Cleanup(func() { // runs before RemoveState (LIFO)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("containerd: %v", err)
		}
	})
	wait := time.NewTimer(slowTimeout)
	defer wait.Stop()
	select {
	case <-c.Managed.Ready():
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("containerd did not start: %v\n%s", err, c.Log())
	case <-wait.C:
		t.Fatalf("containerd did not become ready in %v\n%s", slowTimeout, c.Log())
	}
	c.CRI, err = cri.New(c.Endpoint, cri.Options{Timeout: slowTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.removePods(t) }) // runs first: pods go while containerd is up
	v, err := c.CRI.Version(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	c.RuntimeVersion = v.GetRuntimeVersion()
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

// Import imports built images with Managed.ImportFiles (ctr, unpacked for the
// native snapshotter) and waits until the CRI API lists each of them with its
// ID.
func (c *Containerd) Import(t testing.TB, imgs ...Built) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var files []string
	for _, b := range imgs {
		files = append(files, b.Path)
	}
	if _, err := c.Managed.ImportFiles(ctx, files...); err != nil {
		t.Fatal(err)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), slowTimeout)
	defer cancel()
	RemoveSandboxes(ctx, t, c.CRI)
	_ = c.CRI.Close()
}

// RemoveSandboxes stops and removes every sandbox the runtime behind client
// holds, so CNI releases their addresses and containerd removes their network
// namespaces; problems are logged, not fatal.
func RemoveSandboxes(ctx context.Context, t testing.TB, client *cri.Client) {
	sbs, err := client.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Logf("cleanup: list sandboxes: %v", err)
		return
	}
	for _, sb := range sbs {
		t.Logf("cleanup: removing sandbox %s of pod %s", sb.Id, sb.GetMetadata().GetName())
		if err := client.StopPodSandbox(ctx, sb.Id); err != nil {
			t.Logf("cleanup: stop sandbox %s: %v", sb.Id, err)
		}
		if err := client.RemovePodSandbox(ctx, sb.Id); err != nil {
			t.Logf("cleanup: remove sandbox %s: %v", sb.Id, err)
		}
	}
}

// RemoveState removes what a containerd serving socket from dir left: it
// kills the shims serving socket (by PID, no others), deletes the CNI bridge
// if one is named and exists, unmounts everything under dir and removes dir.
// Call it after that containerd stopped; problems are logged, not fatal.
func RemoveState(t testing.TB, dir, socket, bridge string) {
	for _, pid := range shimPIDs(socket) {
		t.Logf("cleanup: killing leftover shim pid %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// A container's processes outlive its killed shim: those whose root
	// filesystem is a snapshot under dir are this test's.
	for _, pid := range rootedUnder(dir) {
		t.Logf("cleanup: killing leftover container process pid %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if bridge != "" {
		if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err == nil {
			if out, err := exec.Command("ip", "link", "delete", bridge).CombinedOutput(); err != nil {
				t.Logf("cleanup: delete bridge %s: %v: %s", bridge, err, out)
			}
		}
	}
	for _, m := range mountsUnder(dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// rootedUnder returns the PIDs of the processes whose root mount (the first
// line of /proc/PID/mountinfo) names a path under dir: containers whose
// rootfs is one of dir's snapshots.
func rootedUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		first, _, _ := strings.Cut(string(b), "\n")
		if rootMountUnder(first, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rootMountUnder reports whether mountinfo line (a process's root mount)
// mounts "/" from a path under dir (an overlay's lowerdir or upperdir, or a
// bind mount's source).
func rootMountUnder(line, dir string) bool {
	f := strings.Fields(line)
	if len(f) < 5 || f[4] != "/" {
		return false
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	return strings.Contains(line, "="+prefix) || strings.Contains(line, ":"+prefix) || strings.Contains(line, " "+prefix)
}

// ShimPIDs returns the PIDs of the containerd shims serving socket.
func ShimPIDs(socket string) []int { return shimPIDs(socket) }

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
