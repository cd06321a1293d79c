package containergc

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

// TestCollectorRemovesLogs lays out /var/log/pods and /var/log/containers on
// real files: only the directory of the deleted pod and the dangling symlinks
// of gone or exited containers go.
func TestCollectorRemovesLogs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	podsDir, ctrsDir := filepath.Join(root, "pods"), filepath.Join(root, "containers")
	mkdir := func(p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"default_web_uid-live/app", "kube-system_dns_uid-gone/dns", "ns_old-style_uid-gone2"} {
		mkdir(filepath.Join(podsDir, d))
	}
	if err := os.WriteFile(filepath.Join(podsDir, "default_web_uid-live/app/0.log"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A plain file in the pods directory is not a pod's log directory.
	if err := os.WriteFile(filepath.Join(podsDir, "stray_file_uid-gone"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mkdir(ctrsDir)
	link := func(name, target string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(ctrsDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	link("web_default_app-live.log", filepath.Join(podsDir, "default_web_uid-live/app/0.log"))    // target exists
	link("web_default_app-running.log", filepath.Join(podsDir, "default_web_uid-live/app/1.log")) // dangling, container running
	link("web_default_app-exited.log", filepath.Join(podsDir, "default_web_uid-live/app/2.log"))  // dangling, container exited
	link("dns_kube-system_dns-vanished.log", filepath.Join(podsDir, "kube-system_dns_uid-gone/dns/0.log"))
	link("not-a-log-link", filepath.Join(root, "nowhere")) // no .log suffix: left alone

	rt := apitest.NewFakeRuntimeService()
	now := time.Now()
	rt.SetFakeContainers([]*apitest.FakeContainer{
		fakeContainer("running", "uid-live", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, now),
		fakeContainer("exited", "uid-live", "app", runtimeapi.ContainerState_CONTAINER_EXITED, now),
	})
	c, err := New(Policy{MaxPerPodContainer: 5, MaxContainers: -1}, 0, Deps{
		Runtime: rt,
		Pods:    pods{deleted: map[string]bool{"uid-gone": true, "uid-gone2": true}},
		LogDirs: LogDirs{Pods: podsDir, Containers: ctrsDir},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.GarbageCollect(t.Context(), false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"default_web_uid-live", "stray_file_uid-gone"}, list(t, podsDir)); diff != "" {
		t.Errorf("pod log dirs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"not-a-log-link", "web_default_app-live.log", "web_default_app-running.log"}, list(t, ctrsDir)); diff != "" {
		t.Errorf("container log links (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(podsDir, "default_web_uid-live/app/0.log")); err != nil {
		t.Errorf("live pod's log: %v", err)
	}
}

// TestCollectorLogDirsMissing: absent directories are not an error.
func TestCollectorLogDirsMissing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c, err := New(DefaultPolicy(), 0, Deps{
		Runtime: apitest.NewFakeRuntimeService(),
		Pods:    pods{},
		LogDirs: LogDirs{Pods: filepath.Join(root, "no-pods"), Containers: filepath.Join(root, "no-containers")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.GarbageCollect(t.Context(), false, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestLogNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{"ns_pod_1234-abcd": "1234-abcd", "legacyuid": "legacyuid", "ns_pod_": ""} {
		if got := podUIDOfLogDir(name); got != want {
			t.Errorf("podUIDOfLogDir(%q) = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{"p_ns_c-0123abc.log": "0123abc", "p_ns_my-ctr-ff00.log": "ff00", "p_ns_c-.log": "", "p_ns_c-01.txt": "", "noid.log": ""} {
		got, ok := containerIDOfLogLink(name)
		if got != want || ok != (want != "") {
			t.Errorf("containerIDOfLogLink(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func list(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}
