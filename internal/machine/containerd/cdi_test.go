package containerd_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// TestManagedCDIDevices: with CDISpecDirs, a containerd 1.7 of the test's
// own applies a CDI device that a container's CRI config names (as a device
// plugin's Allocate answers it, and as the conformance driver's containerd
// 1.7 unit needs for the sample device plugin): the container's process has
// the spec's environment variable and the spec's block device node. The
// spec is written after containerd started, as the sample device plugin
// writes its own.
func TestManagedCDIDevices(t *testing.T) {
	bin := containerdtest.BuildContainerd(t)
	specs := t.TempDir()
	c := containerdtest.StartWith(t, containerdtest.Options{BinDir: bin, CDISpecDirs: []string{specs}})
	const spec = `{"cdiVersion":"0.3.0","kind":"nodekeeper.test/cdi","devices":[{"name":"dev0","containerEdits":{` +
		`"env":["NK_CDI_DEVICE=dev0"],"deviceNodes":[{"path":"/tmp/nk-cdi-dev0","type":"b","major":1,"minor":0}]}}]}`
	if err := os.WriteFile(filepath.Join(specs, "nodekeeper.test.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	app := c.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/app:1", Runnable: true})
	c.Import(t, app)
	pod := c.RunPod(t, "cdi", "uid-cdi")
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: app.Ref},
		LogPath:  "app_0.log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
		}},
		CDIDevices: []*runtimeapi.CDIDevice{{Name: "nodekeeper.test/cdi=dev0"}},
	}
	id, err := c.CRI.CreateContainer(t.Context(), pod.ID, cfg, pod.Config)
	if err != nil {
		t.Fatalf("create a container with a CDI device: %v\n%s", err, c.Log())
	}
	if err := c.CRI.StartContainer(t.Context(), id); err != nil {
		t.Fatalf("start: %v\n%s", err, c.Log())
	}
	pid := containerPID(t, c, id)

	// StartContainer returns once runc has let the container's process go
	// on; it execs the image's program after that, and until then its
	// environment is runc's (empty while it execs): wait for the exec.
	var env []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) { // polling another process
		environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		env = strings.Split(string(environ), "\x00")
		if slices.Contains(env, "NK_CDI_DEVICE=dev0") || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Contains(env, "NK_CDI_DEVICE=dev0") {
		t.Errorf("the container's environment %q lacks the CDI spec's NK_CDI_DEVICE=dev0", env)
	}
	// The device node, seen in the container's root.
	var st unix.Stat_t
	node := filepath.Join("/proc", strconv.Itoa(pid), "root", "tmp", "nk-cdi-dev0")
	if err := unix.Stat(node, &st); err != nil {
		t.Fatalf("the CDI spec's device node: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 0 {
		t.Errorf("the container's /tmp/nk-cdi-dev0: mode %o, device %d:%d; want a block device 1:0",
			st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
}

// containerPID is the host pid of the container's process, from
// containerd's verbose status.
func containerPID(t *testing.T, c *containerdtest.Containerd, id string) int {
	t.Helper()
	st, err := c.CRI.ContainerStatus(t.Context(), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("container %s: no pid in the verbose status (%v): %v", id, err, st.GetInfo())
	}
	return info.Pid
}
