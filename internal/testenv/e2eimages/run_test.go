package e2eimages

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/kubebuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// agnhostBinary builds agnhost from hack/kube (once per machine, cached by
// toolbuild) or ends t: skipped in -short mode outside CI, failed if the
// build fails.
func agnhostBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("skipping the agnhost build in -short mode")
	}
	spec, err := kubebuild.Agnhost()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := toolbuild.Build(spec)
	if err != nil {
		t.Fatalf("build agnhost: %v", err)
	}
	return filepath.Join(dir, "agnhost")
}

// pauseBinary builds the project's images/pause, static, into a temporary
// directory.
func pauseBinary(t *testing.T) string { return staticBinary(t, "pause") }

// staticBinary builds the project's images/NAME program, static.
func staticBinary(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(toolbuild.GoTool(), "build", "-trimpath", "-buildvcs=false", "-o", out, "github.com/nodekeeper/nodekeeper/images/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build images/%s: %v\n%s", name, err, b)
	}
	return out
}

// stand is a containerd with the stand-ins imported.
type stand struct {
	c *containerdtest.Containerd
}

// container creates and starts a container of image in pod, running args
// (nil: the image's command), with edit applied to its config first.
func (s stand) container(t *testing.T, pod containerdtest.Pod, name, image string, args []string, edit func(*runtimeapi.ContainerConfig)) string {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Args:     args,
		LogPath:  name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: pod.Config.GetLinux().GetSecurityContext().GetNamespaceOptions(),
			},
		},
	}
	if edit != nil {
		edit(cfg)
	}
	id, err := s.c.CRI.CreateContainer(t.Context(), pod.ID, cfg, pod.Config)
	if err != nil {
		t.Fatalf("create container %s from %s: %v", name, image, err)
	}
	if err := s.c.CRI.StartContainer(t.Context(), id); err != nil {
		t.Fatalf("start container %s from %s: %v", name, image, err)
	}
	return id
}

// exec runs cmd in the container and returns its stdout, failing t on a
// non-zero exit.
func (s stand) exec(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	stdout, stderr, err := s.c.CRI.ExecSync(t.Context(), id, cmd, 20*time.Second)
	if err != nil {
		t.Fatalf("exec %q: %v\nstdout: %s\nstderr: %s", cmd, err, stdout, stderr)
	}
	return string(stdout)
}

// logs returns the container's log file (CRI format) once it exited.
func (s stand) logs(t *testing.T, pod containerdtest.Pod, id, name string) string {
	t.Helper()
	s.c.WaitExited(t, id)
	b, err := os.ReadFile(filepath.Join(pod.Config.LogDirectory, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runPod runs a pod sandbox named name: on the host network, or in its own
// network namespace through containerd's CNI bridge.
func (s stand) runPod(t *testing.T, name string, hostNetwork bool) containerdtest.Pod {
	t.Helper()
	mode := runtimeapi.NamespaceMode_POD
	if hostNetwork {
		mode = runtimeapi.NamespaceMode_NODE
	}
	uid := "uid-" + name
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "default"},
		LogDirectory: filepath.Join(s.c.Dir, "logs", uid),
		Labels:       map[string]string{"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: mode, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
			},
		},
	}
	if !hostNetwork {
		cfg.Hostname = name
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := s.c.CRI.RunPodSandbox(t.Context(), cfg, "")
	if err != nil {
		t.Fatalf("run pod %s: %v\n%s", name, err, s.c.Log())
	}
	return containerdtest.Pod{ID: id, Config: cfg}
}

// freePort returns a TCP port nothing listens on at the moment.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// get polls url until it answers 200 or the deadline passes, returning the body.
func get(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && rerr == nil {
				return string(body)
			}
			err = fmt.Errorf("status %s, body %q, read error %v", resp.Status, body, rerr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestStandInsRun imports the stand-ins into a private containerd and runs
// them over CRI the way the e2e tests do.
func TestStandInsRun(t *testing.T) {
	integration.Require(t, hostWhy(fakeHost(t)))
	for _, bin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", bin)); err != nil {
			if _, err := os.Stat(filepath.Join("/opt/cni/bin", bin)); err != nil {
				integration.Require(t, fmt.Sprintf("CNI plugin %s not found (Debian package containernetworking-plugins)", bin))
			}
		}
	}
	agnhost := agnhostBinary(t)
	pause := pauseBinary(t)
	c := containerdtest.Start(t)
	// The bridge plugin turns on IP forwarding as a gateway; put it back.
	const fwd = "/proc/sys/net/ipv4/ip_forward"
	if before, err := os.ReadFile(fwd); err == nil {
		t.Cleanup(func() { _ = os.WriteFile(fwd, before, 0o644) })
	}
	start := time.Now()
	imgs, err := Build(filepath.Join(c.Dir, "e2eimages"), Options{Agnhost: agnhost, Pause: pause, Nmeter: staticBinary(t, "nmeter")})
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)
	var toImport []containerdtest.Built
	for _, img := range imgs {
		toImport = append(toImport, containerdtest.Built{Ref: img.Ref, Path: img.Path, ID: img.ID})
	}
	c.Import(t, toImport...)
	t.Logf("built %d stand-ins in %v, imported in %v", len(imgs), built, time.Since(start)-built)
	s := stand{c: c}
	host := s.runPod(t, "host", true)

	t.Run("busybox", func(t *testing.T) {
		for _, ref := range []string{BusyboxRef, BusyboxPrevRef} {
			id := s.container(t, host, "busybox-"+ref[strings.LastIndex(ref, ":")+1:], ref, []string{"sleep", "3600"}, nil)
			if got := s.exec(t, id, "sh", "-c", "echo ok"); got != "ok\n" {
				t.Errorf("%s: sh -c 'echo ok' printed %q", ref, got)
			}
			if got := s.exec(t, id, "bash", "-c", `[[ -n $BASH_VERSION ]] && echo "bash ${BASH_VERSINFO[0]}"`); !strings.HasPrefix(got, "bash ") {
				t.Errorf("%s: bash -c printed %q", ref, got)
			}
			if got := s.exec(t, id, "/bin/sh", "-c", "id -u; cat /etc/passwd | head -1; ls /bin/wget /bin/nc /bin/test"); !strings.HasPrefix(got, "0\nroot:x:0:0:") {
				t.Errorf("%s: printed %q", ref, got)
			}
			// The container-lifecycle specs' timestamp.
			got := strings.TrimSpace(s.exec(t, id, "sh", "-c", "date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z"))
			if at, err := time.Parse(time.RFC3339Nano, got); err != nil || len(got) != len("2006-01-02T15:04:05.000Z") || time.Since(at).Abs() > time.Hour {
				t.Errorf("%s: the specs' date and nmeter timestamp is %q (%v)", ref, got, err)
			}
		}
	})

	t.Run("busybox logs", func(t *testing.T) {
		// A container that runs a command and exits, its output in the CRI log.
		id := s.container(t, host, "once", BusyboxRef, []string{"sh", "-c", "echo ran once"}, nil)
		if got := s.logs(t, host, id, "once"); !strings.Contains(got, " stdout F ran once") {
			t.Errorf("log %q, want the line ran once", got)
		}
	})

	t.Run("agnhost netexec", func(t *testing.T) {
		for _, ref := range []string{AgnhostRef, AgnhostPrevRef} {
			port := freePort(t)
			id := s.container(t, host, "netexec-"+ref[strings.LastIndex(ref, ":")+1:], ref, []string{"netexec", fmt.Sprintf("--http-port=%d", port), "--udp-port=-1"}, nil)
			if got, _ := os.Hostname(); get(t, fmt.Sprintf("http://127.0.0.1:%d/hostname", port)) != got {
				t.Errorf("%s: /hostname does not name the host %q (host network)", ref, got)
			}
			if got := s.exec(t, id, "sh", "-c", "cat /etc/group | grep group-defined-in-image; ls -l /agnhost-2"); !strings.Contains(got, "50000") || !strings.Contains(got, "-> agnhost") {
				t.Errorf("%s: printed %q", ref, got)
			}
			// The lifecycle-hook specs' exec hooks curl the handler pod.
			if got := s.exec(t, id, "sh", "-c", fmt.Sprintf("curl -s http://127.0.0.1:%d/echo?msg=from-curl", port)); got != "from-curl" {
				t.Errorf("%s: curl in the container printed %q, want the echo", ref, got)
			}
		}
	})

	t.Run("nginx", func(t *testing.T) {
		for _, ref := range []string{NginxRef, NginxNewRef} {
			tag := ref[strings.LastIndex(ref, ":")+1:]
			pod := s.runPod(t, "nginx-"+strings.ReplaceAll(tag, ".", "-"), false)
			st, err := c.CRI.PodSandboxStatus(t.Context(), pod.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			ip := st.GetStatus().GetNetwork().GetIp()
			id := s.container(t, pod, "nginx", ref, nil, nil)
			if body := get(t, "http://"+net.JoinHostPort(ip, "80")+"/"); !strings.Contains(body, "Welcome to nginx!") {
				t.Errorf("%s: GET / on %s:80 returned %q", ref, ip, body)
			}
			// Inside the pod's network namespace, as a test's exec sees it.
			if got := s.exec(t, id, "wget", "-qO-", "http://127.0.0.1/"); !strings.Contains(got, "Welcome to nginx!") {
				t.Errorf("%s: wget in the container printed %q", ref, got)
			}
		}
	})

	t.Run("nonroot", func(t *testing.T) {
		id := s.container(t, host, "nonroot", NonRootRef, []string{"sleep", "3600"}, nil)
		if got := s.exec(t, id, "id", "-u"); got != fmt.Sprintf("%d\n", NonRootUID) {
			t.Errorf("id -u printed %q, want %d", got, NonRootUID)
		}
		st, err := c.CRI.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: NonRootRef}, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.GetImage().GetUid().GetValue(); got != NonRootUID {
			t.Errorf("CRI image status uid %d, want %d (the kubelet's runAsNonRoot check reads it)", got, NonRootUID)
		}
	})

	t.Run("nonewprivs", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			noNewPr bool
			want    string
		}{
			{"escalates", false, "Effective uid: 0"},
			{"no-new-privs", true, "Effective uid: 1000"},
		} {
			id := s.container(t, host, "nnp-"+tc.name, NonewprivsRef, nil, func(cfg *runtimeapi.ContainerConfig) {
				cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
				cfg.Linux.SecurityContext.NoNewPrivs = tc.noNewPr
			})
			if got := s.logs(t, host, id, "nnp-"+tc.name); !strings.Contains(got, tc.want) {
				t.Errorf("%s: log %q, want %q", tc.name, got, tc.want)
			}
		}
	})

	t.Run("ipc-utils", func(t *testing.T) {
		id := s.container(t, host, "ipc", IpcUtilsRef, []string{"sleep", "3600"}, nil)
		// The e2e test's pipeline, printing the shmid column.
		if got := s.exec(t, id, "sh", "-c", "ipcs -m | awk '{print $2}'"); !strings.Contains(got, "shmid") {
			t.Errorf("ipcs -m | awk printed %q, want the shmid column", got)
		}
	})

	t.Run("glibc-dns-testing", func(t *testing.T) {
		// The kubelet mounts a hosts file naming the pod's FQDN; hostname -f
		// finds it there, as the "Hostname of Pod" tests expect.
		pod := s.runPod(t, "web", false)
		hosts := filepath.Join(c.Dir, "web-hosts")
		if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n10.9.9.9 web.sub.default.svc.cluster.local web\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		id := s.container(t, pod, "fqdn", GlibcDNSRef, []string{"sh", "-c", "echo $(hostname)';'$(hostname -f)';'"}, func(cfg *runtimeapi.ContainerConfig) {
			cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/etc/hosts", HostPath: hosts}}
		})
		if got := s.logs(t, pod, id, "fqdn"); !strings.Contains(got, " stdout F web;web.sub.default.svc.cluster.local;") {
			t.Errorf("log %q, want web;web.sub.default.svc.cluster.local;", got)
		}
	})

	t.Run("pause", func(t *testing.T) {
		id := s.container(t, host, "pause", PauseRef, nil, nil)
		st, err := c.CRI.ContainerStatus(t.Context(), id, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("pause container %v, want running", got)
		}
		// A SIGTERM before pause has its handler is ignored (it is PID 1 of
		// its namespace) and the stop ends in SIGKILL: wait until the
		// handler is in place, as the process's caught-signal mask shows.
		waitCatches(t, c.CRI, id, syscall.SIGTERM)
		if err := c.CRI.StopContainer(t.Context(), id, 10); err != nil {
			t.Fatal(err)
		}
		if st, err := c.CRI.ContainerStatus(t.Context(), id, false); err != nil || st.GetStatus().GetExitCode() != 0 {
			t.Errorf("pause after SIGTERM: exit code %d (%v), want 0", st.GetStatus().GetExitCode(), err)
		}
	})
}

// waitCatches waits (up to a minute) until container id's process catches
// sig: its SigCgt mask in /proc/PID/status has the signal's bit.
func waitCatches(t *testing.T, rt interface {
	ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
}, id string, sig syscall.Signal) {
	t.Helper()
	st, err := rt.ContainerStatus(t.Context(), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("container %s: no pid in its verbose status (%v)", id, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", info.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if mask, ok := strings.CutPrefix(line, "SigCgt:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && m&(1<<(uint(sig)-1)) != 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s (pid %d) catches no %v after a minute", id, info.Pid, sig)
		}
		time.Sleep(10 * time.Millisecond) // another process's state, not a goroutine of ours
	}
}
