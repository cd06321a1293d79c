package stats

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// TestRealPodCgroupSystemd is TestRealPodCgroup under the systemd cgroup
// driver, where systemd is the init system: the pod's slice made by
// internal/machine/cgroups is the cgroupParent containerd's runc (SystemdCgroup =
// true) puts the sandbox's and the container's scopes in, and the stats read
// the pod from the slice and each container from its scope.
func TestRealPodCgroupSystemd(t *testing.T) {
	integration.OnSystemd(t)
	if os.Geteuid() != 0 {
		integration.Require(t, "the pod cgroup test needs root")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	root := "/nk-test-" + hex.EncodeToString(rnd[:])
	names := cgroups.Names{Driver: "systemd", Root: root}
	m, err := cgroups.New(cgroups.Config{Driver: "systemd", CgroupRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	uid := "uid-stats-3"
	// Registered before containerd starts, so it runs after containerd's
	// cleanup has removed the pod: the pod's slice, then the test's root slice.
	t.Cleanup(func() {
		if err := m.RemovePod(types.UID(uid)); err != nil {
			t.Errorf("remove pod cgroup: %v", err)
		}
		conn, err := sddbus.New() // t.Context() is done when cleanups run
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		slice := path.Base(path.Dir(names.Kubepods()))
		ch := make(chan string, 1)
		if _, err := conn.StopUnit(slice, "replace", ch); err != nil {
			t.Errorf("stop %s: %v", slice, err)
		} else if res := <-ch; res != "done" {
			t.Errorf("stop %s: %s", slice, res)
		}
	})
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	parent, err := m.EnsurePod(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "guaranteed", Namespace: "default", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(parent, "-kubepods-poduid_stats_3.slice") {
		t.Fatalf("cgroupParent %q, want the pod's slice", parent)
	}

	ctd := containerdtest.StartWith(t, containerdtest.Options{SystemdCgroup: true})
	app := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/stats-app:2", Runnable: true})
	ctd.Import(t, app)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "guaranteed", Uid: uid, Namespace: "default"},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: parent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
			},
		},
	}
	id, err := ctd.CRI.RunPodSandbox(t.Context(), cfg, "")
	if err != nil {
		t.Fatalf("run pod: %v\n%s", err, ctd.Log())
	}
	ctd.CreateContainer(t, containerdtest.Pod{ID: id, Config: cfg}, "app", 0, app.Ref, nil, true)

	p, err := New(Config{RootDir: t.TempDir(), LogDir: t.TempDir(), CgroupRoot: root, CgroupDriver: "systemd"}, Deps{Runtime: ctd.CRI})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("%d pods, want 1", len(s.Pods))
	}
	ps := s.Pods[0]
	if ps.CPU == nil || ps.Memory == nil || ps.Memory.AvailableBytes == nil || ps.ProcessStats == nil {
		t.Fatalf("pod cgroup stats missing: cpu %+v, memory %+v, processes %+v", ps.CPU, ps.Memory, ps.ProcessStats)
	}
	if *ps.Memory.AvailableBytes+*ps.Memory.WorkingSetBytes != 64<<20 || *ps.Memory.WorkingSetBytes == 0 {
		t.Errorf("pod memory: available %d + working set %d, want the 64 MiB limit", *ps.Memory.AvailableBytes, *ps.Memory.WorkingSetBytes)
	}
	if *ps.ProcessStats.ProcessCount != 1 {
		t.Errorf("pod processes %d, want 1: the app's, not the sandbox's pause", *ps.ProcessStats.ProcessCount)
	}
	if s.Node.SystemContainers[0].Name != "pods" || s.Node.SystemContainers[0].Memory.WorkingSetBytes == nil {
		t.Errorf("system containers %+v, want pods", s.Node.SystemContainers)
	}

	samples, err := p.Containers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 2 || samples[0].Container != SandboxContainerName || samples[1].Container != "app" {
		t.Fatalf("container samples %+v, want the sandbox and app", samples)
	}
	l := m.Layout()
	for _, c := range samples {
		want := parent + "/cri-containerd-" + c.ID + ".scope"
		if c.Cgroup != want {
			t.Errorf("%s: cgroup %s, want %s", c.Container, c.Cgroup, want)
		}
		// runc made it there: the scope holds the container's process.
		b, err := os.ReadFile(filepath.Join(l.Dir("memory", want), "cgroup.procs"))
		if err != nil || len(strings.Fields(string(b))) != 1 {
			t.Errorf("%s: %s/cgroup.procs = %q, %v; want its one process", c.Container, want, b, err)
		}
		if c.Memory.WorkingSet == 0 || c.CPU.Usage == 0 || c.Procs.Processes != 1 {
			t.Errorf("%s: memory %+v, cpu %+v, processes %+v", c.Container, c.Memory, c.CPU, c.Procs)
		}
	}
}
