package eviction

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// nodeState is what the fake stats source reports; tests change it between passes.
type nodeState struct {
	memAvailable, memWorkingSet uint64
	fsAvailable, fsCapacity     uint64
	imageFs                     *statsapi.FsStats // nil: same filesystem as nodefs
	podMemory                   map[string]uint64 // pod name -> working set
}

// fakeStats serves a Summary built from a mutable nodeState, stamped with the
// current (bubble) time.
type fakeStats struct {
	mu    sync.Mutex
	st    nodeState
	calls int
}

func (f *fakeStats) set(mut func(*nodeState)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mut(&f.st)
}

func (f *fakeStats) Summary(context.Context) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	now := metav1.NewTime(time.Now())
	u := func(v uint64) *uint64 { return &v }
	nodeFs := &statsapi.FsStats{Time: now, AvailableBytes: u(f.st.fsAvailable), CapacityBytes: u(f.st.fsCapacity),
		InodesFree: u(1e6), Inodes: u(2e6)}
	imageFs := nodeFs
	if f.st.imageFs != nil {
		c := *f.st.imageFs
		c.Time = now
		imageFs = &c
	}
	s := &statsapi.Summary{Node: statsapi.NodeStats{
		Memory:  &statsapi.MemoryStats{Time: now, AvailableBytes: u(f.st.memAvailable), WorkingSetBytes: u(f.st.memWorkingSet)},
		Fs:      nodeFs,
		Runtime: &statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: imageFs},
	}}
	for name, ws := range f.st.podMemory {
		s.Pods = append(s.Pods, statsapi.PodStats{
			PodRef: statsapi.PodReference{Name: name, Namespace: "default", UID: name},
			Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: u(ws)},
			Containers: []statsapi.ContainerStats{{Name: "app",
				Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: u(ws)},
				Rootfs: &statsapi.FsStats{Time: now, UsedBytes: u(ws / 10)},
				Logs:   &statsapi.FsStats{Time: now, UsedBytes: u(0)}}},
		})
	}
	return s, nil
}

type kill struct {
	Pod   string
	Grace time.Duration
	At    time.Duration // since the bubble's start
}

// fakeKiller records kills; onKill, if set, runs after recording.
type fakeKiller struct {
	mu     sync.Mutex
	start  time.Time
	kills  []kill
	onKill func(pod *v1.Pod)
}

func (k *fakeKiller) KillPod(_ context.Context, req nodeapi.KillRequest) error {
	k.mu.Lock()
	k.kills = append(k.kills, kill{Pod: req.Pod.Name, Grace: req.GracePeriod(), At: time.Since(k.start)})
	f := k.onKill
	k.mu.Unlock()
	if f != nil {
		f(req.Pod)
	}
	return nil
}

func (k *fakeKiller) got() []kill {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]kill(nil), k.kills...)
}

// gcFunc is a function-field fake for both GC interfaces.
type gcFunc func(ctx context.Context) error

func (f gcFunc) DeleteAllUnusedContainers(ctx context.Context, _ time.Time) error { return f(ctx) }
func (f gcFunc) DeleteUnusedImages(ctx context.Context, _ time.Time) error        { return f(ctx) }

func memPod(name string, request string, priority int32) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: v1.PodSpec{Priority: &priority, Containers: []v1.Container{{Name: "app"}}}}
	if request != "" {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse(request)}
	}
	return p
}

func mustThresholds(t *testing.T, c ThresholdConfig) []Threshold {
	t.Helper()
	ts, err := ParseThresholds(c)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

type harness struct {
	m      *Manager
	stats  *fakeStats
	killer *fakeKiller
	mu     sync.Mutex
	pods   []*v1.Pod // guarded by mu
}

// remove takes a killed pod off the node: out of the active pods and the stats.
func (h *harness) remove(p *v1.Pod) {
	h.mu.Lock()
	for i, x := range h.pods {
		if x == p {
			h.pods = append(h.pods[:i:i], h.pods[i+1:]...)
			break
		}
	}
	h.mu.Unlock()
	h.stats.set(func(s *nodeState) { delete(s.podMemory, p.Name) })
}

func newHarness(t *testing.T, cfg Config, st nodeState, pods []*v1.Pod, mod func(*Deps)) *harness {
	t.Helper()
	h := &harness{stats: &fakeStats{st: st}, killer: &fakeKiller{start: time.Now()}, pods: pods}
	deps := Deps{
		Stats: h.stats, Killer: h.killer,
		ActivePods: func() []*v1.Pod { h.mu.Lock(); defer h.mu.Unlock(); return append([]*v1.Pod(nil), h.pods...) },
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if mod != nil {
		mod(&deps)
	}
	m, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	h.killer.onKill = h.remove
	return h
}

const (
	gi = 1 << 30
	mi = 1 << 20
)

func TestSoftThresholdWaitsForGracePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{
			Thresholds: mustThresholds(t, ThresholdConfig{
				Soft: map[string]string{"memory.available": "1500Mi"}, SoftGracePeriod: map[string]string{"memory.available": "90s"},
			}),
			MaxPodGracePeriod: 60 * time.Second,
		}
		pods := []*v1.Pod{memPod("small", "1Gi", 0), memPod("hog", "100Mi", 0)}
		h := newHarness(t, cfg, nodeState{memAvailable: gi, memWorkingSet: 7 * gi, fsAvailable: 50 * gi, fsCapacity: 100 * gi,
			podMemory: map[string]uint64{"small": 500 * mi, "hog": 3 * gi}}, pods, nil)
		h.killer.onKill = func(p *v1.Pod) {
			h.remove(p) // its memory comes back: no further eviction
			h.stats.set(func(s *nodeState) { s.memAvailable = 4 * gi })
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- h.m.Run(ctx) }()

		synctest.Wait()
		if diff := cmp.Diff([]v1.NodeConditionType{v1.NodeMemoryPressure}, h.m.Conditions()); diff != "" {
			t.Errorf("conditions at once (-want +got):\n%s", diff)
		}
		time.Sleep(80 * time.Second)
		synctest.Wait()
		if got := h.killer.got(); len(got) != 0 {
			t.Fatalf("evicted before the grace period: %v", got)
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		want := []kill{{Pod: "hog", Grace: 60 * time.Second, At: 90 * time.Second}}
		if diff := cmp.Diff(want, h.killer.got()); diff != "" {
			t.Errorf("kills (-want +got):\n%s", diff)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestHardThresholdEvictsOnePodPerPassSkippingCritical(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Thresholds: mustThresholds(t, ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}
		static := memPod("static", "", 0)
		static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		pods := []*v1.Pod{memPod("a", "", 0), static, memPod("b", "", 0)}
		h := newHarness(t, cfg, nodeState{memAvailable: 50 * mi, memWorkingSet: 7 * gi, fsAvailable: 50 * gi, fsCapacity: 100 * gi,
			podMemory: map[string]uint64{"static": 4 * gi, "a": 2 * gi, "b": gi}}, pods, nil)
		h.killer.onKill = func(p *v1.Pod) {
			// The evicted pod leaves the node and its memory comes back, but not enough.
			h.remove(p)
			h.stats.set(func(s *nodeState) { s.memAvailable += 10 * mi })
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go h.m.Run(ctx)
		time.Sleep(25 * time.Second)
		synctest.Wait()
		// Pass 1 at 0s evicts a (static ranks first but is critical). With no
		// PodCleanedUp, a counts as cleaned up at the first 1s poll, as in the
		// kubelet, so pass 2 runs at 1s on fresh stats and evicts b. Then only
		// the static pod is left, and it stays.
		want := []kill{{Pod: "a", Grace: time.Second}, {Pod: "b", Grace: time.Second, At: time.Second}}
		if diff := cmp.Diff(want, h.killer.got()); diff != "" {
			t.Errorf("kills (-want +got):\n%s", diff)
		}
	})
}

func TestNodeLevelReclaimAvoidsEviction(t *testing.T) {
	for _, tc := range []struct {
		name      string
		imageFs   *statsapi.FsStats
		wantSteps []string
		wantKills int
	}{
		{name: "no image filesystem: containers then images, enough freed", wantSteps: []string{"containers", "images"}},
		{name: "dedicated image filesystem: nodefs pressure reclaims nothing", wantKills: 1,
			imageFs: &statsapi.FsStats{AvailableBytes: ptr(uint64(80 * gi)), CapacityBytes: ptr(uint64(100 * gi))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{Thresholds: mustThresholds(t, ThresholdConfig{Hard: map[string]string{"nodefs.available": "10%"}})}
				var steps []string
				var h *harness
				step := func(name string) gcFunc {
					return func(context.Context) error {
						steps = append(steps, name)
						h.stats.set(func(s *nodeState) { s.fsAvailable += 5 * gi })
						return nil
					}
				}
				h = newHarness(t, cfg, nodeState{memAvailable: 4 * gi, memWorkingSet: 4 * gi, fsAvailable: 8 * gi, fsCapacity: 100 * gi,
					imageFs: tc.imageFs, podMemory: map[string]uint64{"a": gi}},
					[]*v1.Pod{memPod("a", "", 0)}, func(d *Deps) { d.ContainerGC = step("containers"); d.ImageGC = step("images") })
				h.killer.onKill = func(p *v1.Pod) { h.remove(p); h.stats.set(func(s *nodeState) { s.fsAvailable = 50 * gi }) }
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				go h.m.Run(ctx)
				synctest.Wait()
				if diff := cmp.Diff(tc.wantSteps, steps); diff != "" {
					t.Errorf("reclaim steps (-want +got):\n%s", diff)
				}
				if got := len(h.killer.got()); got != tc.wantKills {
					t.Errorf("kills = %d, want %d", got, tc.wantKills)
				}
			})
		})
	}
}

func TestPressureTransitionPeriodAndMinReclaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{
			Thresholds: mustThresholds(t, ThresholdConfig{
				Hard:           map[string]string{"memory.available": "100Mi"},
				MinimumReclaim: map[string]string{"memory.available": "500Mi"},
			}),
			PressureTransitionPeriod: time.Minute,
		}
		h := newHarness(t, cfg, nodeState{memAvailable: 50 * mi, memWorkingSet: 7 * gi, fsAvailable: 50 * gi, fsCapacity: 100 * gi},
			nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go h.m.Run(ctx)
		synctest.Wait()
		if !h.m.Status().HasCondition(v1.NodeMemoryPressure) {
			t.Fatal("no MemoryPressure under the threshold")
		}
		// Above the threshold but below threshold + minimum reclaim: still met.
		h.stats.set(func(s *nodeState) { s.memAvailable = 300 * mi })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := len(h.m.Status().ThresholdsMet); got != 1 {
			t.Fatalf("thresholds met at 300Mi with 500Mi minimum reclaim = %d, want 1", got)
		}
		// Past threshold + minimum reclaim: no longer met, but the condition stays
		// for the transition period after it was last observed (at 10s).
		h.stats.set(func(s *nodeState) { s.memAvailable = 700 * mi })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := len(h.m.Status().ThresholdsMet); got != 0 {
			t.Fatalf("thresholds met at 700Mi = %d, want 0", got)
		}
		time.Sleep(40 * time.Second) // 60s: 50s after the last observation
		synctest.Wait()
		if !h.m.Status().HasCondition(v1.NodeMemoryPressure) {
			t.Fatal("MemoryPressure cleared before the transition period")
		}
		time.Sleep(10 * time.Second) // 70s: 60s after
		synctest.Wait()
		if h.m.Status().HasCondition(v1.NodeMemoryPressure) {
			t.Fatal("MemoryPressure still set after the transition period")
		}
	})
}

func TestWaitsForCleanupBeforeNextPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Thresholds: mustThresholds(t, ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}
		var mu sync.Mutex
		cleaned := false
		h := newHarness(t, cfg, nodeState{memAvailable: 50 * mi, memWorkingSet: 7 * gi, fsAvailable: 50 * gi, fsCapacity: 100 * gi,
			podMemory: map[string]uint64{"a": 2 * gi, "b": gi}},
			[]*v1.Pod{memPod("a", "", 0), memPod("b", "", 0)},
			func(d *Deps) {
				d.PodCleanedUp = func(*v1.Pod) bool { mu.Lock(); defer mu.Unlock(); return cleaned }
			})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go h.m.Run(ctx)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := len(h.killer.got()); got != 1 {
			t.Fatalf("kills while waiting for cleanup = %d, want 1", got)
		}
		mu.Lock()
		cleaned = true
		mu.Unlock()
		time.Sleep(1500 * time.Millisecond) // the next 1s poll sees the cleanup
		synctest.Wait()
		want := []kill{{Pod: "a", Grace: time.Second}, {Pod: "b", Grace: time.Second, At: 6 * time.Second}}
		if diff := cmp.Diff(want, h.killer.got()); diff != "" {
			t.Errorf("kills (-want +got):\n%s", diff)
		}
	})
}

func TestCleanupWaitTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{Thresholds: mustThresholds(t, ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}
		h := newHarness(t, cfg, nodeState{memAvailable: 50 * mi, memWorkingSet: 7 * gi, fsAvailable: 50 * gi, fsCapacity: 100 * gi,
			podMemory: map[string]uint64{"a": 2 * gi, "b": gi}},
			[]*v1.Pod{memPod("a", "", 0), memPod("b", "", 0)},
			func(d *Deps) { d.PodCleanedUp = func(*v1.Pod) bool { return false } })
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go h.m.Run(ctx)
		time.Sleep(31 * time.Second)
		synctest.Wait()
		got := h.killer.got()
		if len(got) != 2 || got[1].At != 30*time.Second {
			t.Fatalf("kills = %v, want a second pass right after the 30s cleanup timeout", got)
		}
	})
}

func TestRunReturnsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{}, nodeState{memAvailable: gi, memWorkingSet: gi, fsAvailable: gi, fsCapacity: 2 * gi}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- h.m.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		h.stats.mu.Lock()
		calls := h.stats.calls
		h.stats.mu.Unlock()
		if calls != 7 { // at 0s, 10s, ..., 60s
			t.Errorf("summary calls in a minute = %d, want 7", calls)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestNewRejectsMissingDeps(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}, Deps{}); err == nil {
		t.Fatal("New without deps succeeded")
	}
	if _, err := New(Config{MonitoringInterval: -time.Second}, Deps{Stats: &fakeStats{}, Killer: &fakeKiller{}, ActivePods: func() []*v1.Pod { return nil }}); err == nil {
		t.Fatal("New with a negative interval succeeded")
	}
}

func ptr[T any](v T) *T { return &v }

func TestEvictionsMetric(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		cfg := Config{Thresholds: mustThresholds(t, ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}
		h := newHarness(t, cfg, nodeState{memAvailable: 50 * mi, memWorkingSet: 7 * gi, fsAvailable: 50 * gi, fsCapacity: 100 * gi,
			podMemory: map[string]uint64{"a": 2 * gi}}, []*v1.Pod{memPod("a", "", 0)}, func(d *Deps) { d.Registerer = reg })
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go h.m.Run(ctx)
		synctest.Wait()
		want := `
# HELP kubelet_evictions Cumulative number of pod evictions by eviction signal.
# TYPE kubelet_evictions counter
kubelet_evictions{eviction_signal="memory.available"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_evictions"); err != nil {
			t.Error(err)
		}
	})
}

// nodeStats is fakeStats that also samples the node alone (NodeStatsSource).
type nodeStats struct {
	*fakeStats
	nodeCalls int // guarded by fakeStats.mu
}

func (f *nodeStats) NodeSummary(ctx context.Context) (*statsapi.Summary, error) {
	s, err := f.Summary(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls--
	f.nodeCalls++
	s.Pods = nil
	return s, err
}

// With a NodeStatsSource, a pass reads the pods' stats only to rank pods
// for a threshold or to check local-storage limits that some pod has; the
// evictions are the same as with the full Summary.
func TestPodStatsOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	withEphemeral := memPod("limited", "", 0)
	withEphemeral.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Mi")}
	withSizeLimit := memPod("sized", "", 0)
	withSizeLimit.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: new(resource.MustParse("1Gi"))}}}}
	hard := mustThresholds(t, ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})
	for _, tc := range []struct {
		name         string
		thresholds   []Threshold
		localStorage bool
		pods         []*v1.Pod
		memAvailable uint64
		fsAvailable  uint64 // 50 Gi when 0
		reclaim      bool   // node-level reclaim frees 45 Gi of nodefs
		wantNode     int    // NodeSummaries per pass; 1 when 0
		wantSummary  int    // full Summaries per pass
		wantKills    []string
	}{
		{name: "no pressure, no limits", thresholds: hard, localStorage: true,
			pods: []*v1.Pod{memPod("a", "", 0)}, memAvailable: gi},
		{name: "no pressure, an ephemeral-storage limit", thresholds: hard, localStorage: true,
			pods: []*v1.Pod{memPod("a", "", 0), withEphemeral}, memAvailable: gi, wantSummary: 1, wantKills: []string{"limited"}},
		{name: "no pressure, an emptyDir sizeLimit", thresholds: hard, localStorage: true,
			pods: []*v1.Pod{memPod("a", "", 0), withSizeLimit}, memAvailable: gi, wantSummary: 1},
		{name: "limits without local-storage isolation", thresholds: hard,
			pods: []*v1.Pod{withEphemeral, withSizeLimit}, memAvailable: gi},
		{name: "memory pressure", thresholds: hard, localStorage: true,
			pods: []*v1.Pod{memPod("a", "", 0), memPod("hog", "", 0)}, memAvailable: 50 * mi, wantSummary: 1, wantKills: []string{"hog"}},
		{name: "disk pressure, node-level reclaim frees enough", thresholds: mustThresholds(t, ThresholdConfig{Hard: map[string]string{"nodefs.available": "10%"}}),
			pods: []*v1.Pod{memPod("a", "", 0)}, memAvailable: gi, fsAvailable: 5 * gi, reclaim: true, wantNode: 2, wantSummary: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem := map[string]uint64{"a": mi, "hog": gi, "limited": 100 * mi, "sized": mi}
			fs := tc.fsAvailable
			if fs == 0 {
				fs = 50 * gi
			}
			var h *harness
			h = newHarness(t, Config{Thresholds: tc.thresholds, LocalStorageCapacityIsolation: tc.localStorage},
				nodeState{memAvailable: tc.memAvailable, memWorkingSet: 7 * gi, fsAvailable: fs, fsCapacity: 100 * gi, podMemory: mem},
				tc.pods, func(d *Deps) {
					if tc.reclaim {
						d.ContainerGC = gcFunc(func(context.Context) error {
							h.stats.set(func(s *nodeState) { s.fsAvailable += 45 * gi })
							return nil
						})
					}
				})
			src := &nodeStats{fakeStats: h.stats}
			h.m.deps.Stats = src
			var kills []string
			for _, p := range h.m.Pass(t.Context(), time.Now()) {
				kills = append(kills, p.Name)
			}
			if diff := cmp.Diff(tc.wantKills, kills); diff != "" {
				t.Errorf("evicted (-want +got):\n%s", diff)
			}
			if wantNode := max(tc.wantNode, 1); src.nodeCalls != wantNode || src.calls != tc.wantSummary {
				t.Errorf("NodeSummary called %d times, Summary %d; want %d and %d", src.nodeCalls, src.calls, wantNode, tc.wantSummary)
			}
		})
	}
}
