package containerdtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestStartRunsAPodAndAContainer(t *testing.T) {
	start := time.Now()
	c := Start(t)
	t.Logf("containerd ready in %v (restrict_oom_score_adj=%v)", time.Since(start), c.RestrictOOMScoreAdj)
	app := c.Build(t, Image{Ref: "docker.io/nodekeeper/app:1", Runnable: true})
	c.Import(t, app)
	pod := c.RunPod(t, "smoke", "uid-smoke")
	id := c.CreateContainer(t, pod, "app", 0, app.Ref, nil, true)
	st, err := c.CRI.ContainerStatus(t.Context(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container state = %v, want running", got)
	}
	if got := st.GetStatus().GetImageRef(); got != app.ID {
		t.Errorf("container image ref = %q, want the image ID %q", got, app.ID)
	}
	done := c.CreateContainer(t, pod, "job", 0, app.Ref, []string{"exit", "3"}, true)
	c.WaitExited(t, done)
	t.Logf("total %v", time.Since(start))
}

// TestStartWithBuiltContainerd runs a container under the containerd 1.7 that
// BuildContainerd builds, and checks that its own shim serves it.
func TestStartWithBuiltContainerd(t *testing.T) {
	bin := BuildContainerd(t)
	start := time.Now()
	c := StartWith(t, Options{BinDir: bin})
	t.Logf("containerd %s ready in %v", c.RuntimeVersion, time.Since(start))
	if !strings.HasPrefix(c.RuntimeVersion, "1.7.") {
		t.Errorf("runtime version = %q, want 1.7.x", c.RuntimeVersion)
	}
	app := c.Build(t, Image{Ref: "docker.io/nodekeeper/app:1", Runnable: true})
	c.Import(t, app)
	pod := c.RunPod(t, "smoke", "uid-smoke")
	id := c.CreateContainer(t, pod, "app", 0, app.Ref, nil, true)
	st, err := c.CRI.ContainerStatus(t.Context(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container state = %v, want running", got)
	}
	pids := shimPIDs(c.Socket)
	if len(pids) == 0 {
		t.Fatal("no shim serves this containerd")
	}
	for _, pid := range pids {
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(bin, "containerd-shim-runc-v2"); exe != want {
			t.Errorf("shim pid %d runs %s, want %s", pid, exe, want)
		}
	}
}

// TestRootMountUnder: a container's root mount (an overlay of snapshots
// under the test's state dir) is recognized, another's is not, nor a
// mount of something else at "/".
func TestRootMountUnder(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"448 341 0:170 / / ro,relatime - overlay overlay rw,lowerdir=/tmp/nkm-1/root/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs,upperdir=/tmp/nkm-1/root/x/fs", true},
		{"448 341 0:170 / / rw - overlay overlay rw,lowerdir=/tmp/nkm-12/root/snapshots/1/fs", false},
		{"448 341 0:170 / / rw - overlay overlay rw,lowerdir=/a/b:/tmp/nkm-1/root/snapshots/1/fs", true},
		{"23 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw", false},
		{"448 341 0:170 / /proc rw - overlay overlay rw,lowerdir=/tmp/nkm-1/root/fs", false},
	} {
		if got := rootMountUnder(tc.line, "/tmp/nkm-1"); got != tc.want {
			t.Errorf("rootMountUnder(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}
