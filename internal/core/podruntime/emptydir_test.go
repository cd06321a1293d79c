package podruntime

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// ownerOf is path's group and full mode.
func ownerOf(t *testing.T, path string) (gid uint32, mode os.FileMode) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Gid, info.Mode()
}

// TestEmptyDirMode: an emptyDir on the default medium is mode 0777 whatever
// the umask, so that a container of any user can write in it (node e2e:
// "EmptyDir volumes volume on default medium should have the correct mode"
// and "should support (non-root,0666,default)").
func TestEmptyDirMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	})
	host, err := volumeHostPath(dir, pod, &pod.Spec.Volumes[0], 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, mode := ownerOf(t, host); mode != os.ModeDir|0o777 {
		t.Errorf("emptyDir mode %v, want drwxrwxrwx", mode)
	}
}

// TestEmptyDirFSGroup: with a pod fsGroup a new emptyDir gets that group and
// the set-group-ID bit, so that a file a root container makes in it belongs
// to the group (node e2e: "new files should be created with FSGroup
// ownership when container is root"); its permissions stay rwxrwxrwx. A
// volume set up before is not changed again.
func TestEmptyDirFSGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "chown needs root")
	}
	dir := filepath.Join(t.TempDir(), "v")
	gid := int64(123)
	if err := setUpEmptyDir(dir, false, 0, &gid, false); err != nil {
		t.Fatal(err)
	}
	if g, mode := ownerOf(t, dir); g != 123 || mode != os.ModeDir|os.ModeSetgid|0o777 {
		t.Errorf("emptyDir gid %d mode %v, want 123 dgrwxrwxrwx", g, mode)
	}
	file := filepath.Join(dir, "test-file")
	if err := os.WriteFile(file, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	if g, _ := ownerOf(t, file); g != 123 {
		t.Errorf("new file gid %d, want 123", g)
	}
	// Set up again (the next container): what the containers changed stays.
	if err := os.Chown(dir, -1, 0); err != nil {
		t.Fatal(err)
	}
	if err := setUpEmptyDir(dir, false, 0, &gid, false); err != nil {
		t.Fatal(err)
	}
	if g, _ := ownerOf(t, dir); g != 0 {
		t.Errorf("a volume set up before had its group changed again to %d", g)
	}
}

// TestEmptyDirMemoryFSGroup: a Memory emptyDir is a tmpfs whose root has
// the kernel's mode 1777, as the kubelet mounts it, and with an fsGroup the
// group and set-group-ID bit on top (node e2e: "new files should be created
// with FSGroup ownership when container is root", on tmpfs).
func TestEmptyDirMemoryFSGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "v")
	t.Cleanup(func() {
		if err := unmountIfMounted(dir); err != nil {
			t.Error(err)
		}
	})
	gid := int64(123)
	if err := setUpEmptyDir(dir, true, 1<<20, &gid, false); err != nil {
		t.Fatal(err)
	}
	if m, err := mountinfo.Mounted(dir); err != nil || !m {
		t.Fatalf("no tmpfs on the volume: %v", err)
	}
	if g, mode := ownerOf(t, dir); g != 123 || mode != os.ModeDir|os.ModeSetgid|os.ModeSticky|0o777 {
		t.Errorf("tmpfs emptyDir gid %d mode %v, want 123 dgtrwxrwxrwx", g, mode)
	}
	file := filepath.Join(dir, "test-file")
	if err := os.WriteFile(file, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	if g, _ := ownerOf(t, file); g != 123 {
		t.Errorf("new file gid %d, want 123", g)
	}
	// Set up again: no second tmpfs over the first, the file is still there.
	if err := setUpEmptyDir(dir, true, 1<<20, &gid, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the file is gone after a second set-up: %v", err)
	}
}

// TestSubPathMode: a missing subPath is made with the volume directory's
// mode, set-group-ID and sticky bits included (node e2e: "nonexistent
// volume subPath should have the correct mode and owner using FSGroup").
func TestSubPathMode(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.Chmod(root, os.ModeSetgid|os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := makeSubPath(root, "a/b"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b"} {
		if _, mode := ownerOf(t, filepath.Join(root, p)); mode != os.ModeDir|os.ModeSetgid|os.ModeSticky|0o777 {
			t.Errorf("%s: mode %v, want dgtrwxrwxrwx", p, mode)
		}
	}
	// An existing subPath is left as it is.
	if err := os.Chmod(filepath.Join(root, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := makeSubPath(root, "a/c"); err != nil {
		t.Fatal(err)
	}
	if _, mode := ownerOf(t, filepath.Join(root, "a")); mode != os.ModeDir|0o700 {
		t.Errorf("existing a: mode %v, want drwx------", mode)
	}
}

// TestTearDownVolumes: the volumes of a stopped pod are unmounted and
// removed, a Memory emptyDir's tmpfs included (node e2e: "Kubelet Volume
// Manager ... should remove the volume from the node"); the rest of the
// pod's directory stays for RemovePod.
func TestTearDownVolumes(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "mounting a tmpfs needs root")
	}
	f := newFixture(t)
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{
			{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
			{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		}
	})
	podsDir := f.m.cfg.PodsDir
	t.Cleanup(func() {
		if err := removePodDir(podsDir, string(pod.UID)); err != nil {
			t.Error(err)
		}
	})
	var dirs []string
	for i := range pod.Spec.Volumes[:2] {
		dir, err := volumeHostPath(podsDir, pod, &pod.Spec.Volumes[i], 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	if err := f.m.setUpVolumes(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	info, ready := f.m.vols.HostPath(pod, &pod.Spec.Volumes[2])
	if !ready {
		t.Fatal("downwardAPI volume not written")
	}
	dirs = append(dirs, info)
	termLog, err := newTerminationLog(podsDir, string(pod.UID), "app")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.TearDownVolumes(pod.UID); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s left after the tear-down: %v", d, err)
		}
	}
	if _, err := os.Stat(termLog); err != nil {
		t.Errorf("the pod's termination log is gone with its volumes: %v", err)
	}
	// Again: nothing to do.
	if err := f.m.TearDownVolumes(pod.UID); err != nil {
		t.Error(err)
	}
}
