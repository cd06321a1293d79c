package podruntime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime/criconfig"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// subPathNode is a pods directory with one pod's emptyDir "vol" and a host
// directory outside it holding a file ("secret").
type subPathNode struct {
	podsDir, vol, outside string
}

func newSubPathNode(t *testing.T) subPathNode {
	t.Helper()
	if os.Geteuid() != 0 {
		integration.Require(t, "bind mounts need root")
	}
	dir := t.TempDir()
	n := subPathNode{podsDir: filepath.Join(dir, "pods"), outside: filepath.Join(dir, "host")}
	n.vol = emptyDirPath(n.podsDir, "uid-1", "vol")
	for _, d := range []string{n.vol, n.outside} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(n.outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removePodDir(n.podsDir, "uid-1"); err != nil {
			t.Error(err)
		}
	})
	return n
}

// A subPath whose path in the volume leads out of it through a symbolic
// link a container planted (absolute, relative, or in a middle component)
// is refused and nothing is bound; a link that stays in the volume is
// followed, and the bind shows the directory it leads to.
func TestPrepareSubPathLinks(t *testing.T) {
	t.Parallel()
	n := newSubPathNode(t)
	for name, target := range map[string]string{"abs": n.outside, "rel": "../../../../../host", "mid": n.outside, "inside": "data"} {
		if err := os.Symlink(target, filepath.Join(n.vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(n.vol, "data"), 0o777); err != nil {
		t.Fatal(err)
	}
	for i, sub := range []string{"abs", "rel", "mid/secret"} {
		_, err := prepareSubPath(n.podsDir, "uid-1", "vol", "app", i, n.vol, sub)
		if err == nil || !strings.Contains(err.Error(), "outside the volume") {
			t.Errorf("subPath %s: err %v, want outside the volume", sub, err)
		}
	}
	if m, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(n.podsDir)); len(m) != 0 {
		t.Errorf("refused subPaths left mounts: %v", m)
	}
	bind, err := prepareSubPath(n.podsDir, "uid-1", "vol", "app", 3, n.vol, "inside")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bind, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.vol, "data", "f")); err != nil {
		t.Errorf("a file written through the bind is not in the linked directory: %v", err)
	}
	// Prepared again (the container restarts): one bind, not two.
	if _, err := prepareSubPath(n.podsDir, "uid-1", "vol", "app", 3, n.vol, "inside"); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(bind)); len(m) != 1 {
		t.Errorf("%d mounts on the bind after a second preparation, want 1", len(m))
	}
}

// A subPath that is a file is bound as a file.
func TestPrepareSubPathFile(t *testing.T) {
	t.Parallel()
	n := newSubPathNode(t)
	if err := os.WriteFile(filepath.Join(n.vol, "conf"), []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	bind, err := prepareSubPath(n.podsDir, "uid-1", "vol", "app", 0, n.vol, "conf")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(bind); err != nil || string(b) != "c" {
		t.Errorf("bound file reads %q, %v", b, err)
	}
}

// makeSubPath does not make directories through a link to the host.
func TestMakeSubPathLink(t *testing.T) {
	t.Parallel()
	n := newSubPathNode(t)
	if err := os.Symlink(n.outside, filepath.Join(n.vol, "evil")); err != nil {
		t.Fatal(err)
	}
	if err := makeSubPath(n.vol, "evil/made"); err == nil {
		t.Error("makeSubPath through a link: no error")
	}
	if _, err := os.Stat(filepath.Join(n.outside, "made")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory was made on the host: %v", err)
	}
}

// Removing the pod's directory unmounts a subPath bind of a host directory
// first: the host's files survive.
func TestRemovePodDirKeepsBoundHostFiles(t *testing.T) {
	t.Parallel()
	n := newSubPathNode(t)
	if _, err := prepareSubPath(n.podsDir, "uid-1", "host", "app", 0, filepath.Dir(n.outside), filepath.Base(n.outside)); err != nil {
		t.Fatal(err)
	}
	if err := removePodDir(n.podsDir, "uid-1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(n.outside, "secret")); err != nil || string(b) != "host" {
		t.Errorf("host file after the pod's removal: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(n.podsDir, "uid-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod directory left: %v", err)
	}
}

// subPathExpr reads the container's environment; a variable that is
// missing or empty fails the container, naming it.
func TestSubPathExpr(t *testing.T) {
	t.Parallel()
	n := newSubPathNode(t)
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/logs", SubPathExpr: "logs/$(POD_NAME)"}}
	})
	in := containerInput{Input: criconfig.Input{Pod: pod, Container: &pod.Spec.Containers[0]}, podsDir: n.podsDir}
	mounts, err := containerMounts(in, map[string]string{"POD_NAME": "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(n.vol, "logs", "web-1")); err != nil || !st.IsDir() {
		t.Errorf("subPathExpr directory not made: %v", err)
	}
	if want := filepath.Join(subPathDir(n.podsDir, "uid-1"), "vol", "app", "0"); mounts[0].HostPath != want {
		t.Errorf("host path %s, want the bind %s", mounts[0].HostPath, want)
	}
	for _, vars := range []map[string]string{nil, {"POD_NAME": ""}} {
		_, err := containerMounts(in, vars)
		if err == nil || !strings.Contains(err.Error(), "missing value for POD_NAME") {
			t.Errorf("vars %v: err %v, want missing value for POD_NAME", vars, err)
		}
	}
}
