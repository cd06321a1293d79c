package e2e

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
)

// extraRef is an image the disk-pressure test imports and no pod uses.
const extraRef = "localhost/nodekeeper/extra:1"

// rootOnTmpfs returns a Prepare that mounts a tmpfs of sizeMiB at the
// agent's root dir (so nodefs and imagefs are that filesystem) and puts an
// unused image of extraMiB random bytes in its images directory, which the
// agent imports at start. The tmpfs is unmounted at cleanup, after the agent
// stopped.
func rootOnTmpfs(sizeMiB, extraMiB int) func(a *Agent) {
	return func(a *Agent) {
		mountTmpfs(a.t, a.Root, sizeMiB)
		writeExtraImage(a.t, a.Root, extraMiB)
	}
}

// splitTmpfs is rootOnTmpfs with a second tmpfs of imageMiB at the managed
// containerd's state directory, a separate image filesystem.
func splitTmpfs(rootMiB, imageMiB, extraMiB int) func(a *Agent) {
	return func(a *Agent) {
		mountTmpfs(a.t, a.Root, rootMiB)
		mountTmpfs(a.t, filepath.Join(a.Root, "containerd"), imageMiB)
		writeExtraImage(a.t, a.Root, extraMiB)
	}
}

// mountTmpfs mounts a tmpfs of sizeMiB at dir (made first), unmounted at
// cleanup.
func mountTmpfs(t testing.TB, dir string, sizeMiB int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0755", sizeMiB)); err != nil {
		t.Fatalf("mount a %dMi tmpfs at %s: %v", sizeMiB, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && !os.IsNotExist(err) {
			t.Logf("cleanup: unmount %s: %v", dir, err)
		}
	})
}

// writeExtraImage writes an image of extraMiB random bytes, extraRef, to
// root/images, which the agent imports at start.
func writeExtraImage(t testing.TB, root string, extraMiB int) {
	t.Helper()
	data := make([]byte, extraMiB<<20)
	_, _ = rand.Read(data) // random: nothing compresses or dedups it
	img := ocibuild.Image{Ref: extraRef, Files: []ocibuild.File{{Path: "/blob", Data: data}}, Entrypoint: []string{"/blob"}}
	if err := os.MkdirAll(filepath.Join(root, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ocibuild.WriteFile(filepath.Join(root, "images", "extra.tar"), img); err != nil {
		t.Fatal(err)
	}
}

// statfsMiB returns the size and available space of the filesystem at path.
func statfsMiB(t testing.TB, path string) (size, avail int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Blocks) * st.Bsize >> 20, int64(st.Bavail) * st.Bsize >> 20
}

// imageTags lists the agent's images' tags.
func (a *Agent) imageTags() []string {
	a.t.Helper()
	imgs, err := a.CRI().ListImages(a.t.Context(), nil)
	if err != nil {
		a.t.Fatalf("list images: %v", err)
	}
	var tags []string
	for _, im := range imgs {
		tags = append(tags, im.RepoTags...)
	}
	slices.Sort(tags)
	return tags
}

// TestDiskPressureOwnFilesystem: the agent's root dir (nodefs = imagefs) is
// a 320Mi tmpfs of the test's own, with the nodefs.available hard threshold
// at 120Mi and an unused 24Mi image imported. A pod fills its emptyDir
// until the filesystem is below the threshold by more than the image frees: the eviction manager
// first reclaims the unused image (not enough), then evicts the filler, the
// top-ranked pod by disk usage (Failed/Evicted, the kubelet's message naming
// ephemeral-storage), while a bystander keeps running and /node reports
// DiskPressure; a pod applied then is rejected by admission.
func TestDiskPressureOwnFilesystem(t *testing.T) {
	const sizeMiB, thresholdMiB, extraMiB = 320, 120, 24
	a := StartAgent(t, Options{
		Prepare: rootOnTmpfs(sizeMiB, extraMiB),
		Config: fmt.Sprintf(`evictionHard:
  memory.available: 100Mi
  nodefs.available: %dMi
  imagefs.available: %dMi
`, thresholdMiB, thresholdMiB),
	})
	if tags := a.imageTags(); !slices.Contains(tags, extraRef) {
		t.Fatalf("the extra image was not imported: %v", tags)
	}
	a.applyLocal(localPod("bystander", "BestEffort", `["sleep"]`, ""))
	t.Cleanup(func() { a.deleteLocal("bystander") })
	a.WaitPod("bystander", "running", running)
	a.Eventually("no DiskPressure before the fill", 60*time.Second, a.conditionIs(v1.NodeDiskPressure, v1.ConditionFalse))

	// Fill to 40Mi below what reclaiming the image frees (its blob and its
	// unpacked snapshot, twice its size): that reclaim is not enough,
	// evicting the filler (its emptyDir) is.
	_, avail := statfsMiB(t, a.Root)
	fillMiB := avail - thresholdMiB + 2*extraMiB + 40
	if fillMiB <= 40 || fillMiB > avail-8 {
		t.Fatalf("the tmpfs has %dMi available; cannot fill %dMi", avail, fillMiB)
	}
	a.applyLocal(localPod("filler", "BestEffort", fmt.Sprintf(`["fill", "/cache/x", "%dMi"]`, fillMiB), `    volumeMounts: [{name: cache, mountPath: /cache}]
  volumes:
  - name: cache
    emptyDir: {}
`))
	t.Cleanup(func() { a.deleteLocal("filler") })

	p := a.WaitPod("filler", "evicted", evicted)
	if want := "The node was low on resource: ephemeral-storage."; !strings.HasPrefix(p.Status.Message, want) {
		t.Errorf("message %q, want prefix %q", p.Status.Message, want)
	}
	if tags := a.imageTags(); slices.Contains(tags, extraRef) || !slices.Contains(tags, testbox) {
		t.Errorf("images after the eviction: %v; want the extra one gone, testbox kept", tags)
	}
	log := a.Log()
	removed, evictedAt := strings.Index(log, `msg="removing image"`), strings.Index(log, "reason=Evicted")
	if removed < 0 || evictedAt < 0 || removed > evictedAt {
		t.Errorf("image removal logged at %d, eviction at %d: want the image reclaimed first\n%s", removed, evictedAt, tail(log, 40))
	}
	if c := a.nodeCondition(v1.NodeDiskPressure); c != v1.ConditionTrue {
		t.Errorf("DiskPressure right after the eviction is %q, want True (the transition period holds it)", c)
	}
	a.waitEvictionsMetric("nodefs.available", 1)
	// While the condition holds, admission rejects a new ordinary pod.
	a.applyLocal(localPod("late", "BestEffort", `["sleep"]`, ""))
	t.Cleanup(func() { a.deleteLocal("late") })
	late := a.WaitPod("late", "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if want := "The node had condition: [DiskPressure]. "; late.Status.Reason != "Evicted" || late.Status.Message != want {
		t.Errorf("late pod: reason %q message %q, want Evicted and %q", late.Status.Reason, late.Status.Message, want)
	}
	if p := a.Pod("bystander"); p == nil || !running(p) {
		t.Errorf("the bystander was disturbed: %s", podSummary(p))
	}
}

// TestDiskPressureSeparateImageFs: the agent's root dir (nodefs) is a
// 160Mi tmpfs and its containerd's state dir (imagefs: images and writable
// layers) a 320Mi tmpfs of its own, with imagefs.available at 120Mi and an
// unused 24Mi image. A pod writes 60Mi into its writable layer, then a
// ballast takes the image filesystem below the threshold by more than the
// image frees: the image goes first, then the filler (top-ranked by imagefs
// usage) is evicted; a bystander keeps running and /node reports
// DiskPressure.
func TestDiskPressureSeparateImageFs(t *testing.T) {
	const thresholdMiB, extraMiB = 120, 24
	a := StartAgent(t, Options{
		Prepare: splitTmpfs(160, 320, extraMiB),
		Config: fmt.Sprintf(`evictionHard:
  memory.available: 100Mi
  nodefs.available: 10Mi
  imagefs.available: %dMi
`, thresholdMiB),
	})
	if tags := a.imageTags(); !slices.Contains(tags, extraRef) {
		t.Fatalf("the extra image was not imported: %v", tags)
	}
	a.applyLocal(localPod("bystander", "BestEffort", `["sleep"]`, ""))
	t.Cleanup(func() { a.deleteLocal("bystander") })
	a.WaitPod("bystander", "running", running)
	a.Eventually("no DiskPressure before the fill", 60*time.Second, a.conditionIs(v1.NodeDiskPressure, v1.ConditionFalse))

	// containerd measures writable layers every 10s or so: the filler
	// writes 60Mi first and the test waits until the Summary shows it, then
	// puts a ballast file on the image filesystem (nobody's usage) that
	// leaves it 20Mi below the threshold even after the image is reclaimed;
	// evicting the filler (its container removed) is enough.
	const fillMiB = 60
	a.applyLocal(localPod("filler", "BestEffort", fmt.Sprintf(`["fill", "/tmp/x", "%dMi"]`, fillMiB), ""))
	t.Cleanup(func() { a.deleteLocal("filler") })
	a.WaitPod("filler", "running", running)
	a.Eventually("the filler's writable layer in the Summary", 60*time.Second, func() (bool, string) {
		used := a.rootfsUsed("filler")
		return used >= fillMiB<<20, fmt.Sprintf("rootfs used %d bytes", used)
	})
	imagefs := filepath.Join(a.Root, "containerd")
	_, avail := statfsMiB(t, imagefs)
	ballast := avail - thresholdMiB + 2*extraMiB + 20
	if ballast <= 0 || ballast > avail-8 {
		t.Fatalf("the image tmpfs has %dMi available; cannot write a %dMi ballast", avail, ballast)
	}
	if err := os.WriteFile(filepath.Join(imagefs, "ballast"), make([]byte, ballast<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	p := a.WaitPod("filler", "evicted", evicted)
	if want := "The node was low on resource: ephemeral-storage."; !strings.HasPrefix(p.Status.Message, want) {
		t.Errorf("message %q, want prefix %q", p.Status.Message, want)
	}
	if tags := a.imageTags(); slices.Contains(tags, extraRef) || !slices.Contains(tags, testbox) {
		t.Errorf("images after the eviction: %v; want the extra one gone, testbox kept", tags)
	}
	log := a.Log()
	removed, evictedAt := strings.Index(log, `msg="removing image"`), strings.Index(log, "reason=Evicted")
	if removed < 0 || evictedAt < 0 || removed > evictedAt {
		t.Errorf("image removal logged at %d, eviction at %d: want the image reclaimed first\n%s", removed, evictedAt, tail(log, 40))
	}
	if !strings.Contains(log, "signal=imagefs.available") {
		t.Errorf("no imagefs.available reclaim logged:\n%s", tail(log, 40))
	}
	if c := a.nodeCondition(v1.NodeDiskPressure); c != v1.ConditionTrue {
		t.Errorf("DiskPressure right after the eviction is %q, want True", c)
	}
	a.waitEvictionsMetric("imagefs.available", 1)
	if p := a.Pod("bystander"); p == nil || !running(p) {
		t.Errorf("the bystander was disturbed: %s", podSummary(p))
	}
}

// rootfsUsed returns the sum of the writable-layer bytes of the pod's
// containers in the agent's /stats/summary (0 when absent).
func (a *Agent) rootfsUsed(pod string) uint64 {
	a.t.Helper()
	resp, err := http.Get(a.URL + "/stats/summary")
	if err != nil {
		a.t.Fatalf("GET /stats/summary: %v", err)
	}
	defer resp.Body.Close()
	var sum struct {
		Pods []struct {
			PodRef     struct{ Name string }
			Containers []struct {
				Rootfs *struct{ UsedBytes *uint64 }
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil {
		a.t.Fatalf("GET /stats/summary: %v", err)
	}
	var used uint64
	for _, p := range sum.Pods {
		if p.PodRef.Name != pod {
			continue
		}
		for _, c := range p.Containers {
			if c.Rootfs != nil && c.Rootfs.UsedBytes != nil {
				used += *c.Rootfs.UsedBytes
			}
		}
	}
	return used
}

// waitEvictionsMetric waits until the agent's kubelet_evictions counter for
// signal is want: the manager counts an eviction after the kill returns,
// which is after the pod's status shows it.
func (a *Agent) waitEvictionsMetric(signal string, want float64) {
	a.t.Helper()
	a.Eventually(fmt.Sprintf("kubelet_evictions{eviction_signal=%q} %v", signal, want), 30*time.Second, func() (bool, string) {
		n := a.evictionsMetric(signal)
		return n == want, fmt.Sprint(n)
	})
}

// evictionsMetric returns the agent's kubelet_evictions counter for signal
// from /metrics, or -1 when it is absent.
func (a *Agent) evictionsMetric(signal string) float64 {
	a.t.Helper()
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		a.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("GET /metrics: %v", err)
	}
	prefix := fmt.Sprintf("kubelet_evictions{eviction_signal=%q} ", signal)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				a.t.Fatalf("/metrics: %q: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// nodeCondition returns the status of the node condition c from GET /node.
func (a *Agent) nodeCondition(c v1.NodeConditionType) v1.ConditionStatus {
	a.t.Helper()
	n, err := a.node()
	if err != nil {
		a.t.Fatalf("GET /node: %v", err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == c {
			return cond.Status
		}
	}
	return ""
}
