package podruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

const appImage = "docker.io/nodekeeper/app:1"

// buildProbe builds testdata/probe, statically, into dir.
func buildProbe(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(toolbuild.GoTool(), "build", "-trimpath", "-o", filepath.Join(dir, "probe"), ".")
	cmd.Dir = filepath.Join("testdata", "probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
}

// node is a Manager over a private containerd.
type node struct {
	m    *Manager
	ctd  *containerdtest.Containerd
	dir  string
	tool string // host dir holding probe
	pods
}

func startNode(t *testing.T) *node {
	t.Helper()
	ctd := containerdtest.Start(t)
	ctd.Import(t, ctd.Build(t, containerdtest.Image{Ref: appImage, Runnable: true}))
	dir, err := os.MkdirTemp("/tmp", "nkpr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{ctd: ctd, dir: dir, tool: filepath.Join(dir, "tools")}
	if err := os.MkdirAll(n.tool, 0o755); err != nil {
		t.Fatal(err)
	}
	buildProbe(t, n.tool)
	logger := testLogger(t)
	n.m, err = New(Config{NodeName: "node1", PodsDir: filepath.Join(dir, "pods"), PodLogsDir: filepath.Join(dir, "logs"), ContainerLogsDir: filepath.Join(dir, "containers"),
		HostIP: "127.0.0.1", MemoryCapacity: 8 << 30},
		Deps{Runtime: ctd.CRI, Logger: logger, Recorder: nodeapi.LogRecorder{Logger: logger}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runUntil syncs pod (relist, SyncPod, status) until done holds for its
// API status, or fails t after 30s. As the agent does, it kills a pod whose
// containers are done under its restartPolicy: its terminal phase shows
// once nothing of it runs.
func (n *node) runUntil(t *testing.T, pod *v1.Pod, what string, done func(v1.PodStatus) bool) v1.PodStatus {
	t.Helper()
	return n.runUntilWithin(t, pod, what, 30*time.Second, done)
}

// runUntilWithin is runUntil with a limit of d.
func (n *node) runUntilWithin(t *testing.T, pod *v1.Pod, what string, d time.Duration, done func(v1.PodStatus) bool) v1.PodStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last v1.PodStatus
	for {
		all, err := n.m.Statuses(ctx)
		if err == nil {
			st := all[pod.UID]
			last = n.podStatus(n.m, pod, st, time.Now())
			if done(last) {
				return last
			}
			n.mu.Lock()
			finished := n.done[pod.UID]
			n.mu.Unlock()
			if finished {
				if err := n.m.KillPod(ctx, pod, st, nil); err != nil {
					t.Logf("kill: %v", err)
				}
			} else if res := n.syncPod(ctx, n.m, pod, st); res.Err != nil {
				t.Logf("sync: %v", res.Err)
			}
		}
		select {
		case <-ctx.Done():
			b, _ := json.MarshalIndent(last, "", " ")
			t.Fatalf("pod %s: %s did not happen: last status %s\n%s", pod.Name, what, b, n.ctd.Log())
		case <-tick.C:
		}
	}
}

func (n *node) status(t *testing.T, uid types.UID) *PodStatus {
	t.Helper()
	all, err := n.m.Statuses(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return all[uid]
}

// pidOf is a running container's host PID from the runtime's verbose status.
func (n *node) pidOf(t *testing.T, id string) int {
	t.Helper()
	r, err := n.ctd.CRI.ContainerStatus(t.Context(), strings.TrimPrefix(id, "containerd://"), true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(r.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in the verbose status: %v %q", err, r.GetInfo()["info"])
	}
	return info.Pid
}

func hostPod(name, uid string, mut ...func(*v1.Pod)) *v1.Pod {
	p := testPod(mut...)
	p.Name, p.UID = name, types.UID(uid)
	p.Spec.HostNetwork = true
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Image = appImage
	}
	return p
}

func running1(st v1.PodStatus) bool {
	return st.Phase == v1.PodRunning && len(st.ContainerStatuses) > 0 && st.ContainerStatuses[0].State.Running != nil
}

func TestIntegrationPodLifecycle(t *testing.T) {
	n := startNode(t)
	dirType := v1.HostPathDirectory
	pod := hostPod("web", "uid-web", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{
			{Name: "out", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "tools", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: n.tool, Type: &dirType}}},
		}
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: appImage, Args: []string{"exit", "0"},
			Resources: v1.ResourceRequirements{Limits: rl("cpu", "100m", "memory", "64Mi")}}}
		p.Spec.Containers[0] = v1.Container{
			Name: "app", Image: appImage,
			Command:    []string{"/tools/probe"},
			Args:       []string{"report", "/out/report", "$(GREETING)", "$$(GREETING)"},
			WorkingDir: "/out",
			Env: []v1.EnvVar{
				{Name: "GREETING", Value: "hello"},
				{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "MEM_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resourceMi}}},
			},
			VolumeMounts: []v1.VolumeMount{{Name: "out", MountPath: "/out"}, {Name: "tools", MountPath: "/tools", ReadOnly: true}},
			Resources:    v1.ResourceRequirements{Limits: rl("cpu", "100m", "memory", "64Mi")},
		}
	})
	st := n.runUntil(t, pod, "Running", running1)

	// The init container ran to completion before the container started.
	ini := st.InitContainerStatuses[0].State.Terminated
	if ini == nil || ini.ExitCode != 0 || ini.FinishedAt.After(st.ContainerStatuses[0].State.Running.StartedAt.Time) {
		t.Errorf("init container: %+v, app started %v", ini, st.ContainerStatuses[0].State.Running.StartedAt)
	}
	if st.QOSClass != v1.PodQOSGuaranteed || st.PodIP != "127.0.0.1" {
		t.Errorf("qos %s, pod IP %q", st.QOSClass, st.PodIP)
	}
	// What the container saw, written to its emptyDir.
	report := filepath.Join(emptyDirPath(n.m.cfg.PodsDir, "uid-web", "out"), "report")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var b []byte
	for {
		var err error
		if b, err = os.ReadFile(report); err == nil && len(b) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no report at %s: %v", report, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, want := range []string{"args=hello $(GREETING)\n", "cwd=/out\n", "GREETING=hello\n", "POD_NAME=web\n", "MEM_LIMIT=64\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
	// oom_score_adj: Guaranteed asks -997; a containerd that restricts it
	// gives no less than its own (ours).
	want := -997
	if n.ctd.RestrictOOMScoreAdj {
		own, err := os.ReadFile("/proc/self/oom_score_adj")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := strconv.Atoi(strings.TrimSpace(string(own))); o > want {
			want = o
		}
	}
	pid := n.pidOf(t, st.ContainerStatuses[0].ContainerID)
	got, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "oom_score_adj"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != strconv.Itoa(want) {
		t.Errorf("oom_score_adj of pid %d = %s, want %d", pid, got, want)
	}
	// The log file is in the kubelet's layout, with its legacy symlink.
	logFile := filepath.Join(n.m.cfg.PodLogsDir, "ns_web_uid-web", "app", "0.log")
	if _, err := os.Stat(logFile); err != nil {
		t.Errorf("container log: %v", err)
	}
	_, id, _ := strings.Cut(st.ContainerStatuses[0].ContainerID, "://")
	link := filepath.Join(n.m.cfg.ContainerLogsDir, "web_ns_app-"+id+".log")
	if target, err := os.Readlink(link); err != nil || target != logFile {
		t.Errorf("log symlink %s -> %q, %v; want -> %s", link, target, err, logFile)
	}

	// A changed spec restarts the container.
	oldID := st.ContainerStatuses[0].ContainerID
	changed := pod.DeepCopy()
	changed.Spec.Containers[0].Args[2] = "bye"
	st = n.runUntil(t, changed, "restart on a changed spec", func(s v1.PodStatus) bool {
		return running1(s) && s.ContainerStatuses[0].ContainerID != oldID
	})
	if cs := st.ContainerStatuses[0]; cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
		t.Errorf("after the change: restarts %d, last state %+v", cs.RestartCount, cs.LastTerminationState)
	}

	// KillPod, then RemovePod leaves nothing.
	if err := n.m.KillPod(t.Context(), changed, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.m.RemovePod(t.Context(), n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
	if ps := n.status(t, pod.UID); ps != nil {
		t.Errorf("after RemovePod the runtime holds %d sandboxes, %d containers", len(ps.Sandboxes), len(ps.Containers))
	}
	if entries, err := os.ReadDir(n.m.cfg.ContainerLogsDir); err != nil || len(entries) != 0 {
		t.Errorf("log symlinks left behind: %v, %v", entries, err)
	}
	for _, p := range []string{filepath.Join(n.m.cfg.PodsDir, "uid-web"), filepath.Join(n.m.cfg.PodLogsDir, "ns_web_uid-web")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}

// TestIntegrationMemoryEmptyDirSize: a real container sees its memory-backed
// emptyDirs at the kubelet's size (nodeapi.TmpfsSize): the pod's memory limit
// as its cgroup has it, here its init container's 96Mi, larger than the app's
// 32Mi, and a smaller sizeLimit where set. Before issue 28 only the regular
// containers' limits counted: the first volume was 32Mi.
func TestIntegrationMemoryEmptyDirSize(t *testing.T) {
	n := startNode(t)
	dirType := v1.HostPathDirectory
	pod := hostPod("tmpfs", "uid-tmpfs", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{
			{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
			{Name: "capped", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory,
				SizeLimit: new(resource.MustParse("8Mi"))}}},
			{Name: "tools", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: n.tool, Type: &dirType}}},
		}
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: appImage, Args: []string{"exit", "0"},
			Resources: v1.ResourceRequirements{Limits: rl("memory", "96Mi")}}}
		p.Spec.Containers[0] = v1.Container{
			Name: "app", Image: appImage,
			Command: []string{"/tools/probe"},
			Args:    []string{"statfs", "/mem/report", "/mem", "/capped"},
			VolumeMounts: []v1.VolumeMount{{Name: "mem", MountPath: "/mem"}, {Name: "capped", MountPath: "/capped"},
				{Name: "tools", MountPath: "/tools", ReadOnly: true}},
			Resources: v1.ResourceRequirements{Limits: rl("memory", "32Mi")},
		}
	})
	n.runUntil(t, pod, "Running", running1)
	report := filepath.Join(emptyDirPath(n.m.cfg.PodsDir, "uid-tmpfs", "mem"), "report")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var b []byte
	for {
		var err error
		if b, err = os.ReadFile(report); err == nil && len(b) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no report at %s: %v", report, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	want := fmt.Sprintf("/mem size=%d\n/capped size=%d\n", 96<<20, 8<<20)
	if string(b) != want {
		t.Errorf("the container saw\n%s\nwant\n%s", b, want)
	}
	if err := n.m.KillPod(t.Context(), pod, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := n.m.RemovePod(t.Context(), n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationCrashLoop(t *testing.T) {
	n := startNode(t)
	pod := hostPod("crash", "uid-crash", func(p *v1.Pod) { p.Spec.Containers[0].Args = []string{"exit", "3"} })
	st := n.runUntil(t, pod, "CrashLoopBackOff", func(s v1.PodStatus) bool {
		w := s.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "CrashLoopBackOff"
	})
	cs := st.ContainerStatuses[0]
	if want := "back-off 10s restarting failed container=app pod=crash_ns(uid-crash)"; cs.State.Waiting.Message != want {
		t.Errorf("message %q, want %q", cs.State.Waiting.Message, want)
	}
	if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
		t.Errorf("restarts %d, last state %+v; want 1 restart after exit 3", cs.RestartCount, cs.LastTerminationState)
	}
	if st.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", st.Phase)
	}
	res := n.syncPod(t.Context(), n.m, pod, n.status(t, pod.UID))
	if res.Err != nil || res.RetryAfter <= 0 || res.RetryAfter > 10*time.Second {
		t.Errorf("sync in back-off: %+v, want RetryAfter in (0, 10s]", res)
	}
}

func TestIntegrationKillHonoursGrace(t *testing.T) {
	n := startNode(t)
	grace := int64(3)
	dirType := v1.HostPathDirectory
	pod := hostPod("stubborn", "uid-stubborn", func(p *v1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.Volumes = []v1.Volume{
			{Name: "out", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "tools", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: n.tool, Type: &dirType}}},
		}
		c := &p.Spec.Containers[0]
		c.Command, c.Args = []string{"/tools/probe"}, []string{"ignore-term"}
		c.VolumeMounts = []v1.VolumeMount{{Name: "out", MountPath: "/out"}, {Name: "tools", MountPath: "/tools"}}
		c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"/tools/probe", "touch", "/out/prestop"}}}}
	})
	n.runUntil(t, pod, "Running", running1)
	start := time.Now()
	if err := n.m.KillPod(t.Context(), pod, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < 2500*time.Millisecond || took > 15*time.Second {
		t.Errorf("KillPod took %v, want about the 3s grace", took)
	}
	if _, err := os.Stat(filepath.Join(emptyDirPath(n.m.cfg.PodsDir, "uid-stubborn", "out"), "prestop")); err != nil {
		t.Errorf("the pre-stop hook did not run: %v", err)
	}
	ps := n.status(t, pod.UID)
	if len(ps.Containers) != 1 || ps.Containers[0].State != runtimeapi.ContainerState_CONTAINER_EXITED || ps.Containers[0].ExitCode != 137 {
		t.Errorf("container after kill: %v", ps.Containers)
	}
	if ps.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox after kill: %v", ps.Sandboxes[0].State)
	}
	if err := n.m.RemovePod(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
}

// An ephemeral container added to a running pod starts beside its container,
// which keeps running, sees its target's processes (the CRI TARGET pid
// namespace), logs where the kubelet puts logs, and stops with the pod.
func TestIntegrationEphemeralContainer(t *testing.T) {
	n := startNode(t)
	dirType := v1.HostPathDirectory
	tools := v1.Volume{Name: "tools", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: n.tool, Type: &dirType}}}
	out := v1.Volume{Name: "out", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
	mounts := []v1.VolumeMount{{Name: "out", MountPath: "/out"}, {Name: "tools", MountPath: "/tools", ReadOnly: true}}
	pod := hostPod("debugged", "uid-debugged", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{out, tools}
		c := &p.Spec.Containers[0]
		c.Command, c.Args, c.VolumeMounts = []string{"/tools/probe"}, []string{"report", "/out/report", "target-marker"}, mounts
	})
	st := n.runUntil(t, pod, "Running", running1)
	appID := st.ContainerStatuses[0].ContainerID

	debugged := pod.DeepCopy()
	debugged.Spec.EphemeralContainers = []v1.EphemeralContainer{{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: appImage, Command: []string{"/tools/probe"}, Args: []string{"procs"}, VolumeMounts: mounts},
		TargetContainerName:      "app",
	}}
	st = n.runUntil(t, debugged, "ephemeral container running", func(s v1.PodStatus) bool {
		return len(s.EphemeralContainerStatuses) == 1 && s.EphemeralContainerStatuses[0].State.Running != nil
	})
	if cs := st.ContainerStatuses[0]; cs.ContainerID != appID || cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("the pod's container after adding an ephemeral one: %+v (was %s)", cs, appID)
	}
	if es := st.EphemeralContainerStatuses[0]; es.RestartCount != 0 || es.Ready {
		t.Errorf("ephemeral status %+v", es)
	}

	// Its log, in the kubelet's layout, lists the target's process.
	logPath := filepath.Join(n.m.cfg.PodLogsDir, "ns_debugged_uid-debugged", "debugger", "0.log")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		b, err := os.ReadFile(logPath)
		if err == nil && strings.Contains(string(b), "/tools/probe report /out/report target-marker") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the ephemeral container's log %s does not list its target's process: %v\n%s", logPath, err, b)
		case <-time.After(50 * time.Millisecond):
		}
	}

	if err := n.m.KillPod(t.Context(), debugged, n.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range n.status(t, pod.UID).Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s is %v after KillPod", c.GetMetadata().GetName(), c.State)
		}
	}
	if err := n.m.RemovePod(t.Context(), n.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
}
