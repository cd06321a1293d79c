package podruntime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
)

func TestLogSymlinkPath(t *testing.T) {
	t.Parallel()
	if got, want := logSymlinkPath("/var/log/containers", "web", "ns", "app", "abc123"), "/var/log/containers/web_ns_app-abc123.log"; got != want {
		t.Errorf("logSymlinkPath = %q, want %q", got, want)
	}
	long := logSymlinkPath("/d", strings.Repeat("p", 200), "ns", "app", strings.Repeat("f", 64))
	if name := filepath.Base(long); len(name) != 255 || !strings.HasSuffix(name, ".log") || !strings.HasPrefix(name, strings.Repeat("p", 200)+"_ns_app-") {
		t.Errorf("long name %q (%d bytes): want 255 bytes ending in .log", name, len(name))
	}
}

// TestLogSymlinkFollowsContainer: a started container gets the kubelet's
// legacy symlink POD_NAMESPACE_CONTAINER-ID.log to its log file; removing
// the pod removes it.
func TestLogSymlinkFollowsContainer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.m.cfg
	cfg.ContainerLogsDir = filepath.Join(f.dir, "containers")
	m, err := New(cfg, Deps{Runtime: fakeCRI{f.rt, f.img}, Logger: testLogger(t), Recorder: f.events})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	pod := testPod()
	// The fake runtime writes no log: the file is there as a runtime's
	// would be once the container started.
	logFile := filepath.Join(criconfig.PodLogDir(cfg.PodLogsDir, pod.Namespace, pod.Name, string(pod.UID)), "app", "0.log")
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logFile, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	id := critest.BuildContainerName(&runtimeapi.ContainerMetadata{Name: "app"}, critest.BuildSandboxName(&runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1"}))
	link := filepath.Join(cfg.ContainerLogsDir, "web_ns_app-"+id+".log")
	if target, err := os.Readlink(link); err != nil || target != logFile {
		t.Fatalf("symlink %s -> %q, %v; want -> %s", link, target, err, logFile)
	}
	if err := m.KillPod(t.Context(), pod, f.status(t, pod.UID), nil); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePod(t.Context(), f.status(t, pod.UID)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("symlink after the pod's removal: %v", err)
	}
}

// TestLogSymlinkNotDangling: no symlink for a container without a log
// file, nor without ContainerLogsDir.
func TestLogSymlinkNotDangling(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.m.cfg
	cfg.ContainerLogsDir = filepath.Join(f.dir, "containers")
	m, err := New(cfg, Deps{Runtime: fakeCRI{f.rt, f.img}, Logger: testLogger(t), Recorder: f.events})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	if res := f.sync(t, testPod()); res.Err != nil {
		t.Fatal(res.Err)
	}
	if entries, err := os.ReadDir(cfg.ContainerLogsDir); len(entries) != 0 {
		t.Errorf("log symlinks %v (%v), want none", entries, err)
	}
}
