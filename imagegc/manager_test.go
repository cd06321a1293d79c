package imagegc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// The cri-api fakes and our CRI client satisfy the consumer-side interfaces.
var (
	_ nodeapi.Recorder = (*fakeRecorder)(nil)
	_ ImageService     = (*apitest.FakeImageService)(nil)
	_ ImageFs          = (*apitest.FakeImageService)(nil)
	_ ContainerLister  = (*apitest.FakeRuntimeService)(nil)
	_ ImageService     = (*cri.Client)(nil)
	_ ImageFs          = (*cri.Client)(nil)
	_ ContainerLister  = (*cri.Client)(nil)
)

// fakeRecorder records events; node is the node they must be about.
type fakeRecorder struct {
	node   string
	mu     sync.Mutex
	events []string // guarded by mu: reason, with what is wrong about the event
	msgs   []string // guarded by mu: the events' messages
}

func (r *fakeRecorder) Event(object runtime.Object, eventType, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msg)
	if ref, ok := object.(*v1.ObjectReference); !ok || *ref != *nodeapi.NodeRef(r.node) {
		reason += fmt.Sprintf(" about %#v, not node %q", object, r.node)
	}
	if eventType != v1.EventTypeWarning {
		reason += " of type " + eventType
	}
	r.events = append(r.events, reason)
}

func (r *fakeRecorder) Eventf(object runtime.Object, eventType, reason, format string, args ...any) {
	r.Event(object, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *fakeRecorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.Eventf(object, eventType, reason, format, args...)
}

// reasons returns the reasons of the Warning events about the node, and what
// is wrong with the others.
func (r *fakeRecorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *fakeRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// fixture is a Manager over cri-api fakes with a settable filesystem.
type fixture struct {
	images *apitest.FakeImageService
	rt     *apitest.FakeRuntimeService
	rec    *fakeRecorder
	reg    *prometheus.Registry
	m      *Manager

	mu sync.Mutex
	fs FsStats // guarded by mu
}

func (f *fixture) setFs(capacity, available int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fs = FsStats{CapacityBytes: capacity, AvailableBytes: available}
}

// newFixture creates images (id → size); ids listed in pinned are pinned. "pause"
// is the sandbox image. The Manager runs on the real clock.
func newFixture(t *testing.T, p Policy, sizes map[string]uint64, pinned ...string) *fixture {
	t.Helper()
	return newConfiguredFixture(t, Config{Policy: p}, sizes, pinned...)
}

// newConfiguredFixture is newFixture with the Manager's Config (its sandbox
// image is "pause").
func newConfiguredFixture(t *testing.T, cfg Config, sizes map[string]uint64, pinned ...string) *fixture {
	t.Helper()
	f := &fixture{images: apitest.NewFakeImageService(), rt: apitest.NewFakeRuntimeService(), rec: &fakeRecorder{node: "node-1"}, reg: prometheus.NewPedanticRegistry()}
	for _, id := range pinned {
		f.images.SetFakeImagePinned(id, true)
	}
	ids := make([]string, 0, len(sizes))
	for id := range sizes {
		ids = append(ids, id)
	}
	f.images.SetFakeImages(ids)
	for id, size := range sizes {
		f.images.Images[id].Size = size
	}
	f.images.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/var/lib/images"}}})
	f.setFs(1000, 900)
	cfg.SandboxImage = "pause"
	m, err := New(cfg, Deps{
		Images: f.images, ImageFs: f.images, InUse: ContainerImages(f.rt),
		Statfs: func(path string) (FsStats, error) {
			if path != "/var/lib/images" {
				return FsStats{}, fmt.Errorf("statfs of unexpected path %q", path)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.fs, nil
		},
		Recorder: f.rec, NodeName: "node-1", Registerer: f.reg,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// run sets the containers: id → image; all running unless listed in exited.
func (f *fixture) run(containers map[string]string, exited ...string) {
	var cs []*apitest.FakeContainer
	for id, image := range containers {
		st := runtimeapi.ContainerState_CONTAINER_RUNNING
		if slices.Contains(exited, id) {
			st = runtimeapi.ContainerState_CONTAINER_EXITED
		}
		cs = append(cs, &apitest.FakeContainer{ContainerStatus: runtimeapi.ContainerStatus{Id: id, ImageRef: image, State: st}})
	}
	f.rt.SetFakeContainers(cs)
}

// add adds an image to the runtime, as a pull would.
func (f *fixture) add(id string, size uint64) {
	f.images.Lock()
	defer f.images.Unlock()
	f.images.Images[id] = &runtimeapi.Image{Id: id, Size: size}
}

func (f *fixture) remaining() []string {
	f.images.Lock()
	defer f.images.Unlock()
	var ids []string
	for id := range f.images.Images {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// counter reads kubelet_image_garbage_collected_total{reason}.
func counter(t *testing.T, m *Manager, reason string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.removed.WithLabelValues(reason).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// series counts the series of metric name in reg.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// orderingImages wraps the fake to record the order of removals.
type orderingImages struct {
	*apitest.FakeImageService
	mu      sync.Mutex
	removed []string
}

func (o *orderingImages) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	err := o.FakeImageService.RemoveImage(ctx, image)
	if err == nil {
		o.mu.Lock()
		o.removed = append(o.removed, image.Image)
		o.mu.Unlock()
	}
	return err
}

func TestNewRejectsInvalidPolicy(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Policy: Policy{HighThresholdPercent: 50, LowThresholdPercent: 60}},
		Deps{Images: apitest.NewFakeImageService(), InUse: ContainerImages(apitest.NewFakeRuntimeService())})
	if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "imageGCLowThresholdPercent") {
		t.Fatalf("New = %v, want ErrInvalidPolicy naming imageGCLowThresholdPercent", err)
	}
}

func TestGarbageCollectLRUOrder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute},
			map[string]uint64{"pause": 50, "a": 100, "b": 100, "c": 30, "d": 30, "pinned": 500}, "pinned")
		ord := &orderingImages{FakeImageService: f.images}
		f.m.deps.Images = ord

		f.m.detectOnce(ctx, time.Now()) // first detection: everything "detected long ago"
		f.run(map[string]string{"x": "b"})
		if err := f.m.GarbageCollect(ctx, time.Now()); err != nil { // 10% used: detection only
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		f.run(map[string]string{"y": "a"})
		if err := f.m.GarbageCollect(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		f.run(nil)         // y exited and container GC removed it: nothing in use but the sandbox
		f.setFs(1000, 100) // 90% used: free 100 bytes
		if err := f.m.GarbageCollect(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		// Never used (c, d: detected at the same unknown time, ordered by ID),
		// then b (used 2 minutes ago); a (used 1 minute ago) is not needed.
		if diff := cmp.Diff([]string{"c", "d", "b"}, ord.removed); diff != "" {
			t.Errorf("removal order (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"a", "pause", "pinned"}, f.remaining()); diff != "" {
			t.Errorf("remaining images (-want +got):\n%s", diff)
		}
		if got := counter(t, f.m, "space"); got != 3 {
			t.Errorf("kubelet_image_garbage_collected_total{reason=space} = %v, want 3", got)
		}
		if n := series(t, f.reg, "kubelet_image_garbage_collected_total"); n != 1 {
			t.Errorf("registered series = %d, want 1", n)
		}
		if got := f.rec.reasons(); len(got) != 0 {
			t.Errorf("events = %v, want none", got)
		}
	})
}

func TestGarbageCollectFailures(t *testing.T) {
	t.Parallel()
	pol := Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute}
	tests := []struct {
		name       string
		setup      func(f *fixture)
		wantEvents []string
		wantErr    string
		wantLeft   []string
		msgIsErr   bool // the event's message is the error's text
	}{
		{
			name: "zero capacity",
			setup: func(f *fixture) {
				f.setFs(0, 0)
			},
			wantEvents: []string{EventInvalidDiskCapacity},
			wantErr:    "invalid capacity 0",
			wantLeft:   []string{"a", "b", "pause"},
		},
		{
			name:       "not enough to free",
			setup:      func(f *fixture) { f.setFs(1000, 0) }, // wants 200, only 20 eligible
			wantEvents: []string{EventFreeDiskSpaceFailed},
			wantErr: "Insufficient free disk space on the node's image filesystem (100% of 1000 B used). " +
				"Failed to free sufficient space by deleting unused images (freed 70 bytes). " +
				"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			wantLeft: []string{"pause"},
			msgIsErr: true,
		},
		{
			name: "removal error: walk goes on and reports it",
			setup: func(f *fixture) {
				f.setFs(1000, 150) // wants 50
				f.images.InjectError("RemoveImage", errors.New("image is busy"))
			},
			wantErr:  "image is busy",
			wantLeft: []string{"a", "pause"}, // "a" failed (first in ID order), "b" freed enough
		},
		{
			name: "image fs info error",
			setup: func(f *fixture) {
				f.images.InjectError("ImageFsInfo", cri.ErrUnavailable)
			},
			wantErr:  "image filesystem stats",
			wantLeft: []string{"a", "b", "pause"},
		},
		{
			name: "list images error",
			setup: func(f *fixture) {
				f.images.InjectError("ListImages", cri.ErrTimeout)
			},
			wantErr:  "list images",
			wantLeft: []string{"a", "b", "pause"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, pol, map[string]uint64{"pause": 50, "a": 10, "b": 60})
				f.m.detectOnce(t.Context(), time.Now())
				tc.setup(f)
				err := f.m.GarbageCollect(t.Context(), time.Now())
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("GarbageCollect = %v, want error containing %q", err, tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantEvents, f.rec.reasons()); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
				if msgs := f.rec.messages(); tc.msgIsErr && !slices.Equal(msgs, []string{err.Error()}) {
					t.Errorf("event messages = %q, want the error's %q", msgs, err.Error())
				}
				if diff := cmp.Diff(tc.wantLeft, f.remaining()); diff != "" {
					t.Errorf("remaining (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestDeleteUnusedImagesWithPeriodicGCDisabled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t, Policy{HighThresholdPercent: 100, LowThresholdPercent: 80, MinAge: 2 * time.Minute},
			map[string]uint64{"pause": 1, "old": 1, "running": 1, "pinned": 1}, "pinned")
		f.run(map[string]string{"c1": "running"})
		f.m.detectOnce(ctx, time.Now())
		f.add("young", 1) // pulled just now
		if err := f.m.DeleteUnusedImages(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"pause", "pinned", "running", "young"}, f.remaining()); diff != "" {
			t.Errorf("remaining (-want +got):\n%s", diff)
		}
		time.Sleep(2 * time.Minute)
		if err := f.m.DeleteUnusedImages(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"pause", "pinned", "running"}, f.remaining()); diff != "" {
			t.Errorf("remaining after the minimum age (-want +got):\n%s", diff)
		}
	})
}

func TestRunLoop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute},
			map[string]uint64{"pause": 10, "a": 10})
		f.setFs(1000, 0) // full: every pass frees what it can, and fails
		f.images.InjectError("ImageFsInfo", cri.ErrUnavailable)
		f.images.InjectError("ImageFsInfo", cri.ErrUnavailable)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- f.m.Run(ctx) }()

		synctest.Wait() // first pass at start: detection, cache, GC (fails once: no event)
		if got := f.rec.reasons(); len(got) != 0 {
			t.Fatalf("events after one failure = %v, want none", got)
		}
		if got := len(f.m.Images()); got != 2 {
			t.Errorf("cached images = %d, want 2", got)
		}
		f.add("new", 10)
		time.Sleep(DefaultGCPeriod) // detection sees "new" at 5m; GC fails again
		synctest.Wait()
		if diff := cmp.Diff([]string{EventImageGCFailed}, f.rec.reasons()); diff != "" {
			t.Fatalf("events after two failures (-want +got):\n%s", diff)
		}
		if got := len(f.m.Images()); got != 3 {
			t.Errorf("cached images = %d, want 3", got)
		}
		time.Sleep(DefaultGCPeriod) // third GC: stats work; "a" goes, "new" is 5m old and goes too
		synctest.Wait()
		if diff := cmp.Diff([]string{"pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining (-want +got):\n%s", diff)
		}
		// The third pass still fails (not enough to free): a repeated failure.
		want := []string{EventImageGCFailed, EventFreeDiskSpaceFailed, EventImageGCFailed}
		if diff := cmp.Diff(want, f.rec.reasons()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

// takeCalls returns the CRI calls made since the last takeCalls, image
// service and runtime calls apart.
func (f *fixture) takeCalls() (images, runtime []string) {
	f.images.Lock()
	images = f.images.Called
	f.images.Called = nil
	f.images.Unlock()
	f.rt.Lock()
	runtime = f.rt.Called
	f.rt.Called = nil
	f.rt.Unlock()
	return images, runtime
}

// Step's three duties run at their own periods, in the order detection, cache
// refresh, GC, and Step returns the earliest next due time. The duties show in the CRI calls:
// detection resolves the sandbox image, lists images and containers; the cache
// refresh lists images; GC detects, then measures the image filesystem.
func TestStepDuties(t *testing.T) {
	t.Parallel()
	detect := []string{"ImageStatus", "ListImages"}
	cache := []string{"ListImages"}
	gc := []string{"ImageStatus", "ListImages", "ImageFsInfo"}
	tests := []struct {
		name string
		cfg  Config
		// wakes lists, every 30s from 0, the duties due then.
		wakes [][][]string
	}{
		{
			name: "kubelet periods: detection and GC every 5m, cache every 30s",
			cfg:  Config{Policy: DefaultPolicy()},
			wakes: [][][]string{
				{detect, cache, gc}, {cache}, {cache}, {cache}, {cache}, {cache}, {cache}, {cache}, {cache}, {cache},
				{detect, cache, gc}, {cache},
			},
		},
		{
			name: "detection 1m, cache 30s, GC 1m30s",
			cfg:  Config{Policy: DefaultPolicy(), DetectPeriod: time.Minute, GCPeriod: 90 * time.Second},
			wakes: [][][]string{
				{detect, cache, gc}, {cache}, {detect, cache}, {cache, gc}, {detect, cache}, {cache}, {detect, cache, gc},
			},
		},
		{
			name: "GC disabled: detection and cache only",
			cfg:  Config{Policy: Policy{HighThresholdPercent: 100, LowThresholdPercent: 80}, DetectPeriod: time.Minute},
			wakes: [][][]string{
				{detect, cache}, {cache}, {detect, cache}, {cache},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2025, 11, 21, 12, 0, 0, 0, time.UTC)
			f := newConfiguredFixture(t, tc.cfg, map[string]uint64{"pause": 10, "a": 10})
			for i, duties := range tc.wakes {
				at := time.Duration(i) * 30 * time.Second
				next := f.m.Step(t.Context(), t0.Add(at))
				if want := t0.Add(at + 30*time.Second); !next.Equal(want) {
					t.Errorf("Step at %v: next due %v, want %v", at, next.Sub(t0), want.Sub(t0))
				}
				var wantImages, wantRT []string
				for _, d := range duties {
					wantImages = append(wantImages, d...)
					if len(d) > 1 { // detection, also in GC, lists the containers
						wantRT = append(wantRT, "ListContainers")
					}
				}
				images, rt := f.takeCalls()
				if diff := cmp.Diff(wantImages, images); diff != "" {
					t.Errorf("image service calls at %v (-want +got):\n%s", at, diff)
				}
				if diff := cmp.Diff(wantRT, rt); diff != "" {
					t.Errorf("runtime calls at %v (-want +got):\n%s", at, diff)
				}
			}
		})
	}
}

func TestRunLoopNewImageTooYoung(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 7 * time.Minute},
			map[string]uint64{"pause": 10})
		f.setFs(1000, 100)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- f.m.Run(ctx) }()
		synctest.Wait()
		time.Sleep(time.Minute)
		f.add("late", 10)           // detected at 5m
		time.Sleep(9 * time.Minute) // GC at 5m and 10m: too young both times
		synctest.Wait()
		if diff := cmp.Diff([]string{"late", "pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining at 10m (-want +got):\n%s", diff)
		}
		time.Sleep(5 * time.Minute) // GC at 15m: 10m old
		synctest.Wait()
		if diff := cmp.Diff([]string{"pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining at 15m (-want +got):\n%s", diff)
		}
		cancel()
		<-done
	})
}

func TestRunLoopDisabled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Policy{HighThresholdPercent: 100, LowThresholdPercent: 80, MinAge: 2 * time.Minute},
			map[string]uint64{"pause": 10, "a": 10})
		f.setFs(1000, 0)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- f.m.Run(ctx) }()
		time.Sleep(time.Hour)
		synctest.Wait()
		cancel()
		<-done
		f.images.Lock()
		called := slices.Clone(f.images.Called)
		f.images.Unlock()
		if slices.Contains(called, "ImageFsInfo") || slices.Contains(called, "RemoveImage") {
			t.Errorf("calls with GC disabled include GC: %v", called)
		}
		if !slices.Contains(called, "ListImages") {
			t.Errorf("detection did not run: %v", called)
		}
	})
}

func TestMaxAgeRemovesRegardlessOfUsage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute, MaxAge: time.Hour},
			map[string]uint64{"pause": 10, "a": 10, "b": 10})
		f.m.detectOnce(ctx, time.Now())
		f.run(map[string]string{"c": "b"})
		time.Sleep(30 * time.Minute)
		if err := f.m.GarbageCollect(ctx, time.Now()); err != nil { // up 30m < max age: nothing
			t.Fatal(err)
		}
		f.run(nil)
		time.Sleep(31 * time.Minute)
		if err := f.m.GarbageCollect(ctx, time.Now()); err != nil { // up 61m: a (never used) goes, b used 31m ago stays
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"b", "pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining (-want +got):\n%s", diff)
		}
		if got := counter(t, f.m, "age"); got != 1 {
			t.Errorf("age removals = %v, want 1", got)
		}
	})
}

// As in the kubelet, the maximum age counts from the last use only: an image
// pulled after start and never used is removed by age at the first pass once GC
// has run longer than the maximum age, even within the minimum age.
func TestMaxAgeNeverUsedImage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 10 * time.Minute, MaxAge: time.Hour},
			map[string]uint64{"pause": 10, "b": 10})
		f.m.detectOnce(ctx, time.Now())
		f.run(map[string]string{"c": "b"})
		time.Sleep(61 * time.Minute)
		f.add("pulled", 10)
		if err := f.m.Detect(ctx, time.Now()); err != nil { // "pulled" detected now, never used
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if err := f.m.GarbageCollect(ctx, time.Now()); err != nil { // up 62m; "pulled" is 1m old, under the minimum age
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"b", "pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining (-want +got):\n%s", diff)
		}
		if got := counter(t, f.m, "age"); got != 1 {
			t.Errorf("age removals = %v, want 1", got)
		}
	})
}

func TestRegistererShared(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	deps := Deps{Images: apitest.NewFakeImageService(), InUse: ContainerImages(apitest.NewFakeRuntimeService()), Registerer: reg}
	for range 2 {
		if _, err := New(Config{Policy: DefaultPolicy()}, deps); err != nil {
			t.Fatalf("New with a shared registerer: %v", err)
		}
	}
}

// An exited container keeps its image, as in the kubelet; once container GC has
// removed the container, the image may go.
func TestExitedContainerKeepsItsImage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute},
			map[string]uint64{"pause": 50, "crashloop": 100, "old": 100})
		f.m.detectOnce(ctx, time.Now())
		f.run(map[string]string{"c": "crashloop"}, "c")
		f.setFs(1000, 0) // 100% used: free everything allowed
		if err := f.m.DeleteUnusedImages(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"crashloop", "pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining with the exited container (-want +got):\n%s", diff)
		}
		f.run(nil)
		time.Sleep(time.Second) // an image used at the free time is kept
		if err := f.m.DeleteUnusedImages(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"pause"}, f.remaining()); diff != "" {
			t.Errorf("remaining after the container is removed (-want +got):\n%s", diff)
		}
	})
}
