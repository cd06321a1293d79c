package imagegc

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// TestContainerdIntegration runs image GC against a real containerd: images are
// built and imported by the test, used by real containers in a host-network pod,
// and removed through CRI. It runs twice: on Debian's containerd 1.6.20 (the one
// on our machines), which reports no pinned images, and on containerd 1.7 built
// from hack/containerd, where one image is pinned by label and must survive.
func TestContainerdIntegration(t *testing.T) {
	t.Run("debian", func(t *testing.T) {
		t.Parallel()
		testContainerdGC(t, containerdtest.Start(t), false)
	})
	t.Run("containerd-1.7-pinned", func(t *testing.T) {
		t.Parallel()
		bin := containerdtest.BuildContainerd(t)
		testContainerdGC(t, containerdtest.StartWith(t, containerdtest.Options{BinDir: bin}), true)
	})
}

// testContainerdGC is the GC scenario on ctd. With pin (containerd ≥ 1.7), it
// adds an image labelled io.cri-containerd.pinned=pinned, which the runtime
// must report pinned, as it must the sandbox image, and GC must never remove.
func testContainerdGC(t *testing.T, ctd *containerdtest.Containerd, pin bool) {
	start := time.Now()
	t.Logf("containerd %s", ctd.RuntimeVersion)
	ctx := t.Context()

	app := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/app:1", Runnable: true})
	usedFirst := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/used-first:1", Runnable: true, Pad: 3000})
	usedLater := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/used-later:1", Runnable: true, Pad: 2000})
	neverUsed := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/never-used:1", Pad: 1000})
	young := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/young:1", Pad: 500})
	ctd.Import(t, app, usedFirst, usedLater, neverUsed)
	// The pinned image is never used, as old as never-used and bigger than
	// what GC must free below: without the pin, GC would remove it.
	var pinned []string // its ID, with pin
	if pin {
		img := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/pinned:1", Pad: 4000})
		ctd.Import(t, img)
		ctd.Pin(t, img)
		pinned = []string{img.ID}
	}

	// The image filesystem is really the snapshotter's (ImageFsInfo); its
	// capacity is set by the test so that GC must free a known amount.
	var fs FsStats
	var statfsPath string
	var removed []string // only GC's goroutine (this one) appends
	images := &recordingService{ImageService: ctd.CRI, removed: &removed}
	rec := &fakeRecorder{}
	reg := prometheus.NewPedanticRegistry()
	m, err := New(Config{
		Policy:       Policy{HighThresholdPercent: 85, LowThresholdPercent: 85, MinAge: time.Hour},
		SandboxImage: containerdtest.SandboxImageRef,
	}, Deps{
		Images: images, ImageFs: ctd.CRI, InUse: ContainerImages(ctd.CRI),
		Statfs: func(path string) (FsStats, error) {
			statfsPath = path
			return fs, nil
		},
		Recorder: rec, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	fs = FsStats{CapacityBytes: 1 << 40, AvailableBytes: 1 << 39} // 50% used: detection only

	// First detection: every image present is "detected long ago".
	m.detectOnce(ctx, time.Now())
	pod := ctd.RunPod(t, "gc", "uid-gc")

	// used-first runs, is seen in use, stops and is removed (as container GC
	// would); then used-later runs and stops, and its exited container stays.
	var exited string
	for i, img := range []containerdtest.Built{usedFirst, usedLater} {
		id := ctd.CreateContainer(t, pod, fmt.Sprintf("step%d", i), 0, img.Ref, nil, true)
		if err := m.GarbageCollect(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := ctd.CRI.StopContainer(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := ctd.CRI.RemoveContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		exited = id
	}
	ctd.CreateContainer(t, pod, "app", 0, app.Ref, nil, true) // keeps running
	ctd.Import(t, young)                                      // first detected now: too young

	sizes := map[string]int64{}
	list, err := ctd.CRI.ListImages(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var gotPinned []string
	for _, img := range list {
		sizes[img.Id] = int64(img.Size)
		if img.Pinned {
			gotPinned = append(gotPinned, img.Id)
		}
	}
	// containerd 1.7 also pins the sandbox image (its CRI plugin labels the
	// image named by sandbox_image as it learns of it, imported or pulled);
	// 1.6.20 pins nothing, and GC keeps the sandbox image as the configured one.
	wantPinned := slices.Clone(pinned)
	if pin {
		wantPinned = append(wantPinned, ctd.Sandbox.ID)
	}
	if diff := cmp.Diff(sorted(wantPinned), sorted(gotPinned)); diff != "" {
		t.Errorf("pinned images in ListImages (-want +got):\n%s", diff)
	}
	// Over the threshold by one byte more than never-used: GC must remove
	// never-used (never used) and then used-first (least recently used), and
	// stop before used-later.
	want := sizes[neverUsed.ID] + 1
	fs = FsStats{CapacityBytes: 1_000_000_000, AvailableBytes: 150_000_000 - want}
	if err := m.GarbageCollect(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{neverUsed.ID, usedFirst.ID}, removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(statfsPath, ctd.Root) {
		t.Errorf("image filesystem %q is not under containerd's root %q", statfsPath, ctd.Root)
	}
	wantLeft := append([]string{ctd.Sandbox.ID, app.ID, usedLater.ID, young.ID}, pinned...)
	if diff := cmp.Diff(sorted(wantLeft), imageIDs(t, ctd)); diff != "" {
		t.Errorf("images after GC (-want +got):\n%s", diff)
	}

	// Eviction's reclaim: every unused image old enough goes; the sandbox
	// image, the running container's, the exited container's and the young one
	// stay. Once the exited container is removed, its image goes too.
	if err := m.DeleteUnusedImages(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	wantLeft = append([]string{ctd.Sandbox.ID, app.ID, usedLater.ID, young.ID}, pinned...)
	if diff := cmp.Diff(sorted(wantLeft), imageIDs(t, ctd)); diff != "" {
		t.Errorf("images after DeleteUnusedImages with an exited container (-want +got):\n%s", diff)
	}
	if err := ctd.CRI.RemoveContainer(ctx, exited); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteUnusedImages(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	wantLeft = append([]string{ctd.Sandbox.ID, app.ID, young.ID}, pinned...)
	if diff := cmp.Diff(sorted(wantLeft), imageIDs(t, ctd)); diff != "" {
		t.Errorf("images after DeleteUnusedImages (-want +got):\n%s", diff)
	}
	if got := counter(t, m, "space"); got != 3 {
		t.Errorf("kubelet_image_garbage_collected_total{reason=space} = %v, want 3", got)
	}
	if got := rec.reasons(); len(got) != 0 {
		t.Errorf("events = %v", got)
	}
	t.Logf("integration test took %v", time.Since(start))
}

// recordingService records successful removals in order.
type recordingService struct {
	ImageService
	removed *[]string
}

func (r *recordingService) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	err := r.ImageService.RemoveImage(ctx, image)
	if err == nil {
		*r.removed = append(*r.removed, image.Image)
	}
	return err
}

func imageIDs(t *testing.T, ctd *containerdtest.Containerd) []string {
	t.Helper()
	list, err := ctd.CRI.ListImages(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, img := range list {
		ids = append(ids, img.Id)
	}
	return sorted(ids)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
