package eviction

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// clockStats is a StatsSource whose Summary has the node's memory, as set, and
// the working set of each pod still there, all stamped with the time now
// returns; it records when it was called, since start.
type clockStats struct {
	now       func() time.Time
	start     time.Time
	mu        sync.Mutex
	available string
	pods      map[string]string // pod name -> working set
	calls     []time.Duration   // since start
}

func (f *clockStats) Summary(context.Context) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.calls = append(f.calls, now.Sub(f.start))
	b := newSummary().memory(f.available, "7Gi")
	for _, name := range slices.Sorted(maps.Keys(f.pods)) {
		pod := newTestPod(name)
		b.pods(newPodStats(pod, podWorkingSet(f.pods[name]), ctrWorkingSet("app", f.pods[name])))
	}
	s := b.build()
	s.Node.Memory.Time = metav1.NewTime(now)
	return s, nil
}

func (f *clockStats) called() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// loopNode is a node under a hard memory threshold: a killed pod leaves the
// active pods and the stats, and is cleaned up once cleaned is set. Its time
// is time.Now (a synctest bubble's, for tests of Run) unless at is set (for
// tests that call Step themselves).
type loopNode struct {
	start   time.Time
	at      *time.Time
	stats   *clockStats
	m       *Manager
	cleaned atomic.Bool
	mu      sync.Mutex
	pods    []*v1.Pod       // guarded by mu
	kills   []time.Duration // guarded by mu; since start
}

func (n *loopNode) now() time.Time {
	if n.at != nil {
		return *n.at
	}
	return time.Now()
}

func newLoopNode(t *testing.T, cfg Config, available string, podMemory map[string]string, cleanup bool) *loopNode {
	t.Helper()
	n := &loopNode{start: time.Now()}
	n.stats = &clockStats{now: n.now, start: n.start, available: available, pods: podMemory}
	for _, name := range slices.Sorted(maps.Keys(podMemory)) {
		n.pods = append(n.pods, newTestPod(name, bestEffort()))
	}
	cfg.Thresholds = []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}
	deps := Deps{
		Stats: n.stats,
		Killer: nodeapi.PodKillerFunc(func(_ context.Context, req nodeapi.KillRequest) error {
			n.mu.Lock()
			n.kills = append(n.kills, n.now().Sub(n.start))
			n.pods = slices.DeleteFunc(n.pods, func(p *v1.Pod) bool { return p.Name == req.Pod.Name })
			n.mu.Unlock()
			n.stats.mu.Lock()
			delete(n.stats.pods, req.Pod.Name)
			n.stats.mu.Unlock()
			return nil
		}),
		ActivePods: func() []*v1.Pod { n.mu.Lock(); defer n.mu.Unlock(); return slices.Clone(n.pods) },
		Logger:     testLogger(t),
	}
	if cleanup {
		deps.PodCleanedUp = func(*v1.Pod) bool { return n.cleaned.Load() }
	}
	m, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	return n
}

// run starts Run in the test's synctest bubble and waits until its first pass
// is done; it stops Run at the end of the test and checks that it returned nil.
func (n *loopNode) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.m.Run(ctx) }()
	synctest.Wait()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
}

// after lets d of the bubble's time pass and waits until Run is idle.
func after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// wake calls Wake and waits until Run is idle again.
func (n *loopNode) wake() {
	n.m.Wake()
	synctest.Wait()
}

func (n *loopNode) killedAt() []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.kills)
}

// TestStepNextDue: Step returns when it is due again: the monitoring interval
// after a pass that evicted nobody; now after a pass that evicted, and then,
// in the wait for the evicted pods' cleanup, one poll later, cut to the
// wait's deadline; the next pass runs in the call that sees the pod cleaned up
// or the wait timed out.
func TestStepNextDue(t *testing.T) {
	t.Parallel()
	type call struct {
		at      time.Duration
		cleaned bool          // set before the call
		next    time.Duration // want
	}
	tests := []struct {
		name      string
		cfg       Config
		available string
		pods      map[string]string
		calls     []call
		passes    []time.Duration
		kills     []time.Duration
	}{
		{
			name: "no eviction: every monitoring interval", cfg: Config{MonitoringInterval: 10 * time.Second},
			available: "1Gi", pods: map[string]string{"a": "1Gi"},
			calls:  []call{{0, false, 10 * time.Second}, {10 * time.Second, false, 20 * time.Second}, {23 * time.Second, false, 33 * time.Second}},
			passes: []time.Duration{0, 10 * time.Second, 23 * time.Second},
		},
		{
			name: "cleaned up at the second poll", cfg: Config{},
			available: "50Mi", pods: map[string]string{"a": "2Gi", "b": "1Gi"},
			calls: []call{
				{0, false, 0}, // pass evicts a: call again at once
				{time.Second / 2, false, 1500 * time.Millisecond}, // the kill ended: the wait starts
				{1500 * time.Millisecond, false, 2500 * time.Millisecond},
				{2500 * time.Millisecond, true, 2500 * time.Millisecond}, // cleaned up: pass evicts b
				{2500 * time.Millisecond, false, 3500 * time.Millisecond},
				{3500 * time.Millisecond, false, 3500*time.Millisecond + DefaultMonitoringInterval}, // nobody left
			},
			passes: []time.Duration{0, 2500 * time.Millisecond, 3500 * time.Millisecond},
			kills:  []time.Duration{0, 2500 * time.Millisecond},
		},
		{
			name: "timeout between polls: the wait counts from the end of the kills", cfg: Config{PodCleanupTimeout: 2500 * time.Millisecond},
			available: "50Mi", pods: map[string]string{"a": "2Gi", "b": "1Gi"},
			calls: []call{
				{0, false, 0},
				{time.Second, false, 2 * time.Second},
				{2 * time.Second, false, 3 * time.Second},
				{3 * time.Second, false, 3500 * time.Millisecond},         // cut to the deadline
				{3500 * time.Millisecond, false, 3500 * time.Millisecond}, // timed out: pass evicts b
			},
			passes: []time.Duration{0, 3500 * time.Millisecond},
			kills:  []time.Duration{0, 3500 * time.Millisecond},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newLoopNode(t, tc.cfg, tc.available, tc.pods, true)
			for _, c := range tc.calls {
				at := n.start.Add(c.at)
				n.at = &at
				if c.cleaned {
					n.cleaned.Store(true)
				}
				if got := n.m.Step(t.Context(), at).Sub(n.start); got != c.next {
					t.Errorf("Step at %v: next due at %v, want %v", c.at, got, c.next)
				}
			}
			if diff := cmp.Diff(tc.passes, n.stats.called()); diff != "" {
				t.Errorf("passes at (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.kills, n.killedAt()); diff != "" {
				t.Errorf("kills at (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunMonitoringInterval: Run's first pass runs at once, then one pass per
// monitoring interval.
func TestRunMonitoringInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n := newLoopNode(t, Config{MonitoringInterval: 10 * time.Second}, "1Gi", map[string]string{"a": "1Gi"}, false)
		n.run(t)
		for _, d := range []time.Duration{9 * time.Second, time.Second, 10 * time.Second, 5 * time.Second} {
			after(d)
		}
		if diff := cmp.Diff([]time.Duration{0, 10 * time.Second, 20 * time.Second}, n.stats.called()); diff != "" {
			t.Errorf("passes at (-want +got):\n%s", diff)
		}
	})
}

// TestRunWaitsForCleanup: after a pass that evicts, Run polls the cleanup
// every second; the next pass runs in the wake-up that sees the pod cleaned up
// (or the wait time out), and without eviction Run goes back to the monitoring
// interval.
func TestRunWaitsForCleanup(t *testing.T) {
	t.Parallel()
	t.Run("cleaned up at the second poll", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			n := newLoopNode(t, Config{}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, true)
			n.run(t)           // 0s: pass evicts a
			after(time.Second) // 1s: a not cleaned up
			n.cleaned.Store(true)
			after(time.Second) // 2s: cleaned up; pass evicts b
			after(time.Second) // 3s: cleaned up; pass, nobody left
			after(DefaultMonitoringInterval)
			if diff := cmp.Diff([]time.Duration{0, 2 * time.Second, 3 * time.Second, 3*time.Second + DefaultMonitoringInterval}, n.stats.called()); diff != "" {
				t.Errorf("passes at (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]time.Duration{0, 2 * time.Second}, n.killedAt()); diff != "" {
				t.Errorf("kills at (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("no PodCleanedUp: next pass one poll later", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			n := newLoopNode(t, Config{}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, false)
			n.run(t)
			after(time.Second)
			after(time.Second)
			if diff := cmp.Diff([]time.Duration{0, time.Second, 2 * time.Second}, n.stats.called()); diff != "" {
				t.Errorf("passes at (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]time.Duration{0, time.Second}, n.killedAt()); diff != "" {
				t.Errorf("kills at (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("timeout between polls", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			n := newLoopNode(t, Config{PodCleanupTimeout: 2500 * time.Millisecond}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, true)
			n.run(t)
			after(2 * time.Second)
			if got := n.killedAt(); len(got) != 1 {
				t.Fatalf("kills at %v before the deadline, want one at 0", got)
			}
			after(500 * time.Millisecond) // the last poll is cut to the deadline: the wait times out, the pass evicts b
			if diff := cmp.Diff([]time.Duration{0, 2500 * time.Millisecond}, n.killedAt()); diff != "" {
				t.Errorf("kills at (-want +got):\n%s", diff)
			}
		})
	})
}

// recorded is one event a fakeRecorder got, or one kill.
type recorded struct {
	Object      string // "Pod ns/name", "Node name"; "kill ns/name" for a kill
	Annotations map[string]string
	Type        string
	Reason      string
	Message     string
	Kill        *nodeapi.KillRequest
}

// fakeRecorder records events and, through killer, kills, in call order.
type fakeRecorder struct {
	mu  sync.Mutex
	got []recorded
}

func (r *fakeRecorder) add(x recorded) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, x)
}

func objectOf(o runtime.Object) string {
	switch o := o.(type) {
	case *v1.Pod:
		return "Pod " + nodeapi.PodName(o)
	case *v1.ObjectReference:
		return fmt.Sprintf("%s %s (uid %s)", o.Kind, o.Name, o.UID)
	}
	return fmt.Sprintf("%T", o)
}

func (r *fakeRecorder) Event(o runtime.Object, eventtype, reason, message string) {
	r.add(recorded{Object: objectOf(o), Type: eventtype, Reason: reason, Message: message})
}

func (r *fakeRecorder) Eventf(o runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.add(recorded{Object: objectOf(o), Type: eventtype, Reason: reason, Message: fmt.Sprintf(messageFmt, args...)})
}

func (r *fakeRecorder) AnnotatedEventf(o runtime.Object, ann map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.add(recorded{Object: objectOf(o), Annotations: ann, Type: eventtype, Reason: reason, Message: fmt.Sprintf(messageFmt, args...)})
}

func (r *fakeRecorder) killer() nodeapi.PodKiller {
	return nodeapi.PodKillerFunc(func(_ context.Context, req nodeapi.KillRequest) error {
		r.add(recorded{Object: "kill " + nodeapi.PodName(req.Pod), Kill: &req})
		return nil
	})
}

// evictedStatus is the final status the kubelet records on a pod it evicts with
// message, spelled out rather than built with the code under test.
func evictedStatus(message string) v1.PodStatus {
	return v1.PodStatus{
		Phase:   v1.PodFailed,
		Reason:  "Evicted",
		Message: message,
		Conditions: []v1.PodCondition{{
			Type: "DisruptionTarget", Status: "True", Reason: "TerminationByKubelet", Message: message,
		}},
	}
}

// TestEvictionRecordsKubeletEventAndStatus checks what an eviction leaves behind,
// as the kubelet does it: the EvictionThresholdMet event on the node, then the
// Evicted event on the pod (annotated with the offending containers for a
// threshold, without annotations for a local-storage limit), then the kill with
// status Failed/Evicted, the message, a DisruptionTarget condition and the grace
// period. Decide, given the same node, plans the same kill requests.
func TestEvictionRecordsKubeletEventAndStatus(t *testing.T) {
	t.Parallel()
	hog := newTestPod("hog", withContainer("app", nil, nil), withGracePeriod(60))
	quick := newTestPod("quick", withContainer("app", nil, nil), withGracePeriod(7))
	scratch := newTestPod("scratch", withContainer("app", nil, nil), withEmptyDir("tmp", v1.StorageMediumDefault, "1Mi"))
	memMsg := func(available, usage string) string {
		return "The node was low on resource: memory. Threshold quantity: 100Mi, available: " + available + ". " +
			"Container app was using " + usage + ", request is 0, has larger consumption of memory. "
	}
	softMsg := "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. " +
		"Container app was using 3Gi, request is 0, has larger consumption of memory. "
	ann := func(usage string) map[string]string {
		return map[string]string{"offending_containers": "app", "offending_containers_usage": usage, "starved_resource": "memory"}
	}
	grace := func(s int64) *int64 { return &s }
	node := recorded{Object: "Node node-1 (uid node-1)", Type: "Warning", Reason: "EvictionThresholdMet", Message: "Attempting to reclaim memory"}
	storageMsg := `Usage of EmptyDir volume "tmp" exceeds the limit "1Mi". `
	tests := []struct {
		name      string
		cfg       Config
		pod       *v1.Pod
		available string
		stats     []statsOpt
		passes    []time.Duration // when the passes run; the last evicts
		want      []recorded
	}{
		{
			name: "hard threshold: 1s grace", cfg: Config{Thresholds: []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}},
			pod: hog, available: "50Mi", stats: []statsOpt{podWorkingSet("3Gi"), ctrWorkingSet("app", "3Gi")},
			passes: []time.Duration{0},
			want: []recorded{node,
				{Object: "Pod default/hog", Annotations: ann("3Gi"), Type: "Warning", Reason: "Evicted", Message: memMsg("50Mi", "3Gi")},
				{Object: "kill default/hog", Kill: &nodeapi.KillRequest{Pod: hog, Status: evictedStatus(memMsg("50Mi", "3Gi")), GracePeriodOverride: grace(1)}},
			},
		},
		{
			name: "soft threshold: evictionMaxPodGracePeriod below the pod's", pod: hog, available: "500Mi",
			cfg:   Config{Thresholds: []Threshold{graced(thrQ(SignalMemoryAvailable, "1Gi"), time.Minute)}, MaxPodGracePeriod: 20 * time.Second},
			stats: []statsOpt{podWorkingSet("3Gi"), ctrWorkingSet("app", "3Gi")}, passes: []time.Duration{0, time.Minute},
			want: []recorded{node,
				{Object: "Pod default/hog", Annotations: ann("3Gi"), Type: "Warning", Reason: "Evicted", Message: softMsg},
				{Object: "kill default/hog", Kill: &nodeapi.KillRequest{Pod: hog, Status: evictedStatus(softMsg), GracePeriodOverride: grace(20)}},
			},
		},
		{
			name: "soft threshold: the pod's terminationGracePeriodSeconds below the cap", pod: quick, available: "500Mi",
			cfg:   Config{Thresholds: []Threshold{graced(thrQ(SignalMemoryAvailable, "1Gi"), time.Minute)}, MaxPodGracePeriod: 20 * time.Second},
			stats: []statsOpt{podWorkingSet("3Gi"), ctrWorkingSet("app", "3Gi")}, passes: []time.Duration{0, time.Minute},
			want: []recorded{node,
				{Object: "Pod default/quick", Annotations: ann("3Gi"), Type: "Warning", Reason: "Evicted", Message: softMsg},
				{Object: "kill default/quick", Kill: &nodeapi.KillRequest{Pod: quick, Status: evictedStatus(softMsg), GracePeriodOverride: grace(7)}},
			},
		},
		{
			name: "local-storage limit: 1s grace, no annotations, no node event", pod: scratch, available: "4Gi",
			cfg:   Config{Thresholds: []Threshold{thrQ(SignalMemoryAvailable, "100Mi")}, LocalStorageCapacityIsolation: true},
			stats: []statsOpt{podWorkingSet("10Mi"), volumeUsage("tmp", "5Mi", 1)}, passes: []time.Duration{0},
			want: []recorded{
				{Object: "Pod default/scratch", Type: "Warning", Reason: "Evicted", Message: storageMsg},
				{Object: "kill default/scratch", Kill: &nodeapi.KillRequest{Pod: scratch, Status: evictedStatus(storageMsg), GracePeriodOverride: grace(1)}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := fixtureTime
			summary := func() *statsapi.Summary {
				s := newSummary().memory(tc.available, "4Gi").pods(newPodStats(tc.pod, tc.stats...)).build()
				s.Node.Memory.Time = metav1.NewTime(now)
				return s
			}
			rec := &fakeRecorder{}
			m, err := New(tc.cfg, Deps{
				Stats:      summaryFn(func(context.Context) (*statsapi.Summary, error) { return summary(), nil }),
				Killer:     rec.killer(),
				ActivePods: func() []*v1.Pod { return []*v1.Pod{tc.pod} },
				Recorder:   rec,
				NodeName:   "node-1",
				Logger:     testLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			var evicted []*v1.Pod
			for _, at := range tc.passes {
				now = fixtureTime.Add(at)
				evicted = m.Pass(t.Context(), now)
			}
			if diff := cmp.Diff([]*v1.Pod{tc.pod}, evicted); diff != "" {
				t.Errorf("evicted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, rec.got); diff != "" {
				t.Errorf("events and kills (-want +got):\n%s", diff)
			}

			// explain's Decide: the same core, every grace period taken as elapsed.
			d := Decide(tc.cfg, Snapshot{Pods: []*v1.Pod{tc.pod}, Summary: summary()}, nil, tc.cfg.LocalStorageCapacityIsolation)
			var planned []nodeapi.KillRequest
			for _, e := range d.Evictions {
				planned = append(planned, e.KillRequest())
			}
			if diff := cmp.Diff([]nodeapi.KillRequest{*tc.want[len(tc.want)-1].Kill}, planned); diff != "" {
				t.Errorf("Decide's kill requests (-want +got):\n%s", diff)
			}
		})
	}
}

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// TestWakeRunsPassAtOnce: Wake runs a pass at once, between timer wake-ups,
// and the monitoring interval counts from it; during a cleanup wait a wake
// checks the cleanup and passes only once the pod is cleaned up.
func TestWakeRunsPassAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("between passes", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			n := newLoopNode(t, Config{MonitoringInterval: 10 * time.Second}, "1Gi", map[string]string{"a": "1Gi"}, false)
			n.run(t)
			after(3 * time.Second)
			n.wake()
			after(9 * time.Second)
			after(time.Second)
			if diff := cmp.Diff([]time.Duration{0, 3 * time.Second, 13 * time.Second}, n.stats.called()); diff != "" {
				t.Errorf("passes at (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("during a cleanup wait", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			n := newLoopNode(t, Config{}, "50Mi", map[string]string{"a": "2Gi", "b": "1Gi"}, true)
			n.run(t) // evicts a
			after(300 * time.Millisecond)
			n.wake() // not cleaned up: no pass
			n.cleaned.Store(true)
			after(100 * time.Millisecond)
			n.wake() // cleaned up: the pass evicts b
			if diff := cmp.Diff([]time.Duration{0, 400 * time.Millisecond}, n.stats.called()); diff != "" {
				t.Errorf("passes at (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]time.Duration{0, 400 * time.Millisecond}, n.killedAt()); diff != "" {
				t.Errorf("kills at (-want +got):\n%s", diff)
			}
		})
	})
}
